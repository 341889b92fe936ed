"""sim.schedules.classic: GPipe, 1F1B and interleaved 1F1B by their defining phases."""
import pytest

from sim.schedules import Op, make_schedule
from sim.schedules.classic import megatron_virtual_order


@pytest.mark.parametrize("P,M", [(1, 1), (2, 5), (4, 8), (4, 3)])
def test_gpipe_all_forwards_then_all_backwards(P, M):
    for r, ops in make_schedule("gpipe", P, M).ranks.items():
        assert ops == [Op("F", mb, r) for mb in range(M)] + [Op("B", mb, r) for mb in range(M)]


@pytest.mark.parametrize("P,M", [(4, 8), (4, 2), (8, 16), (3, 7)])
def test_1f1b_warm_up_then_alternate_then_drain(P, M):
    for r, ops in make_schedule("1f1b", P, M).ranks.items():
        warm = min(M, P - r)
        kinds = "".join(op.kind for op in ops)
        assert kinds == "F" * warm + "BF" * (M - warm) + "B" * warm
        assert [op.mb for op in ops if op.kind == "F"] == list(range(M))
        assert [op.mb for op in ops if op.kind == "B"] == list(range(M))


def test_megatron_order_sends_groups_of_p_through_each_chunk():
    assert megatron_virtual_order(4, 2, 2) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1)]


def test_interleaved_rank_holds_every_pth_stage_and_warms_up_by_formula():
    P, M, v = 4, 8, 2
    sched = make_schedule("interleaved-1f1b", P, M, v)
    for r, ops in sched.ranks.items():
        assert {op.stage for op in ops} == {r, r + P}
        warm = min(v * M, 2 * (P - 1 - r) + (v - 1) * P)
        assert all(op.kind == "F" for op in ops[:warm]) and ops[warm + 1].kind == "B"


@pytest.mark.parametrize("P,M,v", [(4, 8, 2), (2, 4, 3), (4, 4, 2), (8, 16, 4)])
def test_megatron_interleaved_exchanges_once_per_steady_state_pair(P, M, v):
    """forward_backward_pipelining_with_interleaving without overlap_p2p_comm: one exchange after
    each warm-up forward and each cool-down backward, one per forward-backward pair between."""
    sched = make_schedule("interleaved-1f1b", P, M, v)
    for r, ops in sched.ranks.items():
        warm = min(v * M, 2 * (P - 1 - r) + (v - 1) * P)
        joined = sched.joined[r]
        assert joined == set(range(warm + 1, 2 * v * M - warm, 2))
        assert all(ops[j].kind == "B" and ops[j - 1].kind == "F" for j in joined)
        assert len(joined) == v * M - warm


def test_only_interleaved_batches_exchanges():
    assert make_schedule("interleaved-1f1b", 2, 2, 2).joined == {0: frozenset(), 1: frozenset({3, 5})}
    for name in ("1f1b", "zb-h1", "dualpipe"):
        assert make_schedule(name, 4, 8).joined == {}
