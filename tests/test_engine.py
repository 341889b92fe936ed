"""The SimPy engine against closed forms (docs/model.md, "The engine and its closed forms") and an independent evaluator."""
import json
from pathlib import Path

import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st
from reference import reference_times

from sim.engine import DeadlockError, ZeroCommRunner, run_schedule
from sim.metrics import summarize
from sim.pipeline import simulate_pipeline
from sim.schedules import Op, make_schedule, parse_op
from sim.schedules.ops import FBOp
from sim.schedules.base import Placement, Schedule

costs = st.sampled_from([0.5, 1.0, 2.0, 3.0])


def bubbles(run):
    return [r.idle for r in run.metrics.ranks]


def test_1f1b_rank0_p4_worked_example():
    """(P-1)(F+I+W) = 9 at unit costs; makespan (M+P-1)(F+I+W) = 33 for M=8."""
    run = simulate_pipeline("1f1b", 4, 8)
    assert run.metrics.makespan == 33
    assert bubbles(run)[0] == 9


@given(P=st.integers(1, 10), k=st.integers(1, 4), c=costs)
def test_gpipe_and_1f1b_closed_form(P, k, c):
    M = k * P
    for name in ("gpipe", "1f1b"):
        run = simulate_pipeline(name, P, M, F=c, I=c, W=c)
        assert bubbles(run) == pytest.approx([(P - 1) * 3 * c] * P)


@given(P=st.integers(1, 10), k=st.integers(1, 4), v=st.integers(2, 4), c=costs)
def test_interleaved_closed_form_per_chunk_costs(P, k, v, c):
    run = simulate_pipeline("interleaved-1f1b", P, k * P, v, F=c, I=c, W=c)
    assert bubbles(run) == pytest.approx([(P - 1) * 3 * c] * P)


@given(P=st.integers(1, 10), M=st.integers(1, 40), c=costs)
def test_zero_bubble_h1_h2_closed_forms(P, M, c):
    """Equal costs: ZB-H1 bubble (P-1)(F+I-W); ZB-H2 (P-1)(F+I-2W) = 0 inside each rank's span,
    plus the (P-1)F start-up skew, so makespan - busy = (P-1)F on every rank for both."""
    M = max(M, P)
    h1 = simulate_pipeline("zb-h1", P, M, F=c, I=c, W=c)
    assert bubbles(h1) == pytest.approx([(P - 1) * (c + c - c)] * P)
    if M < 2 * P - 1:
        return  # ZB-H2's parallelogram needs its 2P-1 warm-up forwards
    h2 = simulate_pipeline("zb-h2", P, M, F=c, I=c, W=c)
    assert bubbles(h2) == pytest.approx([(P - 1) * c] * P)
    # no idle inside any ZB-H2 rank's own span
    df = h2.result.records
    for r in range(P):
        ops = sorted((rec.start, rec.end) for rec in df if rec.rank == r)
        assert all(abs(a[1] - b[0]) < 1e-9 for a, b in zip(ops, ops[1:]))


@given(H=st.integers(1, 6), extra=st.integers(0, 10), c=costs)
def test_dualpipe_closed_form(H, extra, c):
    """(P/2-1)(FB + B - 3W) with FB = F+I+W, B = I+W, at equal costs: (P/2-1) * 2c."""
    P = 2 * H
    M = 2 * P + 2 * extra
    run = simulate_pipeline("dualpipe", P, M, F=c, I=c, W=c)
    assert bubbles(run) == pytest.approx([(P / 2 - 1) * (3 * c + 2 * c - 3 * c)] * P)


@given(P=st.integers(1, 10), extra=st.integers(0, 10), c=costs)
def test_dualpipev_closed_form(P, extra, c):
    run = simulate_pipeline("dualpipev", P, 2 * P + extra, F=c, I=c, W=c)
    assert bubbles(run) == pytest.approx([(P - 1) * 2 * c] * P)


def test_dualpipe_quoted_figures():
    assert set(bubbles(simulate_pipeline("dualpipe", 8, 16))) == {6}
    assert set(bubbles(simulate_pipeline("dualpipe", 8, 40))) == {6}
    assert set(bubbles(simulate_pipeline("dualpipev", 4, 10))) == {6}
    assert set(bubbles(simulate_pipeline("dualpipev", 8, 20))) == {14}


@given(H=st.integers(1, 6), k=st.integers(2, 5), c=costs)
def test_chimera_bubble(H, k, c):
    """Chimera (D/2-1)(F+B) at F=1,B=2 (exact at D=4), plus max(0, D/2-2) forward slots beyond."""
    D = 2 * H
    run = simulate_pipeline("chimera", D, k * D, F=c, I=c, W=c)
    assert bubbles(run) == pytest.approx([((D / 2 - 1) * 3 + max(0, D / 2 - 2)) * c] * D)


@given(P=st.integers(1, 8), M=st.integers(1, 40), c=costs)
def test_zbv_matches_pytorch_shape(P, M, c):
    """ZB-V at equal costs: makespan - busy = (P-1)F on every rank (near-zero bubble)."""
    run = simulate_pipeline("zbv", P, max(M, 2 * P), F=c, I=c, W=c)
    assert bubbles(run) == pytest.approx([(P - 1) * c] * P)


def test_zbv_at_least_as_short_as_pytorch():
    """Our zbv against PyTorch's ScheduleZBVZeroBubble order (tests/data), equal and unequal costs."""
    data = json.loads((Path(__file__).parent / "data" / "torch_orders.json").read_text())["zbv"]
    for key, ranks in data.items():
        P, M = map(int, key.split(","))
        torch_sched = Schedule("torch-zbv", P, 2 * P, M, {int(r): [parse_op(t) for t in ops] for r, ops in ranks.items()},
                               Placement("v", P, 2 * P, M))
        ours = make_schedule("zbv", P, M)
        for F, I, W in [(1, 1, 1), (1, 2, 1), (2, 1, 0.5), (1, 1.5, 0.7)]:
            mine = run_schedule(ours, ZeroCommRunner(2 * P, F, I, W)).makespan
            theirs = run_schedule(torch_sched, ZeroCommRunner(2 * P, F, I, W)).makespan
            assert mine <= theirs + 1e-9


NAMES_ARGS = [("gpipe", 4, 9, None), ("1f1b", 5, 7, None), ("interleaved-1f1b", 3, 6, 2), ("zb-h1", 4, 10, None),
              ("zb-h2", 4, 6, None), ("zbv", 3, 5, None), ("dualpipe", 6, 14, None), ("dualpipev", 3, 7, None),
              ("chimera", 4, 12, None)]


@pytest.mark.parametrize("name,P,M,v", NAMES_ARGS)
@given(F=st.floats(0.1, 5), I=st.floats(0.1, 5), W=st.floats(0.1, 5))
def test_engine_matches_independent_evaluator(name, P, M, v, F, I, W):
    """Any costs: the engine's makespan and busy times equal a plain list-scheduling evaluator's."""
    sched = make_schedule(name, P, M, v)
    result = run_schedule(sched, ZeroCommRunner(sched.num_stages, F, I, W))
    span, busy = reference_times(sched, F, I, W)
    assert result.makespan == pytest.approx(span)
    m = summarize(result)
    assert [r.busy for r in m.ranks] == pytest.approx([busy[r] for r in range(P)])


def test_per_stage_costs():
    """Unequal stage costs: the slowest stage sets the 1F1B steady state."""
    sched = make_schedule("1f1b", 2, 4)
    res = run_schedule(sched, ZeroCommRunner(2, F=[1, 2], I=[1, 2], W=[1, 2]))
    assert res.makespan == 1 + 4 * 6 + 2   # F0 on rank 0, four (F+B) on rank 1, last B on rank 0


def test_engine_reports_deadlock():
    P, M = 2, 1
    ranks = {0: [Op("B", 0, 0), Op("F", 0, 0)], 1: [Op("F", 0, 1), Op("B", 0, 1)]}
    sched = Schedule("broken", P, P, M, ranks, Placement("linear", P, P, M))
    with pytest.raises(DeadlockError) as caught:
        run_schedule(sched, ZeroCommRunner(2))
    assert str(caught.value) == ("schedule 'broken' deadlocks: rank 0 waits at step 0 (B0@0); "
                                 "rank 1 waits at step 0 (F0@1)")


def test_same_inputs_same_outputs():
    a = simulate_pipeline("dualpipe", 8, 20, F=1.3, I=0.7, W=0.4).result.records
    b = simulate_pipeline("dualpipe", 8, 20, F=1.3, I=0.7, W=0.4).result.records
    assert a == b


def test_non_positive_costs_refused():
    with pytest.raises(ValueError, match=r"cost F at stage 0 must be a finite number in \(0, .*got 0"):
        ZeroCommRunner(4, F=0)
    with pytest.raises(ValueError, match=r"cost I at stage 1 must be a finite number.*got nan"):
        ZeroCommRunner(4, I=[1, float("nan"), 1, 1])
    with pytest.raises(ValueError, match=r"cost W at stage 3 must be a finite number.*got -1"):
        ZeroCommRunner(4, W=[1, 1, 1, -1])
    with pytest.raises(ValueError, match="per-stage values"):
        ZeroCommRunner(4, F=[1, 2])


class DelayRunner(ZeroCommRunner):
    """A runner whose pipeline sends take ``delay`` time units (a stand-in for the network)."""

    def __init__(self, S, delay):
        super().__init__(S)
        self.delay = delay

    def deliver(self, env, src, dst, key):
        def transfer():
            yield env.timeout(self.delay)
        return transfer()


def test_runner_can_delay_handover():
    """1F1B P=2, M=1 with send delay d: F (1) + d + F(1) + B(2) + d + B(2) = 6 + 2d."""
    sched = make_schedule("1f1b", 2, 1)
    res = run_schedule(sched, DelayRunner(2, 0.5), simpy.Environment())
    assert res.makespan == pytest.approx(7.0)


def test_an_empty_schedule_has_makespan_zero():
    sched = Schedule("empty", 2, 2, 1, {0: [], 1: []}, Placement("linear", 2, 2, 1))
    result = run_schedule(sched, ZeroCommRunner(2))
    assert result.makespan == 0.0 and isinstance(result.makespan, float) and result.records == []


def test_blocking_sends_worked_example():
    """1F1B P=2, M=2, F=1, B=2 (I=W=1), sends of d: async 9 + 2d; blocking (a rank waits for its
    sends) 9 + 3d: rank 0 waits d after F0, so F1's activation lands d later, and rank 1 waits for
    B1's gradient to land before it is done (worked by hand)."""
    sched = make_schedule("1f1b", 2, 2)
    d = 0.5
    assert run_schedule(sched, DelayRunner(2, d)).makespan == pytest.approx(9 + 2 * d)
    assert run_schedule(sched, DelayRunner(2, d), blocking_sends=True).makespan == pytest.approx(9 + 3 * d)


def test_blocking_sends_cost_nothing_without_a_transfer():
    for name, kw in (("1f1b", {}), ("interleaved-1f1b", {"chunks": 2}), ("dualpipe", {}), ("zb-h1", {})):
        sched = make_schedule(name, 4, 8, **kw)
        assert (run_schedule(sched, ZeroCommRunner(sched.num_stages), blocking_sends=True).makespan
                == run_schedule(sched, ZeroCommRunner(sched.num_stages)).makespan)


@given(st.sampled_from(["1f1b", "interleaved-1f1b", "zb-h1", "zb-1p", "dualpipe", "dualpipev"]),
       st.sampled_from([2, 4]), st.integers(1, 3), st.floats(0.01, 2.0))
def test_blocking_sends_never_shorten_a_step(name, P, k, d):
    chunks = {"chunks": 2} if name == "interleaved-1f1b" else {}
    M = 2 * P * k
    sched = make_schedule(name, P, M, **chunks)
    free = run_schedule(sched, DelayRunner(sched.num_stages, d)).makespan
    held = run_schedule(sched, DelayRunner(sched.num_stages, d), blocking_sends=True)
    assert held.makespan >= free - 1e-9


def _end(res, kind, mb, stage):
    return next(r.end for r in res.records if (r.kind, r.mb, r.stage) == (kind, mb, stage))


def _start(res, kind, mb, stage):
    return next(r.start for r in res.records if (r.kind, r.mb, r.stage) == (kind, mb, stage))


@given(st.sampled_from([2, 4]), st.integers(1, 3), st.sampled_from([2, 3]), st.floats(0.05, 2.0))
def test_a_batched_exchange_sends_the_forward_after_its_backward(P, k, v, d):
    """Megatron's interleaved steady state (blocking): a forward's activation leaves with the next
    backward's gradient, after that backward, and the forward waits for that backward's gradient
    as well as its own input (both arrive in the exchange before it)."""
    sched = make_schedule("interleaved-1f1b", P, P * k, chunks=v)
    res = run_schedule(sched, DelayRunner(sched.num_stages, d), blocking_sends=True)
    S = sched.num_stages
    for r, ops in sched.ranks.items():
        for j in sched.joined[r]:
            f, b = ops[j - 1], ops[j]
            if f.stage < S - 1:                     # its activation goes to the next rank
                assert _start(res, "F", f.mb, f.stage + 1) >= _end(res, "B", b.mb, b.stage) + d - 1e-9
            if b.stage < S - 1:                     # the gradient it needs comes from the next rank
                assert _start(res, "F", f.mb, f.stage) >= _end(res, "B", b.mb, b.stage + 1) + d - 1e-9


def test_batched_exchanges_pinned_example():
    """Interleaved 1F1B, P = 2, M = 4, v = 2, F = 1, B = 2, sends of d = 0.5 (the engine's figures,
    pinned; the rule itself is the property test above): async 30, blocking with an exchange after
    every op 33.5, as Megatron exchanges (once per steady-state pair) 32.5: a pair waits for its
    two sends once, together, where an exchange per op waits twice, so batching can be the faster."""
    sched = make_schedule("interleaved-1f1b", 2, 4, chunks=2)
    each = Schedule(sched.name, 2, 4, 4, sched.ranks, sched.placement)           # no joined ops
    assert run_schedule(sched, DelayRunner(4, 0.5)).makespan == pytest.approx(30.0)
    assert run_schedule(each, DelayRunner(4, 0.5), blocking_sends=True).makespan == pytest.approx(33.5)
    assert run_schedule(sched, DelayRunner(4, 0.5), blocking_sends=True).makespan == pytest.approx(32.5)
    assert run_schedule(each, DelayRunner(4, 0.5)).makespan == pytest.approx(30.0)   # async: no exchanges


def test_an_overlapped_unit_is_recorded_with_both_halves():
    sched = make_schedule("dualpipe", 4, 8)
    res = run_schedule(sched, ZeroCommRunner(sched.num_stages))
    fb = [(rank, op) for rank, ops in sched.ranks.items() for op in ops if isinstance(op, FBOp)]
    recorded = {(r.rank, r.mb, r.stage, r.b_mb, r.b_stage) for r in res.records if r.kind == "FB"}
    assert fb and recorded == {(rank, op.f.mb, op.f.stage, op.b.mb, op.b.stage) for rank, op in fb}
