"""sim.schedules.chimera: DualPipe's order without the F&B overlap and without the I/W split."""
import pytest

from sim.schedules import Op, make_schedule
from sim.schedules.ops import FBOp


@pytest.mark.parametrize("P,M", [(2, 4), (4, 8), (4, 16), (8, 16)])
def test_chimera_is_dualpipe_with_units_split_and_weights_fused(P, M):
    dual, chim = make_schedule("dualpipe", P, M), make_schedule("chimera", P, M)
    for r in range(P):
        expected = []
        for op in dual.ranks[r]:
            if isinstance(op, FBOp):
                expected += [op.f, op.b]
            elif op.kind == "I":
                expected.append(Op("B", op.mb, op.stage))
            elif op.kind != "W":
                expected.append(op)
        assert chim.ranks[r] == expected


def test_chimera_holds_two_stages_per_rank():
    sched = make_schedule("chimera", 4, 8)
    assert sched.placement.parameter_copies(0) == 2
    assert {op.stage for op in sched.ranks[1]} == {1, 2}
