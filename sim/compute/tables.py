"""Kernel tables: measured GEMM and attention throughput, read and checked row by row.

Two kinds of CSV, each with a comment header naming its source (``#`` lines are skipped):

* GEMM tables, columns ``gpu, precision, groups, m, n, k, tflops``: ``groups`` GEMMs of ``m x n x
  k`` (a batched or grouped GEMM; 1 for a plain one) ran at ``tflops`` (FLOP/s = 2 groups m n k /
  seconds, / 1e12);
* attention tables, columns ``gpu, kernel, direction, causal, head_dim, seq_len, tflops``: a fused
  attention kernel (``flash2``, ``flash3``, ...) in the forward (``fwd``) or backward (``bwd``), with
  (``causal`` 1) or without (0) the causal mask, at FlashAttention's FLOP count (forward
  ``4 s^2 d heads batch``, half with the mask; backward 2.5 times the forward).

A row names a GPU preset (``known_gpus``), has positive sizes and throughput, is not a duplicate of
an earlier row's shape, and is not faster than the GPU's dense peak at its precision (a table above
the roofline is a transcription or measurement error). Each refusal is one line naming the file,
the line and what is allowed (:class:`KernelTableError`).
"""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import NamedTuple

from ..checks import InputError, did_you_mean, number

TABLES = Path(__file__).with_name("tables")
GEMM_COLUMNS = ("gpu", "precision", "groups", "m", "n", "k", "tflops")
ATTENTION_COLUMNS = ("gpu", "kernel", "direction", "causal", "head_dim", "seq_len", "tflops")
GEMM_PRECISIONS = ("bf16", "fp8", "mxfp8")
DIRECTIONS = ("fwd", "bwd")


class KernelTableError(InputError):
    """A kernel table is missing, unreadable, or has a bad row."""


class GemmRow(NamedTuple):
    gpu: str
    precision: str
    groups: int
    m: int
    n: int
    k: int
    tflops: float
    line: int

    @property
    def flops(self) -> float:
        return 2.0 * self.groups * self.m * self.n * self.k

    @property
    def seconds(self) -> float:
        return self.flops / (self.tflops * 1e12)


class AttentionRow(NamedTuple):
    gpu: str
    kernel: str
    direction: str
    causal: int
    head_dim: int
    seq_len: int
    tflops: float
    line: int


def table_path(name: str | Path) -> Path:
    """A shipped table by file name (``sim/compute/tables``), or a path of one's own."""
    path = Path(name)
    return path if path.is_file() or path.is_absolute() or len(path.parts) > 1 else TABLES / path


def _rows(path: Path, columns: tuple[str, ...]) -> list[tuple[int, dict]]:
    """(line number, row) for each data row of the CSV at ``path``, its header checked."""
    if not path.is_file():
        raise KernelTableError(f"kernel table {path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError) as exc:
        raise KernelTableError(f"kernel table {path}: cannot read it as UTF-8 text ({exc})") from None
    lines = text.splitlines()
    body = [(i, line) for i, line in enumerate(lines, start=1) if line.strip() and not line.lstrip().startswith("#")]
    if not body:
        raise KernelTableError(f"kernel table {path}: no header and no rows; expected columns {', '.join(columns)}")
    reader = csv.DictReader(io.StringIO("\n".join(line for _, line in body)))
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        raise KernelTableError(f"kernel table {path} line {body[0][0]}: missing column(s) {', '.join(missing)}; "
                               f"expected {', '.join(columns)}")
    try:
        return [(body[j + 1][0], row) for j, row in enumerate(reader)]
    except csv.Error as exc:
        raise KernelTableError(f"kernel table {path}: not a readable CSV ({exc})") from None


def _field(path: Path, line: int, row: dict, name: str, **rules):
    value = (row.get(name) or "").strip()
    try:
        parsed = float(value)
    except ValueError:
        raise KernelTableError(f"kernel table {path} line {line}: {name} {value!r} is not a number") from None
    try:
        return number(parsed, name, **rules)
    except InputError as exc:
        raise KernelTableError(f"kernel table {path} line {line}: {exc}") from None


def _gpu(path: Path, line: int, row: dict, known_gpus: dict) -> str:
    gpu = (row.get("gpu") or "").strip()
    if gpu not in known_gpus:
        raise KernelTableError(f"kernel table {path} line {line}: gpu {gpu!r} is not a GPU preset (allowed: "
                               f"{', '.join(sorted(known_gpus))}){did_you_mean(gpu, known_gpus)}")
    return gpu


def _choice(path: Path, line: int, row: dict, name: str, allowed) -> str:
    value = (row.get(name) or "").strip()
    if value not in allowed:
        raise KernelTableError(f"kernel table {path} line {line}: {name} must be one of {', '.join(allowed)}, "
                               f"got {value!r}")
    return value


Peaks = dict       # {GPU preset: {precision: dense peak TFLOPS, 0 where it has no such tensor cores}}


def read_gemm_table(name: str | Path, peaks: Peaks) -> list[GemmRow]:
    """The rows of a GEMM table; ``peaks`` (:data:`Peaks`) names the GPUs a row may name and their
    dense peaks, for the roofline check."""
    path = table_path(name)
    out, seen = [], {}
    for line, row in _rows(path, GEMM_COLUMNS):
        gpu = _gpu(path, line, row, peaks)
        precision = _choice(path, line, row, "precision", GEMM_PRECISIONS)
        sizes = [_field(path, line, row, c, integer=True, low=1, high=10 ** 9) for c in ("groups", "m", "n", "k")]
        tflops = _field(path, line, row, "tflops", low=0, low_open=True, high=1e6)
        peak = peaks[gpu].get(precision)
        if not peak:
            raise KernelTableError(f"kernel table {path} line {line}: GPU {gpu} has no {precision} tensor cores")
        if tflops > peak:
            raise KernelTableError(f"kernel table {path} line {line}: {tflops:g} TFLOPS is above {gpu}'s dense "
                                   f"{precision} peak of {peak:g} TFLOPS (allowed: at most the peak)")
        key = (gpu, precision, *sizes)
        if key in seen:
            raise KernelTableError(f"kernel table {path} line {line}: duplicate shape gpu={gpu} precision={precision} "
                                   f"groups={sizes[0]} m={sizes[1]} n={sizes[2]} k={sizes[3]} (first on line "
                                   f"{seen[key]})")
        seen[key] = line
        out.append(GemmRow(gpu, precision, *sizes, tflops, line))
    return out


def read_attention_table(name: str | Path, peaks: Peaks) -> list[AttentionRow]:
    """The rows of an attention table (BF16 kernels: checked against the BF16 peak)."""
    path = table_path(name)
    out, seen = [], {}
    for line, row in _rows(path, ATTENTION_COLUMNS):
        gpu = _gpu(path, line, row, peaks)
        kernel = (row.get("kernel") or "").strip()
        if not kernel:
            raise KernelTableError(f"kernel table {path} line {line}: kernel must name the attention kernel "
                                   "(flash2, flash3, ...), got ''")
        direction = _choice(path, line, row, "direction", DIRECTIONS)
        causal = _field(path, line, row, "causal", integer=True, low=0, high=1)
        head_dim = _field(path, line, row, "head_dim", integer=True, low=1, high=4096)
        seq_len = _field(path, line, row, "seq_len", integer=True, low=1, high=10 ** 9)
        tflops = _field(path, line, row, "tflops", low=0, low_open=True, high=1e6)
        peak = peaks[gpu]["bf16"]
        if tflops > peak:
            raise KernelTableError(f"kernel table {path} line {line}: {tflops:g} TFLOPS is above {gpu}'s dense bf16 "
                                   f"peak of {peak:g} TFLOPS (allowed: at most the peak)")
        key = (gpu, kernel, direction, causal, head_dim, seq_len)
        if key in seen:
            raise KernelTableError(f"kernel table {path} line {line}: duplicate row {gpu} {kernel} {direction} "
                                   f"causal={causal} head_dim={head_dim} seq_len={seq_len} (first on line {seen[key]})")
        seen[key] = line
        out.append(AttentionRow(gpu, kernel, direction, causal, head_dim, seq_len, tflops, line))
    return out


__all__ = ["ATTENTION_COLUMNS", "AttentionRow", "GEMM_COLUMNS", "GemmRow", "KernelTableError", "Peaks", "TABLES",
           "read_attention_table", "read_gemm_table", "table_path"]
