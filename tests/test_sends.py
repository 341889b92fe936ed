"""sim.training.comm.sends: a pipeline send's bound inside a node, by hand, and where a step uses it."""
import networkx as nx
import numpy as np
import pytest
import simpy

from sim.network import Fabric, LinkTable
from sim.training.comm.sends import node_nvlink_GBps, pipeline_channels, pipeline_send_rate, same_node, send_bound
from sim.training.costs.stagecosts import send_seconds
from sim.training.model.specs import load_scenario
from sim.training.scenario import Scenario
from sim.training.step import MoEStep
from topologies import load_topology
from validation.predict import run_spec
from validation.suite import load_runs

SM_GBPS = 10.5          # the deepep kernels' copy rate of an SM


def zb_scenario(run_id="zb-t4-1.5b-m24-1f1b") -> Scenario:
    return Scenario(run_spec({r.id: r for r in load_runs()}[run_id]))


def test_zero_bubbles_one_node_sends_on_four_channels_at_42_gbps():
    """8 stages on one A100 node (300 GB/s NVLink): 4 channels x 10.5 GB/s; 6 x 1,024 tokens x 2,304
    x 2 bytes = 28.3 MB take 0.674 ms, where the paper's Table 9 profiled 0.601-0.762 ms."""
    sc = zb_scenario()
    nbytes = sc.chunk.activation_bytes()
    assert nbytes == 6 * 1024 * 2304 * 2
    assert node_nvlink_GBps(sc.links, 8) == 300.0
    assert pipeline_channels(sc.layout, sc.links, sc.kernels, nbytes) == 4
    assert sc.send_rate == 42e9                                          # exactly: channels x GB/s x 1e9
    assert pipeline_send_rate(sc.layout, sc.links, sc.kernels, 200e6) == pytest.approx(16 * SM_GBPS * 1e9)
    assert nbytes / sc.send_rate == pytest.approx(0.000674, abs=1e-6)


def test_a_group_over_two_nodes_bounds_its_sends_inside_a_node_at_two_channels():
    sc = zb_scenario("zb-t4-14.6b-m48-1f1b")                 # 16 stages over two 8-GPU nodes
    assert sc.send_rate == pytest.approx(2 * SM_GBPS * 1e9)


def test_no_bound_without_an_sm_rate_or_a_pipeline():
    assert Scenario(load_scenario("tiny")).send_rate is None                       # kernels: ideal
    assert Scenario(load_scenario("tiny", kernels="deepep")).send_rate == pytest.approx(2 * SM_GBPS * 1e9)
    assert Scenario(load_scenario("tiny", kernels="deepep", pp=1, dp=16, ep=16, schedule="1f1b")).send_rate is None
    two = Scenario(load_scenario("tiny", kernels="deepep", pp=2, dp=8, ep=8, schedule="1f1b"))     # over 2 nodes
    assert two.send_rate == pytest.approx(2 * SM_GBPS * 1e9)
    # two stages of one node: 16 channels (16 x 2 ranks <= 32), 168 GB/s, above H800's 160 GB/s NVLink
    one = Scenario(load_scenario("tiny", kernels="deepep", pp=2, dp=4, ep=4, schedule="1f1b"))
    assert one.layout.gpu(1, 0) == 4 and one.send_rate == pytest.approx(16 * SM_GBPS * 1e9)


def test_nvlink_between_two_gpus_of_a_node_or_none():
    assert node_nvlink_GBps(LinkTable(load_topology("h800-node")), 8) == 160.0
    assert node_nvlink_GBps(LinkTable(load_topology("h800-node")), 1) is None
    g = nx.Graph()
    for n in ("a", "b", "sw"):
        g.add_node(n, type="gpu" if n != "sw" else "switch")
    g.add_edge("a", "sw", bandwidth=32e9, latency=1e-6, kind="pcie")
    g.add_edge("b", "sw", bandwidth=32e9, latency=1e-6, kind="pcie")
    g.graph["gpus"] = ["a", "b"]
    assert node_nvlink_GBps(LinkTable(g), 2) is None
    pair = nx.Graph()                                       # two GPUs, one NVLink between them
    pair.add_edge("a", "b", bandwidth=100e9, latency=1e-6, kind="nvlink")
    for n in ("a", "b"):
        pair.nodes[n]["type"] = "gpu"
    pair.graph["gpus"] = ["a", "b"]
    assert node_nvlink_GBps(LinkTable(pair), 2) == 100.0
    one = nx.Graph()                                        # a job given one GPU of an 8-GPU node
    one.add_node("a", type="gpu")
    one.graph["gpus"] = ["a"]
    assert node_nvlink_GBps(LinkTable(one), 8) is None


def test_same_node_and_the_bound_a_send_takes():
    assert same_node(0, 7, 8) and not same_node(7, 8, 8) and same_node(9, 15, 8)
    assert send_bound(0, 7, 8, 42e9) == 42e9 and send_bound(7, 8, 8, 42e9) is None and send_bound(0, 1, 8, None) is None


def test_the_zero_bubble_search_reads_the_bound_send():
    """send_seconds: inside a node bytes / min(route, bound) + latency; across nodes the route's."""
    sc = zb_scenario()
    nbytes = sc.chunk.activation_bytes()
    _, latency = sc.links.route(0, 1)
    assert send_seconds(sc.graph, sc.layout, nbytes, sc.send_rate) == pytest.approx(nbytes / 42e9 + latency)
    assert send_seconds(sc.graph, sc.layout, nbytes) == pytest.approx(nbytes / 300e9 + latency)
    tiny = Scenario(load_scenario("tiny", kernels="deepep", pp=8, dp=2, ep=2, schedule="1f1b"))
    assert tiny.layout.gpu(1, 0) == 2                                       # ranks 0 and 1 share node 0
    assert send_seconds(tiny.graph, tiny.layout, 1e6, 1e9) > send_seconds(tiny.graph, tiny.layout, 1e6)


def test_a_step_lands_a_send_inside_a_node_at_the_bound_and_one_across_at_the_nic():
    """tiny with the deepep kernels (PP4 x DP4 on two 8-GPU nodes): ranks 0 and 1 share node 0, ranks 1
    and 2 do not. Each replica's 262,144-byte send from rank 0 to 1 lands at launch + latency +
    bytes / 21 GB/s (2 channels: the group spans 2 nodes), replicas on links of their own; from
    rank 1 to 2 at the NIC's 50 GB/s."""
    step = MoEStep(Scenario(load_scenario("tiny", kernels="deepep")), "full")
    env = simpy.Environment()
    fabric = Fabric(env, step.scenario.links, gpu_rate=step.scenario.kernels.nccl_gpu_rate)
    runner = step.runners(fabric)[0]
    layout, n, nbytes = step.scenario.layout, len(runner.replicas), 262144.0
    launch = runner.send_launch_s
    for src, dst, rate in ((0, 1, 21e9), (1, 2, 50e9)):
        a, b = layout.gpus_of(src, runner.replicas), layout.gpus_of(dst, runner.replicas)
        key = ("probe", src)
        runner.arrivals[key] = np.full(n, float(env.now))
        start = env.now
        env.run(runner._send(env, src, dst, key))
        latency = np.array([fabric.links.route(int(x), int(y))[1] for x, y in zip(a, b)])
        assert runner.arrivals[key] == pytest.approx(start + launch + latency + nbytes / rate, rel=1e-12)


def test_a_representative_live_send_bounds_only_the_replicas_inside_a_node(tmp_path):
    """tiny live, PP2 x DP6 x EP2 (12 GPUs of two 8-GPU nodes), kernels at 2 GB/s an SM: stage 0 is
    GPUs 0-5, stage 1 GPUs 6-11, so replicas 0 and 1 send inside node 0 (16 channels for two ranks of
    one node: 32 GB/s, under NVLink's 160) and replicas 2-5 cross to node 1 (the NIC's 50 GB/s,
    by the send bound; the NCCL engine's 24 SMs x 2 GB/s = 48 GB/s, without deepep's calibrated
    nccl_GBps, binds before the NIC's 50). Replica 0's EP group (replicas 0 and 1) has its input at
    launch + latency + bytes / 32 GB/s; replica 2's send keeps its NIC busy bytes / 48 GB/s."""
    import yaml

    from sim.training.model.specs import load_presets
    path = tmp_path / "slow-sms.yaml"
    path.write_text(yaml.safe_dump({**{k: v for k, v in load_presets("kernels")["deepep"].items()
                                       if k not in ("description", "nccl_GBps")}, "sm_GBps": 2.0}))
    run = load_scenario("tiny", kernels=str(path), pp=2, dp=6, ep=2, schedule="1f1b", communication="live")
    step = MoEStep(Scenario(run), "representative")
    env = simpy.Environment()
    fabric = Fabric(env, step.scenario.links, gpu_rate=step.scenario.kernels.nccl_gpu_rate)
    runner = step.runners(fabric)[0]
    assert runner.send_rate == 32e9 and step.scenario.layout.gpu(1, 0) == 6
    env.run(env.process(runner._send_all(env, 0, 1, ("probe",), np.array([0.0]))))
    nbytes = runner.chunk.activation_bytes()
    latency = fabric.links.route(0, 6)[1]
    assert runner.arrivals[("probe",)][0] == pytest.approx(runner.send_launch_s + latency + nbytes / 32e9, rel=1e-12)
    env.run()
    nic, _ = fabric.links.route(2, 8)
    assert fabric.link_busy_s[nic].max() == pytest.approx(nbytes / 48e9, rel=1e-9)


def test_under_jitter_the_send_grid_is_a_bound_sends_own_time():
    """tiny with the deepep kernels under kernel jitter: sends from rank 0 to 1 (one node) take
    262,144 bytes / 21 GB/s alone, so that is their grid (under the 1 ms default); rank 1 to 2 crosses
    to the other node at the NIC's 50 GB/s."""
    step = MoEStep(Scenario(load_scenario("tiny", kernels="deepep").with_(faults={"jitter_cv": 0.05})), "full")
    env = simpy.Environment()
    fabric = Fabric(env, step.scenario.links, gpu_rate=step.scenario.kernels.nccl_gpu_rate)
    runner = step.runners(fabric)[0]
    gpus = step.scenario.layout.gpus_of
    grids = [runner._grid(a, b, gpus(a, runner.replicas).tolist(), gpus(b, runner.replicas).tolist(), 262144.0)
             for a, b in ((0, 1), (1, 2))]
    assert grids == pytest.approx([262144 / 21e9, 262144 / 50e9], rel=1e-12)
