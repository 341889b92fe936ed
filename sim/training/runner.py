"""The MoE ``OpRunner``: schedule ops as parts on GPUs' compute and communication streams
(:mod:`sim.training.costs.parts` builds the parts, :mod:`sim.training.costs.streams` runs them), pipeline sends on the
fabric, and the data-parallel synchronisation as each stage's gradients are done
(:mod:`sim.training.dpsync`).

:class:`GroupRunner` plays a group of pipelines in lockstep: rank r of the runner stands for the
GPUs of rank r in each of its pipelines (one EP group of data-parallel replicas in full mode, the
single replica 0 in representative mode), with one clock per GPU. The engine's SimPy process of a
rank starts an op when every replica's inputs have arrived; the runner computes each replica's
start (its own clock and its own inputs' arrival), runs the parts (:func:`~sim.training.costs.streams.run_op`)
and returns at the earliest replica's end, from which each replica's pipeline send starts on the
fabric at its own end time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import simpy

from ..engine import OpRecord, inputs_of, outputs_of
from ..network import Network
from ..schedules import Schedule
from ..schedules.ops import FBOp, Op, parts
from ..schedules.timing import exchange_inputs
from .comm.model_parallel import ModelParallelComm
from .comm.sends import send_bound
from .costs.chunk import ChunkModel, LayerCost, StageEnds
from .costs.parts import (
    NO_MODEL_PARALLEL,
    ModelParallelParts,
    backward_parts,
    forward_parts,
    overlapped_parts,
    weight_parts,
)
from .costs.streams import Part, as_streams, compile_plan, compute_durations, run_op, run_op_one, walk_op
from .dpsync import GradientSync, LayerCollectives
from .model.layout import Layout


class PartEvent(NamedTuple):
    """One part of one op of the traced rank, as it ran on pipeline 0 (seconds)."""

    seq: int          # the op's position in its rank's list
    op: str           # the op, e.g. "F3@0" or "[F3@0&B5@3]"
    fb: bool          # whether the op is an overlapped F&B unit
    stream: int       # COMPUTE or COMM
    name: str         # e.g. "ATTN(F)", "DISPATCH(B)"
    start: float
    end: float
    stretch: float = 1.0   # compute: how much longer than alone it ran, beside a communication kernel
    peer_wait: float = 0.0  # communication: seconds from its launch to its group's last GPU's launch


@dataclass
class GroupStats:
    """Per-GPU totals of one rank of a group (seconds; vectors over the group's replicas)."""

    compute_s: np.ndarray      # compute parts, as run (stretched when sharing SMs), recomputation included
    comm_s: np.ndarray         # all-to-all parts on the communication stream
    op_s: np.ndarray           # wall time inside ops
    recompute_s: np.ndarray    # recomputation parts (part of compute_s)
    pipeline_wait_s: np.ndarray  # before ops: waiting for an input already sent and still in flight
    tp_comm_s: np.ndarray      # tensor-parallel collectives (part of comm_s)
    cp_comm_s: np.ndarray      # context-parallel key/value rings, what the attention did not hide (part of comm_s)
    peer_wait_s: np.ndarray    # at collectives: launch to the group's last GPU's launch (part of comm_s)

    @classmethod
    def zeros(cls, n: int) -> "GroupStats":
        return cls(*(np.zeros(n) for _ in range(8)))


def group_factors(per_gpu: np.ndarray, layout, rank: int) -> np.ndarray:
    """Per data-parallel replica of pipeline rank ``rank``: the largest slowdown of ``per_gpu``
    (one per GPU, :meth:`sim.training.model.faults.FaultSpec.compute_factors`) over that replica's TP x CP
    GPUs, which wait for one another at every collective."""
    mp, dp = layout.model_parallel, layout.dp
    start = rank * dp * mp
    return per_gpu[start:start + dp * mp].reshape(dp, mp).max(axis=1)


@dataclass(frozen=True)
class StepContext:
    """What every :class:`GroupRunner` of one step shares, by name.

    ``schedule``, ``chunk`` (the layer costs), ``layout`` (which GPU is rank r of replica d),
    ``comm`` (the all-to-alls' times and expert loads), ``network`` (where pipeline activations go:
    :class:`~sim.network.Network`), ``sm_slowdown`` (compute beside a communication kernel).
    ``sync``: told when each stage's last backward has finished (it starts the data-parallel
    gradient synchronisation), or ``None``. ``layer_collectives``: ZeRO-3's per-layer gathers and
    scatters, or ``None``. ``live``: a :class:`~sim.training.comm.live.LiveComm` that runs the all-to-alls
    (and, for a representative pipeline, every replica's sends) on ``network`` among the other
    traffic, instead of charging their measured times; ``None``: measured. ``send_launch_s``: each
    pipeline send starts that long after its producer ends (the launch of its NCCL kernel,
    :mod:`sim.training.comm.kernels`); ``send_rate`` (bytes/s): the most a send between two GPUs of
    one node moves (NCCL's channels, :mod:`sim.training.comm.sends`), None: unbounded.
    ``compute_factors`` (per GPU) and ``faults`` (:class:`~sim.training.model.faults.FaultSpec`: its
    jitter) make compute parts of slow GPUs longer and every compute part noisy. ``model_parallel``:
    the TP and CP collectives' seconds, or ``None``; ``mp_parts``: which TP and CP parts the ops
    carry. ``blocking_sends``: a rank's next op starts
    no earlier than its last op's sends landed (the engine holds the rank until they have:
    :func:`~sim.engine.start_schedule`); each replica's clock moves to its own send's landing.
    ``start_s``: where the ranks' clocks start (the network's time when the step starts: 0 on a fresh
    network, later for a job's later steps); ``step_index``: which of a job's steps it is (its
    kernel jitter draws differ from step to step)."""

    schedule: Schedule
    chunk: ChunkModel
    layout: Layout
    comm: object
    network: Network
    sm_slowdown: float = 1.0
    sync: GradientSync | None = None
    layer_collectives: LayerCollectives | None = None
    live: object = None
    send_launch_s: float = 0.0
    send_rate: float | None = None
    compute_factors: np.ndarray | None = None
    faults: object = None
    model_parallel: ModelParallelComm | None = None
    mp_parts: ModelParallelParts = NO_MODEL_PARALLEL
    blocking_sends: bool = False
    start_s: float = 0.0            # the step's start on the network's clock (later steps of a job: :mod:`sim.jobs`)
    step_index: int = 0             # which step of a job (0: the first): its kernel jitter is drawn anew


class GroupRunner:
    """The OpRunner of the pipelines ``replicas`` (data-parallel indices), run in lockstep; their
    all-to-alls are collectives of EP group ``group``; the rest of the step is ``context``
    (:class:`StepContext`). ``trace``: a list that receives a :class:`PartEvent` for every part of
    the traced rank (``layout.traced_rank``) of the first replica, or ``None``."""

    def __init__(self, context: StepContext, group: int, replicas: list[int], trace: list | None = None):
        schedule, layout, comm, faults = context.schedule, context.layout, context.comm, context.faults
        compute_factors, layer_collectives = context.compute_factors, context.layer_collectives
        self.context = context
        chunk, fabric, sync = context.chunk, context.network, context.sync
        self.chunk, self.layout, self.comm, self.fabric, self.sync = chunk, layout, comm, fabric, sync
        self.live = context.live
        self.send_launch_s = context.send_launch_s      # an NCCL kernel's launch before each pipeline send
        self.send_rate = context.send_rate              # NCCL's bound on a send inside a node
        self.group = group
        self.replicas = np.asarray(replicas)
        pp, n = schedule.pp, len(replicas)
        self.num_stages = schedule.num_stages
        self.clock = {r: np.full(n, context.start_s) for r in range(pp)}
        self._stats = {r: GroupStats.zeros(n) for r in range(pp)}
        self._one = n == 1 and self.live is None        # run on Python floats (_run_one)
        self._totals = {r: [0.0] * 8 for r in range(pp)}   # _run_one's GroupStats, as floats (no peer waits)
        self.load = {r: np.array([comm.load_factor(r, int(d)) for d in replicas]) for r in range(pp)}
        self.arrivals: dict[tuple, np.ndarray] = {}   # key -> when each replica has it
        self.sent: dict[tuple, np.ndarray] = {}       # key -> when each replica's producer finished it
        self.records: list[OpRecord] = []             # ops of the first replica, as they ran there
        self.trace = trace
        self.late_s = 0.0                             # see deliver()
        self._plans: dict[tuple, tuple] = {}
        self._compiled_work: dict[tuple, tuple] = {}    # see _compiled
        self._seq = {r: 0 for r in range(pp)}
        self._slowdown = context.sm_slowdown
        self._blocking = context.blocking_sends
        # Blocking exchanges that batch several ops (Schedule.joined): op position -> the inputs its
        # exchange receives for the ops after it, which it waits for too
        # (sim.schedules.timing.exchange_inputs, as the engine waits for them).
        self._exchange_inputs = {} if not context.blocking_sends else {
            (r, i): keys for r, per_op in exchange_inputs(schedule).items()
            for i, keys in enumerate(per_op) if i + 1 in schedule.joined[r] and i not in schedule.joined[r]}
        self._grads_done = {r: last_weight_gradients(ops) for r, ops in schedule.ranks.items()}
        self._first_forwards = {r: first_forwards(ops) for r, ops in schedule.ranks.items()}
        self._layer_collectives = layer_collectives       # ZeRO-3: per-layer gathers and scatters
        self._reshard = layer_collectives is None or layer_collectives.sc.run.reshard_after_forward
        # ZeRO-3's gathers a layer ahead, or blocking (a per-tensor ZeRO-3, DeepSpeed's of 2021)
        self._prefetch = layer_collectives is None or layer_collectives.sc.run.zero3_collectives == "per-layer"
        self._model_parallel = context.model_parallel     # TP and CP collectives' seconds
        self._mp_parts = context.mp_parts                 # which TP and CP parts the ops carry
        # Faults (sim.training.model.faults): each replica's compute slowdown per rank (its TP x CP group at
        # the pace of its slowest GPU), kernel jitter.
        self._factor = None if compute_factors is None else {
            r: group_factors(compute_factors, layout, r)[self.replicas] for r in range(pp)}
        self._jitter = faults if faults is not None and faults.jitter_cv else None
        self._send_grid = faults.sends_on_grid_s if faults is not None else 0.0   # jitter: sends on a grid
        self._grids: dict[tuple[int, int], float] = {}  # per pair of ranks (see _grid)
        self._rank_gpus: dict[int, list[int]] = {}      # per rank (see _gpus)

    # -- OpRunner ------------------------------------------------------------------------------
    def run(self, env: simpy.Environment, rank: int, op):
        """The op's SimPy generator: :meth:`_run_one` for a representative pipeline with measured
        communication (one replica: the same figures on Python floats), else :meth:`_run_group`."""
        return self._run_one(env, rank, op) if self._one else self._run_group(env, rank, op)

    def _run_one(self, env: simpy.Environment, rank: int, op):
        """:meth:`_run_group` for a group of one replica and no live communication, on Python
        floats: the same operations in the same order (numpy's ``maximum`` and additions on one
        element give the same floats), without numpy's cost per call on one-element vectors. The
        clocks and arrivals stay one-element vectors (what :meth:`deliver` and the sync read); the
        totals are kept as floats and become :attr:`stats` when asked for."""
        S = self.num_stages
        start = sent = self.clock[rank].item()
        seq = self._seq[rank]
        arrivals, sent_at = self.arrivals, self.sent
        keys = [key for part in parts(op) for key in inputs_of(part, S)]
        if self._exchange_inputs:
            keys.extend(self._exchange_inputs.get((rank, seq), ()))
        for key in keys:
            at = arrivals[key].item()
            if at > start:
                start = at
            at = sent_at[key].item()
            if at > sent:
                sent = at
        plan, durations, comm_times, stacked, axis_s = self._plan(rank, op, self._zero3_parts(rank, seq))
        self._seq[rank] += 1
        if self._factor is not None or self._jitter is not None:
            durations = self._faulty(rank, seq, durations, stacked)
        record = self.trace is not None and rank == self.layout.traced_rank
        t = run_op_one(plan, start, durations, comm_times, record)
        end = t.end
        totals = self._totals[rank]           # in GroupStats' order
        totals[0] += t.compute_s
        totals[1] += t.comm_s
        totals[2] += end - start
        totals[3] += t.recompute_s
        totals[4] += start - sent             # 0 unless the input was sent but had not arrived
        totals[5] += axis_s[0]
        totals[6] += axis_s[1]
        self.clock[rank] = ends = np.array([end])
        for part in parts(op):
            for key in outputs_of(part, S):
                arrivals[key] = ends                # until deliver() says when it arrived
                sent_at[key] = ends
        if self.sync is not None:
            for stage in self._grads_done[rank].get(seq, ()):
                self.sync.stage_done(rank, stage, ends)
        self.records.append(OpRecord.of(rank, op, start, end))
        if record:
            fb, text = isinstance(op, FBOp), str(op)
            self.trace.extend(PartEvent(seq, text, fb, *span) for span in t.parts)
        wait = end - env.now
        if wait > 0:
            yield env.timeout(wait)

    @property
    def stats(self) -> dict[int, GroupStats]:
        """Per rank, its :class:`GroupStats` so far."""
        if self._one:
            return {r: GroupStats(*(np.array([x]) for x in totals)) for r, totals in self._totals.items()}
        return self._stats

    def _run_group(self, env: simpy.Environment, rank: int, op):
        """The op on every replica of the group at once, each replica's times a numpy vector."""
        S = self.num_stages
        free = start = self.clock[rank]
        sent = free
        seq = self._seq[rank]
        for part in parts(op):
            for key in inputs_of(part, S):
                start = np.maximum(start, self.arrivals[key])
                sent = np.maximum(sent, self.sent[key])
        if self._exchange_inputs:
            for key in self._exchange_inputs.get((rank, seq), ()):
                start = np.maximum(start, self.arrivals[key])
                sent = np.maximum(sent, self.sent[key])
        plan, durations, comm_times, stacked, axis_s = self._plan(rank, op, self._zero3_parts(rank, seq))
        self._seq[rank] += 1
        if self._factor is not None or self._jitter is not None:
            durations = self._faulty(rank, seq, durations, stacked)
        record = self.trace is not None and rank == self.layout.traced_rank
        if self.live is None:
            t = run_op(plan, start, durations, comm_times, record)
        else:
            axis_s = [0.0, 0.0]           # the TP and CP parts' seconds as they run live
            t = yield from self._run_live(env, rank, plan, start, durations, comm_times, record, axis_s)
        st = self._stats[rank]
        st.compute_s += t.compute_s
        st.recompute_s += t.recompute_s
        st.comm_s += t.comm_s
        st.op_s += t.end - start
        st.pipeline_wait_s += start - sent        # 0 unless the input was sent but had not arrived
        st.tp_comm_s += axis_s[0]
        st.cp_comm_s += axis_s[1]
        st.peer_wait_s += t.peer_wait_s
        self.clock[rank] = t.end
        for part in parts(op):
            for key in outputs_of(part, S):
                self.arrivals[key] = t.end          # until deliver() says when it arrived
                self.sent[key] = t.end
        if self.sync is not None:
            for stage in self._grads_done[rank].get(seq, ()):
                self.sync.stage_done(rank, stage, t.end)
        self.records.append(OpRecord.of(rank, op, float(start[0]), float(t.end[0])))
        if record:
            fb, text = isinstance(op, FBOp), str(op)
            self.trace.extend(PartEvent(seq, text, fb, *span) for span in t.parts)
        wait = float(t.end.min()) - env.now
        if wait > 0:
            yield env.timeout(wait)

    def op_seconds(self, rank: int, op, zero3: tuple[bool, bool] | None = None) -> float:
        """Seconds ``op`` occupies ``rank`` when it starts with the rank free and its inputs there
        (the slowest replica; all-to-alls at their measured times, no faults): the fixed duration
        a search's timing charges it (:mod:`sim.schedules.timing`). ``zero3``: whether it carries
        ZeRO-3's (gathers, scatters) (default: both under ZeRO-3)."""
        plan, durations, comm_times, _, _ = self._plan(rank, op, zero3)
        return float(run_op(plan, np.zeros(len(self.replicas)), durations, comm_times).end.max())

    def _faulty(self, rank: int, seq: int, durations: list, stacked: tuple) -> list:
        """``durations`` of op ``seq`` on ``rank`` on slow GPUs and with kernel jitter: each part's
        (full, shared) vectors times the GPUs' slowdown and the part's jitter draws, as one product
        of ``stacked`` ([part, replica] arrays of the same vectors) for all parts."""
        x = self._factor[rank] if self._factor is not None else 1.0
        if self._jitter is not None:
            x = x * self._jitter.jitter(rank, seq, self.replicas, len(durations), self.context.step_index)
        full, shared = stacked
        return list(zip(full * x, shared * x))

    def _run_live(self, env, rank: int, plan, start, durations, comm_times, record: bool, axis_s: list):
        """:func:`~sim.training.costs.streams.walk_op` with each all-to-all started on the fabric at its
        launch barrier and ended when its last byte lands, and each TP or CP part's rings likewise
        (its exposed seconds added to ``axis_s``, [TP, CP]); other communication parts (ZeRO-3's
        per-layer gathers) keep their measured times."""
        walk = walk_op(plan, start, durations, record)
        mp = self._model_parallel
        try:
            k, at = next(walk)
            while True:
                shape = plan.comm[k].shape
                ring = mp is not None and mp.measures(shape)
                if not ring and not self.comm.measures(shape):
                    k, at = walk.send(at + comm_times[k])
                    continue
                if at > env.now:
                    yield env.timeout(at - env.now)
                if ring:            # its rings' seconds on the fabric, from now (a CP ring's hidden
                    t0 = env.now    # part can leave the clock ahead of the walk: the next part starts now)
                    fn, groups, nbytes = mp.rings(shape, rank, self.replicas)
                    arrivals = mp.arrivals_for(shape, groups)
                    yield self.live.rings(fn, groups, nbytes, mp.launch_s, arrivals)
                    exposed = mp.exposed(shape, env.now - t0, arrivals)
                    axis_s[1 if mp.axis(shape) == "cp" else 0] += exposed
                    k, at = walk.send(at + exposed)
                    continue
                yield self.live.all_to_all(shape, rank, self.group)
                k, at = walk.send(env.now)
        except StopIteration as stop:
            return stop.value

    def deliver(self, env, src, dst, key):
        """Each replica's send starts at its own end time (plus the send kernel's launch; under
        jitter on a grid, landing as if it had not waited for it: :meth:`_grid`). Only an op
        without any all-to-all (nothing makes its replicas wait for each other) can end on some
        replica before the moment the last replica's input arrived; such a send starts late, by at
        most that gap, which ``late_s`` records (0 whenever replicas receive their inputs at the
        same time). A send batched into a later op's exchange (:attr:`Schedule.joined`) leaves at
        that op's end: each replica's clock, when the engine hands it over."""
        return self._send(env, src, dst, key, np.maximum(self.arrivals[key], self.clock[src]))

    def _send(self, env, src: int, dst: int, key, sent: np.ndarray | None = None):
        """``key``'s transfers from each replica of ``src`` to ``dst``, leaving at ``sent`` (default:
        when its producer ended): an event that fires once the last has landed, each replica's
        landing in ``arrivals[key]`` by then (and, blocking, the sender's clock moved to it); a
        generator where one live send stands for every replica (:meth:`_send_all`)."""
        sent = self.arrivals[key] if sent is None else sent
        if self.live is not None and self.live.representative:
            return self._send_all(env, src, dst, key, sent)
        fabric, nbytes = self.fabric, self.chunk.activation_bytes()
        srcs, dsts = self._gpus(src), self._gpus(dst)
        arrived = np.empty_like(sent)
        done = env.event()
        pending = [len(sent)]

        def landed(i: int, early: float = 0.0):
            arrived[i] = env.now - early
            pending[0] -= 1
            if not pending[0]:
                done.succeed()

        grid, launch = self._send_grid and self._grid(src, dst, srcs, dsts, nbytes), self.send_launch_s
        ends = sent.tolist()                                                # Python numbers: cheaper per send
        gpn, bound = self.layout.gpus_per_node, self.send_rate
        for i in [0] if len(ends) == 1 else np.argsort(sent, kind="stable").tolist():
            rate = send_bound(srcs[i], dsts[i], gpn, bound)
            at = due = ends[i] + launch
            early = 0.0
            if grid:                                # jittered replicas: sends leave on a grid (faults.send_grid_s)
                at = math.ceil(at / grid) * grid    # and land as if they had left when due (see _grid)
                early = max(at - max(due, env.now), 0.0)   # held for it (late or due now: sent now)
            wait = at - env.now
            if wait < -1e-12:                       # more than float rounding of the clock
                self.late_s = max(self.late_s, -wait)
            if wait > 0:                            # starts then, on the fabric's clock
                fabric.transfer_at(at, srcs[i], dsts[i], nbytes, lambda i=i, early=early: landed(i, early), rate)
            else:
                fabric.transfer(srcs[i], dsts[i], nbytes, on_done=lambda i=i: landed(i), max_rate=rate)
        done.callbacks.append(lambda _ev: self._landed(src, key, arrived))
        return done

    def _send_all(self, env, src: int, dst: int, key, sent: np.ndarray):
        """:meth:`_send` where one send on the live fabric stands for every replica's (a
        representative pipeline: one replica, and no faults, so no grid): it leaves at ``sent``
        plus the send kernel's launch, as a generator that ends when it has landed."""
        nbytes = self.chunk.activation_bytes()
        wait = sent.item() + self.send_launch_s - env.now
        if wait < -1e-12:                       # more than float rounding of the clock
            self.late_s = max(self.late_s, -wait)
        if wait > 0:
            yield env.timeout(wait)
        done = env.event()
        self.live.send_all(src, dst, nbytes, on_done=lambda: done.succeed(), max_rate=self.send_rate)
        yield done
        self._landed(src, key, np.array([env.now]))

    def _landed(self, src: int, key, arrived: np.ndarray) -> None:
        """``key`` has landed at ``arrived`` (per replica); blocking, its sender waited for it (see
        :class:`StepContext`)."""
        self.arrivals[key] = arrived
        if self._blocking:
            self.clock[src] = np.maximum(self.clock[src], arrived)

    def _gpus(self, rank: int) -> list[int]:
        """The GPUs of ``rank`` in this group's replicas, as a list
        (:meth:`~sim.training.model.layout.Layout.gpus_of`)."""
        gpus = self._rank_gpus.get(rank)
        if gpus is None:
            gpus = self._rank_gpus[rank] = self.layout.gpus_of(rank, self.replicas).tolist()
        return gpus

    def _grid(self, src: int, dst: int, srcs: list[int], dsts: list[int], nbytes: float) -> float:
        """The grid (s) the sends from rank ``src`` to rank ``dst`` start on under jitter:
        ``faults.send_grid_s``, or the time a send takes alone on the fastest of the replicas'
        routes where that is shorter (its bytes over that route's bandwidth, at most NCCL's bound
        inside a node: :meth:`_send_bandwidth`).

        A send due at ``t`` starts on the fabric at the next grid point ``t + d`` (so that the
        sends due close together share the fabric's recomputations, starts and ends) and its
        receiver takes its input as landed ``d`` before its last byte does: as if it had left
        when due and run as it ran (a send the group held up past ``t`` counts from the moment it
        could leave, now; one whose grid point has passed leaves now, as a late send). So a send
        whose rate does not change (the usual case: each replica's sends cross links of their
        own) lands exactly when it would have without the grid, and the grid biases no send late;
        what moves is the fabric's timeline, each send by at most its own time alone: the others
        it meets are those of ``t + d``, not of ``t``."""
        grid = self._grids.get((src, dst))
        if grid is None:
            fastest = max(map(self._send_bandwidth, srcs, dsts))
            grid = self._grids[(src, dst)] = min(self._send_grid, nbytes / fastest)
        return grid

    def _send_bandwidth(self, a: int, b: int) -> float:
        """Bytes/s a pipeline send from GPU ``a`` to GPU ``b`` gets alone: its route's, at most
        :attr:`send_rate` where the two share a node."""
        rate = self.fabric.route_bandwidth(a, b)
        bound = send_bound(a, b, self.layout.gpus_per_node, self.send_rate)
        return rate if bound is None else min(rate, bound)

    # -- parts -------------------------------------------------------------------------------
    def _zero3_parts(self, rank: int, seq: int) -> tuple[bool, bool]:
        """(gathers, scatters) of op ``seq`` of ``rank`` under ZeRO-3: in every op by default; with
        ``reshard_after_forward`` off, the weights are gathered only in the first forward of each
        stage (layer by layer, a layer ahead, beside the layers: :mod:`sim.training.costs.parts`) and the
        gradients reduce-scattered by the data-parallel sync when the stage is done
        (:mod:`sim.training.dpsync`), not inside ops."""
        if not self._zero3:
            return False, False
        if self._reshard:
            return True, True
        return seq in self._first_forwards[rank], False

    def _plan(self, rank: int, op, zero3: tuple[bool, bool] | None = None) -> tuple:
        """(plan, compute durations, communication parts' seconds, the durations stacked as two
        [part, replica] arrays, the seconds of its TP and of its CP parts) of an op of this shape on
        ``rank``."""
        shape = ("FB", op.f.stage, op.b.stage) if isinstance(op, FBOp) else (op.kind, op.stage)
        zero3 = (self._zero3, self._zero3) if zero3 is None else zero3
        shape += zero3
        cached = self._plans.get((rank, shape))
        if cached is None:
            plan, durations, stacked = self._compiled(rank, op, zero3)
            times = [self._comm_time(p.shape, rank) for p in plan.comm]
            mp = self._model_parallel
            axes = [mp.axis(p.shape) if mp is not None else "" for p in plan.comm]
            axis_s = tuple(sum(t for a, t in zip(axes, times) if a == axis) for axis in ("tp", "cp"))
            cached = self._plans[(rank, shape)] = (plan, durations, times, stacked, axis_s)
        return cached

    def _compiled(self, rank: int, op, zero3: tuple[bool, bool]) -> tuple:
        """(plan, compute durations, the durations stacked) of an op: built once per kind of work
        (its stage's layers and ends, or both halves' of an FB unit) and expert load, so stages
        that hold the same layers share it."""
        if isinstance(op, FBOp):
            (f_layers, f_ends), (b_layers, b_ends) = self._layers(op.f), self._layers(op.b)
            work = ("FB", tuple(f_layers), f_ends, tuple(b_layers), b_ends)
        else:
            layers, ends = self._layers(op)
            work = (op.kind, tuple(layers), ends)
        key = (work, zero3, self.load[rank].tobytes())
        hit = self._compiled_work.get(key)
        if hit is None:
            if isinstance(op, FBOp):
                plan = compile_plan(*overlapped_parts(f_layers, b_layers, f_ends, b_ends, self._zero3 and any(zero3),
                                                      self._mp_parts))
            else:
                plan = compile_plan(*as_streams(self._plain_parts(op, zero3)))
            durations = compute_durations(plan, self.load[rank], self._slowdown)
            grid = (len(durations), len(self.replicas))                  # [part, replica]
            stacked = (np.reshape([d for d, _ in durations], grid), np.reshape([d for _, d in durations], grid))
            hit = self._compiled_work[key] = (plan, durations, stacked)
        return hit

    def _comm_time(self, shape: str, rank: int) -> float:
        if self.comm.measures(shape):
            return self.comm.time(shape, rank, self.group)
        if self._model_parallel is not None and self._model_parallel.measures(shape):
            return self._model_parallel.time(shape)
        return self._layer_collectives.time(shape)

    def _layers(self, op: Op) -> tuple[list[LayerCost], StageEnds]:
        """The layers of the op's stage and the work at its ends (embedding, heads)."""
        return self.chunk.stage_work(op.stage)

    def _plain_parts(self, op: Op, zero3: tuple[bool, bool]) -> list[Part]:
        layers, ends = self._layers(op)
        gathers, scatters = zero3
        if op.kind == "F":
            return forward_parts(layers, ends, gathers, self._mp_parts, prefetch=self._prefetch)
        if op.kind == "W":
            return weight_parts(layers, ends, scatters)
        if self._reshard:
            return backward_parts(layers, ends, with_w=(op.kind == "B"), zero3=gathers, mp=self._mp_parts,
                                  prefetch=self._prefetch)
        return backward_parts(layers, ends, with_w=(op.kind == "B"), zero3=scatters, mp=self._mp_parts, regather=False)

    @property
    def _zero3(self) -> bool:
        return self._layer_collectives is not None


def first_forwards(ops: list) -> set[int]:
    """Indices of the ops that hold the first forward of some stage on this rank."""
    seen: set[int] = set()
    out: set[int] = set()
    for i, op in enumerate(ops):
        for part in parts(op):
            if part.kind == "F" and part.stage not in seen:
                seen.add(part.stage)
                out.add(i)
    return out


def last_weight_gradients(ops: list) -> dict[int, list[int]]:
    """{op index: stages whose weight gradients that op completes on this rank}: the last ``W`` or
    ``B`` of each stage (an ``FB``'s backward is a ``B``)."""
    last: dict[int, int] = {}
    for i, op in enumerate(ops):
        for part in parts(op):
            if part.kind in ("W", "B"):
                last[part.stage] = i
    out: dict[int, list[int]] = {}
    for stage, i in last.items():
        out.setdefault(i, []).append(stage)
    return out
