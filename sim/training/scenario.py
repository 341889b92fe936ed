"""One place that assembles a run: :class:`Scenario` turns a :class:`~sim.training.model.specs.RunSpec` (names
and numbers) into what the simulation needs, once, checking everything on the way.

config (RunSpec) -> Scenario: model, GPU and topology specs, the topology graph and its link table,
the validated schedule, the :class:`~sim.training.model.layout.Layout`, the chunk model and the memory model
-> step (:mod:`sim.training.step`: SimPy ranks on the fabric) -> results.

The parts of the scenario are handed on narrowly: the chunk model and the comm model get specs and
the link table, the runners get the chunk model, the layout and the comm times, worker processes get
the link table itself (never a name to look up again). The link table is built on first use, so
the memory model (what the planner checks first) never builds a fabric.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
from functools import cached_property
from pathlib import Path

import networkx as nx

from ..network import LinkTable, Network, build_network
from ..schedules import Schedule, make_schedule, validate
from ..schedules.registry import SEARCHED
from .comm.collective_shapes import CollectiveShape, op_collectives
from .comm.kernels import KernelSpec, load_kernels
from .comm.sends import pipeline_send_rate
from .costs.chunk import ChunkModel
from .costs.parts import ModelParallelParts
from .costs.stagecosts import stage_costs
from .model.layout import Layout, LayoutRequest
from .model.memory import RankMemory, memory_per_rank
from .model.specs import RunSpec, SpecError, load_gpu, load_model, topology_gpu, warn_gpu_mismatch


class Topology:
    """A topology graph and its link table, built on first use; one per named topology and process
    (:func:`named_topology`), so that the scenarios of a sweep share the routes already found."""

    def __init__(self, graph: nx.Graph, links: LinkTable | None = None):
        self.graph = graph
        if links is not None:
            self.__dict__["links"] = links

    @cached_property
    def send_rate(self) -> float | None:
        """Bytes/s at most of a pipeline send between two GPUs of one node: NCCL's channels for it
        times ``sm_GBps`` (:mod:`sim.training.comm.sends`); None: unbounded."""
        return pipeline_send_rate(self.layout, self.links, self.kernels, self.chunk.activation_bytes())

    @cached_property
    def links(self) -> LinkTable:
        return LinkTable(self.graph)


def named_topology(name: str) -> Topology:
    """The topology preset or YAML file ``name``, shared within this process (a file is read again
    when it changes)."""
    path = Path(name)
    stamp = path.stat().st_mtime_ns if path.suffix in (".yaml", ".yml") and path.exists() else None
    return _named_topology(name, stamp)


@functools.lru_cache(maxsize=8)
def _named_topology(name: str, stamp) -> Topology:
    from topologies import load_topology
    return Topology(load_topology(name))


def named_schedule(name: str, pp: int, microbatches: int, chunks: int | None, group: int | None = None) -> Schedule:
    """The validated schedule ``name`` (not a searched one) of this shape (``group``: Megatron-Core's
    ``microbatch_group_size_per_vp_stage``): built and checked once per process, each caller given
    its own rank lists."""
    schedule = _validated(name, pp, microbatches, chunks, group)
    return dataclasses.replace(schedule, ranks={r: list(ops) for r, ops in schedule.ranks.items()},
                               joined=dict(schedule.joined))


@functools.lru_cache(maxsize=256)
def _validated(name: str, pp: int, microbatches: int, chunks: int | None, group: int | None) -> Schedule:
    return validate(make_schedule(name, pp, microbatches, chunks, group=group))


MAX_COMM_HBM_SHARE = 0.5   # a communication kernel's copies take at most half of HBM from compute (our bound)


class Scenario:
    """A run assembled and checked once. ``graph``, ``links`` or ``topology`` replaces the topology
    named by ``run.topology`` (a sweep's variant built from a dict, or one shared by many
    scenarios); then ``run.topology`` is only its label."""

    def __init__(self, run: RunSpec, graph: nx.Graph | None = None, links: LinkTable | None = None,
                 topology: Topology | None = None, gpus: list[int] | None = None):
        """``gpus``: the topology's GPUs this run was given (a job on a shared cluster,
        :mod:`sim.cluster`), which it numbers 0, 1, ... in that order; ``None``: all of them."""
        self.run = run
        self.gpus = None if gpus is None else list(gpus)
        self.model = load_model(run.model)
        self.gpu = load_gpu(run.gpu)
        self.kernels: KernelSpec = load_kernels(run.kernels)
        if run.comm_sms >= self.gpu.sms:
            raise SpecError(f"RunSpec.comm_sms must be below the {self.gpu.sms} SMs of {self.gpu.name} (the rest "
                            f"compute), got {run.comm_sms}")
        if run.tp_comm_sms >= self.gpu.sms:
            raise SpecError(f"RunSpec.tp_comm_sms must be below the {self.gpu.sms} SMs of {self.gpu.name}, got "
                            f"{run.tp_comm_sms}")
        if topology is not None:
            self.topology = topology
        elif links is not None:
            self.topology = Topology(links.graph, links)
        elif graph is not None:
            self.topology = Topology(graph)
        else:
            self.topology = named_topology(run.topology)
        if run.faults is not None and run.faults.links and self.topology.graph.graph.get("faults") != run.faults.links:
            self.topology = Topology(run.faults.apply_to(self.topology.graph))    # degraded or failed links
        graph = self.graph = self.topology.graph
        warn_gpu_mismatch(run.gpu, run.topology, topology_gpu(graph, run.topology))   # its GPU must be a preset
        n_gpus = len(graph.graph["gpus"]) if gpus is None else len(gpus)
        self.layout = Layout.check(LayoutRequest(
            pp=run.pp, dp=run.dp, ep=run.ep, gpus_per_node=graph.graph.get("gpus_per_node", n_gpus),
            topology_gpus=n_gpus, topology=run.topology,
            routed_experts=self.model.routed_experts if self.model.is_moe else 0, tp=run.tp, cp=run.cp,
            heads=self.model.heads, kv_heads=self.model.kv_heads if self.model.attention == "gqa" else 0,
            tp_across_nodes=run.tp_across_nodes, sequence_parallel=run.sequence_parallel, expert_tp=run.expert_tp))
        if run.schedule in SEARCHED:            # Zero Bubble's search reads the stages' times and memory
            self.chunk = ChunkModel(self.model, self.gpu, run, run.pp, self.beside_comm)
            costs = stage_costs(self.model, run, self.chunk, graph, self.layout, self.send_rate)
            limit = run.zb_memory_limit if run.schedule == "zb-auto" else None
            self.schedule: Schedule = validate(make_schedule(run.schedule, run.pp, run.microbatches,
                                                             run.virtual_chunks(self.model.layers), limit, costs))
        else:
            if run.schedule.endswith(".json"):       # an order of one's own (schedule --json, search-schedule)
                self.schedule = validate(self._schedule_file(run))
            else:
                self.schedule = named_schedule(run.schedule, run.pp, run.microbatches,
                                               run.virtual_chunks(self.model.layers),
                                               run.microbatch_group_size_per_vp_stage)
            self.chunk = ChunkModel(self.model, self.gpu, run, self.schedule.num_stages, self.beside_comm)

    @property
    def model_parallel_parts(self) -> ModelParallelParts:
        """Which TP and CP communication parts this run's ops carry (:mod:`sim.training.costs.parts`)."""
        run = self.run
        tp = ("sp" if run.sequence_parallel else "ar") if run.tp > 1 else ""
        return ModelParallelParts(tp, run.cp > 1, run.memory_policy == "full", run.tp_comm_overlap,
                                  moe_mlp_tp=self.model.shared_experts > 0,
                                  etp=run.expert_tp > 1 and self.model.is_moe)

    @staticmethod
    def _schedule_file(run: RunSpec) -> Schedule:
        schedule = Schedule.from_file(run.schedule)
        for what, own, want in (("pp", schedule.pp, run.pp), ("microbatches", schedule.microbatches, run.microbatches)):
            if own != want:
                raise SpecError(f"RunSpec.schedule {run.schedule!r} has {what}={own}, the run {what}={want}: "
                                "a schedule file is for one shape of run")
        return schedule

    @cached_property
    def send_rate(self) -> float | None:
        """Bytes/s at most of a pipeline send between two GPUs of one node: NCCL's channels for it
        times ``sm_GBps`` (:mod:`sim.training.comm.sends`); None: unbounded."""
        return pipeline_send_rate(self.layout, self.links, self.kernels, self.chunk.activation_bytes())

    @cached_property
    def links(self) -> LinkTable:
        """Directed links and routes of the topology (built on first use, shared by the scenarios of
        one topology), bandwidths scaled by the kernels' link efficiencies; a job's (``gpus``) numbers
        its GPUs 0, 1, ... (:meth:`~sim.network.LinkTable.view`)."""
        links = self.kernels.scale_links(self.topology.links)
        return links if self.gpus is None else links.view(self.gpus)

    def step_fabric(self, env) -> Network:
        """The run's network (``RunSpec.network``: :func:`~sim.network.build_network`) for pipeline
        sends and data-parallel collectives (NCCL kernels: each GPU's bounded by the kernels'
        ``nccl_gpu_rate``, its NCCL collectives charged their ``nccl_rates``)."""
        return build_network(env, self.links, self.run.network, gpu_rate=self.kernels.nccl_gpu_rate,
                             nccl_rates=self.kernels.nccl_rates)

    @cached_property
    def memory(self) -> list[RankMemory]:
        """HBM per pipeline rank (:mod:`sim.training.model.memory`); needs no fabric."""
        return memory_per_rank(self.model, self.gpu, self.run, self.chunk.layers_per_stage, self.schedule)

    @property
    def overlapped_comm_sms(self) -> int:
        """SMs a communication kernel holds while compute runs beside it: ``comm_sms`` (20 for
        DeepSeek-V3's all-to-alls); for a dense model with TP-communication overlap, ``tp_comm_sms``
        (its only overlapped kernels)."""
        return self.run.tp_comm_sms if self.run.tp_comm_overlap and not self.model.is_moe else self.run.comm_sms

    @property
    def sm_slowdown(self) -> float:
        """How much longer a compute part runs beside a communication kernel when its kernels are
        not known (the FLOPs model, a measured part): ``SMs / (SMs - comm SMs)`` (132 / 112 for
        DeepSeek-V3 on H800). Layer parts of the kernel model carry their own ratio
        (:attr:`beside_comm`)."""
        sms, comm_sms = self.gpu.sms, self.overlapped_comm_sms
        return sms / (sms - comm_sms) if comm_sms else 1.0

    @property
    def beside_comm(self) -> tuple[int, float]:
        """(SMs, HBM share) a communication kernel takes from the compute that runs beside it: the
        SMs it holds (:attr:`overlapped_comm_sms`) and the share of the memory-bound kernels' HBM
        bandwidth (the GPU's ``hbm_tbps x hbm_efficiency``) its copies take when it moves as fast as
        its SMs let it: each byte read from HBM as it leaves and written as it arrives, so ``2 x
        comm SMs x sm_GBps`` (420 GB/s, 18% for DeepSeek-V3's 20 SMs on H800), at most
        :data:`MAX_COMM_HBM_SHARE`; none where the kernels preset leaves ``sm_GBps`` unbounded."""
        comm_sms = self.overlapped_comm_sms
        rate = self.kernels.a2a_gpu_rate(comm_sms)
        if rate is None:
            return comm_sms, 0.0
        return comm_sms, min(MAX_COMM_HBM_SHARE, 2 * rate / (self.gpu.hbm_tbps * 1e12 * self.run.hbm_efficiency))

    @cached_property
    def collectives(self) -> tuple[CollectiveShape, ...]:
        """The collectives inside this run's ops (:func:`~sim.training.comm.collective_shapes.op_collectives`:
        an MoE model's dispatch and combine all-to-alls, TP and CP collectives)."""
        return op_collectives(self.model, self.run)

    def token_bytes(self) -> dict[str, float]:
        """Bytes of one token copy for each collective shape, by name."""
        return {shape.name: shape.bytes_per_token for shape in self.collectives}

    def with_order(self, schedule: Schedule) -> "Scenario":
        """This scenario with ``schedule`` (an order of the same shape: ranks, stages, micro-batches
        and placement; e.g. one a search made) in place of its own; the rest shared."""
        own = self.schedule
        shape = ("pp", "num_stages", "microbatches")
        if any(getattr(schedule, k) != getattr(own, k) for k in shape) or schedule.placement != own.placement:
            raise SpecError(f"schedule {schedule.name!r} has another shape (P={schedule.pp}, stages "
                            f"{schedule.num_stages}, M={schedule.microbatches}, {schedule.placement.kind}) than "
                            f"{own.name!r} (P={own.pp}, stages {own.num_stages}, M={own.microbatches}, "
                            f"{own.placement.kind})")
        other = copy.copy(self)
        other.__dict__.pop("memory", None)
        other.schedule = validate(schedule)
        return other

    def with_schedule(self, name: str) -> "Scenario":
        """The same run under schedule ``name``, sharing this scenario's topology (graph and link
        table, link faults applied)."""
        return Scenario(self.run.with_(schedule=name), topology=self.topology, gpus=self.gpus)

    def compute_factors(self):
        """Each GPU's compute slowdown under the run's faults (an array; ``None``: all healthy)."""
        f = self.run.faults
        if f is None or not (f.slow_gpus or f.slow_fraction):
            return None
        return f.compute_factors(len(self.graph.graph["gpus"]), self.layout)


__all__ = ["Scenario", "named_schedule"]
