"""HBM per pipeline rank: parameters, gradients and optimizer states by precision and ZeRO stage,
activations at the schedule's peak, and itemized fixed terms, against the GPU's HBM.

Model states (bytes per GPU), for ``Psi`` parameters replicated over a data-parallel group of
``N`` GPUs (dense parameters: the rank's ``dp`` replicas times ``cp``; routed experts:
``tp x cp x dp / (ep x expert_tp)``, see :mod:`sim.training.model.layout`), with ``w``, ``g``, ``o`` bytes per parameter of weights, gradients and
optimizer states (ZeRO, Rajbhandari et al. SC'20):

=========  =========  =========  =========
ZeRO       weights    gradients  optimizer
=========  =========  =========  =========
0          w Psi      g Psi      o Psi
1          w Psi      g Psi      o Psi / N
2          w Psi      g Psi / N  o Psi / N
3 (FSDP)   w Psi / N  g Psi / N  o Psi / N
=========  =========  =========  =========

(the ZeRO paper's 7.5B model with 2 + 2 + 12 bytes on 64 GPUs: 120, 31.4, 16.6, 1.88 GB); ZeRO-3
without ``reshard_after_forward`` holds the rank's whole weights (gathered once per step) in BF16
besides its shard of the stored weights (FSDP2's all-gather buffers are apart from the shards).
``fsdp_grads: unsharded`` keeps ZeRO-3's gradients whole, ``4 Psi``, until the one reduce-scatter
after the last backward, as PyTorch's pipeline stages and gradient accumulation run FSDP2: they
turn its gradient sync off for every micro-batch but the last, and FSDP2 then upcasts each
unsharded gradient to its reduce precision (FP32, :data:`ACCUMULATED_GRAD_BYTES`) and accumulates
it there (``torch.distributed.pipelining`` ``backward_maybe_with_nosync``; FSDP2's
``to_accumulated_grad_if_needed``). Under
tensor parallelism a GPU holds 1/tp of every parameter (:meth:`~sim.training.model.params.ParamCount.split`);
under context parallelism ``N`` is DP x CP (:func:`sharding_groups`). ZeRO-3
adds the whole weights of two layers in BF16 (the one running and the one prefetched) and of the
shared tensors the rank holds (embedding, head: :func:`~sim.training.model.params.shared_params`),
which FSDP2 shards as its root unit and never reshards between the step's first forward and its
last backward (its ``_lazy_init``: "for the root, do not reshard after forward"; torchtitan and
KempnerForge wrap each block, then the model; assumed of every ZeRO-3 run). The
parameters a rank holds come from :mod:`sim.training.model.params` (two stages under DualPipe, DualPipeV,
ZB-V and Chimera; the embedding and head shared once per rank).

FP8 GEMMs outside DeepSeek's recipe keep Transformer Engine's FP8 copies of the weights, row-wise
and column-wise (the transpose Hopper's FP8 GEMMs need; MXFP8 on Blackwell keeps both too): 2 bytes
per parameter of the rank's Linears, cached across micro-batches (``fp8_weights_gb``); under ZeRO-3
the FP8 weights are gathered as the BF16 ones are, and kept by nobody. Under ``fp8_param_gather``
(Megatron's FP8 primary weights, which NVIDIA's FP8 performance recipes set) those FP8 copies are the
weights: no BF16 copy is kept beside them (``params_gb`` 0, the FP32 master weights with the
optimizer states). Gradients take ``grad_bytes`` (2 where Megatron's ``grad_reduce_in_fp32`` is off,
as NVIDIA's performance recipes set it: the gradient buffer is BF16).

Activations: each stage's saved tensors per micro-batch (:mod:`sim.training.model.activations`, under the
run's recomputation, :mod:`sim.training.model.recompute`) times its tokens; walking the rank's ops in order,
an ``F`` adds its stage's bytes, an ``I`` swaps them for what the deferred ``W`` needs, the ``W``
frees that, a ``B`` frees all; the peak of that walk is the rank's activation memory. Under
``stage_outputs_kept`` (torch.distributed.pipelining in 2024) each ``F`` also leaves its output
until the step ends, when the last stage's are merged into one more copy
(:func:`stage_output_bytes`, :func:`kept_outputs_peak`). The
gradients a backward holds beside it (one layer's at a time) and the layers a full recomputation
rematerialises are fixed terms (below).

Fixed terms (:func:`fixed_terms`, our assumptions, each in the per-rank breakdown): the CUDA
context with the libraries' workspaces (:data:`CUDA_CONTEXT_GB`); NCCL's buffers, per communicator
the rank joins (:data:`NCCL_GB`: 4 MiB x 2 directions x 16 channels; DP, expert DP, TP, CP, EP and
the two pipeline neighbours); an MoE layer's all-to-all buffers (one micro-batch's dispatched
copies received and combined, BF16); on the last stage the loss's buffers beside what it keeps (the
head's BF16 logits of one micro-batch under a fused loss, the two FP32 gradients of an eager one:
:mod:`sim.training.model.activations`); under full recomputation the layer (or group) it
rematerialises for a backward, under torchtitan's per-op checkpointing the part of a layer it
rematerialises; the gradients one layer's backward holds at once (:func:`backward_gradient_bytes`:
its output's and the residual's, its MLP's intermediate ones); under ZeRO-3 the reduce-scatter
around one layer's backward
(:func:`reduce_scatter_bytes`); allocator fragmentation, :data:`FRAGMENTATION` of the rest
(PyTorch's caching allocator with expandable segments, which Megatron-Bridge and torchtitan set).
``RunSpec.memory_reserve_gb``, when set, replaces them with one flat reserve.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...schedules.base import Schedule
from ...schedules.ops import FBOp, parts
from .activations import (
    BF16,
    ActivationRecipe,
    backward_gradient_tensors,
    bytes_per_token,
    embedding_tensors,
    head_tensors,
    head_weight_grad_bytes,
    layer_tensors,
    loss_transient_bytes,
    mtp_extra_tensors,
    mtp_weight_grad_bytes,
    weight_grad_bytes,
)
from .params import ParamCount, layer_params, rank_params, shared_params
from .recompute import check_layers, check_op_policy, recompute_of
from .specs import GPUSpec, ModelSpec, RunSpec, SpecError

CUDA_CONTEXT_GB = 0.8        # CUDA context, cuBLAS/cuDNN workspaces, loaded kernels: our assumption
NCCL_GB = 0.134              # per communicator: 4 MiB buffers x 2 directions x 16 channels (NCCL_BUFFSIZE default)
FRAGMENTATION = 0.02         # caching allocator's reserved beyond allocated, with expandable segments: our assumption
FP8_WEIGHT_BYTES = 2.0       # Transformer Engine's FP8 weight copies, row-wise and column-wise
GATHERED_WEIGHT_BYTES = 2.0  # ZeRO-3 / FSDP gathers weights in the compute precision, BF16
ACCUMULATED_GRAD_BYTES = 4.0  # FSDP2 accumulates unsynchronised gradients in its reduce precision, FP32
OUTSIDE_ALLOCATOR = ("CUDA context", "NCCL")   # fixed terms PyTorch's caching allocator never holds
ALLOCATOR_RESERVE = "fragmentation"            # the fixed term that is the allocator's reserve beyond its tensors
PYTORCH_COUNTERS = ("reserved", "allocated")   # torch.cuda.max_memory_reserved / max_memory_allocated


@dataclass(frozen=True)
class RankMemory:
    """GB (1e9 bytes) per GPU of one pipeline rank."""

    rank: int
    params_gb: float
    grads_gb: float
    optimizer_gb: float
    activations_gb: float
    reserve_gb: float             # the fixed terms together (or the flat memory_reserve_gb)
    hbm_gb: float
    peak_microbatches: int        # stage-forwards held at the activation peak
    fp8_weights_gb: float = 0.0   # Transformer Engine's FP8 weight copies
    fixed: tuple = ()             # (name, GB) of each fixed term (fixed_terms)

    @property
    def total_gb(self) -> float:
        return (self.params_gb + self.grads_gb + self.optimizer_gb + self.activations_gb + self.reserve_gb
                + self.fp8_weights_gb)

    @property
    def breakdown(self) -> str:
        """``params 3.3, grads 6.5, ...`` as the warnings and the report print it."""
        fixed = ", ".join(f"{name} {gb:.1f}" for name, gb in self.fixed)
        fp8 = f", FP8 weights {self.fp8_weights_gb:.1f}" if self.fp8_weights_gb else ""
        return (f"params {self.params_gb:.1f}{fp8}, grads {self.grads_gb:.1f}, optimizer {self.optimizer_gb:.1f}, "
                f"activations {self.activations_gb:.1f}, fixed {self.reserve_gb:.1f}" + (f" ({fixed})" if fixed else ""))

    def pytorch_counter_gb(self, counter: str) -> float:
        """GB that PyTorch's peak counter ``counter`` would report for this rank: ``reserved``
        (``torch.cuda.max_memory_reserved``) leaves out what the caching allocator never holds, the
        CUDA context and NCCL's buffers (NCCL allocates its own); ``allocated``
        (``max_memory_allocated``) leaves out the allocator's reserve too (``fragmentation``).
        The whole of :attr:`total_gb` is what the GPU's HBM must hold."""
        if counter not in PYTORCH_COUNTERS:
            raise SpecError(f"a PyTorch memory counter is one of {', '.join(PYTORCH_COUNTERS)}, got {counter!r}")
        outside = OUTSIDE_ALLOCATOR + ((ALLOCATOR_RESERVE,) if counter == "allocated" else ())
        return self.total_gb - sum(gb for name, gb in self.fixed if name in outside)

    @property
    def headroom_gb(self) -> float:
        """HBM left over (negative: does not fit)."""
        return self.hbm_gb - self.total_gb

    @property
    def fits(self) -> bool:
        return self.total_gb <= self.hbm_gb


def model_state_bytes(count: ParamCount, dense_dp: int, expert_dp: int, zero_stage: int, weight_bytes: float,
                      grad_bytes: float, optimizer_bytes: float) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states) in bytes on one GPU under ZeRO ``zero_stage``."""
    def sharded(per_param: float, from_stage: int) -> float:
        if zero_stage >= from_stage:
            return per_param * (count.dense / dense_dp + count.expert / expert_dp)
        return per_param * count.total
    return sharded(weight_bytes, 3), sharded(grad_bytes, 2), sharded(optimizer_bytes, 1)


def sharding_groups(run: RunSpec) -> tuple[int, int]:
    """(GPUs a dense parameter's ZeRO shards spread over, GPUs an expert parameter's do): the
    data-parallel replicas times the CP GPUs (which hold the same weights: Megatron-Core shards
    its distributed optimizer over DP x CP), and the GPUs holding the same routed experts for them:
    ``tp x cp x dp / (ep x expert_tp)`` (Megatron-Core's expert data-parallel group; ``ep`` counts
    GPUs)."""
    return run.dp * run.cp, max(1, run.tp * run.cp * run.dp // (run.ep * run.expert_tp))


def run_recipe(run: RunSpec, rc, full: bool) -> ActivationRecipe:
    """A layer's :class:`ActivationRecipe` under recomputation ``rc`` with the run's attention
    kernel, FP8 or DeepSeek caches and fusion (``full``: a layer its full recomputation covers)."""
    return ActivationRecipe.of(rc, full, run.attention_kernel, run.gemm_precision in ("fp8", "mxfp8"),
                               run.memory_policy == "deepseek-v3", run.fusion)


def layer_per_token(m: ModelSpec, run: RunSpec, moe: bool, recipe: ActivationRecipe) -> float:
    """Bytes per token one GPU keeps of one layer under ``recipe`` (its TP share)."""
    return bytes_per_token(layer_tensors(m, moe, recipe, run.seq_len, float(m.topk), run.expert_tp), run.tp,
                           run.sequence_parallel)


def layer_held_per_token(m: ModelSpec, run: RunSpec, moe: bool, full: bool) -> float:
    """Bytes per token one GPU keeps of one layer from its forward to its backward, under the run's
    recomputation (``full``: a layer its full recomputation covers), before any offloading."""
    return layer_per_token(m, run, moe, run_recipe(run, recompute_of(run), full))


def offloaded_layer_bytes(m: ModelSpec, run: RunSpec, moe: bool, full: bool) -> float:
    """Bytes of one layer's saved activations one GPU copies to host memory per micro-batch (and
    back before the backward): ``activation_offload`` of what it keeps, ``T / cp`` tokens."""
    if not run.activation_offload:
        return 0.0
    return run.activation_offload * layer_held_per_token(m, run, moe, full) * (run.tokens_per_microbatch // run.cp)


def stage_activation_bytes(m: ModelSpec, run: RunSpec, layers_per_stage: list[int]) -> list[tuple[float, float]]:
    """Per stage, bytes of one micro-batch on one GPU: (kept from ``F`` to the backward, kept from
    ``I`` to a deferred ``W``). Routed experts: ``topk`` (token, expert) pairs per token (balanced
    routing). A GPU holds ``T / cp`` tokens, each tensor's TP share (:mod:`sim.training.model.activations`).
    Under uniform full recomputation in groups of ``n`` a stage keeps one layer input per group;
    ``activation_offload`` of each layer's share is in host memory instead (the head's and the
    embedding's are not offloaded; a deferred ``W``'s inputs stay on the GPU)."""
    T, pairs = run.tokens_per_microbatch // run.cp, float(m.topk)
    tp, sp, etp = run.tp, run.sequence_parallel, run.expert_tp
    rc = recompute_of(run)
    check_layers(rc, layers_per_stage)
    check_op_policy(rc, m, run)

    def recipe(full: bool) -> ActivationRecipe:
        return run_recipe(run, rc, full)

    def per_token(tensors) -> float:
        return bytes_per_token(tensors, tp, sp)
    layer_bytes: dict[tuple[bool, bool], tuple[float, float]] = {}

    def one_layer(moe: bool, full: bool) -> tuple[float, float]:
        """(held per token, kept for W) of one layer: the same for every layer of its kind."""
        if (moe, full) not in layer_bytes:
            layer_bytes[moe, full] = (layer_held_per_token(m, run, moe, full) * (1 - run.activation_offload),
                                      weight_grad_bytes(m, moe, recipe(full), pairs, tp, sp, etp))
        return layer_bytes[moe, full]
    out, first = [], 0
    last = len(layers_per_stage) - 1
    for s, count in enumerate(layers_per_stage):
        held = wkeep = 0.0
        full = rc.full_layers(count)
        group = rc.stored_inputs(count) / count if all(full) and count else 1.0   # uniform groups: inputs kept
        for j, i in enumerate(range(first, first + count)):
            layer_held, layer_w = one_layer(i >= m.dense_layers, full[j])
            held += layer_held * (group if full[j] else 1.0)
            wkeep += layer_w
        if s == 0:
            held += per_token(embedding_tensors())
        if s == last:
            mtp = recipe(rc.granularity == "full")
            for _ in range(m.mtp_modules):
                held += per_token(layer_tensors(m, m.is_moe, mtp, run.seq_len, pairs, etp))
                held += per_token(mtp_extra_tensors(m, mtp))
                wkeep += weight_grad_bytes(m, m.is_moe, mtp, pairs, tp, sp, etp) + mtp_weight_grad_bytes(m, mtp)
            heads = 1 + m.mtp_modules
            held += heads * per_token(head_tensors(m, mtp, run.loss_kernel, run.vocab_parallel_loss))
            wkeep += heads * head_weight_grad_bytes(m, tp, sp)
        first += count
        out.append((held * T, wkeep * T))
    return out


def communicators(model: ModelSpec, run: RunSpec) -> int:
    """NCCL communicators a GPU joins: its dense parameters' data-parallel group, its experts' (MoE),
    the TP, CP and EP groups it belongs to, and one per pipeline neighbour."""
    dense_dp, expert_dp = sharding_groups(run)
    groups = [dense_dp > 1, model.is_moe and expert_dp > 1, run.tp > 1, run.cp > 1, model.is_moe and run.ep > 1]
    return sum(groups) + (2 if run.pp > 1 else 0)


def layer_kinds(model: ModelSpec) -> set[bool]:
    """The kinds of layer the model has, by whether each is an MoE layer: both for an MoE model with
    dense layers first (DeepSeek-V3's three), else the model's one kind."""
    return {False, True} if model.is_moe and model.dense_layers else {model.is_moe}


def working_set(model: ModelSpec, run: RunSpec, layers_per_stage: list[int], stages: set[int]) -> float:
    """Bytes a fully recomputed layer rematerialises for its backward, one micro-batch (the group of
    ``recompute_num_layers`` under the uniform method): its activations as if nothing were recomputed;
    under torchtitan's per-op policy (granularity ``op``) the layer's activations less what it kept."""
    rc = recompute_of(run)
    if rc.granularity not in ("full", "op"):
        return 0.0
    nothing = run_recipe(run, rc._replace(granularity=None), False)
    T = run.tokens_per_microbatch // run.cp
    kinds = layer_kinds(model)
    if rc.granularity == "op":
        kept = run_recipe(run, rc, False)
        return max(layer_per_token(model, run, moe, nothing) - layer_per_token(model, run, moe, kept)
                   for moe in kinds) * T
    group = rc.num_layers if rc.method == "uniform" else 1
    return max(layer_per_token(model, run, moe, nothing) for moe in kinds) * T * \
        min(group, min(layers_per_stage[s] for s in stages))


def backward_gradient_bytes(model: ModelSpec, run: RunSpec) -> float:
    """Bytes of the gradients one layer's backward holds at once on a GPU, one micro-batch
    (:func:`~sim.training.model.activations.backward_gradient_tensors`, its TP share; balanced
    routing), for the layer kind that holds the most."""
    T = run.tokens_per_microbatch // run.cp
    kinds = layer_kinds(model)
    return T * max(bytes_per_token(backward_gradient_tensors(model, moe, float(model.topk)), run.tp,
                                   run.sequence_parallel) for moe in kinds)


def largest_layer_params(model: ModelSpec, run: RunSpec) -> float:
    """Parameters on one GPU of the run's largest layer, dense or MoE (what ZeRO-3 gathers and
    reduce-scatters at once)."""
    return max(layer_params(model, moe, run.ep).on_gpu(run).total for moe in (False, True))


def reduce_scatter_bytes(model: ModelSpec, run: RunSpec) -> float:
    """Bytes of ZeRO-3's gradient reduce-scatter around one layer's backward (0 below ZeRO-3): the
    layer's unsharded gradients as autograd computes them, in the gathered weights' precision
    (:data:`GATHERED_WEIGHT_BYTES`), and the reduce-scatter input they are copied into, in FSDP2's
    reduce precision (:data:`ACCUMULATED_GRAD_BYTES`, FP32: torchtitan's and KempnerForge's
    ``reduce_dtype``), for the largest layer the GPU holds. FSDP2 allocates the input and copies the
    gradients in before it frees them (torch's ``foreach_reduce_scatter``: ``reduce_scatter_input``
    in ``reduce_dtype``, then ``unsharded_grads.clear()``); under ``fsdp_grads: unsharded`` each
    micro-batch's unsharded gradients are upcast into the accumulated ones the same way. Llama 3 8B
    at TP 1: 218M parameters a layer x (2 + 4) bytes = 1.31 GB. (DeepSpeed's ZeRO-3 reduces in the
    training precision by default: 2 bytes where this counts 4.)"""
    if run.zero_stage != 3:
        return 0.0
    return largest_layer_params(model, run) * (GATHERED_WEIGHT_BYTES + ACCUMULATED_GRAD_BYTES)


def fixed_terms(model: ModelSpec, run: RunSpec, allocated_gb: float, last_stage: bool = False,
                working_bytes: float = 0.0, step_end: bool = False) -> tuple[tuple[str, float], ...]:
    """(name, GB) of each fixed term (see the module) for a GPU that allocates ``allocated_gb``
    besides them: ``last_stage`` adds the loss's buffers beside what its activations keep, one
    micro-batch's logits at :func:`~sim.training.model.activations.loss_transient_bytes` each (the
    BF16 logits before a fused loss turns them into its FP32 softmax; an eager loss's FP32
    gradients), and 2 more (BF16) where the train loop keeps the logits through the backward
    (``logits_kept``), ``working_bytes`` a recomputation's working set (:func:`working_set`);
    ``step_end`` only what outlives the step's passes (the CUDA context, NCCL, fragmentation)."""
    terms = [("CUDA context", CUDA_CONTEXT_GB), ("NCCL", NCCL_GB * communicators(model, run))]
    if step_end:
        terms.append(("fragmentation", FRAGMENTATION * (allocated_gb + sum(gb for _, gb in terms))))
        return tuple(terms)
    T = run.tokens_per_microbatch // run.cp
    if model.is_moe:
        shard = T / (run.tp if run.sequence_parallel else 1)
        terms.append(("all-to-all buffers", 2 * shard * model.topk * model.hidden * 2 * run.expert_tp / 1e9))
    if last_stage:
        vocab = model.vocab / run.tp if run.vocab_parallel_loss else model.vocab
        transient = loss_transient_bytes(run.loss_kernel, run.tp if run.vocab_parallel_loss else 1)
        held = BF16 if run.logits_kept else 0.0          # the train loop's own reference to the logits
        terms.append(("logits", T * vocab * (transient + held) / 1e9))
    if working_bytes:
        terms.append(("recompute working set", working_bytes / 1e9))
    terms.append(("backward gradients", backward_gradient_bytes(model, run) / 1e9))
    terms.append(("ZeRO-3 reduce-scatter", reduce_scatter_bytes(model, run) / 1e9))
    terms.append(("fragmentation", FRAGMENTATION * (allocated_gb + sum(gb for _, gb in terms))))
    return tuple((name, gb) for name, gb in terms if gb > 0)


def stage_output_bytes(model: ModelSpec, run: RunSpec, stages: int) -> list[float]:
    """Per stage, bytes of one micro-batch's output a GPU keeps until the step ends under
    ``stage_outputs_kept`` (0 each otherwise). torch.distributed.pipelining's stage appended every
    forward's output to its ``output_chunks``, freed only when the next step began, and the
    schedule's ``step`` concatenated the last stage's into the merged output it returns (PyTorch
    PR 153383 of May 2025 stopped the other stages keeping theirs; issue 159251, fixed by a
    ``return_outputs`` flag, the last stage's). A stage's output is its hidden state, ``T / cp``
    tokens x hidden x 2 bytes (BF16; 1/tp of it under sequence parallelism); the last stage's the
    head's BF16 logits, ``T / cp`` tokens x the vocabulary (1/tp of it when the loss is
    vocabulary-parallel). Llama 3.1 405B at TP 8, 4 x 8,192 tokens a micro-batch: 134 MB a stage,
    1.05 GB of logits."""
    if not run.stage_outputs_kept:
        return [0.0] * stages
    T = run.tokens_per_microbatch // run.cp
    hidden = T * model.hidden * BF16 / (run.tp if run.sequence_parallel else 1)
    logits = T * model.vocab * BF16 / (run.tp if run.vocab_parallel_loss else 1)
    return [hidden] * (stages - 1) + [logits]


def kept_outputs_peak(ops: list, kept: list[float]) -> float:
    """Bytes a rank holds when its step ends under ``stage_outputs_kept``: every forward's kept
    output (:func:`stage_output_bytes`), and where it runs the last stage the merged copy of that
    stage's (``torch.cat`` of its micro-batches' logits), both at once."""
    last = len(kept) - 1
    forwards = [part.stage for op in ops for part in parts(op) if part.kind == "F"]
    return sum(kept[s] for s in forwards) + sum(kept[s] for s in forwards if s == last)


def activation_peak(ops: list, stage_bytes: list[tuple[float, float]],
                    stage_layers: list[int] | None = None, kept: list[float] | None = None) -> tuple[float, int]:
    """(peak bytes, stage-forwards held at that peak) of one rank's op list.

    An overlapped unit ``[F&B]`` (DualPipe's F&B chunks, Megatron-Core's combined 1F1B) runs its two
    micro-batches' layers in pairs, forward layer ``k`` beside backward layer ``n_b - 1 - k``
    (Megatron-Core's ``TransformerModelChunkSchedulePlan.run``), so the backward frees a layer's
    tensors as the forward adds one: with ``f = F_full / n_f`` and ``b = B_full / n_b`` a layer
    (``stage_layers``; uniform over the stage), the unit peaks at ``live + f + max(0, (p - 1)(f - b))``
    over its ``p = min(n_f, n_b)`` pairs (each pair's forward layer counted before its backward layer
    frees: the bound), and the layers left unpaired run after them. Without ``stage_layers`` a
    stage counts as one layer (the forward whole, then the backward). ``kept``: per stage, bytes a
    forward leaves that no backward frees (:func:`stage_output_bytes`)."""
    kept = kept or [0.0] * len(stage_bytes)
    live = peak = 0.0
    held = at_peak = 0
    for op in ops:
        if isinstance(op, FBOp):
            f_full, b_full = stage_bytes[op.f.stage][0], stage_bytes[op.b.stage][0]
            n_f = max(1, stage_layers[op.f.stage]) if stage_layers else 1
            n_b = max(1, stage_layers[op.b.stage]) if stage_layers else 1
            f, b, pairs = f_full / n_f, b_full / n_b, min(n_f, n_b)
            inside = live + f + max(0.0, (pairs - 1) * (f - b))
            live += f_full - b_full + kept[op.f.stage]
            held += 1
            if max(inside, live) > peak:
                peak, at_peak = max(inside, live), held
            held -= 1
            continue
        for part in parts(op):
            full, wkeep = stage_bytes[part.stage]
            if part.kind == "F":
                live += full + kept[part.stage]
                held += 1
            elif part.kind == "I":
                live += wkeep - full
                held -= 1
            elif part.kind == "W":
                live -= wkeep
            else:                                   # B
                live -= full
                held -= 1
            if live > peak:
                peak, at_peak = live, held
    return peak, at_peak


def stages_held(schedule: Schedule) -> dict[int, set[int]]:
    """The stages whose weights each rank holds."""
    held: dict[int, set[int]] = {r: set() for r in schedule.ranks}
    for rank, ops in schedule.ranks.items():
        for op in ops:
            for part in parts(op):
                held[rank].add(part.stage)
    return held


def memory_per_rank(model: ModelSpec, gpu: GPUSpec, run: RunSpec, layers_per_stage: list[int],
                    schedule: Schedule) -> list[RankMemory]:
    if run.memory_reserve_gb is not None and run.memory_reserve_gb >= gpu.hbm_gb:
        raise SpecError(f"RunSpec.memory_reserve_gb ({run.memory_reserve_gb:g}) must be below the "
                        f"{gpu.hbm_gb:g} GB of HBM of {gpu.name}")
    stage_bytes = stage_activation_bytes(model, run, layers_per_stage)
    kept = stage_output_bytes(model, run, len(layers_per_stage))
    dense_dp, expert_dp = sharding_groups(run)
    out = []
    for rank, stages in sorted(stages_held(schedule).items()):
        count = rank_params(model, layers_per_stage, stages, run.ep).on_gpu(run)
        weight_bytes = 0.0 if run.fp8_param_gather else run.weight_bytes     # FP8 weights only: counted in fp8_w
        w, g, o = model_state_bytes(count, dense_dp, expert_dp, run.zero_stage, weight_bytes, run.grad_bytes,
                                    run.optimizer_bytes)
        if run.zero_stage == 3 and not run.reshard_after_forward:   # gathered once, kept for the whole step
            w += GATHERED_WEIGHT_BYTES * count.total
        elif run.zero_stage == 3:        # the layer running, the one prefetched, and the root unit all step
            w += GATHERED_WEIGHT_BYTES * (2 * largest_layer_params(model, run)
                                          + shared_params(model, layers_per_stage, stages).on_gpu(run).total)
        if run.zero_stage == 3 and run.fsdp_grads == "unsharded":   # accumulated whole until the last backward
            g = ACCUMULATED_GRAD_BYTES * count.total
        act, peak_mb = activation_peak(schedule.ranks[rank], stage_bytes, layers_per_stage, kept)
        fp8_copies = run.gemm_precision in ("fp8", "mxfp8") and run.memory_policy != "deepseek-v3" and \
            run.zero_stage < 3
        fp8_w = FP8_WEIGHT_BYTES * count.total if fp8_copies or run.fp8_param_gather else 0.0
        state = (w + g + o + fp8_w) / 1e9
        at_end = kept_outputs_peak(schedule.ranks[rank], kept)   # the step's end: kept outputs and their merge
        if run.memory_reserve_gb is not None:
            fixed, reserve = (), run.memory_reserve_gb
            if at_end > act:
                act, peak_mb = at_end, 0
        else:
            last = len(layers_per_stage) - 1 in stages
            fixed = fixed_terms(model, run, state + act / 1e9, last, working_set(model, run, layers_per_stage, stages))
            reserve = sum(gb for _, gb in fixed)
            if at_end > act:
                fixed_end = fixed_terms(model, run, state + at_end / 1e9, step_end=True)
                if at_end / 1e9 + sum(gb for _, gb in fixed_end) > act / 1e9 + reserve:
                    act, peak_mb, fixed, reserve = at_end, 0, fixed_end, sum(gb for _, gb in fixed_end)
        out.append(RankMemory(rank, w / 1e9, g / 1e9, o / 1e9, act / 1e9, reserve, gpu.hbm_gb, peak_mb,
                              fp8_w / 1e9, fixed))
    return out


__all__ = ["ACCUMULATED_GRAD_BYTES", "ALLOCATOR_RESERVE", "CUDA_CONTEXT_GB", "FRAGMENTATION", "NCCL_GB",
           "backward_gradient_bytes", "layer_kinds",
           "OUTSIDE_ALLOCATOR", "PYTORCH_COUNTERS", "RankMemory", "activation_peak", "communicators", "fixed_terms",
           "largest_layer_params", "layer_held_per_token", "layer_per_token", "memory_per_rank", "model_state_bytes",
           "offloaded_layer_bytes", "reduce_scatter_bytes", "run_recipe", "sharding_groups", "stage_activation_bytes",
           "kept_outputs_peak", "stage_output_bytes", "stages_held"]
