"""sim.moe.comm: all-to-all times measured on the fabric, one unit for all stages when routing is
balanced, per stage under skew; expert loads; reuse across schedules."""
import numpy as np
import pytest

from sim.moe.comm import CommModel, measure_all_to_alls
from sim.moe.scenario import Scenario
from sim.moe.specs import SpecError, load_scenario


def comm_of(**over):
    sc = Scenario(load_scenario("tiny", **over))
    return sc, CommModel(sc.run, sc.model, sc.links, sc.layout, sc.token_bytes())


def test_balanced_time_is_one_measurement_of_every_group_of_a_stage():
    sc, comm = comm_of()
    t = comm.time("dispatch", 2, 0)
    assert all(comm.time("dispatch", s, 0) == t for s in range(sc.run.pp))
    groups = [(sc.layout.ep_group(0, g), comm.traffic(0, g)) for g in range(sc.layout.groups_per_rank)]
    ends, _ = measure_all_to_alls(sc.links, groups, sc.token_bytes()["dispatch"], "hierarchical", "dispatch", 4, 0.0)
    assert t == max(ends) and comm.load_factor(1, 3) == 1.0
    assert comm.time("combine", 0, 0) > t                    # BF16 combine vs FP8 dispatch


def test_skewed_loads_average_one_per_group_and_times_differ_by_stage():
    sc, comm = comm_of(routing_skew=1.5, routing_seed=2)
    for stage in range(sc.run.pp):
        loads = [comm.load_factor(stage, d) for d in sc.layout.group_replicas(0)]
        assert np.mean(loads) == pytest.approx(1.0) and max(loads) > 1.0
    times = {comm.time("dispatch", s, 0) for s in range(sc.run.pp)}
    assert len(times) > 1


def test_measurements_serve_the_same_run_under_another_schedule_only():
    sc, comm = comm_of()
    assert comm.serves(sc.run.with_(schedule="1f1b"), "stage")
    assert not comm.serves(sc.run.with_(microbatches=16), "stage")
    assert not comm.serves(sc.run, "cluster")
    with pytest.raises(SpecError, match="comm scope"):
        CommModel(sc.run, sc.model, sc.links, sc.layout, sc.token_bytes(), scope="rack")
