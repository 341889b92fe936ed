"""An op of the schedule as parts on a GPU's compute and communication streams.

A plain op runs its parts one after the other, so its all-to-alls are exposed:

* ``F``: EMBED(F) on the first stage; per layer ATTN(F), DISPATCH(F), MLP(F), COMBINE(F) (dense
  layers: no all-to-all); HEAD(F) (output heads and loss) on the last stage;
* ``I`` / ``B``: HEAD(B) [and HEAD(W)] on the last stage; per layer, last first: COMBINE(B),
  MLP(R), MLP(B) [, MLP(W)], DISPATCH(B), ATTN(R), ATTN(B) [, ATTN(W)]; EMBED(W) for a ``B`` on the
  first stage. ``(R)`` parts are the memory policy's recomputation (absent when it costs nothing);
* ``W``: HEAD(W), every layer's MLP(W) and ATTN(W), EMBED(W).

An overlapped ``FB`` unit runs two streams at once, in the order of the DeepSeek-V3 report's
Figure 4, pairing forward layer j with backward layer j (counted from the end):
compute: ATTN(F) MLP(B) MLP(W) MLP(F) ATTN(B) ATTN(W); communication: COMBINE(B) DISPATCH(F)
DISPATCH(B) COMBINE(F). Each transfer waits for the compute part that produces its data and each
compute part for the transfer it consumes; each stream runs its parts in order. A recomputation
part needs only stored activations, so it waits for nothing: MLP(R) sits before MLP(B) and
ATTN(R) before ATTN(B) in the compute stream and can run while the gradient they need is still
in flight. Whatever overlap results comes out of the streams as :mod:`sim.training.costs.streams` runs them.

Under ZeRO-3 (``zero3``) each layer's weights are sharded: GATHER (an all-gather of the layer's
parameters over their data-parallel groups) precedes the layer's forward and its input gradient,
and SCATTER (a reduce-scatter of its gradients) follows its weight gradient. In a plain op they run
on the data-parallel communication stream (``lane`` 1 of :mod:`sim.training.costs.streams`), as
FSDP runs them beside the layers (PyTorch's FSDP2, Megatron-Core's FSDP, DeepSpeed's ZeRO-3
prefetch): the gather of layer j + 1 is issued when layer j starts (the first two at the op's
start, beside the embedding or the output heads) and layer j + 1 waits for it, so a gather longer
than a layer is exposed by the difference and a shorter one is hidden; a layer's scatter is issued
when its weight gradient ends and only the op's end waits for it. Gathers and scatters take turns
on that stream (they share the data-parallel links); the compute beside them runs on the SMs they
leave, as beside any communication kernel. For L layers of ``c`` seconds each and gathers of ``g``, a forward lasts
``g + (L - 1) max(g, c) + c``. Without prefetch (``RunSpec.zero3_collectives: per-tensor``, DeepSpeed's
ZeRO-3 of 2021, which synchronised the device before each parameter's all-gather) each layer's
gather sits on the op's own stream right before the layer, so a forward lasts ``L (g + c)``; its
scatters stay on the data-parallel stream; a fully recomputed layer's backward gathers first for
its recomputed forward (GATHER(B)) and again, REGATHER(B), what DeepSpeed released between that
forward and the backward. In an ``FB`` unit a layer's gathers sit at the start of its turn on
the op's communication stream and wait for nothing, so they can run while the previous layer
computes, and a layer's scatter follows the next layer's gathers.

Tensor and context parallelism (``mp``, a :class:`ModelParallelParts`) add communication parts
to a plain op, each exposed (the compute stream waits for it: Megatron's TP collectives block
the next GEMM unless TP-communication overlap is on, below). Per layer, forward:
CP-KV(F) before ATTN(F); without sequence parallelism TP-AR(F) (an all-reduce) after ATTN(F) and
after MLP(F); with it TP-AG(F) (all-gather) before each and TP-RS(F) (reduce-scatter) after each.
Backward, the conjugates: TP-AR(B) after MLP(B) and after ATTN(B) (their input gradients), or
TP-AG(B) before and TP-RS(B) after each; CP-KV(B) (keys and values again, and their gradients)
before ATTN(B). An MoE layer's MLP block has TP parts only if it has shared experts (the routed
experts are not split by TP: :mod:`sim.training.model.layout`); with expert TP an MoE layer's MLP block also
has ETP-AG (the dispatched tokens gathered over the expert-TP group) before it and ETP-RS after it,
in the forward and the backward (not in a recomputation, which, like the all-to-alls, is not
sent again). Under ``full`` recomputation the recomputed forward issues its TP (and CP)
collectives again. A ``W`` issues none (sequence parallelism's second all-gather of the input
for the weight gradient is not costed). With TP-communication overlap (``RunSpec.tp_comm_overlap``,
Megatron's userbuffers, which needs sequence parallelism) each all-gather runs beside the GEMMs
that read the block's input and each reduce-scatter beside the GEMM that writes its output (the
block split in three parts, :func:`_block`; the whole block where those GEMMs are not known), which
hold ``tp_comm_sms`` of the GPU's SMs meanwhile.
In an ``FB`` unit the same parts join the communication stream, in the order the two chunks need
them, each after the compute part producing its data and before the one consuming it
(:func:`overlapped_parts`), so one chunk's collectives can run while the other chunk computes.
"""
from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from ..comm.collective_shapes import ETP_SHAPES
from .chunk import LayerCost, StageEnds
from .streams import COMM, COMPUTE, Part


class ModelParallelParts(NamedTuple):
    """Which TP and CP parts an op's layers carry: ``tp`` ``""`` (none), ``"ar"`` (all-reduces) or
    ``"sp"`` (sequence parallelism's all-gathers and reduce-scatters); ``cp``: the key/value ring;
    ``full_recompute``: the recomputed forward issues its collectives again; ``overlap``: the TP
    parts run beside the block they feed or drain (:func:`~sim.training.costs.streams.as_streams`);
    ``moe_mlp_tp``: an MoE layer's MLP block has TP parts (it has shared experts, TP-split MLPs that
    gather their input and reduce-scatter their output; the routed experts, not split by TP, take
    each GPU's sequence shard as it is, so a layer without shared experts has none); ``etp``: an
    MoE layer's MLP block gathers the dispatched tokens over the expert-TP group before it and
    reduce-scatters its output after it (``expert_tp`` > 1)."""

    tp: str = ""
    cp: bool = False
    full_recompute: bool = False
    overlap: bool = False            # TP-communication overlap: TP parts run beside their GEMMs
    moe_mlp_tp: bool = True          # an MoE layer's MLP issues TP collectives (its shared experts')
    etp: bool = False                # expert TP: an MoE layer's routed experts gather and scatter their tokens


NO_MODEL_PARALLEL = ModelParallelParts()
TP_PARTS = {"ar": ((), (("TP-AR", "tp_all_reduce"),)),           # (before a block, after it)
            "sp": ((("TP-AG", "tp_all_gather"),), (("TP-RS", "tp_reduce_scatter"),))}


def _tp(mp: ModelParallelParts, where: int, phase: str) -> list[Part]:
    """The TP parts before (``where`` 0) or after (1) a block in ``phase`` (F, B or R)."""
    if not mp.tp:
        return []
    side = ("next", "prev")[where] if mp.overlap else ""
    return [Part(COMM, f"{name}({phase})", 0.0, shape, overlap=side) for name, shape in TP_PARTS[mp.tp][where]]


def _mlp_tp(mp: ModelParallelParts, c: LayerCost, where: int, phase: str) -> list[Part]:
    """The TP parts before or after a layer's MLP block: none for an MoE layer without shared
    experts (``mp.moe_mlp_tp``); an MoE layer's expert-TP gather (before, outside the TP parts)
    or reduce-scatter (after) with ``mp.etp``."""
    tp = _tp(mp, where, phase) if mp.moe_mlp_tp or not c.moe else []
    if not (mp.etp and c.moe) or phase == "R":        # a recomputed MLP reuses its gathered tokens
        return tp
    etp = [Part(COMM, f"ETP-{('AG', 'RS')[where]}({phase})", 0.0, ETP_SHAPES[where])]
    return etp + tp if where == 0 else tp + etp


def _cp(mp: ModelParallelParts, phase: str) -> list[Part]:
    """The CP key/value ring before an attention block: ``cp_kv:f`` in a forward (or its
    recomputation), ``cp_kv:b`` in a backward."""
    return [Part(COMM, f"CP-KV({phase})", 0.0, "cp_kv:b" if phase == "B" else "cp_kv:f")] if mp.cp else []


def _around(mp: ModelParallelParts, c: LayerCost, attention: bool, phase: str) -> tuple[list[Part], list[Part]]:
    """(the TP, CP and expert-TP parts before a layer's attention or MLP block in ``phase``, those
    after it): the attention's CP ring and TP gather (the backward gathers before its CP ring), its
    reduce-scatter or all-reduce after; the MLP's as :func:`_mlp_tp` says."""
    if attention:
        before = _tp(mp, 0, phase) + _cp(mp, phase) if phase == "B" else _cp(mp, phase) + _tp(mp, 0, phase)
        return before, _tp(mp, 1, phase)
    return _mlp_tp(mp, c, 0, phase), _mlp_tp(mp, c, 1, phase)


def _block(before: list[Part], part: Part, after: list[Part], c: LayerCost, key: str) -> list[Part]:
    """``before + [part] + after``; under TP-communication overlap (``overlap`` parts before or
    after) with the GEMMs it pairs with known (:meth:`LayerCost.tp_gemm_pair`, the kernel model),
    ``part`` runs as three parts of its name: the GEMMs the all-gather before it feeds (beside it),
    the rest, and the GEMMs the reduce-scatter after it drains (beside it), so that a collective
    longer than its GEMM is exposed by the difference, as with Transformer Engine's userbuffers.
    Without them the collectives run beside the whole part."""
    pair = c.tp_gemm_pair(key)
    if pair is None or not any(p.overlap for p in before + after):
        return before + [part] + after
    head, tail = pair
    rest = part.seconds - head - tail
    if rest < 0:
        return before + [part] + after
    routed = part.routed_share * part.seconds / rest if rest > 0 else 0.0
    split = [replace(part, seconds=head, routed_share=0.0)]
    split += [replace(part, seconds=rest, routed_share=routed)] if rest > 0 else []
    return before + split + [replace(part, seconds=tail, routed_share=0.0)] + after


def _recomputed_block(name: str, seconds: float, mp: ModelParallelParts, attention: bool,
                      c: LayerCost) -> list[Part]:
    """A recomputation part of layer ``c``'s attention or MLP block, with the collectives its
    forward issues under ``full`` recomputation."""
    parts = _recompute(name, seconds, c, attention)
    if not parts or not mp.full_recompute:
        return parts
    before, after = _around(mp, c, attention, "R")
    return _block(before, parts[0], after, c, "attn_r" if attention else "mlp_r")


def _recompute(name: str, seconds: float, c: LayerCost, attention: bool) -> list[Part]:
    """Layer ``c``'s recomputation part of its attention or MLP block (none when it costs nothing)."""
    routed_share, beside = (0.0, c.beside_ratio("attn_r")) if attention else (c.routed_share, c.beside_ratio("mlp_r"))
    return [Part(COMPUTE, name, seconds, routed_share=routed_share, recompute=True, beside=beside)] if seconds else []


def layer_kind(c: LayerCost) -> str:
    return "moe" if c.moe else "dense"


def _gather(c: LayerCost, name: str, zero3: bool) -> list[Part]:
    return [Part(COMM, name, 0.0, f"gather:{layer_kind(c)}")] if zero3 else []


def _scatter(c: LayerCost, zero3: bool, after=None, lane: int = 0) -> list[Part]:
    return [Part(COMM, "SCATTER(B)", 0.0, f"scatter:{layer_kind(c)}", after=after or [], lane=lane)] if zero3 else []


def _prefetched(c: LayerCost, name: str, j: int) -> Part:
    """Layer ``c``'s gather ``name`` on the data-parallel stream, tagged for the ``j``-th layer of its op."""
    return Part(COMM, name, 0.0, f"gather:{layer_kind(c)}", lane=1, tag=f"{name}{j}")


def _needing(parts: list[Part], tag: str) -> list[Part]:
    """``parts`` with the first compute part (the first to use the layer's weights) waiting for the
    data-parallel part tagged ``tag``."""
    first = next((i for i, p in enumerate(parts) if p.stream == COMPUTE), None)
    if first is None:
        return parts
    return parts[:first] + [replace(parts[first], needs=(tag,))] + parts[first + 1:]


def _layer_gathers(layers: list[LayerCost], name: str, each: list[list[Part]]) -> list[Part]:
    """The layers' parts ``each`` (per layer, in op order) under ZeRO-3: each layer's gather ``name``
    issued on the data-parallel stream when the layer before it starts (the first two at the op's
    start), each layer's first part waiting for its own."""
    out = [_prefetched(layers[0], name, 0)] if layers else []
    for j, parts in enumerate(each):
        if j + 1 < len(layers):
            out.append(_prefetched(layers[j + 1], name, j + 1))
        out += _needing(parts, f"{name}{j}")
    return out


def _issued_first(ends: list[Part], body: list[Part]) -> list[Part]:
    """The work at a stage's end (``ends``: the embedding, or the output heads) before the layers'
    ``body``, the gathers ``body`` opens with issued at the op's start, beside that work."""
    lead = 0
    while lead < len(body) and body[lead].lane:
        lead += 1
    return body[:lead] + ends + body[lead:]


def _zero3_body(layers: list[LayerCost], name: str, each: list[list[Part]], prefetch: bool) -> list[Part]:
    """The layers' parts ``each`` with each layer's gather ``name``: a layer ahead on the
    data-parallel stream (``prefetch``, :func:`_layer_gathers`) or on the op's own stream right
    before the layer, which waits for it (a per-tensor ZeRO-3, see the module)."""
    if prefetch:
        return _layer_gathers(layers, name, each)
    return [p for c, own in zip(layers, each) for p in _gather(c, name, True) + _regather(c, name) + own]


def _regather(c: LayerCost, name: str) -> list[Part]:
    """Without prefetch, a fully recomputed layer's backward gathers again what its recomputed
    forward's modules released (``regather:...``, :func:`~sim.training.dpsync.regathered_tensors`)."""
    return [Part(COMM, "REGATHER(B)", 0.0, f"regather:{layer_kind(c)}")] if name == "GATHER(B)" and c.full else []


def forward_parts(layers: list[LayerCost], ends: StageEnds, zero3: bool = False,
                  mp: ModelParallelParts = NO_MODEL_PARALLEL, prefetch: bool = True) -> list[Part]:
    """``zero3``: each layer's GATHER(F), a layer ahead on the data-parallel stream (``prefetch``)
    or blocking right before the layer (see the module)."""
    embed = [Part(COMPUTE, "EMBED(F)", ends.embed_f)] if ends.embed_f else []
    each = []
    for c in layers:
        own: list[Part] = []
        before, after = _around(mp, c, True, "F")
        own += _block(before, Part(COMPUTE, "ATTN(F)", c.attn_f, beside=c.beside_ratio("attn_f")), after, c, "attn_f")
        if c.moe:
            own.append(Part(COMM, "DISPATCH(F)", 0.0, "dispatch"))
        before, after = _around(mp, c, False, "F")
        own += _block(before, Part(COMPUTE, "MLP(F)", c.mlp_f, routed_share=c.routed_share,
                                   beside=c.beside_ratio("mlp_f")), after, c, "mlp_f")
        if c.moe:
            own.append(Part(COMM, "COMBINE(F)", 0.0, "combine"))
        each.append(own)
    body = _zero3_body(layers, "GATHER(F)", each, prefetch) if zero3 else [p for own in each for p in own]
    parts = _issued_first(embed, body)
    if ends.head_f:
        parts.append(Part(COMPUTE, "HEAD(F)", ends.head_f))
    return parts


def backward_parts(layers: list[LayerCost], ends: StageEnds, with_w: bool, zero3: bool = False,
                   mp: ModelParallelParts = NO_MODEL_PARALLEL, regather: bool = True,
                   prefetch: bool = True) -> list[Part]:
    """``regather``: under ZeRO-3, gather each layer's weights again before its input gradient
    (False: they were kept from the forward, ``RunSpec.reshard_after_forward`` off); ``prefetch``:
    as in :func:`forward_parts`."""
    head: list[Part] = []
    if ends.head_i:
        head.append(Part(COMPUTE, "HEAD(B)", ends.head_i))
        if with_w:
            head.append(Part(COMPUTE, "HEAD(W)", ends.head_w))
    each = []
    for c in reversed(layers):
        own: list[Part] = []
        if c.moe:
            own.append(Part(COMM, "COMBINE(B)", 0.0, "dispatch"))
        own += _recomputed_block("MLP(R)", c.mlp_r, mp, False, c)
        before, after = _around(mp, c, False, "B")
        own += _block(before, Part(COMPUTE, "MLP(B)", c.mlp_i, routed_share=c.routed_share,
                                   beside=c.beside_ratio("mlp_i")), after, c, "mlp_i")
        if with_w:
            own.append(Part(COMPUTE, "MLP(W)", c.mlp_w, routed_share=c.routed_share,
                            beside=c.beside_ratio("mlp_w")))
        if c.moe:
            own.append(Part(COMM, "DISPATCH(B)", 0.0, "combine"))
        own += _recomputed_block("ATTN(R)", c.attn_r, mp, True, c)
        before, after = _around(mp, c, True, "B")
        own += _block(before, Part(COMPUTE, "ATTN(B)", c.attn_i, beside=c.beside_ratio("attn_i")), after, c, "attn_i")
        if with_w:
            own.append(Part(COMPUTE, "ATTN(W)", c.attn_w, beside=c.beside_ratio("attn_w")))
            own += _scatter(c, zero3, lane=1)
        each.append(own)
    order = list(reversed(layers))
    body = _zero3_body(order, "GATHER(B)", each, prefetch) if zero3 and regather else [p for own in each for p in own]
    parts = _issued_first(head, body)
    if with_w and ends.embed_w:
        parts.append(Part(COMPUTE, "EMBED(W)", ends.embed_w))
    return parts


def weight_parts(layers: list[LayerCost], ends: StageEnds, zero3: bool = False) -> list[Part]:
    """``zero3``: each layer's SCATTER(B) on the data-parallel stream when its weight gradient ends."""
    parts = [Part(COMPUTE, "HEAD(W)", ends.head_w)] if ends.head_w else []
    for c in reversed(layers):
        parts.append(Part(COMPUTE, "MLP(W)", c.mlp_w, routed_share=c.routed_share,
                          beside=c.beside_ratio("mlp_w")))
        parts.append(Part(COMPUTE, "ATTN(W)", c.attn_w, beside=c.beside_ratio("attn_w")))
        parts += _scatter(c, zero3, lane=1)
    if ends.embed_w:
        parts.append(Part(COMPUTE, "EMBED(W)", ends.embed_w))
    return parts


def overlapped_parts(f_layers: list[LayerCost], b_layers: list[LayerCost], f_ends: StageEnds,
                     b_ends: StageEnds, zero3: bool = False,
                     mp: ModelParallelParts = NO_MODEL_PARALLEL) -> tuple[list[Part], list[Part]]:
    """(compute stream, communication stream) of an F&B unit, Figure 4 order, with dependencies
    as (stream, index) pairs in ``after``. TP and CP parts (``mp``) join the communication stream
    in the order their chunk needs them, each after the compute part that produces its data, with
    the compute part that consumes it waiting for it: so a chunk's collectives can run while the
    other chunk computes."""
    comp: list[Part] = []
    comm: list[Part] = []

    def compute(part: Part) -> tuple[int, int]:
        comp.append(part)
        return COMPUTE, len(comp) - 1

    def send(parts: list[Part], after) -> list[tuple[int, int]]:
        """Append communication ``parts``, each waiting for the ``after`` references (none: free)."""
        deps = [d for d in after if d]
        refs = []
        for part in parts:
            comm.append(replace(part, after=deps))
            refs.append((COMM, len(comm) - 1))
        return refs

    def drained(block, parts: list[Part]):
        """The reference the next part waits for: the collectives after ``block``, or ``block``."""
        refs = send(parts, [block])
        return refs[-1] if refs else block

    def recomputed(name: str, seconds: float, c: LayerCost, attention: bool) -> list[tuple[int, int]]:
        """A recomputation part (its forward's collectives under ``full``: before it, waiting for
        nothing, and after it); the references the block's input gradient waits for."""
        parts = _recompute(name, seconds, c, attention)
        if not parts:
            return []
        if not mp.full_recompute:
            compute(parts[0])
            return []
        before, after = _around(mp, c, attention, "R")
        refs = send(plain(before), [])
        ref = compute(replace(parts[0], after=refs))
        return [drained(ref, plain(after))]

    def plain(parts: list[Part]) -> list[Part]:
        return [replace(p, overlap="") for p in parts]

    last_f = None   # (stream, index) the next forward layer waits for
    last_b = None
    if f_ends.embed_f:
        last_f = compute(Part(COMPUTE, "EMBED(F)", f_ends.embed_f))
    if b_ends.head_i:
        last_b = compute(Part(COMPUTE, "HEAD(B)", b_ends.head_i))
        compute(Part(COMPUTE, "HEAD(W)", b_ends.head_w))
    b_rev = list(reversed(b_layers))
    pending_scatter: list[Part] = []
    for j in range(max(len(f_layers), len(b_rev))):
        f = f_layers[j] if j < len(f_layers) else None
        b = b_rev[j] if j < len(b_rev) else None
        attn_f = disp_f = mlp_f = comb_b = mlp_b = disp_b = gather_f = gather_b = None
        if f and zero3:
            comm += _gather(f, "GATHER(F)", zero3)
            gather_f = (COMM, len(comm) - 1)
        if b and zero3:
            comm += _gather(b, "GATHER(B)", zero3)
            gather_b = (COMM, len(comm) - 1)
        comm += pending_scatter             # the previous layer's, behind this layer's gathers
        pending_scatter = []
        if f:
            f_attn, f_mlp = _around(mp, f, True, "F"), _around(mp, f, False, "F")
            inputs = send(plain(f_attn[0]), [last_f])
            deps = [d for d in (last_f, gather_f) if d] + inputs
            attn_f = compute(Part(COMPUTE, "ATTN(F)", f.attn_f, after=deps, beside=f.beside_ratio("attn_f")))
        if b and b.moe:
            comb_b = send([Part(COMM, "COMBINE(B)", 0.0, "dispatch")], [last_b])[0]
        if b:
            redone = recomputed("MLP(R)", b.mlp_r, b, attention=False)
            grad = comb_b or last_b
            b_attn, b_mlp = _around(mp, b, True, "B"), _around(mp, b, False, "B")
            inputs = send(plain(b_mlp[0]), [grad])
            deps = [d for d in (grad, gather_b) if d] + inputs + redone
            mlp_b = compute(Part(COMPUTE, "MLP(B)", b.mlp_i, routed_share=b.routed_share, after=deps,
                                 beside=b.beside_ratio("mlp_i")))
            compute(Part(COMPUTE, "MLP(W)", b.mlp_w, routed_share=b.routed_share,
                         beside=b.beside_ratio("mlp_w")))
        if f:
            attn_f = drained(attn_f, plain(f_attn[1]))
            if f.moe:
                disp_f = send([Part(COMM, "DISPATCH(F)", 0.0, "dispatch")], [attn_f])[0]
        if b:
            mlp_b = drained(mlp_b, plain(b_mlp[1]))
            if b.moe:
                disp_b = send([Part(COMM, "DISPATCH(B)", 0.0, "combine")], [mlp_b])[0]
        if f:
            ready = disp_f or attn_f
            inputs = send(plain(f_mlp[0]), [ready])
            mlp_f = compute(Part(COMPUTE, "MLP(F)", f.mlp_f, routed_share=f.routed_share, after=[ready] + inputs,
                                 beside=f.beside_ratio("mlp_f")))
        if b:
            redone = recomputed("ATTN(R)", b.attn_r, b, attention=True)
            grad = disp_b or mlp_b
            inputs = send(plain(b_attn[0]), [grad])
            attn_b = compute(Part(COMPUTE, "ATTN(B)", b.attn_i, after=[grad] + inputs + redone,
                                  beside=b.beside_ratio("attn_i")))
            w = compute(Part(COMPUTE, "ATTN(W)", b.attn_w, beside=b.beside_ratio("attn_w")))
        if f:
            mlp_f = drained(mlp_f, plain(f_mlp[1]))
            last_f = send([Part(COMM, "COMBINE(F)", 0.0, "combine")], [mlp_f])[0] if f.moe else mlp_f
        if b:
            last_b = drained(attn_b, plain(b_attn[1]))
            pending_scatter = _scatter(b, zero3, after=[w])
    comm += pending_scatter
    if b_ends.embed_w:
        compute(Part(COMPUTE, "EMBED(W)", b_ends.embed_w))
    if f_ends.head_f:
        compute(Part(COMPUTE, "HEAD(F)", f_ends.head_f, after=[last_f] if last_f else []))
    return comp, comm


__all__ = ["NO_MODEL_PARALLEL", "ModelParallelParts", "backward_parts", "forward_parts", "layer_kind",
           "overlapped_parts", "weight_parts"]
