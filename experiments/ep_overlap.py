"""Expert-parallel overlap as Megatron-Bridge measured it, beside the simulator's.

Megatron-Bridge published a controlled benchmark of Megatron-Core's expert-parallel overlap
(``overlap_moe_expert_parallel_comm``): Qwen3-30B-A3B on 16 H100 at EP 16, BF16, one 4,096-token
sequence a micro-batch, 64 micro-batches a step, with the overlap off and on and nothing else
changed, and a matched Nsight Systems comparison of rank 0 (``validation/ep_overlap_nsight.csv``,
transcribed; source: ``validation/sources.yaml``, ``megatron-bridge-ep-overlap``). The suite scores
the two step times (``validation/runs.csv``); this script sets the profile's breakdown beside the
simulated one (first principles, the suite's scenario of each row), per case:

- ``step_s``: seconds a step;
- ``comm_s``: the communication kernels' time in the step (measured: their time beside GEMMs and
  attention over the share of their time that was, both as printed; simulated: rank 0's all-to-all
  kernels, peer waits included);
- ``all_to_all_ms``: ``comm_s`` over the step's all-to-alls (4 a micro-batch and MoE layer: dispatch
  and combine, forward and backward; the measured figure also carries the few data-parallel
  collectives of the step);
- ``comm_beside_compute_s``: communication time beside computation (measured: beside GEMMs and
  attention only; simulated: hidden behind any compute part);
- ``comm_exposed_s``: ``comm_s`` less that (measured: an upper bound, some of it may have run beside
  memory-bound kernels);
- ``compute_s``: the computation's time (measured, a lower bound: the GPU's busy time less the
  communication kernels' time alone; simulated: rank 0's compute and recomputation, stretched where
  it ran beside a communication kernel);
- ``gpu_active_s``: the union of the GPU's busy intervals (simulated: computation plus exposed
  communication, the data-parallel sync and the optimizer).

``results/ep_overlap.csv`` holds one row per case and quantity (``measured``, ``simulated``,
``ratio`` = measured / simulated). A few seconds on 2 cores.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import pandas as pd

NSIGHT = Path(__file__).resolve().parent.parent / "validation" / "ep_overlap_nsight.csv"
A2A_PER_LAYER = 4             # dispatch and combine, forward and backward, per micro-batch and MoE layer
QUANTITIES = ("step_s", "comm_s", "all_to_all_ms", "comm_beside_compute_s", "comm_exposed_s", "compute_s",
              "gpu_active_s")


COLUMNS = ("case", "run_id", "step_s", "kernels", "comm_beside_compute_ms", "comm_beside_compute_pct", "gpu_active_s")


def read_nsight(path: Path = NSIGHT) -> list[dict]:
    """The transcribed profile, one dict per case with its numbers as floats; a missing column, or a
    figure that is not a positive number (a share over 100), is one ``ValidationDataError`` naming
    the file, the row and the field."""
    from validation.suite import ValidationDataError
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    missing = [c for c in COLUMNS if not rows or c not in rows[0]]
    if missing:
        raise ValidationDataError(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}")
    out = []
    for n, row in enumerate(rows, start=1):
        case = {"case": row["case"], "run_id": row["run_id"]}
        for key in COLUMNS[2:]:
            try:
                case[key] = float(row[key])
            except (TypeError, ValueError):
                case[key] = float("nan")
            if not case[key] > 0 or (key.endswith("_pct") and case[key] > 100):
                raise ValidationDataError(f"{path}: row {n} ({row['case']}): {key} must be a positive number"
                                          f"{' up to 100' if key.endswith('_pct') else ''}, got {row[key]!r}")
        out.append(case)
    return out


def measured_breakdown(row: dict, all_to_alls: int) -> dict[str, float]:
    """The profile's quantities (see the module) from one case's transcribed figures."""
    beside = row["comm_beside_compute_ms"] / 1e3
    comm = beside / (row["comm_beside_compute_pct"] / 100)
    return {"step_s": row["step_s"], "comm_s": comm, "all_to_all_ms": 1e3 * comm / all_to_alls,
            "comm_beside_compute_s": beside, "comm_exposed_s": comm - beside,
            "compute_s": row["gpu_active_s"] - (comm - beside), "gpu_active_s": row["gpu_active_s"]}


def simulated_breakdown(result, all_to_alls: int) -> dict[str, float]:
    """The same quantities from a simulated step (:class:`sim.training.step.StepResult`), rank 0."""
    r = result.ranks[0]
    compute = r.compute_s + r.recompute_s
    return {"step_s": result.step_time_s, "comm_s": r.comm_s, "all_to_all_ms": 1e3 * r.comm_s / all_to_alls,
            "comm_beside_compute_s": r.comm_s - r.exposed_comm_s, "comm_exposed_s": r.exposed_comm_s,
            "compute_s": compute, "gpu_active_s": compute + r.exposed_comm_s + r.dp_sync_s + r.optimizer_s}


def compare(nsight: list[dict]) -> pd.DataFrame:
    """One row per case and quantity: measured, simulated and their ratio."""
    from sim.training.step import MoEStep
    from validation.predict import scenario_of
    from validation.suite import ValidationDataError, load_runs
    runs = {r.id: r for r in load_runs()}
    rows = []
    for case in nsight:
        if case["run_id"] not in runs:
            raise ValidationDataError(f"{NSIGHT.name}: case {case['case']}: run_id {case['run_id']!r} is not a run of "
                                      f"validation/runs.csv")
        scenario = scenario_of(runs[case["run_id"]])
        moe_layers = scenario.model.layers - scenario.model.dense_layers
        all_to_alls = A2A_PER_LAYER * moe_layers * scenario.run.microbatches
        measured = measured_breakdown(case, all_to_alls)
        simulated = simulated_breakdown(MoEStep(scenario).simulate(), all_to_alls)
        rows += [{"case": case["case"], "quantity": q, "measured": measured[q], "simulated": simulated[q],
                  "ratio": measured[q] / simulated[q] if simulated[q] else float("nan")} for q in QUANTITIES]
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    from sim.cli import guarded

    def call() -> int:
        parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--out", default="results", help="folder for ep_overlap.csv (default: results)")
        parser.add_argument("--force", action="store_true", help="replace an output file this tool did not write")
        args = parser.parse_args(argv)
        from sim.io import overwriting, write_csv_atomic
        table = compare(read_nsight())
        with overwriting(args.force):
            path = write_csv_atomic(table, Path(args.out) / "ep_overlap.csv")
        wide = table.pivot(index="quantity", columns="case", values=["measured", "simulated"])
        wide = wide.reindex(list(QUANTITIES))
        wide.columns = [f"{case} {kind}" for kind, case in wide.columns]
        wide = wide[[f"{c} {k}" for c in ("off", "on") for k in ("measured", "simulated")]]
        print("Qwen3-30B-A3B on 16 H100, EP 16, expert-parallel overlap off and on: Megatron-Bridge's profile "
              "of rank 0 against the simulator (first principles)")
        print(wide.to_string(float_format=lambda v: f"{v:.3f}"))
        print(f"wrote {path}")
        return 0

    return guarded(call)


if __name__ == "__main__":
    sys.exit(main())
