"""DualPipe and DualPipeV in the op order of DeepSeek's open-source implementation.

Both run the same eight-step program per rank (DeepSeek's DualPipe repository, ``DualPipe.step``, github.com/deepseek-ai/DualPipe); DualPipe with
``H = P/2``, ``h = min(r, P-1-r)`` and ``M/2`` micro-batches per direction, DualPipeV (the
"cut-in-half" V) with ``H = P``, ``h = r`` and all ``M`` micro-batches going down then back up.
"Phase 0" is the direction that enters on this rank's side, "phase 1" the other one; within each
phase F, backward and W go in FIFO order, and deferred weight gradients form one FIFO per rank.
"""
from __future__ import annotations

from .base import fifo_weights
from .ops import AnyOp, FBOp, Op

_W = Op("W", -1, -1)  # placeholder: the oldest deferred I's weight gradient (see fifo_weights)


def eight_step_program(H: int, h: int, half: int,
                       phase_items: tuple[list[tuple[int, int]], list[tuple[int, int]]]) -> list[AnyOp]:
    """One rank's DualPipe program.

    ``phase_items[p]`` lists this rank's ``(mb, stage)`` of phase ``p`` in FIFO order; ``half`` is
    the micro-batch count per phase. The steps are DeepSeek's ``step()`` with the same names.
    """
    nxt_f = [0, 0]
    nxt_b = [0, 0]

    def fwd(p: int) -> Op:
        mb, stage = phase_items[p][nxt_f[p]]
        nxt_f[p] += 1
        return Op("F", mb, stage)

    def bwd(p: int, kind: str = "B") -> Op:
        mb, stage = phase_items[p][nxt_b[p]]
        nxt_b[p] += 1
        return Op(kind, mb, stage)

    ops: list[AnyOp] = []
    ops += [fwd(0) for _ in range(2 * (H - h - 1))]                  # 1. nF0
    for _ in range(h + 1):                                             # 2. nF0F1
        ops += [fwd(0), fwd(1)]
    for _ in range(H - h - 1):                                         # 3. nB1W1F1 (zero bubble)
        ops += [bwd(1, "I"), _W, fwd(1)]
    for i in range(half - 2 * H + h + 1):                              # 4. nF0B1F1B0 (main)
        if i == 0 and h == H - 1:                                      # middle rank: not overlapped
            ops += [fwd(0), bwd(1)]
        else:
            ops.append(FBOp(fwd(0), bwd(1)))
        ops.append(FBOp(fwd(1), bwd(0)))
    for _ in range(H - h - 1):                                         # 5. nB1F1B0
        ops += [bwd(1), FBOp(fwd(1), bwd(0))]
    deferred = False                                                   # 6. nB1B0, 2nd half deferred
    for i in range(h + 1):
        if i == (h + 1) // 2 and h % 2 == 1:
            deferred = True
        ops.append(bwd(1, "I" if deferred else "B"))
        if i == (h + 1) // 2 and h % 2 == 0:
            deferred = True
        ops.append(bwd(0, "I" if deferred else "B"))
    for _ in range(H - h - 1):                                         # 7. nWB0
        ops += [_W, bwd(0, "I")]
    ops += [_W] * (h + 1)                                              # 8. nW
    return fifo_weights(ops)


def dualpipe(P: int, M: int) -> dict[int, list[AnyOp]]:
    """DualPipe on P ranks (S = P). Micro-batches ``0..M/2-1`` enter at rank 0 (rank r runs their
    stage r), ``M/2..M-1`` enter at rank P-1 (rank r runs their stage P-1-r)."""
    H, half = P // 2, M // 2
    ranks = {}
    for r in range(P):
        down = [(mb, r) for mb in range(half)]
        up = [(mb, P - 1 - r) for mb in range(half, M)]
        phases = (down, up) if r < H else (up, down)
        ranks[r] = eight_step_program(H, min(r, P - 1 - r), half, phases)
    return ranks


def dualpipev(P: int, M: int) -> dict[int, list[AnyOp]]:
    """DualPipeV on P ranks, S = 2P stages in a V: rank r holds stage r (phase 0, down) and
    stage 2P-1-r (phase 1, back up); every micro-batch enters at rank 0."""
    ranks = {}
    for r in range(P):
        phases = ([(mb, r) for mb in range(M)], [(mb, 2 * P - 1 - r) for mb in range(M)])
        ranks[r] = eight_step_program(P, r, M, phases)
    return ranks
