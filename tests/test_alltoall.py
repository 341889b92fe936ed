"""sim.training.comm.alltoall: all-to-all times measured on the fabric, one unit for all stages when routing is
balanced, per stage under skew; expert loads; reuse across schedules."""
import numpy as np
import pytest
import simpy

from sim.training.comm.alltoall import CommModel, measure_all_to_alls
from sim.training.model.specs import SpecError, load_scenario
from sim.training.scenario import Scenario


def comm_of(**over):
    sc = Scenario(load_scenario("tiny", **over))
    return sc, CommModel(sc.run, sc.model, sc.links, sc.layout, sc.collectives)


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
        CommModel(sc.run, sc.model, sc.links, sc.layout, sc.collectives, scope="rack")


def same_flow_system(links, a: list, b: list) -> bool:
    """Whether the messages ``a`` and ``b`` ([(source GPU, destination GPU, bytes)], in
    corresponding order) are the same flow system up to renaming links: equal bytes and
    :func:`~sim.training.comm.alltoall.same_routes` (what the stage twins rest on)."""
    from sim.training.comm.alltoall import route_signature, same_routes
    if len(a) != len(b) or any(xa != xb for (_, _, xa), (_, _, xb) in zip(a, b)):
        return False
    return same_routes(links, route_signature(links, [(s, d) for s, d, _ in a]),
                       route_signature(links, [(s, d) for s, d, _ in b]))


def test_same_flow_system_up_to_renaming_links():
    """On h800-64 (8 planes, rails) a 16-GPU group on nodes 0-1 and one on nodes 2-3 send the same
    messages over routes alike: the same flow system. On one oversubscribed plane with 12 hosts
    per leaf, nodes 0-1 sit under leaves 0-1 and nodes 2-3 straddle leaves 1-2-... : not the same."""
    from sim.network import Fabric, MoERouting, route_tokens
    from sim.network.loads import all_to_all_messages
    from topologies import build_from_spec, load_topology
    traffic = route_tokens(MoERouting(ep=16, gpus_per_node=8, num_experts=32, topk=4, tokens_per_gpu=64))
    spec = {"kind": "fat_tree", "gpu": "h800", "nodes": 8, "gpus_per_node": 8, "nvlink_bandwidth_GBps": 160,
            "nic_bandwidth_GBps": 50, "switch_radix": 16, "oversubscription": 3, "rail_optimized": False,
            "planes": 1, "name": "one-plane"}
    for graph, same in ((load_topology("h800-64"), True), (build_from_spec(spec), False)):
        links = Fabric(simpy.Environment(), graph).links
        first, second = (all_to_all_messages(list(range(k, k + 16)), traffic, 100.0) for k in (0, 16))
        assert same_flow_system(links, first, first)
        assert same_flow_system(links, first, second) is same
    more = [(s, d, x + 1) for s, d, x in first]
    assert not same_flow_system(links, first, more) and not same_flow_system(links, first, first[:-1])


def test_balanced_stages_placed_differently_are_measured_each():
    """EP groups of 16 GPUs on one oversubscribed plane (12 hosts per leaf, NICs node by node):
    stage 0's groups sit under their own leaves, stage 1's straddle leaves, so stage 0 cannot stand
    for stage 1 and each is measured; on h800-64 every stage is alike and stage 0 stands for all."""
    from topologies import build_from_spec
    spec = {"kind": "fat_tree", "gpu": "h800", "nodes": 8, "gpus_per_node": 8, "nvlink_bandwidth_GBps": 160,
            "nic_bandwidth_GBps": 50, "switch_radix": 16, "oversubscription": 3, "rail_optimized": False,
            "planes": 1, "name": "one-plane"}
    for graph, topology in ((build_from_spec(spec), "one-plane"), (None, "h800-64")):
        sc = Scenario(load_scenario("tiny", topology=topology, pp=4, dp=16, ep=16), graph=graph)
        comm = CommModel(sc.run, sc.model, sc.links, sc.layout, sc.collectives)
        times = [comm.time("dispatch", s, 0) for s in range(4)]
        twins = [comm._twin_stage(s) for s in range(4)]
        if graph is None:
            assert twins == [0, 0, 0, 0] and len(set(times)) == 1
        else:
            assert twins[1] != 0 and times[1] != times[0]


def test_a_twin_stage_s_loads_are_its_twin_s_renamed_bit_for_bit():
    """Live bundles' link loads: a stage that stage 0 stands for (h800-64) gets stage 0's loads
    with the links renamed, equal to those computed from its own messages in every number; a stage
    placed differently (the one-plane cluster above) has its loads computed from its messages."""
    from sim.network import all_to_all_load
    from topologies import build_from_spec
    spec = {"kind": "fat_tree", "gpu": "h800", "nodes": 8, "gpus_per_node": 8, "nvlink_bandwidth_GBps": 160,
            "nic_bandwidth_GBps": 50, "switch_radix": 16, "oversubscription": 3, "rail_optimized": False,
            "planes": 1, "name": "one-plane"}
    for graph, topology in ((None, "h800-64"), (build_from_spec(spec), "one-plane")):
        sc = Scenario(load_scenario("tiny", topology=topology, pp=4, dp=16, ep=16), graph=graph)
        comm = CommModel(sc.run, sc.model, sc.links, sc.layout, sc.collectives)
        for shape in ("dispatch", "combine"):
            for stage in range(4):
                for g in range(sc.layout.groups_per_rank):
                    got = comm.load(shape, stage, g)
                    own = all_to_all_load(sc.links, sc.layout.ep_group(stage, g), comm.traffic(stage, g),
                                          sc.token_bytes()[shape], sc.run.a2a_algorithm, shape)
                    assert got.links.tolist() == own.links.tolist() and got.link_bytes.tolist() == own.link_bytes.tolist()
                    assert (got.injected, got.messages, got.latency) == (own.injected, own.messages, own.latency)
                    assert stage == 0 or got.links.tolist() != comm.load(shape, 0, g).links.tolist()
        assert [comm._twin_stage(s) for s in range(4)] == ([0, 0, 0, 0] if graph is None else [0, 1, 2, 3])


def test_cluster_scope_batches_scattered_completions_within_the_window():
    """Every stage's EP groups at once on one oversubscribed plane meet on shared links each in its
    own way, so their flows end at scattered times: the cluster scope finishes flows due within
    1e-3 of the elapsed time together, which moves each group's time by at most that fraction of
    the exact (window 0) measurement. Balanced stage-scope measurements stay exact."""
    from sim.training.comm.alltoall import SCATTERED_WINDOW
    from topologies import build_from_spec
    spec = {"kind": "fat_tree", "gpu": "h800", "nodes": 8, "gpus_per_node": 8, "nvlink_bandwidth_GBps": 160,
            "nic_bandwidth_GBps": 50, "switch_radix": 16, "oversubscription": 3, "rail_optimized": False,
            "planes": 1, "name": "one-plane"}
    sc = Scenario(load_scenario("tiny", topology="one-plane", pp=4, dp=16, ep=16), graph=build_from_spec(spec))
    cluster = CommModel(sc.run, sc.model, sc.links, sc.layout, sc.collectives, scope="cluster")
    stage = CommModel(sc.run, sc.model, sc.links, sc.layout, sc.collectives)
    assert cluster.completion_window == SCATTERED_WINDOW == 1e-3 and stage.completion_window == 0.0
    groups = [(sc.layout.ep_group(s, g), cluster.traffic(s, g)) for s in range(4)
              for g in range(sc.layout.groups_per_rank)]
    args = (sc.token_bytes()["combine"], "hierarchical", "combine", sc.run.a2a_chunks)
    exact, _ = measure_all_to_alls(sc.links, groups, *args, 0.0, cluster._gpu_rate)
    got = [cluster.data_time("combine", s, g) for s in range(4) for g in range(sc.layout.groups_per_rank)]
    assert got != exact                                       # the window moved a time ...
    assert np.allclose(got, exact, rtol=1e-3, atol=0)         # ... by less than its width


def test_the_comm_model_measures_the_scenarios_all_to_all_shapes_only():
    """It reads the shapes from the scenario: dispatch and combine are its to measure; a collective
    of another kind (a tensor-parallel all-reduce, say) is not, and is left to whoever models it."""
    from sim.training.comm.collective_shapes import CollectiveShape
    sc = Scenario(load_scenario("tiny"))
    extra = CollectiveShape("tp_all_reduce", "tp", "ring", 2.0)
    comm = CommModel(sc.run, sc.model, sc.links, sc.layout, (*sc.collectives, extra))
    assert comm.measures("dispatch") and comm.measures("combine") and not comm.measures("tp_all_reduce")
    assert comm.token_bytes == sc.token_bytes() == {"dispatch": 256 + 4 * 2, "combine": 2 * 256}
    comm.measure_all()                                  # the extra shape is not measured (nor refused)
    assert comm.time("dispatch", 0, 0) > 0 and comm.time("combine", 0, 0) > 0


def test_times_alone_are_the_analytical_networks_and_below_the_max_min_fabrics():
    """``alone``: each stage's all-to-alls from the closed form (no network run, no link statistics)
    take what the analytical network measures, and no longer than the max-min fabric's, where
    every EP group of the stage shares the NICs."""
    sc = Scenario(load_scenario("tiny", dp=4, ep=4, node_limit=None))
    analytical = sc.run.with_(network="analytical")
    alone = CommModel(analytical, sc.model, sc.links, sc.layout, sc.collectives, kernels=sc.kernels, alone=True)
    measured = CommModel(analytical, sc.model, sc.links, sc.layout, sc.collectives, kernels=sc.kernels)
    maxmin = CommModel(sc.run, sc.model, sc.links, sc.layout, sc.collectives, kernels=sc.kernels)
    for shape in ("dispatch", "combine"):
        for stage in range(sc.run.pp):
            t = alone.time(shape, stage, 0)
            assert t == pytest.approx(measured.time(shape, stage, 0), rel=1e-12)
            assert 0 < t <= maxmin.time(shape, stage, 0)
    assert alone.link_frames == {}
