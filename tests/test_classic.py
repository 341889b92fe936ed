"""sim.schedules.classic: GPipe, 1F1B, interleaved and combined 1F1B by their defining phases."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.schedules import FBOp, Op, make_schedule, parse_op, validate
from sim.schedules.classic import megatron_virtual_order
from sim.schedules.ops import parts


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


def test_combined_1f1b_without_a_pipeline_pairs_each_forward_with_the_backward_before_it():
    """Megatron-Core's combined_1f1b_schedule_for_no_pipelining: F0, then the forward of micro-batch
    i + 1 overlapped with the backward of i, then the last backward."""
    ops = make_schedule("combined-1f1b", 1, 4).ranks[0]
    assert [str(op) for op in ops] == ["F0@0", "[F1@0&B0@0]", "[F2@0&B1@0]", "[F3@0&B2@0]", "B3@0"]


def test_combined_1f1b_by_hand_on_two_ranks_of_two_chunks():
    """P = 2, M = 4, v = 2, worked by hand: interleaved 1F1B's order (warm-up 2(P-1-r) + (v-1)P, here 4
    and 2) with one more warm-up forward (5 and 3), each steady-state F and B one unit."""
    sched = make_schedule("combined-1f1b", 2, 4, 2)
    expected = {0: "F0@0 F1@0 F0@2 F1@2 F2@0 [F3@0&B0@2] [F2@2&B1@2] [F3@2&B0@0] B1@0 B2@2 B3@2 B2@0 B3@0",
                1: "F0@1 F1@1 F0@3 [F1@3&B0@3] [F2@1&B1@3] [F3@1&B0@1] [F2@3&B1@1] [F3@3&B2@3] B3@3 B2@1 B3@1"}
    assert {r: " ".join(str(op) for op in ops) for r, ops in sched.ranks.items()} == expected
    assert sched.ranks[0][5] == FBOp(parse_op("F3@0"), parse_op("B0@2")) and sched.joined == {}


@settings(max_examples=40, deadline=None)
@given(P=st.integers(1, 6), groups=st.integers(1, 4), v=st.integers(2, 4))
def test_combined_1f1b_is_interleaved_1f1b_with_its_steady_pairs_overlapped(P, groups, v):
    """Property: flattening each unit gives interleaved 1F1B's ops on every rank, one forward moved
    from the steady state into the warm-up; every unit pairs a forward with a backward of another
    micro-batch; the schedule is valid (dependencies, each op once)."""
    M, v = P * groups, (v if P > 1 else 1)
    combined = make_schedule("combined-1f1b", P, M, v if P > 1 else None)
    validate(combined)
    for r, ops in combined.ranks.items():
        flat = [part for op in ops for part in parts(op)]
        reference = (make_schedule("interleaved-1f1b", P, M, v).ranks[r] if P > 1 else
                     make_schedule("1f1b", 1, M).ranks[0])
        assert sorted(map(str, flat)) == sorted(map(str, reference))
        assert [op for op in flat if op.kind == "F"] == [op for op in reference if op.kind == "F"]
        assert [op for op in flat if op.kind == "B"] == [op for op in reference if op.kind == "B"]
        units = [op for op in ops if isinstance(op, FBOp)]
        warm = min(v * M, 2 * (P - 1 - r) + (v - 1) * P + 1)
        assert len(units) == v * M - warm and all(u.f.mb != u.b.mb for u in units)
        assert all(op.kind == "F" for op in ops[:warm])


def test_combined_1f1b_takes_one_chunk_by_default():
    """Called directly, the builder defaults to one model chunk per rank: no pipeline's order."""
    from sim.schedules.classic import combined_1f1b
    assert combined_1f1b(1, 4) == make_schedule("combined-1f1b", 1, 4).ranks
