"""Check that a schedule is complete and can run, and draw the grid when it is not.

Invariants (each violation raises :class:`ScheduleError` with the rank x step grid, the offending
op marked ``>>op<<``):

1. every op names a micro-batch in ``0..M-1`` and a stage in ``0..S-1`` held by its rank;
2. every (micro-batch, stage) gets exactly one ``F`` and exactly one backward: a ``B`` (alone or
   inside an ``FB``), or an ``I`` and, later on the same rank, its ``W``;
3. the dependencies can be met when each rank runs its list in order (no deadlock): ``F(s)``
   after ``F(s-1)``; ``I``/``B(s)`` after ``F(s)`` and the backward of ``s+1``; ``W`` after ``I``.
"""
from __future__ import annotations

from collections import defaultdict

from ..checks import InputError
from .base import Schedule
from .ops import AnyOp, FBOp, Op, parts


class ScheduleError(InputError):
    """A schedule breaks an invariant; the message shows where."""


def render_grid(schedule: Schedule, marks: dict[int, int], window: int = 6) -> str:
    """Rank x step grid around the marked steps (``{rank: step}``), marked ops as ``>>op<<``."""
    steps = list(marks.values())
    lo, hi = max(0, min(steps) - window), max(steps) + window + 1
    lines = [f"steps {lo}..{hi - 1} (rank: ops in order)"]
    for rank, ops in sorted(schedule.ranks.items()):
        cells = []
        for i in range(lo, min(hi, len(ops))):
            text = str(ops[i])
            cells.append(f">>{text}<<" if marks.get(rank) == i else text)
        more = " ..." if hi < len(ops) else ""
        lines.append(f"  rank {rank:>3}: {'... ' if lo else ''}{' '.join(cells)}{more}")
    return "\n".join(lines)


def _fail(schedule: Schedule, message: str, marks: dict[int, int]) -> None:
    raise ScheduleError(f"schedule {schedule.name!r} (P={schedule.pp}, M={schedule.microbatches}): "
                        f"{message}\n{render_grid(schedule, marks)}")


def _check_ops(schedule: Schedule) -> None:
    S, M, P = schedule.num_stages, schedule.microbatches, schedule.pp
    if sorted(schedule.ranks) != list(range(P)):
        raise ScheduleError(f"schedule {schedule.name!r}: ranks must be 0..{P - 1}, got {sorted(schedule.ranks)}")
    seen: dict[tuple[str, int, int], tuple[int, int]] = {}
    for rank, ops in schedule.ranks.items():
        for i, op in enumerate(ops):
            if isinstance(op, FBOp) and op.f.mb == op.b.mb:
                _fail(schedule, f"overlapped unit {op} pairs a micro-batch with itself", {rank: i})
            for part in parts(op):
                if not (0 <= part.mb < M and 0 <= part.stage < S):
                    _fail(schedule, f"op {part} is out of range (mb 0..{M - 1}, stage 0..{S - 1})", {rank: i})
                holder = schedule.placement.rank(part.mb, part.stage)
                if holder != rank:
                    _fail(schedule, f"op {part} is on rank {rank} but stage {part.stage} of "
                          f"micro-batch {part.mb} is held by rank {holder}", {rank: i})
                kind = "G" if part.kind in ("I", "B") else part.kind
                key = (kind, part.mb, part.stage)
                if key in seen:
                    first = seen[key]
                    what = "backward" if kind == "G" else part.kind
                    _fail(schedule, f"(mb {part.mb}, stage {part.stage}) gets a second {what} "
                          f"(first at rank {first[0]} step {first[1]})", {rank: i})
                if part.kind == "W" and ("I", part.mb, part.stage) not in seen:
                    _fail(schedule, f"{part} comes before (or without) its I", {rank: i})
                seen[key] = (rank, i)
                if part.kind in ("I", "B"):
                    seen[(part.kind, part.mb, part.stage)] = (rank, i)
    for mb in range(M):
        for s in range(S):
            holder = schedule.placement.rank(mb, s)
            last = {holder: max(0, len(schedule.ranks[holder]) - 1)}
            if ("F", mb, s) not in seen:
                _fail(schedule, f"(mb {mb}, stage {s}) has no F on rank {holder}", last)
            if ("G", mb, s) not in seen:
                _fail(schedule, f"(mb {mb}, stage {s}) has no backward (B, or I and W) on rank {holder}", last)
            if ("I", mb, s) in seen and ("W", mb, s) not in seen:
                _fail(schedule, f"I{mb}@{s} is never completed by a W", {holder: seen[("I", mb, s)][1]})


def _needs(op: Op, S: int) -> list[tuple]:
    if op.kind == "F":
        return [("F", op.mb, op.stage - 1)] if op.stage > 0 else []
    if op.kind == "W":
        return [("I", op.mb, op.stage)]
    need = [("F", op.mb, op.stage)]
    return need + [("G", op.mb, op.stage + 1)] if op.stage < S - 1 else need


def _produces(op: Op) -> list[tuple]:
    if op.kind == "F":
        return [("F", op.mb, op.stage)]
    if op.kind == "I":
        return [("G", op.mb, op.stage), ("I", op.mb, op.stage)]
    if op.kind == "B":
        return [("G", op.mb, op.stage)]
    return []


def _check_runnable(schedule: Schedule) -> None:
    """Advance every rank as far as its inputs allow; a rank left behind marks a deadlock. O(ops)."""
    S = schedule.num_stages
    done: set = set()
    pos = {r: 0 for r in schedule.ranks}
    waiting: dict[tuple, list[int]] = defaultdict(list)
    todo = list(schedule.ranks)
    while todo:
        rank = todo.pop()
        ops: list[AnyOp] = schedule.ranks[rank]
        while pos[rank] < len(ops):
            op = ops[pos[rank]]
            missing = [k for p in parts(op) for k in _needs(p, S) if k not in done]
            if missing:
                waiting[missing[0]].append(rank)
                break
            for p in parts(op):
                for key in _produces(p):
                    done.add(key)
                    todo.extend(waiting.pop(key, ()))
            pos[rank] += 1
    stuck = {r: i for r, i in pos.items() if i < len(schedule.ranks[r])}
    if stuck:
        _fail(schedule, "deadlock: the marked ops wait for inputs that are never produced", stuck)


def validate(schedule: Schedule) -> Schedule:
    """Raise :class:`ScheduleError` unless the schedule is complete and runnable; return it."""
    _check_ops(schedule)
    _check_runnable(schedule)
    return schedule
