"""The kernels of a transformer layer, its embedding and its head: one :class:`Op` per kernel, with
its FLOPs, the HBM bytes it moves and the shape it runs at on one GPU.

The layer is described by a :class:`LayerShape`: the model's sizes and one GPU's share of a
micro-batch (``tokens`` = micro-batch size x sequence / CP; tensor parallelism ``tp`` splits heads
and the MLP's columns; sequence parallelism runs the normalisations and residual adds on
``tokens / tp``; ``ep`` and ``expert_tp`` place the routed experts). Each op belongs to a block
(``attn`` or ``mlp``, the embedding ``embed``, the head ``head``) and a phase: ``f`` (forward),
``i`` (backward for inputs) or ``w`` (backward for weights), the parts the chunk model sums.

Per layer, forward (B = 2 bytes a BF16 element; ``n`` = tokens, ``n_s`` = the norm's tokens):

* attention: input norm (read and write ``n_s h`` elements); ``gqa``: the QKV GEMM (``n x h``
  by ``h x (H + 2 KV) d / tp``); ``mla``: the query and KV down-projections, their norms, the two
  up-projections; rotary embedding on the queries and keys (not for a GPT-style model, whose GELU
  MLP goes with learned absolute positions); the attention core: fused (``attention_kernel: flash``,
  FlashAttention FLOPs ``n s H (d_qk + d_v) / tp`` for the causal half) or Megatron's unfused core
  (``unfused``: the scores in HBM, :meth:`_Block.unfused_attention_core`); the output projection;
  dropout (if the model has it) and the residual add (read two, write one ``n_s h``);
* dense MLP: norm; the up (and gate) GEMM; GELU or SwiGLU; the down GEMM; residual add;
* MoE MLP: norm; the router GEMM (``h x E``, BF16) and its softmax and top-k; the permutation
  (gather each token's ``topk`` copies); the routed experts as grouped GEMMs over the GPU's ``E /
  ep`` experts, each with ``tokens_r topk expert_tp ep / E`` rows (balanced routing); SwiGLU; the
  un-permutation (the weighted sum of each token's copies); the shared experts as a dense MLP;
  residual add.

Backward: a GEMM ``m x n x k`` has its input gradient ``m x k x n`` (phase ``i``) and its weight
gradient ``k x n x m`` (phase ``w``), whose output moves ``wgrad_out_bytes`` an element (2: a BF16
gradient written; 8: added in place into an FP32 main gradient, read and written, as Megatron's
gradient-accumulation fusion does; ``RunSpec.wgrad_out_bytes``), followed, where the trainer accumulates
a written gradient into its main gradient in a kernel of its own, by that add (``grad_add``,
``wgrad_add_bytes`` an element: ``RunSpec.wgrad_add_bytes``); a memory-bound op's input gradient
moves ``backward_factor`` times its forward bytes; the attention core's backward runs at 2.5 times
the forward's FLOPs (it recomputes the scores; 2 of the 2.5 are useful work). FP8 GEMMs
(``precision`` fp8 or mxfp8) cast their activation input (fused into the norm or the activation
that produces it under ``fusion: fused``), cast and transpose their output gradient, and
transpose their saved input for the weight gradient. The router and the head stay in BF16.

``fusion``: ``fused`` (Transformer Engine's fused normalisation with its FP8 cast, a fused SwiGLU
and rotary embedding, Megatron's fused permutation and cross-entropy: one kernel per op) or
``unfused`` (each op as the eager PyTorch kernels it is made of: :data:`UNFUSED`).
"""
from __future__ import annotations

from typing import NamedTuple

BF16 = 2.0
FP32 = 4.0
FUSIONS = ("fused", "unfused")
LOSS_KERNELS = ("fused", "eager", "eager-bf16", "compiled")   # how the trainer computes the cross-entropy (head_ops)
ATTENTION_KERNELS = ("flash", "flash2", "unfused")   # flash2: FlashAttention-2 on a GPU whose own kernel is faster
# unfused: (kernels, factor on bytes) of an op run as eager PyTorch pieces
UNFUSED = {"softmax": (3, 1.5), "norm": (4, 2.0), "rope": (4, 2.0), "swiglu": (3, 5 / 3), "gelu": (2, 1.5), "residual": (1, 1.0),
           "router_topk": (4, 2.0), "permute": (2, 1.5), "unpermute": (3, 1.5), "cast": (1, 1.0),
           "cross_entropy": (4, 2.0), "embedding": (1, 1.0), "dropout": (1, 1.0)}


class Op(NamedTuple):
    """One kernel. ``flops``: executed FLOPs (a GEMM's ``2 groups m n k``; attention: FlashAttention's
    count); ``useful``: the FLOPs MFU counts; ``bytes``: HBM bytes of a memory-bound op (a GEMM's and
    the attention's own traffic is their models'); ``shape``: a GEMM's ``(groups, m, n, k)``, the
    attention's ``(tokens, seq_len, head_dim, causal)``, a memory op's ``(elements,)``; ``routed``:
    it scales with the routed experts' load; ``kernels``: the launches it stands for."""

    name: str
    block: str
    phase: str
    kind: str            # "gemm", "attention" or "memory"
    flops: float = 0.0
    useful: float = 0.0
    bytes: float = 0.0
    shape: tuple = ()
    precision: str = "bf16"
    routed: bool = False
    kernels: int = 1
    direction: str = ""  # attention: "fwd" or "bwd"
    out_bytes: float = BF16  # a GEMM: HBM bytes per output element (a weight gradient added in place: read + write)


class LayerShape(NamedTuple):
    """One GPU's share of one layer for one micro-batch (see the module); sizes are counts."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    tokens: float                 # on this GPU: micro-batch size x seq_len / cp
    seq_len: int
    attention: str = "gqa"        # "gqa" or "mla"
    rope_dim: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    moe: bool = False
    dense_intermediate: int = 0
    mlp_activation: str = "swiglu"
    routed_experts: int = 0
    shared_experts: int = 0
    expert_intermediate: int = 0
    topk: int = 0
    dropout: bool = False
    tp: int = 1
    cp: int = 1
    ep: int = 1
    expert_tp: int = 1
    sequence_parallel: bool = False
    precision: str = "bf16"
    fusion: str = "fused"
    extra_gemm: float = 0.0       # an MTP module's 2h x h projection's weights (0: none)
    attention_kernel: str = "flash"   # "flash", "flash2" (fused, FlashAttention-style) or "unfused" (scores in HBM)
    wgrad_out_bytes: float = BF16     # a weight-gradient GEMM's bytes per output element (RunSpec.wgrad_out_bytes)
    wgrad_add_bytes: float = 0.0      # a separate accumulation kernel's bytes per weight-gradient element (0: none)

    @property
    def norm_tokens(self) -> float:
        """Tokens a normalisation, dropout or residual add runs on: the TP shard under SP."""
        return self.tokens / self.tp if self.sequence_parallel else self.tokens

    @property
    def fp8(self) -> bool:
        return self.precision in ("fp8", "mxfp8")


def _memory(name: str, block: str, phase: str, nbytes: float, elements: float, fusion: str, kind: str = "",
            routed: bool = False) -> Op:
    kernels, factor = UNFUSED.get(kind or name, (1, 1.0)) if fusion == "unfused" else (1, 1.0)
    return Op(name, block, phase, "memory", bytes=nbytes * factor, shape=(elements,), routed=routed, kernels=kernels)


class _Block:
    """Collects a block's ops: forward ops as they run, their backward counterparts in reverse."""

    def __init__(self, L: LayerShape, block: str):
        self.L, self.block = L, block
        self.f: list[Op] = []
        self.i: list[Op] = []       # in forward order; reversed at the end
        self.w: list[Op] = []

    def gemm(self, name: str, m: float, n: float, k: float, groups: float = 1, *, precision: str | None = None,
             routed: bool = False, cast_fused: bool = False):
        """A GEMM ``groups x (m x n x k)`` and its input and weight gradients (with FP8's casts)."""
        L, b = self.L, self.block
        prec = precision or L.precision
        fp8 = prec in ("fp8", "mxfp8")
        shape = (groups, m, n, k)
        flops = 2.0 * groups * m * n * k
        if fp8 and not (cast_fused and L.fusion == "fused"):
            self.f.append(_memory(f"{name}.cast", b, "f", groups * m * k * 3.0, groups * m * k, L.fusion, "cast",
                                  routed))
        self.f.append(Op(name, b, "f", "gemm", flops, flops, shape=shape, precision=prec, routed=routed))
        grads = []
        if fp8:       # the output gradient cast and transposed (for both GEMMs), the saved input transposed
            grads.append(_memory(f"{name}.dgrad_cast", b, "i", groups * m * n * 4.0, groups * m * n, L.fusion, "cast",
                                 routed))
        grads.append(Op(f"{name}.dgrad", b, "i", "gemm", flops, flops, shape=(groups, m, k, n), precision=prec,
                        routed=routed))
        self.i.append(grads)
        if fp8:
            self.w.append(_memory(f"{name}.x_transpose", b, "w", groups * m * k * 2.0, groups * m * k, L.fusion,
                                  "cast", routed))
        self.w.append(Op(f"{name}.wgrad", b, "w", "gemm", flops, flops, shape=(groups, k, n, m), precision=prec,
                         routed=routed, out_bytes=L.wgrad_out_bytes))
        if L.wgrad_add_bytes:       # the trainer adds the fresh gradient into the main gradient in a kernel of its own
            add = _memory(f"{name}.grad_add", b, "w", groups * k * n * L.wgrad_add_bytes, groups * k * n, L.fusion,
                          "grad_add", routed)
            self.w.append(add._replace(kernels=max(1, round(groups))))     # one add per weight tensor

    def memory(self, name: str, read: float, write: float, backward_factor: float, *, kind: str = "",
               routed: bool = False, elements: float | None = None):
        """A memory-bound op reading ``read`` and writing ``write`` elements (BF16), and its input
        gradient moving ``backward_factor`` times its bytes."""
        L, b = self.L, self.block
        nbytes = (read + write) * BF16
        el = elements if elements is not None else write
        self.f.append(_memory(name, b, "f", nbytes, el, L.fusion, kind, routed))
        if backward_factor:
            self.i.append([_memory(f"{name}.grad", b, "i", nbytes * backward_factor, el, L.fusion, kind, routed)])

    def attention_core(self, flops: float, seq_len: float, head_dim: float):
        b, shape = self.block, (self.L.tokens, seq_len, head_dim, 1)
        self.f.append(Op("attn_core", b, "f", "attention", flops, flops, shape=shape, direction="fwd"))
        self.i.append([Op("attn_core.bwd", b, "i", "attention", 2.5 * flops, 2.0 * flops, shape=shape, direction="bwd")])

    def unfused_attention_core(self, d_qk: float, d_v: float):
        """Attention as Megatron's unfused core runs it, per head of each of the micro-batch's
        sequences: the full ``s x s`` scores by a batched GEMM (the mask is applied after), the fused
        scale-mask-softmax (read and write the scores), attention dropout if the model has it (and its
        one-byte mask), the batched GEMM with the values; backward: the value and score gradients,
        dropout's and softmax's backward, the query and key gradients. The scores are stored for the
        backward (:mod:`sim.training.model.activations`). Useful FLOPs: the causal half, as the fused core's."""
        L, b = self.L, self.block
        s = L.seq_len
        rows = s / L.cp                                # a GPU's query rows of each sequence (CP: its share)
        heads = L.heads / L.tp * (L.tokens / rows)     # (head, sequence) pairs on this GPU
        scores = heads * rows * s

        def bmm(name, phase, m, n, k):                 # MFU counts the causal half of what runs
            flops = 2.0 * heads * m * n * k
            return Op(name, b, phase, "gemm", flops, flops / 2, shape=(heads, m, n, k), precision="bf16")

        self.f += [bmm("attn_scores", "f", rows, s, d_qk),
                   _memory("attn_softmax", b, "f", scores * 2 * BF16, scores, L.fusion, "softmax")]
        backward = [_memory("attn_softmax.grad", b, "i", scores * 3 * BF16, scores, L.fusion, "softmax")]
        if L.dropout:
            self.f.append(_memory("attn_dropout", b, "f", scores * 2.5 * BF16, scores, L.fusion, "dropout"))
            backward.insert(0, _memory("attn_dropout.grad", b, "i", scores * 2.5 * BF16, scores, L.fusion, "dropout"))
        self.f.append(bmm("attn_values", "f", rows, d_v, s))
        self.i.append([bmm("attn_values.dgrad", "i", rows, s, d_v), bmm("attn_values.vgrad", "i", s, d_v, rows)]
                      + backward + [bmm("attn_scores.qgrad", "i", rows, d_qk, s), bmm("attn_scores.kgrad", "i", s, d_qk, rows)])

    def ops(self) -> list[Op]:
        backward = [op for group in reversed(self.i) for op in group]
        return self.f + backward + self.w


def attention_ops(L: LayerShape) -> list[Op]:
    """The attention block's kernels (see the module), forward then backward."""
    B = _Block(L, "attn")
    n, ns, h, t = L.tokens, L.norm_tokens, L.hidden, L.tp
    H, d = L.heads, L.head_dim
    B.memory("norm", ns * h, ns * h, 1.5, kind="norm")
    if L.extra_gemm:                             # an MTP module: its 2h -> h projection of [hidden; embedding]
        B.gemm("mtp_proj", n, L.extra_gemm / (2 * h) / t, 2 * h)
    if L.attention == "mla":
        q_in = L.q_lora_rank or h
        if L.q_lora_rank:
            B.gemm("q_down", n, L.q_lora_rank / t, h, cast_fused=True)
            B.memory("q_norm", n * L.q_lora_rank / t, n * L.q_lora_rank / t, 1.5, kind="norm")
        B.gemm("kv_down", n, (L.kv_lora_rank + L.rope_dim) / t, h, cast_fused=True)
        B.memory("kv_norm", n * L.kv_lora_rank / t, n * L.kv_lora_rank / t, 1.5, kind="norm")
        B.gemm("q_up", n, H * (d + L.rope_dim) / t, q_in, cast_fused=bool(L.q_lora_rank))
        B.gemm("kv_up", n, H * 2 * d / t, L.kv_lora_rank, cast_fused=True)
        rope = n * (H + 1) * L.rope_dim / t
        d_qk, d_v = d + L.rope_dim, d
    else:
        kvh = L.kv_heads or H
        B.gemm("qkv", n, (H + 2 * kvh) * d / t, h, cast_fused=True)
        rope = n * (H + kvh) * d / t
        d_qk = d_v = d
    if L.mlp_activation != "gelu":                   # GPT-style models (GELU) learn absolute positions instead
        B.memory("rope", rope, rope, 1.0, kind="rope")
    if L.attention_kernel == "unfused":
        B.unfused_attention_core(d_qk, d_v)
    else:
        core = n * L.seq_len * H * (d_qk + d_v) / t       # causal: half of the s x s scores (per GPU: / tp cp)
        B.attention_core(core, L.seq_len / L.cp, (d_qk + d_v) / 2)
    B.gemm("out_proj", n, h, H * d_v / t)
    _residual(B, L)
    return B.ops()


def _residual(B: _Block, L: LayerShape):
    ns, h = L.norm_tokens, L.hidden
    if L.dropout:
        B.memory("dropout", ns * h, ns * h * 1.5, 1.0, kind="dropout")    # the mask: one byte an element
    B.memory("residual", 2 * ns * h, ns * h, 1.0, kind="residual")


def _dense(B: _Block, L: LayerShape, intermediate: float, activation: str, name: str = "fc"):
    """A dense MLP's GEMMs and activation on all the replica's tokens (after SP's gather)."""
    n, h, t = L.tokens, L.hidden, L.tp
    width = intermediate / t
    if activation == "swiglu":
        B.gemm(f"{name}1", n, 2 * width, h, cast_fused=True)
        B.memory(f"{name}.swiglu", 2 * n * width, n * width, 5 / 3, kind="swiglu")
    else:
        B.gemm(f"{name}1", n, width, h, cast_fused=True)
        B.memory(f"{name}.gelu", n * width, n * width, 1.5, kind="gelu")
    B.gemm(f"{name}2", n, h, width, cast_fused=True)


def mlp_ops(L: LayerShape) -> list[Op]:
    """The MLP block's kernels: a dense FFN, or the MoE block (see the module)."""
    B = _Block(L, "mlp")
    ns, h = L.norm_tokens, L.hidden
    B.memory("norm", ns * h, ns * h, 1.5, kind="norm")
    if not L.moe:
        _dense(B, L, L.dense_intermediate, L.mlp_activation)
        _residual(B, L)
        return B.ops()
    E, k = L.routed_experts, L.topk
    rows_in = L.tokens / L.tp                       # each GPU routes its own sequence shard (SP)
    B.gemm("router", rows_in, E, h, precision="bf16")
    B.memory("router_topk", rows_in * E * 2, rows_in * k * 6, 1.0, kind="router_topk", elements=rows_in * E)
    if L.fp8:                                       # tokens quantized once before the dispatch (FP8 on the wire)
        B.memory("dispatch.cast", rows_in * h, rows_in * h / 2, 1.0, kind="cast")
    B.memory("permute", rows_in * h, rows_in * k * h, 1.0, kind="permute")
    groups = E / L.ep                               # the GPU's experts
    rows = rows_in * k * L.expert_tp                # copies arriving here (gathered over expert TP)
    width = L.expert_intermediate / L.expert_tp
    B.gemm("experts1", rows / groups, 2 * width, h, groups, routed=True, cast_fused=True)
    B.memory("experts.swiglu", 2 * rows * width, rows * width, 5 / 3, kind="swiglu", routed=True)
    B.gemm("experts2", rows / groups, h, width, groups, routed=True, cast_fused=True)
    B.memory("unpermute", rows_in * k * h, rows_in * h, 1.5, kind="unpermute")
    if L.shared_experts:
        _dense(B, L, L.shared_experts * L.expert_intermediate, "swiglu", name="shared")
    _residual(B, L)
    return B.ops()


def embedding_ops(tokens: float, hidden: int, fusion: str = "fused") -> list[Op]:
    """The first stage's embedding: a gather of ``2 h`` bytes a token (forward), a scatter-add into
    its FP32 gradient (weight gradient: read 2 h, read and write 4 h + 4 h)."""
    return [_memory("embedding", "embed", "f", tokens * hidden * 2 * BF16, tokens * hidden, fusion, "embedding"),
            _memory("embedding.wgrad", "embed", "w", tokens * hidden * 10, tokens * hidden, fusion, "embedding")]


LOSS_BYTES = {"fused": (8.0, 6.0), "eager": (8.0, 6.0), "eager-bf16": (4.0, 3.0), "compiled": (2.0, 4.0)}  # fwd, bwd


def head_ops(tokens: float, norm_tokens: float, hidden: int, vocab: float, tp: int, fusion: str = "fused",
             loss_kernel: str = "fused", wgrad_out_bytes: float = BF16, wgrad_add_bytes: float = 0.0) -> list[Op]:
    """The last stage's final norm, output head (BF16, vocabulary-parallel) and cross-entropy
    (:data:`LOSS_BYTES` per logit on a GPU, ``V / tp`` a token): a fused loss reads the logits as
    FP32 and writes their softmax (8 bytes forward, 6 backward); an eager one (PyTorch's
    ``cross_entropy`` on ``logits.float()``) runs as the unfused kernels it is made of whatever
    ``fusion`` says (:data:`UNFUSED`: its cast, log-softmax and loss), on BF16 logits
    (``eager-bf16``) at half those bytes; a compiled one reads the BF16 logits forward and writes
    their BF16 gradient backward. ``wgrad_out_bytes``, ``wgrad_add_bytes``: the head's weight gradient's, as
    a layer's."""
    B = _Block(LayerShape(hidden, 1, 1, 1, tokens, 1, tp=tp, fusion=fusion, wgrad_out_bytes=wgrad_out_bytes,
                          wgrad_add_bytes=wgrad_add_bytes), "head")
    B.memory("final_norm", norm_tokens * hidden, norm_tokens * hidden, 1.5, kind="norm")
    B.gemm("head", tokens, vocab / tp, hidden, precision="bf16")
    forward, backward = LOSS_BYTES[loss_kernel]
    loss_fusion = "unfused" if loss_kernel.startswith("eager") else fusion
    logits = tokens * vocab / tp
    B.f.append(_memory("cross_entropy", "head", "f", logits * forward, logits, loss_fusion))
    B.i.append([_memory("cross_entropy.grad", "head", "i", logits * backward, logits, loss_fusion)])
    return B.ops()


def layer_ops(L: LayerShape) -> list[Op]:
    """Every kernel of one layer: the attention block's, then the MLP block's."""
    return attention_ops(L) + mlp_ops(L)


__all__ = ["ATTENTION_KERNELS", "FUSIONS", "LOSS_BYTES", "LOSS_KERNELS", "LayerShape", "Op", "UNFUSED", "attention_ops",
           "embedding_ops", "head_ops", "layer_ops", "mlp_ops"]
