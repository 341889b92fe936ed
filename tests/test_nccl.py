"""NCCL's ring model (sim/network/nccl.py) by hand, and the rings on the fabric that use it."""
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.checks import InputError
from sim.network import (
    Fabric,
    hierarchical_all_gather,
    hierarchical_reduce_scatter,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
)
from sim.network.collectives import hop_hardware, nccl_ring_cost
from sim.network.nccl import (
    NVLS,
    NVLS_LATENCY_US,
    PROTOCOLS,
    RING,
    TREE,
    check_protocol,
    log2i,
    nvls_applies,
    nvls_port_bytes,
    protocol_factor,
    ring_cost,
    ring_latency_s,
    ring_protocol,
    ring_steps,
    tree_applies,
    tree_factor,
    tree_latency_s,
)
from sim.training.model.specs import SpecError, load_scenario
from topologies import load_topology


def fabric(topo="h800-16"):
    env = simpy.Environment()
    return env, Fabric(env, load_topology(topo))


def run_ring(op, ranks, nbytes, protocol, topo="h800-16", **kw):
    env, fab = fabric(topo)
    done = op(fab, ranks, nbytes, protocol=protocol, **kw)
    env.run(until=done)
    return env.now, fab


# --- NCCL's formulas, worked by hand (NCCL 2.20.3, src/graph/tuning.cc) ----------------------------

def test_steps_of_each_collective():
    assert ring_steps("all_gather", 16, 2) == (15, 1)
    assert ring_steps("reduce_scatter", 8, 1) == (7, 0)
    assert ring_steps("all_reduce", 16, 2) == (30, 4)      # 2 (n - 1) steps, 2 N of them over the network
    assert ring_steps("all_reduce", 8, 1) == (14, 0)


def test_latency_by_hand():
    # one node, LL: 6.6 + 7 x 0.6 us
    assert ring_latency_s("all_gather", "LL", 8, 1) == pytest.approx(10.8e-6)
    # two nodes, Simple: 8.4 + 14 x max(3.4, 3 x 1.0) + 1 x 14.0 us
    assert ring_latency_s("all_gather", "Simple", 16, 2) == pytest.approx(70.0e-6)
    # all-reduce over two nodes, Simple: 8.4 + 26 x 3.4 + 4 x 14.0 us
    assert ring_latency_s("all_reduce", "Simple", 16, 2) == pytest.approx(152.8e-6)
    # several nodes, LL: an in-node step pays the host's 1 us post overhead, not LL's 0.6 us
    assert ring_latency_s("reduce_scatter", "LL", 16, 2) == pytest.approx((6.6 + 14 * 1.0 + 2.7) * 1e-6)
    # PCIe inside the node, LL128: 14.0 + 7 x 2.5 us
    assert ring_latency_s("all_gather", "LL128", 8, 1, intra="pci") == pytest.approx(31.5e-6)
    assert ring_latency_s("all_gather", "Simple", 1, 1) == 0.0


def test_protocol_shares():
    assert protocol_factor("all_gather", "Simple", 1, 8, 200.0) == 1.0
    assert protocol_factor("all_gather", "LL", 1, 8, 200.0) == pytest.approx(1 / 3)       # one node
    assert protocol_factor("all_reduce", "LL", 1, 8, 200.0) == pytest.approx(1 / 4)
    assert protocol_factor("all_gather", "LL", 2, 16, 100.0) == pytest.approx(1 / 4)
    assert protocol_factor("all_gather", "LL", 2, 16, 200.0) == pytest.approx(39.0 / 200)   # capped: 2 nodes
    assert protocol_factor("all_gather", "LL", 4, 32, 400.0) == pytest.approx(20.4 / 400)  # LL's bus cap
    assert protocol_factor("all_gather", "LL128", 2, 16, 200.0) == pytest.approx(0.92)
    assert protocol_factor("all_gather", "LL128", 4, 4, 200.0) == pytest.approx(0.7)      # one GPU a node
    assert protocol_factor("all_gather", "LL128", 2, 4, 200.0) == pytest.approx(0.92)     # two GPUs a node


def test_the_hosts_post_overhead_binds_where_it_exceeds_a_step(monkeypatch):
    import sim.network.nccl as nccl
    monkeypatch.setattr(nccl, "NET_OVERHEAD_US", 2.0)       # Simple pays it 3 times: 6 us > 3.4 us a step
    assert nccl.ring_latency_s("all_gather", "Simple", 16, 2) == pytest.approx((8.4 + 14 * 6.0 + 14.0) * 1e-6)
    assert nccl.ring_latency_s("all_gather", "LL", 16, 2) == pytest.approx((6.6 + 14 * 2.0 + 2.7) * 1e-6)


def test_auto_takes_ll_for_small_buffers_and_simple_for_large():
    assert ring_cost("all_reduce", 1e3, 8, 1, 200.0).protocol == "LL"
    assert ring_cost("all_reduce", 1e9, 8, 1, 200.0).protocol == "Simple"
    assert ring_cost("all_gather", 1e10, 256, 32, 200.0).protocol == "Simple"
    # over 32 nodes a 1 GB all-gather goes LL128: its 224 in-node steps cost 1.9 us, not 3.4
    assert ring_cost("all_gather", 1e9, 256, 32, 200.0).protocol == "LL128"
    middle = ring_cost("all_reduce", 1e7, 8, 1, 200.0)
    assert middle.protocol == "LL128" and middle.bandwidth_factor == pytest.approx(0.92)
    # LL128 runs only where a node's GPUs talk over NVLink
    assert ring_cost("all_reduce", 1e7, 8, 1, 200.0, intra="pci").protocol != "LL128"
    assert ring_cost("all_reduce", 1e9, 8, 1, 200.0, intra="pci").protocol == "Simple"   # past LL128, not stopped at it
    assert ring_cost("all_reduce", 1e3, 8, 1, 200.0, "Simple").protocol == "Simple"   # forced, as NCCL_PROTO


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter"]), ranks=st.integers(2, 4096),
       per_node=st.sampled_from([1, 2, 4, 8]), nbytes=st.floats(1.0, 1e11), bus=st.floats(1.0, 1000.0))
def test_auto_is_the_quickest_by_ncclss_estimate(kind, ranks, per_node, nbytes, bus):
    nodes = max(1, ranks // per_node)
    steps, _ = ring_steps(kind, ranks, nodes)

    def estimate(cost):
        if cost.algorithm == TREE:
            return cost.latency_s + 2 * nbytes / (bus * 1e9 * cost.bandwidth_factor)
        return cost.latency_s + nbytes * steps / (bus * 1e9 * cost.bandwidth_factor * ranks)
    chosen = ring_cost(kind, nbytes, ranks, nodes, bus)
    best = estimate(chosen)
    for p in PROTOCOLS:
        assert best <= estimate(ring_cost(kind, nbytes, ranks, nodes, bus, p)) * (1 + 1e-12)
        if tree_applies(kind, ranks, nodes):
            tree = tree_latency_s(p, ranks, nodes) + 2 * nbytes / (bus * 1e9 * tree_factor(p, nbytes, nodes, bus))
            assert best <= tree * (1 + 1e-12)
    assert chosen.algorithm == RING or tree_applies(kind, ranks, nodes)
    # more ranks never cost less latency
    assert ring_latency_s(kind, "Simple", ranks + 1, nodes) >= ring_latency_s(kind, "Simple", ranks, nodes)


def test_bad_protocols_are_one_clear_line():
    with pytest.raises(InputError, match=r"nccl_protocol must be one of auto, LL, LL128, Simple, none, got 'll'"):
        check_protocol("ll")
    with pytest.raises(SpecError, match=r"RunSpec.nccl_protocol must be one of .*got 'simple'"):
        load_scenario("tiny", nccl_protocol="simple")
    with pytest.raises(InputError, match="kind must be one of all_reduce, all_gather, reduce_scatter, got 'broadcast'"):
        ring_steps("broadcast", 8, 1)
    with pytest.raises(InputError, match="spans 1 to 8 nodes, got 9"):
        ring_steps("all_gather", 8, 9)
    with pytest.raises(InputError, match="nvlink or pci"):
        ring_cost("all_gather", 1e6, 8, 1, 100.0, intra="ib")
    with pytest.raises(InputError, match="bus bandwidth must be above 0 GB/s and finite, got 0.0"):
        ring_cost("all_gather", 1e6, 8, 1, 0.0)
    with pytest.raises(InputError, match="finite, got inf"):
        ring_cost("all_gather", 1e6, 8, 1, float("inf"))
    with pytest.raises(InputError, match="spans 1 to 2 nodes, got 3"):
        ring_cost("all_gather", 1e6, 2, 3, 100.0)
    with pytest.raises(InputError, match="got 'none'"):
        ring_cost("all_gather", 1e6, 8, 1, 100.0, "none")
    assert ring_protocol("none") is None and ring_protocol("LL") == "LL"


# --- the rings on the fabric ------------------------------------------------------------------------

def test_hop_hardware_of_the_preset():
    _, fab = fabric()
    assert hop_hardware(fab, 0, 1) == "nvlink"
    assert hop_hardware(fab, 0, 8) == "net"


@pytest.mark.parametrize("op, kind", [(ring_all_reduce, "all_reduce"), (ring_all_gather, "all_gather"),
                                      (ring_reduce_scatter, "reduce_scatter")])
@pytest.mark.parametrize("protocol", ["Simple", "LL", "LL128"])
def test_a_ring_ends_at_ncclss_latency_plus_its_data(op, kind, protocol):
    """On an empty fabric: the time of the fabric alone on the protocol's wire bytes, plus NCCL's
    latency less the per-step latency the fabric charged (never less than the fabric's)."""
    ranks, nbytes = list(range(8)), 4e8
    t, fab = run_ring(op, ranks, nbytes, protocol)
    cost, charged = nccl_ring_cost(fab, kind, ranks, nbytes, protocol)
    assert cost.protocol == protocol
    alone, _ = run_ring(op, ranks, nbytes / cost.bandwidth_factor, None)
    assert t == pytest.approx(alone + max(0.0, cost.latency_s - charged), rel=1e-12)
    if protocol == "Simple":                     # NCCL's 56 us over 14 steps of 3.3 us: 9.8 us more
        assert t - alone == pytest.approx((8.4 + 14 * 3.4 - 14 * 3.3) * 1e-6 if kind == "all_reduce" else
                                          max(0.0, (8.4 + 7 * 3.4 - 7 * 3.3) * 1e-6), rel=1e-9)


@pytest.mark.parametrize("op, gather", [(hierarchical_all_gather, True), (hierarchical_reduce_scatter, False)])
def test_a_hierarchical_collective_pays_ncclss_flat_ring_latency(op, gather):
    """16 GPUs on 2 nodes: NCCL's latency of its flat ring (15 steps, 1 over the network) less the
    in-node ring's 7 steps and the rails' 1 step the fabric charged."""
    ranks, nbytes = list(range(16)), 2e9
    env, fab = fabric()
    done = op(fab, ranks, nbytes, 8, "Simple")
    env.run(until=done)
    env0, fab0 = fabric()
    done0 = op(fab0, ranks, nbytes, 8)
    env0.run(until=done0)
    intra, inter = fab.links.route(0, 1)[1], fab.links.route(0, 8)[1]
    assert env.now - env0.now == pytest.approx(70.0e-6 - 7 * intra - inter, rel=1e-9)
    env1, fab1 = fabric()                                 # a single byte pays NCCL's latency too
    env1.run(until=op(fab1, ranks, 1.0, 8, "Simple"))
    env3, fab3 = fabric()
    env3.run(until=op(fab3, ranks, 1.0, 8))
    assert env1.now - env3.now == pytest.approx(70.0e-6 - 7 * intra - inter, rel=1e-6)
    env2, fab2 = fabric()                                 # auto takes Simple at 2 GB: the same time
    env2.run(until=op(fab2, ranks, nbytes, 8, "auto"))
    assert env2.now == env.now


def test_a_small_all_reduce_runs_ll_at_a_quarter_of_the_bandwidth():
    ranks = list(range(8))
    t_auto, fab = run_ring(ring_all_reduce, ranks, 1e5, "auto")
    cost, charged = nccl_ring_cost(fab, "all_reduce", ranks, 1e5, "auto")
    assert cost.protocol == "LL" and cost.bandwidth_factor == pytest.approx(0.25)
    t_wire, _ = run_ring(ring_all_reduce, ranks, 4e5, None)
    assert t_auto == pytest.approx(t_wire + max(0.0, cost.latency_s - charged), rel=1e-12)


def test_a_run_passes_its_protocol_to_its_data_parallel_collectives():
    from sim.training.dpsync import LayerCollectives
    from sim.training.scenario import Scenario
    base = load_scenario("tiny", schedule="1f1b", zero_stage=3, kernels="deepep")
    times = {p: LayerCollectives(Scenario(base.with_(nccl_protocol=p))).time("gather:dense")
             for p in ("none", "Simple", "LL")}
    assert times["Simple"] > times["none"]          # NCCL's 8.4 us base and 3.4 us steps over the fabric's
    assert times["LL"] != times["Simple"]


def test_the_collective_commands_protocols_are_the_runs():
    """``collective --nccl-protocol`` lists its choices without importing the network (start-up
    time); they must stay NCCL's."""
    import argparse

    from sim.cli.collective import add_arguments
    from sim.network.nccl import CHOICES
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    (action,) = [a for a in parser._actions if a.dest == "nccl_protocol"]
    assert tuple(action.choices) == CHOICES


# --- NVLS: an all-reduce that the node's NVSwitch reduces -----------------------------------------

def nvls_node(tmp_path, nvls=True, gpus=8):
    path = tmp_path / "node.yaml"
    path.write_text(f"kind: hgx_node\ngpus_per_node: {gpus}\nnvlink_bandwidth_GBps: 450\nnvls: {str(nvls).lower()}\n")
    return str(path)


def test_nvls_port_bytes_by_hand():
    assert nvls_port_bytes(8e6, 8) == pytest.approx(9e6)          # S (n + 1) / n: 1.125 S against a ring's 1.75 S
    assert nvls_port_bytes(8e6, 4) == pytest.approx(10e6)


@pytest.mark.parametrize("kind, ranks, nodes, intra, nvls, applies", [
    ("all_reduce", 8, 1, "nvlink", True, True),
    ("all_reduce", 3, 1, "nvlink", True, True),
    ("all_reduce", 2, 1, "nvlink", True, False),        # a 2-GPU ring moves no more than NVLS
    ("all_reduce", 8, 1, "nvlink", False, False),       # no NVLink SHARP in the switch
    ("all_reduce", 16, 2, "nvlink", True, False),       # over nodes: NVLS-tree, not modelled
    ("all_reduce", 8, 1, "pci", True, False),
    ("all_gather", 8, 1, "nvlink", True, False),        # NCCL's estimate keeps rings for these in a node
    ("reduce_scatter", 8, 1, "nvlink", True, False),
])
def test_where_nvls_applies(kind, ranks, nodes, intra, nvls, applies):
    assert nvls_applies(kind, ranks, nodes, intra, nvls) is applies


def test_auto_takes_nvls_where_its_estimate_wins():
    """8 GPUs at 450 GB/s: LL (15 us + 1.75 S at 87.7 GB/s) up to about 0.45 MB, then NVLS (23 us +
    1.125 S at 450 GB/s); a named protocol keeps the ring, as NCCL_ALGO=Ring does."""
    assert ring_cost("all_reduce", 1e5, 8, 1, 450.0, nvls=True).protocol == "LL"
    big = ring_cost("all_reduce", 1e6, 8, 1, 450.0, nvls=True)
    assert big.protocol == NVLS and big.latency_s == pytest.approx(NVLS_LATENCY_US * 1e-6)
    assert (big.algorithm, big.bandwidth_factor) == (NVLS, 1.0)          # its port bytes at the whole bus
    assert ring_cost("all_reduce", 1e6, 8, 1, 450.0).protocol != NVLS
    assert ring_cost("all_reduce", 1e9, 8, 1, 450.0, "Simple", nvls=True).protocol == "Simple"
    crossover = (NVLS_LATENCY_US - (6.6 + 14 * 0.6)) * 1e-6 / (1.75 / 87.7e9 - 1.125 / 450e9)
    assert ring_cost("all_reduce", 0.99 * crossover, 8, 1, 450.0, nvls=True).protocol == "LL"
    assert ring_cost("all_reduce", 1.01 * crossover, 8, 1, 450.0, nvls=True).protocol == NVLS


@pytest.mark.parametrize("n", [4, 8])
def test_an_nvls_all_reduce_ends_at_ncclss_latency_plus_its_port_bytes(tmp_path, n):
    """Alone on an NVLS node: 23 us, then S (n + 1) / n bytes through each GPU's port at its
    bandwidth (the fabric's two steps of route latency fit inside NCCL's 23 us)."""
    topo, nbytes = nvls_node(tmp_path), 1e9
    t, fab = run_ring(ring_all_reduce, list(range(n)), nbytes, "auto", topo)
    cost, charged = nccl_ring_cost(fab, "all_reduce", list(range(n)), nbytes, "auto")
    assert cost.protocol == NVLS and charged == pytest.approx(2 * fab.links.route(0, 1)[1]) and charged < 23e-6
    assert t == pytest.approx(23e-6 + nvls_port_bytes(nbytes, n) / 450e9, rel=1e-9)
    ring, _ = run_ring(ring_all_reduce, list(range(n)), nbytes, "Simple", topo)
    assert t < ring                              # 1.125 S against 1.75 S at n = 8
    flat, _ = run_ring(ring_all_reduce, list(range(n)), nbytes, "auto", nvls_node(tmp_path, nvls=False))
    assert flat == pytest.approx(ring)          # without NVLink SHARP: the ring, Simple at 1 GB


def test_the_presets_say_where_nvls_is():
    assert load_topology("dgx-h100-superpod").graph["nvls"] is True
    assert load_topology("dgx-b200").graph["nvls"] is True
    assert load_topology("dgx-a100-superpod").graph["nvls"] is False     # second-generation NVSwitch
    assert load_topology("h800-16").graph["nvls"] is False               # no public source says it runs NVLS


def test_a_two_gpu_ring_pays_ncclss_latency():
    assert ring_latency_s("all_gather", "LL", 2, 1) == pytest.approx((6.6 + 0.6) * 1e-6)
    assert ring_latency_s("all_reduce", "Simple", 2, 1) == pytest.approx((8.4 + 2 * 3.4) * 1e-6)
    assert ring_latency_s("all_gather", "LL", 1, 1) == 0.0


def test_a_tie_goes_to_the_first_protocol_as_in_nccl(monkeypatch):
    """With every protocol's latency made equal, an empty buffer ties them all: LL, the first, wins."""
    import sim.network.nccl as nccl
    monkeypatch.setattr(nccl, "RING_BASE_US", {p: 5.0 for p in PROTOCOLS})
    monkeypatch.setattr(nccl, "RING_STEP_US", {hw: {p: 1.0 for p in PROTOCOLS} for hw in ("nvlink", "pci", "net")})
    assert ring_cost("all_gather", 0.0, 8, 1, 450.0).protocol == "LL"


# --- the tree: an all-reduce over nodes (NCCL 2.20.3, tuning.cc) ----------------------------------

def test_log2i_as_nccls():
    assert [log2i(n) for n in (0, 1, 2, 3, 4, 7, 8, 255, 256)] == [0, 0, 1, 1, 2, 2, 3, 7, 8]


def test_tree_latency_by_hand():
    """256 GPUs on 32 nodes: base + 2 ((8 - 1) in-node steps + log2 32 = 5 network steps)."""
    assert tree_latency_s("Simple", 256, 32) == pytest.approx(2 * (7 * 28 + 5 * 28) * 1e-6)
    assert tree_latency_s("LL", 256, 32) == pytest.approx((6.8 + 2 * (7 * 0.6 + 5 * 5.0)) * 1e-6)
    assert tree_latency_s("LL128", 256, 32) == pytest.approx((14.0 + 2 * (7 * 1.25 + 5 * 8.5)) * 1e-6)
    assert tree_latency_s("LL", 48, 48, "pci") == pytest.approx((6.8 + 2 * (0 + 5 * 5.0)) * 1e-6)   # log2i(48) = 5
    # GPUs a node as NCCL counts them, nRanks / nNodes in integers: 20 on 3 nodes, 6
    assert tree_latency_s("LL", 20, 3) == pytest.approx((6.8 + 2 * (5 * 0.6 + 1 * 5.0)) * 1e-6)
    # a ring of the same GPUs pays 2 x 32 network steps and 2 x 255 - 64 in-node ones
    assert ring_latency_s("all_reduce", "LL", 256, 32) > 2 * tree_latency_s("LL", 256, 32)


def test_tree_shares_by_hand():
    """0.92 of the bus, LL a further 1/3.8 (at most the LL cap), LL128 120/128, times NCCL's
    correction for the size (1 MiB: the 14th power of two past 64 B; beyond 256 MB none)."""
    mib = 2 ** 20
    assert tree_factor("Simple", mib, 4, 50.0) == pytest.approx(0.92 * 0.5)
    assert tree_factor("LL128", mib, 4, 50.0) == pytest.approx(0.92 * 120 / 128 * 0.6)
    assert tree_factor("LL", mib, 4, 50.0) == pytest.approx(0.92 / 3.8 * 0.5)
    assert tree_factor("LL", mib, 4, 200.0) == pytest.approx(20.4 / 200.0 * 0.5)      # the LL cap binds
    assert tree_factor("Simple", 1e9, 4, 50.0) == pytest.approx(0.92)
    assert tree_factor("Simple", 10.0, 4, 50.0) == pytest.approx(0.92 * 0.9)          # under 64 B: the first


@pytest.mark.parametrize("kind, ranks, nodes, applies", [
    ("all_reduce", 16, 2, True), ("all_reduce", 8, 1, False), ("all_gather", 16, 2, False),
    ("reduce_scatter", 2048, 256, False), ("all_reduce", 2, 2, True)])
def test_where_the_tree_applies(kind, ranks, nodes, applies):
    assert tree_applies(kind, ranks, nodes) is applies


def test_auto_takes_the_tree_for_small_buffers_over_many_nodes():
    small = ring_cost("all_reduce", 1e6, 2048, 256, 50.0)
    assert small.algorithm == TREE and small.protocol == "LL128"
    assert small.latency_s == pytest.approx(tree_latency_s("LL128", 2048, 256))
    pci = ring_cost("all_reduce", 1e6, 2048, 256, 50.0, intra="pci")     # no LL128 where a node's GPUs use PCIe
    assert pci.algorithm == TREE and pci.protocol == "LL"
    assert pci.latency_s == pytest.approx(tree_latency_s("LL", 2048, 256, "pci"))
    assert pci.latency_s > tree_latency_s("LL", 2048, 256)
    # 8 nodes of 8 at 400 GB/s: the tree to 256 MiB (1.64 ms against the rings' 1.72), the rings from 512 MiB
    assert ring_cost("all_reduce", 2 ** 28, 64, 8, 400.0).algorithm == TREE
    assert ring_cost("all_reduce", 2 ** 29, 64, 8, 400.0).algorithm == RING
    # a large buffer over 2 nodes: the ring moves 2 S 15/16 at the whole bus, the tree 2 S at 0.92
    assert ring_cost("all_reduce", 1e9, 16, 2, 50.0).algorithm == RING
    # the tree is NCCL's own choice: a protocol named outright keeps the ring, as NCCL_ALGO=Ring
    assert ring_cost("all_reduce", 1e6, 2048, 256, 50.0, "LL128").algorithm == RING
    assert ring_cost("all_gather", 1e6, 2048, 256, 50.0).algorithm == RING
    assert ring_cost("all_reduce", 1e3, 8, 1, 200.0).algorithm == RING


def test_a_tree_all_reduce_ends_at_ncclss_latency_plus_its_data():
    """16 GPUs on 2 nodes of h800-16, 10 kB: the tree under LL; on the fabric each GPU sends
    2 x bytes / share to the next, the two IB hops the bottleneck: NCCL's latency (the fabric
    charges one hop's) plus the route's latency and 2 x wire bytes at 50 GB/s."""
    ranks, nbytes = list(range(16)), 1e4
    t, fab = run_ring(ring_all_reduce, ranks, nbytes, "auto")
    cost, charged = nccl_ring_cost(fab, "all_reduce", ranks, nbytes, "auto")
    assert (cost.algorithm, cost.protocol) == (TREE, "LL")
    assert cost.latency_s == pytest.approx((6.8 + 2 * (7 * 0.6 + 1 * 5.0)) * 1e-6)
    ib = fab.links.route(7, 8)[1]
    assert charged == pytest.approx(ib)
    wire = nbytes / cost.bandwidth_factor
    assert t == pytest.approx(cost.latency_s - charged + ib + 2 * wire / 50e9, rel=1e-9)


def test_a_hierarchical_tree_shares_the_crossing_among_the_rails():
    """The same 16 GPUs as 2 nodes of 8: the bus is min(NVLink 160, 8 rails x 50) = 160 GB/s, so
    each GPU sends 2 x wire to its node's next GPU and each rail 2 x wire / 8 to the other node:
    the NVLink chain binds."""
    from sim.network import nccl_all_reduce
    ranks, nbytes = list(range(16)), 1e4
    env, fab = fabric()
    env.run(until=nccl_all_reduce(fab, ranks, nbytes, 8, "auto"))
    cost, charged = nccl_ring_cost(fab, "all_reduce", ranks, nbytes, "auto", 8)
    assert cost.algorithm == TREE
    nvlink, ib = fab.links.route(0, 1)[1], fab.links.route(0, 8)[1]
    assert charged == pytest.approx(max(nvlink, ib))
    wire = nbytes / cost.bandwidth_factor
    data = max(nvlink + 2 * wire / 160e9, ib + 2 * wire / 8 / 50e9)
    assert env.now == pytest.approx(max(0.0, cost.latency_s - charged) + data, rel=1e-9)
    # a large buffer: the rings, a reduce-scatter then an all-gather, as before the tree
    env2, fab2 = fabric()
    env2.run(until=nccl_all_reduce(fab2, ranks, 2e9, 8, "auto"))
    env3, fab3 = fabric()
    first = hierarchical_reduce_scatter(fab3, ranks, 2e9, 8, "auto")
    env3.run(until=first)
    env3.run(until=hierarchical_all_gather(fab3, ranks, 2e9, 8, "auto"))
    assert env2.now == pytest.approx(env3.now, rel=1e-12)


def test_uneven_nodes_are_refused_in_one_line():
    from sim.network import nccl_all_reduce
    env, fab = fabric()
    with pytest.raises(InputError, match=r"^hierarchical collectives need the same number of GPUs on every node, "
                                         r"got \[1, 8\]$"):
        nccl_all_reduce(fab, list(range(9)), 1e6, 8, "auto")


@pytest.mark.parametrize("per_node", [1, 2])
def test_a_tree_over_few_gpus_a_node_binds_on_its_rails(per_node):
    """One and two GPUs on each of the 8 nodes of h800-64: the bus is the rails' (g x 50 GB/s, under
    NVLink's 160), each rail carries 2 x wire / g to the next node: NCCL's latency (less the one hop
    the fabric charges, the longer of NVLink's and IB's) plus the slower of the node's chain and
    the rails."""
    from sim.network import nccl_all_reduce
    g, nbytes = per_node, 1e4
    ranks = [8 * node + i for node in range(8) for i in range(g)]
    env, fab = fabric("h800-64")
    env.run(until=nccl_all_reduce(fab, ranks, nbytes, 8, "auto"))
    cost, charged = nccl_ring_cost(fab, "all_reduce", ranks, nbytes, "auto", 8)
    assert (cost.algorithm, cost.protocol) == (TREE, "LL")
    assert cost.latency_s == pytest.approx((6.8 + 2 * ((g - 1) * 0.6 + 3 * 5.0)) * 1e-6)
    nvlink, ib = fab.links.route(0, 1)[1], fab.links.route(0, 8)[1]
    assert charged == pytest.approx(max(nvlink, ib) if g > 1 else ib)
    # LL: 0.92 / 3.8 of the bus, at most 20.4 GB/s over 3 or more nodes; log2i(10000 >> 6) = 7: x 0.7
    assert cost.bandwidth_factor == pytest.approx(min(0.92 / 3.8, 20.4 / (50 * g)) * 0.7)
    wire = nbytes / cost.bandwidth_factor
    data = max(ib + 2 * wire / (g * 50e9), nvlink + 2 * wire / 160e9 if g > 1 else 0.0)
    assert env.now == pytest.approx(cost.latency_s - charged + data, rel=1e-9)


def test_a_tree_of_one_gpu_or_none_moves_nothing():
    from sim.network import tree_all_reduce
    for ranks, per_node in (([3], 8), ([], 8), ([3], None)):
        env, fab = fabric()
        env.run(until=tree_all_reduce(fab, ranks, 1e6, per_node))
        assert env.now == 0.0 and fab.bytes_sent.sum() == 0


def test_an_all_reduce_of_nothing_one_byte_or_one_gpu():
    """Nothing to move, or one GPU: no time. One byte over 8 nodes: the tree, at its latency. No
    protocol: the reduce-scatter and all-gather on the fabric alone."""
    from sim.network import nccl_all_reduce
    spread = [8 * node for node in range(8)]
    for ranks, nbytes in ((spread, 0.0), ([3], 1e6)):
        env, fab = fabric("h800-64")
        env.run(until=nccl_all_reduce(fab, ranks, nbytes, 8, "auto"))
        assert env.now == 0.0
    env, fab = fabric("h800-64")
    env.run(until=nccl_all_reduce(fab, spread, 1.0, 8, "auto"))
    cost, charged = nccl_ring_cost(fab, "all_reduce", spread, 1.0, "auto", 8)
    assert cost.algorithm == TREE
    ib = fab.links.route(0, 8)[1]
    assert env.now == pytest.approx(cost.latency_s - charged + ib + 2 / cost.bandwidth_factor / 50e9, rel=1e-9)
    env, fab = fabric("h800-64")
    env.run(until=nccl_all_reduce(fab, spread, 1e6, 8))
    env2, fab2 = fabric("h800-64")
    env2.run(until=hierarchical_reduce_scatter(fab2, spread, 1e6, 8))
    env2.run(until=hierarchical_all_gather(fab2, spread, 1e6, 8))
    assert env.now == pytest.approx(env2.now, rel=1e-12)


def test_a_hierarchical_collective_over_pcie_nodes_pays_pcie_steps(monkeypatch):
    """Where a node's GPUs reach each other over PCIe, the in-node steps are NCCL's PCIe ones and
    LL128 is off (no preset is built so: the hop's hardware stands in for one)."""
    import sim.network.collectives as collectives
    monkeypatch.setattr(collectives, "hop_hardware", lambda fab, a, b: "pci" if a // 8 == b // 8 else "net")
    _, fab = fabric()
    cost, _ = nccl_ring_cost(fab, "all_gather", list(range(16)), 1e7, "auto", 8)
    assert cost.protocol != "LL128"
    assert cost.latency_s == pytest.approx(ring_latency_s("all_gather", cost.protocol, 16, 2, "pci"))
