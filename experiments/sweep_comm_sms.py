"""SMs given to the all-to-all kernels (4 to 40 of the H800's 132) x schedule for DeepSeek-V3 on the
2,048-H800 fabric (representative pipeline, balanced routing, kernels ``deepep``): the trade-off
DeepSeek tuned. Fewer SMs slow the all-to-all (each GPU's kernel moves at most comm_sms x 10.5 GB/s
per direction, sim/training/comm/kernels.py); more SMs stretch the compute that runs beside it
(132 / (132 - comm_sms)). ``--scenario`` varies another scenario.

Writes ``results/sweep_comm_sms.csv``: comm_sms, schedule (config), then step_time_s (s),
tokens_per_s, mfu, exposed_comm_s (s per rank, mean), comm_hidden_fraction, a2a_dispatch_ms,
a2a_combine_ms (ms per layer), and the rest of a step's summary; status, error, wall_s (s), sim_code."""
from __future__ import annotations

from experiments.common import sweep_main
from sim.sweep import grid

SMS = (4, 8, 12, 16, 20, 24, 32, 40)
SCHEDULES = ("1f1b", "dualpipe", "dualpipev")


def point(p: dict) -> dict:
    from sim.training.model.specs import load_scenario
    from sim.training.step import simulate_step
    run = load_scenario(p.get("scenario", "deepseek-v3"), comm_sms=int(p["comm_sms"]), schedule=p["schedule"])
    row = simulate_step(run).summary()
    for key in ("schedule", "mode"):
        row.pop(key)
    return row


def points() -> list[dict]:
    return grid(comm_sms=SMS, schedule=SCHEDULES)


if __name__ == "__main__":
    raise SystemExit(sweep_main("sweep_comm_sms", point, points, __doc__, scenario="deepseek-v3"))
