"""The five exercises of the DualPipe lesson, answered by simulation.

1. P=8, M=16: DualPipe against 1F1B. The utilization gap with equal costs and no communication,
   and, on the DeepSeek-V3 model (PP8 x DP256, EP64, H800 fabric), the GPU-hours each needs per
   million training tokens and what DualPipe recovers.
2. The P=4, M=8 DualPipe table: every unit time slot with micro-batch and direction
   (``results/lesson_dualpipe_p4_m8_table.csv``), and the first slot where no rank idles.
3. The overlap window of the dispatch all-to-all inside the forward half of an F&B unit
   (DeepSeek-V3, DualPipe, a middle rank): how long DISPATCH(F) takes and how much of it the
   compute stream covers.
4. DualPipe's 2x parameters: extra weights + gradients per rank for a dense 70B at P=8 and for the
   671B MoE at P=16, against the rank's whole memory, and why it is small for the MoE.
5. DualPipe against Chimera on the same cluster (DeepSeek-V3, PP16, M=128).

Writes ``results/lesson_exercises.csv``: exercise, quantity, value, unit, note.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.common import script_main
from sim.io import write_csv_atomic
from sim.pipeline import simulate_pipeline
from sim.textgrid import op_label
from sim.training.costs.streams import COMPUTE
from sim.training.model.specs import load_scenario
from sim.training.reports.report import fb_unit_trace
from sim.training.scenario import Scenario
from sim.training.step import simulate_step

EXERCISES = {
    1: "P=8, M=16: DualPipe vs 1F1B utilization, as GPU-hours freed per million tokens",
    2: "draw DualPipe for P=4, M=8; find the first slot after which the bubble is gone for good",
    3: "the window in which the dispatch all-to-all of a DualPipe forward chunk is hidden, and by what",
    4: "the cost of DualPipe's doubled parameters for a dense 70B at P=8 and the 671B MoE at P=16",
    5: "DualPipe vs Chimera: what DualPipe adds",
}


def gpu_hours_per_million_tokens(res) -> float:
    tokens = res.run.dp * res.run.microbatches * res.run.tokens_per_microbatch
    return res.run.gpus * res.step_time_s / 3600 / (tokens / 1e6)


def exercise_1(rows: list) -> None:
    one = simulate_pipeline("1f1b", 8, 16).metrics
    dual = simulate_pipeline("dualpipe", 8, 16).metrics
    u1, u2 = one.mean_utilization, dual.mean_utilization
    rows.append((1, "utilization 1f1b (equal costs, no comm)", u1, "fraction", "P=8, M=16"))
    rows.append((1, "utilization dualpipe (equal costs, no comm)", u2, "fraction", "P=8, M=16"))
    runs = {s: simulate_step(load_scenario("deepseek-v3", pp=8, dp=256, microbatches=16, schedule=s))
            for s in ("1f1b", "dualpipe")}
    h1, h2 = (gpu_hours_per_million_tokens(runs[s]) for s in ("1f1b", "dualpipe"))
    rows.append((1, "GPU-hours per million tokens, 1f1b", h1, "GPU-h", "DeepSeek-V3 PP8 x DP256, EP64, M=16"))
    rows.append((1, "GPU-hours per million tokens, dualpipe", h2, "GPU-h", "same"))
    rows.append((1, "GPU-hours recovered per million tokens", h1 - h2, "GPU-h",
                 f"{100 * (h1 - h2) / h1:.0f}% of 1f1b's"))


def exercise_2(rows: list, out: Path) -> None:
    run = simulate_pipeline("dualpipe", 4, 8)
    span = int(run.metrics.makespan)
    table = []
    busy = [[False] * span for _ in range(4)]
    for rank, kind, mb, stage, b_mb, b_stage, start, end in run.result.records:
        t0, t1 = int(start), int(end)
        labels = ([(kind if kind != "FB" else "F", mb, stage)] * (1 if kind == "FB" else t1 - t0) +
                  ([("B", b_mb, b_stage)] * (t1 - t0 - 1) if kind == "FB" else []))
        for k, (knd, m, s) in enumerate(labels):
            busy[rank][t0 + k] = True
            table.append({"rank": rank, "slot": t0 + k, "kind": knd, "mb": m, "stage": s,
                          "direction": "up" if m >= 4 else "down", "label": op_label(run.schedule, knd, m, s)})
    write_csv_atomic(pd.DataFrame(table).sort_values(["rank", "slot"]), out / "lesson_dualpipe_p4_m8_table.csv")
    first = next(t for t in range(span) if all(busy[r][t] for r in range(4)))
    # A rank's idle slots before its own last op (after it, the rank has finished the step).
    idle = {r: [t for t in range(max(t for t in range(span) if busy[r][t])) if not busy[r][t]] for r in range(4)}
    settled = max((slots[-1] + 1 for slots in idle.values() if slots), default=0)
    rows.append((2, "first slot with every rank busy", first, "slot (unit costs)",
                 "table in lesson_dualpipe_p4_m8_table.csv"))
    rows.append((2, "first slot after which no rank idles again before its last op", settled, "slot (unit costs)",
                 "idle slots per rank: " + "; ".join(f"rank {r}: {' '.join(map(str, s)) or 'none'}"
                                                     for r, s in idle.items())))
    rows.append((2, "makespan", span, "slots", "bubble per rank 2 = (P/2-1)(FB+B-3W)"))


def exercise_3(rows: list, res) -> None:
    parts = fb_unit_trace(res)
    disp = [p for p in parts if p.name == "DISPATCH(F)"]
    comp = [(p.start, p.end) for p in parts if p.stream == COMPUTE]
    if not disp:
        rows.append((3, "dispatch window", float("nan"), "ms", "no MoE layer in the traced unit"))
        return
    a, b = disp[0].start, disp[0].end
    covered = sum(max(0.0, min(b, e) - max(a, s)) for s, e in comp)
    rows.append((3, "DISPATCH(F) window, first layer of the unit", (b - a) * 1e3, "ms", parts[0].op))
    rows.append((3, "share of the window the compute stream covers", covered / (b - a), "fraction",
                 "MLP(B)/MLP(W) of the backward chunk run meanwhile"))


def exercise_4(rows: list) -> None:
    cases = {"dense 70B, P=8": dict(model="llama-70b-like", topology="h800-64", pp=8, dp=8, ep=1, microbatches=16,
                                     gemm_precision="bf16"),
             "671B MoE, P=16": dict(microbatches=120)}
    for name, over in cases.items():
        mem = {s: Scenario(load_scenario("deepseek-v3", schedule=s, **over)).memory[4] for s in ("1f1b", "dualpipe")}
        extra = (mem["dualpipe"].params_gb + mem["dualpipe"].grads_gb) - (mem["1f1b"].params_gb + mem["1f1b"].grads_gb)
        rows.append((4, f"{name}: extra weights+grads per rank under dualpipe", extra, "GB", "rank 4"))
        rows.append((4, f"{name}: that extra as a share of the dualpipe rank's memory",
                     extra / mem["dualpipe"].total_gb, "fraction",
                     "MoE experts are split over EP64, so a rank's copy of its stages is small" if "MoE" in name
                     else "every weight of the stage is on the rank"))


def exercise_5(rows: list) -> None:
    for s in ("dualpipe", "chimera"):
        res = simulate_step(load_scenario("deepseek-v3", microbatches=128, schedule=s))
        rows.append((5, f"{s}: step time", res.step_time_s, "s", "DeepSeek-V3, PP16, M=128"))
        rows.append((5, f"{s}: exposed all-to-all per rank", res.exposed_comm_s, "s", "Chimera has no F&B overlap"))


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="results")


def main(argv=None) -> int:
    return script_main(__doc__, add_arguments, run, argv)


def run(args) -> int:
    out = Path(args.out)
    rows: list = []
    exercise_1(rows)
    exercise_2(rows, out)
    exercise_3(rows, simulate_step(load_scenario("deepseek-v3", schedule="dualpipe")))
    exercise_4(rows)
    exercise_5(rows)
    df = pd.DataFrame(rows, columns=["exercise", "quantity", "value", "unit", "note"])
    write_csv_atomic(df, out / "lesson_exercises.csv")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
