"""DeepSeek-V3's DualPipe F&B unit as DeepSeek measured it, beside the simulator's.

DeepSeek published a profiler trace of one F&B unit of its training (github.com/deepseek-ai/profile-data,
``train.json``: a forward and a backward chunk of 4 MoE layers each, overlapped, EP 64, 4K sequences,
balanced routing, H800); ``validation/deepseek_v3_kernels.csv`` holds its GPU kernels
(:mod:`validation.deepseek_profile`). This script sets them beside the simulated F&B unit of the
``deepseek-v3`` scenario (first principles: every kernel from the kernel model; the middle F&B unit
of the traced rank, whose chunks hold MoE layers only), per layer, twice: on the ``h800`` preset's FP8
GEMMs (DeepGEMM's README rates of April 2025, ``simulated``) and on the GEMMs DeepSeek-V3 trained with
(``validation/gpus/h800-deepseek-2024.yaml``, the suite's DeepSeek-V3 row: DeepSeek's own CUTLASS kernels
before DeepGEMM, ``simulated_2024``):

- ``results/deepseek_profile_parts.csv``: each part of a layer's turn (DeepSeek's phases; the model's
  recomputation parts counted in the backward they belong to, as DeepSeek's ``attn(B)`` and ``mlp(B)``
  hold theirs): ``measured_ms`` (compute: the compute streams' busy time; communication: DeepEP's
  kernels' time, notify included), ``simulated_ms`` and ``simulated_2024_ms`` (the part's time in the
  simulated unit, stretched beside communication, peer waits included), ``ratio`` and ``ratio_2024``
  (measured / simulated); a last row ``unit`` gives the unit's span on the GPU over its 4 layers;
- ``results/deepseek_profile_kernels.csv``: per kind of kernel (GEMMs, weight-gradient GEMMs, expert
  GEMMs, attention, memory-bound), ``measured_ms`` and ``measured_kernels`` per layer, ``simulated_ms``
  and ``simulated_2024_ms`` (the kernel model's times alone on the whole GPU, its per-kernel breakdown),
  ``simulated_kernels``, ``ratio`` and ``ratio_2024``.
  DeepSeek's kernels ran on the 112 SMs DeepEP's 20 left, so a compute-bound kernel alone would be up
  to 132 / 112 = 1.18x faster than measured.

It also prints the gaps between consecutive kernels on the trace's compute stream (a launch gap, or a
wait). ``--trace train.json`` first transcribes DeepSeek's trace into a kernel table of the same columns
(``--kernels-out``, default ``results/deepseek_v3_kernels.csv``) and compares that one.
About 5 s on 2 cores.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd

SCENARIO = "deepseek-v3"
GPU_2024 = "validation/gpus/h800-deepseek-2024.yaml"     # the GEMMs DeepSeek-V3 trained with (the suite's row)
LAYERS_PER_CHUNK = 4
# DeepSeek's phase -> the model's parts it holds (a recomputation part is in the backward it precedes)
PART_OF_PHASE = {"attn(F)": ("ATTN(F)",), "mlp(B)": ("MLP(B)", "MLP(R)"), "mlp(W)": ("MLP(W)",),
                 "mlp(F)": ("MLP(F)",), "attn(B)": ("ATTN(B)", "ATTN(R)"), "attn(W)": ("ATTN(W)",),
                 "dispatch(F)": ("DISPATCH(F)",), "dispatch(B)": ("DISPATCH(B)",),
                 "combine(F)": ("COMBINE(F)",), "combine(B)": ("COMBINE(B)",)}


def simulated_unit(run_overrides: dict | None = None):
    """(per-part seconds per layer, unit span in seconds) of the middle F&B unit of the traced rank
    of the ``deepseek-v3`` scenario whose two chunks hold :data:`LAYERS_PER_CHUNK` MoE layers."""
    from sim.training.model.specs import load_scenario
    from sim.training.scenario import Scenario
    from sim.training.step import MoEStep
    result = MoEStep(Scenario(load_scenario(SCENARIO, **(run_overrides or {})))).simulate()
    units: dict[tuple, list] = defaultdict(list)
    for event in result.part_trace:
        if event.fb:
            units[(event.seq, event.op)].append(event)
    full = [events for events in units.values()
            if sum(e.name == "ATTN(F)" for e in events) == LAYERS_PER_CHUNK
            and sum(e.name == "ATTN(B)" for e in events) == LAYERS_PER_CHUNK]
    if not full:
        raise ValueError(f"no F&B unit of {LAYERS_PER_CHUNK} MoE layers a chunk on the traced rank")
    events = full[len(full) // 2]
    per_part: dict[str, float] = defaultdict(float)
    for e in events:
        per_part[e.name] += (e.end - e.start) / LAYERS_PER_CHUNK
    compute = [e for e in events if e.name.startswith(("ATTN", "MLP"))]
    return dict(per_part), max(e.end for e in compute) - min(e.start for e in compute)


def parts_table(kernel_rows: list[dict], units: dict[str, tuple[dict[str, float], float]]) -> pd.DataFrame:
    """The parts comparison (see the module) from the kernel table and simulated units
    (:func:`simulated_unit`) by column name (``simulated``, ``simulated_2024``)."""
    from validation.deepseek_profile import PHASES, mean_phase_us, unit_span_us
    measured = mean_phase_us(kernel_rows)
    rows = [{"part": phase, "measured_ms": measured[phase] / 1e3} for phase in PHASES]
    rows.append({"part": "unit", "measured_ms": unit_span_us(kernel_rows) / 1e3})
    for name, (per_part, span) in units.items():
        for row, phase in zip(rows, PHASES):
            row[f"{name}_ms"] = 1e3 * sum(per_part.get(p, 0.0) for p in PART_OF_PHASE[phase])
        rows[-1][f"{name}_ms"] = 1e3 * span
    df = pd.DataFrame(rows)
    for name in units:
        df[name.replace("simulated", "ratio")] = df["measured_ms"] / df[f"{name}_ms"]
    return df


MODEL_KIND = {"gemm": "gemm", "attention": "attention", "memory": "memory"}


def model_kind(kernel: str, kind: str, phase: str) -> str:
    """The trace's kind (:func:`validation.deepseek_profile.kind_of`) of a kernel of the model's
    breakdown: a GEMM of the weight-gradient part is ``gemm-wgrad``, an expert GEMM ``gemm-experts``."""
    if kind == "gemm" and phase == "w":
        return "gemm-wgrad"
    if kind == "gemm" and kernel.startswith("experts"):
        return "gemm-experts"
    return MODEL_KIND[kind]


def kinds_table(kernel_rows: list[dict], frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The per-kind comparison (see the module): the trace's compute kernels per layer against the
    kernel model's MoE layer in each of ``frames`` (:func:`sim.training.costs.kernel_report.kernel_frame`)
    by column name (``simulated``, ``simulated_2024``; the kernel counts from the first)."""
    from validation.deepseek_profile import communication_stream
    comm = communication_stream(kernel_rows)
    turns = len({r["turn"] for r in kernel_rows})
    measured: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in kernel_rows:
        if r["stream"] != comm and r["kind"] != "communication":
            measured[r["kind"]][0] += r["dur_us"] / 1e3 / turns
            measured[r["kind"]][1] += 1 / turns
    simulated: dict[str, dict[str, list[float]]] = {}
    for name, frame in frames.items():
        simulated[name] = defaultdict(lambda: [0.0, 0.0])
        for r in frame[frame["layer"] == "moe"].itertuples():
            k = model_kind(r.kernel, r.kind, r.phase)
            simulated[name][k][0] += r.us / 1e3
            simulated[name][k][1] += r.launches
    first = next(iter(frames))
    kinds = [k for k in ("gemm", "gemm-experts", "gemm-wgrad", "attention", "memory")
             if k in measured or k in simulated[first]]
    rows = [{"kind": k, "measured_ms": measured[k][0], "measured_kernels": measured[k][1],
             **{f"{name}_ms": simulated[name][k][0] for name in frames},
             "simulated_kernels": simulated[first][k][1]} for k in kinds]
    columns = ["measured_ms", "measured_kernels", *(f"{name}_ms" for name in frames), "simulated_kernels"]
    rows.append({"kind": "all", **{c: sum(r[c] for r in rows) for c in columns}})
    df = pd.DataFrame(rows)
    for name in frames:
        df[name.replace("simulated", "ratio")] = df["measured_ms"] / df[f"{name}_ms"]
    return df


def main(argv=None) -> int:
    from sim.cli import guarded

    def call() -> int:
        parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--trace", help="DeepSeek's train.json: rewrite the kernel table from it first")
        parser.add_argument("--kernels-out", default=None,
                            help="where --trace writes its kernel table (default: OUT/deepseek_v3_kernels.csv)")
        parser.add_argument("--out", default="results", help="folder for the two CSVs (default: results)")
        parser.add_argument("--force", action="store_true", help="replace output files this tool did not write")
        args = parser.parse_args(argv)
        from sim.io import overwriting, write_csv_atomic
        from sim.training.costs.kernel_report import kernel_frame
        from sim.training.model.specs import load_scenario
        from sim.training.scenario import Scenario
        from validation.deepseek_profile import (
            KERNELS_CSV,
            compute_stream_gaps_us,
            kernels_from_trace,
            load_trace,
            read_kernels,
            write_kernels,
        )
        from validation.suite import resolve, row_gpu_as_stated
        with overwriting(args.force):
            table = KERNELS_CSV
            if args.trace:
                rows = kernels_from_trace(load_trace(Path(args.trace)))
                table = write_kernels(rows, Path(args.kernels_out or Path(args.out) / "deepseek_v3_kernels.csv"))
                print(f"wrote {table}: {len(rows)} kernels")
            kernel_rows = read_kernels(table)
            gpus = {"simulated": {}, "simulated_2024": {"gpu": resolve(GPU_2024)}}
            with row_gpu_as_stated():
                parts = parts_table(kernel_rows, {name: simulated_unit(o) for name, o in gpus.items()})
                kinds = kinds_table(kernel_rows, {name: kernel_frame(Scenario(load_scenario(SCENARIO, **o)).chunk)
                                                  for name, o in gpus.items()})
            out = Path(args.out)
            write_csv_atomic(parts, out / "deepseek_profile_parts.csv")
            write_csv_atomic(kinds, out / "deepseek_profile_kernels.csv")
        fmt = {"float_format": lambda v: f"{v:.2f}", "index": False}
        print("DeepSeek-V3's F&B unit, per layer (ms): DeepSeek's trace against the simulator (first principles; "
              "_2024: on the FP8 GEMMs DeepSeek-V3 trained with)")
        print(parts.to_string(**fmt))
        print("\nits compute kernels by kind, per layer (ms; simulated: alone on all 132 SMs)")
        print(kinds.to_string(**fmt))
        gaps = compute_stream_gaps_us(kernel_rows)
        short = sorted(g for g in gaps if g < 20)
        longer_ms = (sum(gaps) - sum(short)) / 1e3
        median = f" (median {short[len(short) // 2]:.1f} us)" if short else ""
        print(f"\nthe compute stream's gaps between kernels: {len(short)} under 20 us{median}, "
              f"{len(gaps) - len(short)} longer ({longer_ms:.1f} ms)")
        print(f"wrote {out / 'deepseek_profile_parts.csv'}, {out / 'deepseek_profile_kernels.csv'}")
        return 0
    return guarded(call)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
