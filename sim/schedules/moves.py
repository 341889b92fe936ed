"""Local moves on a schedule's order, for searches (:mod:`sim.training.search`): each changes one rank's
op list and keeps every (micro-batch, stage)'s single F and single backward, so the result is
complete by construction; whether it can run (no deadlock) the timing or :func:`validate` says.

Moves (``rank`` and positions drawn from ``rng``):

* ``swap``: two neighbouring ops change places (not an op and the op that reads its output);
* ``shift``: an op moves up to :data:`WINDOW` places earlier or later (several swaps at once,
  past orders a swap at a time would have to cross slower);
* ``shift-w``: a deferred weight gradient ``W`` moves to another place after its ``I``;
* ``sink-w``: a ``W`` moves to the end of its rank's list (Zero Bubble's cool-down: the input
  gradients the ranks before are waiting for go first);
* ``split-b``: a full backward ``B`` becomes ``I`` then, right after it, ``W`` (the order can then
  move the ``W`` into a bubble);
* ``merge-iw``: an ``I`` followed directly by its ``W`` becomes one ``B``;
* ``split-fb``: an overlapped ``FB`` unit becomes its forward and backward, in either order;
* ``merge-fb``: a neighbouring ``F`` and ``B`` of different micro-batches become one overlapped
  unit (DualPipe's F&B chunk: one's communication hidden behind the other's compute).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from .base import Schedule
from .ops import AnyOp, FBOp, Op, parts
from .timing import inputs_of, outputs_of

MOVES = ("swap", "shift", "shift-w", "sink-w", "split-b", "merge-iw", "split-fb", "merge-fb")
WINDOW = 8


@dataclass(frozen=True)
class Move:
    """A proposed change: rank ``rank``'s list becomes ``ops``; ``kind`` one of :data:`MOVES`."""

    kind: str
    rank: int
    ops: tuple

    def apply(self, schedule: Schedule) -> Schedule:
        """A new schedule with the move made (``schedule`` is not changed)."""
        ranks = dict(schedule.ranks)
        ranks[self.rank] = list(self.ops)
        return Schedule(schedule.name, schedule.pp, schedule.num_stages, schedule.microbatches, ranks,
                        schedule.placement)


def reads_from(later: AnyOp, earlier: AnyOp, num_stages: int) -> bool:
    """Whether ``later`` waits for an output of ``earlier`` (so they cannot change places)."""
    made = {k for p in parts(earlier) for k in outputs_of(p, num_stages)}
    return any(k in made for p in parts(later) for k in inputs_of(p, num_stages))


def _swap(ops: list, i: int, S: int) -> list | None:
    if i + 1 >= len(ops) or reads_from(ops[i + 1], ops[i], S):
        return None
    return ops[:i] + [ops[i + 1], ops[i]] + ops[i + 2:]


def _shift(ops: list, i: int, rng: random.Random) -> list | None:
    rest = ops[:i] + ops[i + 1:]
    to = rng.randrange(max(0, i - WINDOW), min(len(rest), i + WINDOW) + 1)
    return None if to == i else rest[:to] + [ops[i]] + rest[to:]


def _shift_w(ops: list, i: int, rng: random.Random) -> list | None:
    op = ops[i]
    if not (isinstance(op, Op) and op.kind == "W"):
        return None
    first = next(j for j in range(i - 1, -1, -1) if any(
        p.kind == "I" and p.mb == op.mb and p.stage == op.stage for p in parts(ops[j]))) + 1
    rest = ops[:i] + ops[i + 1:]
    to = rng.randrange(first, len(rest) + 1)
    return None if to == i else rest[:to] + [op] + rest[to:]


def _sink_w(ops: list, i: int) -> list | None:
    op = ops[i]
    if not (isinstance(op, Op) and op.kind == "W") or i == len(ops) - 1:
        return None
    return ops[:i] + ops[i + 1:] + [op]


def _split_b(ops: list, i: int) -> list | None:
    op = ops[i]
    if not (isinstance(op, Op) and op.kind == "B"):
        return None
    return ops[:i] + [Op("I", op.mb, op.stage), Op("W", op.mb, op.stage)] + ops[i + 1:]


def _merge_iw(ops: list, i: int) -> list | None:
    if i + 1 >= len(ops):
        return None
    a, b = ops[i], ops[i + 1]
    if not (isinstance(a, Op) and isinstance(b, Op) and a.kind == "I" and b.kind == "W"
            and (a.mb, a.stage) == (b.mb, b.stage)):
        return None
    return ops[:i] + [Op("B", a.mb, a.stage)] + ops[i + 2:]


def _split_fb(ops: list, i: int, rng: random.Random) -> list | None:
    op = ops[i]
    if not isinstance(op, FBOp):
        return None
    pair = [op.f, op.b] if rng.random() < 0.5 else [op.b, op.f]
    return ops[:i] + pair + ops[i + 1:]


def _merge_fb(ops: list, i: int, S: int) -> list | None:
    if i + 1 >= len(ops):
        return None
    a, b = ops[i], ops[i + 1]
    if not (isinstance(a, Op) and isinstance(b, Op) and {a.kind, b.kind} == {"F", "B"} and a.mb != b.mb):
        return None
    if reads_from(b, a, S):
        return None
    f, bwd = (a, b) if a.kind == "F" else (b, a)
    return ops[:i] + [FBOp(f, bwd)] + ops[i + 2:]


def propose(schedule: Schedule, rng: random.Random, kinds: tuple = MOVES, rank: int | None = None) -> Move | None:
    """One random move of a kind in ``kinds`` on ``rank`` (default: a random one) at a random
    position, or ``None`` when the drawn place does not allow it (the caller draws again)."""
    kind = kinds[rng.randrange(len(kinds))]
    if rank is None:
        rank = rng.randrange(schedule.pp)
    ops = schedule.ranks[rank]
    if not ops:
        return None
    i = rng.randrange(len(ops))
    S = schedule.num_stages
    if kind == "swap":
        new = _swap(ops, i, S)
    elif kind == "shift":
        new = _shift(ops, i, rng)
    elif kind == "shift-w":
        new = _shift_w(ops, i, rng)
    elif kind == "sink-w":
        new = _sink_w(ops, i)
    elif kind == "split-b":
        new = _split_b(ops, i)
    elif kind == "merge-iw":
        new = _merge_iw(ops, i)
    elif kind == "split-fb":
        new = _split_fb(ops, i, rng)
    elif kind == "merge-fb":
        new = _merge_fb(ops, i, S)
    else:
        raise ValueError(f"unknown move {kind!r}; valid: {', '.join(MOVES)}")
    return None if new is None else Move(kind, rank, tuple(new))


__all__ = ["MOVES", "WINDOW", "Move", "propose", "reads_from"]
