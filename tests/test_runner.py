"""sim.moe.runner: ops as parts in Figure 4's order, and the lockstep runner against one process per replica."""
import pytest

from sim.moe.chunk import LayerCost
from sim.moe.runner import COMM, COMPUTE, overlapped_parts
from sim.moe.scenario import Scenario
from sim.moe.specs import load_scenario
from sim.moe.step import MoEStep

MOE = LayerCost(1.0, 2.0, 1.0, 1.0, 1.0, 1.0, True, 0.9, 0.0)


def test_fb_unit_part_order_is_figure_4():
    comp, comm = overlapped_parts([MOE], [MOE], 0.0, 0.0)
    assert [p.name for p in comp] == ["ATTN(F)", "MLP(B)", "MLP(W)", "MLP(F)", "ATTN(B)", "ATTN(W)"]
    assert [p.name for p in comm] == ["COMBINE(B)", "DISPATCH(F)", "DISPATCH(B)", "COMBINE(F)"]
    # each transfer waits for the compute part producing its data, each compute part for its transfer
    assert comm[1].after == [(COMPUTE, 0)]            # DISPATCH(F) after ATTN(F)
    assert comm[2].after == [(COMPUTE, 1)]            # DISPATCH(B) after MLP(B)
    assert comm[3].after == [(COMPUTE, 3)]            # COMBINE(F) after MLP(F)
    assert comp[1].after == [(COMM, 0)]               # MLP(B) after COMBINE(B)
    assert comp[3].after == [(COMM, 1)]               # MLP(F) after DISPATCH(F)
    assert comp[4].after == [(COMM, 2)]               # ATTN(B) after DISPATCH(B)


def test_next_layer_dependencies():
    comp, comm = overlapped_parts([MOE, MOE], [MOE, MOE], 0.0, 0.0)
    assert comp[6].name == "ATTN(F)" and comp[6].after == [(COMM, 3)]      # after COMBINE(F) of layer 0
    assert comm[4].name == "COMBINE(B)" and comm[4].after == [(COMPUTE, 4)]  # after ATTN(B) of layer 0


@pytest.mark.parametrize("schedule", ["dualpipe", "1f1b"])
def test_lockstep_full_mode_equals_one_process_per_replica(schedule):
    """Skewed routing, every rank simulated: the lockstep runner gives what one SimPy process per
    replica, one event per part and one barrier per all-to-all give (SM sharing off, see reference)."""
    from reference_moe import reference_full_step
    run = load_scenario("tiny", schedule=schedule, routing_skew=1.5, routing_seed=2, comm_sms=0)
    step = MoEStep(Scenario(run), mode="full")
    res = step.simulate()
    ref_time, ref = reference_full_step(MoEStep(Scenario(run), mode="full"))
    assert res.step_time_s == pytest.approx(ref_time, rel=1e-12)
    for r in res.ranks:
        worst = max((v for (rank, _), v in ref.items() if rank == r.rank), key=lambda v: v[2])
        assert r.compute_s == pytest.approx(worst[0], rel=1e-12)
        assert r.comm_s == pytest.approx(worst[1], rel=1e-12)
    assert len({round(v[0], 9) for (rank, _), v in ref.items() if rank == 0}) > 1   # replicas do differ
