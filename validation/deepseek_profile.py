"""DeepSeek's published profile of one DualPipe F&B unit of DeepSeek-V3 training, as kernel rows.

DeepSeek published a PyTorch-profiler trace of its training framework (github.com/deepseek-ai/profile-data,
``train.json``, commit ae7fc07): one pair of a forward and a backward chunk overlapped as in DualPipe, each
chunk 4 MoE layers of DeepSeek-V3, EP 64, TP 1, 4K sequences, absolutely balanced routing, one H800 (rank 0
of 64), pipeline sends left out. Its CPU side carries DeepSeek's own annotations of the unit's phases, in
the order of the DeepSeek-V3 report's Figure 4, ten a layer ("turn"): ``combine(B) attn(F) mlp(B)
dispatch(F) dispatch(B) mlp(W) mlp(F) attn(B) attn(W) combine(F)``.

``validation/deepseek_v3_kernels.csv`` holds its 963 GPU kernels, one row each, transcribed by
:func:`kernels_from_trace` (``python -m experiments.deepseek_profile --trace train.json`` transcribes it again):
the turn and phase whose annotation launched it (the kernel's launch matched to its CUDA runtime call
by correlation id), its stream, its kind (:func:`kind_of`), its name without template arguments, its
start (microseconds from the first kernel) and duration. What is derived from them:

- :func:`phase_times`: per turn and phase, the time the compute streams were busy (the union of the
  kernels' intervals on the compute streams, so two weight-gradient GEMMs running at once on two
  streams count once) and the communication stream's kernel time;
- :func:`compute_profile`: the mean over the 4 turns of each compute phase, as a compute profile of a
  MoE layer (:func:`sim.training.costs.chunk.read_profile`) for the suite's profile-fed mode: ``attn_f``,
  ``mlp_f``, ``attn_i`` (``attn(B)``, whose measured time holds the recomputed normalisation and MLA
  up-projections, so ``attn_r`` and ``mlp_r`` are 0), ``mlp_i``, ``attn_w``, ``mlp_w``. Its kernels ran on
  112 of the H800's 132 SMs (their grids say so) while DeepEP's kernels held the other 20, so the profile
  says ``beside`` 1: beside a communication kernel a part takes the time it was measured at, no more.
  DeepSeek's phases split a layer as its code does (the router's gate and top-k in ``attn(F)``, before
  the dispatch), not exactly as the chunk model does (they sit in its MLP part).

The trace is a measurement of DeepSeek-V3's own training: the suite feeds it as the profile-fed mode of
the DeepSeek-V3 row, never as a calibration of the first-principles model.
"""
from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from pathlib import Path

from sim.checks import InputError

ROOT = Path(__file__).resolve().parent
KERNELS_CSV = ROOT / "deepseek_v3_kernels.csv"
SOURCE = "github.com/deepseek-ai/profile-data, train.json (commit ae7fc07)"
PHASES = ("combine(B)", "attn(F)", "mlp(B)", "dispatch(F)", "dispatch(B)", "mlp(W)", "mlp(F)", "attn(B)",
          "attn(W)", "combine(F)")
COMPUTE_PHASES = {"attn(F)": "attn_f", "mlp(F)": "mlp_f", "attn(B)": "attn_i", "mlp(B)": "mlp_i",
                  "attn(W)": "attn_w", "mlp(W)": "mlp_w"}
COMM_PHASES = ("dispatch(F)", "combine(F)", "dispatch(B)", "combine(B)")
COLUMNS = ("turn", "phase", "stream", "kind", "kernel", "start_us", "dur_us")
KINDS = ("gemm", "gemm-wgrad", "gemm-experts", "attention", "communication", "memory")


class ProfileDataError(InputError):
    """A trace or kernel table that cannot be read as DeepSeek's profile; the message says why."""


def kind_of(name: str) -> str:
    """What a kernel of the trace is, by its name: ``communication`` (DeepEP's kernels), ``attention``
    (FlashAttention's), ``gemm-wgrad`` (DeepGEMM's weight-gradient GEMMs, accumulating into FP32),
    ``gemm-experts`` (its M-grouped expert GEMMs), ``gemm`` (its other GEMMs, cuBLAS's), else
    ``memory`` (casts, normalisations, rotary, permutation, element-wise)."""
    if "dpsk::ep::" in name:
        return "communication"
    if "flash" in name.lower():
        return "attention"
    if "grouped_gemm" in name and "transpose" not in name:
        if "dptp128c_acc" in name:
            return "gemm-wgrad"
        return "gemm-experts" if "m_grouped" in name else "gemm"
    if "xmma_gemm" in name:
        return "gemm"
    return "memory"


def short_name(name: str) -> str:
    """A kernel's name without ``void``, template arguments and parameters."""
    name = name.removeprefix("void ").split("(")[0]
    previous = None
    while previous != name:
        previous, name = name, re.sub(r"<[^<>]*>", "", name)
    return name.strip()


def kernels_from_trace(trace: dict) -> list[dict]:
    """The kernel rows (:data:`COLUMNS`) of a PyTorch-profiler trace whose CPU annotations are the
    phases (:data:`PHASES`): each GPU kernel (and memcpy, memset) with the phase whose annotation
    enclosed its launch. Kernels launched outside every annotation are left out."""
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise ProfileDataError("not a Chrome trace: no traceEvents list")
    gpu = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    if not gpu:
        raise ProfileDataError("the trace has no GPU kernels")
    launches = {e["args"].get("correlation"): e["ts"] for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in e}
    spans = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                   if e.get("cat") == "user_annotation" and e.get("name") in PHASES)
    if not spans:
        raise ProfileDataError(f"the trace has no annotations named {', '.join(PHASES)}")
    t0 = gpu[0]["ts"]
    rows = []
    for e in gpu:
        launched = launches.get(e.get("args", {}).get("correlation"))
        where = next((i for i, (start, end, _) in enumerate(spans) if launched is not None and start <= launched < end),
                     None)
        if where is None:
            continue
        rows.append({"turn": where // len(PHASES) + 1, "phase": spans[where][2], "stream": e["args"].get("stream"),
                     "kind": kind_of(e["name"]), "kernel": short_name(e["name"]),
                     "start_us": round(e["ts"] - t0, 3), "dur_us": round(e["dur"], 3)})
    return rows


def write_kernels(rows: list[dict], path: Path = KERNELS_CSV) -> Path:
    """``rows`` as the kernel table, with its provenance as leading comment lines (atomic write)."""
    from sim.io import write_text_atomic
    out = io.StringIO()
    out.write(f"# DeepSeek-V3 training, one DualPipe F&B unit (4 MoE layers a chunk, EP 64, 4K sequences, balanced\n"
              f"# routing) on an H800: every GPU kernel of DeepSeek's published profile, {SOURCE}.\n"
              "# Transcribed by python -m experiments.deepseek_profile --trace train.json "
              "(validation/deepseek_profile.py).\n")
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return write_text_atomic(out.getvalue(), Path(path))


def read_kernels(path: Path = KERNELS_CSV) -> list[dict]:
    """The kernel table's rows, typed; a bad row raises :class:`ProfileDataError` naming it."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    body = [line for line in lines if not line.startswith("#")]
    rows = []
    for i, row in enumerate(csv.DictReader(body), start=2):
        try:
            typed = {"turn": int(row["turn"]), "phase": row["phase"], "stream": int(row["stream"]),
                     "kind": row["kind"], "kernel": row["kernel"], "start_us": float(row["start_us"]),
                     "dur_us": float(row["dur_us"])}
        except (KeyError, TypeError, ValueError):
            raise ProfileDataError(f"{path} row {i}: needs {', '.join(COLUMNS)} with numbers in turn, stream, "
                                   f"start_us, dur_us; got {dict(row)}") from None
        if typed["phase"] not in PHASES or typed["kind"] not in KINDS or typed["dur_us"] < 0:
            raise ProfileDataError(f"{path} row {i}: phase must be one of {', '.join(PHASES)}, kind one of "
                                   f"{', '.join(KINDS)}, dur_us at least 0; got {typed['phase']!r}, "
                                   f"{typed['kind']!r}, {typed['dur_us']}")
        rows.append(typed)
    return rows


def busy_us(intervals: list[tuple[float, float]]) -> float:
    """Microseconds covered by the union of ``(start, end)`` intervals."""
    total, start, end = 0.0, None, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += 0.0 if end is None else end - start
            start, end = a, b
        else:
            end = max(end, b)
    return total + (0.0 if end is None else end - start)


def communication_stream(rows: list[dict]) -> int:
    """The stream DeepEP's kernels ran on (the one holding most communication kernel time)."""
    time: dict[int, float] = defaultdict(float)
    for r in rows:
        if r["kind"] == "communication":
            time[r["stream"]] += r["dur_us"]
    if not time:
        raise ProfileDataError("no communication kernels in the profile")
    return max(time, key=time.get)


def phase_times(rows: list[dict]) -> dict[tuple[int, str], float]:
    """Microseconds per (turn, phase): for a compute phase the compute streams' busy time (the union
    of its kernels' intervals off the communication stream), for a communication phase the summed time
    of its kernels on the communication stream (they run one after another)."""
    comm = communication_stream(rows)
    grouped: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for r in rows:
        grouped[(r["turn"], r["phase"])].append(r)
    out = {}
    for key, group in grouped.items():
        if key[1] in COMPUTE_PHASES:
            out[key] = busy_us([(r["start_us"], r["start_us"] + r["dur_us"]) for r in group if r["stream"] != comm])
        else:
            out[key] = sum(r["dur_us"] for r in group if r["stream"] == comm)
    return out


def mean_phase_us(rows: list[dict]) -> dict[str, float]:
    """Each phase's microseconds, averaged over the turns (:func:`phase_times`)."""
    times = phase_times(rows)
    turns = sorted({turn for turn, _ in times})
    return {phase: sum(times.get((t, phase), 0.0) for t in turns) / len(turns) for phase in PHASES}


def unit_span_us(rows: list[dict]) -> float:
    """The unit's length on the GPU: from the first compute kernel's start to the last one's end."""
    comm = communication_stream(rows)
    compute = [r for r in rows if r["stream"] != comm]
    return max(r["start_us"] + r["dur_us"] for r in compute) - min(r["start_us"] for r in compute)


def compute_stream_gaps_us(rows: list[dict]) -> list[float]:
    """Microseconds from each kernel's end to the next one's start on the compute stream that ran the
    most kernels (idle time between them: a launch gap, or a wait)."""
    comm = communication_stream(rows)
    counts: dict[int, int] = defaultdict(int)
    for r in rows:
        if r["stream"] != comm:
            counts[r["stream"]] += 1
    stream = max(counts, key=counts.get)
    gaps, end = [], None
    for r in sorted((r for r in rows if r["stream"] == stream), key=lambda r: r["start_us"]):
        if end is not None:
            gaps.append(max(0.0, r["start_us"] - end))
        end = max(end if end is not None else r["start_us"], r["start_us"] + r["dur_us"])
    return gaps


def compute_profile(rows: list[dict]) -> list[dict]:
    """The compute profile of one MoE layer (rows ``layer, part, seconds, beside``; see the module)."""
    mean = mean_phase_us(rows)
    out = [{"layer": "moe", "part": part, "seconds": mean[phase] / 1e6, "beside": 1.0}
           for phase, part in COMPUTE_PHASES.items()]
    return out + [{"layer": "moe", "part": part, "seconds": 0.0, "beside": 1.0} for part in ("attn_r", "mlp_r")]


def write_compute_profile(path: Path, rows: list[dict] | None = None) -> Path:
    """The compute profile (:func:`compute_profile` of the shipped kernel table unless ``rows``) as a
    profile CSV at ``path`` (atomic write)."""
    from sim.io import write_text_atomic
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=("layer", "part", "seconds", "beside"), lineterminator="\n")
    writer.writeheader()
    writer.writerows(compute_profile(read_kernels() if rows is None else rows))
    return write_text_atomic(out.getvalue(), Path(path))


def load_trace(path: Path) -> dict:
    """A PyTorch-profiler JSON trace; one clear error when it is not one."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileDataError(f"trace {path} does not exist (DeepSeek's is train.json of "
                               "github.com/deepseek-ai/profile-data)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProfileDataError(f"trace {path} is not a JSON trace: {exc}") from None


__all__ = ["COMM_PHASES", "COMPUTE_PHASES", "KERNELS_CSV", "PHASES", "ProfileDataError", "busy_us",
           "communication_stream", "compute_profile", "compute_stream_gaps_us", "kernels_from_trace", "kind_of",
           "load_trace", "mean_phase_us", "phase_times", "read_kernels", "short_name", "unit_span_us",
           "write_compute_profile", "write_kernels"]
