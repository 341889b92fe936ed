"""One op's parts on a GPU's compute and communication streams, for a group of GPUs in lockstep.

An op (F, I, B, W or an overlapped F&B unit) is a few dozen parts with fixed dependencies; the
GPUs of one EP group run the same op at about the same time and meet at every all-to-all. So the
parts of an op are not SimPy events: :func:`run_op` schedules them with numpy vectors (one entry
per GPU of the group), by these rules, which are the whole stream model:

1. Each stream runs its parts in list order. A part becomes ready when its stream is free and
   every part in its ``after`` list has ended. Communication parts run on two streams, their
   ``lane``: 0, the op's own (TP and CP collectives, all-to-alls), and 1, the data-parallel one
   (ZeRO-3's per-layer weight gathers and gradient scatters, which FSDP issues on streams of their
   own beside the layers, :func:`as_streams`).
2. A compute part lasts ``seconds x (1 + routed_share x (load - 1))``, ``load`` being the tokens
   its GPU's experts get relative to the group mean (1 when routing is balanced). If one of its
   GPU's communication parts is running when it starts (launched at or before that instant and
   ending after it), its SMs and HBM are shared and it lasts ``beside`` times longer, for its whole
   duration: its kernels costed on the SMs the communication kernel leaves and, memory-bound, at
   the HBM bandwidth its copies leave (:meth:`~sim.training.costs.chunk.LayerCost.beside_ratio`);
   ``SMs / (SMs - comm_sms)`` for a part whose kernels are not known.
3. A communication part occupies its SMs from the moment it is ready (its launch). Its all-to-all
   is a collective: it starts when the last GPU of the group has launched it (the barrier) and
   ends ``comm_time`` seconds later on every GPU of the group. A GPU that launched it earlier
   waits for its peers meanwhile (``peer_wait_s``: the barrier less its own launch), holding its
   SMs: a slow or overloaded GPU delays exactly the collectives of its own group.
4. The op ends on a GPU when all of its streams have finished.

Parts are visited once, in an order fixed per op (:func:`compile_plan`): a ready communication
part before a ready compute part, so that every communication part launched at or before a
compute part's start is known when rule 2 is applied. The cost of an op is therefore a few numpy
operations per part, whatever the group size (a group of one GPU, a representative pipeline, is
walked on Python floats, which is cheaper still); SimPy (the engine) sees one event per op.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

COMPUTE, COMM = 0, 1
DP_COMM = 2                 # a part span's stream for a data-parallel (lane 1) communication part


@dataclass
class Part:
    stream: int
    name: str                 # e.g. "ATTN(F)", "DISPATCH(F)"
    seconds: float = 0.0      # compute: seconds at full SMs and balanced load; comm: unused
    shape: str = ""           # comm: "dispatch" or "combine"
    routed_share: float = 0.0  # compute: fraction of ``seconds`` that scales with the expert load
    after: list = field(default_factory=list)  # (stream, index) pairs this part waits for
    recompute: bool = False    # compute: recomputation of forward work (the memory policy's)
    overlap: str = ""          # comm: "next" / "prev": runs beside the compute part after / before it (as_streams)
    beside: float = 0.0        # compute: how much longer it runs beside a communication kernel (0: the run's ratio)
    lane: int = 0              # comm: 0 the op's communication stream, 1 the data-parallel one (ZeRO-3's)
    tag: str = ""              # a lane-1 part: the name the part that needs it gives (as_streams)
    needs: tuple = ()          # the tags of the lane-1 parts this part waits for (as_streams)


def as_streams(chain: list[Part]) -> tuple[list[Part], list[Part]]:
    """A plain op's parts, run one after the other, as (compute, communication) streams in
    which every part waits for the one before it in ``chain``; except that a compute part's block
    (the ``overlap="next"`` communication parts right before it and the ``overlap="prev"`` ones right
    after it: TP-communication overlap's all-gather feeding a GEMM and reduce-scatter draining it)
    starts together, each part waiting for what the compute part waits for, and the part after the
    block waits for every part of it. A data-parallel part (``lane`` 1) is issued where it stands:
    it waits for what the part after it waits for, and nothing waits for it but the parts that name
    its ``tag`` in their ``needs`` (ZeRO-3's gather of a layer's weights, issued a layer ahead, and
    the layer that needs them) and the op's end."""
    streams: tuple[list[Part], list[Part]] = ([], [])
    prev: list = []
    tagged: dict = {}
    i = 0
    while i < len(chain):
        if chain[i].lane:
            part = chain[i]
            streams[COMM].append(_copy(part, list(prev)))
            if part.tag:
                tagged[part.tag] = (COMM, len(streams[COMM]) - 1)
            i += 1
            continue
        j = i
        while j < len(chain) and chain[j].overlap == "next":
            j += 1
        k = j + 1
        if j < len(chain) and chain[j].stream == COMPUTE:
            while k < len(chain) and chain[k].overlap == "prev":
                k += 1
            block = chain[i:k]
        else:
            block = [chain[i]]
        ends = []
        for part in block:
            own = streams[part.stream]
            own.append(_copy(part, list(prev) + [tagged[t] for t in part.needs]))
            ends.append((part.stream, len(own) - 1))
        prev = ends
        i += len(block)
    return streams


def _copy(part: Part, after: list) -> Part:
    """``part`` waiting for ``after`` (its tags resolved: a copy without ``needs``)."""
    return replace(part, after=after, needs=())


@dataclass
class OpPlan:
    """An op's two streams and the order :func:`run_op` visits their parts in."""

    comp: list[Part]
    comm: list[Part]
    order: list[tuple[int, int]]


def compile_plan(comp: list[Part], comm: list[Part]) -> OpPlan:
    """Fix the visiting order: repeatedly take the next communication part if it is ready, else
    the next compute part if it is ready. Raises ``ValueError`` on a dependency cycle."""
    done: set = set()
    order: list[tuple[int, int]] = []
    i = j = 0
    while i < len(comp) or j < len(comm):
        if j < len(comm) and all(d in done for d in comm[j].after):
            key, j = (COMM, j), j + 1
        elif i < len(comp) and all(d in done for d in comp[i].after):
            key, i = (COMPUTE, i), i + 1
        else:
            raise ValueError(f"parts wait for each other: compute part {i}, communication part {j}")
        order.append(key)
        done.add(key)
    return OpPlan(comp, comm, order)


class PartSpan(NamedTuple):
    """One part as it ran on the first GPU of a group (seconds)."""

    stream: int                # COMPUTE, COMM or DP_COMM (a communication part of lane 1)
    name: str
    start: float
    end: float
    stretch: float = 1.0       # compute: how much longer than alone it ran (beside a communication kernel)
    peer_wait: float = 0.0     # comm: seconds from its launch to the group's last launch (waiting for peers)


@dataclass
class OpTiming:
    """What one op did on each GPU of the group (seconds, vectors over the group)."""

    end: np.ndarray
    compute_s: np.ndarray      # compute parts as run (stretched when sharing SMs), recomputation included
    comm_s: np.ndarray         # communication parts, launch to end (barrier wait included)
    parts: list[PartSpan]      # of the first GPU of the group, when recorded
    recompute_s: np.ndarray    # the recomputation parts among compute_s
    peer_wait_s: np.ndarray    # the barrier waits among comm_s: launch to the group's last launch


def compute_durations(plan: OpPlan, load: np.ndarray, slowdown: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """(alone, beside a communication kernel) duration vectors of each compute part for GPUs with
    expert ``load``: beside, ``x part.beside`` (its kernels costed on the SMs and HBM bandwidth the
    communication kernel leaves) or, where the part does not know its own, ``x slowdown``."""
    out = []
    for part in plan.comp:
        d = part.seconds * (1 + part.routed_share * (load - 1))
        out.append((d, d * (part.beside or slowdown)))
    return out


class OneTiming(NamedTuple):
    """:class:`OpTiming` of a group of one GPU, on Python floats (:func:`run_op_one`)."""

    end: float
    compute_s: float
    comm_s: float
    parts: list[PartSpan]
    recompute_s: float
    peer_wait_s: float = 0.0   # a group of one GPU never waits for a peer


def run_op(plan: OpPlan, start: np.ndarray, durations: list, comm_times: list[float],
           record: bool = False) -> OpTiming:
    """Run ``plan`` on a group of GPUs that are free from ``start`` (a vector), with
    ``durations`` from :func:`compute_durations` and the all-to-all seconds of each
    communication part in ``comm_times``."""
    return _charged(walk_op(plan, start, durations, record), comm_times)


def run_op_one(plan: OpPlan, start: float, durations: list, comm_times: list[float],
               record: bool = False) -> OneTiming:
    """:func:`run_op` for a group of one GPU free from ``start`` (a Python float): the same
    figures to the last bit, as floats (a representative pipeline runs every op through it)."""
    return _charged(_walk_one(plan, start, durations, record), comm_times)


def _charged(walk, comm_times: list[float]):
    """What the walk ``walk`` returns, each communication part answered with its seconds in
    ``comm_times`` from the moment it starts."""
    try:
        k, at = next(walk)
        while True:
            k, at = walk.send(at + comm_times[k])
    except StopIteration as stop:
        return stop.value


def walk_op(plan: OpPlan, start: np.ndarray, durations: list, record: bool = False):
    """:func:`run_op` as a generator that asks for each communication part's end: it yields
    ``(k, at)`` (communication part ``k`` starts at ``at``, when the last GPU of the group has
    launched it) and must be sent the time it ends; it returns the :class:`OpTiming`. Live
    communication (:mod:`sim.training.runner`) answers with the time its flows land on the fabric.
    A group of one GPU (a representative pipeline) is walked on Python floats (:func:`_walk_one`)."""
    if start.size == 1:
        t = yield from _walk_one(plan, float(start[0]), durations, record)
        return OpTiming(np.array([t.end]), np.array([t.compute_s]), np.array([t.comm_s]), t.parts,
                        np.array([t.recompute_s]), np.zeros(1))
    ends: tuple[list, list] = ([None] * len(plan.comp), [None] * len(plan.comm))
    free = [start, start, start]                    # compute, communication lane 0, lane 1
    launched: tuple[list, list] = ([], [])          # (launch vector, end) of communication parts, per lane
    compute_s = np.zeros_like(start)
    recompute_s = np.zeros_like(start)
    comm_s = np.zeros_like(start)
    peer_wait_s = np.zeros_like(start)
    parts = []
    for stream, k in plan.order:
        part = plan.comm[k] if stream else plan.comp[k]
        slot = stream + part.lane if stream else COMPUTE
        ready = free[slot]
        for s, j in part.after:
            ready = np.maximum(ready, ends[s][j])
        if stream == COMPUTE:
            full, shared = durations[k]
            busy = None
            earliest = ready.min()
            for lane in launched:
                for launch, end in reversed(lane):
                    if end <= earliest:
                        break       # a lane's earlier parts ended even sooner
                    hit = (launch <= ready) & (ready < end)
                    busy = hit if busy is None else busy | hit
            d = full if busy is None else np.where(busy, shared, full)
            end = ready + d
            compute_s = compute_s + d
            if part.recompute:
                recompute_s = recompute_s + d
        else:
            barrier = float(ready.max())
            finish = yield k, barrier
            launched[part.lane].append((ready, finish))
            comm_s = comm_s + (finish - ready)
            peer_wait_s = peer_wait_s + (barrier - ready)
            end = np.full_like(ready, finish)
        ends[stream][k] = end
        free[slot] = end
        if record:
            stretch = float(d[0] / full[0]) if stream == COMPUTE and full[0] > 0 else 1.0
            wait = barrier - float(ready[0]) if stream == COMM else 0.0
            parts.append(PartSpan(slot, part.name, float(ready[0]), float(end[0]), stretch, wait))
    return OpTiming(np.maximum(np.maximum(free[COMPUTE], free[COMM]), free[DP_COMM]), compute_s, comm_s, parts,
                    recompute_s, peer_wait_s)


def _walk_one(plan: OpPlan, start: float, durations: list, record: bool):
    """:func:`walk_op` for one GPU, on Python floats instead of one-element vectors: the same
    operations in the same order (so the same results to the last bit), a few times cheaper
    than numpy's per-call cost on one element. A compute part shares its SMs when any launched
    communication part covers its start."""
    ends: tuple[list, list] = ([0.0] * len(plan.comp), [0.0] * len(plan.comm))
    free = [start, start, start]
    launched: tuple[list, list] = ([], [])
    compute_s = recompute_s = comm_s = 0.0
    parts = []
    for stream, k in plan.order:
        part = plan.comm[k] if stream else plan.comp[k]
        slot = stream + part.lane if stream else COMPUTE
        ready = free[slot]
        for s, j in part.after:
            ready = max(ready, ends[s][j])
        stretch = 1.0
        if stream == COMPUTE:
            full, shared = durations[k]
            d = full.item()
            if _running(launched, ready):
                d = shared.item()
                stretch = d / full.item() if full.item() > 0 else 1.0
            end = ready + d
            compute_s = compute_s + d
            if part.recompute:
                recompute_s = recompute_s + d
        else:
            end = yield k, ready
            launched[part.lane].append((ready, end))
            comm_s = comm_s + (end - ready)
        ends[stream][k] = end
        free[slot] = end
        if record:
            parts.append(PartSpan(slot, part.name, ready, end, stretch))
    return OneTiming(max(free[COMPUTE], free[COMM], free[DP_COMM]), compute_s, comm_s, parts, recompute_s)


def _running(launched: tuple[list, list], at: float) -> bool:
    """Whether a communication part of either lane (``(launch, end)`` pairs in launch order, each
    lane's ends never decreasing: its parts run one after the other) runs at ``at``."""
    for lane in launched:
        for launch, end in reversed(lane):
            if end <= at:
                break               # a lane's earlier parts ended even sooner
            if launch <= at:
                return True
    return False


__all__ = ["COMM", "COMPUTE", "DP_COMM", "OneTiming", "OpPlan", "OpTiming", "Part", "PartSpan", "as_streams",
           "compile_plan", "compute_durations", "run_op", "run_op_one", "walk_op"]
