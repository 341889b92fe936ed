"""sim.schedules.zbauto: Zero Bubble's searched schedules reproduce the paper's published bubble rates
from its published profiles, the closed forms at equal costs, and refuse bad profiles by name."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.checks import InputError
from sim.schedules import make_schedule, validate
from sim.schedules.ops import parts
from sim.schedules.zbauto import StageCosts, zb_auto

# Zero Bubble paper, Table 9 (profiled T_F, T_B, T_W, T_comm in ms) and Table 5 (bubble rates of
# ZB-1p and ZB-2p computed from them): (model, p, m, T_F, T_B, T_W, T_comm, ZB-1p, ZB-2p).
PAPER = [
    ("1.5B", 8, 24, 18.522, 18.086, 9.337, 0.601, 0.1585, 0.0433),
    ("1.5B", 8, 32, 18.513, 18.086, 9.331, 0.626, 0.1242, 0.0039),
    ("1.5B", 8, 64, 18.546, 18.097, 9.321, 0.762, 0.0674, 0.0026),
    ("6.2B", 8, 24, 29.718, 29.444, 19.927, 0.527, 0.1323, 0.0029),
    ("6.2B", 8, 32, 29.802, 29.428, 19.530, 0.577, 0.1045, 0.0022),
    ("6.2B", 8, 64, 29.935, 29.621, 19.388, 0.535, 0.0554, 0.0010),
    ("14.6B", 16, 48, 11.347, 11.248, 8.132, 0.377, 0.1397, 0.0066),
    ("14.6B", 16, 64, 11.307, 11.254, 8.101, 0.379, 0.1088, 0.0054),
    ("14.6B", 16, 128, 11.325, 11.308, 8.109, 0.378, 0.0576, 0.0028),
    ("28.3B", 32, 96, 10.419, 10.207, 7.715, 0.408, 0.1421, 0.0038),
    ("28.3B", 32, 128, 10.408, 10.204, 7.703, 0.408, 0.1106, 0.0029),
    ("28.3B", 32, 256, 10.402, 10.248, 7.698, 0.460, 0.0594, 0.0018),
]


@pytest.mark.parametrize("model,p,m,f,b,w,comm,zb1p,zb2p", PAPER, ids=[f"{r[0]}-m{r[2]}" for r in PAPER])
def test_the_papers_bubble_rates_from_its_profiles(model, p, m, f, b, w, comm, zb1p, zb2p):
    """Table 5, every row, to the paper's four decimals: the construction is the paper's."""
    costs = StageCosts.uniform(p, f, b, w, comm)
    assert round(zb_auto(p, m, p, costs).bubble_rate, 4) == zb1p
    assert round(zb_auto(p, m, 2 * p, costs).bubble_rate, 4) == zb2p


@pytest.mark.parametrize("P", [2, 3, 4, 6, 8])
def test_closed_forms_at_equal_costs(P):
    """F = I = W, no send time: ZB-2p leaves no bubble inside any stage's span once M >= 2P - 1
    (ZB-H2's (P-1)(F+I-2W) = 0); ZB-1p's span bubble is ZB-H1's (P-1)(F+I-W) = P - 1 units."""
    for M in range(2 * P - 1, 4 * P):
        assert zb_auto(P, M, 2 * P).span == 3 * M
        assert zb_auto(P, M, P).span == 3 * M + (P - 1)


def test_memory_stays_within_the_limit():
    """Walk each rank's ops with the memory each leaves: never above limit x one forward's."""
    costs = StageCosts.uniform(6, 1.0, 1.5, 0.7, 0.1, mem=(3.0, -1.0, -2.0))
    for limit in (1, 2.5, 6, 12):
        result = zb_auto(6, 20, limit, costs)
        for ops in result.ranks.values():
            used = 0.0
            for op in ops:
                used += {"F": 3.0, "I": -1.0, "W": -2.0}[op.kind]
                assert used <= limit * 3.0 + 1e-9


@given(st.integers(1, 9), st.integers(1, 30), st.floats(1, 30), st.floats(0.1, 3), st.floats(0.1, 3),
       st.floats(0.1, 3), st.floats(0, 1))
def test_every_searched_order_is_valid_and_complete(P, M, limit, f, i, w, comm):
    sched = validate(make_schedule("zb-auto", P, M, memory_limit=limit, costs=StageCosts.uniform(P, f, i, w, comm)))
    seen = {}
    for rank, ops in sched.ranks.items():
        for op in ops:
            for p in parts(op):
                assert p.stage == rank
                seen[(p.kind, p.mb, p.stage)] = seen.get((p.kind, p.mb, p.stage), 0) + 1
    assert seen == {(k, mb, s): 1 for k in "FIW" for mb in range(M) for s in range(P)}


def test_the_implementation_takes_the_median_stage():
    """The public implementation times every stage as the median one ("uniform f/b/w timing")."""
    slow_last = StageCosts((1.0, 1.0, 1.0, 5.0), (1.0,) * 4, (1.0,) * 4)
    assert zb_auto(4, 8, 8, slow_last).span == zb_auto(4, 8, 8).span


@pytest.mark.parametrize("costs,pattern", [
    (StageCosts((1.0, 0.0), (1.0, 1.0), (1.0, 1.0)), r"profiled F time of stage 1 must be a finite number > 0, got 0"),
    (StageCosts((1.0, 1.0), (-1.0, 1.0), (1.0, 1.0)), r"profiled I \(input gradient\) time of stage 0 must be"),
    (StageCosts((1.0, 1.0), (1.0, 1.0), (1.0,)), r"profiled w times must list one value per stage \(2\), got 1"),
    (StageCosts((1.0, 1.0), (1.0, 1.0), (1.0, 1.0), -1.0), "profiled send time between stages must be"),
    (StageCosts((1.0,) * 2, (1.0,) * 2, (1.0,) * 2, 0.0, (2.0, 2.0), (-1.0, -1.0), (-2.0, -1.0)),
     r"memory of stage 0 does not balance: forward 2 \+ input gradient -1 \+ weight gradient -2 must be 0"),
])
def test_bad_profiles_are_one_line(costs, pattern):
    with pytest.raises(InputError, match=pattern):
        zb_auto(2, 4, 2, costs)


def test_a_limit_below_one_micro_batch_is_refused():
    with pytest.raises(InputError, match=r"memory limit \(micro-batches of activations per stage\) must be a finite "
                                         r"number >= 1, got 0.5"):
        zb_auto(4, 8, 0.5)
    with pytest.raises(InputError, match="zb-auto needs memory_limit"):
        make_schedule("zb-auto", 4, 8)
    with pytest.raises(InputError, match="memory_limit applies only to zb-auto"):
        make_schedule("zb-2p", 4, 8, memory_limit=3)
    # A weight gradient that keeps more than the forward (DeepSeek-V3's FP8 recipe): at a limit of
    # one micro-batch the first input gradient has nothing to free first.
    heavy = StageCosts.uniform(3, mem=(1.0, 0.5, -1.5))
    with pytest.raises(InputError, match="the memory limit .* is below what stage .* needs"):
        zb_auto(3, 6, 1, heavy)


@pytest.mark.parametrize("limit", [1.5, 2, 3.7, 6])
def test_an_input_gradient_that_adds_memory_still_fits(limit):
    """Where an I adds memory (its W keeps more than the forward held), each forward leaves room
    for the I that must follow it: the construction finishes, valid, within the limit."""
    heavy = StageCosts.uniform(4, 1.0, 1.2, 0.6, 0.05, mem=(1.0, 0.5, -1.5))
    result = zb_auto(4, 12, limit, heavy)
    validate(make_schedule("zb-auto", 4, 12, memory_limit=limit, costs=heavy))
    for ops in result.ranks.values():
        used = 0.0
        for op in ops:
            used += {"F": 1.0, "I": 0.5, "W": -1.5}[op.kind]
            assert used <= limit + 1e-9


def test_refusals_read_whole():
    with pytest.raises(InputError, match=r"^pp \(P\) must be an integer"):
        zb_auto(0, 4, 2)
    heavy = StageCosts.uniform(3, mem=(1.0, 0.5, -1.5))
    with pytest.raises(InputError) as info:
        zb_auto(3, 6, 1, heavy)
    assert str(info.value) == ("the memory limit (1) is below what stage 0 needs for one more micro-batch's F (1.5 "
                               "with nothing left to free): raise it")


@pytest.mark.parametrize("P,M", [(4, 8), (3, 7), (6, 12)])
def test_the_named_zb_1p_and_zb_2p_are_the_construction_at_limits_p_and_2p(P, M):
    """Through make_schedule, as a scenario names them: zb-1p and zb-2p are zb-auto at P and 2P, and at
    equal F, I and W (one unit, no send) zb-1p spans 3M + P - 1 units (P=4, M=8: 27) and each rank of
    zb-2p 3M units (no bubble inside its span), timed by the pipeline's own timing."""
    from sim.schedules.timing import rank_ends
    one, two = make_schedule("zb-1p", P, M), make_schedule("zb-2p", P, M)
    assert one.ranks == make_schedule("zb-auto", P, M, memory_limit=P).ranks
    assert two.ranks == make_schedule("zb-auto", P, M, memory_limit=2 * P).ranks
    unit = lambda rank, op: 1.0         # noqa: E731
    assert max(rank_ends(one, unit).values()) == 3 * M + P - 1
    record = []
    rank_ends(two, unit, record=record)
    for rank in range(P):
        times = [(start, end) for r, _, start, end in record if r == rank]
        assert max(e for _, e in times) - min(s for s, _ in times) == 3 * M
    if (P, M) == (4, 8):
        assert max(rank_ends(one, unit).values()) == 27


def test_unequal_forward_memory_each_stage_fills_the_limit_with_its_own_forwards():
    """Forward memory 1, 2, 2, 2 and a limit of 2 micro-batches: the limit is 2 x the first stages'
    largest forward (4 units) on every stage, so stage 0 holds four of its forwards at once (4
    units) and stage 1 two of its own (4 units); no stage goes above 4."""
    costs = StageCosts((1.0,) * 4, (1.0,) * 4, (1.0,) * 4, 0.0, (1.0, 2.0, 2.0, 2.0), (-0.5, -1.0, -1.0, -1.0),
                       (-0.5, -1.0, -1.0, -1.0))
    result = zb_auto(4, 8, 2, costs)
    peaks, in_flight = [], []
    for j, ops in sorted(result.ranks.items()):
        used = peak = held = most = 0.0
        for op in ops:
            used += {"F": costs.mem_f[j], "I": costs.mem_i[j], "W": costs.mem_w[j]}[op.kind]
            held += {"F": 1, "I": 0, "W": -1}[op.kind]
            peak, most = max(peak, used), max(most, held)
        peaks.append(peak)
        in_flight.append(most)
    assert peaks[0] == 4.0 and in_flight[0] == 4            # four forwards of 1
    assert peaks[1] == 4.0 and in_flight[1] == 2            # two forwards of 2
    assert max(peaks) <= 4.0
