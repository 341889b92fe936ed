"""Turns a schedule op into parts on a GPU's compute and communication streams (an ``OpRunner``).

A plain op runs its parts one after the other, so its all-to-alls are exposed:

* ``F``: per layer ATTN(F), DISPATCH(F), MLP(F), COMBINE(F) (dense layers: no all-to-all);
* ``I`` / ``B``: per layer, last first: COMBINE(B), MLP(B) [, MLP(W)], DISPATCH(B), ATTN(B) [, ATTN(W)];
* ``W``: every layer's MLP(W) and ATTN(W).

An overlapped ``FB`` unit runs two streams at once, in the order of the DeepSeek-V3 report's
Figure 4, pairing forward layer j with backward layer j (counted from the end):
compute: ATTN(F) MLP(B) MLP(W) MLP(F) ATTN(B) ATTN(W); communication: COMBINE(B) DISPATCH(F)
DISPATCH(B) COMBINE(F). Each transfer waits for the compute part that produces its data and each
compute part for the transfer it consumes; each stream runs its parts in order. Whatever overlap
results comes out of these simulated streams.

While the communication stream of a GPU is busy, a compute part that starts gets only
``(SMs - comm_sms) / SMs`` of the GPU (its duration is stretched by the inverse).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from ..schedules.ops import FBOp, Op
from .chunk import LayerCost

COMPUTE, COMM = 0, 1


@dataclass
class RankStats:
    compute_s: float = 0.0     # compute parts, as run (stretched when sharing SMs)
    comm_s: float = 0.0        # all-to-all parts on the communication stream
    op_s: float = 0.0          # wall time inside ops
    ops: int = 0


@dataclass
class Part:
    stream: int
    name: str          # e.g. "ATTN(F)", "DISPATCH(F)"
    seconds: float     # compute seconds at full SMs; ignored for comm parts
    shape: str = ""    # comm: "dispatch" or "combine"
    after: list = field(default_factory=list)  # indices of parts this one waits for


def forward_parts(layers: list[LayerCost], head: float, load: float) -> list[Part]:
    parts: list[Part] = []
    for c in layers:
        parts.append(Part(COMPUTE, "ATTN(F)", c.attn_f))
        if c.moe:
            parts.append(Part(COMM, "DISPATCH(F)", 0.0, "dispatch"))
        parts.append(Part(COMPUTE, "MLP(F)", c.mlp_f * _scale(c, load)))
        if c.moe:
            parts.append(Part(COMM, "COMBINE(F)", 0.0, "combine"))
    if head:
        parts.append(Part(COMPUTE, "HEAD(F)", head))
    return parts


def backward_parts(layers: list[LayerCost], head: float, load: float, with_w: bool) -> list[Part]:
    parts: list[Part] = []
    if head:
        parts.append(Part(COMPUTE, "HEAD(B)", head * (2 if with_w else 1)))
    for c in reversed(layers):
        k = _scale(c, load)
        if c.moe:
            parts.append(Part(COMM, "COMBINE(B)", 0.0, "dispatch"))
        parts.append(Part(COMPUTE, "MLP(B)", c.mlp_i * k))
        if with_w:
            parts.append(Part(COMPUTE, "MLP(W)", c.mlp_w * k))
        if c.moe:
            parts.append(Part(COMM, "DISPATCH(B)", 0.0, "combine"))
        parts.append(Part(COMPUTE, "ATTN(B)", c.attn_i))
        if with_w:
            parts.append(Part(COMPUTE, "ATTN(W)", c.attn_w))
    return parts


def weight_parts(layers: list[LayerCost], head: float, load: float) -> list[Part]:
    parts = [Part(COMPUTE, "HEAD(W)", head)] if head else []
    for c in reversed(layers):
        parts.append(Part(COMPUTE, "MLP(W)", c.mlp_w * _scale(c, load)))
        parts.append(Part(COMPUTE, "ATTN(W)", c.attn_w))
    return parts


def overlapped_parts(f_layers: list[LayerCost], b_layers: list[LayerCost], f_head: float, b_head: float,
                     f_load: float, b_load: float) -> tuple[list[Part], list[Part]]:
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
        fk, bk = (_scale(f, f_load) if f else 1), (_scale(b, b_load) if b else 1)
        attn_f = disp_f = mlp_f = comb_b = mlp_b = disp_b = None
        if f:
            comp.append(Part(COMPUTE, "ATTN(F)", f.attn_f, after=[last_f] if last_f else []))
            attn_f = (COMPUTE, len(comp) - 1)
        if b and b.moe:
            comm.append(Part(COMM, "COMBINE(B)", 0.0, "dispatch", after=[last_b] if last_b else []))
            comb_b = (COMM, len(comm) - 1)
        if b:
            dep = comb_b or last_b
            comp.append(Part(COMPUTE, "MLP(B)", b.mlp_i * bk, after=[dep] if dep else []))
            mlp_b = (COMPUTE, len(comp) - 1)
            comp.append(Part(COMPUTE, "MLP(W)", b.mlp_w * bk))
        if f and f.moe:
            comm.append(Part(COMM, "DISPATCH(F)", 0.0, "dispatch", after=[attn_f]))
            disp_f = (COMM, len(comm) - 1)
        if b and b.moe:
            comm.append(Part(COMM, "DISPATCH(B)", 0.0, "combine", after=[mlp_b]))
            disp_b = (COMM, len(comm) - 1)
        if f:
            comp.append(Part(COMPUTE, "MLP(F)", f.mlp_f * fk, after=[disp_f or attn_f]))
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


def _scale(c: LayerCost, load: float) -> float:
    """MLP time multiplier when this GPU's experts get ``load`` x the balanced token count."""
    return 1 + c.routed_share * (load - 1)


class MoERunner:
    """The OpRunner of one pipeline (data-parallel replica ``replica``)."""

    def __init__(self, step, replica: int):
        self.step = step
        self.replica = replica
        self.stats = {r: RankStats() for r in range(step.schedule.pp)}
        self.comm_busy = {r: False for r in range(step.schedule.pp)}
        self.op_counter = {r: 0 for r in range(step.schedule.pp)}
        self.trace = step.trace_parts if replica == 0 else None

    def gpu(self, rank: int) -> int:
        return rank * self.step.run.dp + self.replica

    # -- OpRunner ------------------------------------------------------------------------------
    def run(self, env: simpy.Environment, rank: int, op):
        start = env.now
        seq = self.op_counter[rank]
        self.op_counter[rank] += 1
        st = self.stats[rank]
        load = self.step.load_factor(rank, self.replica)
        if isinstance(op, FBOp):
            (f_layers, f_head), (b_layers, b_head) = self._layers(op.f), self._layers(op.b)
            comp, comm = overlapped_parts(f_layers, b_layers, f_head, b_head, load, load)
            yield from self._two_streams(env, rank, seq, comp, comm, op)
        else:
            yield from self._chain(env, rank, seq, self._plain_parts(op, load), op)
        st.op_s += env.now - start
        st.ops += 1

    def deliver(self, env, src, dst, key):
        nbytes = self.step.chunk.activation_bytes()
        fabric = self.step.fabric
        a, b = self.gpu(src), self.gpu(dst)

        def transfer():
            yield fabric.transfer(a, b, nbytes)
        return transfer()

    # -- parts -------------------------------------------------------------------------------
    def _layers(self, op: Op) -> tuple[list[LayerCost], float]:
        """The layers of the op's stage and its output-head seconds (last stage only)."""
        chunk = self.step.chunk
        head = chunk.head_cost if op.stage == chunk.num_stages - 1 else 0.0
        return chunk.stage_layers[op.stage], head

    def _plain_parts(self, op: Op, load: float) -> list[Part]:
        layers, head = self._layers(op)
        if op.kind == "F":
            return forward_parts(layers, head, load)
        if op.kind == "W":
            return weight_parts(layers, head, load)
        return backward_parts(layers, head, load, with_w=(op.kind == "B"))

    def _comm(self, env, rank: int, seq: int, index: int, part: Part):
        """Generator: the communication kernel occupies its SMs from launch, waits for the rest of
        the EP group (full mode), then runs the collective. Returns the seconds charged."""
        step = self.step
        group = step.comm.group_of_replica(self.replica)
        self.comm_busy[rank] = True
        t0 = env.now
        if step.full:
            yield step.barrier(env_key=(rank, group, seq, index))
        yield env.timeout(step.comm.time(part.shape, rank, group))
        self.comm_busy[rank] = False
        return env.now - t0

    def _compute_seconds(self, rank: int, part: Part) -> float:
        if self.comm_busy[rank] and self.step.run.comm_sms:
            sms = self.step.gpu.sms
            return part.seconds * sms / (sms - self.step.run.comm_sms)
        return part.seconds

    def _run_part(self, env, rank: int, seq: int, index: int, part: Part, op):
        """Run one part on its stream and account for it (and trace it on the traced rank)."""
        t0 = env.now
        st = self.stats[rank]
        if part.stream == COMPUTE:
            dt = self._compute_seconds(rank, part)
            yield env.timeout(dt)
            st.compute_s += dt
        else:
            st.comm_s += yield from self._comm(env, rank, seq, index, part)
        if self.trace is not None and rank == self.step.trace_rank:
            self.trace.append((seq, str(op), part.stream, part.name, t0, env.now))

    def _chain(self, env, rank, seq, parts: list[Part], op):
        for i, part in enumerate(parts):
            yield from self._run_part(env, rank, seq, i, part, op)

    def _two_streams(self, env, rank, seq, comp: list[Part], comm: list[Part], op):
        done = ([env.event() for _ in comp], [env.event() for _ in comm])

        def stream(kind: int, parts: list[Part]):
            for i, part in enumerate(parts):
                for s, j in part.after:
                    ev = done[s][j]
                    if not ev.processed:
                        yield ev
                yield from self._run_part(env, rank, seq, i, part, op)
                done[kind][i].succeed()

        procs = [env.process(stream(COMPUTE, comp))]
        if comm:
            procs.append(env.process(stream(COMM, comm)))
        yield simpy.AllOf(env, procs)
