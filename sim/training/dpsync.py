"""The data-parallel end of a step: gradient synchronisation on the fabric and the optimizer step.

Per pipeline rank, the gradients of each stage it holds (a GPU's 1/tp share under tensor
parallelism) are synchronised over their data-parallel groups (:mod:`sim.training.model.layout`: dense parameters over the rank's ``dp`` replicas, routed experts
over the ``dp / ep`` GPUs holding the same experts), as collectives on the fabric
(:func:`~sim.network.hierarchical_reduce_scatter`, a ring inside each node then one per rail):

=========  ===================================================  ==============================
ZeRO       after the backward                                   optimizer step on
=========  ===================================================  ==============================
0          all-reduce of gradients (reduce-scatter + all-gather)  every parameter
1, 2       reduce-scatter of gradients; all-gather of the         the GPU's shard
           updated weights after the optimizer step
3 (FSDP)   the layers' gradients are reduce-scattered and their     the GPU's shard
           weights all-gathered layer by layer inside the ops
           (:mod:`sim.training.costs.parts`, :class:`LayerCollectives`);
           only the embedding and heads are reduce-scattered here
           (without ``reshard_after_forward``: the weights are
           gathered once per step, every gradient here)
=========  ===================================================  ==============================

A stage's reduce-scatter starts when its last backward (the last ``W`` or ``B`` of that stage on the
rank) has finished on every replica (``dp_sync: overlap``, as frameworks overlap it with the tail
of the pipeline) or when every rank has finished its last op (``dp_sync: end``). The optimizer step
starts when the rank's ops are done and its gradients are reduced; it is memory-bound: per
parameter of the GPU's shard it reads the gradient, reads and writes the optimizer states and
writes the weight: ``grad_bytes + 2 optimizer_bytes + gathered_weight_bytes`` bytes at the HBM
bandwidth x ``hbm_efficiency``. The gradients are reduced in ``grad_bytes`` a parameter (2: BF16,
Megatron's ``grad_reduce_in_fp32`` off), the weights gathered in ``gathered_weight_bytes`` (1: FP8
under ``fp8_param_gather`` with FP8 GEMMs). The step ends when the last rank's all-gather (or optimizer step) ends.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from ..network import Network, hierarchical_all_gather, hierarchical_alone_s, hierarchical_reduce_scatter, transfers_on
from ..perf import gc_paused
from .model.memory import sharding_groups, stages_held
from .model.params import ParamCount, layer_modules, layer_params, layer_tensors, stage_params
from .scenario import Scenario


@dataclass
class RankSync:
    """When a pipeline rank's data-parallel work happened (seconds on the network's clock; the step's
    start until it happens)."""

    launched: float = 0.0          # its last gradient reduce-scatter (or all-reduce) started
    reduced: float = 0.0           # its last gradient reduce-scatter (or all-reduce) ended
    optimizer_start: float = 0.0
    optimizer_end: float = 0.0
    end: float = 0.0               # all-gather of updated weights ended (= optimizer_end without one)


def stage_param_counts(sc: Scenario) -> dict[int, dict[int, ParamCount]]:
    """Per rank, the parameters of each stage it holds on one GPU (its TP share); a tensor shared by
    two stages of the rank (the embedding and head under DualPipe) is counted with the first of them."""
    m, layers = sc.model, sc.chunk.layers_per_stage
    out: dict[int, dict[int, ParamCount]] = {}
    for rank, stages in stages_held(sc.schedule).items():
        seen: set[str] = set()
        out[rank] = {}
        for s in sorted(stages):
            count, shared = stage_params(m, layers, s, sc.run.ep)
            new = shared - seen
            seen |= shared
            out[rank][s] = (count + ParamCount(len(new) * m.vocab * m.hidden, 0.0)).on_gpu(sc.run)
    return out


def stage_layer_params(sc: Scenario, stage: int) -> ParamCount:
    """The parameters of ``stage``'s transformer layers (MTP modules' layers included): what ZeRO-3
    gathers and scatters layer by layer."""
    m = sc.model
    total = ParamCount(0.0, 0.0)
    for c in sc.chunk.stage_layers[stage]:
        total = total + layer_params(m, c.moe, sc.run.ep)
    return total.on_gpu(sc.run)


DEEPSPEED_MAX_REUSE_DISTANCE = 1e9   # DeepSpeed's stage3_max_reuse_distance default (parameters); the runs' own unknown


def regathered_tensors(sc: Scenario, moe: bool) -> list[ParamCount]:
    """The tensors a per-tensor ZeRO-3 gathers again between a fully recomputed layer's recomputed
    forward and its backward (one GPU's counts): DeepSpeed releases a module's parameters after it
    runs unless their next use is within ``stage3_max_reuse_distance`` parameters
    (:data:`DEEPSPEED_MAX_REUSE_DISTANCE`, its default; ``_keep_for_later`` in
    ``deepspeed/runtime/zero/stage3.py``), and between module ``k``'s recomputed forward and its
    backward run every later module of the layer twice (its forward, then its backward): ``2 sum_{j>k}
    n_j`` parameters. GPT 174.6B (modules of 0.02M, 453M, 151M, 0.02M, 604M, 604M): every module but
    the last Linear; a layer under 0.5e9 parameters: none."""
    run = sc.run
    modules = [[t.on_gpu(run) for t in module] for module in layer_modules(sc.model, moe, run.ep)]
    sizes = [sum(t.total for t in module) for module in modules]
    return [t for k, module in enumerate(modules) if 2 * sum(sizes[k + 1:]) > DEEPSPEED_MAX_REUSE_DISTANCE
            for t in module]


class LayerCollectives:
    """ZeRO-3's per-layer collectives: seconds of one layer's weight all-gather (``gather:moe``,
    ``gather:dense``) or gradient reduce-scatter (``scatter:...``) over rank 0's data-parallel
    groups (dense parameters over the rank's replicas, experts over the GPUs holding the same
    experts, at once), measured once on an empty fabric, like the all-to-alls.

    ``zero3_collectives: per-tensor`` (DeepSpeed's ZeRO-3 of 2021): one collective per parameter
    tensor of the layer (:func:`~sim.training.model.params.layer_tensors`), one after the other, each
    paying its own NCCL launch and ring latency, and each with the copies PyTorch's NCCL process
    group made around a collective on a list of one tensor per GPU (:func:`list_copies_s`): the
    layer's time is the sum. DeepSpeed v0.3.13-v0.5 (March-August 2021) gathered each parameter
    with ``torch.distributed.all_gather`` into a list of the group's partitions, after a
    ``torch.cuda.synchronize()`` (``_allgather_param`` in ``deepspeed/runtime/zero/
    partition_parameters.py``), and reduce-scattered each gradient from a list
    (``_reduce_scatter_gradient``). ``regather:...``: the tensors such a ZeRO-3 gathers again
    between a fully recomputed layer's recomputed forward and its backward (:func:`regathered_tensors`)."""

    def __init__(self, scenario: Scenario):
        self.sc = scenario
        self._times: dict[str, float] = {}
        self._tensors: dict[tuple, float] = {}

    def time(self, shape: str) -> float:
        if shape not in self._times:
            kind, layer = shape.split(":")
            run = self.sc.run
            gather = kind in ("gather", "regather")
            per_param = run.gathered_weight_bytes if gather else run.grad_bytes
            if kind == "regather":
                tensors = regathered_tensors(self.sc, layer == "moe")
                self._times[shape] = sum(self._tensor(t, per_param, True) for t in tensors)
            elif run.zero3_collectives == "per-tensor":
                tensors = [t.on_gpu(run) for t in layer_tensors(self.sc.model, layer == "moe", run.ep)]
                self._times[shape] = sum(self._tensor(t, per_param, gather) for t in tensors)
            else:
                count = layer_params(self.sc.model, layer == "moe", run.ep).on_gpu(run)
                self._times[shape] = self._measure(count, per_param, gather)
        return self._times[shape]

    def _tensor(self, count: ParamCount, per_param: float, gather: bool) -> float:
        """One tensor's collective and its list copies (memoized by size: a layer repeats shapes)."""
        key = (count.dense, count.expert, per_param, gather)
        if key not in self._tensors:
            self._tensors[key] = self._measure(count, per_param, gather) + list_copies_s(self.sc, count, per_param)
        return self._tensors[key]

    def _measure(self, count: ParamCount, per_param: float, gather: bool) -> float:
        env = simpy.Environment()
        with gc_paused():
            sync = GradientSync(self.sc, self.sc.step_fabric(env), reports=1)
            done = []
            sync.collective(0, count, per_param, gather, lambda: done.append(env.now))
            env.run()
        return done[0] if done else 0.0


def list_copies_s(sc: Scenario, count: ParamCount, per_param: float) -> float:
    """Seconds of the copies PyTorch's NCCL process group (``ProcessGroupNCCL::allgather`` and
    ``reduce_scatter`` before ``all_gather_into_tensor``) made around a collective whose buffer is a
    list of one tensor per GPU of the group: the all-gather's output copied out of its flat buffer,
    the reduce-scatter's input into one, a copy kernel per GPU. For ``count`` (one GPU's whole
    tensor) of ``per_param`` bytes over a group of ``N`` GPUs (:func:`~sim.training.model.memory.
    sharding_groups`): ``N x kernel_launch_us + 2 x bytes / (HBM bandwidth x hbm_efficiency)``
    (the buffer read and written once), dense and expert parts each over their own group; nothing
    for a group of one."""
    run = sc.run
    hbm = sc.gpu.hbm_tbps * 1e12 * run.hbm_efficiency
    total = 0.0
    for params, gpus in zip((count.dense, count.expert), sharding_groups(run)):
        if params > 0 and gpus > 1:
            total += gpus * run.kernel_launch_us * 1e-6 + 2 * params * per_param / hbm
    return total


def collective_alone_s(sc: Scenario, rank: int, count: ParamCount, per_param: float, gather: bool) -> float:
    """Seconds of ``rank``'s data-parallel reduce-scatter (or all-gather, ``gather``) of ``per_param``
    bytes of ``count`` (:meth:`GradientSync.collective`: its NCCL launch, then its groups' collectives
    at once) with every transfer alone on its route, from the closed form
    (:func:`~sim.network.hierarchical_alone_s`: the analytical network's time, a lower bound on the
    max-min fabric's)."""
    jobs = collective_jobs(sc, rank, count, per_param)
    if not jobs:
        return 0.0
    transfers = transfers_on(sc.links)
    protocol = sc.kernels.ring_protocol(sc.run.nccl_protocol)
    gpn = sc.layout.gpus_per_node
    rates = sc.kernels.nccl_rates
    return sc.kernels.nccl_launch_s + max(hierarchical_alone_s(transfers, gpus, nbytes, gpn, gather, protocol, rates)
                                          for gpus, nbytes in jobs)


def collective_jobs(sc: Scenario, rank: int, count: ParamCount, per_param: float) -> list[tuple[list[int], float]]:
    """(GPUs, bytes per GPU) of each data-parallel group ``rank``'s collective of ``per_param`` bytes
    of ``count`` runs over: dense parameters over the rank's replicas, routed experts over each set
    of GPUs holding the same experts; groups of one GPU or nothing to move left out."""
    lay = sc.layout
    groups = [(lay.dense_dp_group(rank), "dense")]
    if lay.groups_per_rank > 1:          # routed experts are replicated over tp x cp x dp / ep GPUs
        groups += [(lay.expert_dp_group(rank, i), "expert") for i in range(lay.ep_replicas)]
    jobs = [(gpus, (count.dense if kind == "dense" else count.expert) * per_param) for gpus, kind in groups]
    return [(gpus, nbytes) for gpus, nbytes in jobs if nbytes > 0 and len(gpus) > 1]


def reduced_count(sc: Scenario, stage: int, count: ParamCount) -> ParamCount:
    """What ``stage``'s gradient reduce-scatter after its last backward carries of its parameters
    ``count``: all of them, less its layers' under ZeRO-3 with ``reshard_after_forward`` (those
    were reduce-scattered layer by layer inside the ops)."""
    run = sc.run
    if run.zero_stage == 3 and run.reshard_after_forward:
        layers = stage_layer_params(sc, stage)
        return ParamCount(max(0.0, count.dense - layers.dense), max(0.0, count.expert - layers.expert))
    return count


def norm_allreduce_s(sc: Scenario) -> float:
    """The all-reduce of one number over every GPU before the optimizer (``optimizer_sync:
    global``): an NCCL launch and a tree's 2 ceil(log2 N) hops, each the latency of the path
    between the first and the last GPU (our assumption: it carries no bandwidth to speak of)."""
    import math
    gpus = sc.layout.gpus
    hops = 2 * math.ceil(math.log2(gpus)) if gpus > 1 else 0
    return sc.kernels.nccl_launch_s + hops * sc.links.route(0, gpus - 1)[1]


def optimizer_seconds(sc: Scenario, count: ParamCount) -> float:
    """The optimizer step over the GPU's shard of ``count`` (all of it under ZeRO-0)."""
    run = sc.run
    dense_dp, expert_dp = sharding_groups(run)
    params = count.total if run.zero_stage == 0 else count.dense / dense_dp + count.expert / expert_dp
    per_param = run.grad_bytes + 2 * run.optimizer_bytes + run.gathered_weight_bytes
    return params * per_param / (sc.gpu.hbm_tbps * 1e12 * run.hbm_efficiency)


class GradientSync:
    """Launches each rank's gradient synchronisation and optimizer step on ``fabric`` as the
    runners report stages done; ``reports``: how many runners play each rank (one per EP group of
    pipelines in full mode, one in representative mode)."""

    def __init__(self, scenario: Scenario, fabric: Network, reports: int):
        self.sc, self.fabric, self.env = scenario, fabric, fabric.env
        self.protocol = scenario.kernels.ring_protocol(scenario.run.nccl_protocol)
        self.counts = stage_param_counts(scenario)
        self.reports = reports
        self._stage_ends: dict[tuple[int, int], list[float]] = {}
        self._rank_pending = {r: len(stages) for r, stages in self.counts.items()}
        start = self.env.now                # the step's start on the network's clock
        self._rank_last_op = {r: start for r in self.counts}
        self._all_pending = sum(len(stages) for stages in self.counts.values())
        self._deferred: list[tuple[int, int]] = []
        self._reduced_ranks = 0
        self.ranks = {r: RankSync(start, start, start, start, start) for r in self.counts}
        self.ended = self.env.event()       # fires when every rank's optimizer step and weight gather ended
        self._ended_ranks = 0

    def stage_done(self, rank: int, stage: int, ends: np.ndarray) -> None:
        """The last backward of ``stage`` on ``rank`` ended at ``ends`` (one runner's replicas)."""
        got = self._stage_ends.setdefault((rank, stage), [])
        got.append(float(np.max(ends)))
        self._rank_last_op[rank] = max(self._rank_last_op[rank], got[-1])
        if len(got) < self.reports:
            return
        at = max(got)
        if self.sc.run.dp_sync == "end":
            self._deferred.append((rank, stage))
            self._all_pending -= 1
            if not self._all_pending:
                start = max(max(v) for v in self._stage_ends.values())
                for r, s in self._deferred:
                    self._at(start, lambda r=r, s=s: self._reduce(r, s))
            return
        self._all_pending -= 1
        self._at(at, lambda: self._reduce(rank, stage))

    def last_op_end(self, rank: int) -> float:
        return self._rank_last_op[rank]

    # -- internals -------------------------------------------------------------------------------
    def _at(self, when: float, action) -> None:
        delay = when - self.env.now
        if delay > 0:
            self.env.timeout(delay).callbacks.append(lambda _e: action())
        else:
            action()

    def collective(self, rank: int, count: ParamCount, per_param: float, gather: bool, then) -> None:
        """Reduce-scatter (or all-gather) ``per_param`` bytes of ``count`` over the rank's groups,
        after an NCCL kernel launch (:mod:`sim.training.comm.kernels`), as NCCL runs it (the run's
        ``nccl_protocol``, :mod:`sim.network.nccl`), then call ``then()``."""
        op = hierarchical_all_gather if gather else hierarchical_reduce_scatter
        gpn = self.sc.layout.gpus_per_node
        jobs = collective_jobs(self.sc, rank, count, per_param)
        if not jobs:
            then()
            return

        def start() -> None:
            events = [op(self.fabric, gpus, nbytes, gpn, self.protocol) for gpus, nbytes in jobs]
            simpy.AllOf(self.env, events).callbacks.append(lambda _e: then())
        self._at(self.env.now + self.sc.kernels.nccl_launch_s, start)

    def _reduce(self, rank: int, stage: int) -> None:
        run, count = self.sc.run, reduced_count(self.sc, stage, self.counts[rank][stage])
        self.ranks[rank].launched = max(self.ranks[rank].launched, self.env.now)

        def reduced() -> None:
            if run.zero_stage == 0:              # all-reduce = reduce-scatter + all-gather of gradients
                self.collective(rank, count, run.grad_bytes, True, lambda: self._stage_reduced(rank))
            else:
                self._stage_reduced(rank)
        self.collective(rank, count, run.grad_bytes, False, reduced)

    def _stage_reduced(self, rank: int) -> None:
        self._rank_pending[rank] -= 1
        if self._rank_pending[rank]:
            return
        sync = self.ranks[rank]
        sync.reduced = self.env.now
        if self.sc.run.optimizer_sync == "bypass":
            self._optimize(rank)
            return
        self._reduced_ranks += 1
        if self._reduced_ranks == len(self.ranks):      # the global norm / overflow all-reduce, then all ranks
            at = self.env.now + self.norm_allreduce_s
            for r in self.ranks:
                self._at(at, lambda r=r: self._optimize(r))

    @property
    def norm_allreduce_s(self) -> float:
        """:func:`norm_allreduce_s` of this sync's scenario."""
        return norm_allreduce_s(self.sc)

    def _optimize(self, rank: int) -> None:
        sync = self.ranks[rank]
        sync.optimizer_start = max(self.env.now, self._rank_last_op[rank])
        total = sum(self.counts[rank].values(), ParamCount(0.0, 0.0))
        sync.optimizer_end = sync.optimizer_start + optimizer_seconds(self.sc, total)

        def gather() -> None:
            if self.sc.run.zero_stage in (1, 2):
                self.collective(rank, total, self.sc.run.gathered_weight_bytes, True, lambda: self._finish(rank))
            else:
                self._finish(rank)
        self._at(sync.optimizer_end, gather)

    def _finish(self, rank: int) -> None:
        self.ranks[rank].end = self.env.now
        self._ended_ranks += 1
        if self._ended_ranks == len(self.ranks):
            self.ended.succeed()


__all__ = ["GradientSync", "LayerCollectives", "RankSync", "collective_alone_s", "collective_jobs", "norm_allreduce_s",
           "optimizer_seconds", "reduced_count", "stage_layer_params", "stage_param_counts"]
