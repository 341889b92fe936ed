"""Chimera (Li and Hoefler, SC'21): two pipelines in opposite directions share the ranks.

D = P stages; rank r holds stage r of the down pipeline and stage D-1-r of the up pipeline (2x
weights, the same placement as DualPipe). Micro-batches ``0..M/2-1`` go down and ``M/2..M-1`` go
up; Chimera schedules whole basic units of D micro-batches, so M must be a multiple of D.

Chimera has no public reference implementation to copy, so its order here is DualPipe's with the
two things DualPipe adds to Chimera taken away (the DeepSeek-V3 report, arXiv 2412.19437,
section 3.2.1: DualPipe adds F&B overlap and Zero Bubble's I/W split): every overlapped ``FB`` runs as its ``F`` then
its ``B``, and every ``I`` becomes a full ``B`` (its deferred ``W`` disappears). The bidirectional
warm-up and steady state stay. Like DualPipe this needs M >= 2P (at least two basic units).

At F = 1, B = 2 its bubble is (D/2-1)(F+B) + max(0, D/2-2)F per rank: the paper's (D/2-1)(F+B)
exactly at D = 4, and a few forward slots more at larger D (docs/model.md, "Schedules").
"""
from __future__ import annotations

from .dualpipe import dualpipe
from .ops import AnyOp, FBOp, Op


def chimera(P: int, M: int) -> dict[int, list[Op]]:
    """Per-rank Chimera order for D = P stages and M micro-batches (M % P == 0, M >= 2P, P even)."""
    ranks: dict[int, list[Op]] = {}
    for rank, ops in dualpipe(P, M).items():
        out: list[Op] = []
        for op in ops:
            out.extend(_without_overlap_or_split(op))
        ranks[rank] = out
    return ranks


def _without_overlap_or_split(op: AnyOp) -> list[Op]:
    if isinstance(op, FBOp):
        return [op.f, op.b]
    if op.kind == "I":
        return [Op("B", op.mb, op.stage)]
    if op.kind == "W":
        return []
    return [op]
