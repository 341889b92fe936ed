"""Parameter counts of a model's pieces and of the stages a pipeline rank holds (counts, not bytes).

Per layer: attention (``gqa``: q, k, v, o; ``mla``: the query and KV down- and up-projections and
o), and a dense FFN (SwiGLU: 3 h I; GELU: 2 h I) or an MoE block (shared experts 3 h I_e each, a
router h E, and the GPU's share of the routed experts, ``E / ep`` of them). The first stage adds the
embedding (V h); the last stage the output head (V h) and each multi-token-prediction (MTP) module:
a 2h x h projection and one more layer. The MTP modules share the embedding and the head with the
main model (DeepSeek-V3 report, section 2.2), so a rank holding the last stage needs the embedding
too; under DualPipe (stage 0 and stage P-1 on rank 0) the rank holds each shared tensor once.

Dense parameters are replicated over the whole data-parallel group of their rank; routed-expert
parameters only over the GPUs holding the same experts (``tp x cp x dp / ep``; ``ep`` counts GPUs):
:mod:`sim.training.model.layout`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .specs import ModelSpec, RunSpec


def attention_params(m: ModelSpec) -> float:
    h, H, d = m.hidden, m.heads, m.head_dim
    if m.attention == "gqa":
        kvh = m.kv_heads or H
        return h * H * d + 2 * h * kvh * d + H * d * h
    q = (h * m.q_lora_rank + m.q_lora_rank * H * (d + m.rope_dim)) if m.q_lora_rank else h * H * (d + m.rope_dim)
    kv = h * (m.kv_lora_rank + m.rope_dim) + m.kv_lora_rank * H * 2 * d
    return q + kv + H * d * h


def dense_mlp_params(m: ModelSpec) -> float:
    return (3 if m.mlp_activation == "swiglu" else 2) * m.hidden * m.dense_intermediate


def expert_params(m: ModelSpec) -> float:
    return 3 * m.hidden * m.expert_intermediate


def mtp_projection_params(m: ModelSpec) -> float:
    return 2 * m.hidden * m.hidden


@dataclass(frozen=True)
class ParamCount:
    """Parameters on one GPU: ``dense`` (replicated over the rank's DP group) and ``expert``
    (routed experts, replicated over ``dp / ep`` GPUs)."""

    dense: float
    expert: float

    @property
    def total(self) -> float:
        return self.dense + self.expert

    def __add__(self, other: "ParamCount") -> "ParamCount":
        return ParamCount(self.dense + other.dense, self.expert + other.expert)

    def split(self, tp: int, expert_tp: int = 1) -> "ParamCount":
        """One GPU's share under tensor parallelism over ``tp`` GPUs: 1/tp of the dense parameters
        (Megatron splits every Linear and the vocabulary; the router and the normalisations'
        weights, which it replicates, are counted as split: under 0.1% of a layer) and 1/expert_tp
        of its ``E / ep`` routed experts (whole experts with expert TP 1, :mod:`sim.training.model.layout`)."""
        if tp == 1 and expert_tp == 1:
            return self
        return ParamCount(self.dense / tp, self.expert / expert_tp)

    def on_gpu(self, run: RunSpec) -> "ParamCount":
        """:meth:`split` by ``run``'s TP and expert TP: one GPU's share."""
        return self.split(run.tp, run.expert_tp)


def layer_params(m: ModelSpec, moe: bool, ep: int) -> ParamCount:
    """One transformer layer on one GPU of an EP group of ``ep``."""
    if not moe:
        return ParamCount(attention_params(m) + dense_mlp_params(m), 0.0)
    dense = attention_params(m) + m.shared_experts * expert_params(m) + m.hidden * m.routed_experts
    return ParamCount(dense, m.routed_experts / ep * expert_params(m))


def layer_tensors(m: ModelSpec, moe: bool, ep: int) -> list[ParamCount]:
    """One layer's parameter tensors, in forward order: :func:`layer_modules` flattened."""
    return [t for module in layer_modules(m, moe, ep) for t in module]


def layer_modules(m: ModelSpec, moe: bool, ep: int) -> list[list[ParamCount]]:
    """One layer's modules that hold parameters, each as its parameter tensors, as Megatron registers them,
    in forward order: what a per-tensor ZeRO-3 (DeepSpeed's of 2021) gathers one at a time. A GPT-style
    layer (GELU MLP: GPT-2's and Megatron's GPT) has a bias on every Linear and LayerNorm's weight and
    bias; a SwiGLU layer (Llama-style, DeepSeek) no biases and RMSNorm's weight. Attention: the input
    norm, the fused QKV projection (MLA: the query down-projection, its norm and up-projection, or the
    one query projection, then the KV down-projection, its norm and up-projection) and the output
    projection; then the MLP's norm and its two Linears (the gate fused with the up projection under
    SwiGLU), or an MoE block's router, each of the GPU's ``E / ep`` routed experts' two Linears (expert
    tensors) and the shared experts' two. The Linears add up to :func:`layer_params`; the norms and
    biases, which it leaves out, are the rest."""
    h, gpt = m.hidden, m.mlp_activation == "gelu"

    def linear(n_in: float, n_out: float, expert: bool = False) -> list[list[ParamCount]]:
        def tensor(n: float) -> ParamCount:
            return ParamCount(0.0, n) if expert else ParamCount(n, 0.0)
        return [[tensor(n_in * n_out)] + ([tensor(n_out)] if gpt else [])]

    def norm(n: float) -> list[list[ParamCount]]:
        return [[ParamCount(n, 0.0)] * (2 if gpt else 1)]

    H, d = m.heads, m.head_dim
    if m.attention == "gqa":
        attn = norm(h) + linear(h, H * d + 2 * (m.kv_heads or H) * d)
    else:
        q = (linear(h, m.q_lora_rank) + norm(m.q_lora_rank) + linear(m.q_lora_rank, H * (d + m.rope_dim))
             if m.q_lora_rank else linear(h, H * (d + m.rope_dim)))
        attn = norm(h) + q + linear(h, m.kv_lora_rank + m.rope_dim) + norm(m.kv_lora_rank) + \
            linear(m.kv_lora_rank, H * 2 * d)
    attn += linear(H * d, h)
    if not moe:
        up = (2 if m.mlp_activation == "swiglu" else 1) * m.dense_intermediate
        return attn + norm(h) + linear(h, up) + linear(m.dense_intermediate, h)
    mlp = norm(h) + [[ParamCount(h * m.routed_experts, 0.0)]]
    for _ in range(int(m.routed_experts / ep)):
        mlp += linear(h, 2 * m.expert_intermediate, expert=True) + linear(m.expert_intermediate, h, expert=True)
    if m.shared_experts:
        width = m.shared_experts * m.expert_intermediate
        mlp += linear(h, 2 * width) + linear(width, h)
    return attn + mlp


def shared_tensors(m: ModelSpec, stages: int, stage: int) -> set[str]:
    """Names of the shared tensors ``stage`` (of ``stages``) needs: the first stage the embedding,
    the last the head, and the embedding too when it runs MTP modules (which share it)."""
    shared = {"embedding"} if stage == 0 else set()
    if stage == stages - 1:
        shared |= {"head", "embedding"} if m.mtp_modules else {"head"}
    return shared


def stage_params(m: ModelSpec, layers_per_stage: list[int], stage: int, ep: int) -> tuple[ParamCount, set[str]]:
    """(parameters of ``stage``'s own layers and MTP modules, names of the shared tensors it needs:
    :func:`shared_tensors`)."""
    first = sum(layers_per_stage[:stage])
    count = ParamCount(0.0, 0.0)
    for i in range(first, first + layers_per_stage[stage]):
        count = count + layer_params(m, i >= m.dense_layers, ep)
    if stage == len(layers_per_stage) - 1:
        for _ in range(m.mtp_modules):
            count = count + layer_params(m, m.is_moe, ep) + ParamCount(mtp_projection_params(m), 0.0)
    return count, shared_tensors(m, len(layers_per_stage), stage)


def shared_params(m: ModelSpec, layers_per_stage: list[int], stages: set[int]) -> ParamCount:
    """Parameters of the shared tensors (embedding, head: ``V h`` each, once per GPU) a GPU holding
    ``stages`` needs: what FSDP2 shards as its root unit beside the layers' own."""
    shared = set().union(*(shared_tensors(m, len(layers_per_stage), s) for s in stages))
    return ParamCount(len(shared) * m.vocab * m.hidden, 0.0)


def rank_params(m: ModelSpec, layers_per_stage: list[int], stages: set[int], ep: int) -> ParamCount:
    """Parameters on a GPU holding ``stages``: their layers, and each shared tensor once."""
    total = ParamCount(0.0, 0.0)
    for s in sorted(stages):
        total = total + stage_params(m, layers_per_stage, s, ep)[0]
    return total + shared_params(m, layers_per_stage, stages)


__all__ = ["ParamCount", "attention_params", "dense_mlp_params", "expert_params", "layer_modules", "layer_params",
           "layer_tensors", "mtp_projection_params", "rank_params", "shared_params", "shared_tensors", "stage_params"]
