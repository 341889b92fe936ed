"""A rank x time text grid of a run, like the figures of DeepSeek's DualPipe README.

Each column is one time slot of length ``unit`` (the shortest op by default); an op fills the
slots it covers with its label: kind and micro-batch (``F3``, ``B5``, ``I2``, ``W2``). A ``'``
marks the second stage a rank holds (DualPipe's and Chimera's up direction, the way back up a V);
interleaved chunks show as ``F3.1``. An overlapped unit shows its forward's label, then its
backward's. Idle slots are ``.``.
"""
from __future__ import annotations

import math

from .engine import EngineResult
from .schedules.base import Schedule


def op_label(schedule: Schedule, kind: str, mb: int, stage: int) -> str:
    """``F3``, ``B5'`` (second stage held by the rank), ``F3.1`` (interleaved chunk 1)."""
    pl = schedule.placement
    suffix = ""
    if pl.kind == "bidirectional" and mb >= schedule.microbatches // 2:
        suffix = "'"
    elif pl.kind == "v" and stage >= schedule.pp:
        suffix = "'"
    elif pl.kind == "linear" and schedule.num_stages > schedule.pp:
        suffix = f".{stage // schedule.pp}"
    return f"{kind}{mb}{suffix}"


def render(result: EngineResult, unit: float | None = None, max_slots: int = 400) -> str:
    """The grid as text; at most ``max_slots`` columns (later ones are cut with a note)."""
    sched = result.schedule
    recs = result.records
    if unit is None:
        unit = min((r.end - r.start for r in recs if r.kind == "F"), default=1.0) or 1.0
    slots = min(max_slots, int(math.ceil(result.makespan / unit - 1e-9)))
    grid = {r: ["."] * slots for r in sched.ranks}
    for rank, kind, mb, stage, b_mb, b_stage, start, end in recs:
        first = int(round(start / unit))
        last = int(round(end / unit))
        if kind == "FB":
            f_len = max(1, int(round((last - first) / 3)))
            labels = [op_label(sched, "F", mb, stage)] * f_len + \
                     [op_label(sched, "B", b_mb, b_stage)] * (last - first - f_len)
        else:
            labels = [op_label(sched, kind, mb, stage)] * (last - first)
        for k, label in enumerate(labels):
            if first + k < slots:
                grid[rank][first + k] = label
    width = max(len(c) for row in grid.values() for c in row) if slots else 1
    lines = [f"{sched.name}: P={sched.pp}, M={sched.microbatches}, S={sched.num_stages}; "
             f"one column = {unit:g} time unit(s); ' = second stage held by the rank"]
    for r in sorted(grid):
        lines.append(f"rank {r:>2} | " + " ".join(c.ljust(width) for c in grid[r]).rstrip())
    if slots < math.ceil(result.makespan / unit - 1e-9):
        lines.append(f"(cut at {slots} columns of {math.ceil(result.makespan / unit)})")
    return "\n".join(lines)
