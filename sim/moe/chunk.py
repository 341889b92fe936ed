"""The chunk model: per layer, the parts of a forward and a backward and what each costs.

FLOPs per micro-batch of T = b x s tokens on one GPU (a GEMM of a k x n weight costs 2Tkn):

* attention projections, ``gqa``: q, k, v, o = h(Hd) + 2h(KVd) + (Hd)h weights; ``mla``:
  q down/up (h q_r + q_r H(d+r), or h H(d+r) without q compression), kv down h(kv_r + r), kv up
  kv_r H(2d), o (Hd)h;
* attention core (causal, so half the s x s scores): T s H (d_qk + d_v);
* MLP: dense FFN 3 h I (SwiGLU); MoE routed experts T k 3 h I_e per GPU (with balanced routing a
  GPU computes as many expert-token pairs as it owns tokens), shared experts 3 h I_e each, router
  h E.
Backward (Zero Bubble paper, Table 1): the input-gradient part ``I`` costs the forward GEMMs again
plus twice the attention core; the weight-gradient part ``W`` costs the forward GEMMs again (the
attention core has no weights). The last stage adds the output head (2 T h V forward) and each MTP
module (one MoE layer, a 2h x h projection and a head).

Time = FLOPs / (peak x efficiency): GEMMs at ``gemm_precision`` peak x ``gemm_efficiency``, the
attention core at the BF16 peak x ``attention_efficiency``.

Communication per MoE layer: dispatch-shaped all-to-alls (forward dispatch, and the backward of
combine, sending output gradients to the experts) in ``dispatch_precision``; combine-shaped ones
(forward combine, backward of dispatch) in ``combine_precision`` (DeepSeek-V3: FP8 for dispatch
and for the gradient before the down-projections, BF16 for both combines).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..network import token_bytes
from .specs import PRECISION_BYTES, GPUSpec, ModelSpec, RunSpec, SpecError


@dataclass(frozen=True)
class LayerCost:
    """Seconds of each compute part of one layer for one micro-batch; ``moe`` says whether the
    layer has dispatch/combine all-to-alls around its MLP."""

    attn_f: float
    attn_i: float
    attn_w: float
    mlp_f: float
    mlp_i: float
    mlp_w: float
    moe: bool
    routed_share: float  # fraction of the MLP parts spent in routed experts (scales with load)
    flops: float         # useful FLOPs of F + I + W of this layer

    @property
    def forward(self) -> float:
        return self.attn_f + self.mlp_f

    @property
    def backward_i(self) -> float:
        return self.attn_i + self.mlp_i

    @property
    def backward_w(self) -> float:
        return self.attn_w + self.mlp_w


def split_layers(total: int, stages: int) -> list[int]:
    """Layers per stage: as even as possible, earlier stages take the remainder."""
    if stages > total:
        raise SpecError(f"layers ({total}) cannot be split over {stages} pipeline stages: "
                        f"every stage needs at least one layer (use fewer stages, at most {total})")
    base, extra = divmod(total, stages)
    return [base + (1 if i < extra else 0) for i in range(stages)]


def attention_params(m: ModelSpec) -> float:
    h, H, d = m.hidden, m.heads, m.head_dim
    if m.attention == "gqa":
        kvh = m.kv_heads or H
        return h * H * d + 2 * h * kvh * d + H * d * h
    q = (h * m.q_lora_rank + m.q_lora_rank * H * (d + m.rope_dim)) if m.q_lora_rank else h * H * (d + m.rope_dim)
    kv = h * (m.kv_lora_rank + m.rope_dim) + m.kv_lora_rank * H * 2 * d
    return q + kv + H * d * h


def attention_core_flops(m: ModelSpec, tokens: float, seq_len: int) -> float:
    d_qk = m.head_dim + (m.rope_dim if m.attention == "mla" else 0)
    return tokens * seq_len * m.heads * (d_qk + m.head_dim)


def dense_mlp_params(m: ModelSpec) -> float:
    return 3 * m.hidden * m.dense_intermediate


def expert_params(m: ModelSpec) -> float:
    return 3 * m.hidden * m.expert_intermediate


PROFILE_PARTS = ("attn_f", "attn_i", "attn_w", "mlp_f", "mlp_i", "mlp_w")


def read_profile(path: str) -> dict[str, dict[str, float]]:
    """A measured profile: CSV with columns ``layer`` (``dense`` or ``moe``), ``part`` (one of
    attn_f, attn_i, attn_w, mlp_f, mlp_i, mlp_w, or ``head`` with layer ``head``) and ``seconds``
    (one micro-batch on one GPU). Returns {layer kind: {part: seconds}}."""
    import csv
    from pathlib import Path
    file = Path(path)
    if not file.exists():
        raise SpecError(f"profile {path!r} does not exist")
    out: dict[str, dict[str, float]] = {}
    with file.open() as fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames or {"layer", "part", "seconds"} - set(reader.fieldnames):
            raise SpecError(f"profile {path}: needs columns layer, part, seconds; got {reader.fieldnames}")
        for i, row in enumerate(reader, start=2):
            layer, part = row["layer"].strip(), row["part"].strip()
            if layer not in ("dense", "moe", "head") or (part not in PROFILE_PARTS and part != "head"):
                raise SpecError(f"profile {path} line {i}: layer must be dense, moe or head and part one of "
                                f"{', '.join(PROFILE_PARTS)}, head; got layer={layer!r}, part={part!r}")
            try:
                seconds = float(row["seconds"])
            except ValueError:
                raise SpecError(f"profile {path} line {i}: seconds {row['seconds']!r} is not a number") from None
            if not seconds >= 0:
                raise SpecError(f"profile {path} line {i}: seconds must be >= 0, got {seconds}")
            out.setdefault(layer, {})[part] = seconds
    return out


class ChunkModel:
    """Costs of every layer of every stage for one run (from FLOPs, or from a measured profile:
    ``RunSpec.profile``, whose parts replace the FLOPs model's wherever given)."""

    def __init__(self, model: ModelSpec, gpu: GPUSpec, run: RunSpec, num_stages: int):
        self.model, self.gpu, self.run = model, gpu, run
        self.profile = read_profile(run.profile) if run.profile else {}
        self.tokens = run.tokens_per_microbatch
        self.gemm_rate = gpu.peak_flops(run.gemm_precision) * run.gemm_efficiency
        self.attn_rate = gpu.peak_flops("bf16") * run.attention_efficiency
        self.layers_per_stage = split_layers(model.layers, num_stages)
        self.num_stages = num_stages
        first = 0
        self.stage_layers: list[list[LayerCost]] = []
        for count in self.layers_per_stage:
            layers = [self.layer_cost(moe=(i >= model.dense_layers)) for i in range(first, first + count)]
            first += count
            self.stage_layers.append(layers)
        # The output head and MTP modules run on the last stage.
        for _ in range(model.mtp_modules):
            self.stage_layers[-1].append(self.layer_cost(moe=model.is_moe, extra_gemm=2 * model.hidden ** 2))
        self.head_cost = self._gemm(2 * self.tokens * model.hidden * model.vocab) * (1 + model.mtp_modules)
        if "head" in self.profile.get("head", {}):
            self.head_cost = self.profile["head"]["head"] * (1 + model.mtp_modules)

    def stage_work(self, stage: int) -> tuple[list[LayerCost], float]:
        """The layers of ``stage`` and its output-head seconds (non-zero on the last stage only)."""
        return self.stage_layers[stage], (self.head_cost if stage == self.num_stages - 1 else 0.0)

    def _gemm(self, flops: float) -> float:
        return flops / self.gemm_rate

    def layer_cost(self, moe: bool, extra_gemm: float = 0.0) -> LayerCost:
        m, T = self.model, self.tokens
        proj = 2 * T * (attention_params(m) + extra_gemm)
        core = attention_core_flops(m, T, self.run.seq_len)
        if moe:
            routed = 2 * T * m.topk * expert_params(m)
            other = 2 * T * (m.shared_experts * expert_params(m) + m.hidden * m.routed_experts)
        else:
            routed, other = 0.0, 2 * T * dense_mlp_params(m)
        mlp = routed + other
        attn_f = self._gemm(proj) + core / self.attn_rate
        parts = dict(attn_f=attn_f, attn_i=self._gemm(proj) + 2 * core / self.attn_rate, attn_w=self._gemm(proj),
                     mlp_f=self._gemm(mlp), mlp_i=self._gemm(mlp), mlp_w=self._gemm(mlp))
        parts.update(self.profile.get("moe" if moe else "dense", {}))
        return LayerCost(**parts, moe=moe, routed_share=routed / mlp if mlp else 0.0,
                         flops=3 * (proj + mlp) + 3 * core)

    def model_flops_per_microbatch(self) -> float:
        """Useful FLOPs (forward, input and weight gradients) of one micro-batch through every
        stage, output head included: what MFU counts."""
        layers = sum(c.flops for stage in self.stage_layers for c in stage)
        head = 3 * 2 * self.tokens * self.model.hidden * self.model.vocab * (1 + self.model.mtp_modules)
        return layers + head

    def token_bytes(self, precision: str) -> float:
        """Bytes of one token copy on the wire (:func:`sim.network.token_bytes`: hidden x element
        size, plus one fp32 scale per 1x128 tile for FP8)."""
        return token_bytes(self.model.hidden, PRECISION_BYTES[precision])

    def activation_bytes(self) -> float:
        """Pipeline send of one micro-batch between stages: T x hidden in BF16."""
        return self.tokens * self.model.hidden * 2
