"""EP size 8 to 256 x schedule for a scenario (DeepSeek-V3 on the 2,048-H800 fabric by default,
``--scenario`` for another; representative pipeline, balanced routing). Only EP changes: PP, DP,
micro-batches and the batch are the scenario's, so an EP that does not divide the scenario's TP x CP x
DP GPUs of a stage (EP 256 at DP 128) or its routed experts is skipped with a note, not run in
another layout.

Writes ``results/sweep_ep.csv``: scenario, ep, schedule (config), then pp, dp, microbatches, step_time_s (s),
tokens_per_s, mfu, compute_comm_ratio, exposed_comm_s (s per rank, mean), comm_hidden_fraction,
mean_utilization, bubble_share, exposed_comm_share (shares of rank-time), max_memory_gb (GB), fits_hbm,
a2a_dispatch_ms, a2a_combine_ms (ms per layer); status, error, wall_s (s), sim_code."""
from __future__ import annotations

from experiments.common import sweep_main
from sim.sweep import grid
from sim.training.step import COMPARED_SCHEDULES

EPS = (8, 16, 32, 64, 128, 256)


def point(p: dict) -> dict:
    from sim.training.model.specs import load_scenario
    from sim.training.step import simulate_step
    run = load_scenario(p.get("scenario", "deepseek-v3"), ep=int(p["ep"]), schedule=p["schedule"])
    row = simulate_step(run).summary()
    for key in ("schedule", "ep", "mode"):
        row.pop(key)
    return row


def skip(base, p: dict) -> str | None:
    """Why EP ``p["ep"]`` cannot run on scenario ``base`` (a RunSpec), or ``None``."""
    from sim.training.model.specs import load_model
    ep, stage_gpus, experts = int(p["ep"]), base.tp * base.cp * base.dp, load_model(base.model).routed_experts
    if stage_gpus % ep:
        return f"EP {ep} does not divide the {stage_gpus} GPUs of a stage (TP x CP x DP) of {p['scenario']}"
    if experts % ep:
        return f"EP {ep} does not divide the {experts} routed experts of {p['scenario']}"
    return None


def points() -> list[dict]:
    return grid(ep=EPS, schedule=COMPARED_SCHEDULES)


if __name__ == "__main__":
    raise SystemExit(sweep_main("sweep_ep", point, points, __doc__, scenario="deepseek-v3", skip=skip))
