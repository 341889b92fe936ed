"""Fit the kernel model to its declared calibration set, and report each table's error.

The declaration (``sim/compute/presets/calibration.yaml``) names, per GPU family, the measured tables
its GEMM fits (one per precision) and its attention fits come from. A GEMM fit is a least-squares
fit of log time (:func:`~sim.compute.gemm.gemm_seconds` against each row's measured time) over
``rate_tflops`` (at most the lowest peak of the family's GPUs in the rows), ``k0`` and ``fixed_us``;
a family with no shape table of its own (``scale_from``) takes another family's fit, its rate scaled
by the ratio of the two GPUs' best measured GEMMs (MAMF). An attention fit (:class:`~sim.compute.attention.AttentionFit`) is the same
over ``rate_tflops``, ``s0``, ``d0`` and ``fixed_us`` per kernel, direction and mask; a family fits
its own kernel and, under ``also``, other kernels of its table that a run may name instead
(``attention_kernel: flash2``: FlashAttention-2 on Hopper, as PyTorch's attention runs it).

The fitted parameters are written to ``sim/compute/presets/kernels.yaml`` (``python -m sim
calibrate --kernels --write``) and read from there by every run; a test refits them and finds the
same. Errors are printed per table: rms and worst |time error| over its rows, in percent.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..checks import InputError, read_yaml
from .attention import AttentionFit
from .device import DEFAULT_HBM_EFFICIENCY, GpuFigures, peaks_of
from .gemm import GemmFit, gemm_seconds
from .tables import AttentionRow, GemmRow, read_attention_table, read_gemm_table

PRESETS = Path(__file__).with_name("presets")
CALIBRATION = PRESETS / "calibration.yaml"
FITTED = PRESETS / "kernels.yaml"
ELEMENT_BYTES = {"bf16": 2.0, "fp8": 1.0, "mxfp8": 1.0}
OUTPUT_BYTES = 2.0                       # BF16 output
BENCH_TOKENS, BENCH_HIDDEN = 16384, 2048  # FlashAttention-3's benchmark: batch x seq_len, heads x head_dim


class TableError(NamedTuple):
    """How well a fit reproduces one table: ``rows``, rms and worst |time error| (%)."""

    family: str
    kind: str            # "gemm bf16", "attention flash3 fwd causal", ...
    table: str
    rows: int
    rms_pct: float
    max_pct: float


def _errors(log_ratio: np.ndarray) -> tuple[float, float]:
    err = np.abs(np.expm1(log_ratio)) * 100
    return float(np.sqrt(np.mean(err ** 2))), float(err.max())


def gemm_row_seconds(fit: GemmFit, rows: list[GemmRow], gpus: dict[str, GpuFigures],
                     hbm_efficiency: float = DEFAULT_HBM_EFFICIENCY) -> np.ndarray:
    """The fit's seconds for each row (each on its own GPU's SMs and HBM)."""
    out = np.empty(len(rows))
    for gpu in {r.gpu for r in rows}:
        idx = [i for i, r in enumerate(rows) if r.gpu == gpu]
        g = gpus[gpu]
        sel = [rows[i] for i in idx]
        out[idx] = gemm_seconds(fit, [r.m for r in sel], [r.n for r in sel], [r.k for r in sel], [r.groups for r in sel],
                                sms=g.sms, gpu_sms=g.sms, in_bytes=ELEMENT_BYTES[sel[0].precision],
                                out_bytes=OUTPUT_BYTES, hbm_bytes_per_s=g.hbm_tbps * 1e12 * hbm_efficiency)
    return out


def fit_gemm(rows: list[GemmRow], gpus: dict[str, GpuFigures], source: str) -> GemmFit:
    """The :class:`GemmFit` of ``rows`` (see the module)."""
    from scipy.optimize import least_squares
    if not rows:
        raise InputError(f"{source}: no rows to fit")
    measured = np.log([r.seconds for r in rows])
    peak = min(gpus[r.gpu].peak(r.precision) for r in rows)

    def residuals(p):
        return np.log(gemm_row_seconds(GemmFit(p[0], p[1], p[2]), rows, gpus)) - measured

    result = least_squares(residuals, [0.8 * peak, 128.0, 5.0], bounds=([1e-3 * peak, 0.0, 0.0], [peak, 4096.0, 50.0]),
                           x_scale=[peak, 100.0, 100.0])
    p = [float(v) for v in result.x]
    rms, worst = _errors(residuals(p))
    return GemmFit(round(p[0], 3), round(p[1], 3), round(p[2], 4), source, len(rows), round(rms, 2), round(worst, 2))


def attention_flops(rows: list[AttentionRow]) -> np.ndarray:
    """Each row's FLOPs at FlashAttention's count for its benchmark (16K tokens, hidden 2,048)."""
    flops = np.array([4.0 * r.seq_len * BENCH_TOKENS * BENCH_HIDDEN for r in rows])
    flops *= np.array([0.5 if r.causal else 1.0 for r in rows])
    return flops * np.array([2.5 if r.direction == "bwd" else 1.0 for r in rows])


def fit_attention(rows: list[AttentionRow], source: str) -> AttentionFit:
    """The :class:`AttentionFit` of one kernel, direction and mask's rows: ``rate_tflops``, ``s0``
    and ``d0`` (``d0`` 0 when the rows have one head size); no fixed time (a call's launch is the
    kernel model's, as for every kernel: at the tables' sizes it cannot be told from ``s0``)."""
    from scipy.optimize import least_squares
    flops = attention_flops(rows)
    measured = np.log(flops / (np.array([r.tflops for r in rows]) * 1e12))
    s = np.array([r.seq_len for r in rows], dtype=float)
    d = np.array([r.head_dim for r in rows], dtype=float)
    one_dim = len(set(d)) == 1

    def fit_of(p) -> AttentionFit:
        return AttentionFit(float(p[0]), float(p[1]), 0.0 if one_dim else float(p[2]))

    def residuals(p):
        return np.log(fit_of(p).seconds(flops, s, d)) - measured

    top = max(r.tflops for r in rows)
    result = least_squares(residuals, [1.2 * top, 500.0, 20.0], bounds=([1e-3, 0, 0], [1e5, 1e6, 1e4]),
                           x_scale=[top, 100.0, 10.0])
    fit = fit_of(result.x)
    rms, worst = _errors(residuals(result.x))
    return AttentionFit(round(fit.rate_tflops, 3), round(fit.s0, 3), round(fit.d0, 3), 0.0, source, len(rows),
                        round(rms, 2), round(worst, 2))


def _table_rows(tables: list[str], members: list[str], precision: str, peaks: dict) -> tuple[list[GemmRow], list]:
    """The rows of ``tables`` for the family's GPUs at ``precision``, and per table the rows it gave."""
    rows, per_table = [], []
    for name in tables:
        own = [r for r in read_gemm_table(name, peaks) if r.gpu in members and r.precision == precision]
        per_table.append((name, own))
        rows += own
    return rows, per_table


def _scaled_gemm(entry: dict, base: dict, members: list[str], precision: str, gpus: dict,
                 peaks: dict) -> tuple[GemmFit, list]:
    """A family's GEMM fit from another's (``scale_from``): its ``k0`` and fixed time, the rate times
    the ratio of the member GPU's row to the base family's GPU's row in ``ratio_table``."""
    table = entry["ratio_table"]
    rows = [r for r in read_gemm_table(table, peaks) if r.precision == precision]
    own = [r for r in rows if r.gpu in members]
    theirs = [r for r in rows if r.gpu in base["gpus"]]
    if len(own) != 1 or not theirs:
        raise InputError(f"calibration.yaml: {table} needs one {precision} row of {members} and one of "
                         f"{base['gpus']} to scale from, got {len(own)} and {len(theirs)}")
    ref = GemmFit(**base["gemm"][precision])
    rate = ref.rate_tflops * own[0].tflops / theirs[0].tflops
    peak = min(gpus[g].peak(precision) for g in members)
    fit = GemmFit(min(rate, peak), ref.k0, ref.fixed_us)
    err = np.log(gemm_row_seconds(fit, own, gpus)) - np.log([r.seconds for r in own])
    rms, worst = _errors(err)
    source = f"{ref.source} (family {base['gpus'][0]}'s fit) x {own[0].gpu}/{theirs[0].gpu} in {table}"
    return GemmFit(round(fit.rate_tflops, 3), fit.k0, fit.fixed_us, source, 1, round(rms, 2), round(worst, 2)), \
        [(table, own)]


def calibrate(gpus: dict[str, GpuFigures], declaration: Path = CALIBRATION) -> tuple[dict, list[TableError]]:
    """Fit every family of ``declaration`` (see the module): (the fitted parameters as written to
    ``kernels.yaml``, each table's error)."""
    spec = read_yaml(declaration, InputError) or {}
    families = spec.get("families") or {}
    peaks = peaks_of(gpus)
    fitted, report = {}, []
    for name in _ordered(families):
        fam = families[name]
        members = list(fam.get("gpus") or [])
        unknown = [g for g in members if g not in gpus]
        if unknown:
            raise InputError(f"{declaration}: family {name}: gpus {unknown} are not GPU presets")
        out = {"gpus": members, "reference_bf16_tflops": gpus[members[0]].peak("bf16"), "gemm": {}, "attention": {}}
        for precision, entry in (fam.get("gemm") or {}).items():
            if "same_as" in entry:
                out["gemm"][precision] = dict(out["gemm"][entry["same_as"]])
                continue
            if "scale_from" in entry:
                fit, per_table = _scaled_gemm(entry, fitted[entry["scale_from"]], members, precision, gpus, peaks)
            else:
                rows, per_table = _table_rows(entry["tables"], members, precision, peaks)
                fit = fit_gemm(rows, gpus, ", ".join(t for t, own in per_table if own))
            out["gemm"][precision] = asdict(fit)
            for table, own in per_table:
                if own:
                    rms, worst = _errors(np.log(gemm_row_seconds(fit, own, gpus)) - np.log([r.seconds for r in own]))
                    report.append(TableError(name, f"gemm {precision}", table, len(own), round(rms, 2), round(worst, 2)))
        out["attention"] = _attention(name, fam.get("attention") or {}, fitted, gpus, peaks, report)
        fitted[name] = out
    return fitted, report


def _attention(name: str, entry: dict, fitted: dict, gpus: dict, peaks: dict, report: list) -> dict:
    """A family's attention: its kernel (:func:`_attention_kernel`) and, under ``also``, the other
    kernels of its own table that a run may name instead (``attention_kernel: flash2`` on Hopper:
    PyTorch's FlashAttention-2 beside FlashAttention-3)."""
    out = _attention_kernel(name, entry, entry["kernel"], fitted, gpus, peaks, report)
    also = list(entry.get("also") or [])
    if also and "table" not in entry:
        raise InputError(f"calibration.yaml: family {name}: `also` needs the family's own attention table")
    if also:
        out["also"] = {k: _attention_kernel(name, entry, k, fitted, gpus, peaks, report) for k in also}
    return out


def _attention_kernel(name: str, entry: dict, kernel: str, fitted: dict, gpus: dict, peaks: dict,
                      report: list) -> dict:
    """One attention kernel of a family: fitted to its own table, or another family's fits of the
    kernel run at ``scale = the GPU's BF16 peak x per_peak`` (``per_peak``: 1 / the other family's
    peak, or the published peak fraction / the kernel's best forward rate)."""
    own_table = "table" in entry
    table = entry["table"] if own_table else fitted[entry["from"]]["attention"]["table"]
    rows = [r for r in read_attention_table(table, peaks) if r.kernel == kernel]
    if not rows:
        raise InputError(f"calibration.yaml: family {name}: {table} has no rows of kernel {kernel!r}")
    fits = {}
    for direction, causal in sorted({(r.direction, r.causal) for r in rows}):
        fit = fit_attention([r for r in rows if r.direction == direction and r.causal == causal], table)
        fits[f"{direction}_{causal}"] = asdict(fit)
        if own_table:
            report.append(TableError(name, f"attention {kernel} {direction}{' causal' if causal else ''}",
                                     table, fit.rows, fit.rms_pct, fit.max_pct))
    source = entry.get("source", table) if kernel == entry["kernel"] else table
    out = {"kernel": kernel, "table": table, "fits": fits, "per_peak": None,
           "source": source if own_table else entry.get("source", f"family {entry['from']}'s {kernel} fits")}
    if own_table:
        return out
    if entry.get("scale") == "peak":
        reference = gpus[fitted[entry["from"]]["gpus"][0]].peak("bf16")
        return {**out, "per_peak": 1.0 / reference}
    best = float(AttentionFit(**fits["fwd_0"]).rate(BENCH_TOKENS, 128)) / 1e12
    return {**out, "per_peak": entry["best_forward_peak_fraction"] / best}


def _ordered(families: dict) -> list[str]:
    """Families in an order where each comes after those it borrows from (``scale_from``, ``from``)."""
    done, out = set(), []

    def visit(name, path=()):
        if name in done:
            return
        if name in path:
            raise InputError(f"calibration.yaml: families borrow from each other in a circle: {' -> '.join(path)}")
        fam = families[name]
        deps = {e.get("scale_from") for e in (fam.get("gemm") or {}).values()} | {(fam.get("attention") or {}).get("from")}
        for dep in sorted(d for d in deps if d):
            if dep not in families:
                raise InputError(f"calibration.yaml: family {name} borrows from {dep!r}, which is not declared")
            visit(dep, path + (name,))
        done.add(name)
        out.append(name)

    for name in families:
        visit(name)
    return out


def table_kind(path) -> str:
    """``gemm`` or ``attention``: which columns the table at ``path`` has."""
    from .tables import ATTENTION_COLUMNS, GEMM_COLUMNS, KernelTableError, _rows, table_path
    file = table_path(path)
    for columns, kind in ((GEMM_COLUMNS, "gemm"), (ATTENTION_COLUMNS, "attention")):
        try:
            _rows(file, columns)
            return kind
        except KernelTableError as exc:
            if "missing column" not in str(exc):
                raise
    raise KernelTableError(f"kernel table {file}: neither a GEMM table (columns {', '.join(GEMM_COLUMNS)}) nor an "
                           f"attention table (columns {', '.join(ATTENTION_COLUMNS)})")


def calibrate_tables(paths: list, gpus: dict[str, GpuFigures], family: str, base: dict,
                     base_name: str) -> tuple[dict, list[TableError]]:
    """One family fitted to a user's own tables (GEMM and attention, as :func:`calibrate` fits the
    declared set): GEMM fits per precision from the GEMM tables' rows; the attention from an
    attention table (one kernel), else ``base``'s (the family ``base_name``, a fitted entry).
    Its ``gpus`` are the GPUs its rows name."""
    peaks = peaks_of(gpus)
    gemm_rows, att_rows = [], []
    for path in paths:
        if table_kind(path) == "gemm":
            gemm_rows += [(str(path), r) for r in read_gemm_table(path, peaks)]
        else:
            att_rows += [(str(path), r) for r in read_attention_table(path, peaks)]
    if not gemm_rows:
        raise InputError("calibrate --kernels: give at least one GEMM table (columns gpu, precision, groups, m, n, k, "
                         "tflops)")
    members = sorted({r.gpu for _, r in gemm_rows} | {r.gpu for _, r in att_rows})
    out = {"gpus": members, "reference_bf16_tflops": gpus[members[0]].peak("bf16"), "gemm": {}, "attention": {}}
    report = []
    for precision in sorted({r.precision for _, r in gemm_rows}):
        rows = [r for _, r in gemm_rows if r.precision == precision]
        fit = fit_gemm(rows, gpus, ", ".join(sorted({t for t, r in gemm_rows if r.precision == precision})))
        out["gemm"][precision] = asdict(fit)
        report.append(TableError(family, f"gemm {precision}", fit.source, fit.rows, fit.rms_pct, fit.max_pct))
    if att_rows:
        kernels = {r.kernel for _, r in att_rows}
        if len(kernels) > 1:
            raise InputError(f"calibrate --kernels: the attention tables hold several kernels ({', '.join(sorted(kernels))}); "
                             "give one kernel's rows")
        kernel, fits = kernels.pop(), {}
        rows = [r for _, r in att_rows]
        table = ", ".join(sorted({t for t, _ in att_rows}))
        for direction, causal in sorted({(r.direction, r.causal) for r in rows}):
            fit = fit_attention([r for r in rows if r.direction == direction and r.causal == causal], table)
            fits[f"{direction}_{causal}"] = asdict(fit)
            report.append(TableError(family, f"attention {kernel} {direction}{' causal' if causal else ''}", table,
                                     fit.rows, fit.rms_pct, fit.max_pct))
        if "fwd_0" not in fits:
            raise InputError("calibrate --kernels: the attention table needs forward rows without the causal mask "
                             "(direction fwd, causal 0)")
        out["attention"] = {"kernel": kernel, "table": table, "fits": fits, "per_peak": None, "source": table}
    else:
        att = dict(base["attention"])
        if att.get("per_peak") is None:            # the base family's own table: run it at the peak ratio
            att["per_peak"] = 1.0 / base["reference_bf16_tflops"]
        att["source"] = f"family {base_name}'s {att['kernel']} fits"
        out["attention"] = att
    return {family: out}, report


def fitted_text(fitted: dict) -> str:
    """The YAML of ``kernels.yaml``: a header saying where it comes from, then the families."""
    import yaml
    header = ("# The kernel model's fitted parameters, per GPU family: written by `python -m sim calibrate --kernels "
              "--write`\n# from the declared calibration set (calibration.yaml); do not edit by hand (a test refits "
              "them).\n")
    return header + yaml.safe_dump(fitted, sort_keys=False, width=120)


__all__ = ["CALIBRATION", "FITTED", "TableError", "attention_flops", "calibrate", "calibrate_tables", "fit_attention", "fit_gemm", "fitted_text", "table_kind",
           "gemm_row_seconds"]
