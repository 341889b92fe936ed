"""GPipe, 1F1B and interleaved 1F1B as pure functions ``(P, M, ...) -> {rank: [op, ...]}``.

GPipe and 1F1B follow the op order of PyTorch's ``torch.distributed.pipelining``
(``ScheduleGPipe``, ``Schedule1F1B``); interleaved 1F1B follows Megatron-Core's virtual-pipeline
order (micro-batches in groups of ``G`` through each model chunk, Megatron-Core's
``microbatch_group_size_per_vp_stage``, P unless set; PyTorch's ``ScheduleInterleaved1F1B`` is
the same order with ``G = M / max(1, M // P)``, its micro-batches per round), and combined 1F1B
is that order with Megatron-Core's expert-parallel overlap (``overlap_moe_expert_parallel_comm``):
each steady-state forward and backward run as one overlapped unit. Backward ops are full ``B``s.
"""
from __future__ import annotations

from .ops import AnyOp, FBOp, Op


def gpipe(P: int, M: int) -> dict[int, list[Op]]:
    """Every rank: all M forwards, then all M backwards, both in micro-batch order."""
    return {r: [Op("F", mb, r) for mb in range(M)] + [Op("B", mb, r) for mb in range(M)]
            for r in range(P)}


def one_f_one_b(P: int, M: int) -> dict[int, list[Op]]:
    """PipeDream-flush / Megatron 1F1B in PyTorch's order.

    Rank r: 1. ``min(M, P - r)`` warm-up forwards; 2. alternate a backward and a forward until
    every forward is issued; 3. the remaining backwards.
    """
    ranks = {}
    for r in range(P):
        ops: list[Op] = []
        fwd = bwd = 0
        for _ in range(min(M, P - r)):              # 1. warm-up
            ops.append(Op("F", fwd, r))
            fwd += 1
        while True:                                  # 2. 1B1F
            ops.append(Op("B", bwd, r))
            bwd += 1
            if fwd == M:
                break
            ops.append(Op("F", fwd, r))
            fwd += 1
        while bwd < M:                               # 3. cool-down
            ops.append(Op("B", bwd, r))
            bwd += 1
        ranks[r] = ops
    return ranks


def megatron_virtual_order(M: int, v: int, group: int) -> list[tuple[int, int]]:
    """Megatron's forward order of (micro-batch, model chunk): groups of ``group`` micro-batches
    go through chunk 0, then chunk 1, ... before the next group starts; the last group takes what
    is left (Megatron-Core's ``get_schedule_table``)."""
    order = []
    for start in range(0, M, group):
        members = range(start, min(start + group, M))
        order.extend((mb, chunk) for chunk in range(v) for mb in members)
    return order


def virtual_ops(order: list[tuple[int, int]], P: int, v: int, rank: int):
    """(forward, backward) of ``rank``: functions of k giving the op of the k-th entry of ``order``
    ((micro-batch, model chunk)): the forward at stage ``chunk x P + rank``, the backward at the
    mirrored chunk's, ``(v - 1 - chunk) x P + rank``."""
    def fwd(k: int) -> Op:
        mb, chunk = order[k]
        return Op("F", mb, chunk * P + rank)

    def bwd(k: int) -> Op:
        mb, chunk = order[k]
        return Op("B", mb, (v - 1 - chunk) * P + rank)
    return fwd, bwd


def interleaved_1f1b(P: int, M: int, v: int, group: int | None = None) -> dict[int, list[Op]]:
    """Megatron interleaved 1F1B with ``v`` model chunks per rank (S = vP stages).

    Rank r holds stages ``r, r+P, ..., r+(v-1)P``. With ``T = vM`` virtual micro-batches in the
    order of :func:`megatron_virtual_order` (groups of ``G = group``, P when None), rank r runs
    1. ``min(T, 2(P-1-r) + (v-1)G)`` warm-up forwards;
    2. steady state: the next forward, then the next backward;
    3. the remaining backwards. The k-th backward is the k-th entry of the order with its chunk
    mirrored (``v-1-chunk``).
    """
    group = group or P
    order = megatron_virtual_order(M, v, group)
    total = len(order)
    ranks = {}
    for r in range(P):
        fwd, bwd = virtual_ops(order, P, v, r)
        warmup = interleaved_warmup(P, total, v, r, group)
        ops = [fwd(k) for k in range(warmup)]
        for k in range(total - warmup):
            ops.append(fwd(warmup + k))
            ops.append(bwd(k))
        ops.extend(bwd(k) for k in range(total - warmup, total))
        ranks[r] = ops
    return ranks


def combined_1f1b(P: int, M: int, v: int = 1, group: int | None = None) -> dict[int, list[AnyOp]]:
    """Megatron-Core's combined 1F1B (``overlap_moe_expert_parallel_comm``, its
    ``combined_1f1b_schedule_for_interleaved_pipelining`` and ``..._for_no_pipelining``):
    :func:`interleaved_1f1b`'s order (``v`` chunks per rank; ``P = 1``, ``v = 1``: one stage, no
    pipeline; groups of ``group``, P when None) with one more warm-up forward,
    ``min(T, 2(P-1-r) + (v-1)G + 1)``, and every
    steady-state pair, the next forward and the next backward, one overlapped unit ``[F&B]``: the
    two micro-batches' layers interleaved so that each one's all-to-alls run beside the other's
    compute (as DualPipe's F&B chunks). P = 1: ``F0 [F1&B0] [F2&B1] ... B(M-1)``."""
    group = group or P
    order = megatron_virtual_order(M, v, group)
    total = len(order)
    ranks: dict[int, list[AnyOp]] = {}
    for r in range(P):
        fwd, bwd = virtual_ops(order, P, v, r)
        warmup = min(total, interleaved_warmup(P, total, v, r, group) + 1)
        ops: list[AnyOp] = [fwd(k) for k in range(warmup)]
        ops += [FBOp(fwd(warmup + k), bwd(k)) for k in range(total - warmup)]
        ops += [bwd(k) for k in range(total - warmup, total)]
        ranks[r] = ops
    return ranks


def interleaved_warmup(P: int, total: int, v: int, rank: int, group: int) -> int:
    """Megatron's warm-up forwards of ``rank`` over ``total`` virtual micro-batches in groups of
    ``group`` (Megatron-Core's ``get_pp_rank_microbatches``): ``min(total, 2(P-1-rank) + (v-1)group)``."""
    return min(total, 2 * (P - 1 - rank) + (v - 1) * group)


def interleaved_exchanges(P: int, M: int, v: int, group: int | None = None) -> dict[int, frozenset[int]]:
    """Where Megatron's interleaved 1F1B exchanges with its neighbours, without ``overlap_p2p_comm``
    (Megatron-LM ``forward_backward_pipelining_with_interleaving``): after each warm-up forward and
    each cool-down backward, but in the steady state once per forward-backward pair, after the
    backward (``send_forward_backward_recv_forward_backward``: the forward's output and the
    backward's gradient leave together, and the next pair's two inputs arrive together). Per rank,
    the positions of :func:`interleaved_1f1b`'s ops that share the exchange of the op before them:
    each steady-state backward."""
    total = M * v
    out = {}
    for r in range(P):
        warmup = interleaved_warmup(P, total, v, r, group or P)
        out[r] = frozenset(warmup + 2 * k + 1 for k in range(total - warmup))
    return out
