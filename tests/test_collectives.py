"""Collectives: closed forms, traffic statistics, and the two all-to-all algorithms."""
import numpy as np
import pytest
import simpy

from sim.network import (
    Fabric,
    MoERouting,
    Traffic,
    all_to_all,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
    route_tokens,
)
from sim.network.collectives import nccl_ring_cost
from topologies import load_topology

NV, LAT_NV = 160e9, 3.3e-6


def fabric(topo="h800-node"):
    env = simpy.Environment()
    return env, Fabric(env, load_topology(topo))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_reduce_closed_form(n):
    """2(n-1) steps of N/n bytes on NVLink: 2(n-1)/n * N/B + 2(n-1) * latency."""
    env, fab = fabric()
    N = 1e9
    env.run(ring_all_reduce(fab, list(range(n)), N))
    assert env.now == pytest.approx(2 * (n - 1) / n * N / NV + 2 * (n - 1) * LAT_NV)


@pytest.mark.parametrize("bulk", [False, True])
def test_a_ring_of_nothing_or_of_one_rank_is_instant_but_one_byte_pays_latency(bulk):
    """0 bytes, or a single rank: done at once, nothing sent. 1 byte on 4 ranks: 6 steps of 1/4 B,
    each paying the NVLink latency (the bulk form pays it 6 times before its one transfer)."""
    for ranks, nbytes in (([0, 1, 2, 3], 0.0), ([5], 1e9)):
        env, fab = fabric()
        env.run(ring_all_reduce(fab, ranks, nbytes, bulk=bulk))
        assert env.now == 0.0 and fab.bytes_sent.sum() == 0.0
    env, fab = fabric()
    env.run(ring_all_reduce(fab, [0, 1, 2, 3], 1.0, bulk=bulk))
    assert env.now == pytest.approx(6 * 0.25 / NV + 6 * LAT_NV) and fab.bytes_sent.sum() == pytest.approx(6.0)


def test_reduce_scatter_and_all_gather_take_half():
    for op in (ring_reduce_scatter, ring_all_gather):
        env, fab = fabric()
        env.run(op(fab, list(range(8)), 8e8))
        assert env.now == pytest.approx(7 / 8 * 8e8 / NV + 7 * LAT_NV)


def test_a_ring_all_gather_says_when_each_rank_receives_each_block():
    """4 ranks on one NVLink node, 1e8 bytes: each rank receives its 3 blocks one step apart (the
    route's latency plus N / 4 at NVLink speed), the last as the ring ends; under NCCL's Simple
    protocol the same steps, at its share of the bandwidth, after its latency less the links'
    latencies the fabric charges. A bulk ring cannot say: one line."""
    N, ranks = 1e8, [0, 1, 2, 3]
    for protocol in (None, "Simple"):
        env, fab = fabric()
        got = {i: [] for i in range(4)}
        done = ring_all_gather(fab, ranks, N, protocol=protocol, on_receive=lambda i: got[i].append(env.now))
        env.run(done)
        lead, wire = 0.0, N
        if protocol is not None:
            cost, charged = nccl_ring_cost(fab, "all_gather", ranks, N, protocol)
            lead, wire = cost.latency_s - charged, N / cost.bandwidth_factor
            assert lead > 0
        step = LAT_NV + wire / 4 / NV
        for i in ranks:
            assert got[i] == pytest.approx([lead + step, lead + 2 * step, lead + 3 * step], rel=1e-12)
        assert env.now == pytest.approx(lead + 3 * step, rel=1e-12)
    with pytest.raises(ValueError, match="^on_receive needs the ring step by step, not bulk$"):
        ring_all_gather(fab, ranks, N, bulk=True, on_receive=print)


def test_a_hierarchical_collective_over_uneven_nodes_is_one_line():
    from sim.checks import InputError
    from sim.network import hierarchical_all_gather
    env, fab = fabric("h800-16")
    with pytest.raises(InputError, match=r"^hierarchical collectives need the same number of GPUs on every node, "
                                         r"got \[1, 2\]$"):
        hierarchical_all_gather(fab, [0, 1, 8], 1e6, 8)


def test_flat_all_to_all_inside_one_node():
    """8 GPUs on one NVSwitch, uniform: every GPU sends the same S to each of the 7 others;
    each uplink carries 7 flows at B/7: time = latency + 7 S / B."""
    r = MoERouting(ep=8, gpus_per_node=8, num_experts=64, topk=8, tokens_per_gpu=4096)
    tr = route_tokens(r)
    S = tr.gpu_tokens[0, 1] * 7168
    env, fab = fabric()
    env.run(all_to_all(fab, list(range(8)), tr, 7168, "flat"))
    assert env.now == pytest.approx(LAT_NV + 7 * S / NV)
    assert fab.bytes_sent == pytest.approx(np.full(8, 7 * S))


def test_hierarchical_sends_each_token_once_per_node_over_ib():
    r = MoERouting(ep=16, gpus_per_node=8, num_experts=64, topk=8, tokens_per_gpu=1000, node_limit=2)
    tr = route_tokens(r)
    tb = 7168.0
    env, fab = fabric("h800-16")
    env.run(all_to_all(fab, list(range(16)), tr, tb, "hierarchical", chunks=1))
    ib = sum(b for b, k, name in zip(fab.link_bytes, fab.links.kind, range(len(fab.link_bytes)))
             if k == "ib" and fab.links.names[fab.links.src[name]].endswith(tuple(f"nic{i}" for i in range(8)))
             and "leaf" in fab.links.names[fab.links.dst[name]])
    assert ib == pytest.approx(16 * tr.node_tokens[0, 1] * tb)
    env2, fab2 = fabric("h800-16")
    env2.run(all_to_all(fab2, list(range(16)), tr, tb, "flat"))
    assert env.now < env2.now    # deduplicated IB traffic beats the flat algorithm here


def test_pipelined_chunks_overlap_forwarding():
    r = MoERouting(ep=64, gpus_per_node=8, num_experts=256, topk=8, tokens_per_gpu=4096, node_limit=4)
    tr = route_tokens(r)
    times = {}
    for chunks in (1, 4):
        env, fab = fabric("h800-64")
        env.run(all_to_all(fab, list(range(64)), tr, 7168 + 224, chunks=chunks))
        times[chunks] = env.now
    ib_time = 56 / 64 * tr.node_tokens[0].sum() * (7168 + 224) / 50e9  # bytes over IB from each GPU
    assert times[4] < times[1]
    assert times[4] > ib_time


@pytest.mark.parametrize("direction", ["dispatch", "combine"])
def test_tokens_for_the_same_index_gpu_need_no_forward(direction):
    """EP16 on h800-16: GPU 0's 3 tokens all go to GPU 8, the same index on node 1, so the IB
    chunks land where they are needed and nothing is forwarded: 4 chunks one after another, each
    paying the IB route's latency and 3 x 1000 / 4 B at its narrowest link."""
    r = MoERouting(ep=16, gpus_per_node=8, num_experts=16, topk=1, tokens_per_gpu=3, node_limit=None)
    G, N = np.zeros((16, 16)), np.zeros((16, 2))
    G[0, 8], N[0, 1] = 3, 3
    env, fab = fabric("h800-16")
    env.run(all_to_all(fab, list(range(16)), Traffic(r, G, N), 1000.0, "hierarchical", direction, chunks=4))
    links, latency = fab.links.route(0, 8) if direction == "dispatch" else fab.links.route(8, 0)
    assert env.now == pytest.approx(4 * (latency + 750.0 / fab.links.capacity[links].min()), rel=1e-12)
    assert fab.bytes_sent.sum() == 3000.0


def test_combine_mirrors_dispatch_bytes():
    r = MoERouting(ep=16, gpus_per_node=8, num_experts=64, topk=6, tokens_per_gpu=500, node_limit=2,
                   skew=1.0, seed=3)
    tr = route_tokens(r)
    out = {}
    for direction in ("dispatch", "combine"):
        env, fab = fabric("h800-16")
        env.run(all_to_all(fab, list(range(16)), tr, 1000.0, "hierarchical", direction))
        out[direction] = (fab.bytes_sent.sum(), fab.link_bytes.sum())
    assert out["dispatch"] == pytest.approx(out["combine"])


def test_chunks_are_bounded():
    from sim.checks import InputError
    tr = route_tokens(MoERouting(ep=8, gpus_per_node=8, num_experts=8, topk=1, tokens_per_gpu=8))
    env, fab = fabric()
    for chunks in (0, 1001, 2.5, "4"):
        with pytest.raises(InputError, match=r"^chunks must be an integer in \[1, 1,000\], got "):
            all_to_all(fab, list(range(8)), tr, 1.0, chunks=chunks)
    env.run(all_to_all(fab, list(range(8)), tr, 1.0, chunks=1000))
    env.run(all_to_all(fab, list(range(8)), tr, 1.0, chunks=4.0))     # an integral float is that integer


def test_bad_all_to_all_arguments():
    tr = route_tokens(MoERouting(ep=8, gpus_per_node=8, num_experts=8, topk=2, tokens_per_gpu=10))
    env, fab = fabric()
    with pytest.raises(ValueError, match="algorithm must be one of hierarchical, flat"):
        all_to_all(fab, list(range(8)), tr, 1, "ring")
    with pytest.raises(ValueError, match="group has 4 GPUs"):
        all_to_all(fab, list(range(4)), tr, 1)


def test_bulk_ring_takes_the_time_of_its_steps():
    """A symmetric ring: one transfer of (n-1) N/n bytes per neighbour pair, paying the latency n-1
    times, ends when the step-by-step ring does."""
    for bulk in (False, True):
        env, fab = fabric()
        env.run(ring_reduce_scatter(fab, list(range(8)), 8e8, bulk=bulk))
        assert env.now == pytest.approx(7 / 8 * 8e8 / NV + 7 * LAT_NV)


def test_hierarchical_reduce_scatter_by_hand():
    """16 GPUs on 2 nodes of h800-16: a ring of 8 inside each node on N, then a ring of 2 per rail
    over IB (one 50 GB/s NIC each, 2.8 us across the leaf) on N / 8."""
    from sim.network import hierarchical_all_gather, hierarchical_reduce_scatter
    N = 1.6e9
    expected = 7 / 8 * N / NV + 7 * LAT_NV + 1 / 2 * (N / 8) / 50e9 + 2.8e-6
    for op in (hierarchical_reduce_scatter, hierarchical_all_gather):
        env, fab = fabric("h800-16")
        env.run(op(fab, list(range(16)), N, 8))
        assert env.now == pytest.approx(expected)
    env, fab = fabric("h800-16")
    env.run(hierarchical_reduce_scatter(fab, [0, 8], N, 8))           # one GPU per node: a plain ring
    assert env.now == pytest.approx(N / 2 / 50e9 + 2.8e-6)


@pytest.mark.parametrize("algorithm", ["flat", "hierarchical"])
def test_skewed_combine_mirrors_dispatch_per_gpu(algorithm):
    """Per GPU, not in total: combine sends what dispatch received and receives what it sent; and
    the flat dispatch conserves each GPU's bytes exactly (row and column sums of the matrix)."""
    r = MoERouting(ep=16, gpus_per_node=8, num_experts=64, topk=6, tokens_per_gpu=500, node_limit=2,
                   skew=1.2, seed=5)
    tr = route_tokens(r)
    tb = 1000.0
    out = {}
    for direction in ("dispatch", "combine"):
        env, fab = fabric("h800-16")
        env.run(all_to_all(fab, list(range(16)), tr, tb, algorithm, direction))
        out[direction] = (fab.bytes_sent, fab.bytes_received)
    assert not np.allclose(out["dispatch"][0], out["dispatch"][1])        # skewed: sent != received
    np.testing.assert_allclose(out["combine"][0], out["dispatch"][1], rtol=1e-12)
    np.testing.assert_allclose(out["combine"][1], out["dispatch"][0], rtol=1e-12)
    if algorithm == "flat":
        G = tr.gpu_tokens * (1 - np.eye(16))
        np.testing.assert_allclose(out["dispatch"][0], G.sum(axis=1) * tb, rtol=1e-12)
        np.testing.assert_allclose(out["dispatch"][1], G.sum(axis=0) * tb, rtol=1e-12)


@pytest.mark.parametrize("bulk", [False, True])
def test_a_ring_sends_to_the_next_rank_over_its_route(bulk):
    """Each rank of a ring sends (n-1) N/n bytes to the next rank in the list, over the route from it
    to that rank: the links' bytes, worked from the routes. Across the nodes of h800-64 a route and
    its way back are not mirror images (equal-cost spines are picked per pair), so a ring turned the
    other way loads other links."""
    ranks, N = [0, 9, 18, 27, 36, 45, 54, 63], 8e8
    env, fab = fabric("h800-64")
    env.run(ring_reduce_scatter(fab, ranks, N, bulk=bulk))

    def link_bytes(step):
        out = np.zeros(len(fab.links))
        for i, src in enumerate(ranks):
            out[fab.links.route(src, ranks[(i + step) % len(ranks)])[0]] += 7 / 8 * N
        return out
    assert fab.link_bytes == pytest.approx(link_bytes(+1), rel=1e-9, abs=1e-3)
    assert not np.allclose(link_bytes(+1), link_bytes(-1))


@pytest.mark.parametrize("algorithm", ["flat", "hierarchical"])
def test_a_pair_with_one_token_sends_it(algorithm):
    """EP8 on one node, one token from every GPU to every other: each GPU sends and receives 7
    tokens' bytes, whatever the algorithm (a single token is a message)."""
    r = MoERouting(ep=8, gpus_per_node=8, num_experts=8, topk=1, tokens_per_gpu=7, node_limit=None)
    G = np.ones((8, 8)) - np.eye(8)
    env, fab = fabric()
    env.run(all_to_all(fab, list(range(8)), Traffic(r, G, np.full((8, 1), 7.0)), 1000.0, algorithm))
    assert fab.bytes_sent.tolist() == fab.bytes_received.tolist() == [7000.0] * 8


@pytest.mark.parametrize("ring", [ring_all_reduce, ring_reduce_scatter, ring_all_gather])
def test_a_bulk_ring_is_one_transfer_per_neighbour(ring):
    """``bulk``: each rank's steps as one transfer to its neighbour, all starting at one instant (after
    the steps' latencies): at most two recomputations of the fabric, where the step-by-step ring
    needs some per step."""
    counts = {}
    for bulk in (True, False):
        env, fab = fabric()
        env.run(ring(fab, list(range(8)), 8e8, bulk=bulk))
        counts[bulk] = fab.recomputations
    assert counts[True] <= 2 and counts[False] > 6
