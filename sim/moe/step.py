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
from ..network import Fabric
from ..perf import gc_paused
from .comm import CommModel
from .memory import RankMemory
from .runner import GroupRunner, PartEvent
from .scenario import Scenario
from .specs import RunSpec, SpecError

MODES = ("auto", "representative", "full")
COMPARED_SCHEDULES = ("1f1b", "zb-h1", "dualpipe", "dualpipev")   # what `run` and the planner compare


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
    hbm_gb: float
    traced_rank: int                                   # whose parts part_trace holds (pipeline 0)
    part_trace: list[PartEvent] = field(repr=False, default_factory=list)
    link_stats: dict = field(repr=False, default_factory=dict)
    warnings: list = field(default_factory=list)
    wall_s: float = 0.0
    late_send_s: float = 0.0    # lockstep lag of a pipeline send (see GroupRunner.deliver); 0 normally

    @property
    def mean_utilization(self) -> float:
        """Mean over ranks of compute / step time."""
        return sum(r.utilization for r in self.ranks) / len(self.ranks)

    @property
    def bubble_share(self) -> float:
        """Bubble (time outside ops) as a share of all rank-time."""
        return sum(max(0.0, r.bubble_s) for r in self.ranks) / (len(self.ranks) * self.step_time_s)

    @property
    def exposed_comm_share(self) -> float:
        """Exposed all-to-all as a share of all rank-time."""
        return self.exposed_comm_s / self.step_time_s

    @property
    def max_memory_gb(self) -> float:
        return max(r.memory.total_gb for r in self.ranks)

    @property
    def fits_hbm(self) -> bool:
        return all(r.memory.total_gb <= self.hbm_gb for r in self.ranks)

    def summary(self) -> dict:
        """One row for comparison tables and sweeps: the configuration, then metrics with units
        in their names."""
        return {"schedule": self.run.schedule, "mode": self.mode, "pp": self.run.pp, "ep": self.run.ep,
                "dp": self.run.dp, "microbatches": self.run.microbatches, "step_time_s": self.step_time_s,
                "tokens_per_s": self.tokens_per_s, "mfu": self.mfu, "compute_comm_ratio": self.compute_comm_ratio,
                "exposed_comm_s": self.exposed_comm_s, "comm_hidden_fraction": self.comm_hidden_fraction,
                "mean_utilization": self.mean_utilization, "bubble_share": self.bubble_share,
                "exposed_comm_share": self.exposed_comm_share, "max_memory_gb": self.max_memory_gb,
                "fits_hbm": self.fits_hbm, "a2a_dispatch_ms": self.a2a_dispatch_s * 1e3,
                "a2a_combine_ms": self.a2a_combine_s * 1e3}

    def to_json(self) -> dict:
        return {"scenario": self.run.description, "schedule": self.run.schedule, "mode": self.mode,
                "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
                "compute_comm_ratio": self.compute_comm_ratio, "exposed_comm_s": self.exposed_comm_s,
                "comm_hidden_fraction": self.comm_hidden_fraction, "a2a_dispatch_s": self.a2a_dispatch_s,
                "a2a_combine_s": self.a2a_combine_s, "ranks": [r.to_json() for r in self.ranks],
                "warnings": self.warnings, "late_send_s": self.late_send_s, "wall_s": self.wall_s}


class MoEStep:
    """One training step of a :class:`~sim.moe.scenario.Scenario`: its all-to-all times (the comm
    model) and, in :meth:`simulate`, SimPy ranks and streams on a fresh fabric."""

    def __init__(self, scenario: Scenario, mode: str = "auto", comm_scope: str = "stage",
                 comm: CommModel | None = None, workers: int = 1):
        """``comm``: the all-to-all measurements of an earlier step of the same run with another
        schedule, reused (they do not depend on the schedule). ``workers``: processes for skewed
        routing's sampling and all-to-all measurements (:class:`CommModel`)."""
        if mode not in MODES:
            raise SpecError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.scenario = sc = scenario
        run = sc.run
        if comm is not None and not comm.serves(run, comm_scope):
            raise ValueError("comm: these all-to-all measurements are for another run or scope")
        self.comm = comm or CommModel(run, sc.model, sc.links, sc.layout, sc.token_bytes(), comm_scope, workers)
        self.full = mode == "full" or (mode == "auto" and run.routing_skew > 0)
        self.mode = "full" if self.full else "representative"

    def runners(self, fabric: Fabric, trace: list | None = None) -> list[GroupRunner]:
        """One lockstep runner per EP group of pipelines (full) or one for replica 0; the runner
        holding replica 0 records the traced rank's parts into ``trace``."""
        sc = self.scenario
        groups = range(sc.layout.groups_per_rank) if self.full else [0]
        return [GroupRunner(sc.schedule, sc.chunk, sc.layout, self.comm, fabric, g,
                            sc.layout.group_replicas(g) if self.full else [0], sc.sm_slowdown,
                            trace if g == 0 else None) for g in groups]

    def simulate(self) -> StepResult:
        t0 = time.perf_counter()
        trace: list[PartEvent] = []
        with gc_paused():
            env = simpy.Environment()
            runners = self.runners(Fabric(env, self.scenario.links), trace)
            finishers = [start_schedule(self.scenario.schedule, r, env) for r in runners]
            env.run()
            for finish in finishers:
                finish()                    # raises DeadlockError if a rank got stuck
        return self._summarize(runners, trace, time.perf_counter() - t0)

    def _summarize(self, runners: list[GroupRunner], trace: list, wall: float) -> StepResult:
        sc = self.scenario
        run, P, memory = sc.run, sc.run.pp, sc.memory
        step = max(float(c.max()) for rn in runners for c in rn.clock.values())
        # Per rank: the slowest replica's figures (identical replicas in representative mode).
        ranks = []
        for rank in range(P):
            op_all, compute_all, comm_all = (np.concatenate([getattr(rn.stats[rank], name) for rn in runners])
                                             for name in ("op_s", "compute_s", "comm_s"))
            worst = int(np.argmax(op_all))
            op_s, compute_s, comm_s = float(op_all[worst]), float(compute_all[worst]), float(comm_all[worst])
            ranks.append(RankResult(rank, compute_s, max(0.0, op_s - compute_s), comm_s, step - op_s,
                                    compute_s / step if step else 0.0, memory[rank]))
        engine = EngineResult.of(sc.schedule, runners[0].records)
        tokens = run.dp * run.microbatches * run.tokens_per_microbatch
        flops = sc.chunk.model_flops_per_microbatch() * run.microbatches * run.dp
        mfu = flops / (run.gpus * sc.gpu.peak_flops("bf16") * step)
        moe_stage = next((s for s, layers in enumerate(sc.chunk.stage_layers) if any(c.moe for c in layers)), None)
        if moe_stage is not None and sc.model.is_moe:
            d, c = self.comm.time("dispatch", 0, 0), self.comm.time("combine", 0, 0)
            layers = [c_ for c_ in sc.chunk.stage_layers[moe_stage] if c_.moe]
            compute = sum(l.forward for l in layers)
            ratio = compute / (len(layers) * (d + c))
        else:
            d = c = 0.0
            ratio = float("inf")
        total_comm = sum(r.comm_s for r in ranks)
        exposed = sum(r.exposed_comm_s for r in ranks)
        warnings = []
        for m in memory:
            if m.total_gb > sc.gpu.hbm_gb:
                warnings.append(f"rank {m.rank} needs {m.total_gb:.1f} GB (params {m.params_gb:.1f}, grads "
                                f"{m.grads_gb:.1f}, optimizer {m.optimizer_gb:.1f}, activations {m.activations_gb:.1f})"
                                f" > {sc.gpu.hbm_gb:g} GB HBM of {sc.gpu.name}: does not fit")
        return StepResult(
            run=run, mode=self.mode, step_time_s=step, tokens_per_s=tokens / step, mfu=mfu,
            compute_comm_ratio=ratio, exposed_comm_s=exposed / P,
            comm_hidden_fraction=1 - exposed / total_comm if total_comm > 0 else 1.0,
            a2a_dispatch_s=d, a2a_combine_s=c, ranks=ranks, engine=engine, hbm_gb=sc.gpu.hbm_gb,
            traced_rank=sc.layout.traced_rank, part_trace=trace, link_stats=dict(self.comm.link_frames),
            warnings=warnings, wall_s=wall, late_send_s=max(rn.late_s for rn in runners))


def simulate_step(run: RunSpec | Scenario, mode: str = "auto", comm_scope: str = "stage") -> StepResult:
    """Assemble ``run`` (unless it is a scenario already) and simulate one step."""
    scenario = run if isinstance(run, Scenario) else Scenario(run)
    return MoEStep(scenario, mode, comm_scope).simulate()


def simulate_schedules(scenario: Scenario, schedules: list[str], mode: str = "auto", comm_scope: str = "stage",
                       progress: bool = False, workers: int = 1) -> list[StepResult]:
    """Steps of one scenario under several schedules, sharing its topology, its link table and one
    set of all-to-all measurements (they do not depend on the schedule)."""
    results, comm = [], None
    for name in schedules:
        step = MoEStep(scenario.with_schedule(name), mode, comm_scope, comm, workers)
        step.comm.measure_all(progress)
        comm = step.comm
        results.append(step.simulate())
    return results


__all__ = ["COMPARED_SCHEDULES", "MODES", "MoEStep", "StepResult", "simulate_schedules", "simulate_step"]
