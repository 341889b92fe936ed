"""sim.schedules.zerobubble: ZB-H1's and ZB-H2's warm-up and W lag, ZB-V's V placement."""
import pytest

from sim.schedules import make_schedule


def lag_of_w(ops):
    """For each W, how many I's ran on the rank before it, minus its own micro-batch + 1."""
    seen, out = 0, []
    for op in ops:
        if op.kind == "I":
            seen += 1
        elif op.kind == "W":
            out.append(seen - (op.mb + 1))
    return out


@pytest.mark.parametrize("P,M", [(4, 8), (4, 12), (6, 20)])
def test_zb_h1_warm_up_and_lag(P, M):
    for r, ops in make_schedule("zb-h1", P, M).ranks.items():
        warm = min(M, P - r)
        assert [op.kind for op in ops[:warm + 1]] == ["F"] * warm + ["I"]
        steady = [lag for lag in lag_of_w(ops)[:M - r]]
        assert set(steady) == {r}            # W of micro-batch i runs after I of i + r


@pytest.mark.parametrize("P,M", [(4, 8), (4, 12)])
def test_zb_h2_warm_up_and_lag(P, M):
    for r, ops in make_schedule("zb-h2", P, M).ranks.items():
        warm = min(M, 2 * (P - 1 - r) + 1)
        assert [op.kind for op in ops[:warm + 1]] == ["F"] * warm + ["I"]
        assert set(lag_of_w(ops)[:M - 2 * r]) <= {2 * r}


def test_zbv_v_placement():
    sched = make_schedule("zbv", 4, 8)
    assert sched.num_stages == 8
    for r, ops in sched.ranks.items():
        assert {op.stage for op in ops} == {r, 7 - r}
    assert sched.ranks[0][:7] == [op for op in sched.ranks[0][:7] if op.kind == "F"]   # 2P-1 warm-up forwards


def test_zbv_equals_the_padded_reference_for_every_small_shape():
    """The generator stops each loop at the last real micro-batch; PyTorch's runs the padding and
    drops it. Same ops, in the same order, for P = 1..9 and M = 1..30."""
    from sim.schedules.zerobubble import zbv
    from tests.reference import zbv_padded
    for P in range(1, 10):
        for M in range(1, 31):
            assert zbv(P, M) == zbv_padded(P, M), (P, M)
