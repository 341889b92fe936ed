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


def test_a_send_started_after_its_time_records_how_late_and_lands_each_replica():
    """The lockstep lag by hand: the group's first replica finished the producer at 1 us, the
    others at 3 us and 30 us; the send only starts at 5 us (the group was held up), so the first
    two replicas' sends leave at once and the largest lag, 5 - (1 + launch) us, is recorded; the
    others leave at 30 us + launch. Each replica's input lands when its own transfer ends."""
    import numpy as np
    import simpy

    from sim.moe.scenario import Scenario
    from sim.moe.specs import load_scenario
    from sim.moe.step import MoEStep
    from sim.network import Fabric
    step = MoEStep(Scenario(load_scenario("tiny")), "full")
    env = simpy.Environment()
    fabric = Fabric(env, step.scenario.links)
    runner = step.runners(fabric)[0]
    launch = runner.send_launch_s
    key = ("probe",)
    assert len(runner.replicas) >= 2 and runner.late_s == 0.0
    runner.arrivals[key] = np.array([1e-6, 3e-6] + [30e-6] * (len(runner.replicas) - 2))
    env.run(until=5e-6)
    env.run(env.process(runner._send(env, 0, 1, key)))
    assert runner.late_s == pytest.approx(5e-6 - (1e-6 + launch), rel=1e-12)
    src, dst = step.scenario.layout.gpus_of(0, runner.replicas), step.scenario.layout.gpus_of(1, runner.replicas)
    latency = fabric.links.route(int(src[0]), int(dst[0]))[1]
    landed = runner.arrivals[key]
    assert 5e-6 + latency < landed[0] <= landed[1] < 30e-6 + launch < landed[2:].min()
