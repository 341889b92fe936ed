"""Frozen, validated specs of a model, a GPU and a run, with YAML presets (``sim/training/presets``).

Every error names the field, the value and what is allowed (:class:`SpecError`).
"""
from __future__ import annotations

import copy
import functools
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Optional

from ...checks import InputError, SpecError, choice, did_you_mean, number, read_yaml, yaml_load
from ...compute.device import GpuFigures
from ...compute.ops import ATTENTION_KERNELS, FUSIONS, LOSS_KERNELS
from ...schedules.registry import CHUNKED
from .faults import FaultSpec

PRESETS = Path(__file__).parent.parent / "presets"
MEMORY_POLICIES = ("none", "selective", "full", "deepseek-v3", "selective-op")
DP_SYNC = ("overlap", "end")
BF16_GRADIENT_BYTES = 2.0                                         # a weight gradient written by autograd, once
FP8_PARAM_BYTES = 1.0                                             # an FP8 weight gathered under fp8_param_gather
FSDP_GRADS = ("sharded", "unsharded")                             # ZeRO-3's gradients between micro-batches
ZERO3_COLLECTIVES = ("per-layer", "per-tensor")                   # ZeRO-3: one collective a layer, or a tensor
OPTIMIZER_SYNC = ("global", "bypass")                             # before the optimizer step (sim.training.dpsync)
COMMUNICATION = ("measured", "live")                              # how all-to-alls meet the fabric (comm.live)
PIPELINE_SENDS = ("async", "blocking")                            # does a rank wait for its sends (sim.engine)
MODES = ("auto", "representative", "full")                       # how a step is simulated (sim.training.step)
COMPUTE_MODELS = ("kernels", "flops")                             # how compute is costed (sim.training.costs.chunk)
GEMM_MODELS = ("fit", "tables")                                   # a GEMM by the fit, or read off its tables (sim.compute.gemm_table)
FLOPS_MODEL_EFFICIENCY = {"gemm": 0.6, "attention": 0.4}          # the flops model's defaults (our assumptions)
COMPARED_SCHEDULES = ("1f1b", "zb-h1", "dualpipe", "dualpipev")   # what `run` and the planner compare


def load_presets(kind: str) -> dict:
    """The presets of ``kind`` (a fresh copy: callers may change it), parsed once per file version."""
    return copy.deepcopy(_presets(kind))


def _presets(kind: str) -> dict:
    """The presets of ``kind`` as parsed, shared: read them, copy what is handed on."""
    path = PRESETS / f"{kind}.yaml"
    return _parsed(path, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _parsed(path: Path, mtime_ns: int) -> dict:
    return yaml_load(path.read_text())


def _pos(obj, name: str, integer: bool = True, allow_zero: bool = False, high: float | None = None) -> None:
    """Check ``obj.name``: a finite number (an integer when ``integer``), > 0 (or >= 0), <= ``high``;
    an integral float from YAML (``4.0``) becomes an int."""
    value = number(getattr(obj, name), f"{type(obj).__name__}.{name}", integer=integer, low=0,
                   low_open=not allow_zero, high=high, error=SpecError)
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class ModelSpec:
    """A transformer, dense or MoE. Sizes are counts (not bytes)."""

    name: str
    layers: int
    hidden: int
    heads: int
    head_dim: int
    attention: str = "gqa"            # "gqa" (standard / grouped-query) or "mla" (DeepSeek)
    kv_heads: int = 0                 # gqa: key/value heads (0 = heads)
    rope_dim: int = 0                 # mla: decoupled RoPE dims per head
    kv_lora_rank: int = 0             # mla: KV compression
    q_lora_rank: int = 0              # mla: query compression (0 = none)
    dense_layers: int = 0             # the first dense_layers use a dense FFN, the rest MoE
    dense_intermediate: int = 0
    routed_experts: int = 0
    shared_experts: int = 0
    expert_intermediate: int = 0
    topk: int = 0
    vocab: int = 32000
    mtp_modules: int = 0              # extra MoE layer + output head each, on the last stage
    mlp_activation: str = "swiglu"    # dense FFN: "swiglu" (3 matrices) or "gelu" (2, GPT-style)
    dropout: bool = False             # dropout after attention and MLP (GPT-style; DeepSeek-V3 has none)
    not_costed: tuple = ()            # what the model has that the chunk model does not cost (named in output)
    source: str = ""                  # where the spec was read from (a preset, a config.json)

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "head_dim", "vocab"):
            _pos(self, name, high=10_000_000)
        for name in ("kv_heads", "rope_dim", "kv_lora_rank", "q_lora_rank", "dense_layers", "dense_intermediate",
                     "routed_experts", "shared_experts", "expert_intermediate", "topk", "mtp_modules"):
            _pos(self, name, allow_zero=True, high=10_000_000)
        if self.attention not in ("gqa", "mla"):
            raise SpecError(f"ModelSpec.attention must be 'gqa' or 'mla', got {self.attention!r}")
        if self.mlp_activation not in ("swiglu", "gelu"):
            raise SpecError(f"ModelSpec.mlp_activation must be 'swiglu' or 'gelu', got {self.mlp_activation!r}")
        if not isinstance(self.dropout, bool):
            raise SpecError(f"ModelSpec.dropout must be true or false, got {self.dropout!r}")
        if isinstance(self.not_costed, str) or not all(isinstance(t, str) for t in self.not_costed):
            raise SpecError(f"ModelSpec.not_costed must be a list of phrases, got {self.not_costed!r}")
        object.__setattr__(self, "not_costed", tuple(self.not_costed))
        if self.attention == "mla" and self.kv_lora_rank == 0:
            raise SpecError("ModelSpec.kv_lora_rank must be > 0 for attention 'mla'")
        if self.dense_layers > self.layers:
            raise SpecError(f"ModelSpec.dense_layers ({self.dense_layers}) exceeds layers ({self.layers})")
        if self.dense_layers and not self.dense_intermediate:
            raise SpecError("ModelSpec.dense_intermediate must be > 0 when there are dense layers")
        if self.is_moe and not (self.routed_experts and self.expert_intermediate and self.topk):
            raise SpecError("ModelSpec: MoE layers need routed_experts, expert_intermediate and topk > 0")
        if self.topk > self.routed_experts:
            raise SpecError(f"ModelSpec.topk ({self.topk}) exceeds routed_experts ({self.routed_experts})")

    @property
    def is_moe(self) -> bool:
        return self.layers > self.dense_layers

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers


@dataclass(frozen=True)
class GPUSpec:
    """Peak dense throughput (TFLOPS, no sparsity), HBM capacity (GB = 1e9 B, the device's total as the
    driver reports it: an "80 GB" H100 reports 81,559 MiB = 85.52 GB) and bandwidth (TB/s),
    SM count, NVLink bandwidth and the host link's (GB/s, aggregate of both directions, as vendors
    state them: PCIe, or NVLink-C2C to a Grace CPU) and the
    public ``source`` of the figures. ``microscaling``: tensor cores with block-scaled formats
    (MXFP8, Blackwell and later)."""

    name: str
    sms: int
    bf16_tflops: float
    hbm_gb: float
    hbm_tbps: float
    fp8_tflops: Optional[float] = None        # no FP8 tensor cores (A100)
    fp4_tflops: Optional[float] = None
    nvlink_GBps: Optional[float] = None
    host_GBps: Optional[float] = None         # the link to host memory (PCIe, NVLink-C2C), both directions
    microscaling: bool = False
    kernel_family: str = ""                   # the compute kernels' fitted family (sim/compute); "": by name
    source: str = ""

    def __post_init__(self):
        _pos(self, "sms", high=100_000)
        for name in ("bf16_tflops", "hbm_gb", "hbm_tbps"):
            _pos(self, name, integer=False)
        for name in ("fp8_tflops", "fp4_tflops", "nvlink_GBps", "host_GBps"):
            if getattr(self, name) is not None:
                _pos(self, name, integer=False)
        if not isinstance(self.microscaling, bool):
            raise SpecError(f"GPUSpec.microscaling must be true or false, got {self.microscaling!r}")
        if not isinstance(self.source, str):
            raise SpecError(f"GPUSpec.source must be text, got {self.source!r}")
        if not isinstance(self.kernel_family, str):
            raise SpecError(f"GPUSpec.kernel_family must be a kernel family name (text), got {self.kernel_family!r}")

    def figures(self) -> GpuFigures:
        """What the kernel model reads of this GPU (:class:`sim.compute.GpuFigures`)."""
        fp8 = self.fp8_tflops or 0.0
        return GpuFigures(self.name, self.sms, {"bf16": self.bf16_tflops, "fp8": fp8,
                                                "mxfp8": fp8 if self.microscaling else 0.0},
                          self.hbm_tbps, self.kernel_family)

    def peak_flops(self, precision: str) -> float:
        """Dense peak in FLOP/s for GEMMs in ``precision`` (:data:`GEMM_PRECISIONS`): ``fp8`` (per-tensor
        or DeepSeek's 1x128 tile scaling, on FP8 tensor cores) and ``mxfp8`` (block-scaled, Blackwell)
        run at the FP8 peak."""
        if precision in ("fp8", "mxfp8"):
            if not self.fp8_tflops:
                raise SpecError(f"GPU {self.name} has no FP8 tensor cores; use gemm_precision: bf16")
            if precision == "mxfp8" and not self.microscaling:
                raise SpecError(f"GPU {self.name} has no block-scaled (MXFP8) tensor cores; use gemm_precision: "
                                "fp8 or bf16")
            return self.fp8_tflops * 1e12
        if precision == "bf16":
            return self.bf16_tflops * 1e12
        raise SpecError(f"precision must be one of {', '.join(GEMM_PRECISIONS)}, got {precision!r}")


PRECISION_BYTES = {"fp8": 1, "bf16": 2}       # on the wire (dispatch, combine)
GEMM_PRECISIONS = ("bf16", "fp8", "mxfp8")    # GEMMs: BF16; FP8 as DeepSeek-V3 (1x128 tiles); MXFP8 (Blackwell)
MIN_EFFICIENCY = 1e-3                 # a kernel at under 0.1% of the GPU's peak is a typo, not a measurement
MAX_TOKENS_PER_MICROBATCH = 10 ** 9   # the all-to-all traffic model's limit (sim.network.traffic)
# Tokens per sequence: twice the longest context any public report trains at (MiniMax-01, arXiv:2501.08313,
# trains at 1M tokens); past it the attention and memory models are extrapolations, and a typo such as
# seq_len: 1e7 would otherwise run to a step of days.
MAX_SEQ_LEN = 2 ** 21
MAX_BYTES_PER_PARAMETER = 64.0        # weights, gradients or optimizer state: FP64 Adam is 24


@dataclass(frozen=True)
class RunSpec:
    """One training configuration. Units: sequences, tokens, bytes, fractions, GB (1e9 bytes).

    ``gemm_precision``: the GEMMs' number format, which sets their peak (:meth:`GPUSpec.peak_flops`):
    ``bf16``; ``fp8`` (FP8 GEMMs with per-tensor or DeepSeek-V3's 1x128-tile scaling); ``mxfp8``
    (block-scaled FP8, Blackwell). ``dispatch_precision`` and ``combine_precision``: the all-to-alls'
    wire format, ``fp8`` (with one fp32 scale per 128 elements) or ``bf16``.

    Compute (:mod:`sim.compute`): ``compute_model: kernels`` (the default) costs each layer as the
    kernels it runs: GEMMs by shape from fitted measured tables (``gemm_model: fit``, the default: the
    family's three-parameter fit; ``tables``: the fit corrected by the measured rows around each
    GEMM's shape, :mod:`sim.compute.gemm_table`), the fused attention core by sequence
    length and head size, memory-bound kernels (normalisations, activations, rotary embedding, the
    router, permutations, FP8 casts, the loss) by their bytes, ``kernel_launch_us`` (our assumption)
    for each launch; ``fusion`` says which kernels the trainer fuses (``fused``: Transformer Engine's
    and Megatron's fused kernels; ``unfused``: eager PyTorch); ``attention_kernel`` how the attention
    core runs (``flash``: fused, FlashAttention-style, the scores never in HBM, at the GPU family's
    own kernel's speed: FlashAttention-3 on Hopper; ``flash2``: the same at FlashAttention-2's, as
    PyTorch's scaled_dot_product_attention runs it on Hopper; ``unfused``: Megatron's core
    attention, the scores written, soft-maxed and stored); ``loss_kernel`` how the cross-entropy
    runs (``fused``: Megatron's vocabulary-parallel kernel, in place on an FP32 copy of the logits;
    ``eager``: PyTorch's ``cross_entropy`` on the logits cast to FP32, as torchtitan's loss ran
    uncompiled; ``eager-bf16``: on the BF16 logits as the head returns them; ``compiled``: under
    torch.compile, one fused kernel each way, :mod:`sim.training.model.activations`) and
    ``vocab_parallel_loss`` whether each TP GPU computes it on its vocabulary shard (off: the
    logits gathered whole first), ``logits_kept`` whether the train loop still holds the BF16 logits
    while the backward runs (a loop that never deletes them), ``stage_outputs_kept`` whether each
    pipeline stage keeps every micro-batch's output until the step ends (torch.distributed.pipelining
    in 2024, :func:`sim.training.model.memory.stage_output_bytes`); ``compute_kernels`` a YAML of fitted
    families of one's own (``python -m sim calibrate --kernels``). ``gemm_efficiency`` or
    ``attention_efficiency``, when set, cost that class flat at that fraction of the dense peak.
    ``compute_model: flops`` is the FLOPs model (every GEMM at ``gemm_efficiency``, default 0.6,
    the attention core at ``attention_efficiency``, default 0.4; nothing else costed but the loss
    and the embedding). ``hbm_efficiency`` scales the HBM bandwidth for memory-bound work (our
    assumption, 0.7, in both).

    Memory (:mod:`sim.training.model.memory`): ``memory_policy`` says what each layer keeps for its backward
    and what it recomputes (``none``, ``selective``, ``full``, ``deepseek-v3``, ``selective-op``:
    torchtitan's per-op policy; see
    :mod:`sim.training.model.activations`); ``recompute_granularity``, ``recompute_modules``,
    ``recompute_method`` and ``recompute_num_layers``, Megatron-Core's knobs, replace the policy's
    recomputation when given (:mod:`sim.training.model.recompute`); ``weight_bytes``, ``grad_bytes`` and
    ``optimizer_bytes`` are bytes
    per parameter (DeepSeek-V3: BF16 weights, FP32 gradients, FP32 master + two BF16 AdamW moments;
    the common mixed-precision Adam is 2, 2, 12; ``grad_bytes`` 2 where gradients are accumulated and
    reduced in BF16, Megatron's ``grad_reduce_in_fp32: false``), sharded by ZeRO ``zero_stage`` 0-3 over each
    parameter's data-parallel group (ZeRO-3 gathers each layer's weights before every forward and
    backward that uses them; with ``reshard_after_forward`` off, as PyTorch FSDP runs under pipeline
    parallelism and Llama 3 ran, once per step at the stage's first forward, kept to its last
    backward, gradients reduce-scattered once); ``fsdp_grads: unsharded``, ZeRO-3's gradients kept
    whole in FP32 from the first micro-batch's backward to the last (FSDP2 with its gradient sync
    off, as PyTorch's pipeline stages and gradient accumulation run it:
    :mod:`sim.training.model.memory`); ``zero3_collectives``: ``per-layer`` (one all-gather and one
    reduce-scatter a layer, the gathers a layer ahead beside the compute: FSDP2, Megatron-FSDP) or
    ``per-tensor`` (DeepSpeed's ZeRO-3 of 2021: one collective per parameter tensor, each gather
    blocking the compute: :mod:`sim.training.dpsync`); ``memory_reserve_gb``, when set, is one flat per-GPU reserve
    replacing the itemized fixed terms (CUDA context, NCCL and all-to-all buffers, allocator
    fragmentation: :func:`sim.training.model.memory.fixed_terms`). ``fp8_param_gather`` (FP8 GEMMs, ZeRO
    0-2; Megatron's ``fp8_param_gather``): the weights are kept only as Transformer Engine's FP8
    copies (no BF16 weights beside them), which the distributed optimizer all-gathers in FP8, 1 byte a
    parameter, MXFP8's in BF16 (:attr:`gathered_weight_bytes`). ``gradient_accumulation_fusion``
    (Megatron-Core's, on by default where Transformer Engine or APEX provide it): each weight-gradient
    GEMM adds its product into the main gradient in place, reading and writing ``grad_bytes`` an
    element (:attr:`wgrad_out_bytes`); off, it writes a BF16 gradient, as PyTorch's autograd does for
    FSDP2 (torchtitan) and Megatron-LM did before 2022, and a kernel of its own adds it into the main
    gradient where micro-batches accumulate (:attr:`wgrad_add_bytes`).

    Stage layout: ``stage_layers`` lists the layers of each stage (it must sum to the model's
    layers, every stage at least one); or ``first_stage_layers`` / ``last_stage_layers`` fix the
    first and last stage (Megatron style) and the rest are even; by default all are even.

    ``dp_sync``: the data-parallel gradient synchronisation starts as each stage's last backward
    finishes (``overlap``, as frameworks do) or after every rank's last op (``end``).

    ``optimizer_sync``: ``global`` (default, as Megatron-LM and DeepSeek with gradient clipping do):
    every rank's optimizer step waits for an all-reduce of the gradient norm and overflow checks
    across all GPUs, after the last rank's gradients are reduced; ``bypass``: the Zero Bubble
    paper's post-validation (section 4), no such barrier, so successive steps overlap and the step
    time is the longest rank's own span (first op to the end of its optimizer step and weight
    all-gather) instead of the makespan; a rollback, when the later check fails, is not modelled.

    ``zb_memory_limit``: zb-auto's activation memory limit, in micro-batches of a stage's forward
    activations (zb-1p is P, zb-2p is 2P).

    ``communication``: ``measured`` (each all-to-all shape measured once on an empty fabric with
    its stage's other EP groups, then charged: fast) or ``live`` (every all-to-all runs on the
    step's fabric among the other traffic, :mod:`sim.training.comm.live`). ``network``: the network backend
    every transfer runs on (:mod:`sim.network.backends`): ``maxmin`` (flows share each link max-min
    fairly) or ``analytical`` (each transfer alone on its route, no contention: faster to simulate,
    optimistic wherever traffic meets). ``nccl_protocol``: how the NCCL ring collectives (TP, CP,
    data-parallel and ZeRO-3) run (:mod:`sim.network.nccl`): ``auto`` (the protocol NCCL's own cost
    model picks by size), ``LL``, ``LL128`` or ``Simple`` (forced, as ``NCCL_PROTO`` does), each
    with NCCL's latency and bandwidth share; ``none``: the fabric alone (each ring step its route's
    latency). ``pipeline_sends``: ``async`` (a stage's output leaves on the network while its GPU
    goes on, as DualPipe, Zero Bubble's runtime and PyTorch's pipelining send) or ``blocking`` (a
    rank starts its next op only once its last exchange's sends have landed: Megatron-LM's schedules
    without ``overlap_p2p_comm``, interleaved 1F1B's steady state exchanging once per forward-backward
    pair, :func:`sim.engine.start_schedule`).

    Model parallelism inside a pipeline stage (Megatron-Core's names; :mod:`sim.training.model.layout`):
    ``tp`` tensor-parallel GPUs split each layer's GEMMs and attention heads (Shoeybi et al. 2019),
    with ``sequence_parallel`` their normalisations and dropouts over the sequence too (Korthikanti
    et al. 2022); ``cp`` context-parallel GPUs split the sequence, exchanging attention keys and
    values in a ring. A run uses ``tp x cp x pp x dp`` GPUs. ``tp_across_nodes``: allow a TP group
    to leave its NVLink domain (a warning; refused otherwise). ``tp_comm_overlap`` (with sequence
    parallelism): each TP all-gather and reduce-scatter runs beside the GEMM block it feeds or
    drains, as Megatron's userbuffers overlap does, and slows the block by holding ``tp_comm_sms``
    SMs (our assumption: 2; Transformer Engine's ring exchange uses copy engines and few SMs); the
    GEMMs a ring exchange feeds or drains run as ``tp`` chunks of their rows
    (:func:`sim.training.costs.chunk.ring_chunked`).
    ``expert_tp`` (Megatron-Core's expert tensor parallelism, a divisor of ``tp``): each routed
    expert split over that many GPUs, which all-gather the tokens dispatched to them before the
    experts and reduce-scatter the experts' output after; 1 (the default, Megatron-Core's MoE
    "parallel folding") keeps experts whole and folds EP over the TP, CP and DP GPUs.

    ``faults``: slow GPUs, kernel-time jitter, degraded or failed links (:mod:`sim.training.model.faults`;
    a mapping in YAML); any makes the step simulate every rank.

    ``kernels``: the communication kernels' launch and notify costs, SM throughput and link
    efficiencies (:mod:`sim.training.comm.kernels`): a preset name or a YAML file, such as the one
    ``python -m sim calibrate`` writes."""

    model: str
    gpu: str
    topology: str
    pp: int
    ep: int
    dp: int
    schedule: str
    microbatches: int
    seq_len: int
    tp: int = 1                                  # tensor-parallel GPUs per stage replica
    cp: int = 1                                  # context-parallel GPUs (the sequence split over them)
    sequence_parallel: bool = False              # with tp > 1: norms and dropouts split over the sequence
    tp_across_nodes: bool = False                # allow a TP group to span NVLink domains (warned)
    tp_comm_overlap: bool = False                # TP all-gathers / reduce-scatters beside their GEMMs (needs SP)
    tp_comm_sms: int = 2                         # SMs the overlapped TP communication holds (our assumption)
    expert_tp: int = 1                           # GPUs each routed expert is split over (divides tp)
    microbatch_size: int = 1
    chunks: Optional[int] = None                 # interleaved-1f1b and combined-1f1b only
    layers_per_virtual_stage: Optional[int] = None  # interleaved-1f1b: Megatron's num_layers_per_virtual_pipeline_stage
    microbatch_group_size_per_vp_stage: Optional[int] = None  # interleaved orders: micro-batches a chunk takes at a time
    embedding_stage: bool = False                # Megatron's account_for_embedding_in_pipeline_split
    loss_stage: bool = False                     # Megatron's account_for_loss_in_pipeline_split
    comm_sms: int = 20
    dispatch_precision: str = "fp8"
    combine_precision: str = "bf16"
    gemm_precision: str = "bf16"
    node_limit: Optional[int] = None
    compute_model: str = "kernels"               # kernels (sim.compute) or flops (flat efficiencies)
    gemm_model: str = "fit"                      # fit (the family's fit) or tables (read off its measured tables)
    gemm_efficiency: Optional[float] = None      # set: GEMMs flat at this share of the peak (flops model: 0.6)
    attention_efficiency: Optional[float] = None  # set: attention core flat (flops model: 0.4)
    hbm_efficiency: float = 0.7
    kernel_launch_us: float = 3.0                # a non-GEMM kernel's launch and gap: our assumption
    fusion: str = "fused"                        # fused (TE / Megatron fused kernels) or unfused (eager)
    attention_kernel: str = "flash"              # flash, flash2 (fused, scores never stored) or unfused (Megatron's)
    loss_kernel: str = "fused"                   # fused (Megatron's vocab-parallel), eager, eager-bf16, compiled
    vocab_parallel_loss: bool = True             # False: the logits gathered whole on each TP GPU for the loss
    logits_kept: bool = False                    # True: the train loop holds the BF16 logits through the backward
    stage_outputs_kept: bool = False             # True: each stage keeps every micro-batch's output to the step's end
    compute_kernels: Optional[str] = None        # a YAML of fitted kernel families (calibrate --kernels)
    a2a_algorithm: str = "hierarchical"
    a2a_chunks: int = 4
    routing_skew: float = 0.0
    routing_seed: int = 0
    memory_policy: str = "none"
    recompute_granularity: Optional[str] = None   # Megatron-Core: selective or full (None: memory_policy's)
    recompute_modules: Optional[tuple] = None     # selective: core_attn, layernorm, mla_up_proj, mlp, moe_act, ...
    recompute_method: Optional[str] = None        # full: uniform or block
    recompute_num_layers: Optional[int] = None    # full: layers per group (uniform) or per stage (block)
    activation_offload: float = 0.0              # share of each layer's saved activations kept in host memory
    zero_stage: int = 1
    reshard_after_forward: bool = True           # ZeRO-3: gather weights in every op (False: once per step)
    fsdp_grads: str = "sharded"                  # ZeRO-3: unsharded = accumulated whole until the last backward
    zero3_collectives: str = "per-layer"         # ZeRO-3: per-tensor = DeepSpeed's of 2021, each gather blocking
    weight_bytes: float = 2.0                    # BF16 weights
    grad_bytes: float = 4.0                      # FP32 gradient accumulation (Megatron's grad_reduce_in_fp32)
    fp8_param_gather: bool = False               # FP8 GEMMs: weights kept only as FP8 (Megatron's fp8_param_gather)
    gradient_accumulation_fusion: bool = True    # weight-gradient GEMMs accumulate into the main gradient (Megatron's)
    optimizer_bytes: float = 8.0                 # FP32 master (4) + two BF16 Adam moments (2+2)
    memory_reserve_gb: Optional[float] = None    # set: one flat reserve instead of the itemized fixed terms
    stage_layers: Optional[tuple] = None
    first_stage_layers: Optional[int] = None
    last_stage_layers: Optional[int] = None
    dp_sync: str = "overlap"
    optimizer_sync: str = "global"               # the global norm / overflow all-reduce before the optimizer
    zb_memory_limit: Optional[float] = None      # zb-auto: micro-batches of activations per stage
    communication: str = "measured"              # all-to-alls measured once per shape, or live (sim.training.comm.live)
    network: str = "maxmin"                      # network backend: maxmin (flows share links) or analytical
    nccl_protocol: str = "auto"                  # NCCL's ring protocol: auto (NCCL's pick), LL, LL128, Simple, none
    pipeline_sends: str = "async"                # async, or blocking (Megatron-LM without overlap_p2p_comm)
    kernels: str = "deepep"                      # communication kernels: preset or YAML (comm.kernels)
    faults: Optional[object] = None              # slow GPUs, jitter, degraded/failed links (sim.training.model.faults)
    profile: Optional[str] = None                # CSV of measured part durations replacing the FLOPs model
    description: str = ""

    def __post_init__(self):
        for name in ("model", "gpu"):             # a preset name, a file, or an inline mapping of fields
            value = getattr(self, name)
            if isinstance(value, dict):
                object.__setattr__(self, name, InlineSpec(value))
            elif not isinstance(value, str):
                raise SpecError(f"RunSpec.{name} must be a preset name, a file path or a mapping of fields, "
                                f"got {value!r}")
        for name in ("topology", "schedule", "kernels", "description"):
            if not isinstance(getattr(self, name), str):
                raise SpecError(f"RunSpec.{name} must be a name (text), got {getattr(self, name)!r}")
        for name in ("pp", "ep", "dp", "microbatches", "seq_len", "microbatch_size", "a2a_chunks"):
            _pos(self, name, high=100_000_000)
        for name in ("tp", "cp", "expert_tp"):
            _pos(self, name, high=1_024)
        if self.tp % self.expert_tp:
            raise SpecError(f"RunSpec.expert_tp ({self.expert_tp}) must divide tp ({self.tp}): allowed "
                            f"{', '.join(str(d) for d in range(1, self.tp + 1) if self.tp % d == 0)}")
        for name in ("sequence_parallel", "tp_across_nodes", "reshard_after_forward", "tp_comm_overlap"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"RunSpec.{name} must be true or false, got {getattr(self, name)!r}")
        _pos(self, "tp_comm_sms", allow_zero=True, high=100_000)
        if self.tp_comm_overlap and not (self.sequence_parallel and self.tp > 1):
            raise SpecError("RunSpec.tp_comm_overlap needs tp > 1 and sequence_parallel: true (Megatron overlaps "
                            f"the all-gathers and reduce-scatters of sequence parallelism), got tp={self.tp}, "
                            f"sequence_parallel={self.sequence_parallel}")
        if self.cp > 1 and self.seq_len % (2 * self.cp):
            raise SpecError(f"RunSpec.cp ({self.cp}) must split seq_len ({self.seq_len}) into 2 x cp equal chunks "
                            f"(load-balanced causal attention): seq_len must be a multiple of {2 * self.cp}")
        _pos(self, "comm_sms", allow_zero=True, high=100_000)
        for name in ("gemm_efficiency", "attention_efficiency", "hbm_efficiency"):
            if getattr(self, name) is not None or name == "hbm_efficiency":
                number(getattr(self, name), f"RunSpec.{name}", low=MIN_EFFICIENCY, high=1, error=SpecError)
        choice(self.compute_model, "RunSpec.compute_model", COMPUTE_MODELS, error=SpecError)
        choice(self.gemm_model, "RunSpec.gemm_model", GEMM_MODELS, error=SpecError)
        choice(self.fusion, "RunSpec.fusion", FUSIONS, error=SpecError)
        choice(self.attention_kernel, "RunSpec.attention_kernel", ATTENTION_KERNELS, error=SpecError)
        choice(self.loss_kernel, "RunSpec.loss_kernel", LOSS_KERNELS, error=SpecError)
        for name in ("vocab_parallel_loss", "logits_kept", "stage_outputs_kept"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"RunSpec.{name} must be true or false, got {getattr(self, name)!r}")
        number(self.kernel_launch_us, "RunSpec.kernel_launch_us (microseconds)", low=0, high=1e4, error=SpecError)
        if self.compute_kernels is not None and not isinstance(self.compute_kernels, str):
            raise SpecError(f"RunSpec.compute_kernels must be a YAML file path, got {self.compute_kernels!r}")
        if self.seq_len > MAX_SEQ_LEN:
            raise SpecError(f"RunSpec.seq_len must be at most {MAX_SEQ_LEN:,} tokens (twice the longest context "
                            f"trained in public reports, 1M), got {self.seq_len:,}")
        if self.microbatch_size * self.seq_len > MAX_TOKENS_PER_MICROBATCH:
            raise SpecError(f"RunSpec.microbatch_size x seq_len (tokens per micro-batch) must be at most "
                            f"{MAX_TOKENS_PER_MICROBATCH:,}, got {self.microbatch_size:,} x {self.seq_len:,}")
        for name in ("dispatch_precision", "combine_precision"):
            choice(getattr(self, name), f"RunSpec.{name}", tuple(PRECISION_BYTES), error=SpecError)
        choice(self.gemm_precision, "RunSpec.gemm_precision", GEMM_PRECISIONS, error=SpecError)
        choice(self.a2a_algorithm, "RunSpec.a2a_algorithm", ("hierarchical", "flat"), error=SpecError)
        if self.network != "maxmin":                 # the default needs no import of the network
            from ...network.backends import NETWORK_BACKENDS
            choice(self.network, "RunSpec.network", NETWORK_BACKENDS, error=SpecError)
        if self.nccl_protocol != "auto":
            from ...network.nccl import CHOICES
            choice(self.nccl_protocol, "RunSpec.nccl_protocol", CHOICES, error=SpecError)
        number(self.routing_skew, "RunSpec.routing_skew", low=0, high=100, error=SpecError)
        number(self.routing_seed, "RunSpec.routing_seed", integer=True, low=0, high=2 ** 63 - 1, error=SpecError)
        if self.node_limit is not None:
            _pos(self, "node_limit", high=100_000)
        if self.chunks is not None:
            _pos(self, "chunks", high=1_000)
        if self.layers_per_virtual_stage is not None:
            _pos(self, "layers_per_virtual_stage", high=1_000)
            if self.schedule not in CHUNKED:
                raise SpecError(f"RunSpec.layers_per_virtual_stage={self.layers_per_virtual_stage} is for the "
                                f"interleaved-1f1b and combined-1f1b schedules, not {self.schedule!r}")
            if self.chunks is not None:
                raise SpecError("RunSpec.layers_per_virtual_stage and chunks both set the virtual stages: give one")
        if self.microbatch_group_size_per_vp_stage is not None:
            _pos(self, "microbatch_group_size_per_vp_stage", high=1_000_000)
            if self.schedule not in CHUNKED:
                raise SpecError(f"RunSpec.microbatch_group_size_per_vp_stage={self.microbatch_group_size_per_vp_stage}"
                                f" is for the interleaved-1f1b and combined-1f1b schedules, not {self.schedule!r}")
        for name in ("embedding_stage", "loss_stage"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"RunSpec.{name} must be true or false, got {getattr(self, name)!r}")
            if getattr(self, name) and (self.stage_layers is not None or self.first_stage_layers is not None or
                                        self.last_stage_layers is not None):
                raise SpecError(f"RunSpec.{name} counts the {name.split('_')[0]} as a layer of the even split; "
                                "it cannot be combined with stage_layers, first_stage_layers or last_stage_layers")
        try:
            object.__setattr__(self, "faults", FaultSpec.of(self.faults))
        except InputError as exc:
            raise SpecError(f"RunSpec.{exc}") from None
        if self.profile is not None and not isinstance(self.profile, str):
            raise SpecError(f"RunSpec.profile must be a CSV file path, got {self.profile!r}")
        if self.recompute_modules is not None and not isinstance(self.recompute_modules, str) and \
                hasattr(self.recompute_modules, "__iter__"):
            object.__setattr__(self, "recompute_modules", tuple(self.recompute_modules))
        if self.recompute_num_layers is not None:
            _pos(self, "recompute_num_layers", high=100_000)
        from .recompute import check_recompute
        check_recompute(self)
        try:
            choice(self.memory_policy, "RunSpec.memory_policy", MEMORY_POLICIES)
            choice(self.dp_sync, "RunSpec.dp_sync", DP_SYNC)
            choice(self.optimizer_sync, "RunSpec.optimizer_sync", OPTIMIZER_SYNC)
            if self.zb_memory_limit is not None:
                number(self.zb_memory_limit, "RunSpec.zb_memory_limit (micro-batches of activations per stage)",
                       low=1, high=1e9)
            choice(self.communication, "RunSpec.communication", COMMUNICATION)
            choice(self.pipeline_sends, "RunSpec.pipeline_sends", PIPELINE_SENDS)
            number(self.zero_stage, "RunSpec.zero_stage (ZeRO stage)", integer=True, low=0, high=3)
            number(self.activation_offload, "RunSpec.activation_offload (the share of each layer's saved "
                   "activations kept in host memory)", low=0, high=1)
            choice(self.fsdp_grads, "RunSpec.fsdp_grads", FSDP_GRADS)
            if self.fsdp_grads == "unsharded" and self.zero_stage != 3:
                raise InputError(f"RunSpec.fsdp_grads unsharded is for zero_stage 3 (FSDP), got zero_stage "
                                 f"{self.zero_stage}")
            choice(self.zero3_collectives, "RunSpec.zero3_collectives", ZERO3_COLLECTIVES)
            if self.zero3_collectives == "per-tensor" and self.zero_stage != 3:
                raise InputError(f"RunSpec.zero3_collectives per-tensor is for zero_stage 3, got zero_stage "
                                 f"{self.zero_stage}")
            for name in ("weight_bytes", "grad_bytes", "optimizer_bytes"):
                number(getattr(self, name), f"RunSpec.{name} (bytes per parameter)", low=0, low_open=True,
                       high=MAX_BYTES_PER_PARAMETER)
            for name in ("fp8_param_gather", "gradient_accumulation_fusion"):
                if not isinstance(getattr(self, name), bool):
                    raise SpecError(f"RunSpec.{name} must be true or false, got {getattr(self, name)!r}")
            if self.fp8_param_gather and (self.gemm_precision not in ("fp8", "mxfp8") or self.zero_stage == 3):
                raise SpecError("RunSpec.fp8_param_gather (weights kept only in FP8) needs gemm_precision fp8 or "
                                f"mxfp8 and zero_stage 0-2, got gemm_precision {self.gemm_precision}, zero_stage "
                                f"{self.zero_stage}")
            if self.memory_reserve_gb is not None:
                number(self.memory_reserve_gb, "RunSpec.memory_reserve_gb", low=0)
            for name in ("first_stage_layers", "last_stage_layers"):
                if getattr(self, name) is not None:
                    number(getattr(self, name), f"RunSpec.{name}", integer=True, low=1)
            if self.stage_layers is not None:
                if isinstance(self.stage_layers, (str, bytes)) or not hasattr(self.stage_layers, "__iter__"):
                    raise SpecError(f"RunSpec.stage_layers must be a list of layer counts, got {self.stage_layers!r}")
                layers = tuple(number(v, "RunSpec.stage_layers entries", integer=True, low=1)
                               for v in self.stage_layers)
                object.__setattr__(self, "stage_layers", layers)
                if self.first_stage_layers is not None or self.last_stage_layers is not None:
                    raise SpecError("RunSpec.stage_layers cannot be combined with first_stage_layers or "
                                    "last_stage_layers: give the whole split or the two ends")
        except InputError as exc:
            raise SpecError(str(exc)) from None

    def virtual_chunks(self, layers: int) -> Optional[int]:
        """Virtual stages per rank: ``chunks``, or from ``layers_per_virtual_stage`` as Megatron
        derives them, (``layers`` + the embedding and loss slots) / (pp x layers per virtual
        stage), which must divide evenly."""
        if self.layers_per_virtual_stage is None:
            return self.chunks
        slots = layers + int(self.embedding_stage) + int(self.loss_stage)
        per_rank, rest = divmod(slots, self.pp * self.layers_per_virtual_stage)
        if rest or per_rank < 1:
            raise SpecError(f"RunSpec.layers_per_virtual_stage={self.layers_per_virtual_stage}: {layers} layers"
                            + (f" + {slots - layers} for the embedding and loss" if slots > layers else "") +
                            f" = {slots} do not split into virtual stages of {self.layers_per_virtual_stage} over "
                            f"pp={self.pp} ranks (need a multiple of {self.pp * self.layers_per_virtual_stage})")
        return per_rank

    @property
    def gpus(self) -> int:
        """GPUs of the run: ``tp x cp x pp x dp``."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def gathered_weight_bytes(self) -> float:
        """Bytes per parameter of the updated weights the optimizer writes and ZeRO-1/2 all-gathers:
        :data:`FP8_PARAM_BYTES` under ``fp8_param_gather`` with FP8 GEMMs (Megatron-Core gathers the
        FP8 weights), else ``weight_bytes`` (MXFP8's are gathered in BF16 through the gradient buffer
        and cast on the way in: Megatron-Core's ``reuse_grad_buf_for_mxfp8_param_ag``)."""
        return FP8_PARAM_BYTES if self.fp8_param_gather and self.gemm_precision == "fp8" else self.weight_bytes

    @property
    def wgrad_out_bytes(self) -> float:
        """HBM bytes a weight-gradient GEMM moves per element of its output: ``2 x grad_bytes`` under
        ``gradient_accumulation_fusion`` (it reads the main gradient and writes the sum back: 8 for
        FP32, 4 under BF16 accumulation), else 2 (a BF16 gradient written once)."""
        return 2.0 * self.grad_bytes if self.gradient_accumulation_fusion else BF16_GRADIENT_BYTES

    @property
    def wgrad_add_bytes(self) -> float:
        """HBM bytes per weight-gradient element, averaged over a step's micro-batches, of the separate
        kernel that adds each micro-batch's written gradient into the main gradient where the GEMM does
        not (``gradient_accumulation_fusion`` off): it reads the BF16 gradient and reads and writes the
        main one, ``2 + 2 x grad_bytes``, in ``M - 1`` of the ``M`` micro-batches (the first one's
        gradient becomes the main gradient: autograd's ``AccumulateGrad``). 0 with the fusion on, with
        one micro-batch a step, or under ZeRO-3 with ``fsdp_grads: sharded`` (each micro-batch's
        gradients are reduce-scattered and only the shards accumulate). Megatron-LM before its fusion
        (2022): 10 bytes an element at FP32 accumulation, x (M - 1) / M."""
        if self.gradient_accumulation_fusion or self.microbatches <= 1 or \
                (self.zero_stage == 3 and self.fsdp_grads == "sharded"):
            return 0.0
        return (BF16_GRADIENT_BYTES + 2.0 * self.grad_bytes) * (self.microbatches - 1) / self.microbatches

    @property
    def tokens_per_microbatch(self) -> int:
        """Tokens of one micro-batch (``microbatch_size x seq_len``), over all its TP and CP GPUs."""
        return self.microbatch_size * self.seq_len

    def with_(self, **changes) -> "RunSpec":
        return replace(self, **changes)


class InlineSpec(dict):
    """A model or GPU given as a mapping of its fields inside a scenario (``model: {name: ..., layers:
    ...}``): a dict that hashes by its contents, so a :class:`RunSpec` holding one stays hashable;
    ``str()`` is its name (``inline`` when it has none), which tables and CSV show."""

    def __hash__(self):
        return hash(repr(sorted(self.items(), key=lambda kv: str(kv[0]))))

    def __str__(self):
        return str(self.get("name", "inline"))


def inline_mapping(text: str, what: str) -> dict:
    """A YAML flow mapping given on a command line (``--model '{layers: 4, hidden: 512, ...}'``)."""
    value = None
    try:
        value = yaml_load(text)
    except Exception:                      # noqa: BLE001 - any YAML error is the same refusal
        pass
    if not isinstance(value, dict):
        raise SpecError(f"{what} {text!r}: an inline {what} must be a YAML mapping of fields, e.g. "
                        "'{name: my-model, layers: 4, ...}'")
    return value


def spec_label(value) -> str:
    """The name of a model or GPU as a run names it: a preset name, a file's stem, an inline
    mapping's ``name``."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        value = inline_mapping(value, "spec")
    if isinstance(value, dict):
        return str(value.get("name", "inline"))
    return Path(value).stem if Path(value).suffix.lower() in (".yaml", ".yml", ".json") else str(value)


def _from_mapping(cls, name: str, mapping: dict, kind: str):
    allowed = {f.name for f in fields(cls)} - {"name"}
    unknown = set(mapping) - allowed
    if unknown:
        raise SpecError(f"{kind} {name!r}: unknown field(s) {', '.join(repr(k) for k in sorted(unknown, key=str))}; "
                        f"allowed: {', '.join(sorted(allowed))}")
    required = [f.name for f in fields(cls) if f.name != "name" and f.default is MISSING
                and f.default_factory is MISSING]
    missing = [k for k in required if k not in mapping]
    if missing:
        raise SpecError(f"{kind} {name!r}: missing field(s) {', '.join(missing)} "
                        f"(required: {', '.join(required)})")
    try:
        return cls(name=name, **mapping) if "name" in {f.name for f in fields(cls)} else cls(**mapping)
    except TypeError as exc:
        raise SpecError(f"{kind} {name!r}: {exc}") from None


def model_names() -> list[str]:
    """Model presets: ``presets/models.yaml`` and the ``config.json`` files in ``presets/models/``."""
    return sorted(set(_presets("models")) | {p.stem for p in (PRESETS / "models").glob("*.json")})


def gpu_names() -> list[str]:
    return sorted(_presets("gpus"))


def scenario_names() -> list[str]:
    return sorted(_presets("scenarios"))


def _is_file(name: str, suffixes: tuple) -> bool:
    return Path(name).suffix.lower() in suffixes and Path(name).is_file()


def topology_gpu(graph, topology: str) -> str | None:
    """The GPU preset a topology names (its ``gpu:`` field), checked: ``None`` when it names none."""
    name = graph.graph.get("gpu_model")
    if name is not None and name not in gpu_names():
        raise SpecError(f"topology {topology!r}: gpu must be a GPU preset ({', '.join(gpu_names())}), got "
                        f"{name!r}{did_you_mean(name, gpu_names())}")
    return name


def warn_gpu_mismatch(gpu, topology, own: str | None) -> None:
    """Warn (:func:`~sim.checks.warn`) when a run's GPU preset is not the one its topology names."""
    from ...checks import warn
    if own is not None and isinstance(gpu, str) and gpu in gpu_names() and gpu != own:
        warn(f"gpu {gpu} is not the GPU of topology {spec_label(topology)!r} ({own}): simulating "
             f"{gpu}'s compute and memory on that cluster's network (--gpu {own} for its own)")


def model_from_config(config: dict, name: str, where: str = "config.json", announce: bool = False) -> ModelSpec:
    """The :class:`ModelSpec` of a Hugging Face config (a dict, :func:`sim.training.model.hfconfig.read_fields`);
    a refusal names ``where`` (:class:`~sim.training.model.hfconfig.ModelConfigError`). With ``announce``, a
    note (:func:`~sim.checks.note`) says which fields were read, assumed and ignored."""
    from ...checks import note
    from .hfconfig import ModelConfigError, read_fields
    reading = read_fields(config, where)
    try:
        spec = ModelSpec(name=name, **reading.fields, source=where)
    except SpecError as exc:
        raise ModelConfigError(f"{where}: {exc}") from None
    if announce:
        note(reading.summary(where))
    return spec


def load_config_model(path: str | Path, name: str | None = None, announce: bool = True) -> ModelSpec:
    """The :class:`ModelSpec` of the ``config.json`` at ``path``, named ``name`` or by its folder;
    ``announce``: note what was read, assumed and ignored (not for the shipped presets)."""
    from .hfconfig import model_name, read_config
    return model_from_config(read_config(path), name or model_name(path), str(path), announce)


def _inline(cls, value, kind: str):
    """The spec of ``value`` given inline (a mapping of ``cls``'s fields, or its YAML flow text on a
    command line; ``name`` optional), or ``None`` when ``value`` is a name or a path."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        value = inline_mapping(value, kind)
    if not isinstance(value, dict):
        return None
    mapping = dict(value)
    label = str(mapping.pop("name", "inline"))
    return _from_mapping(cls, label, {"source": "inline mapping", **mapping}, kind)


def load_model(name: str) -> ModelSpec:
    """A model preset by name, a Hugging Face ``config.json`` (:mod:`sim.training.model.hfconfig`), a YAML
    file of :class:`ModelSpec` fields, or a mapping of those fields (``name`` optional)."""
    presets = _presets("models")
    inline = _inline(ModelSpec, name, "model")
    if inline is not None:
        return inline
    if not isinstance(name, str):
        raise SpecError(f"model must be a preset name or a file path, got {name!r}")
    if name in presets:
        return _from_mapping(ModelSpec, name, {**copy.deepcopy(presets[name]), "source": f"preset {name}"}, "model")
    shipped = PRESETS / "models" / f"{name}.json"
    if shipped.is_file():
        return load_config_model(shipped, name, announce=False)
    if _is_file(name, (".json",)):
        return load_config_model(name)
    if _is_file(name, (".yaml", ".yml")):
        return _from_mapping(ModelSpec, Path(name).stem, _mapping_file(name, "ModelSpec"), "model")
    raise SpecError(f"unknown model {name!r}: not a preset ({', '.join(model_names())}), not an existing "
                    f"config.json (Hugging Face) and not a .yaml file of ModelSpec fields{did_you_mean(name, model_names())}")


def load_gpu(name: str) -> GPUSpec:
    """A GPU preset by name, a YAML file of :class:`GPUSpec` fields, or a mapping of those fields."""
    presets = _presets("gpus")
    inline = _inline(GPUSpec, name, "GPU")
    if inline is not None:
        return inline
    if isinstance(name, str) and name in presets:
        return _from_mapping(GPUSpec, name, copy.deepcopy(presets[name]), "GPU")
    if isinstance(name, str) and _is_file(name, (".yaml", ".yml")):
        return _from_mapping(GPUSpec, Path(name).stem, _mapping_file(name, "GPUSpec"), "GPU")
    raise SpecError(f"unknown GPU {name!r}: not a preset ({', '.join(sorted(presets))}), not an existing .yaml "
                    f"file of GPUSpec fields and not a mapping of them{did_you_mean(name, presets)}")


def _mapping_file(path: str, what: str) -> dict:
    mapping = read_yaml(path, SpecError)
    if not isinstance(mapping, dict):
        raise SpecError(f"{path}: expected a mapping of {what} fields, got {type(mapping).__name__}")
    mapping.pop("name", None)
    return mapping


PATH_FIELDS = ("model", "gpu", "topology", "kernels", "profile", "compute_kernels")   # RunSpec fields that may name a file


def resolve_paths(mapping: dict, folder: Path) -> dict:
    """``mapping`` with each relative file path in :data:`PATH_FIELDS` made relative to ``folder``
    (the folder of the file that names it), when that file exists there."""
    out = dict(mapping)
    for key in PATH_FIELDS:
        value = out.get(key)
        if isinstance(value, str) and value and not Path(value).is_absolute() and (folder / value).is_file():
            out[key] = str(folder / value)
    return out


def scenario_mapping(name_or_path: str) -> dict:
    """The RunSpec fields a scenario preset, YAML file or inline YAML mapping (``'{model: tiny-moe,
    ...}'``) writes, as written, a file's relative paths made relative to the working folder
    (:func:`resolve_paths`)."""
    path = Path(name_or_path)
    presets = _presets("scenarios")
    if name_or_path in presets:
        return copy.deepcopy(presets[name_or_path])
    if name_or_path.lstrip().startswith("{"):            # inline: what `plan` prints as its pick's command
        return inline_mapping(name_or_path, "scenario")
    if path.suffix in (".yaml", ".yml") and path.is_file():
        mapping = read_yaml(path, SpecError) or {}
        if not isinstance(mapping, dict):
            raise SpecError(f"{path}: expected a mapping of RunSpec fields, got {type(mapping).__name__}")
        return resolve_paths(mapping, path.parent)
    raise SpecError(f"unknown scenario {name_or_path!r}: not a preset ({', '.join(sorted(presets))}) "
                    f"and not an existing .yaml file{did_you_mean(name_or_path, presets)}")


def scenario_fields(run: RunSpec) -> dict:
    """The fields of ``run`` that differ from :class:`RunSpec`'s defaults, with its model, GPU and
    topology always, as plain YAML values: a scenario file that loads back to ``run``."""
    out = {}
    for f in fields(RunSpec):
        value = getattr(run, f.name)
        default = f.default if f.default is not MISSING else MISSING
        if f.name in ("model", "gpu", "topology") or value != default:
            out[f.name] = list(value) if isinstance(value, tuple) else (dict(value) if isinstance(value, dict)
                                                                          else value)
    return out


def load_scenario(name_or_path: str, **overrides) -> RunSpec:
    """A scenario preset by name, or a YAML file with RunSpec fields; ``overrides`` replace fields
    (``None`` values are ignored)."""
    mapping = scenario_mapping(name_or_path)
    changed = {k: v for k, v in overrides.items() if v is not None and mapping.get(k) != v}
    mapping.update(changed)
    if changed and isinstance(mapping.get("description"), str):
        # The description was written for the file's values: say what the command line changed.
        mapping["description"] += " [" + ", ".join(f"{k}={v}" for k, v in changed.items()) + "]"
    return _from_mapping(RunSpec, name_or_path, mapping, "scenario")
