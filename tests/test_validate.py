"""The validator refuses broken schedules with the rank x step grid and the offending op marked."""
import pytest

from sim.schedules import Op, ScheduleError, make_schedule, parse_op, validate
from sim.schedules.base import Placement, Schedule


def sched_from_text(rows, P, M, name="file"):
    ranks = {r: [parse_op(t) for t in row.split()] for r, row in enumerate(rows)}
    return Schedule(name, P, P, M, ranks, Placement("linear", P, P, M))


def test_valid_text_schedule_passes():
    validate(sched_from_text(["F0@0 F1@0 B0@0 B1@0", "F0@1 B0@1 F1@1 B1@1"], 2, 2))


def test_missing_backward():
    with pytest.raises(ScheduleError, match=r"\(mb 1, stage 0\) has no backward"):
        validate(sched_from_text(["F0@0 F1@0 B0@0", "F0@1 B0@1 F1@1 B1@1"], 2, 2))


def test_duplicate_forward_is_marked():
    with pytest.raises(ScheduleError, match=r">>F0@0<<") as exc:
        validate(sched_from_text(["F0@0 F0@0 B0@0", "F0@1 B0@1"], 2, 1))
    assert "second F" in str(exc.value)


def test_wrong_rank():
    with pytest.raises(ScheduleError, match="held by rank 1") as exc:
        validate(sched_from_text(["F0@0 F0@1 B0@0", "B0@1"], 2, 1))
    assert ">>F0@1<<" in str(exc.value)


def test_w_before_i():
    with pytest.raises(ScheduleError, match="W0@0 comes before"):
        validate(sched_from_text(["F0@0 W0@0 I0@0", "F0@1 B0@1"], 2, 1))


def test_i_without_w():
    with pytest.raises(ScheduleError, match="never completed by a W"):
        validate(sched_from_text(["F0@0 I0@0", "F0@1 B0@1"], 2, 1))


def test_deadlock_marks_every_stuck_rank():
    with pytest.raises(ScheduleError, match="deadlock") as exc:
        validate(sched_from_text(["F0@0 B1@0 F1@0 B0@0", "F0@1 F1@1 B0@1 B1@1"], 2, 2))
    text = str(exc.value)
    assert "rank   0: F0@0 >>B1@0<<" in text
    assert "F1@1 B0@1 >>B1@1<<" in text or ">>" in text.splitlines()[-1]


def test_out_of_range():
    with pytest.raises(ScheduleError, match="out of range"):
        validate(sched_from_text(["F0@0 F5@0", "F0@1"], 2, 1))


def test_generated_schedule_with_a_swapped_pair_is_refused():
    s = make_schedule("1f1b", 4, 8)
    ops = s.ranks[2]
    ops[0], ops[3] = ops[3], ops[0]   # a backward before its forward
    with pytest.raises(ScheduleError):
        validate(s)


def test_self_overlap_refused():
    from sim.schedules.ops import FBOp
    s = sched_from_text(["F0@0 B0@0", "F0@1 B0@1"], 2, 1)
    s.ranks[0] = [FBOp(Op("F", 0, 0), Op("B", 0, 0))]
    with pytest.raises(ScheduleError, match="pairs a micro-batch with itself"):
        validate(s)


def test_render_grid_shows_a_window_of_six_steps_around_the_marks():
    """Marks at steps 3 and 10: steps max(0, 3 - 6) .. 10 + 6 = 0..16; ' ...' where a rank has more ops
    (1F1B P=2, M=12: 24 per rank); marks at 14 and 15 start at step 8 with a leading '... '."""
    from sim.schedules.validate import render_grid
    s = make_schedule("1f1b", 2, 12)
    assert render_grid(s, {0: 10, 1: 3}) == (
        "steps 0..16 (rank: ops in order)\n"
        "  rank   0: F0@0 F1@0 B0@0 F2@0 B1@0 F3@0 B2@0 F4@0 B3@0 F5@0 >>B4@0<< F6@0 B5@0 F7@0 B6@0 F8@0 B7@0 ...\n"
        "  rank   1: F0@1 B0@1 F1@1 >>B1@1<< F2@1 B2@1 F3@1 B3@1 F4@1 B4@1 F5@1 B5@1 F6@1 B6@1 F7@1 B7@1 F8@1 ...")
    late = render_grid(s, {0: 15, 1: 14}).splitlines()
    assert late[0] == "steps 8..21 (rank: ops in order)"
    assert late[1] == "  rank   0: ... B3@0 F5@0 B4@0 F6@0 B5@0 F7@0 B6@0 >>F8@0<< B7@0 F9@0 B8@0 F10@0 B9@0 F11@0 ..."
    end = render_grid(s, {0: 20, 1: 20}).splitlines()
    assert end[0] == "steps 14..26 (rank: ops in order)" and not end[1].endswith("...")
    assert end[1].startswith("  rank   0: ... ") and end[1].split()[-1] == "B11@0"
    assert render_grid(s, {0: 20}, window=0).splitlines()[1] == "  rank   0: ... >>B9@0<< ..."
    assert not render_grid(s, {0: 17}).splitlines()[1].endswith("...")      # hi = 24 = len(ops): nothing more


def test_ranks_other_than_0_to_p_minus_1_are_named():
    """A schedule must give ops to ranks 0..P-1: a missing rank is refused with the ranks it has."""
    s = sched_from_text(["F0@0 B0@0", "F0@1 B0@1"], 2, 1)
    s.ranks[2] = s.ranks.pop(1)
    with pytest.raises(ScheduleError, match=r"^schedule 'file': ranks must be 0\.\.1, got \[0, 2\]$"):
        validate(s)
