"""sim.schedules.timing: the engine's rules without SimPy, checked against the engine op by op
(fixed costs, with and without send delays), a hand-worked case, and deadlock."""
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine import ZeroCommRunner, run_schedule
from sim.schedules import CHUNKED, STANDALONE, Schedule, make_schedule
from sim.schedules.ops import Op
from sim.schedules.timing import exchange_inputs, inputs_of, makespan, outputs_of, rank_ends, reader_of


class DelayRunner(ZeroCommRunner):
    """Fixed costs; a hand-over between ranks takes ``delay(src, dst)``."""

    def __init__(self, S, F, I, W, delay):
        super().__init__(S, F, I, W)
        self.delay = delay

    def deliver(self, env, src, dst, key):
        def transfer():
            yield env.timeout(self.delay(src, dst))
        return transfer()


def _args(name):
    return {"chunks": 2} if name in CHUNKED else {}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([n for n in STANDALONE]), st.integers(2, 5), st.integers(1, 5),
       st.lists(st.floats(0.1, 5), min_size=3, max_size=3), st.floats(0, 2), st.booleans())
def test_every_op_starts_and_ends_as_in_the_engine(name, P, k, costs, send, per_pair):
    """Every op's start and end equal the engine's (a rank runs its list in order, an op waits for
    its inputs, a hand-over between ranks takes the send time), to float rounding."""
    if name in ("dualpipe", "dualpipev", "chimera"):
        P = 2 * (P // 2)                            # an even number of ranks
    M = 2 * P * k if name in ("dualpipe", "dualpipev", "chimera") else P * k
    sched = make_schedule(name, P, M, **_args(name))
    S = sched.num_stages
    F, I, W = ([c * (1 + 0.1 * s) for s in range(S)] for c in costs)
    delay = (lambda a, b: send * (1 + abs(a - b))) if per_pair else (lambda a, b: send)
    runner = DelayRunner(S, F, I, W, delay)
    engine = run_schedule(sched, runner, simpy.Environment())
    timed = []
    ends = rank_ends(sched, lambda rank, op: runner.cost(op), delay if per_pair else send, timed)
    want = {(r.rank, r.kind, r.mb, r.stage, r.b_mb): (r.start, r.end) for r in engine.records}
    got = {}
    for rank, op, start, end in timed:
        key = (rank, op.kind, op.f.mb if op.kind == "FB" else op.mb, op.f.stage if op.kind == "FB" else op.stage,
               op.b.mb if op.kind == "FB" else -1)
        got[key] = (start, end)
    assert got.keys() == want.keys()
    for key, (start, end) in want.items():
        assert got[key][0] == pytest.approx(start, abs=1e-9) and got[key][1] == pytest.approx(end, abs=1e-9)
    assert max(ends.values()) == pytest.approx(engine.makespan, abs=1e-9)


def test_one_f_one_b_by_hand():
    """1F1B P=2, M=2, F=1, B=2, send 0.5: rank 0 F0 0-1, F1 1-2; rank 1 F0 1.5-2.5, B0 2.5-4.5,
    F1 4.5-5.5 (its input since 2.5), B1 5.5-7.5; rank 0 B0 5-7 (gradient 4.5 + 0.5), B1 8-10."""
    sched = make_schedule("1f1b", 2, 2)
    cost = {"F": 1.0, "B": 2.0}
    assert rank_ends(sched, lambda rank, op: cost[op.kind], 0.5) == {0: 10.0, 1: 7.5}
    assert makespan(sched, lambda rank, op: cost[op.kind], 0.5) == 10.0


def test_a_deadlock_is_none():
    """Rank 0 waits for the backward of stage 1 before its forward: nothing can move."""
    sched = make_schedule("1f1b", 2, 1)
    bad = Schedule("bad", 2, 2, 1, {0: [Op("B", 0, 0), Op("F", 0, 0)], 1: list(sched.ranks[1])}, sched.placement)
    assert rank_ends(bad, lambda rank, op: 1.0) is None
    assert makespan(bad, lambda rank, op: 1.0) is None


def test_keys_and_readers():
    """The keys an op waits for and publishes, and which rank reads each (V placement, P = 2)."""
    sched = make_schedule("zbv", 2, 2)
    assert inputs_of(Op("I", 0, 1), 4) == [("F", 0, 1), ("G", 0, 2)]
    assert inputs_of(Op("B", 0, 3), 4) == [("F", 0, 3)]
    assert outputs_of(Op("I", 0, 1), 4) == [("I", 0, 1), ("G", 0, 1)]
    assert outputs_of(Op("B", 0, 0), 4) == []
    assert reader_of(sched, ("F", 0, 1)) == 1        # stage 2 is on rank 1 (V: 0 1 | 1 0)
    assert reader_of(sched, ("F", 0, 3)) == 0        # the last stage's own activation
    assert reader_of(sched, ("G", 0, 2)) == 1        # stage 1's
    assert reader_of(sched, ("I", 0, 2)) == 1


def test_no_ranks_take_no_time():
    sched = make_schedule("1f1b", 1, 1)
    empty = Schedule("empty", 1, 1, 1, {}, sched.placement)
    assert makespan(empty, lambda rank, op: 1.0) == 0.0


def test_exchange_inputs_by_hand_once_per_schedule():
    """Interleaved 1F1B, P=2, M=2, two chunks: rank 1 (stages 1 and 3) exchanges once for each
    forward of the last stage and the backward after it (positions 3 and 5 joined): the forward's
    exchange receives its activation only (the backward takes the forward's own output), a joined
    position receives nothing, every other op its own inputs. Kept on the schedule: asked again,
    the same object; a copy (dataclasses.replace) starts without it. Rank 0 batches nothing."""
    import dataclasses
    s = make_schedule("interleaved-1f1b", 2, 2, 2)
    got = exchange_inputs(s)
    assert got == {1: [[("F", 0, 0)], [("F", 1, 0)], [("F", 0, 2)], [], [("F", 1, 2)], [],
                       [("F", 0, 1), ("G", 0, 2)], [("F", 1, 1), ("G", 1, 2)]]}
    assert exchange_inputs(s) is got
    copy = dataclasses.replace(s, ranks={r: list(ops) for r, ops in s.ranks.items()})
    assert copy.memo == {} and exchange_inputs(copy) == got and exchange_inputs(copy) is not got
