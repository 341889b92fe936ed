"""The planner's screen: a candidate's step on the analytical network, timed without SimPy, as a
lower bound on its step on the max-min fabric.

Every op keeps the cost the step's runner charges it alone
(:meth:`~sim.training.runner.GroupRunner.op_seconds`: its compute, its TP and CP collectives and
its all-to-alls, overlapped as its plan says), with each all-to-all's time alone on its route, the
analytical network's (:mod:`sim.network.alone`, the closed form); each pipeline send takes its
kernel's launch plus its bytes alone on its route; the schedule is timed by the engine's rules
(:func:`~sim.schedules.timing.rank_ends`). After the last op, which ends at ``end*`` on rank
``r*``: the reduce-scatter of the gradients of the stages that op completes (an all-reduce under
ZeRO-0), ``reduce*``; under the global synchronisation the norm all-reduce, then every rank's
optimizer step, ``r*``'s followed by its all-gather of the updated weights (ZeRO-1 and 2),
``gather*``; under ``bypass``, ``r*``'s own. The collectives alone, from their closed forms
(:func:`~sim.training.dpsync.collective_alone_s`); the other ranks' reductions counted as 0::

    screen = end* + reduce* + norm + max(optimizer_r* + gather*, max_r optimizer_r)   (global)
    screen = end* + reduce* + optimizer_r* + gather*                                 (bypass)

Why it is a lower bound: a transfer alone lands no later than beside others (the max-min fabric's
rate is at most its route's least bandwidth), the all-to-alls and sends are chains of transfers,
and the engine's times only grow with its ops' durations and its sends' delays (it waits for
inputs, exposed sends and the data-parallel collectives, which the screen leaves out or takes
alone). That holds when every replica of a pipeline runs alike: not under skewed routing or
faults (:func:`screen_blocker`), where the planner simulates without a screen.
``tests/test_plan_screen.py`` checks it under every candidate of a small plan.
"""
from __future__ import annotations

import simpy

from .network import transfers_on
from .schedules.timing import rank_ends
from .training.comm.alltoall import CommModel
from .training.dpsync import collective_alone_s, norm_allreduce_s, optimizer_seconds, reduced_count, stage_param_counts
from .training.model.params import ParamCount
from .training.model.specs import RunSpec
from .training.runner import last_weight_gradients
from .training.scenario import Scenario
from .training.step import MoEStep


def screen_blocker(run: RunSpec) -> str:
    """Why the screen would not bound ``run``'s step ("" when it does): its replicas differ."""
    if run.routing_skew > 0:
        return f"routing skew {run.routing_skew:g} (each replica's experts get their own load)"
    if run.faults is not None and run.faults.any:
        return "faults (slow GPUs, kernel jitter or degraded links)"
    return ""


def screen_step_s(run: RunSpec) -> float:
    """The screen of the module for ``run`` (seconds); ``run``'s network is replaced by the
    analytical one. Refused (``ValueError``) where :func:`screen_blocker` names a reason."""
    blocker = screen_blocker(run)
    if blocker:
        raise ValueError(f"the screen does not bound a step with {blocker}")
    sc = Scenario(run.with_(network="analytical"))
    comm = CommModel(sc.run, sc.model, sc.links, sc.layout, sc.collectives, "stage", 1, sc.kernels, alone=True)
    step = MoEStep(sc, mode="representative", comm=comm)
    runner = step.runners(sc.step_fabric(simpy.Environment()))[0]
    zero3 = (run.zero_stage == 3 and run.reshard_after_forward,) * 2
    transfers, launch, nbytes = transfers_on(sc.links), sc.kernels.nccl_launch_s, sc.chunk.activation_bytes()

    def send_s(src: int, dst: int) -> float:
        latency, bandwidth = transfers.route(sc.layout.gpu(src, 0), sc.layout.gpu(dst, 0))
        return launch + latency + nbytes / bandwidth

    seconds: dict[tuple, float] = {}

    def duration(rank: int, op) -> float:           # one figure per op shape on a rank
        key = (rank, op.kind, op.f.stage, op.b.stage) if op.kind == "FB" else (rank, op.kind, op.stage)
        hit = seconds.get(key)
        if hit is None:
            hit = seconds[key] = runner.op_seconds(rank, op, zero3)
        return hit

    ends = rank_ends(sc.schedule, duration, send_s)
    if ends is None:                                     # validated schedules do not deadlock
        raise RuntimeError(f"schedule {run.schedule!r} deadlocks in the screen's timing")
    return max(ends.values()) + tail_s(sc, last_rank(ends))


def last_rank(ends: dict[int, float]) -> int:
    """The rank whose last op ends last (the lowest such rank on a tie)."""
    return max(ends, key=lambda r: (ends[r], -r))


def tail_s(sc: Scenario, last: int) -> float:
    """Seconds a step lasts at least after its last op, which ends on rank ``last``: that rank's
    gradients of the stages its last op completes reduce-scattered (all-reduced under ZeRO-0)
    alone, then (global synchronisation) the norm all-reduce and every rank's optimizer step,
    that rank's followed by its all-gather of updated weights alone (ZeRO-1 and 2); under
    ``bypass``, that rank's own reduction, optimizer step and all-gather (module docstring)."""
    run = sc.run
    counts = stage_param_counts(sc)
    optimizer = {rank: optimizer_seconds(sc, sum(c.values(), ParamCount(0.0, 0.0))) for rank, c in counts.items()}
    done = last_weight_gradients(sc.schedule.ranks[last]).get(len(sc.schedule.ranks[last]) - 1, [])
    reduce = 0.0
    for stage in done:
        count = reduced_count(sc, stage, counts[last][stage])
        seconds = collective_alone_s(sc, last, count, run.grad_bytes, gather=False)
        if run.zero_stage == 0:
            seconds += collective_alone_s(sc, last, count, run.grad_bytes, gather=True)
        reduce = max(reduce, seconds)
    total = sum(counts[last].values(), ParamCount(0.0, 0.0))
    gather = collective_alone_s(sc, last, total, run.gathered_weight_bytes, gather=True) if run.zero_stage in (1, 2) \
        else 0.0
    if run.optimizer_sync == "bypass":
        return reduce + optimizer[last] + gather
    return reduce + norm_allreduce_s(sc) + max(optimizer[last] + gather, max(optimizer.values()))


__all__ = ["last_rank", "screen_blocker", "screen_step_s", "tail_s"]
