"""Bubble fraction against micro-batches M for every schedule at P = 8 and 16 (equal per-rank
costs F = I = W, no communication; interleaved and combined 1F1B at 2 model chunks per rank).

Writes ``results/bubble_vs_microbatches.csv``: pp, microbatches, schedule (config), then
makespan (cost units), bubble_fraction, mean_utilization, peak_activations_mb (max over ranks,
micro-batches of a 1F1B stage), parameter_copies; status, error, wall_s (s)."""
from __future__ import annotations

from experiments.common import sweep_main
from sim.schedules import STANDALONE, takes_chunks
from sim.sweep import grid

MICROBATCHES = (16, 24, 32, 48, 64, 96, 128)


def point(p: dict) -> dict:
    from sim.pipeline import simulate_pipeline
    chunks = 2 if takes_chunks(p["schedule"], int(p["pp"])) else None      # the chunked ones at v = 2
    m = simulate_pipeline(p["schedule"], int(p["pp"]), int(p["microbatches"]), chunks, cost_per="rank").metrics
    return {"makespan": m.makespan, "bubble_fraction": m.bubble_fraction,
            "mean_utilization": m.mean_utilization,
            "peak_activations_mb": max(r.peak_activations_mb for r in m.ranks),
            "parameter_copies": max(r.parameter_copies for r in m.ranks)}


def points() -> list[dict]:
    return grid(pp=(8, 16), microbatches=MICROBATCHES, schedule=STANDALONE)


if __name__ == "__main__":
    raise SystemExit(sweep_main("bubble_vs_microbatches", point, points, __doc__))
