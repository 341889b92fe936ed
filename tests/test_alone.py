"""Collectives alone: the closed forms of the all-to-all and the rings against the analytical network
running them, by hand, and below the max-min fabric."""
import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.checks import InputError
from sim.network import (
    AnalyticalNetwork,
    Fabric,
    LinkTable,
    MoERouting,
    Traffic,
    Transfers,
    all_to_all,
    all_to_all_alone,
    all_to_all_alone_s,
    hierarchical_all_gather,
    hierarchical_alone_s,
    hierarchical_reduce_scatter,
    ring_alone_s,
    ring_reduce_scatter,
    route_tokens,
)
from topologies import load_topology

LINKS = LinkTable(load_topology("h800-16"))          # two nodes of 8 H800


def run(network_class, group, traffic, token_bytes, algorithm, direction, chunks):
    env = simpy.Environment()
    net = network_class(env, LINKS)
    done = all_to_all(net, group, traffic, token_bytes, algorithm, direction, chunks)
    env.run(done)
    return env.now, net


def traffic_of(gpu_tokens: np.ndarray, node_tokens: np.ndarray) -> Traffic:
    routing = MoERouting(ep=16, gpus_per_node=8, num_experts=16, topk=2, tokens_per_gpu=1)
    return Traffic(routing, gpu_tokens, node_tokens)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(["hierarchical", "flat"]), st.sampled_from(["dispatch", "combine"]),
       st.integers(1, 4), st.floats(1.0, 1e5))
def test_the_closed_form_is_the_analytical_network_to_the_last_bit(data, algorithm, direction, chunks, token_bytes):
    """Random token counts (some pairs silent): the closed form's end equals the analytical
    network's own run of the collective exactly, and its bytes per GPU the network's."""
    counts = st.lists(st.sampled_from([0, 0, 1, 3, 250, 4096]), min_size=16 * 16, max_size=16 * 16)
    G = np.array(data.draw(counts), dtype=float).reshape(16, 16)
    node_counts = st.lists(st.sampled_from([0, 2, 700]), min_size=32, max_size=32)
    N = np.array(data.draw(node_counts), dtype=float).reshape(16, 2)
    traffic = traffic_of(G, N)
    group = list(range(16))
    end, sent, received = all_to_all_alone(Transfers(LINKS), group, traffic, token_bytes, algorithm, direction, chunks)
    now, net = run(AnalyticalNetwork, group, traffic, token_bytes, algorithm, direction, chunks)
    assert end == now
    assert sent == pytest.approx(net.bytes_sent[:16], rel=1e-12)
    assert received == pytest.approx(net.bytes_received[:16], rel=1e-12)


@pytest.mark.parametrize("algorithm", ["hierarchical", "flat"])
@pytest.mark.parametrize("direction", ["dispatch", "combine"])
def test_a_routed_all_to_all_alone_is_never_slower_than_on_the_max_min_fabric(algorithm, direction):
    """Balanced top-8 routing over the two nodes: the max-min fabric shares the NICs and NVLinks
    among the transfers, so it takes at least the time alone (here strictly longer)."""
    traffic = route_tokens(MoERouting(ep=16, gpus_per_node=8, num_experts=64, topk=8, tokens_per_gpu=4096))
    alone = all_to_all_alone_s(Transfers(LINKS), list(range(16)), traffic, 7168.0, algorithm, direction, 4)
    shared, _ = run(Fabric, list(range(16)), traffic, 7168.0, algorithm, direction, 4)
    assert 0 < alone < shared


def test_one_dispatch_unit_by_hand():
    """GPU 0 sends 1,000 tokens of 1 KB to node 1 in 2 pieces, through GPU 8 (same index) to GPU 9:
    piece i lands on 8 at (i+1)(L_ib + 0.5 MB / B_ib); the last is forwarded to 9 in
    L_nv + 0.25 MB / B_nv."""
    G, N = np.zeros((16, 16)), np.zeros((16, 2))
    G[0, 9], G[0, 8], N[0, 1] = 500, 500, 1000
    transfers = Transfers(LINKS)
    (l_ib, b_ib), (l_nv, b_nv) = transfers.route(0, 8), transfers.route(8, 9)
    end, sent, received = all_to_all_alone(transfers, list(range(16)), traffic_of(G, N), 1000.0, "hierarchical",
                                           "dispatch", 2)
    piece = l_ib + 0.5e6 / b_ib
    assert end == pytest.approx(2 * piece + l_nv + 0.25e6 / b_nv, rel=1e-12)
    assert sent[0] == 1e6 and sent[8] == 0.5e6 and received[9] == 0.5e6 and received[8] == 1e6
    # combine: 9 sends its two pieces to 8 (0.25 MB each); 8 sends piece i back once both landed
    end = all_to_all_alone(transfers, list(range(16)), traffic_of(G, N), 1000.0, "hierarchical", "combine", 2)[0]
    fwd = l_nv + 0.25e6 / b_nv
    back_0 = fwd + piece                    # piece 0 gathered at fwd, then sent back
    assert end == pytest.approx(max(2 * fwd, back_0) + piece, rel=1e-12)


def test_a_silent_pair_sends_nothing_and_waits_for_nothing():
    """Flat, one token from GPU 0 to GPU 8 of the other node and nothing else: the collective
    ends when that transfer lands (2.8 us of latency), not after the silent NVLink pairs' 3.3 us."""
    G, N = np.zeros((16, 16)), np.zeros((16, 2))
    G[0, 8] = 1
    transfers = Transfers(LINKS)
    latency, bandwidth = transfers.route(0, 8)
    end = all_to_all_alone_s(transfers, list(range(16)), traffic_of(G, N), 1000.0, "flat", "dispatch", 1)
    assert end == latency + 1000.0 / bandwidth < transfers.route(0, 1)[0]


def test_the_gpu_rate_bounds_the_busiest_gpu():
    """A GPU sending 1 GB at 10 GB/s takes at least 0.1 s, however fast the links."""
    G, N = np.zeros((16, 16)), np.zeros((16, 2))
    G[0, 1] = 1e6
    traffic = traffic_of(G, N)
    free = all_to_all_alone_s(Transfers(LINKS), list(range(16)), traffic, 1000.0, "flat", "dispatch", 1)
    bound = all_to_all_alone_s(Transfers(LINKS), list(range(16)), traffic, 1000.0, "flat", "dispatch", 1, gpu_rate=10e9)
    assert free < 0.1 and bound == pytest.approx(0.1)


def test_nothing_to_send_takes_no_time():
    assert all_to_all_alone_s(Transfers(LINKS), list(range(16)), traffic_of(np.zeros((16, 16)), np.zeros((16, 2))),
                              1000.0) == 0.0


@pytest.mark.parametrize("kwargs, field", [({"algorithm": "ring"}, "algorithm"), ({"direction": "both"}, "direction"),
                                           ({"chunks": 0}, "chunks")])
def test_bad_arguments_are_named(kwargs, field):
    traffic = traffic_of(np.zeros((16, 16)), np.zeros((16, 2)))
    with pytest.raises(InputError, match=field):
        all_to_all_alone(Transfers(LINKS), list(range(16)), traffic, 1000.0, **kwargs)
    with pytest.raises(InputError, match="ep=16"):
        all_to_all_alone(Transfers(LINKS), list(range(8)), traffic, 1000.0)


def run_collective(op, *args, **kwargs):
    env = simpy.Environment()
    net = AnalyticalNetwork(env, LINKS)
    done = op(net, *args, **kwargs)
    env.run(done)
    return env.now


@pytest.mark.parametrize("ranks", [[0, 1, 2, 3], [0, 8], [3, 11, 5, 13], [7]])
@pytest.mark.parametrize("nbytes", [0.0, 1.0, 3e8])
def test_a_bulk_ring_alone_is_the_analytical_networks(ranks, nbytes):
    steps = max(len(ranks) - 1, 0)
    alone = ring_alone_s(Transfers(LINKS), ranks, nbytes, steps)
    assert alone == pytest.approx(run_collective(ring_reduce_scatter, ranks, nbytes, bulk=True), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("gather", [False, True])
@pytest.mark.parametrize("protocol", [None, "Simple", "LL"])
@pytest.mark.parametrize("ranks", [list(range(16)), [0, 2, 8, 10], [1, 9], list(range(8))])
def test_a_hierarchical_collective_alone_is_the_analytical_networks(gather, protocol, ranks):
    """A ring per node then one per rail (the reverse for an all-gather), NCCL's latency first when
    a protocol is given: the closed form and the analytical network's run agree."""
    op = hierarchical_all_gather if gather else hierarchical_reduce_scatter
    alone = hierarchical_alone_s(Transfers(LINKS), ranks, 2e8, 8, gather, protocol)
    assert alone == pytest.approx(run_collective(op, ranks, 2e8, 8, protocol), rel=1e-12)
    with pytest.raises(InputError, match="same number of GPUs on every node"):
        hierarchical_alone_s(Transfers(LINKS), [0, 1, 8], 2e8, 8, gather, protocol)


def test_alike_groups_share_one_time(monkeypatch):
    """Two EP groups on the two nodes' GPUs 0-3 and 8-11 have routes alike (NVLink inside a node):
    one number, one time kept for both, found once."""
    import sim.network.alone as alone
    found = []
    monkeypatch.setattr(alone, "all_to_all_alone", lambda *a: found.append(a) or all_to_all_alone(*a))
    transfers = Transfers(LINKS)
    assert transfers.alike([0, 1, 2, 3]) == transfers.alike([8, 9, 10, 11]) != transfers.alike([0, 8, 1, 9])
    traffic = route_tokens(MoERouting(ep=4, gpus_per_node=8, num_experts=8, topk=2, tokens_per_gpu=512))
    first = all_to_all_alone_s(transfers, [0, 1, 2, 3], traffic, 7168.0)
    assert len(transfers.times) == 1
    assert all_to_all_alone_s(transfers, [8, 9, 10, 11], traffic, 7168.0) == first and len(transfers.times) == 1
    assert all_to_all_alone_s(Transfers(LINKS), [8, 9, 10, 11], traffic, 7168.0) == first
    assert len(found) == 2                          # once per Transfers: the second group was the first's
