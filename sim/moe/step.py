"""One MoE training step: config -> schedule -> SimPy ranks and streams on the fabric -> results.

Modes: ``representative`` simulates one pipeline (data-parallel replica 0) whose all-to-alls take
the time the fabric gives when every EP group of the stage runs them at once; ``full`` simulates
every rank of every pipeline, each all-to-all a collective that starts when all members of the EP
group arrive (the pipelines of an EP group run in lockstep, see :mod:`sim.moe.runner`); ``auto``
(default) is representative for balanced routing and full when routing is skewed. Ignored: the
data-parallel gradient reduce-scatter / all-gather and the optimizer step at the end of the step,
kernel launch gaps, the embedding's compute.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import simpy

from ..engine import EngineResult, start_schedule
from ..network import Fabric, LinkTable
from ..perf import gc_paused
from ..schedules import make_schedule, validate
from .chunk import ChunkModel
from .comm import CommModel
from .memory import RankMemory, memory_per_rank
from .runner import GroupRunner
from .specs import RunSpec, SpecError, load_gpu, load_model

MODES = ("auto", "representative", "full")


@dataclass
class RankResult:
    rank: int
    compute_s: float
    exposed_comm_s: float
    comm_s: float
    bubble_s: float
    utilization: float
    memory: RankMemory

    def to_json(self) -> dict:
        return {"rank": self.rank, "compute_s": self.compute_s, "exposed_comm_s": self.exposed_comm_s,
                "comm_s": self.comm_s, "bubble_s": self.bubble_s, "utilization": self.utilization,
                "memory_gb": round(self.memory.total_gb, 3), "params_gb": round(self.memory.params_gb, 3),
                "grads_gb": round(self.memory.grads_gb, 3), "optimizer_gb": round(self.memory.optimizer_gb, 3),
                "activations_gb": round(self.memory.activations_gb, 3)}


@dataclass
class StepResult:
    run: RunSpec
    mode: str
    step_time_s: float
    tokens_per_s: float
    mfu: float
    compute_comm_ratio: float
    exposed_comm_s: float
    comm_hidden_fraction: float
    a2a_dispatch_s: float
    a2a_combine_s: float
    ranks: list[RankResult]
    engine: EngineResult
    part_trace: list = field(repr=False, default_factory=list)
    link_stats: dict = field(repr=False, default_factory=dict)
    warnings: list = field(default_factory=list)
    wall_s: float = 0.0
    late_send_s: float = 0.0    # lockstep lag of a pipeline send (see GroupRunner.deliver); 0 normally

    def to_json(self) -> dict:
        return {"scenario": self.run.description, "schedule": self.run.schedule, "mode": self.mode,
                "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
                "compute_comm_ratio": self.compute_comm_ratio, "exposed_comm_s": self.exposed_comm_s,
                "comm_hidden_fraction": self.comm_hidden_fraction, "a2a_dispatch_s": self.a2a_dispatch_s,
                "a2a_combine_s": self.a2a_combine_s, "ranks": [r.to_json() for r in self.ranks],
                "warnings": self.warnings, "late_send_s": self.late_send_s, "wall_s": self.wall_s}


class MoEStep:
    """Everything one step needs, built and checked from a :class:`RunSpec`."""

    def __init__(self, run: RunSpec, mode: str = "auto", comm_scope: str = "stage", comm: CommModel | None = None,
                 workers: int = 1):
        """``comm``: the all-to-all measurements of an earlier step of the same run with another
        schedule, reused (they do not depend on the schedule). ``workers``: processes for skewed
        routing's sampling and all-to-all measurements (:class:`CommModel`)."""
        from topologies import load_topology
        if mode not in MODES:
            raise SpecError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.run = run
        self.model = load_model(run.model)
        self.gpu = load_gpu(run.gpu)
        graph = load_topology(run.topology)
        n_gpus = len(graph.graph["gpus"])
        if run.gpus > n_gpus:
            raise SpecError(f"pp x dp = {run.pp} x {run.dp} = {run.gpus} GPUs, but topology {run.topology!r} "
                            f"has {n_gpus}")
        gpn = graph.graph.get("gpus_per_node", n_gpus)
        if run.ep > gpn and run.ep % gpn:
            raise SpecError(f"ep ({run.ep}) must be a multiple of the {gpn} GPUs per node (or at most {gpn}): "
                            "an EP group spans whole nodes")
        if run.ep < gpn and gpn % run.ep:
            raise SpecError(f"ep ({run.ep}) must divide the {gpn} GPUs per node")
        if self.model.is_moe and self.model.routed_experts % run.ep:
            raise SpecError(f"ep ({run.ep}) must divide the model's {self.model.routed_experts} routed experts")
        self.schedule = validate(make_schedule(run.schedule, run.pp, run.microbatches, run.chunks))
        self.chunk = ChunkModel(self.model, self.gpu, run, self.schedule.num_stages)
        if comm is not None and not comm.serves(run, comm_scope):
            raise ValueError("comm: these all-to-all measurements are for another run or scope")
        self.links = comm.links if comm is not None else LinkTable(graph)
        tb = {"dispatch": self.chunk.token_bytes(run.dispatch_precision),
              "combine": self.chunk.token_bytes(run.combine_precision)}
        self.comm = comm or CommModel(run, self.model, self.links, gpn, tb, comm_scope, workers)
        self.full = mode == "full" or (mode == "auto" and run.routing_skew > 0)
        self.mode = "full" if self.full else "representative"
        self.memory = memory_per_rank(self.model, self.gpu, run, self.chunk, self.schedule)
        self.env = None
        self.fabric = None
        self.trace_parts: list = []
        self.trace_rank = run.pp // 2        # whose parts are recorded (pipeline 0): a middle rank

    def load_factor(self, rank: int, replica: int) -> float:
        return self.comm.load_factor(rank, replica)

    def runners(self) -> list[GroupRunner]:
        """One lockstep runner per EP group of pipelines (full) or one for replica 0."""
        if not self.full:
            return [GroupRunner(self, 0, [0])]
        ep = self.run.ep
        return [GroupRunner(self, g, list(range(g * ep, (g + 1) * ep))) for g in range(self.run.dp // ep)]

    def simulate(self) -> StepResult:
        t0 = time.perf_counter()
        with gc_paused():
            self.env = simpy.Environment()
            self.fabric = Fabric(self.env, self.links)
            runners = self.runners()
            finishers = [start_schedule(self.schedule, r, self.env) for r in runners]
            self.env.run()
            for finish in finishers:
                finish()                    # raises DeadlockError if a rank got stuck
        return self._summarize(runners, time.perf_counter() - t0)

    def _summarize(self, runners: list[GroupRunner], wall: float) -> StepResult:
        run, P = self.run, self.run.pp
        step = max(float(c.max()) for rn in runners for c in rn.clock.values())
        # Per rank: the slowest replica's figures (identical replicas in representative mode).
        ranks = []
        for rank in range(P):
            op_all, compute_all, comm_all = (np.concatenate([getattr(rn.stats[rank], name) for rn in runners])
                                             for name in ("op_s", "compute_s", "comm_s"))
            worst = int(np.argmax(op_all))
            op_s, compute_s, comm_s = float(op_all[worst]), float(compute_all[worst]), float(comm_all[worst])
            ranks.append(RankResult(rank, compute_s, max(0.0, op_s - compute_s), comm_s, step - op_s,
                                    compute_s / step if step else 0.0, self.memory[rank]))
        first = runners[0]
        engine = EngineResult(self.schedule, first.records, max((r[7] for r in first.records), default=0.0))
        tokens = run.dp * run.microbatches * run.tokens_per_microbatch
        flops = self.chunk.model_flops_per_microbatch() * run.microbatches * run.dp
        mfu = flops / (run.gpus * self.gpu.peak_flops("bf16") * step)
        moe_stage = next((s for s, layers in enumerate(self.chunk.stage_layers) if any(c.moe for c in layers)), None)
        if moe_stage is not None and self.model.is_moe:
            d, c = self.comm.time("dispatch", 0, 0), self.comm.time("combine", 0, 0)
            layers = [c_ for c_ in self.chunk.stage_layers[moe_stage] if c_.moe]
            compute = sum(l.forward for l in layers)
            ratio = compute / (len(layers) * (d + c))
        else:
            d = c = 0.0
            ratio = float("inf")
        total_comm = sum(r.comm_s for r in ranks)
        exposed = sum(r.exposed_comm_s for r in ranks)
        warnings = []
        for m in self.memory:
            if m.total_gb > self.gpu.hbm_gb:
                warnings.append(f"rank {m.rank} needs {m.total_gb:.1f} GB (params {m.params_gb:.1f}, grads "
                                f"{m.grads_gb:.1f}, optimizer {m.optimizer_gb:.1f}, activations {m.activations_gb:.1f})"
                                f" > {self.gpu.hbm_gb:g} GB HBM of {self.gpu.name}: does not fit")
        return StepResult(
            run=run, mode=self.mode, step_time_s=step, tokens_per_s=tokens / step, mfu=mfu,
            compute_comm_ratio=ratio, exposed_comm_s=exposed / P,
            comm_hidden_fraction=1 - exposed / total_comm if total_comm > 0 else 1.0,
            a2a_dispatch_s=d, a2a_combine_s=c, ranks=ranks, engine=engine, part_trace=self.trace_parts,
            link_stats=dict(self.comm.link_frames), warnings=warnings, wall_s=wall,
            late_send_s=max(rn.late_s for rn in runners))


def simulate_step(run: RunSpec, mode: str = "auto", comm_scope: str = "stage") -> StepResult:
    return MoEStep(run, mode, comm_scope).simulate()


def simulate_schedules(runs: list[RunSpec], mode: str = "auto", comm_scope: str = "stage",
                       progress: bool = False, workers: int = 1) -> list[StepResult]:
    """Steps of one run under several schedules, measuring the all-to-alls once for all."""
    results, comm = [], None
    for run in runs:
        step = MoEStep(run, mode, comm_scope, comm, workers)
        step.comm.measure_all(progress)
        comm = step.comm
        results.append(step.simulate())
    return results


__all__ = ["MoEStep", "StepResult", "simulate_schedules", "simulate_step"]
