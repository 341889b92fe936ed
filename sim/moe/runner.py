"""Turns schedule ops into parts on a GPU's compute and communication streams (the MoE ``OpRunner``).

A plain op runs its parts one after the other, so its all-to-alls are exposed:

* ``F``: per layer ATTN(F), DISPATCH(F), MLP(F), COMBINE(F) (dense layers: no all-to-all);
* ``I`` / ``B``: per layer, last first: COMBINE(B), MLP(B) [, MLP(W)], DISPATCH(B), ATTN(B) [, ATTN(W)];
* ``W``: every layer's MLP(W) and ATTN(W).

An overlapped ``FB`` unit runs two streams at once, in the order of the DeepSeek-V3 report's
Figure 4, pairing forward layer j with backward layer j (counted from the end):
compute: ATTN(F) MLP(B) MLP(W) MLP(F) ATTN(B) ATTN(W); communication: COMBINE(B) DISPATCH(F)
DISPATCH(B) COMBINE(F). Each transfer waits for the compute part that produces its data and each
compute part for the transfer it consumes; each stream runs its parts in order. Whatever overlap
results comes out of the streams as :mod:`sim.moe.streams` runs them (rules there, including SM
sharing between a running all-to-all and compute).

:class:`GroupRunner` plays a group of pipelines in lockstep: rank r of the runner stands for the
GPUs of rank r in each of its pipelines (one EP group of data-parallel replicas in full mode, the
single replica 0 in representative mode), with one clock per GPU. The engine's SimPy process of a
rank starts an op when every replica's inputs have arrived; the runner computes each replica's
start (its own clock and its own inputs' arrival), runs the parts (:func:`~sim.moe.streams.run_op`)
and returns at the earliest replica's end, from which each replica's pipeline send starts on the
fabric at its own end time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import simpy

from ..engine import OpRecord, inputs_of, outputs_of
from ..network import Fabric
from ..schedules import Schedule
from ..schedules.ops import FBOp, Op, parts
from .chunk import ChunkModel, LayerCost
from .layout import Layout
from .streams import COMM, COMPUTE, Part, as_streams, compile_plan, compute_durations, run_op


def forward_parts(layers: list[LayerCost], head: float) -> list[Part]:
    parts: list[Part] = []
    for c in layers:
        parts.append(Part(COMPUTE, "ATTN(F)", c.attn_f))
        if c.moe:
            parts.append(Part(COMM, "DISPATCH(F)", 0.0, "dispatch"))
        parts.append(Part(COMPUTE, "MLP(F)", c.mlp_f, routed_share=c.routed_share))
        if c.moe:
            parts.append(Part(COMM, "COMBINE(F)", 0.0, "combine"))
    if head:
        parts.append(Part(COMPUTE, "HEAD(F)", head))
    return parts


def backward_parts(layers: list[LayerCost], head: float, with_w: bool) -> list[Part]:
    parts: list[Part] = []
    if head:
        parts.append(Part(COMPUTE, "HEAD(B)", head * (2 if with_w else 1)))
    for c in reversed(layers):
        if c.moe:
            parts.append(Part(COMM, "COMBINE(B)", 0.0, "dispatch"))
        parts.append(Part(COMPUTE, "MLP(B)", c.mlp_i, routed_share=c.routed_share))
        if with_w:
            parts.append(Part(COMPUTE, "MLP(W)", c.mlp_w, routed_share=c.routed_share))
        if c.moe:
            parts.append(Part(COMM, "DISPATCH(B)", 0.0, "combine"))
        parts.append(Part(COMPUTE, "ATTN(B)", c.attn_i))
        if with_w:
            parts.append(Part(COMPUTE, "ATTN(W)", c.attn_w))
    return parts


def weight_parts(layers: list[LayerCost], head: float) -> list[Part]:
    parts = [Part(COMPUTE, "HEAD(W)", head)] if head else []
    for c in reversed(layers):
        parts.append(Part(COMPUTE, "MLP(W)", c.mlp_w, routed_share=c.routed_share))
        parts.append(Part(COMPUTE, "ATTN(W)", c.attn_w))
    return parts


def overlapped_parts(f_layers: list[LayerCost], b_layers: list[LayerCost], f_head: float,
                     b_head: float) -> tuple[list[Part], list[Part]]:
    """(compute stream, communication stream) of an F&B unit, Figure 4 order, with dependencies
    as (stream, index) pairs in ``after``."""
    comp: list[Part] = []
    comm: list[Part] = []
    last_f = None   # (stream, index) the next forward layer waits for
    last_b = None
    if b_head:
        comp.append(Part(COMPUTE, "HEAD(B)", 2 * b_head))
        last_b = (COMPUTE, 0)
    b_rev = list(reversed(b_layers))
    for j in range(max(len(f_layers), len(b_rev))):
        f = f_layers[j] if j < len(f_layers) else None
        b = b_rev[j] if j < len(b_rev) else None
        attn_f = disp_f = mlp_f = comb_b = mlp_b = disp_b = None
        if f:
            comp.append(Part(COMPUTE, "ATTN(F)", f.attn_f, after=[last_f] if last_f else []))
            attn_f = (COMPUTE, len(comp) - 1)
        if b and b.moe:
            comm.append(Part(COMM, "COMBINE(B)", 0.0, "dispatch", after=[last_b] if last_b else []))
            comb_b = (COMM, len(comm) - 1)
        if b:
            dep = comb_b or last_b
            comp.append(Part(COMPUTE, "MLP(B)", b.mlp_i, routed_share=b.routed_share, after=[dep] if dep else []))
            mlp_b = (COMPUTE, len(comp) - 1)
            comp.append(Part(COMPUTE, "MLP(W)", b.mlp_w, routed_share=b.routed_share))
        if f and f.moe:
            comm.append(Part(COMM, "DISPATCH(F)", 0.0, "dispatch", after=[attn_f]))
            disp_f = (COMM, len(comm) - 1)
        if b and b.moe:
            comm.append(Part(COMM, "DISPATCH(B)", 0.0, "combine", after=[mlp_b]))
            disp_b = (COMM, len(comm) - 1)
        if f:
            comp.append(Part(COMPUTE, "MLP(F)", f.mlp_f, routed_share=f.routed_share, after=[disp_f or attn_f]))
            mlp_f = (COMPUTE, len(comp) - 1)
        if b:
            comp.append(Part(COMPUTE, "ATTN(B)", b.attn_i, after=[disp_b or mlp_b]))
            last_b = (COMPUTE, len(comp) - 1)
            comp.append(Part(COMPUTE, "ATTN(W)", b.attn_w))
        if f and f.moe:
            comm.append(Part(COMM, "COMBINE(F)", 0.0, "combine", after=[mlp_f]))
            last_f = (COMM, len(comm) - 1)
        elif f:
            last_f = mlp_f
    if f_head:
        comp.append(Part(COMPUTE, "HEAD(F)", f_head, after=[last_f] if last_f else []))
    return comp, comm


class PartEvent(NamedTuple):
    """One part of one op of the traced rank, as it ran on pipeline 0 (seconds)."""

    seq: int          # the op's position in its rank's list
    op: str           # the op, e.g. "F3@0" or "[F3@0&B5@3]"
    fb: bool          # whether the op is an overlapped F&B unit
    stream: int       # COMPUTE or COMM
    name: str         # e.g. "ATTN(F)", "DISPATCH(B)"
    start: float
    end: float


@dataclass
class GroupStats:
    """Per-GPU totals of one rank of a group (seconds; vectors over the group's replicas)."""

    compute_s: np.ndarray      # compute parts, as run (stretched when sharing SMs)
    comm_s: np.ndarray         # all-to-all parts on the communication stream
    op_s: np.ndarray           # wall time inside ops


class GroupRunner:
    """The OpRunner of the pipelines ``replicas`` (data-parallel indices), run in lockstep; their
    all-to-alls are collectives of EP group ``group``.

    It reads the schedule's shape, the chunk model's layer costs, the layout (which GPU is rank r
    of replica d), the comm model's all-to-all times and expert loads, and sends pipeline
    activations on ``fabric``. ``trace``: a list that receives a :class:`PartEvent` for every part
    of the traced rank (``layout.traced_rank``) of the first replica, or ``None``."""

    def __init__(self, schedule: Schedule, chunk: ChunkModel, layout: Layout, comm, fabric: Fabric, group: int,
                 replicas: list[int], sm_slowdown: float, trace: list | None = None):
        self.chunk, self.layout, self.comm, self.fabric = chunk, layout, comm, fabric
        self.group = group
        self.replicas = np.asarray(replicas)
        pp, n = schedule.pp, len(replicas)
        self.num_stages = schedule.num_stages
        self.clock = {r: np.zeros(n) for r in range(pp)}
        self.stats = {r: GroupStats(np.zeros(n), np.zeros(n), np.zeros(n)) for r in range(pp)}
        self.load = {r: np.array([comm.load_factor(r, int(d)) for d in replicas]) for r in range(pp)}
        self.arrivals: dict[tuple, np.ndarray] = {}   # key -> when each replica has it
        self.records: list[OpRecord] = []             # ops of the first replica, as they ran there
        self.trace = trace
        self.late_s = 0.0                             # see deliver()
        self._plans: dict[tuple, tuple] = {}
        self._seq = {r: 0 for r in range(pp)}
        self._slowdown = sm_slowdown

    # -- OpRunner ------------------------------------------------------------------------------
    def run(self, env: simpy.Environment, rank: int, op):
        S = self.num_stages
        start = self.clock[rank]
        for part in parts(op):
            for key in inputs_of(part, S):
                start = np.maximum(start, self.arrivals[key])
        plan, durations, comm_times = self._plan(rank, op)
        seq = self._seq[rank]
        self._seq[rank] += 1
        record = self.trace is not None and rank == self.layout.traced_rank
        t = run_op(plan, start, durations, comm_times, record)
        st = self.stats[rank]
        st.compute_s += t.compute_s
        st.comm_s += t.comm_s
        st.op_s += t.end - start
        self.clock[rank] = t.end
        for part in parts(op):
            for key in outputs_of(part, S):
                self.arrivals[key] = t.end          # until deliver() says when it arrived
        self.records.append(OpRecord.of(rank, op, float(start[0]), float(t.end[0])))
        if record:
            fb, text = isinstance(op, FBOp), str(op)
            self.trace.extend(PartEvent(seq, text, fb, *span) for span in t.parts)
        wait = float(t.end.min()) - env.now
        if wait > 0:
            yield env.timeout(wait)

    def deliver(self, env, src, dst, key):
        """Each replica's send starts at its own end time. Only an op without any all-to-all
        (nothing makes its replicas wait for each other) can end on some replica before the
        moment the last replica's input arrived; such a send starts late, by at most that gap,
        which ``late_s`` records (0 whenever replicas receive their inputs at the same time)."""
        return self._send(env, self.layout.gpus_of(src, self.replicas), self.layout.gpus_of(dst, self.replicas), key)

    def _send(self, env, srcs: np.ndarray, dsts: np.ndarray, key):
        fabric, nbytes = self.fabric, self.chunk.activation_bytes()
        sent = self.arrivals[key]
        arrived = np.empty_like(sent)
        done = env.event()
        pending = [len(sent)]

        def landed(i: int):
            arrived[i] = env.now
            pending[0] -= 1
            if not pending[0]:
                done.succeed()

        for i in np.argsort(sent, kind="stable"):
            wait = float(sent[i]) - env.now
            if wait > 0:
                yield env.timeout(wait)
            elif wait < -1e-12:                     # more than float rounding of the clock
                self.late_s = max(self.late_s, -wait)
            fabric.transfer(int(srcs[i]), int(dsts[i]), nbytes, on_done=lambda i=i: landed(i))
        yield done
        self.arrivals[key] = arrived

    # -- parts -------------------------------------------------------------------------------
    def _plan(self, rank: int, op) -> tuple:
        """(plan, compute durations, all-to-all seconds) of an op of this shape on ``rank``."""
        shape = ("FB", op.f.stage, op.b.stage) if isinstance(op, FBOp) else (op.kind, op.stage)
        cached = self._plans.get((rank, shape))
        if cached is None:
            if isinstance(op, FBOp):
                (f_layers, f_head), (b_layers, b_head) = self._layers(op.f), self._layers(op.b)
                plan = compile_plan(*overlapped_parts(f_layers, b_layers, f_head, b_head))
            else:
                plan = compile_plan(*as_streams(self._plain_parts(op)))
            cached = self._plans[(rank, shape)] = (
                plan, compute_durations(plan, self.load[rank], self._slowdown),
                [self.comm.time(p.shape, rank, self.group) for p in plan.comm])
        return cached

    def _layers(self, op: Op) -> tuple[list[LayerCost], float]:
        """The layers of the op's stage and its output-head seconds (last stage only)."""
        return self.chunk.stage_work(op.stage)

    def _plain_parts(self, op: Op) -> list[Part]:
        layers, head = self._layers(op)
        if op.kind == "F":
            return forward_parts(layers, head)
        if op.kind == "W":
            return weight_parts(layers, head)
        return backward_parts(layers, head, with_w=(op.kind == "B"))
