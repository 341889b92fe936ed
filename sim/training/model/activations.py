"""What each part of a layer keeps for its backward: saved tensors, their sizes and precisions,
under a recipe of recomputation and caching. Memory follows from the model and the recipe, not from
a knob.

Sizes are per token of a micro-batch (the attention scores, ``heads x seq_len`` per token, are
the only terms that grow with the sequence). Precisions: BF16 2 bytes, FP32 4, FP8 1 byte plus one
FP32 scale per 1x128 tile (1 + 4/128), E5M6 12 bits (1.5 bytes; its power-of-two scales are not
counted), a dropout mask 1 byte, token ids 8.

An :class:`ActivationRecipe` says, for one layer:

* ``full``: only the layer's input is stored (full recomputation, :mod:`sim.training.model.recompute`);
* ``freed``: the tensors its selectively recomputed modules do not keep
  (:data:`sim.training.model.recompute.MODULE_TENSORS`);
* ``flash``: the attention core is fused (FlashAttention, cuDNN; ``attention_kernel: flash``, the
  default): its scores are never stored, its log-sum-exp is (FP32, one per head and token), and its
  backward recomputes the scores inside the kernel; unfused (Megatron's core attention), the
  softmax (and its dropout and mask) are stored, ``5as/h`` per token in Korthikanti et al.'s terms;
* ``fp8``: Transformer Engine's FP8 caches (FP8 GEMMs under a recipe other than DeepSeek's): every
  Linear's input is kept in FP8 with its scales, what elementwise kernels need stays BF16;
* ``deepseek``: DeepSeek-V3's caches (arXiv 2412.19437, sections 3.2.3 and 3.3): Linear inputs in
  FP8 with 1x128 scales, except the input of the Linear after attention, cached in E5M6 and also
  used by the attention backward; the SwiGLU inputs in FP8 and every SwiGLU output recomputed;
  gating, normalisation and the output head in their original precision;
* ``op``: torchtitan's per-op selective checkpointing (:mod:`sim.training.model.recompute`): a layer
  keeps its input, the attention core's output and log-sum-exp, and the outputs of its odd-numbered
  GEMMs: q (wq), v (wv), the SwiGLU gate (w1) and the MLP's output (w2), all BF16 (the GEMMs'
  outputs, whatever their inputs' precision); ``compiled`` (torch.compile, ``fusion: fused``) keeps
  only those its backward reads, so not w2's output, which eager PyTorch's checkpoint keeps.

The loss (``loss_kernel``, :func:`head_tensors` and :data:`LOSS_TRANSIENT`): Megatron's fused
vocabulary-parallel cross-entropy (``fused``) keeps the FP32 softmax it computes in place, and holds
the BF16 logits beside it while it makes that copy; PyTorch's ``cross_entropy(logits.float())``
(``eager``, torchtitan's loss) keeps the FP32 log-softmax, and when its backward runs holds that
log-softmax's FP32 gradient and the FP32 input gradient beside it (8 bytes a logit: the peak of
the step on a GPU that computes a loss over a large vocabulary; 12 under TP, whose
vocabulary-parallel backward is made of separate FP32 tensors: :func:`loss_transient_bytes`);
on the BF16 logits as the head returns them (``eager-bf16``), the same in BF16: its BF16
log-softmax kept, two BF16 tensors held; compiled (``compiled``), the graph keeps the BF16 logits
and writes their BF16 gradient. With ``vocab_parallel_loss`` off the logits are gathered whole on
every GPU of a TP group before the loss (an output head whose ColwiseParallel output is
replicated), so these bytes count the whole vocabulary, not a GPU's shard.

With unfused attention and no recomputation a GPT layer with dropout keeps ``sbh(34 + 5as/h)``
bytes (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models");
recomputing ``core_attn`` leaves ``34sbh``; full recomputation ``2sbh``. Fused attention keeps
``34sbh`` plus ``4as`` of log-sum-exp without recomputing anything.

Our reading where the sources are silent (say so, do not hide it): a routed expert's gate weight is
applied to its SwiGLU output (w2 is linear, so this equals weighting the expert's output), so the
weight's gradient needs only the SwiGLU output (stored, or recomputed), not the expert's h-wide
output; the cross-entropy keeps the logits' softmax in FP32 under every recipe (Megatron's fused
vocab-parallel cross-entropy does); a token's dispatched copy is counted once per routed expert it
reaches (``topk`` copies per token under balanced routing).

Tensor parallelism (t GPUs, :mod:`sim.training.model.layout`): each tensor is tagged by how a TP group holds
it. ``tp``: split over the t GPUs (inside the attention heads and the MLP's columns: q, k, v, the
scores, the attention output, the MLP's intermediate activations, the vocabulary-parallel softmax);
``sp``: h wide and replicated on every GPU of the group unless the run uses sequence parallelism,
which splits it over the sequence (the layer inputs, normalisations' inputs and outputs, dropout
masks); untagged: replicated always (token ids). So a GPT layer keeps ``sbh(10 + 24/t + 5as/ht)``
bytes without sequence parallelism and ``sbh(34 + 5as/h)/t`` with it (Korthikanti et al. 2022,
equations 2 and 4 and Table 2). Context parallelism (c GPUs) divides the tokens a GPU holds by c
(:mod:`sim.training.model.memory`).

A deferred weight gradient (``W`` after ``I``) keeps each Linear's input (at the recipe's Linear
precision: BF16, or FP8 / E5M6 under FP8 caches) and its output gradient (BF16; FP8 under FP8
caches) from ``I`` until ``W``: :func:`weight_grad_bytes`. DeepSeek's DualPipe keeps exactly these
for its deferred weight gradients (``WeightGradStore`` holds each Linear's input and output gradient).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ...checks import InputError
from .recompute import POLICY_RECIPES, Recompute, tensors_freed
from .specs import MEMORY_POLICIES, ModelSpec

BF16, FP32, FP8, E5M6, MASK, IDS = 2.0, 4.0, 1.0 + 4.0 / 128, 1.5, 1.0, 8.0


@dataclass(frozen=True)
class SavedTensor:
    """One tensor a part keeps for the backward: ``elements`` per token of ``bytes_per_element``."""

    name: str
    elements: float
    bytes_per_element: float
    split: str = ""          # "tp": split by tensor parallelism; "sp": only with sequence parallelism; "": never

    @property
    def bytes_per_token(self) -> float:
        return self.elements * self.bytes_per_element

    def share(self, tp: int = 1, sequence_parallel: bool = False) -> float:
        """The fraction of the tensor one GPU of a TP group of ``tp`` holds."""
        return 1 / tp if self.split == "tp" or (self.split == "sp" and sequence_parallel) else 1.0


SPLITS = ("tp", "sp", "")
TP_SPLIT = ("attn.q", "attn.k", "attn.v", "attn.softmax", "attn.softmax_dropout_mask", "attn.softmax_dropout",
            "attn.logsumexp", "attn.out_proj_input", "mlp.gelu_input", "mlp.down_input", "mlp.swiglu_input", "mlp.gate",
            "shared.swiglu_input", "shared.down_input", "routed.swiglu_input", "routed.down_input", "head.softmax",
            "head.logits")
NEVER_SPLIT = ("embed.token_ids",)
ROW_PARALLEL = ("out_proj", "mlp_down", "shared_down", "routed_down")    # input split, output h wide


def split_of(name: str) -> str:
    """How a TP group holds the saved tensor ``name`` (see the module)."""
    return "tp" if name in TP_SPLIT else "" if name in NEVER_SPLIT else "sp"


class ActivationRecipe(NamedTuple):
    """What one layer keeps (see the module): ``full`` recomputation, the ``freed`` tensors of its
    recomputed modules, fused attention (``flash``), Transformer Engine's FP8 caches (``fp8``),
    DeepSeek-V3's caches (``deepseek``), torchtitan's per-op policy (``op``) compiled or eager
    (``compiled``)."""

    full: bool = False
    freed: frozenset = frozenset()
    flash: bool = True
    fp8: bool = False
    deepseek: bool = False
    op: bool = False
    compiled: bool = True

    @classmethod
    def named(cls, policy: str, attention_kernel: str = "flash", fp8: bool = False) -> "ActivationRecipe":
        """The recipe of memory policy ``policy`` (:data:`MEMORY_POLICIES`): its recomputation
        (:data:`sim.training.model.recompute.POLICY_RECIPES`), ``attention_kernel`` and, for FP8 GEMMs outside
        DeepSeek's recipe, Transformer Engine's FP8 caches."""
        if policy not in MEMORY_POLICIES:
            raise InputError(f"memory policy must be one of {', '.join(MEMORY_POLICIES)}, got {policy!r}")
        granularity, modules = POLICY_RECIPES[policy]
        return cls.of(Recompute(granularity, tuple(modules)), granularity == "full", attention_kernel, fp8,
                      policy == "deepseek-v3")

    @classmethod
    def of(cls, rc, layer_full: bool, attention_kernel: str, fp8: bool, deepseek: bool,
           fusion: str = "fused") -> "ActivationRecipe":
        """A layer's recipe from a :class:`~sim.training.model.recompute.Recompute` (``layer_full``: this layer
        is one its full recomputation covers; ``fusion``: unfused is eager PyTorch)."""
        freed = frozenset() if rc.granularity != "selective" else frozenset(tensors_freed(rc))
        return cls(layer_full, freed, attention_kernel != "unfused", fp8 and not deepseek, deepseek,
                   rc.granularity == "op", fusion != "unfused")

    def linear_input(self, after_attention: bool = False) -> float:
        """Bytes per element of a Linear's saved input."""
        if self.deepseek:
            return E5M6 if after_attention else FP8
        return FP8 if self.fp8 else BF16

    @property
    def output_grad(self) -> float:
        """Bytes per element of a deferred weight gradient's output gradient."""
        return FP8 if self.deepseek or self.fp8 else BF16


def _keep(out: list, name: str, elements: float, precision: float, recipe: ActivationRecipe) -> None:
    if elements > 0 and precision > 0 and name not in recipe.freed:
        out.append(SavedTensor(name, elements, precision, split_of(name)))


def attention_tensors(m: ModelSpec, recipe: ActivationRecipe, seq_len: int) -> list[SavedTensor]:
    """The attention block of one layer (its pre-norm included)."""
    h, a, d = m.hidden, m.heads, m.head_dim
    out: list[SavedTensor] = []
    keep = lambda name, el, prec: _keep(out, name, el, prec, recipe)   # noqa: E731
    keep("attn.norm_input", h, BF16)                  # the layer input: stored by every recipe
    if recipe.full:
        return out
    if recipe.op:                                      # torchtitan's per-op policy (GQA only: check_op_policy)
        keep("attn.q", a * d, BF16)                    # wq's output (1st GEMM)
        keep("attn.v", (m.kv_heads or a) * d, BF16)    # wv's output (3rd)
        keep("attn.logsumexp", a, FP32)                # the attention core's outputs
        keep("attn.out_proj_input", a * d, BF16)
        return out
    ds = recipe.deepseek
    if m.attention == "gqa":
        kv = m.kv_heads or a
        keep("attn.qkv_input", h, 0 if ds else recipe.linear_input())     # the norm's output
        keep("attn.q", a * d, BF16)
        keep("attn.k", kv * d, BF16)
        keep("attn.v", kv * d, BF16)
    else:
        r, q_r, kv_r = m.rope_dim, m.q_lora_rank, m.kv_lora_rank
        keep("attn.down_input", h, 0 if ds else recipe.linear_input())   # input of the q and kv down-projections
        if q_r:
            keep("attn.q_latent", q_r, BF16)                # input of the query latent's RMSNorm
            keep("attn.q_up_input", q_r, 0 if ds else recipe.linear_input())
        keep("attn.kv_latent", kv_r, BF16)
        keep("attn.k_rope", r, BF16)
        keep("attn.kv_up_input", kv_r, 0 if ds else recipe.linear_input())
        keep("attn.q", a * (d + r), 0 if ds else BF16)     # up-projection outputs: recomputed under deepseek
        keep("attn.k", a * (d + r), 0 if ds else BF16)
        keep("attn.v", a * d, 0 if ds else BF16)
    if not recipe.flash:                                   # the s x s terms
        keep("attn.softmax", a * seq_len, BF16)
        if m.dropout:
            keep("attn.softmax_dropout_mask", a * seq_len, MASK)
            keep("attn.softmax_dropout", a * seq_len, BF16)
    else:
        keep("attn.logsumexp", a, FP32)
    keep("attn.out_proj_input", a * d, recipe.linear_input(after_attention=True))
    if m.dropout:
        keep("attn.dropout_mask", h, MASK)
    return out


def _swiglu(out: list, prefix: str, inter: float, recipe: ActivationRecipe, copies: float = 1.0) -> None:
    ds = recipe.deepseek
    _keep(out, f"{prefix}.swiglu_input", 2 * inter * copies, FP8 if ds else BF16, recipe)
    _keep(out, f"{prefix}.down_input", inter * copies, 0 if ds else recipe.linear_input(), recipe)   # SwiGLU output


def mlp_tensors(m: ModelSpec, moe: bool, recipe: ActivationRecipe, routed_pairs: float,
                expert_tp: int = 1) -> list[SavedTensor]:
    """The MLP block of one layer (its pre-norm included): a dense FFN, or the router, shared
    experts and the ``routed_pairs`` (token, routed expert) pairs per token that this GPU computes;
    under expert TP (``expert_tp`` GPUs per expert) a GPU keeps the dispatched copies it gathered
    from its expert-TP group, ``expert_tp`` times its own, and 1/expert_tp of each one's
    intermediate activations (the same bytes as without it)."""
    h = m.hidden
    out: list[SavedTensor] = []
    if recipe.full:
        return out
    ds = recipe.deepseek
    keep = lambda name, el, prec: _keep(out, name, el, prec, recipe)   # noqa: E731
    if recipe.op:                                      # w1's output (5th GEMM); w2's (7th), kept by eager PyTorch
        keep("mlp.gate", m.dense_intermediate, BF16)
        keep("mlp.down_output", 0 if recipe.compiled else h, BF16)
        return out
    keep("mlp.norm_input", h, BF16)
    keep("mlp.input", h, 0 if ds else recipe.linear_input())         # the norm's output
    if not moe:
        if m.mlp_activation == "gelu":
            keep("mlp.gelu_input", m.dense_intermediate, BF16)
            keep("mlp.down_input", m.dense_intermediate, recipe.linear_input())
        else:
            _swiglu(out, "mlp", m.dense_intermediate, recipe)
    else:
        keep("router.scores", m.routed_experts, FP32)
        keep("router.topk_weights", m.topk, FP32)
        keep("router.topk_indices", m.topk, IDS)
        if m.shared_experts:
            _swiglu(out, "shared", m.expert_intermediate, recipe, m.shared_experts)
        keep("routed.input", h * routed_pairs * expert_tp, recipe.linear_input())    # the dispatched copies
        _swiglu(out, "routed", m.expert_intermediate, recipe, routed_pairs)
    if m.dropout:
        keep("mlp.dropout_mask", h, MASK)
    return out


def layer_tensors(m: ModelSpec, moe: bool, recipe: ActivationRecipe, seq_len: int, routed_pairs: float,
                  expert_tp: int = 1) -> list[SavedTensor]:
    """One transformer layer under ``recipe``."""
    return attention_tensors(m, recipe, seq_len) + mlp_tensors(m, moe, recipe, routed_pairs, expert_tp)


LOSS_TRANSIENT = {"fused": BF16, "eager": 2 * FP32, "eager-bf16": 2 * BF16, "compiled": BF16}   # beside what it keeps
LOSS_PARALLEL_TRANSIENT = 3 * FP32     # eager under TP: the vocabulary-parallel backward's zeros, exp and sum


def loss_transient_bytes(loss_kernel: str, tp: int = 1) -> float:
    """Bytes per logit (of a GPU's vocabulary shard) the loss holds beside what it keeps, at its
    peak: :data:`LOSS_TRANSIENT`; an eager loss under TP runs PyTorch's vocabulary-parallel
    cross-entropy (``torch.distributed.tensor.parallel.loss_parallel``, torchtitan's default with
    TP), whose backward builds ``(zeros_like(x) + exp(x)) * grad`` out of separate FP32 tensors: the
    zeros, the exponential and their sum beside the saved log-softmax (12 bytes; then the product
    replaces the exponential), :data:`LOSS_PARALLEL_TRANSIENT`."""
    return LOSS_PARALLEL_TRANSIENT if loss_kernel == "eager" and tp > 1 else LOSS_TRANSIENT[loss_kernel]


def head_tensors(m: ModelSpec, recipe: ActivationRecipe, loss_kernel: str = "fused",
                 vocab_parallel: bool = True) -> list[SavedTensor]:
    """One output head and its loss (the last stage has ``1 + mtp_modules`` of them): the final
    norm's input and output (the head stays in BF16) and what the loss keeps (see the module): the
    FP32 softmax (``fused``) or log-softmax (``eager``) of the logits, their BF16 log-softmax
    (``eager-bf16``), or the BF16 logits (``compiled``); split over TP (each GPU its vocabulary
    shard) unless the logits are gathered whole before the loss (``vocab_parallel`` off)."""
    out: list[SavedTensor] = []
    head = recipe._replace(full=False)
    _keep(out, "head.norm_input", m.hidden, BF16, head)
    _keep(out, "head.input", m.hidden, 0 if recipe.deepseek else BF16, head)
    name, precision = ("head.softmax", FP32) if loss_kernel in ("fused", "eager") else ("head.logits", BF16)
    out.append(SavedTensor(name, m.vocab, precision, "tp" if vocab_parallel else ""))
    return out


def mtp_extra_tensors(m: ModelSpec, recipe: ActivationRecipe) -> list[SavedTensor]:
    """A multi-token-prediction module besides its transformer layer and head: the RMSNorm inputs of
    the previous depth's hidden state and of the next token's embedding, and the projection's input."""
    out: list[SavedTensor] = []
    _keep(out, "mtp.norm_inputs", 2 * m.hidden, BF16, recipe)
    _keep(out, "mtp.proj_input", 2 * m.hidden, 0 if recipe.deepseek or recipe.full else recipe.linear_input(), recipe)
    return out


def embedding_tensors() -> list[SavedTensor]:
    """The first stage keeps the token ids for the embedding's weight gradient."""
    return [SavedTensor("embed.token_ids", 1, IDS, split_of("embed.token_ids"))]


def linear_shapes(m: ModelSpec, moe: bool, routed_pairs: float,
                  expert_tp: int = 1) -> list[tuple[str, float, float, bool]]:
    """Every Linear of one layer: (name, input elements, output elements, input is the attention
    output) per token; inputs shared by several Linears are listed once. Under expert TP a routed
    expert's h-wide side (the up-projection's input, the down-projection's output) covers the
    copies gathered from its ``expert_tp`` GPUs."""
    h, a, d = m.hidden, m.heads, m.head_dim
    if m.attention == "gqa":
        kv = m.kv_heads or a
        rows = [("qkv", h, (a + 2 * kv) * d, False)]
    else:
        r, q_r, kv_r = m.rope_dim, m.q_lora_rank, m.kv_lora_rank
        rows = [("q_kv_down", h, (q_r if q_r else a * (d + r)) + kv_r + r, False)]
        if q_r:
            rows.append(("q_up", q_r, a * (d + r), False))
        rows.append(("kv_up", kv_r, a * 2 * d, False))
    rows.append(("out_proj", a * d, h, True))
    if not moe:
        n_up = 2 if m.mlp_activation == "swiglu" else 1
        rows += [("mlp_up", h, n_up * m.dense_intermediate, False), ("mlp_down", m.dense_intermediate, h, False)]
    else:
        ie = m.expert_intermediate
        rows.append(("router_and_shared_up", h, m.routed_experts + 2 * ie * m.shared_experts, False))
        if m.shared_experts:
            rows.append(("shared_down", ie * m.shared_experts, h * m.shared_experts, False))
        rows += [("routed_up", h * routed_pairs * expert_tp, 2 * ie * routed_pairs, False),
                 ("routed_down", ie * routed_pairs, h * routed_pairs * expert_tp, False)]
    return rows


def weight_grad_bytes(m: ModelSpec, moe: bool, recipe: ActivationRecipe, routed_pairs: float, tp: int = 1,
                      sequence_parallel: bool = False, expert_tp: int = 1) -> float:
    """Bytes per token a layer keeps on one GPU from its ``I`` to its deferred ``W``: each Linear's
    input (at the recipe's precision) and its output gradient (BF16; FP8 under FP8 caches, whose
    weight gradients are FP8 GEMMs: the DeepSeek-V3 report, section 3.3.1). Under TP a
    column-parallel Linear's input is h wide (split only with sequence parallelism) and its output
    split; a row-parallel one's (:data:`ROW_PARALLEL`) the other way round."""
    wide = 1 / tp if sequence_parallel else 1.0
    total = 0.0
    for name, inputs, outputs, after_attention in linear_shapes(m, moe, routed_pairs, expert_tp):
        share_in, share_out = (1 / tp, wide) if name in ROW_PARALLEL else (wide, 1 / tp)
        total += inputs * share_in * recipe.linear_input(after_attention) + outputs * share_out * recipe.output_grad
    return total


def head_weight_grad_bytes(m: ModelSpec, tp: int = 1, sequence_parallel: bool = False) -> float:
    """The output head's deferred ``W`` on one GPU: its input (BF16: the head keeps its original
    precision; split over TP only with sequence parallelism) and the logits' gradient (BF16,
    vocabulary-parallel)."""
    return m.hidden * BF16 / (tp if sequence_parallel else 1) + m.vocab * BF16 / tp


def mtp_weight_grad_bytes(m: ModelSpec, recipe: ActivationRecipe) -> float:
    """An MTP module's projection (2h -> h) for its deferred ``W``, besides its layer's."""
    return 2 * m.hidden * recipe.linear_input() + m.hidden * recipe.output_grad


def backward_gradient_tensors(m: ModelSpec, moe: bool, routed_pairs: float) -> list[SavedTensor]:
    """The gradients one layer's backward holds at once beside what the layer keeps, at their most:
    inside its MLP's backward, the gradient arriving at the layer's output and the residual stream's
    (``h`` each, split by sequence parallelism), and the MLP's intermediate gradients: a SwiGLU
    down-projection's input gradient and the two it yields, the gate's and the up projection's
    (``3 x intermediate``; the first is freed only once both exist, eagerly or fused), a GELU MLP's
    two; an MoE layer's for its ``routed_pairs`` (token, routed expert) pairs per token and its
    shared experts. All BF16 (activation gradients keep the activations' precision, FP8 recipes
    included); the attention core's (query, key and value gradients) are smaller and not counted.
    Llama 3 8B: ``(2 x 4,096 + 3 x 14,336) x 2`` = 102,400 bytes a token."""
    inter = (3 if m.mlp_activation == "swiglu" else 2) * m.dense_intermediate
    if moe:
        inter = 3 * m.expert_intermediate * (routed_pairs + m.shared_experts)
    return [SavedTensor("grad.output_and_residual", 2 * m.hidden, BF16, "sp"),
            SavedTensor("grad.mlp_intermediate", inter, BF16, "tp")]


def bytes_per_token(tensors: list[SavedTensor], tp: int = 1, sequence_parallel: bool = False) -> float:
    """Bytes per token of ``tensors`` on one GPU of a TP group of ``tp`` (:meth:`SavedTensor.share`)."""
    return sum(t.bytes_per_token * t.share(tp, sequence_parallel) for t in tensors)


__all__ = ["ActivationRecipe", "BF16", "E5M6", "FP32", "FP8", "LOSS_PARALLEL_TRANSIENT", "LOSS_TRANSIENT",
           "backward_gradient_tensors",
           "ROW_PARALLEL", "SPLITS", "SavedTensor", "split_of", "attention_tensors", "bytes_per_token",
           "loss_transient_bytes", "embedding_tensors", "head_tensors", "head_weight_grad_bytes", "layer_tensors",
           "linear_shapes",
           "mlp_tensors", "mtp_extra_tensors", "mtp_weight_grad_bytes", "weight_grad_bytes"]
