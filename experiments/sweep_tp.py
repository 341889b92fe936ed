"""TP x PP for a scenario at its GPU count (Llama 3 70B on 64 H100 in Megatron-Bridge's layout
by default, ``--scenario`` for another): TP 1, 2, 4, 8 (with the scenario's sequence parallelism;
always for an MoE model, as Megatron-Core requires, its EP folded over TP) and PP 2, 4, 8, 16, DP = GPUs / (TP x PP), micro-batches = the scenario's global batch / DP. A
layout that does not divide the GPUs or the batch, or whose schedule cannot split the layers, is an
error row saying so. Representative pipeline; memory is reported, not enforced (hollow points in
the figure do not fit HBM).

Writes ``results/sweep_tp.csv``: scenario, tp, pp (config), then dp, microbatches, step_time_s (s),
tokens_per_s, mfu, mean_tp_comm_s (s per rank: TP collectives, exposed), mean_bubble_s,
mean_compute_s, mean_recompute_s (s per rank), max_memory_gb (GB), fits_hbm; status, error, wall_s
(s), sim_code."""
from __future__ import annotations

from experiments.common import sweep_main
from sim.sweep import grid

TPS = (1, 2, 4, 8)
PPS = (2, 4, 8, 16)
COLUMNS = ("dp", "microbatches", "step_time_s", "tokens_per_s", "mfu", "mean_tp_comm_s", "mean_bubble_s",
           "mean_compute_s", "mean_recompute_s", "max_memory_gb", "fits_hbm", "sequence_parallel", "schedule_run")


def layout(base, tp: int, pp: int) -> dict:
    """The fields of ``base`` (a RunSpec) at TP ``tp`` and PP ``pp`` with its GPUs and global batch."""
    from sim.checks import InputError
    gpus, sequences = base.gpus, base.dp * base.microbatches * base.microbatch_size
    if gpus % (tp * pp * base.cp):
        raise InputError(f"TP {tp} x CP {base.cp} x PP {pp} does not divide the scenario's {gpus} GPUs")
    dp = gpus // (tp * pp * base.cp)
    if sequences % (dp * base.microbatch_size):
        raise InputError(f"the global batch of {sequences} sequences does not split over DP {dp}")
    from sim.training.model.specs import load_model
    sp = base.sequence_parallel or load_model(base.model).is_moe      # Megatron-Core: MoE with TP needs SP
    return {"tp": tp, "pp": pp, "dp": dp, "microbatches": sequences // (dp * base.microbatch_size),
            "sequence_parallel": sp and tp > 1}


def point(p: dict) -> dict:
    from sim.training.model.specs import load_scenario
    from sim.training.step import simulate_step
    base = load_scenario(p.get("scenario", "llama3-70b"))
    run = base.with_(**layout(base, int(p["tp"]), int(p["pp"])))
    summary = simulate_step(run).summary()
    row = {k: summary[k] for k in COLUMNS if k in summary}
    row["schedule_run"] = run.schedule
    return row


def points() -> list[dict]:
    return grid(tp=TPS, pp=PPS)


if __name__ == "__main__":
    raise SystemExit(sweep_main("sweep_tp", point, points, __doc__, scenario="llama3-70b"))
