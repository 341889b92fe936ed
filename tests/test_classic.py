"""sim.schedules.classic: GPipe, 1F1B, interleaved and combined 1F1B by their defining phases."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.schedules import FBOp, Op, ScheduleConfigError, make_schedule, parse_op, validate
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


def test_megatron_order_puts_the_rest_in_the_last_group():
    """Megatron-Core's get_schedule_table, its docstring's case (PP 2, VP 2, G 3, M 5): virtual
    micro-batches 0-9 hold micro-batches 0 1 2 0 1 2 3 4 3 4 of chunks 0 0 0 1 1 1 0 0 1 1."""
    order = megatron_virtual_order(5, 2, 3)
    assert [mb for mb, _ in order] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [chunk for _, chunk in order] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_interleaved_with_a_group_of_three_by_hand():
    """P = 2, M = 5, v = 2, G = 3 (Megatron-Core's microbatch_group_size_per_vp_stage), worked by
    hand: warm-up 2(P-1-r) + (v-1)G = 5 and 3 forwards in the order 0 1 2 of chunk 0, 0 1 2 of chunk
    1, 3 4 of chunk 0, 3 4 of chunk 1; then the next forward before the next backward, each backward
    the same order with the chunk mirrored; rank 1 holds stages 1 and 3."""
    sched = make_schedule("interleaved-1f1b", 2, 5, 2, group=3)
    expected = {0: "F0@0 F1@0 F2@0 F0@2 F1@2 F2@2 B0@2 F3@0 B1@2 F4@0 B2@2 F3@2 B0@0 F4@2 B1@0 B2@0 B3@2 B4@2 "
                   "B3@0 B4@0",
                1: "F0@1 F1@1 F2@1 F0@3 B0@3 F1@3 B1@3 F2@3 B2@3 F3@1 B0@1 F4@1 B1@1 F3@3 B2@1 F4@3 B3@3 B4@3 "
                   "B3@1 B4@1"}
    assert {r: " ".join(str(op) for op in ops) for r, ops in sched.ranks.items()} == expected
    validate(sched)
    # without overlap_p2p_comm one exchange per steady pair, after its backward
    assert sched.joined == {0: frozenset({6, 8, 10, 12, 14}), 1: frozenset({4, 6, 8, 10, 12, 14, 16})}


@settings(max_examples=60, deadline=None)
@given(P=st.integers(1, 6), M=st.integers(1, 30), v=st.integers(2, 4), extra=st.integers(0, 30),
       combined=st.booleans())
def test_every_allowed_group_gives_a_valid_order_and_p_is_the_default(P, M, v, extra, combined):
    """Property: for every G that Megatron-Core allows (P <= G <= M, M mod G none or at least P), the
    interleaved and combined orders are valid, warm up 2(P-1-r) + (v-1)G (+1 combined) forwards, and
    run every chunk's micro-batches in order; G = P is the default order."""
    G = min(M, P + extra)
    name = "combined-1f1b" if combined and P > 1 else "interleaved-1f1b"
    if G < P or 0 < M % G < P:
        with pytest.raises(ScheduleConfigError):
            make_schedule(name, P, M, v, group=G)
        return
    sched = validate(make_schedule(name, P, M, v, group=G))
    if G == P:
        assert sched.ranks == make_schedule(name, P, M, v).ranks
    for r, ops in sched.ranks.items():
        flat = [part for op in ops for part in parts(op)]
        warm = min(v * M, 2 * (P - 1 - r) + (v - 1) * G + (name == "combined-1f1b"))
        leading = next((i for i, op in enumerate(flat) if op.kind == "B"), len(flat))
        assert leading == min(v * M, warm + 1)         # the warm-up, then the first steady forward
        for stage in {op.stage for op in flat}:
            assert [op.mb for op in flat if op.kind == "F" and op.stage == stage] == list(range(M))
