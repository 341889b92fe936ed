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
attention core has no weights). The last stage adds the output head (2 T h V forward; backward
2 T h V for the input and 2 T h V for the weight gradient) with its loss, and each MTP module (one
MoE layer, a 2h x h projection and a head); the first stage adds the embedding.

Recomputation (``RunSpec.memory_policy`` or Megatron-Core's ``recompute_*`` fields,
:mod:`sim.training.model.recompute`) runs in the backward's ``I``
part, before the input gradient of the attention (``attn_r``) and the MLP (``mlp_r``):
``selective`` reruns the attention core's forward; ``full`` reruns the layer's forward (the MoE
layer's dispatch and combine are not sent again: not modelled); ``deepseek-v3`` reruns the MLA
up-projections (2 T (q_r H (d+r) + kv_r H 2d) FLOPs) and, its attention core being
FlashAttention-style, the attention scores (the core's Q K^T share, ``d_qk / (d_qk + d_v)``);
``selective-op`` (torchtitan's per-op policy) reruns wk, wo and w3 and, in the kernel model, the
layer's memory-bound kernels (:func:`sim.training.model.recompute.kernel_shares_rerun`).
Recomputation is not useful work: MFU does not count it.

Time = FLOPs / (peak x efficiency): GEMMs at ``gemm_precision`` peak x ``gemm_efficiency``, the
attention core at the BF16 peak x ``attention_efficiency``; the output head stays in BF16 (the
DeepSeek-V3 report keeps the head, the embedding and the gating in their original precision).
Memory-bound work runs at the HBM bandwidth x ``hbm_efficiency``: the loss (read the FP32 logits,
write their softmax: 8 V bytes per token forward, 6 V backward) and the embedding (a gather of
2 h bytes per token forward; a scatter-add into the FP32 gradient, 10 h bytes per token, in its
weight gradient). Other elementwise work (normalisations, activations, residual adds, RoPE) is not
costed, in the forward or when recomputed: the efficiency factors stand for it.

Tensor and context parallelism (``RunSpec.tp`` = t, ``cp`` = c): each GPU of a replica runs the
GEMMs of its 1/t of the heads and of the MLP's columns (Megatron's column- and row-parallel
Linears, Shoeybi et al. 2019) over its 1/c of the sequence, and the attention core of its heads for
its query chunks against the keys before them (load-balanced causal chunks: 1/(t c) of the core),
so every FLOP term above is divided by t c on a GPU; the output head is vocabulary-parallel (1/t of
its GEMMs and of the loss's bytes, on 1/c of the tokens). GEMM efficiency does not change with the
smaller GEMMs (our simplification). The collectives that TP and CP add are communication parts
(:mod:`sim.training.costs.parts`, :mod:`sim.training.comm.model_parallel`). ``flops`` counts the whole micro-batch (all
t c GPUs), what MFU counts.

Communication per MoE layer: dispatch-shaped all-to-alls (forward dispatch, and the backward of
combine, sending output gradients to the experts) in ``dispatch_precision``; combine-shaped ones
(forward combine, backward of dispatch) in ``combine_precision`` (DeepSeek-V3: FP8 for dispatch
and for the gradient before the down-projections, BF16 for both combines).
"""
from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass

from ...checks import number
from ...compute import LayerShape, OpCost, embedding_ops, head_ops, layer_ops, shared_kernel_model
from ...network import token_bytes
from ..model.memory import offloaded_layer_bytes
from ..model.params import attention_params, dense_mlp_params, expert_params, mtp_projection_params
from ..model.recompute import CORE_KERNELS, check_layers, check_op_policy, kernel_shares_rerun, recompute_of
from ..model.specs import (
    FLOPS_MODEL_EFFICIENCY,
    PRECISION_BYTES,
    GPUSpec,
    ModelSpec,
    RunSpec,
    SpecError,
    gpu_names,
    load_gpu,
)


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
    attn_r: float = 0.0  # recomputation before the attention's input gradient (part of I)
    mlp_r: float = 0.0   # recomputation before the MLP's input gradient (part of I)
    core_f: float = 0.0  # the attention core's forward on this GPU (part of attn_f): what a CP ring hides behind
    beside: tuple = ()   # (part, ratio) pairs: how much longer the part runs beside a communication kernel
    tp_gemms: tuple = ()  # (part, head, tail): seconds of the GEMMs TP overlap pairs with its collectives
    full: bool = False   # recomputed whole (full recomputation): its forward runs again before its backward

    def beside_ratio(self, part: str) -> float:
        """How much longer ``part`` (``attn_f``, ..., ``mlp_r``) runs while a communication kernel
        holds its SMs and takes its share of HBM (its kernels costed so); 0.0: not known here (the
        FLOPs model, a measured part), the run's whole-GPU ratio applies."""
        return dict(self.beside).get(part, 0.0)

    def tp_gemm_pair(self, part: str) -> tuple[float, float] | None:
        """(seconds of the GEMMs the TP all-gather before ``part`` feeds, of those the reduce-scatter
        after it drains) under TP-communication overlap (:func:`tp_paired_gemms`); None: not known
        here (the FLOPs model, a measured part)."""
        pair = {name: (head, tail) for name, head, tail in self.tp_gemms}
        return pair.get(part)

    @property
    def forward(self) -> float:
        return self.attn_f + self.mlp_f

    @property
    def backward_i(self) -> float:
        return self.attn_i + self.mlp_i

    @property
    def backward_w(self) -> float:
        return self.attn_w + self.mlp_w


@dataclass(frozen=True)
class StageEnds:
    """Seconds of the work a stage does besides its layers: the embedding on the first stage, the
    output heads and their loss on the last (``1 + mtp_modules`` heads)."""

    embed_f: float = 0.0
    embed_w: float = 0.0
    head_f: float = 0.0
    head_i: float = 0.0
    head_w: float = 0.0


@functools.lru_cache(maxsize=1)
def table_gpus() -> tuple:
    """The figures of every GPU preset, among them those the calibration tables were measured on
    (``gemm_model: tables``: :class:`~sim.compute.KernelModel`'s ``gemm_tables``)."""
    return tuple(load_gpu(name).figures() for name in gpu_names())


def split_layers(total: int, stages: int) -> list[int]:
    """Layers per stage: as even as possible, earlier stages take the remainder."""
    if stages > total:
        raise SpecError(f"layers ({total}) cannot be split over {stages} pipeline stages: "
                        f"every stage needs at least one layer (use fewer stages, at most {total})")
    base, extra = divmod(total, stages)
    return [base + (1 if i < extra else 0) for i in range(stages)]


def stage_layer_counts(total: int, stages: int, explicit: tuple | None = None, first: int | None = None,
                       last: int | None = None, embedding: bool = False, loss: bool = False) -> list[int]:
    """Layers per stage: ``explicit`` (one count per stage), or ``first`` / ``last`` for the first
    and last stage with the rest as even as possible (Megatron's ``decoder_first_pipeline_num_layers``
    and ``decoder_last_pipeline_num_layers``), or all even (:func:`split_layers`). ``embedding`` and
    ``loss`` (Megatron's ``account_for_embedding_in_pipeline_split`` and
    ``account_for_loss_in_pipeline_split``) count the embedding and the loss as one layer each of the
    even split, on the first and the last stage: those stages hold one transformer layer fewer (none,
    at one layer per stage)."""
    if embedding or loss:
        slots = total + int(embedding) + int(loss)
        if stages > slots:
            raise SpecError(f"layers ({total}) with the embedding and loss counted ({slots}) cannot be split over "
                            f"{stages} pipeline stages: every stage needs at least one (use at most {slots})")
        counts = split_layers(slots, stages)
        counts[0] -= int(embedding)                # one stage: it holds every layer, the embedding and the loss
        counts[-1] -= int(loss)
        return counts
    if explicit is not None:
        if len(explicit) != stages:
            raise SpecError(f"RunSpec.stage_layers has {len(explicit)} entries {list(explicit)}, but the schedule "
                            f"has {stages} stages")
        if sum(explicit) != total:
            raise SpecError(f"RunSpec.stage_layers {list(explicit)} sums to {sum(explicit)}, but the model has "
                            f"{total} layers")
        return list(explicit)
    if first is None and last is None:
        return split_layers(total, stages)
    ends = [v for v in (first, last) if v is not None]
    middle = stages - len(ends)
    rest = total - sum(ends)
    if stages < 2 or rest < middle or (middle == 0 and rest != 0):
        raise SpecError(f"RunSpec.first_stage_layers={first}, last_stage_layers={last} leave {rest} of {total} "
                        f"layers for the other {middle} of {stages} stages: every stage needs at least one layer "
                        "and every layer a stage")
    counts = split_layers(rest, middle) if middle else []
    return ([first] if first is not None else []) + counts + ([last] if last is not None else [])


def qk_dim(m: ModelSpec) -> int:
    """A head's query/key width: ``head_dim``, plus the decoupled RoPE part under MLA."""
    return m.head_dim + (m.rope_dim if m.attention == "mla" else 0)


def attention_core_flops(m: ModelSpec, tokens: float, seq_len: int) -> float:
    return tokens * seq_len * m.heads * (qk_dim(m) + m.head_dim)


def scores_share(m: ModelSpec) -> float:
    """The share of the attention core's FLOPs in the scores Q K^T: ``d_qk / (d_qk + d_v)``."""
    d_qk = qk_dim(m)
    return d_qk / (d_qk + m.head_dim)


def mla_up_projection_params(m: ModelSpec) -> float:
    """Weights of the MLA up-projections (query and key/value), recomputed by the deepseek-v3 policy."""
    if m.attention != "mla":
        return 0.0
    q_up = m.q_lora_rank * m.heads * (m.head_dim + m.rope_dim) if m.q_lora_rank else 0.0
    return q_up + m.kv_lora_rank * m.heads * 2 * m.head_dim


# DeepSeek-V3's caches keep no SwiGLU output: each is recomputed (the report, 3.2.3), dense and shared too.
DEEPSEEK_SWIGLUS = ("fc.swiglu", "experts.swiglu", "shared.swiglu")


def _by_phase(costs: list[OpCost]) -> dict:
    """Seconds summed by (block, phase)."""
    sums: dict = defaultdict(float)
    for c in costs:
        sums[(c.op.block, c.op.phase)] += c.seconds
    return sums


# Transformer Engine's TP-communication overlap (userbuffers; the overlap configurations of
# Megatron-Bridge's ``training/comm_overlap.py`` name each by its GEMM: qkv_fprop, proj_fprop, fc1_fprop,
# fc2_fprop, proj_dgrad, fc2_dgrad, qkv_wgrad, fc1_wgrad) runs each sequence-parallel collective beside
# one linear layer's GEMM: the all-gather beside the GEMMs reading the block's input, the reduce-scatter
# beside the GEMM writing its output; in the backward the gathered output gradient feeds the output
# GEMM's dgrad and the input gradient's reduce-scatter runs beside the input GEMM's wgrad, a GEMM of
# its dgrad's size, taken here as that dgrad.
TP_INPUT_GEMMS = {"attn": ("qkv", "q_down", "kv_down"), "mlp": ("fc1", "shared1")}
TP_OUTPUT_GEMMS = {"attn": ("out_proj",), "mlp": ("fc2", "shared2")}


def ring_exchanged(op) -> bool:
    """Whether TP overlap runs ``op`` as a ring exchange: the forward's input GEMMs (fed by the
    all-gather) and output GEMMs (draining into the reduce-scatter), and the backward's output-GEMM
    dgrads (fed by the gathered output gradient). Transformer Engine's userbuffers split each into
    ``tp`` GEMMs of ``m / tp`` rows, one per chunk the ring brings or takes (``RingExchangeOverlapCfg``
    for qkv_fprop, fc1_fprop, proj_fprop, fc2_fprop, proj_dgrad and fc2_dgrad in Megatron-Bridge's FP8
    overlap configurations; torch's AsyncTP splits the same way); the input GEMMs' dgrads and the
    wgrads run whole (bulk overlaps)."""
    if op.kind != "gemm":
        return False
    if op.phase == "f":
        return op.name in TP_INPUT_GEMMS.get(op.block, ()) + TP_OUTPUT_GEMMS.get(op.block, ())
    return op.phase == "i" and op.name in tuple(f"{n}.dgrad" for n in TP_OUTPUT_GEMMS.get(op.block, ()))


def ring_chunked(costs: list[OpCost], tp: int, cost) -> list[OpCost]:
    """``costs`` with each ring-exchanged GEMM (:func:`ring_exchanged`) costed as ``tp`` GEMMs of
    ``m / tp`` rows and ``1 / tp`` of its FLOPs each: ``tp x cost(chunk)``, ``cost`` the kernel
    model's (an op -> OpCost); the op itself, its FLOPs and shape, kept. Wave quantization and a
    small ``m``'s lower efficiency make the chunks together slower than the whole GEMM (Llama 3.1
    405B's QKV at TP 8 with CP 2 on H100, FP8: 4,096 rows in 0.23 ms, eight of 512 in 0.39 ms)."""
    if tp <= 1:
        return costs
    out = []
    for c in costs:
        if ring_exchanged(c.op):
            g, m, n, k = c.op.shape
            chunk = cost(c.op._replace(shape=(g, m / tp, n, k), flops=c.op.flops / tp))
            c = OpCost(c.op, tp * chunk.seconds, chunk.bound)
        out.append(c)
    return out


def tp_paired_gemms(costs: list[OpCost]) -> tuple[tuple[str, float, float], ...]:
    """(part, head, tail) for each part whose TP collectives TP overlap pairs with GEMMs: ``head``
    the seconds of the GEMMs the all-gather before it feeds, ``tail`` of those the reduce-scatter
    after it drains (:data:`TP_INPUT_GEMMS`, :data:`TP_OUTPUT_GEMMS`): in a forward (``attn_f``,
    ``mlp_f``, and their recomputation ``attn_r``, ``mlp_r``) the input GEMMs then the output
    GEMMs; in an input gradient (``attn_i``, ``mlp_i``) the output GEMMs' dgrads then the input
    GEMMs'. A part without both is left out."""
    def seconds(block: str, phase: str, names: tuple) -> float:
        return sum(c.seconds for c in costs if c.op.block == block and c.op.phase == phase and c.op.name in names)
    out = []
    for block in ("attn", "mlp"):
        into, out_of = TP_INPUT_GEMMS[block], TP_OUTPUT_GEMMS[block]
        forward = (seconds(block, "f", into), seconds(block, "f", out_of))
        grads = (seconds(block, "i", tuple(f"{n}.dgrad" for n in out_of)),
                 seconds(block, "i", tuple(f"{n}.dgrad" for n in into)))
        for part, (head, tail) in ((f"{block}_f", forward), (f"{block}_r", forward), (f"{block}_i", grads)):
            if head > 0 and tail > 0:
                out.append((part, head, tail))
    return tuple(out)


PROFILE_PARTS = ("attn_f", "attn_i", "attn_w", "mlp_f", "mlp_i", "mlp_w", "attn_r", "mlp_r")
WHOLE_LAYER_PARTS = {"f": ("attn_f", "mlp_f"), "i": ("attn_i", "mlp_i"), "w": ("attn_w", "mlp_w")}


def read_profile(path: str) -> dict[str, dict[str, float]]:
    """A measured profile: CSV with columns ``layer`` (``dense`` or ``moe``), ``part`` (one of
    attn_f, attn_i, attn_w, mlp_f, mlp_i, mlp_w, attn_r, mlp_r; or a whole layer's ``f``, ``i`` or
    ``w``, split over attention and MLP in the FLOPs model's proportions, as a per-stage profile such
    as the Zero Bubble paper's T_F, T_B, T_W divided by the stage's layers gives; or ``head`` with
    layer ``head``) and ``seconds`` (one micro-batch on one GPU). Returns {layer kind: {part: seconds}}.
    An optional column ``beside`` (:func:`read_profile_beside`)."""
    return _read_profile(path)[0]


def read_profile_beside(path: str) -> dict[str, dict[str, float]]:
    """The profile's optional column ``beside``: how much longer the part runs beside a
    communication kernel than the time given, at least 1 (1: it was measured beside one, as in
    DeepSeek's profile of an overlapped F&B unit, and takes that time alone too; empty or no column:
    the run's whole-GPU ratio). Returns {layer kind: {part: ratio}} for the rows that give one; a
    whole layer's ``f``, ``i`` or ``w`` gives it to both its parts."""
    return _read_profile(path)[1]


def _read_profile(path: str) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    import csv
    import io
    from pathlib import Path
    file = Path(path)
    if not file.exists():
        raise SpecError(f"profile {path!r} does not exist")
    if not file.is_file():
        raise SpecError(f"profile {path!r} is not a regular file")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"profile {path}: not a text CSV (it is not UTF-8); expected columns layer, part, "
                        "seconds") from None
    except OSError as exc:
        raise SpecError(f"profile {path}: cannot read it: {exc.strerror or exc}") from None
    try:
        return _profile_rows(path, csv.DictReader(io.StringIO(text)))
    except csv.Error as exc:
        raise SpecError(f"profile {path}: not a readable CSV ({exc}); expected columns layer, part, "
                        "seconds") from None


def _profile_rows(path: str, reader) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """The rows of a profile CSV (:func:`read_profile`), each checked: (seconds, beside ratios)."""
    out: dict[str, dict[str, float]] = {}
    beside: dict[str, dict[str, float]] = {}
    if not reader.fieldnames or {"layer", "part", "seconds"} - set(reader.fieldnames):
        got = [str(name)[:40] for name in (reader.fieldnames or [])[:5]]
        raise SpecError(f"profile {path}: needs columns layer, part, seconds; got {got}")
    for i, row in enumerate(reader, start=2):
        layer, part = (row["layer"] or "").strip(), (row["part"] or "").strip()
        parts = PROFILE_PARTS + tuple(WHOLE_LAYER_PARTS)
        if layer not in ("dense", "moe", "head") or (part not in parts and part != "head"):
            raise SpecError(f"profile {path} line {i}: layer must be dense, moe or head and part one of "
                            f"{', '.join(parts)}, head; got layer={layer!r}, part={part!r}")
        try:
            seconds = float(row["seconds"])
        except (TypeError, ValueError):
            raise SpecError(f"profile {path} line {i}: seconds {row['seconds']!r} is not a number") from None
        number(seconds, f"profile {path} line {i}: seconds", low=0, high=1e6, error=SpecError)
        out.setdefault(layer, {})[part] = seconds
        ratio = (row.get("beside") or "").strip()
        if ratio:
            try:
                value = float(ratio)
            except ValueError:
                raise SpecError(f"profile {path} line {i}: beside {ratio!r} is not a number") from None
            number(value, f"profile {path} line {i}: beside", low=1, high=10, error=SpecError)
            for name in WHOLE_LAYER_PARTS.get(part, (part,)):
                beside.setdefault(layer, {})[name] = value
    return out, beside


class ChunkModel:
    """Costs of every layer of every stage for one run: from its kernels (``compute_model: kernels``,
    :mod:`sim.compute`), or from FLOPs at flat efficiencies (``flops``), and in either from a
    measured profile (``RunSpec.profile``) wherever it gives a part."""

    def __init__(self, model: ModelSpec, gpu: GPUSpec, run: RunSpec, num_stages: int,
                 beside_comm: tuple[int, float] = (0, 0.0)):
        """``beside_comm``: (SMs, HBM share) a communication kernel takes from compute that runs
        beside it (:attr:`sim.training.scenario.Scenario.beside_comm`); each layer part's kernels
        are costed so too (:meth:`LayerCost.beside_ratio`)."""
        self.model, self.gpu, self.run = model, gpu, run
        self.beside_comm = beside_comm
        self.profile, self.profile_beside = _read_profile(run.profile) if run.profile else ({}, {})
        self.microbatch_tokens = run.tokens_per_microbatch      # all TP x CP GPUs of a replica
        self.tokens = run.tokens_per_microbatch // run.cp        # on one GPU: its share of the sequence
        self.split = run.tp * run.cp                             # a GPU's share of the FLOPs: 1 / split
        gemm_eff = run.gemm_efficiency or FLOPS_MODEL_EFFICIENCY["gemm"]
        self.gemm_rate = gpu.peak_flops(run.gemm_precision) * gemm_eff
        self.bf16_gemm_rate = gpu.peak_flops("bf16") * gemm_eff
        self.attn_rate = gpu.peak_flops("bf16") * (run.attention_efficiency or FLOPS_MODEL_EFFICIENCY["attention"])
        self.hbm_rate = gpu.hbm_tbps * 1e12 * run.hbm_efficiency
        self.kernels = None if run.compute_model == "flops" else shared_kernel_model(
            gpu.figures(), hbm_efficiency=run.hbm_efficiency, launch_us=run.kernel_launch_us,
            gemm_efficiency=run.gemm_efficiency, attention_efficiency=run.attention_efficiency,
            families=run.compute_kernels, attention_kernel=run.attention_kernel,
            gemm_tables=table_gpus() if run.gemm_model == "tables" else ())
        if self.kernels is not None:
            self.kernels.gemm_fit(run.gemm_precision)            # refuse a precision the GPU's family has no fit for
        self._layers: dict[tuple, LayerCost] = {}
        self.layers_per_stage = stage_layer_counts(model.layers, num_stages, run.stage_layers,
                                                   run.first_stage_layers, run.last_stage_layers,
                                                   run.embedding_stage, run.loss_stage)
        self.recompute = recompute_of(run)
        check_layers(self.recompute, self.layers_per_stage)
        check_op_policy(self.recompute, model, run)
        if run.activation_offload and not gpu.host_GBps:
            raise SpecError(f"RunSpec.activation_offload ({run.activation_offload:g}) needs the GPU's link to host "
                            f"memory, and GPU {gpu.name} has no host_GBps; give it in a GPU YAML (GB/s, both "
                            "directions) or set activation_offload to 0")
        self.num_stages = num_stages
        first = 0
        self.stage_layers: list[list[LayerCost]] = []
        for count in self.layers_per_stage:
            full = self.recompute.full_layers(count)
            layers = [self.layer_cost(moe=(i >= model.dense_layers), full=full[j])
                      for j, i in enumerate(range(first, first + count))]
            first += count
            self.stage_layers.append(layers)
        # The output head and MTP modules run on the last stage, the embedding on the first.
        for _ in range(model.mtp_modules):
            self.stage_layers[-1].append(self.layer_cost(moe=model.is_moe, extra_gemm=mtp_projection_params(model),
                                                         full=self.recompute.granularity == "full"))
        self.ends = [StageEnds() for _ in range(num_stages)]
        self.ends[-1] = self._head()
        first_end = self.ends[0]
        embed_f, embed_w = self._embedding()
        self.ends[0] = StageEnds(embed_f, embed_w, first_end.head_f, first_end.head_i, first_end.head_w)

    @property
    def head_cost(self) -> float:
        """Seconds of the last stage's output heads and loss in the forward."""
        return self.ends[-1].head_f

    @property
    def compute_label(self) -> str:
        """How compute is costed, as the recipe line says it."""
        if self.kernels is None:
            return (f"FLOPs model (GEMMs at {self.gemm_rate / self.gpu.peak_flops(self.run.gemm_precision):g}, "
                    f"attention at {self.attn_rate / self.gpu.peak_flops('bf16'):g} of the peak)")
        return f"{self.kernels.label}, {self.run.fusion}, {self.run.kernel_launch_us:g} us a launch"

    def stage_work(self, stage: int) -> tuple[list[LayerCost], StageEnds]:
        """The layers of ``stage`` and the work at its ends (embedding, heads)."""
        return self.stage_layers[stage], self.ends[stage]

    def _gemm(self, flops: float) -> float:
        return flops / self.gemm_rate

    def _memory_bound(self, bytes_per_token: float) -> float:
        return self.tokens * bytes_per_token / self.hbm_rate

    def _embedding(self) -> tuple[float, float]:
        """Seconds of the embedding's forward and weight gradient on the first stage."""
        if self.kernels is None:
            return self._memory_bound(2 * self.model.hidden), self._memory_bound(10 * self.model.hidden)
        sums = _by_phase(self.kernels.costs(embedding_ops(self.tokens, self.model.hidden, self.run.fusion)))
        return sums[("embed", "f")], sums[("embed", "w")]

    def _head(self) -> StageEnds:
        m, T, t = self.model, self.tokens, self.run.tp
        heads = 1 + m.mtp_modules
        if self.kernels is None:
            gemm = 2 * T * m.hidden * m.vocab / t / self.bf16_gemm_rate
            f = heads * (gemm + self._memory_bound(8 * m.vocab / t))
            i = heads * (gemm + self._memory_bound(6 * m.vocab / t))
            w = heads * gemm
        else:
            norm_tokens = T / t if self.run.sequence_parallel else T
            ops = head_ops(T, norm_tokens, m.hidden, m.vocab, t, self.run.fusion, self.run.loss_kernel,
                           self.run.wgrad_out_bytes, self.run.wgrad_add_bytes)
            sums = _by_phase(self.kernels.costs(ops))
            f, i, w = (heads * sums[("head", p)] for p in "fiw")
        measured = self.profile.get("head", {}).get("head")
        if measured is not None:                       # the profile's head is the forward; keep our ratios
            f, i, w = heads * measured, heads * measured * i / f, heads * measured * w / f
        return StageEnds(head_f=f, head_i=i, head_w=w)

    def layer_shape(self, moe: bool, extra_gemm: float = 0.0) -> LayerShape:
        """One GPU's share of a layer, as the kernel model's operator list reads it."""
        m, run = self.model, self.run
        return LayerShape(hidden=m.hidden, heads=m.heads, kv_heads=(m.kv_heads or m.heads) if m.attention == "gqa" else 0,
                          head_dim=m.head_dim, tokens=self.tokens, seq_len=run.seq_len, attention=m.attention,
                          rope_dim=m.rope_dim, q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank, moe=moe,
                          dense_intermediate=m.dense_intermediate, mlp_activation=m.mlp_activation,
                          routed_experts=m.routed_experts, shared_experts=m.shared_experts,
                          expert_intermediate=m.expert_intermediate, topk=m.topk, dropout=m.dropout, tp=run.tp,
                          cp=run.cp, ep=run.ep, expert_tp=run.expert_tp, sequence_parallel=run.sequence_parallel,
                          precision=run.gemm_precision, fusion=run.fusion, extra_gemm=extra_gemm,
                          attention_kernel=run.attention_kernel, wgrad_out_bytes=run.wgrad_out_bytes,
                          wgrad_add_bytes=run.wgrad_add_bytes)

    def kernel_costs(self, moe: bool, extra_gemm: float = 0.0, sms: int | None = None,
                     hbm_share: float = 0.0) -> list[OpCost]:
        """Every kernel of one layer with its seconds and bound (the kernel model only), on ``sms``
        SMs (default: all) with ``hbm_share`` of HBM taken by something beside it
        (:meth:`~sim.compute.KernelModel.cost`), costed once per layer shape, share and kernel model
        in a process."""
        shape = self.layer_shape(moe, extra_gemm)
        ring = self.run.tp if self.run.tp_comm_overlap else 1        # TP overlap's ring exchange: ring_chunked
        key = ("layer", shape, ring) if sms is None and not hbm_share else ("layer", shape, ring, sms, hbm_share)
        hit = self.kernels.memo.get(key)
        if hit is None:
            costs = self.kernels.costs(layer_ops(shape), sms, hbm_share)
            hit = self.kernels.memo[key] = tuple(
                ring_chunked(costs, ring, lambda op: self.kernels.cost(op, sms, hbm_share)))
        return list(hit)

    def layer_cost(self, moe: bool, extra_gemm: float = 0.0, full: bool | None = None) -> LayerCost:
        """One layer's parts; ``full``: whether it is recomputed whole (default: as the run's
        recomputation has it for every layer)."""
        full = self.recompute.granularity == "full" if full is None else full
        key = (moe, extra_gemm, full)
        if key not in self._layers:
            parts, routed_share, flops, core_f = (self._flops_parts if self.kernels is None else
                                                  self._kernel_parts)(moe, extra_gemm, full)
            shared = self._beside_parts(moe, extra_gemm, full)
            measured = self.profile.get("moe" if moe else "dense", {})
            for whole, (attn, mlp_part) in WHOLE_LAYER_PARTS.items():
                if whole in measured:                  # a whole layer's time, split as the model splits it
                    share = parts[attn] / (parts[attn] + parts[mlp_part])
                    parts[attn], parts[mlp_part] = measured[whole] * share, measured[whole] * (1 - share)
            parts.update({k: v for k, v in measured.items() if k in PROFILE_PARTS})
            given = set(measured) | {p for whole, pair in WHOLE_LAYER_PARTS.items() if whole in measured for p in pair}
            shared = {k: v for k, v in shared.items() if k not in given}   # measured: the whole-GPU ratio applies
            exposed = self._offload_exposed(parts, moe, full)
            beside = tuple((k, (v + exposed.get(k, 0.0)) / parts[k]) for k, v in shared.items() if parts[k] > 0)
            beside += tuple(self.profile_beside.get("moe" if moe else "dense", {}).items())
            tp_gemms = () if self.kernels is None else tuple(
                g for g in tp_paired_gemms(self.kernel_costs(moe, extra_gemm)) if g[0] not in given)
            self._layers[key] = LayerCost(**parts, moe=moe, routed_share=routed_share, flops=flops, core_f=core_f,
                                          beside=beside, tp_gemms=tp_gemms, full=full)
        return self._layers[key]

    def _offload_exposed(self, parts: dict, moe: bool, full: bool) -> dict[str, float]:
        """Activation offloading: a layer's offloaded bytes (:func:`~sim.training.model.memory.offloaded_layer_bytes`)
        go to host memory over half the GPU's ``host_GBps`` (one direction) beside its forward and come
        back beside the backward before it; a copy longer than that compute is exposed, added to the
        MLP's forward and input-gradient parts (returned: the seconds added to each)."""
        nbytes = offloaded_layer_bytes(self.model, self.run, moe, full)
        if not nbytes:
            return {}
        copy = nbytes / (self.gpu.host_GBps / 2 * 1e9)
        forward = parts["attn_f"] + parts["mlp_f"]
        backward = parts["attn_i"] + parts["mlp_i"] + parts.get("attn_r", 0.0) + parts.get("mlp_r", 0.0)
        added = {"mlp_f": max(0.0, copy - forward), "mlp_i": max(0.0, copy - backward)}
        for part, seconds in added.items():
            parts[part] += seconds
        return added

    def _kernel_parts(self, moe: bool, extra_gemm: float, full: bool) -> tuple[dict, float, float, float]:
        """(the parts' seconds, routed share, useful FLOPs of the micro-batch, the core's forward) from
        the layer's kernels; recomputation reruns the forward kernels its modules name
        (:func:`sim.training.model.recompute.kernels_rerun`; a fully recomputed layer, its whole forward)."""
        costs = self.kernel_costs(moe, extra_gemm)
        parts = self._parts_of(costs, full)
        mlp = parts["mlp_f"] + parts["mlp_i"] + parts["mlp_w"]
        routed = sum(c.seconds for c in costs if c.op.routed)
        core_f = sum(c.seconds for c in costs if c.op.block == "attn" and c.op.phase == "f" and c.op.name in CORE_KERNELS)
        flops = sum(c.op.useful for c in costs) * self.split
        return parts, routed / mlp if mlp else 0.0, flops, core_f

    def _parts_of(self, costs: list[OpCost], full: bool) -> dict[str, float]:
        """A layer's parts (``attn_f`` ... ``mlp_r``) summed from its kernels' ``costs``."""
        sums = _by_phase(costs)
        parts = {f"{b}_{p}": sums[(b, p)] for b in ("attn", "mlp") for p in "fiw"}
        if full:
            parts.update(attn_r=parts["attn_f"], mlp_r=parts["mlp_f"])
            return parts
        deepseek = self.run.memory_policy == "deepseek-v3"
        for block in ("attn", "mlp"):
            shares = kernel_shares_rerun(self.recompute, block, self.model)
            if deepseek:
                shares.update(dict.fromkeys(DEEPSEEK_SWIGLUS, 1.0))
            parts[f"{block}_r"] = sum(c.seconds * shares.get(c.op.name.split(".cast")[0], 0.0) for c in costs
                                      if c.op.block == block and c.op.phase == "f")
        return parts

    def _beside_parts(self, moe: bool, extra_gemm: float, full: bool) -> dict[str, float]:
        """A layer's parts as they run beside a communication kernel (``beside_comm``): every kernel
        on the SMs it leaves, memory-bound work at the HBM bandwidth it leaves; empty in the FLOPs
        model or when no communication kernel takes anything."""
        sms, hbm_share = self.beside_comm
        if self.kernels is None or (not sms and not hbm_share):
            return {}
        return self._parts_of(self.kernel_costs(moe, extra_gemm, self.gpu.sms - sms, hbm_share), full)

    def _flops_parts(self, moe: bool, extra_gemm: float, full: bool) -> tuple[dict, float, float, float]:
        """The FLOPs model's parts (see the module)."""
        m, T, split = self.model, self.microbatch_tokens, self.split
        proj = 2 * T * (attention_params(m) + extra_gemm)       # the whole micro-batch; a GPU does 1/split
        core = attention_core_flops(m, T, self.run.seq_len)
        if moe:
            routed = 2 * T * m.topk * expert_params(m)
            other = 2 * T * (m.shared_experts * expert_params(m) + m.hidden * m.routed_experts)
        else:
            routed, other = 0.0, 2 * T * dense_mlp_params(m)
        mlp = routed + other
        gemm_proj, gemm_mlp, core_s = self._gemm(proj / split), self._gemm(mlp / split), core / split / self.attn_rate
        attn_f = gemm_proj + core_s
        parts = dict(attn_f=attn_f, attn_i=gemm_proj + 2 * core_s, attn_w=gemm_proj,
                     mlp_f=gemm_mlp, mlp_i=gemm_mlp, mlp_w=gemm_mlp)
        parts.update(self._recompute(attn_f, gemm_mlp, core_s, full))
        return parts, routed / mlp if mlp else 0.0, 3 * (proj + mlp) + 3 * core, core_s

    def _recompute(self, attn_f: float, mlp_f: float, core_s: float, full: bool) -> dict[str, float]:
        """Seconds recomputed in the backward (the FLOPs model, which costs GEMMs and the core only;
        see the module docstring): a full layer, its forward; ``core_attn``, the core;
        ``mla_up_proj``, the up-projections; ``mlp`` or ``moe``, the MLP block's GEMMs; under the
        deepseek-v3 policy also the scores' share of the core (FlashAttention-style); torchtitan's
        per-op policy, wk and wo (``2 T h d (kv_heads + heads)``) and w3 (a third of the MLP's GEMMs)."""
        if full:
            return {"attn_r": attn_f, "mlp_r": mlp_f}
        modules, m = self.recompute.modules, self.model
        if self.recompute.granularity == "op":
            wk_wo = 2 * self.microbatch_tokens * m.hidden * m.head_dim * ((m.kv_heads or m.heads) + m.heads)
            return {"attn_r": self._gemm(wk_wo / self.split), "mlp_r": mlp_f / 3}
        attn = core_s if "core_attn" in modules else 0.0
        if "mla_up_proj" in modules:
            attn += self._gemm(2 * self.microbatch_tokens * mla_up_projection_params(m) / self.split)
        if self.run.memory_policy == "deepseek-v3":
            attn += scores_share(m) * core_s
        return {"attn_r": attn, "mlp_r": mlp_f if {"mlp", "moe"} & set(modules) else 0.0}

    def model_flops_per_microbatch(self) -> float:
        """Useful FLOPs (forward, input and weight gradients) of one micro-batch through every
        stage, output head included: what MFU counts (recomputation is not useful work)."""
        layers = sum(c.flops for stage in self.stage_layers for c in stage)
        head = 3 * 2 * self.microbatch_tokens * self.model.hidden * self.model.vocab * (1 + self.model.mtp_modules)
        return layers + head

    def token_bytes(self, precision: str) -> float:
        """Bytes of one token copy on the wire (:func:`sim.network.token_bytes`: hidden x element
        size, plus one fp32 scale per 1x128 tile for FP8)."""
        return token_bytes(self.model.hidden, PRECISION_BYTES[precision])

    def activation_bytes(self) -> float:
        """Pipeline send of one micro-batch between stages, from one GPU: its T / cp tokens x hidden
        in BF16, of which each of the tp GPUs of a TP group sends 1/tp (Megatron's scatter-gather
        of the send, or sequence parallelism's shard; the all-gather after it inside the node is not
        costed). A float: the fabric checks anything else it is given on every transfer."""
        return float(self.tokens * self.model.hidden * 2 / self.run.tp)
