"""The event-driven engine: one SimPy process per rank runs that rank's ops in list order.

Each op waits for its inputs, then occupies its rank for as long as the :class:`OpRunner` says:

* ``F(mb, s)`` needs the activation of ``F(mb, s-1)`` delivered to this rank;
* ``I``/``B(mb, s)`` needs ``F(mb, s)`` and the input gradient of ``I``/``B(mb, s+1)`` delivered
  (the last stage only its own ``F``);
* ``W(mb, s)`` needs ``I(mb, s)``;
* an overlapped ``FB`` starts when both halves are ready; both halves' outputs appear at its end.

How long an op takes and how its outputs travel to the next rank is the runner's business, not the
engine's: :class:`ZeroCommRunner` charges fixed F/I/W costs and delivers instantly; a network-aware
runner (MoE chunk model) turns an op into parts on compute and communication streams and a
pipeline send into a transfer on the fabric, without touching schedules or this module.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Generator, NamedTuple, Optional, Protocol, Sequence, Union

import simpy

from .checks import InputError, number
from .limits import check_deadline
from .schedules.base import Schedule
from .schedules.ops import AnyOp, FBOp, Op, parts
from .schedules.timing import exchange_inputs, inputs_of, outputs_of

Key = tuple  # ("F" | "G" | "I", mb, stage): activation, input gradient, deferred-weight token


class OpRunner(Protocol):
    """What the engine asks of a cost model."""

    def run(self, env: simpy.Environment, rank: int, op: AnyOp) -> Generator:
        """A SimPy generator that occupies ``rank`` for the op and returns when it ends."""

    def deliver(self, env: simpy.Environment, src: int, dst: int, key: Key) -> Optional[Union[simpy.Event, Generator]]:
        """``None`` for an instant hand-over, else an event that fires (or a generator that ends)
        when ``key`` has arrived at ``dst`` (e.g. a pipeline send over the fabric)."""


class DeadlockError(RuntimeError):
    """The schedule's dependencies cannot be met; the message names each stuck rank's op."""


Costs = Union[float, Sequence[float]]


def _per_stage(value: Costs, num_stages: int, name: str) -> tuple[float, ...]:
    vals = tuple(float(value) for _ in range(num_stages)) if isinstance(value, (int, float)) \
        else tuple(float(v) for v in value)
    if len(vals) != num_stages:
        raise InputError(f"cost {name}: got {len(vals)} per-stage values, the schedule has {num_stages} stages")
    for s, v in enumerate(vals):
        number(v, f"cost {name} at stage {s}", low=0, low_open=True, high=1e12)
    return vals


class ZeroCommRunner:
    """Fixed costs per op with instant hand-over: F, I, W per stage; B = I + W; FB = F + I + W.

    Costs are in arbitrary time units (seconds when they come from a compute model)."""

    def __init__(self, num_stages: int, F: Costs = 1.0, I: Costs = 1.0, W: Costs = 1.0):
        self.F = _per_stage(F, num_stages, "F")
        self.I = _per_stage(I, num_stages, "I")
        self.W = _per_stage(W, num_stages, "W")

    def cost(self, op: AnyOp) -> float:
        if isinstance(op, FBOp):
            return self.cost(op.f) + self.cost(op.b)
        if op.kind == "F":
            return self.F[op.stage]
        if op.kind == "I":
            return self.I[op.stage]
        if op.kind == "W":
            return self.W[op.stage]
        return self.I[op.stage] + self.W[op.stage]

    def run(self, env, rank, op):
        yield env.timeout(self.cost(op))

    def deliver(self, env, src, dst, key):
        return None


class OpRecord(NamedTuple):
    """One op as it ran: ``kind`` F, I, W, B or FB; ``b_mb``/``b_stage`` the backward half of an FB
    unit (-1 otherwise); ``start``/``end`` in the runner's time units."""

    rank: int
    kind: str
    mb: int
    stage: int
    b_mb: int
    b_stage: int
    start: float
    end: float

    @classmethod
    def of(cls, rank: int, op: AnyOp, start: float, end: float) -> "OpRecord":
        if isinstance(op, FBOp):
            return cls(rank, "FB", op.f.mb, op.f.stage, op.b.mb, op.b.stage, start, end)
        return cls(rank, op.kind, op.mb, op.stage, -1, -1, start, end)


@dataclass
class EngineResult:
    """Raw outcome of one run: the op records and the makespan (time units of the runner)."""

    schedule: Schedule
    records: list[OpRecord]
    makespan: float

    RECORD_COLUMNS = OpRecord._fields

    @classmethod
    def of(cls, schedule: Schedule, records: list[OpRecord]) -> "EngineResult":
        """The result of ``records``, its makespan the end of the last op (0 for none)."""
        return cls(schedule, records, max((rec.end for rec in records), default=0.0))


def run_schedule(schedule: Schedule, runner: OpRunner, env: Optional[simpy.Environment] = None,
                 blocking_sends: bool = False) -> EngineResult:
    """Run every rank's op list on ``runner``; raise :class:`DeadlockError` if any rank gets stuck.
    ``blocking_sends`` as :func:`start_schedule`'s."""
    env = env or simpy.Environment()
    finish = start_schedule(schedule, runner, env, blocking_sends)
    env.run()
    return finish()


def start_schedule(schedule: Schedule, runner: OpRunner, env: simpy.Environment, blocking_sends: bool = False,
                   processes: Optional[list] = None):
    """Start the rank processes of ``schedule`` in ``env`` (several pipelines can share one env);
    returns ``finish()``, to call after ``env.run()``, which gives the :class:`EngineResult`.
    ``processes``: a list that receives the rank processes (SimPy events that fire when each rank
    has run its last op), for a caller that waits for the schedule inside the simulation.

    ``blocking_sends``: pipeline sends as Megatron-LM exchanges them without ``overlap_p2p_comm``
    (``p2p_communication``: a batch of ``isend``/``irecv`` waited on before the next op): a rank
    starts its next op only once the sends of its last exchange have landed (its last sends land
    before it is done). Where the schedule batches several ops into one exchange
    (:attr:`~sim.schedules.base.Schedule.joined`: Megatron's interleaved 1F1B pairs each steady-state
    forward with the backward after it) their sends leave together after the last of them, and the
    first waits for all their inputs from other ranks (:func:`~sim.schedules.timing.inputs_of_exchange`). Off (the
    default), a send leaves when its op ends and the sender goes on at once. Either way, that a
    receiver must have posted the matching receive (NCCL's rendezvous, which Megatron's schedules
    pair up step by step) is not modelled."""
    S = schedule.num_stages
    rank_of = schedule.placement.rank
    events: dict[Key, simpy.Event] = {}
    records: list[OpRecord] = []
    position = {r: 0 for r in schedule.ranks}

    def event(key: Key) -> simpy.Event:
        ev = events.get(key)
        if ev is None:
            ev = events[key] = env.event()
        return ev

    def handover(src: int, dst: int, key: Key):
        transfer = None if src == dst else runner.deliver(env, src, dst, key)
        if transfer is None:
            event(key).succeed()
        elif isinstance(transfer, simpy.Event):
            transfer.callbacks.append(lambda _ev, arrived=event(key): arrived.succeed())
        else:
            env.process(_deliver_then(transfer, event(key)))

    def publish(rank: int, op: Op, sending: Optional[list]) -> None:
        for key in outputs_of(op, S):
            kind, mb, s = key
            if kind == "I" or (kind == "F" and s == S - 1):
                event(key).succeed()               # consumed on this rank only
            else:
                dst = rank_of(mb, s + 1 if kind == "F" else s - 1)
                handover(rank, dst, key)
                if sending is not None and dst != rank:
                    sending.append(event(key))

    def rank_process(rank: int, ops: list[AnyOp]):
        sending: list[simpy.Event] = []         # blocking sends: the previous exchange's, to wait for
        joined = schedule.joined.get(rank, frozenset()) if blocking_sends else frozenset()
        exchanges = exchange_inputs(schedule)[rank] if joined else None
        held: list[AnyOp] = []                  # ops whose sends wait for the exchange after a later op
        for i, op in enumerate(ops):
            check_deadline()
            position[rank] = i
            if sending:                         # blocking sends: the last exchange's have landed
                for ev in sending:
                    if not ev.processed:
                        yield ev
                sending = []
            if joined:                          # an exchange receives its ops' inputs all at once
                for key in exchanges[i]:
                    ev = event(key)
                    if not ev.processed:
                        yield ev
            else:
                for part in parts(op):
                    for key in inputs_of(part, S):
                        ev = event(key)
                        if not ev.processed:
                            yield ev
            start = env.now
            yield from runner.run(env, rank, op)
            records.append(OpRecord.of(rank, op, start, env.now))
            held.append(op)
            if i + 1 in joined:
                continue                        # its sends leave with the next op's
            for done in held:
                for part in parts(done):
                    publish(rank, part, sending if blocking_sends else None)
            held = []
        for ev in sending:                      # its last sends land before the rank is done
            if not ev.processed:
                yield ev
        position[rank] = len(ops)

    for rank, ops in sorted(schedule.ranks.items()):
        proc = env.process(rank_process(rank, ops))
        if processes is not None:
            processes.append(proc)

    def finish() -> EngineResult:
        stuck = {r: i for r, i in position.items() if i < len(schedule.ranks[r])}
        if stuck:
            detail = "; ".join(f"rank {r} waits at step {i} ({schedule.ranks[r][i]})" for r, i in sorted(stuck.items()))
            raise DeadlockError(f"schedule {schedule.name!r} deadlocks: {detail}")
        return EngineResult.of(schedule, records)
    return finish


def _deliver_then(transfer: Generator, done: simpy.Event):
    yield from transfer
    done.succeed()

