"""One MoE training step: config -> schedule -> SimPy ranks and streams on the fabric -> results.

Modes: ``representative`` simulates one pipeline (data-parallel replica 0) whose all-to-alls take
the time the fabric gives when every EP group of the stage runs them at once; ``full`` simulates
every rank of every pipeline, each all-to-all a collective that starts when all members of the EP
group arrive (the pipelines of an EP group run in lockstep, see :mod:`sim.training.runner`); ``auto``
(default) is representative for balanced routing and full when routing is skewed. The step ends
when the last rank's data-parallel synchronisation and optimizer step end (:mod:`sim.training.dpsync`).

Per rank (the slowest data-parallel replica of the rank), the step time splits into: compute
(useful work, stretched while sharing SMs with communication kernels), recompute (the memory
policy's), exposed all-to-all (time inside ops while the compute stream waits), exposed pipeline
transfer (waiting for an input already sent and still on the wire), bubble (the rest of the time
outside ops), data-parallel synchronisation (exposed: after the rank's last op) and the optimizer
step; they add up to the step time. Ignored: kernel launch gaps.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import simpy

from .. import limits
from ..engine import EngineResult, start_schedule
from ..network import LinkTimeline, Network
from ..perf import gc_paused
from .comm.alltoall import CommModel
from .comm.live import LiveComm
from .comm.model_parallel import ModelParallelComm
from .costs.kernel_report import kernel_frame
from .dpsync import GradientSync, LayerCollectives
from .model.memory import RankMemory
from .model.recipe import recipe, recipe_warnings
from .model.specs import COMPARED_SCHEDULES, MODES, RunSpec, SpecError
from .runner import GroupRunner, PartEvent, StepContext
from .scenario import Scenario
from .trust import EMPTY_COLUMNS, generation, model_params, trust_band


@dataclass
class RankResult:
    """Seconds per step of one pipeline rank (its slowest replica); the time columns add up to the
    step time: compute + recompute + exposed_comm + exposed_pp + bubble + dp_sync + optimizer."""

    rank: int
    compute_s: float            # useful compute (recomputation apart)
    exposed_comm_s: float       # exposed communication inside ops: all-to-alls, TP and CP collectives, ZeRO-3 gathers
    comm_s: float               # all-to-all time on the communication stream, hidden or not
    bubble_s: float
    utilization: float          # (compute + recompute) / step
    memory: RankMemory
    recompute_s: float = 0.0
    exposed_pp_s: float = 0.0   # waiting for pipeline transfers in flight
    dp_sync_s: float = 0.0      # data-parallel synchronisation after the rank's last op
    optimizer_s: float = 0.0
    sync_start_s: float = 0.0   # when the rank's last gradient reduce-scatter started (since the step began)
    replica_compute: "ReplicaSpread | None" = None   # compute (recomputation included) over the replicas
    replica_comm: "ReplicaSpread | None" = None      # all-to-all time, barrier waits included, over the replicas
    last_op_end_s: float = 0.0  # when the rank's last op ended (its slowest replica)
    reduced_s: float = 0.0      # when the rank's gradients were reduced (before the optimizer)
    sync_end_s: float = 0.0     # when the rank's optimizer step and weight all-gather ended
    tp_comm_s: float = 0.0      # tensor-parallel collectives (exposed: inside exposed_comm_s)
    cp_comm_s: float = 0.0      # context-parallel key/value rings' exposed rest (inside exposed_comm_s)
    replica_peer_wait: "ReplicaSpread | None" = None  # inside replica_comm: launch to the group's last launch

    def to_json(self) -> dict:
        m = self.memory
        return {"rank": self.rank, "compute_s": self.compute_s, "recompute_s": self.recompute_s,
                "exposed_comm_s": self.exposed_comm_s, "exposed_pp_s": self.exposed_pp_s,
                "bubble_s": self.bubble_s, "dp_sync_s": self.dp_sync_s, "optimizer_s": self.optimizer_s,
                "comm_s": self.comm_s, "tp_comm_s": self.tp_comm_s, "cp_comm_s": self.cp_comm_s,
                "utilization": self.utilization, "sync_start_s": self.sync_start_s,
                "memory_gb": round(m.total_gb, 3), "params_gb": round(m.params_gb, 3),
                "grads_gb": round(m.grads_gb, 3), "optimizer_gb": round(m.optimizer_gb, 3),
                "activations_gb": round(m.activations_gb, 3), "reserve_gb": round(m.reserve_gb, 3),
                "fp8_weights_gb": round(m.fp8_weights_gb, 3),
                **{f"fixed_{name.lower().replace(' ', '_').replace('-', '_')}_gb": round(gb, 3) for name, gb in m.fixed},
                "headroom_gb": round(m.headroom_gb, 3), "peak_microbatches": m.peak_microbatches,
                **{f"{name}_{k}": v for name, spread in (("replica_compute", self.replica_compute),
                                                         ("replica_comm", self.replica_comm),
                                                         ("replica_peer_wait", self.replica_peer_wait))
                   if spread is not None for k, v in spread.to_json().items()}}


@dataclass(frozen=True)
class ReplicaSpread:
    """A per-GPU figure of one pipeline rank over its data-parallel replicas (seconds): min,
    median, max and which replica has the max (one replica in representative mode)."""

    min_s: float
    median_s: float
    max_s: float
    max_replica: int

    @classmethod
    def of(cls, values: np.ndarray, replicas: np.ndarray) -> "ReplicaSpread":
        i = int(np.argmax(values))
        return cls(float(values.min()), float(np.median(values)), float(values[i]), int(replicas[i]))

    def to_json(self) -> dict:
        return {"min_s": self.min_s, "median_s": self.median_s, "max_s": self.max_s, "max_replica": self.max_replica}


TIME_COLUMNS = ("compute_s", "recompute_s", "exposed_comm_s", "exposed_pp_s", "bubble_s", "dp_sync_s", "optimizer_s")


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
    pipeline_end_s: float = 0.0                        # the last op's end (before the DP sync)
    part_trace: list[PartEvent] = field(repr=False, default_factory=list)
    link_stats: dict = field(repr=False, default_factory=dict)
    warnings: list = field(default_factory=list)
    recipe: dict = field(default_factory=dict)         # what was simulated (sim.training.model.recipe)
    wall_s: float = 0.0
    late_send_s: float = 0.0    # lockstep lag of a pipeline send (see GroupRunner.deliver); 0 normally
    a2a_slowdown: float = 1.0   # live communication: all-to-all seconds live / alone (1: measured mode)
    link_timeline: object = field(repr=False, default=None)   # DataFrame of the busiest links over time, if recorded
    fault_free_s: float | None = None   # the same run's step without its faults (set by `run`), for their cost
    kernels: object = field(repr=False, default=None)   # DataFrame: every kernel of a layer (kernel_report)
    trust: object = None        # TrustBand: the validated runs like this one and their errors (sim.training.trust)
    beside_comm: tuple = (0, 0, 0.0)   # (SMs a communication kernel holds, the GPU's SMs, HBM share its copies take)
    start_s: float = 0.0        # when it started on its network's clock (its times count from there: sim.jobs)

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
    def min_headroom_gb(self) -> float:
        return min(r.memory.headroom_gb for r in self.ranks)

    @property
    def fits_hbm(self) -> bool:
        return all(r.memory.fits for r in self.ranks)

    @property
    def compute_spread(self) -> float:
        """(most - least) / most of the ranks' compute + recompute: how unevenly the stages are loaded."""
        busy = [r.compute_s + r.recompute_s for r in self.ranks]
        return (max(busy) - min(busy)) / max(busy) if max(busy) > 0 else 0.0

    @property
    def busiest_rank(self) -> int:
        """The rank with the most compute + recompute."""
        return max(self.ranks, key=lambda r: r.compute_s + r.recompute_s).rank

    @property
    def bound(self) -> str:
        """What this run loses most time to, besides compute: ``bubble``, ``exposed all-to-all``
        (``exposed communication`` without expert parallelism or with TP or CP, whose collectives
        and ZeRO-3's gathers it holds too), ``pipeline transfers`` or ``data-parallel sync`` (mean
        over ranks); ``compute`` when the largest is under 0.1% of the step."""
        comm = "exposed all-to-all" if self.run.ep > 1 and self.run.tp * self.run.cp == 1 else "exposed communication"
        losses = {"bubble": "bubble_s", comm: "exposed_comm_s",
                  "pipeline transfers": "exposed_pp_s", "data-parallel sync": "dp_sync_s"}
        worst = max(losses, key=lambda k: self.mean_per_rank(losses[k]))
        return worst if self.mean_per_rank(losses[worst]) >= 1e-3 * self.step_time_s else "compute"

    @property
    def recipe_warnings(self) -> list[str]:
        """Idle GPUs of the topology; an MFU above :data:`~sim.training.model.recipe.MFU_BOUND`."""
        return recipe_warnings(self.recipe, self.mfu, self.run.gemm_efficiency) if self.recipe else []

    @property
    def peer_wait_s(self) -> float:
        """Seconds per GPU per step spent at collectives waiting for the group's last GPU to launch
        them (the median replica of each rank, mean over ranks; inside the communication time). 0 in
        representative mode, where every GPU of a group is the same."""
        waits = [r.replica_peer_wait.median_s for r in self.ranks if r.replica_peer_wait is not None]
        return sum(waits) / len(self.ranks) if waits else 0.0

    def mean_per_rank(self, column: str) -> float:
        """Mean over ranks of one of :data:`TIME_COLUMNS` (seconds per step)."""
        return sum(getattr(r, column) for r in self.ranks) / len(self.ranks)

    def summary(self) -> dict:
        """One row for comparison tables and sweeps: the configuration, then metrics with units
        in their names."""
        return {"schedule": self.run.schedule, "mode": self.mode, "pp": self.run.pp, "ep": self.run.ep,
                "dp": self.run.dp, "microbatches": self.run.microbatches, "step_time_s": self.step_time_s,
                "tokens_per_s": self.tokens_per_s, "mfu": self.mfu, "compute_comm_ratio": self.compute_comm_ratio,
                "exposed_comm_s": self.exposed_comm_s, "comm_hidden_fraction": self.comm_hidden_fraction,
                "mean_utilization": self.mean_utilization, "bubble_share": self.bubble_share,
                "exposed_comm_share": self.exposed_comm_share, "max_memory_gb": self.max_memory_gb,
                "min_headroom_gb": self.min_headroom_gb, "fits_hbm": self.fits_hbm,
                "compute_spread": self.compute_spread, "busiest_rank": self.busiest_rank, "bound": self.bound,
                "a2a_dispatch_ms": self.a2a_dispatch_s * 1e3, "a2a_combine_ms": self.a2a_combine_s * 1e3,
                "communication": self.run.communication, "kernels": self.run.kernels, "a2a_slowdown": self.a2a_slowdown,
                "faults": self.run.faults.describe() if self.run.faults is not None else "",
                "fault_cost_s": self.step_time_s - self.fault_free_s if self.fault_free_s is not None else None,
                **{f"mean_{c}": self.mean_per_rank(c) for c in TIME_COLUMNS + ("tp_comm_s", "cp_comm_s")},
                "mean_peer_wait_s": self.peer_wait_s,
                **{k: v for k, v in self.recipe.items() if k not in ("pp", "ep", "dp", "microbatches", "communication",
                                                                     "kernels")},
                **(self.trust.columns() if self.trust is not None else EMPTY_COLUMNS)}

    def to_json(self) -> dict:
        return {"scenario": self.run.description, "recipe": self.recipe, "pp": self.run.pp, "ep": self.run.ep,
                "dp": self.run.dp, "schedule": self.run.schedule, "mode": self.mode,
                "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
                "compute_comm_ratio": self.compute_comm_ratio, "exposed_comm_s": self.exposed_comm_s,
                "comm_hidden_fraction": self.comm_hidden_fraction, "a2a_dispatch_s": self.a2a_dispatch_s,
                "a2a_combine_s": self.a2a_combine_s, "ranks": [r.to_json() for r in self.ranks],
                "communication": self.run.communication, "kernels": self.run.kernels, "a2a_slowdown": self.a2a_slowdown,
                "faults": self.run.faults.describe() if self.run.faults is not None else "",
                "warnings": self.recipe_warnings + self.warnings, "late_send_s": self.late_send_s, "wall_s": self.wall_s,
                "layer_kernels": [] if self.kernels is None else self.kernels.to_dict("records"),
                "beside_comm": {"comm_sms": self.beside_comm[0], "gpu_sms": self.beside_comm[1],
                                "hbm_share": self.beside_comm[2]},
                "trust": self.trust.to_json() if self.trust is not None else None}


@dataclass(frozen=True)
class StartedStep:
    """A step started on a network (:meth:`MoEStep.start`). Call it, once the environment has run,
    for its :class:`StepResult` (it raises :class:`~sim.engine.DeadlockError` if a rank got
    stuck); ``done``: the SimPy event that fires when the step has ended (every rank's last op,
    gradient synchronisation and optimizer step), for a job that starts its next step then;
    ``start_s``: when it started, on the network's clock."""

    finish: Callable[[], StepResult]
    done: simpy.Event
    start_s: float

    def __call__(self) -> StepResult:
        return self.finish()


class MoEStep:
    """One training step of a :class:`~sim.training.scenario.Scenario`: its all-to-all times (the comm
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
        faulty = run.faults is not None and run.faults.any
        if faulty and mode == "representative":
            raise SpecError("faults break the symmetry one pipeline stands for: use mode 'auto' or 'full' "
                            "(every rank simulated)")
        self.full = mode == "full" or (mode == "auto" and (run.routing_skew > 0 or faulty))
        self.live = run.communication == "live"
        if self.live:
            if comm_scope == "cluster":
                raise SpecError("comm scope 'cluster' is for measured communication; live all-to-alls meet "
                                "every stage's traffic on the step's fabric (use the default scope)")
            # An all-to-all's own speed, measured alone: one EP group's (full), or every group of its
            # stage at once, which the representative's bundle carries (sim.training.comm.live).
            comm_scope = "group" if self.full else "stage"
        if comm is not None and not comm.serves(run, comm_scope):
            raise ValueError("comm: these all-to-all measurements are for another run or scope")
        self.mode = "full" if self.full else "representative"
        pipelines = sc.layout.groups_per_rank if self.full else 1
        limits.check("max_parts", limits.step_parts(pipelines, run.microbatches, sc.model.layers + sc.model.mtp_modules),
                     f"a {self.mode} step of {run.model} with M={run.microbatches:,} over {pipelines:,} pipeline(s)")
        self.comm = comm or CommModel(run, sc.model, sc.links, sc.layout, sc.collectives, comm_scope, workers,
                                      sc.kernels)
        self.layer_collectives = LayerCollectives(sc) if run.zero_stage == 3 else None
        self.model_parallel = ModelParallelComm(sc) if sc.layout.model_parallel > 1 else None
        self._live: LiveComm | None = None

    @property
    def blocking_sends(self) -> bool:
        """Whether a rank waits for its pipeline sends (``RunSpec.pipeline_sends``)."""
        return self.scenario.run.pipeline_sends == "blocking"

    def runners(self, fabric: Network, trace: list | None = None, sync: GradientSync | None = None,
                step_index: int = 0) -> list[GroupRunner]:
        """One lockstep runner per EP group of pipelines (full) or one for replica 0; the runner
        holding replica 0 records the traced rank's parts into ``trace``; ``step_index``: which of
        a job's steps (:class:`~sim.training.runner.StepContext`)."""
        sc = self.scenario
        groups = range(sc.layout.groups_per_rank) if self.full else [0]
        live = LiveComm(self.comm, sc.layout, fabric, representative=not self.full) if self.live else None
        self._live = live
        factors = sc.compute_factors()                  # slow GPUs under the run's faults, once for all groups
        context = StepContext(schedule=sc.schedule, chunk=sc.chunk, layout=sc.layout, comm=self.comm, network=fabric,
                              sm_slowdown=sc.sm_slowdown, sync=sync, layer_collectives=self.layer_collectives,
                              live=live, send_launch_s=sc.kernels.nccl_launch_s, send_rate=sc.send_rate,
                              compute_factors=factors, faults=sc.run.faults, model_parallel=self.model_parallel,
                              mp_parts=sc.model_parallel_parts, blocking_sends=self.blocking_sends,
                              start_s=fabric.env.now, step_index=step_index)
        return [GroupRunner(context, g, sc.layout.group_replicas(g) if self.full else [0], trace if g == 0 else None)
                for g in groups]

    def simulate(self, link_timeline: bool = False) -> StepResult:
        """One step on a fresh network (the run's backend, :meth:`~sim.training.scenario.Scenario.step_fabric`).
        ``link_timeline``: also record the utilization of the step network's busiest links over
        time (:class:`~sim.network.LinkTimeline`; the pipeline sends, the data-parallel rings and,
        in live mode, the all-to-alls), in ``StepResult.link_timeline``."""
        with gc_paused():
            env = simpy.Environment()
            finish = self.start(self.scenario.step_fabric(env), link_timeline)
            env.run()
            return finish()

    def start(self, network: Network, link_timeline: bool = False, step_index: int = 0) -> "StartedStep":
        """Start the step's ranks on ``network`` now (the step's times are counted from the
        network's clock at this call: 0 on a fresh network), beside whatever else runs on it
        (:mod:`sim.cluster`: other jobs), and return a :class:`StartedStep`: the call that, once
        the environment has run, checks every rank finished and gives the :class:`StepResult`, and
        its ``done`` event (every rank's last op and optimizer step ended). ``step_index``: which
        of a job's steps this is (0, the default: the first; later steps draw their kernel jitter
        anew, :meth:`~sim.training.model.faults.FaultSpec.jitter`)."""
        t0 = time.perf_counter()
        start_s = network.env.now
        trace: list[PartEvent] = []
        timeline = LinkTimeline(network, bin_s=1e-6, max_bins=128) if link_timeline else None
        sync = GradientSync(self.scenario, network, self.scenario.layout.groups_per_rank if self.full else 1)
        runners = self.runners(network, trace, sync, step_index)
        processes: list = []
        finishers = [start_schedule(self.scenario.schedule, r, network.env, self.blocking_sends, processes)
                     for r in runners]

        def finish() -> StepResult:
            for done in finishers:
                done()                      # raises DeadlockError if a rank got stuck
            if not sync.ended.triggered:
                raise RuntimeError("the step's data-parallel synchronisation did not finish")
            result = self._summarize(runners, sync, trace, time.perf_counter() - t0, start_s)
            result.start_s = start_s
            if timeline is not None:
                timeline.finish()
                result.link_timeline = timeline.utilization(k=16)
            return result
        return StartedStep(finish, simpy.AllOf(network.env, [*processes, sync.ended]), start_s)

    def _summarize(self, runners: list[GroupRunner], sync: GradientSync, trace: list, wall: float,
                   start_s: float = 0.0) -> StepResult:
        """The step's figures; times on the network's clock less ``start_s`` (the step's start)."""
        sc = self.scenario
        run, P, memory = sc.run, sc.run.pp, sc.memory
        pipeline_end = max(float(c.max()) for rn in runners for c in rn.clock.values()) - start_s
        step = max(pipeline_end, max(s.end for s in sync.ranks.values()) - start_s)
        if run.optimizer_sync == "bypass":          # successive steps overlap: the longest rank's own span
            first = {}
            for rn in runners:
                for rec in rn.records:
                    first[rec.rank] = min(first.get(rec.rank, rec.start), rec.start)
            step = max(max(max(float(rn.clock[r].max()) for rn in runners), sync.ranks[r].end)
                       - first.get(r, start_s) for r in range(P))
        # Per rank: the slowest replica's figures (identical replicas in representative mode).
        ranks = []
        for rank in range(P):
            stats = {name: np.concatenate([getattr(rn.stats[rank], name) for rn in runners])
                     for name in ("op_s", "compute_s", "comm_s", "recompute_s", "pipeline_wait_s", "tp_comm_s",
                                  "cp_comm_s", "peer_wait_s")}
            last_end = np.concatenate([rn.clock[rank] for rn in runners]) - start_s
            worst = int(np.argmax(stats["op_s"]))
            op_s, busy, comm_s, recompute_s, wait_s = (float(stats[k][worst]) for k in (
                "op_s", "compute_s", "comm_s", "recompute_s", "pipeline_wait_s"))
            s = sync.ranks[rank]
            # Its own gradient reduction left exposed, then the weight all-gather; a wait for the other
            # ranks at the optimizer's global barrier is bubble (the pipeline's imbalance), not sync.
            launched, reduced_at, end = s.launched - start_s, s.reduced - start_s, s.end - start_s
            reduced = max(reduced_at, sync.last_op_end(rank) - start_s)
            dp_s = max(0.0, reduced - max(float(last_end[worst]), launched)) + (s.end - s.optimizer_end)
            opt_s = s.optimizer_end - s.optimizer_start
            bubble = step - op_s - wait_s - dp_s - opt_s
            replica_ids = np.concatenate([rn.replicas for rn in runners])
            ranks.append(RankResult(rank, busy - recompute_s, max(0.0, op_s - busy), comm_s, bubble,
                                    busy / step if step else 0.0, memory[rank], recompute_s, wait_s, dp_s, opt_s,
                                    launched, ReplicaSpread.of(stats["compute_s"], replica_ids),
                                    ReplicaSpread.of(stats["comm_s"], replica_ids), float(last_end[worst]),
                                    reduced_at, end, float(stats["tp_comm_s"][worst]),
                                    float(stats["cp_comm_s"][worst]),
                                    ReplicaSpread.of(stats["peer_wait_s"], replica_ids)))
        records = runners[0].records if not start_s else [
            rec._replace(start=rec.start - start_s, end=rec.end - start_s) for rec in runners[0].records]
        if start_s:
            trace[:] = [e._replace(start=e.start - start_s, end=e.end - start_s) for e in trace]
        engine = EngineResult.of(sc.schedule, records)
        tokens = run.dp * run.microbatches * run.tokens_per_microbatch
        flops = sc.chunk.model_flops_per_microbatch() * run.microbatches * run.dp
        # against the peak of the GEMMs' own precision (FP8 GEMMs against the FP8 peak)
        mfu = flops / (run.gpus * sc.gpu.peak_flops(run.gemm_precision) * step)
        moe_stage = next((s for s, layers in enumerate(sc.chunk.stage_layers) if any(c.moe for c in layers)), None)
        if moe_stage is not None and sc.model.is_moe:
            d, c = self.comm.time("dispatch", 0, 0), self.comm.time("combine", 0, 0)
            layers = [c_ for c_ in sc.chunk.stage_layers[moe_stage] if c_.moe]
            compute = sum(l.forward for l in layers)
            ratio = compute / (len(layers) * (d + c)) if d + c > 0 else float("inf")   # EP 1: no all-to-all
        else:
            d = c = 0.0
            ratio = float("inf")
        total_comm = sum(r.comm_s for r in ranks)
        exposed = sum(r.exposed_comm_s for r in ranks)
        plan = recipe(run, len(sc.graph.graph["gpus"]), sc.chunk.compute_label)
        warnings = []
        if sc.layout.tp_spans_nodes:
            warnings.append(f"TP groups of {run.tp} span nodes of {sc.layout.gpus_per_node} GPUs (tp_across_nodes): "
                            "their collectives cross the scale-out network")
        for m in memory:
            if not m.fits:
                warnings.append(f"rank {m.rank} needs {m.total_gb:.1f} GB ({m.breakdown}) > {sc.gpu.hbm_gb:g} GB "
                                f"HBM of {sc.gpu.name}: does not fit")
        return StepResult(
            run=run, mode=self.mode, step_time_s=step, tokens_per_s=tokens / step, mfu=mfu,
            compute_comm_ratio=ratio, exposed_comm_s=exposed / P,
            comm_hidden_fraction=1 - exposed / total_comm if total_comm > 0 else 1.0,
            a2a_dispatch_s=d, a2a_combine_s=c, ranks=ranks, engine=engine, hbm_gb=sc.gpu.hbm_gb,
            traced_rank=sc.layout.traced_rank, pipeline_end_s=pipeline_end, part_trace=trace, link_stats=dict(self.comm.link_frames),
            warnings=warnings, recipe=plan, wall_s=wall, late_send_s=max(rn.late_s for rn in runners),
            a2a_slowdown=self._live.slowdown if self._live is not None else 1.0, kernels=kernel_frame(sc.chunk),
            trust=scenario_trust(sc), beside_comm=(sc.beside_comm[0], sc.gpu.sms, sc.beside_comm[1]))


def scenario_trust(sc: Scenario):
    """The :class:`~sim.training.trust.TrustBand` of a scenario's run (``None``: no validated run like it)."""
    family = getattr(getattr(sc.chunk, "kernels", None), "family", None)
    gen = generation(sc.gpu.name, getattr(family, "name", None))
    return trust_band(gen, sc.model.is_moe, sc.run.tp * sc.run.cp > 1, sc.run.microbatch_size, model_params(sc.model))


def simulate_step(run: RunSpec | Scenario, mode: str = "auto", comm_scope: str = "stage") -> StepResult:
    """Assemble ``run`` (unless it is a scenario already) and simulate one step."""
    scenario = run if isinstance(run, Scenario) else Scenario(run)
    return MoEStep(scenario, mode, comm_scope).simulate()


def simulate_schedules(scenario: Scenario, schedules: list[str], mode: str = "auto", comm_scope: str = "stage",
                       progress: bool = False, workers: int = 1, link_timeline: bool = False,
                       done=None) -> list[StepResult]:
    """Steps of one scenario under several schedules, sharing its topology, its link table and one
    set of all-to-all measurements (they do not depend on the schedule); ``link_timeline``: see
    :meth:`MoEStep.simulate`; ``done(result)``: called after each step (a progress bar's)."""
    results, comm = [], None
    for name in schedules:
        step = MoEStep(scenario.with_schedule(name), mode, comm_scope, comm, workers)
        step.comm.measure_all(progress)
        comm = step.comm
        results.append(step.simulate(link_timeline))
        if done is not None:
            done(results[-1])
    return results


__all__ = ["COMPARED_SCHEDULES", "MODES", "TIME_COLUMNS", "MoEStep", "RankResult", "StartedStep", "StepResult",
           "simulate_schedules", "simulate_step"]
