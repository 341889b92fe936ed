"""What each part of a layer keeps for its backward: saved tensors, their sizes and precisions,
under a memory policy. Memory follows from the model and the policy, not from a knob.

Sizes are per token of a micro-batch (the attention scores, ``heads x seq_len`` per token, are
the only terms that grow with the sequence). Precisions: BF16 2 bytes, FP32 4, FP8 1 byte plus one
FP32 scale per 1x128 tile (1 + 4/128), E5M6 12 bits (1.5 bytes; its power-of-two scales are not
counted), a dropout mask 1 byte, token ids 8.

Policies (``RunSpec.memory_policy``):

* ``none``: every tensor the backward reads is stored, in BF16 (Korthikanti et al. 2022, "Reducing
  Activation Recomputation in Large Transformer Models": for a GPT layer with dropout this is
  ``sbh(34 + 5as/h)`` bytes);
* ``selective``: the attention core (softmax, its dropout, attention over V) is recomputed, the
  rest stored: ``34sbh`` for the GPT layer; the recomputation costs the core's forward FLOPs again;
* ``full``: only each transformer layer's input is stored (``2sbh``); the backward runs the layer's
  forward again (the output head and loss are not recomputed);
* ``deepseek-v3``: as the DeepSeek-V3 report describes it (arXiv 2412.19437, sections 3.2.3 and
  3.3): every RMSNorm and the MLA up-projections are recomputed (their inputs are stored: the
  layer input, the query and KV latents); Linear inputs that are not recomputed are cached in FP8
  with 1x128 scales, except the input of the Linear after attention, cached in E5M6 and also used by
  the attention backward; the attention core is kernel-fused (FlashAttention-style: its scores are
  not stored, its log-sum-exp is, in FP32); the SwiGLU inputs are cached in FP8 and its output is
  recomputed; gating, normalisation and the output head stay in their original precision.

Our reading where the report is silent (say so, do not hide it): a routed expert's gate weight is
applied to its SwiGLU output (w2 is linear, so this equals weighting the expert's output), so the
weight's gradient needs only the SwiGLU output (stored, or recomputed under ``deepseek-v3``), not
the expert's h-wide output; the cross-entropy keeps the logits' softmax in FP32 under every policy
(Megatron's fused vocab-parallel cross-entropy does); a token's dispatched copy is counted once per
routed expert it reaches (``topk`` copies per token under balanced routing).

Tensor parallelism (t GPUs, :mod:`sim.moe.layout`): each tensor is tagged by how a TP group holds
it. ``tp``: split over the t GPUs (inside the attention heads and the MLP's columns: q, k, v, the
scores, the attention output, the MLP's intermediate activations, the vocabulary-parallel softmax);
``sp``: h wide and replicated on every GPU of the group unless the run uses sequence parallelism,
which splits it over the sequence (the layer inputs, normalisations' inputs and outputs, dropout
masks); untagged: replicated always (token ids). So a GPT layer keeps ``sbh(10 + 24/t + 5as/ht)``
bytes without sequence parallelism and ``sbh(34 + 5as/h)/t`` with it (Korthikanti et al. 2022,
equations 2 and 4 and Table 2). Context parallelism (c GPUs) divides the tokens a GPU holds by c
(:mod:`sim.moe.memory`).

A deferred weight gradient (``W`` after ``I``) keeps each Linear's input (at the policy's Linear
precision: BF16, or FP8 / E5M6 under ``deepseek-v3``) and its output gradient (BF16) from ``I`` until
``W``: :func:`weight_grad_bytes` (under ``deepseek-v3`` the output gradient in FP8: the weight
gradients are FP8 GEMMs). DeepSeek's DualPipe keeps exactly these for its deferred weight gradients
(``WeightGradStore`` holds each Linear's input and output gradient).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import InputError
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
            "attn.logsumexp", "attn.out_proj_input", "mlp.gelu_input", "mlp.down_input", "mlp.swiglu_input",
            "shared.swiglu_input", "shared.down_input", "routed.swiglu_input", "routed.down_input", "head.softmax")
NEVER_SPLIT = ("embed.token_ids",)
ROW_PARALLEL = ("out_proj", "mlp_down", "shared_down", "routed_down")    # input split, output h wide


def split_of(name: str) -> str:
    """How a TP group holds the saved tensor ``name`` (see the module)."""
    return "tp" if name in TP_SPLIT else "" if name in NEVER_SPLIT else "sp"


def _keep(out: list, name: str, elements: float, precision: float) -> None:
    if elements > 0 and precision > 0:
        out.append(SavedTensor(name, elements, precision, split_of(name)))


def attention_tensors(m: ModelSpec, policy: str, seq_len: int) -> list[SavedTensor]:
    """The attention block of one layer (its pre-norm included)."""
    h, a, d = m.hidden, m.heads, m.head_dim
    out: list[SavedTensor] = []
    _keep(out, "attn.norm_input", h, BF16)                  # the layer input: stored by every policy
    if policy == "full":
        return out
    ds = policy == "deepseek-v3"
    scores = policy == "none"                               # the s x s terms
    if m.attention == "gqa":
        kv = m.kv_heads or a
        _keep(out, "attn.qkv_input", h, 0 if ds else BF16)  # RMSNorm output: recomputed under deepseek-v3
        _keep(out, "attn.q", a * d, BF16)
        _keep(out, "attn.k", kv * d, BF16)
        _keep(out, "attn.v", kv * d, BF16)
    else:
        r, q_r, kv_r = m.rope_dim, m.q_lora_rank, m.kv_lora_rank
        _keep(out, "attn.down_input", h, 0 if ds else BF16)       # input of the q and kv down-projections
        if q_r:
            _keep(out, "attn.q_latent", q_r, BF16)                # input of the query latent's RMSNorm
            _keep(out, "attn.q_up_input", q_r, 0 if ds else BF16)
        _keep(out, "attn.kv_latent", kv_r, BF16)
        _keep(out, "attn.k_rope", r, BF16)
        _keep(out, "attn.kv_up_input", kv_r, 0 if ds else BF16)
        _keep(out, "attn.q", a * (d + r), 0 if ds else BF16)     # up-projection outputs: recomputed
        _keep(out, "attn.k", a * (d + r), 0 if ds else BF16)
        _keep(out, "attn.v", a * d, 0 if ds else BF16)
    if scores:
        _keep(out, "attn.softmax", a * seq_len, BF16)
        if m.dropout:
            _keep(out, "attn.softmax_dropout_mask", a * seq_len, MASK)
            _keep(out, "attn.softmax_dropout", a * seq_len, BF16)
    if ds:
        _keep(out, "attn.logsumexp", a, FP32)
    _keep(out, "attn.out_proj_input", a * d, E5M6 if ds else BF16)
    if m.dropout:
        _keep(out, "attn.dropout_mask", h, MASK)
    return out


def _swiglu(out: list, prefix: str, inter: float, policy: str, copies: float = 1.0) -> None:
    ds = policy == "deepseek-v3"
    _keep(out, f"{prefix}.swiglu_input", 2 * inter * copies, FP8 if ds else BF16)
    _keep(out, f"{prefix}.down_input", inter * copies, 0 if ds else BF16)     # SwiGLU output


def mlp_tensors(m: ModelSpec, moe: bool, policy: str, routed_pairs: float, expert_tp: int = 1) -> list[SavedTensor]:
    """The MLP block of one layer (its pre-norm included): a dense FFN, or the router, shared
    experts and the ``routed_pairs`` (token, routed expert) pairs per token that this GPU computes;
    under expert TP (``expert_tp`` GPUs per expert) a GPU keeps the dispatched copies it gathered
    from its expert-TP group, ``expert_tp`` times its own, and 1/expert_tp of each one's
    intermediate activations (the same bytes as without it)."""
    h = m.hidden
    out: list[SavedTensor] = []
    if policy == "full":
        return out
    ds = policy == "deepseek-v3"
    _keep(out, "mlp.norm_input", h, BF16)
    _keep(out, "mlp.input", h, 0 if ds else BF16)          # RMSNorm output: recomputed under deepseek-v3
    if not moe:
        if m.mlp_activation == "gelu":
            _keep(out, "mlp.gelu_input", m.dense_intermediate, BF16)
            _keep(out, "mlp.down_input", m.dense_intermediate, BF16)
        else:
            _swiglu(out, "mlp", m.dense_intermediate, policy)
    else:
        _keep(out, "router.scores", m.routed_experts, FP32)
        _keep(out, "router.topk_weights", m.topk, FP32)
        _keep(out, "router.topk_indices", m.topk, IDS)
        if m.shared_experts:
            _swiglu(out, "shared", m.expert_intermediate, policy, m.shared_experts)
        _keep(out, "routed.input", h * routed_pairs * expert_tp, FP8 if ds else BF16)   # the dispatched copies
        _swiglu(out, "routed", m.expert_intermediate, policy, routed_pairs)
    if m.dropout:
        _keep(out, "mlp.dropout_mask", h, MASK)
    return out


def layer_tensors(m: ModelSpec, moe: bool, policy: str, seq_len: int, routed_pairs: float,
                  expert_tp: int = 1) -> list[SavedTensor]:
    """One transformer layer under ``policy``."""
    if policy not in MEMORY_POLICIES:
        raise InputError(f"memory policy must be one of {', '.join(MEMORY_POLICIES)}, got {policy!r}")
    return attention_tensors(m, policy, seq_len) + mlp_tensors(m, moe, policy, routed_pairs, expert_tp)


def head_tensors(m: ModelSpec, policy: str) -> list[SavedTensor]:
    """One output head and its loss (the last stage has ``1 + mtp_modules`` of them)."""
    out: list[SavedTensor] = []
    _keep(out, "head.norm_input", m.hidden, BF16)
    _keep(out, "head.input", m.hidden, 0 if policy == "deepseek-v3" else BF16)
    _keep(out, "head.softmax", m.vocab, FP32)
    return out


def mtp_extra_tensors(m: ModelSpec, policy: str) -> list[SavedTensor]:
    """A multi-token-prediction module besides its transformer layer and head: the RMSNorm inputs of
    the previous depth's hidden state and of the next token's embedding, and the projection's input."""
    out: list[SavedTensor] = []
    _keep(out, "mtp.norm_inputs", 2 * m.hidden, BF16)
    _keep(out, "mtp.proj_input", 2 * m.hidden, 0 if policy in ("deepseek-v3", "full") else BF16)
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


def _linear_input_precision(policy: str, after_attention: bool = False) -> float:
    return (E5M6 if after_attention else FP8) if policy == "deepseek-v3" else BF16


def weight_grad_bytes(m: ModelSpec, moe: bool, policy: str, routed_pairs: float, tp: int = 1,
                      sequence_parallel: bool = False, expert_tp: int = 1) -> float:
    """Bytes per token a layer keeps on one GPU from its ``I`` to its deferred ``W``: each Linear's
    input (at the policy's precision) and its output gradient (BF16; FP8 under ``deepseek-v3``, whose
    weight gradients are FP8 GEMMs: report section 3.3.1). Under TP a column-parallel Linear's input
    is h wide (split only with sequence parallelism) and its output split; a row-parallel one's
    (:data:`ROW_PARALLEL`) the other way round."""
    grad = FP8 if policy == "deepseek-v3" else BF16
    wide = 1 / tp if sequence_parallel else 1.0
    total = 0.0
    for name, inputs, outputs, after_attention in linear_shapes(m, moe, routed_pairs, expert_tp):
        share_in, share_out = (1 / tp, wide) if name in ROW_PARALLEL else (wide, 1 / tp)
        total += inputs * share_in * _linear_input_precision(policy, after_attention) + outputs * share_out * grad
    return total


def head_weight_grad_bytes(m: ModelSpec, tp: int = 1, sequence_parallel: bool = False) -> float:
    """The output head's deferred ``W`` on one GPU: its input (BF16: the head keeps its original
    precision; split over TP only with sequence parallelism) and the logits' gradient (BF16,
    vocabulary-parallel)."""
    return m.hidden * BF16 / (tp if sequence_parallel else 1) + m.vocab * BF16 / tp


def mtp_weight_grad_bytes(m: ModelSpec, policy: str) -> float:
    """An MTP module's projection (2h -> h) for its deferred ``W``, besides its layer's."""
    return 2 * m.hidden * _linear_input_precision(policy) + m.hidden * (FP8 if policy == "deepseek-v3" else BF16)


def bytes_per_token(tensors: list[SavedTensor], tp: int = 1, sequence_parallel: bool = False) -> float:
    """Bytes per token of ``tensors`` on one GPU of a TP group of ``tp`` (:meth:`SavedTensor.share`)."""
    return sum(t.bytes_per_token * t.share(tp, sequence_parallel) for t in tensors)


__all__ = ["BF16", "E5M6", "FP32", "FP8", "ROW_PARALLEL", "SPLITS", "SavedTensor", "split_of", "attention_tensors", "bytes_per_token",
           "embedding_tensors", "head_tensors", "head_weight_grad_bytes", "layer_tensors", "linear_shapes",
           "mlp_tensors", "mtp_extra_tensors", "mtp_weight_grad_bytes", "weight_grad_bytes"]
