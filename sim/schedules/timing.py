"""How long a schedule takes when each op has a fixed duration and each hand-over between ranks a
fixed delay: the engine's rules (:mod:`sim.engine`) without SimPy, for searches that time
thousands of orders (:mod:`sim.training.search`).

Rules (those of the engine): each rank runs its list in order; an op starts when its rank is free
and every input it waits for has arrived: ``F(mb, s)`` the activation of ``F(mb, s-1)``;
``I``/``B(mb, s)`` its own ``F`` and the input gradient of the backward of ``s+1``; ``W`` its
``I``; an overlapped ``FB`` both halves' inputs. An output crossing to another rank arrives
``send_s`` after its op ends (a number, or a function of the two ranks); on the same rank at
once. So, with ``d(op)`` the op's duration::

    start(op) = max(end of the rank's previous op, max over inputs k of arrival(k))
    end(op)   = start(op) + d(op)

Each rank is advanced as far as its inputs allow (a rank waiting on an input is resumed when it is
produced): O(ops). With every send 0 and ``d`` the :class:`~sim.engine.ZeroCommRunner`'s costs,
the makespan equals :func:`~sim.engine.run_schedule`'s to the last digit (tests/test_timing.py).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable

from .base import Schedule
from .ops import AnyOp, Op, parts

Key = tuple   # ("F" | "G" | "I", mb, stage), as in the engine


def inputs_of(op: Op, num_stages: int) -> list[Key]:
    """The keys a single (non-FB) op waits for: see the module docstring."""
    mb, s = op.mb, op.stage
    if op.kind == "F":
        return [("F", mb, s - 1)] if s > 0 else []
    if op.kind == "W":
        return [("I", mb, s)]
    return [("F", mb, s), ("G", mb, s + 1)] if s < num_stages - 1 else [("F", mb, s)]


def outputs_of(op: Op, num_stages: int) -> list[Key]:
    """The keys a single (non-FB) op publishes when it ends."""
    mb, s = op.mb, op.stage
    if op.kind == "F":
        return [("F", mb, s)]
    if op.kind == "W":
        return []
    keys = [("I", mb, s)] if op.kind == "I" else []
    return keys + ([("G", mb, s)] if s > 0 else [])


def inputs_of_exchange(ops: list[AnyOp], i: int, joined: frozenset, num_stages: int) -> list[Key]:
    """The inputs op ``i`` of a rank's ``ops`` waits for: its own, and where the ops after it share
    its exchange (positions in ``joined``, :attr:`Schedule.joined`), theirs too but for those they
    make themselves (the last stage's backward takes its own forward's output); none for an op
    that shares the exchange of the op before it (they arrived with that one's)."""
    if i in joined:
        return []
    group = [ops[i]]
    while i + len(group) in joined:
        group.append(ops[i + len(group)])
    made = {key for member in group for part in parts(member) for key in outputs_of(part, num_stages)}
    keys = []
    for member in group:
        for part in parts(member):
            keys.extend(key for key in inputs_of(part, num_stages) if key not in made)
    return keys


def exchange_inputs(schedule: Schedule) -> dict[int, list[list[Key]]]:
    """Per rank whose exchanges are batched (:attr:`Schedule.joined`), per op position, what its
    exchange waits for (:func:`inputs_of_exchange`): computed once per schedule and kept in its
    ``memo`` (the engine and the runner both read it)."""
    got = schedule.memo.get("exchange_inputs")
    if got is None:
        S = schedule.num_stages
        got = schedule.memo["exchange_inputs"] = {
            r: [inputs_of_exchange(ops, i, schedule.joined[r], S) for i in range(len(ops))]
            for r, ops in schedule.ranks.items() if schedule.joined.get(r)}
    return got


def reader_of(schedule: Schedule, key: Key) -> int:
    """The rank that reads ``key``: the next stage's for an activation (the last stage's own), the
    previous stage's for an input gradient, the same rank for an ``I``'s token."""
    kind, mb, s = key
    if kind == "F":
        return schedule.placement.rank(mb, min(s + 1, schedule.num_stages - 1))
    return schedule.placement.rank(mb, s - 1 if kind == "G" else s)


def rank_ends(schedule: Schedule, duration: Callable[[int, AnyOp], float],
              send_s: float | Callable[[int, int], float] = 0.0, record: list | None = None
              ) -> dict[int, float] | None:
    """Each rank's end (the end of its last op; 0 for an empty list) in the units of ``duration``
    (``duration(rank, op)``), or ``None`` when the order deadlocks. ``record``: a list that
    receives ``(rank, op, start, end)`` of every op, in the order they are timed."""
    S = schedule.num_stages
    send = send_s if callable(send_s) else (lambda src, dst: send_s)
    ready: dict[Key, float] = {}          # key -> when it is available on the rank that reads it
    clock = {r: 0.0 for r in schedule.ranks}
    pos = {r: 0 for r in schedule.ranks}
    waiting: dict[Key, list[int]] = defaultdict(list)
    todo = sorted(schedule.ranks, reverse=True)
    while todo:
        rank = todo.pop()
        ops = schedule.ranks[rank]
        while pos[rank] < len(ops):
            op = ops[pos[rank]]
            start = clock[rank]
            missing = None
            for part in parts(op):
                for key in inputs_of(part, S):
                    at = ready.get(key)
                    if at is None:
                        missing = key
                        break
                    if at > start:
                        start = at
                if missing is not None:
                    break
            if missing is not None:
                waiting[missing].append(rank)
                break
            end = clock[rank] = start + duration(rank, op)
            if record is not None:
                record.append((rank, op, start, end))
            for part in parts(op):
                for key in outputs_of(part, S):
                    reader = reader_of(schedule, key)
                    ready[key] = end if reader == rank else end + send(rank, reader)
                    todo.extend(waiting.pop(key, ()))
            pos[rank] += 1
    if any(pos[r] < len(ops) for r, ops in schedule.ranks.items()):
        return None
    return clock


def makespan(schedule: Schedule, duration: Callable[[int, AnyOp], float],
             send_s: float | Callable[[int, int], float] = 0.0) -> float | None:
    """The end of the last op of :func:`rank_ends`, or ``None`` when the order deadlocks."""
    ends = rank_ends(schedule, duration, send_s)
    return None if ends is None else max(ends.values(), default=0.0)


__all__ = ["exchange_inputs", "inputs_of", "inputs_of_exchange", "makespan", "outputs_of", "rank_ends", "reader_of"]
