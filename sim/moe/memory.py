"""HBM per pipeline rank: parameters, gradients and optimizer states by precision and ZeRO stage,
activations at the schedule's peak, and a fixed reserve, against the GPU's HBM.

Model states (bytes per GPU), for ``Psi`` parameters replicated over a data-parallel group of
``N`` GPUs (dense parameters: the rank's ``dp`` replicas times ``cp``; routed experts:
``tp x cp x dp / (ep x expert_tp)``, see :mod:`sim.moe.layout`), with ``w``, ``g``, ``o`` bytes per parameter of weights, gradients and
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
without ``reshard_after_forward`` holds the rank's whole weights (gathered once per step). Under
tensor parallelism a GPU holds 1/tp of every parameter (:meth:`~sim.moe.params.ParamCount.split`);
under context parallelism ``N`` is DP x CP (:func:`sharding_groups`). ZeRO-3
adds the whole weights of two layers (the one running and the one prefetched). The
parameters a rank holds come from :mod:`sim.moe.params` (two stages under DualPipe, DualPipeV,
ZB-V and Chimera; the embedding and head shared once per rank).

Activations: each stage's saved tensors per micro-batch (:mod:`sim.moe.activations`) times its
tokens; walking the rank's ops in order, an ``F`` adds its stage's bytes, an ``I`` swaps them for
what the deferred ``W`` needs, the ``W`` frees that, a ``B`` frees all; the peak of that walk is
the rank's activation memory. Transient working memory inside an op (gradients being computed,
all-to-all receive buffers) is not counted: the reserve stands for it.

Reserve (``RunSpec.memory_reserve_gb``, 4 GB, our assumption): CUDA context and library
workspaces (about 1 GB), communication buffers (DeepEP's normal kernels and NCCL, about 2 GB),
allocator fragmentation (about 1 GB).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..schedules.base import Schedule
from ..schedules.ops import parts
from .activations import (
    bytes_per_token,
    embedding_tensors,
    head_tensors,
    head_weight_grad_bytes,
    layer_tensors,
    mtp_extra_tensors,
    mtp_weight_grad_bytes,
    weight_grad_bytes,
)
from .params import ParamCount, layer_params, rank_params
from .specs import GPUSpec, ModelSpec, RunSpec, SpecError


@dataclass(frozen=True)
class RankMemory:
    """GB (1e9 bytes) per GPU of one pipeline rank."""

    rank: int
    params_gb: float
    grads_gb: float
    optimizer_gb: float
    activations_gb: float
    reserve_gb: float
    hbm_gb: float
    peak_microbatches: int        # stage-forwards held at the activation peak

    @property
    def total_gb(self) -> float:
        return self.params_gb + self.grads_gb + self.optimizer_gb + self.activations_gb + self.reserve_gb

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


def stage_activation_bytes(m: ModelSpec, run: RunSpec, layers_per_stage: list[int]) -> list[tuple[float, float]]:
    """Per stage, bytes of one micro-batch on one GPU: (kept from ``F`` to the backward, kept from
    ``I`` to a deferred ``W``). Routed experts: ``topk`` (token, expert) pairs per token (balanced
    routing). A GPU holds ``T / cp`` tokens, each tensor's TP share (:mod:`sim.moe.activations`)."""
    T, policy, pairs = run.tokens_per_microbatch // run.cp, run.memory_policy, float(m.topk)
    tp, sp, etp = run.tp, run.sequence_parallel, run.expert_tp

    def per_token(tensors) -> float:
        return bytes_per_token(tensors, tp, sp)
    out, first = [], 0
    last = len(layers_per_stage) - 1
    for s, count in enumerate(layers_per_stage):
        held = wkeep = 0.0
        for i in range(first, first + count):
            moe = i >= m.dense_layers
            held += per_token(layer_tensors(m, moe, policy, run.seq_len, pairs, etp))
            wkeep += weight_grad_bytes(m, moe, policy, pairs, tp, sp, etp)
        if s == 0:
            held += per_token(embedding_tensors())
        if s == last:
            for _ in range(m.mtp_modules):
                held += per_token(layer_tensors(m, m.is_moe, policy, run.seq_len, pairs, etp))
                held += per_token(mtp_extra_tensors(m, policy))
                wkeep += weight_grad_bytes(m, m.is_moe, policy, pairs, tp, sp, etp) + mtp_weight_grad_bytes(m, policy)
            heads = 1 + m.mtp_modules
            held += heads * per_token(head_tensors(m, policy))
            wkeep += heads * head_weight_grad_bytes(m, tp, sp)
        first += count
        out.append((held * T, wkeep * T))
    return out


def activation_peak(ops: list, stage_bytes: list[tuple[float, float]]) -> tuple[float, int]:
    """(peak bytes, stage-forwards held at that peak) of one rank's op list."""
    live = peak = 0.0
    held = at_peak = 0
    for op in ops:
        for part in parts(op):
            full, wkeep = stage_bytes[part.stage]
            if part.kind == "F":
                live += full
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
    if run.memory_reserve_gb >= gpu.hbm_gb:
        raise SpecError(f"RunSpec.memory_reserve_gb ({run.memory_reserve_gb:g}) must be below the "
                        f"{gpu.hbm_gb:g} GB of HBM of {gpu.name}")
    stage_bytes = stage_activation_bytes(model, run, layers_per_stage)
    dense_dp, expert_dp = sharding_groups(run)
    out = []
    for rank, stages in sorted(stages_held(schedule).items()):
        count = rank_params(model, layers_per_stage, stages, run.ep).on_gpu(run)
        w, g, o = model_state_bytes(count, dense_dp, expert_dp, run.zero_stage, run.weight_bytes, run.grad_bytes,
                                    run.optimizer_bytes)
        if run.zero_stage == 3 and not run.reshard_after_forward:   # gathered once, kept for the whole step
            w = run.weight_bytes * count.total
        elif run.zero_stage == 3:        # the gathered weights of the layer running and the one prefetched
            w += 2 * run.weight_bytes * max(layer_params(model, moe, run.ep).on_gpu(run).total
                                               for moe in (False, True))
        act, peak_mb = activation_peak(schedule.ranks[rank], stage_bytes)
        out.append(RankMemory(rank, w / 1e9, g / 1e9, o / 1e9, act / 1e9, run.memory_reserve_gb, gpu.hbm_gb,
                              peak_mb))
    return out


__all__ = ["RankMemory", "activation_peak", "memory_per_rank", "model_state_bytes", "sharding_groups", "stage_activation_bytes",
           "stages_held"]
