"""The Zero Bubble family (Sea AI Lab, arXiv 2401.10241): ZB-H1, ZB-H2 and ZB-V.

The backward is split into ``I`` (input gradient, on the critical path) and ``W`` (weight
gradient, deferrable). ZB-H1 and ZB-H2 are the paper's handcrafted schedules on P stages; ZB-V
is PyTorch's ``ScheduleZBVZeroBubble`` order, op for op (two stages per rank in a V).
"""
from __future__ import annotations

from .ops import Op


def _deferred_w_program(r: int, M: int, warmup: int, lag: int) -> list[Op]:
    """One P-stage rank: ``warmup`` forwards, then per backward ``i``: ``I_i``, the next forward,
    and ``W_{i-lag}``; the last ``lag`` weight gradients drain at the tail."""
    ops = [Op("F", mb, r) for mb in range(warmup)]
    nxt = warmup
    for i in range(M):
        ops.append(Op("I", i, r))
        if nxt < M:
            ops.append(Op("F", nxt, r))
            nxt += 1
        if i >= lag:
            ops.append(Op("W", i - lag, r))
    ops.extend(Op("W", mb, r) for mb in range(max(0, M - lag), M))
    return ops


def zb_h1(P: int, M: int) -> dict[int, list[Op]]:
    """ZB-H1: 1F1B's warm-up (``min(M, P-r)`` forwards, so memory <= 1F1B's P micro-batches);
    rank r lets its weight gradients lag ``r`` backwards behind, so the W's of the first
    micro-batches slide into the cool-down bubble. Bubble (P-1)(F+I-W) at equal costs."""
    return {r: _deferred_w_program(r, M, min(M, P - r), min(M, r)) for r in range(P)}


def zb_h2(P: int, M: int) -> dict[int, list[Op]]:
    """ZB-H2: ``min(M, 2(P-1-r)+1)`` warm-up forwards (rank 0 holds 2P-1 micro-batches) and W's
    lagging ``2r`` backwards behind, so the ranks form a parallelogram: at equal costs and
    M >= 2P-1 no rank idles inside its own span, and rank r's span is [rF, rF + M(F+I+W)]."""
    return {r: _deferred_w_program(r, M, min(M, 2 * (P - 1 - r) + 1), min(M, 2 * r)) for r in range(P)}


def zbv(P: int, M: int) -> dict[int, list[Op]]:
    """PyTorch's ``ScheduleZBVZeroBubble._calculate_single_rank_operations``, op for op.

    Rank r holds stage r (chunk 0) and stage 2P-1-r (chunk 1). Warm-up: ``2(P-r)-1`` F0; ``r`` x
    (F1, F0); ``P-r`` x (F1, I1, W1). Steady: (F0 while any, I0, W0, F1, I1, W1) until both
    chunks have issued every forward. Cool-down: ``r`` x (I0, I1); ``P-r`` x (I0, W0); then the
    remaining W1 and W0. PyTorch pads M up to ``2P-1`` and drops the padding's ops afterwards.
    """
    S = 2 * P
    n = max(2 * P - 1, M)
    ranks = {}
    for r in range(P):
        c0, c1 = r, S - 1 - r
        ops: list[Op] = []

        def emit(kind: str, mb: int, chunk: int) -> None:
            if mb < M:                      # the padding's ops are dropped as they are made
                ops.append(Op(kind, mb, chunk))
        # Loops stop at the last iteration that still makes an op of a real micro-batch (< M), then
        # advance the counters by the iterations left: the same ops, in O(M) per rank, not O(P).
        warm = 2 * (P - r) - 1
        for mb in range(min(warm, M)):
            emit("F", mb, c0)
        f0, f1, b0, b1 = warm, 0, 0, 0
        for k in range(min(r, M)):                      # f1 <= f0: beyond M nothing more is made
            emit("F", f1 + k, c1); emit("F", f0 + k, c0)
        f0 += r; f1 += r
        for k in range(min(P - r, M)):                  # b1 <= f1
            emit("F", f1 + k, c1); emit("I", b1 + k, c1); emit("W", b1 + k, c1)
        f1 += P - r; b1 += P - r
        while (f1 < f0 or f0 < n) and min(f0, f1, b0, b1) < M:
            if f0 < n:
                emit("F", f0, c0); f0 += 1
            emit("I", b0, c0); emit("W", b0, c0); b0 += 1
            emit("F", f1, c1); f1 += 1
            emit("I", b1, c1); emit("W", b1, c1); b1 += 1
        w0, w1 = b0, b1
        for k in range(min(r, M)):                      # once b0, b1 >= M nothing more is made
            emit("I", b0 + k, c0); emit("I", b1 + k, c1)
        b0 += r; b1 += r
        for k in range(min(P - r, M)):                  # w0 <= b0
            emit("I", b0 + k, c0); emit("W", w0 + k, c0)
        b0 += P - r; w0 += P - r
        ops += [Op("W", mb, c1) for mb in range(w1, min(b1, M))]
        ops += [Op("W", mb, c0) for mb in range(w0, min(b0, M))]
        ranks[r] = ops
    return ranks
