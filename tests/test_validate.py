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
