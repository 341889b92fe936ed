"""Stragglers and faults x schedule for DeepSeek-V3 on the 2,048-H800 fabric (every rank simulated,
balanced routing, measured communication): kernel-time jitter of increasing coefficient of
variation, one slow GPU of increasing slowdown (GPU 5: pipeline rank 0, which holds both ends of
the model under DualPipe; or GPU 1925: rank 15, which holds the output heads, 1F1B's busiest), a
failed NIC (node 1's NIC 0: GPU 8's traffic reroutes over NVLink to
another GPU's NIC) and a spine at half bandwidth (plane 0's spine 0). ``fault_size`` 0 is the
fault-free step of the same mode; the figure and docs/model.md take each fault's cost as the
step-time delta against it. ``--scenario`` varies another scenario (the slow GPUs are then replica 5
of its first and last rank; the link faults name node 1's NIC 0 and plane 0's spine 0 of a fat tree).

Writes ``results/sweep_faults.csv``: fault (jitter, slow_gpu, slow_gpu_last, failed_nic, degraded_spine),
fault_size (cv, slowdown factor, or 1 for a link fault), schedule (config), then step_time_s (s),
tokens_per_s, exposed_comm_s (s per rank, mean), faults (described), and the rest of a step's
summary; status, error, wall_s (s), sim_code."""
from __future__ import annotations

from experiments.common import sweep_main

SCHEDULES = ("1f1b", "dualpipe", "dualpipev")
FAULTS = {"jitter": (0.02, 0.05, 0.10), "slow_gpu": (1.1, 1.2, 1.5), "slow_gpu_last": (1.1, 1.2, 1.5),
          "failed_nic": (1,), "degraded_spine": (1,)}


def faults_of(fault: str, size: float, pp: int = 16, dp: int = 128) -> dict | None:
    """The faults of one point; the slow GPUs are replica 5 (or the last, at DP <= 5) of the first
    and of the last pipeline rank of a PP x DP layout (GPU ``rank * dp + replica``)."""
    if size == 0:
        return None
    replica = min(5, dp - 1)
    return {"jitter": {"jitter_cv": size, "seed": 0}, "slow_gpu": {"slow_gpus": {replica: size}},
            "slow_gpu_last": {"slow_gpus": {(pp - 1) * dp + replica: size}},
            "failed_nic": {"links": {"node:n1/nic0": 0.0}},
            "degraded_spine": {"links": {"node:p0/spine0": 0.5}}}[fault]


def point(p: dict) -> dict:
    from sim.training.model.specs import load_scenario
    from sim.training.step import simulate_step
    base = load_scenario(p.get("scenario", "deepseek-v3"), schedule=p["schedule"])
    run = base.with_(faults=faults_of(p["fault"], float(p["fault_size"]), base.pp, base.dp))
    row = simulate_step(run, mode="full").summary()
    for key in ("schedule", "mode", "fault_cost_s"):
        row.pop(key)
    return row


def points() -> list[dict]:
    out = [{"fault": "none", "fault_size": 0.0, "schedule": s} for s in SCHEDULES]
    out += [{"fault": f, "fault_size": float(x), "schedule": s} for f, sizes in FAULTS.items() for x in sizes
            for s in SCHEDULES]
    return out


if __name__ == "__main__":
    raise SystemExit(sweep_main("sweep_faults", point, points, __doc__, scenario="deepseek-v3"))
