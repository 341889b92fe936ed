"""The engine's dependency rules under delayed delivery: inputs that arrive at different times.

With instant hand-over (``ZeroCommRunner``) a rule that waits for the wrong input is often
invisible, because both inputs are there at once. Here every cross-rank hand-over takes its own
time, so each op's start shows which input it waited for: a case worked by hand, and every
schedule against an independent evaluator written from the rules (not from the engine's code).
"""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine import ZeroCommRunner, run_schedule
from sim.schedules.base import Placement, Schedule
from sim.schedules.ops import FBOp, Op
from sim.schedules.registry import make_schedule


class DelayedRunner(ZeroCommRunner):
    """Fixed costs; a hand-over of key (kind, mb, stage) takes ``delay(key)``."""

    def __init__(self, num_stages, delay, **costs):
        super().__init__(num_stages, **costs)
        self.delay = delay

    def deliver(self, env, src, dst, key):
        return _wait(env, self.delay(key))


def _wait(env, seconds):
    yield env.timeout(seconds)


def two_stages(ranks: dict) -> Schedule:
    return Schedule("hand", 2, 2, 1, ranks, Placement("linear", 2, 2, 1))


def records(result) -> dict:
    return {(r.rank, r.kind, r.mb, r.stage, r.b_mb, r.b_stage): (r.start, r.end) for r in result.records}


def test_1f1b_two_stages_worked_by_hand():
    """P=2, M=1, F=1, I=W=1 (B=2); an activation takes 0.5 to cross, a gradient 0.25.
    rank 0: F0@0 [0, 1]; activation arrives at 1.5. rank 1: F0@1 [1.5, 2.5], B0@1 [2.5, 4.5];
    gradient arrives at 4.75. rank 0: B0@0 [4.75, 6.75]."""
    sched = two_stages({0: [Op("F", 0, 0), Op("B", 0, 0)], 1: [Op("F", 0, 1), Op("B", 0, 1)]})
    result = run_schedule(sched, DelayedRunner(2, lambda key: {"F": 0.5, "G": 0.25}[key[0]]))
    assert records(result) == {(0, "F", 0, 0, -1, -1): (0.0, 1.0), (1, "F", 0, 1, -1, -1): (1.5, 2.5),
                               (1, "B", 0, 1, -1, -1): (2.5, 4.5), (0, "B", 0, 0, -1, -1): (4.75, 6.75)}


def test_split_backward_waits_for_the_gradient_not_the_forward():
    """ZB-style split: I0@0 waits for the gradient of stage 1 (arrives at 4.75), W0@0 follows it."""
    sched = two_stages({0: [Op("F", 0, 0), Op("I", 0, 0), Op("W", 0, 0)],
                        1: [Op("F", 0, 1), Op("I", 0, 1), Op("W", 0, 1)]})
    result = run_schedule(sched, DelayedRunner(2, lambda key: {"F": 0.5, "G": 0.25}[key[0]]))
    got = records(result)
    # rank 1: F [1.5, 2.5], I [2.5, 3.5] sends the gradient (arrives 3.75), W [3.5, 4.5]
    assert got[(1, "I", 0, 1, -1, -1)] == (2.5, 3.5) and got[(1, "W", 0, 1, -1, -1)] == (3.5, 4.5)
    assert got[(0, "I", 0, 0, -1, -1)] == (3.75, 4.75) and got[(0, "W", 0, 0, -1, -1)] == (4.75, 5.75)


def evaluate(schedule: Schedule, delay, F=1.0, I=1.0, W=1.0) -> dict:
    """An independent evaluator of the rules in ``sim.engine``'s docstring: each rank runs its ops
    in order; an op starts when its rank is free and its inputs have arrived; outputs arrive at
    the op's end, plus ``delay(key)`` when they go to another rank."""
    S, rank_of = schedule.num_stages, schedule.placement.rank
    cost = {"F": F, "I": I, "W": W, "B": I + W}
    arrived: dict = {}
    free = {r: 0.0 for r in schedule.ranks}
    nxt = {r: 0 for r in schedule.ranks}
    out = {}

    def needs(op):
        if op.kind == "F":
            return [("F", op.mb, op.stage - 1)] if op.stage > 0 else []
        if op.kind == "W":
            return [("I", op.mb, op.stage)]
        grad = [("G", op.mb, op.stage + 1)] if op.stage < S - 1 else []
        return [("F", op.mb, op.stage)] + grad

    def made(rank, op, end):
        keys = []
        if op.kind == "F":
            dst = rank_of(op.mb, op.stage + 1) if op.stage < S - 1 else rank
            keys.append((("F", op.mb, op.stage), dst))
        if op.kind == "I":
            keys.append((("I", op.mb, op.stage), rank))
        if op.kind in ("I", "B") and op.stage > 0:
            keys.append((("G", op.mb, op.stage), rank_of(op.mb, op.stage - 1)))
        for key, dst in keys:
            arrived[key] = end + (delay(key) if dst != rank else 0.0)

    progress = True
    while progress:
        progress = False
        for r, ops in schedule.ranks.items():
            if nxt[r] == len(ops):
                continue
            op = ops[nxt[r]]
            halves = [op.f, op.b] if isinstance(op, FBOp) else [op]
            want = [k for h in halves for k in needs(h)]
            if not all(k in arrived for k in want):
                continue
            start = max([free[r]] + [arrived[k] for k in want])
            end = start + sum(cost[h.kind] for h in halves)
            for h in halves:
                made(r, h, end)
            ident = (r, "FB", op.f.mb, op.f.stage, op.b.mb, op.b.stage) if isinstance(op, FBOp) \
                else (r, op.kind, op.mb, op.stage, -1, -1)
            out[ident] = (start, end)
            free[r], nxt[r] = end, nxt[r] + 1
            progress = True
    assert all(nxt[r] == len(ops) for r, ops in schedule.ranks.items()), "evaluator deadlock"
    return out


SCHEDULES = [("1f1b", 4, 8), ("zb-h1", 4, 8), ("zb-h2", 4, 8), ("interleaved-1f1b", 4, 8), ("zbv", 4, 8),
             ("dualpipe", 4, 8), ("dualpipev", 4, 8), ("chimera", 4, 8), ("gpipe", 4, 8)]


@pytest.mark.parametrize("name,P,M", SCHEDULES)
@settings(max_examples=15, deadline=None, derandomize=True)
@given(f=st.sampled_from([0.0, 0.3, 1.7]), g=st.sampled_from([0.0, 0.45, 2.2]), spread=st.integers(0, 4))
def test_every_schedule_matches_the_independent_evaluator(name, P, M, f, g, spread):
    def delay(key):                         # distinct per micro-batch: inputs arrive at different times
        kind, mb, stage = key
        return (f if kind == "F" else g) * (1 + ((mb * 7 + stage * 3) % (spread + 1)) / 2)

    sched = make_schedule(name, P, M, 2 if name == "interleaved-1f1b" else None)
    got = records(run_schedule(sched, DelayedRunner(sched.num_stages, delay, F=1.0, I=1.3, W=0.6)))
    want = evaluate(sched, delay, F=1.0, I=1.3, W=0.6)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-9), (name, k)
