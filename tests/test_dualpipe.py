"""sim.schedules.dualpipe: DeepSeek's order op for op, and DualPipeV as the first half of DualPipe."""
import pytest

from sim.schedules import Op, make_schedule
from sim.schedules.ops import FBOp

# DeepSeek's DualPipe.step: DualPipe rank 0, P=4, M=8 (DeepSeek's order).
GOLDEN_DUALPIPE_RANK0 = ("F0@0 F1@0 F2@0 F4@3 I4@3 W4@3 F5@3 [F3@0&B5@3] [F6@3&B0@0] B6@3 "
                         "[F7@3&B1@0] B7@3 I2@0 W2@0 I3@0 W3@0").split()


def as_text(schedule):
    return {str(r): [str(op) for op in ops] for r, ops in schedule.ranks.items()}


def test_dualpipe_golden_rank0():
    assert as_text(make_schedule("dualpipe", 4, 8))["0"] == GOLDEN_DUALPIPE_RANK0


@pytest.mark.parametrize("P,M", [(2, 4), (4, 8), (4, 10), (8, 20), (6, 13)])
def test_dualpipev_is_first_half_of_dualpipe(P, M):
    """DualPipeV (the cut-in-half note): DualPipeV on P ranks with M micro-batches equals the first P ranks of
    DualPipe on 2P ranks with 2M micro-batches, relabelled: DualPipe's up micro-batch M+k is the
    V's micro-batch k, and its stage on rank r (2P-1-r) is the V's stage 2P-1-r already."""
    v = make_schedule("dualpipev", P, M)
    d = make_schedule("dualpipe", 2 * P, 2 * M)

    def relabel(op):
        if isinstance(op, FBOp):
            return FBOp(relabel(op.f), relabel(op.b))
        return op if op.mb < M else Op(op.kind, op.mb - M, op.stage)

    for r in range(P):
        assert [relabel(op) for op in d.ranks[r]] == v.ranks[r]
