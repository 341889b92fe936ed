"""sim.training.comm.live: all-to-alls as bundles on the step's fabric among the other traffic."""
import pytest
import simpy

from sim.network import Fabric, sum_loads
from sim.training.comm.live import LiveComm
from sim.training.model.specs import SpecError, load_scenario
from sim.training.scenario import Scenario
from sim.training.step import MoEStep
from topologies import build_from_spec

# 8 nodes on one plane, NICs cabled node by node, leaves of 12 hosts with 4 uplinks (3:1): EP groups
# of 16 GPUs cross the spines, where the pipeline sends and the data-parallel rings also go.
OVERSUBSCRIBED = {"kind": "fat_tree", "gpu": "h800", "nodes": 8, "gpus_per_node": 8, "nvlink_bandwidth_GBps": 160,
                  "nic_bandwidth_GBps": 50, "switch_radix": 16, "oversubscription": 3, "rail_optimized": False,
                  "planes": 1, "name": "small-oversubscribed"}


def scenario(communication: str, ep: int = 8, oversubscribed: bool = True, seq_len: int = 512,
             kernels: str = "ideal") -> Scenario:
    run = load_scenario("tiny", topology="small-oversubscribed" if oversubscribed else "h800-64", pp=4, dp=16, ep=ep,
                        communication=communication, seq_len=seq_len, kernels=kernels)
    return Scenario(run, graph=build_from_spec(dict(OVERSUBSCRIBED)) if oversubscribed else None)


def test_an_all_to_all_alone_takes_its_measured_time():
    step = MoEStep(scenario("live"), "full")
    env = simpy.Environment()
    live = LiveComm(step.comm, step.scenario.layout, Fabric(env, step.scenario.links), representative=False)
    for shape in ("dispatch", "combine"):
        start = env.now
        env.run(live.all_to_all(shape, 1, 0))
        assert env.now - start == pytest.approx(step.comm.time(shape, 1, 0), rel=1e-9)
    assert live.count == 2 and live.slowdown == pytest.approx(1.0, rel=1e-9)


def test_an_all_to_all_beside_a_heavy_transfer_slows_down():
    """Every GPU of an EP group (16 GPUs on 2 nodes) sends 1 GB off its node while the group
    dispatches 8K-token micro-batches (bandwidth-bound: alone it takes about its busiest link's
    bytes / bandwidth): the dispatch shares each NIC with a transfer and takes longer than alone."""
    step = MoEStep(scenario("live", 16, seq_len=8192), "full")
    env = simpy.Environment()
    fabric = Fabric(env, step.scenario.links)
    live = LiveComm(step.comm, step.scenario.layout, fabric, representative=False)
    for gpu in step.scenario.layout.ep_group(1, 0):
        fabric.transfer(gpu, (gpu + 32) % 64, 1e9)
    env.run(live.all_to_all("dispatch", 1, 0))
    assert live.slowdown > 1.02


def test_a_bundle_carries_its_own_ep_group_or_when_representative_every_group_of_its_stage():
    """EP8 on 16 replicas: two EP groups per stage, on different nodes. Every rank: each group's
    bundle is its own group's messages and no faster than that group alone; representative: one
    bundle with both groups' messages (their bytes on each link added), no faster than the stage's
    groups together on an empty fabric."""
    full, rep = (MoEStep(scenario("live", 8), mode) for mode in ("full", "representative"))
    assert full.scenario.layout.groups_per_rank == 2
    env = simpy.Environment()
    fabric = Fabric(env, full.scenario.links)
    own = LiveComm(full.comm, full.scenario.layout, fabric, representative=False)
    every = LiveComm(rep.comm, rep.scenario.layout, fabric, representative=True)

    def as_lists(load):
        return load.links.tolist(), load.link_bytes.tolist()
    for shape in ("dispatch", "combine"):
        loads = [full.comm.load(shape, 1, g) for g in (0, 1)]
        assert as_lists(loads[0]) != as_lists(loads[1])
        for g in (0, 1):
            load, overhead, alone = own._bundle(shape, 1, g)
            assert as_lists(load) == as_lists(loads[g])
            assert (overhead, alone) == (full.comm.overhead(1, g), full.comm.data_time(shape, 1, g))
        load, overhead, alone = every._bundle(shape, 1, 0)
        assert as_lists(load) == as_lists(sum_loads(loads))
        assert alone == rep.comm.data_time(shape, 1, 0) == rep.comm.data_time(shape, 1, 1)


def test_an_all_to_all_with_no_messages_takes_its_kernels_overhead():
    """EP1: each GPU holds every expert, so nothing goes on the wire: a live dispatch or combine
    lasts its kernel's launch and notify (4 + 10 us; no route to cross) and counts as alone."""
    run = load_scenario("tiny", topology="h800-64", pp=4, dp=16, ep=1, communication="live", seq_len=512,
                        kernels="deepep")
    step = MoEStep(Scenario(run), "full")
    assert step.comm.load("dispatch", 1, 0).messages == 0
    env = simpy.Environment()
    live = LiveComm(step.comm, step.scenario.layout, Fabric(env, step.scenario.links), representative=False)
    for shape in ("dispatch", "combine"):
        start = env.now
        env.run(live.all_to_all(shape, 1, 0))
        assert env.now - start == pytest.approx(14e-6, rel=1e-12)
    assert live.count == 2 and live.slowdown == 1.0


@pytest.mark.parametrize("kernels", ["ideal", "deepep"])
@pytest.mark.parametrize("ep", [8, 16])
def test_representative_live_step_matches_the_every_rank_live_step(ep, kernels):
    """Balanced routing: one pipeline whose all-to-alls carry every EP group's messages and whose
    sends go with every replica's gives the step time of simulating every rank: exactly with one
    EP group per stage (EP16); with two (EP8) the every-rank run's groups meet different traffic
    on this non-rail fabric (group 1 ends about 9% after group 0) and the representative, which
    stands for all of them, lands near the slowest (within 0.01% as pure link time, 1.3% with
    the kernels' fixed launch and notify costs, which shift when each group's sends leave)."""
    rep = MoEStep(scenario("live", ep, kernels=kernels), "representative").simulate()
    full = MoEStep(scenario("live", ep, kernels=kernels), "full").simulate()
    tolerance = {16: 1e-12, 8: 1e-4 if kernels == "ideal" else 0.02}[ep]
    assert rep.step_time_s == pytest.approx(full.step_time_s, rel=tolerance)


def test_live_and_measured_differ_where_the_network_is_shared():
    """On the oversubscribed fabric the measured fast path's representative pipeline misses the
    other replicas' sends; live communication has them (and agrees with every rank, above).
    Pure link time (the scenario's default ``ideal`` kernels): what differs is the network."""
    measured = MoEStep(scenario("measured"), "representative").simulate()
    live = MoEStep(scenario("live"), "representative").simulate()
    full_measured = MoEStep(scenario("measured"), "full").simulate()
    assert live.step_time_s > measured.step_time_s * 1.2
    assert live.step_time_s == pytest.approx(full_measured.step_time_s, rel=0.01)
    assert live.summary()["communication"] == "live" and measured.summary()["a2a_slowdown"] == 1.0


def test_live_on_an_uncontended_fabric_is_the_measured_step():
    """h800-64 with EP groups inside a node (ep 8): nothing shares an all-to-all's links."""
    measured = MoEStep(scenario("measured", 8, oversubscribed=False)).simulate()
    live = MoEStep(scenario("live", 8, oversubscribed=False)).simulate()
    assert live.step_time_s == pytest.approx(measured.step_time_s, rel=1e-9)
    assert live.a2a_slowdown == pytest.approx(1.0, rel=1e-9)


def test_live_all_to_alls_and_zero3_gathers_on_an_uncontended_fabric():
    """ZeRO-3 adds per-layer gathers, communication parts that keep their measured times in live
    mode; every dispatch and every combine, forward and backward, of every MoE layer, micro-batch and
    group of pipelines is a live all-to-all; the traced rank's parts are recorded as in measured mode."""
    def run(communication):
        sc = Scenario(load_scenario("tiny", topology="h800-64", pp=4, dp=16, ep=8, communication=communication,
                                    seq_len=512, kernels="ideal", zero_stage=3))
        step = MoEStep(sc, "full")
        return step, step.simulate()
    (_, measured), (step, live) = run("measured"), run("live")
    sc = step.scenario
    moe_layers = sum(c.moe for layers in sc.chunk.stage_layers for c in layers)
    assert step._live.count == sc.layout.groups_per_rank * sc.run.microbatches * moe_layers * 2 * 2
    assert live.step_time_s == pytest.approx(measured.step_time_s, rel=1e-9)
    for a, b in zip(live.ranks, measured.ranks):
        assert (a.compute_s, a.comm_s, a.exposed_comm_s) == pytest.approx((b.compute_s, b.comm_s, b.exposed_comm_s),
                                                                          rel=1e-9)
    assert len(live.part_trace) == len(measured.part_trace) > 0
    assert [(e.seq, e.op, e.stream, e.name) for e in live.part_trace] == \
        [(e.seq, e.op, e.stream, e.name) for e in measured.part_trace]
    assert [e.start for e in live.part_trace] == pytest.approx([e.start for e in measured.part_trace], rel=1e-9)
    assert {"DISPATCH(F)", "COMBINE(B)", "GATHER(F)", "GATHER(B)", "SCATTER(B)"} <= {e.name for e in live.part_trace}


def test_same_inputs_same_live_step_to_the_last_digit():
    a = MoEStep(scenario("live", 16)).simulate().summary()
    b = MoEStep(scenario("live", 16)).simulate().summary()
    assert a == b


def test_live_refuses_the_cluster_scope_and_unknown_modes():
    with pytest.raises(SpecError, match="comm scope 'cluster' is for measured communication"):
        MoEStep(scenario("live"), comm_scope="cluster")
    with pytest.raises(SpecError, match="RunSpec.communication must be one of measured, live, got 'fast'"):
        load_scenario("tiny", communication="fast")


@pytest.mark.parametrize("representative", [False, True], ids=["every-rank", "representative"])
def test_a_bundle_alone_takes_its_floor_with_each_kernel_overhead_once(representative):
    """DeepEP's kernels (launch and notify > 0), two EP groups per stage: on an empty fabric a live
    dispatch or combine lasts exactly its kernel overhead once plus its data phase alone (the
    floor), whether it carries its own group or, representative, both groups (overhead the
    largest of theirs, not their sum; not counted again inside the floor)."""
    step = MoEStep(scenario("live", 8, kernels="deepep"), "representative" if representative else "full")
    assert step.scenario.layout.groups_per_rank == 2
    env = simpy.Environment()
    live = LiveComm(step.comm, step.scenario.layout, Fabric(env, step.scenario.links), representative=representative)
    for shape in ("dispatch", "combine"):
        overhead, data = step.comm.overhead(1, 0), step.comm.data_time(shape, 1, 0)
        assert overhead > 0 and data > 0
        start = env.now
        env.run(live.all_to_all(shape, 1, 0))
        assert env.now - start == pytest.approx(overhead + data, rel=1e-9)
    assert live.slowdown == pytest.approx(1.0, rel=1e-9)
