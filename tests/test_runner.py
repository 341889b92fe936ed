"""sim.moe.runner: ops as parts in Figure 4's order, and the lockstep runner against one process per replica."""
import pytest

from sim.moe.scenario import Scenario
from sim.moe.specs import load_scenario
from sim.moe.step import MoEStep


@pytest.mark.parametrize("schedule", ["dualpipe", "1f1b"])
def test_lockstep_full_mode_equals_one_process_per_replica(schedule):
    """Skewed routing, every rank simulated: the lockstep runner gives what one SimPy process per
    replica, one event per part and one barrier per all-to-all give (SM sharing off, see reference)."""
    from reference_moe import reference_full_step
    run = load_scenario("tiny", schedule=schedule, routing_skew=1.5, routing_seed=2, comm_sms=0)
    step = MoEStep(Scenario(run), mode="full")
    res = step.simulate()
    ref_time, ref = reference_full_step(MoEStep(Scenario(run), mode="full"))
    assert res.pipeline_end_s == pytest.approx(ref_time, rel=1e-12)
    assert res.step_time_s > res.pipeline_end_s            # the data-parallel sync and optimizer follow
    for r in res.ranks:
        worst = max((v for (rank, _), v in ref.items() if rank == r.rank), key=lambda v: v[2])
        assert r.compute_s == pytest.approx(worst[0], rel=1e-12)
        assert r.comm_s == pytest.approx(worst[1], rel=1e-12)
    assert len({round(v[0], 9) for (rank, _), v in ref.items() if rank == 0}) > 1   # replicas do differ
