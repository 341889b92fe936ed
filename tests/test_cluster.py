"""The cluster: whole-node placement, a job's view of the shared network, and its bad input."""
import networkx as nx
import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.checks import InputError
from sim.cluster import Cluster
from sim.network import LinkTable, NetworkView, build_network, ring_all_reduce
from topologies import load_topology


def cluster(name="h800-64", **kw) -> Cluster:
    graph = load_topology(name)
    return Cluster(LinkTable(graph), graph.graph["gpus_per_node"], **kw)


def test_packed_takes_the_lowest_free_nodes_in_order():
    c = cluster()
    a = c.allocate("A", 16)
    b = c.allocate("B", 24)
    assert a.nodes == (0, 1) and a.gpus == tuple(range(16)) and a.runs == 1
    assert b.nodes == (2, 3, 4) and b.label() == "nodes 2-4"
    assert c.free_nodes == [5, 6, 7]


def test_interleaved_spreads_two_equal_jobs_over_even_and_odd_nodes():
    c = cluster()
    a, b = c.allocate("A", 32, "interleaved"), c.allocate("B", 32, "interleaved")
    assert a.nodes == (0, 2, 4, 6) and b.nodes == (1, 3, 5, 7)
    assert a.runs == 4 and a.label() == "nodes 0, 2, ..., 6 (4 nodes in 4 runs)"
    assert a.gpus[:9] == (0, 1, 2, 3, 4, 5, 6, 7, 16)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8), st.sampled_from(["packed", "interleaved"])), min_size=1, max_size=6))
def test_no_gpu_is_given_twice_and_every_job_gets_whole_nodes(requests):
    """Whatever the order and placements: every allocation is whole nodes, in node order, and no GPU
    belongs to two jobs; a request beyond the free nodes is refused and changes nothing."""
    c = cluster()
    held = set()
    for k, (nodes, placement) in enumerate(requests):
        free = len(c.free_nodes)
        if nodes > free:
            with pytest.raises(InputError, match="needs"):
                c.allocate(f"J{k}", nodes * 8, placement)
            assert len(c.free_nodes) == free
            continue
        a = c.allocate(f"J{k}", nodes * 8, placement)
        assert len(a.gpus) == nodes * 8 and list(a.nodes) == sorted(a.nodes)
        assert a.gpus == tuple(n * 8 + i for n in a.nodes for i in range(8))
        assert held.isdisjoint(a.gpus)
        held |= set(a.gpus)
    assert len(held) + 8 * len(c.free_nodes) == c.num_gpus


def test_explicit_lists_are_whole_nodes_and_never_overlap():
    c = cluster()
    a = c.allocate("A", list(range(8, 16)) + list(range(0, 8)))
    assert a.nodes == (1, 0) and a.runs == 2
    with pytest.raises(InputError, match=r"^job 'B': node 1 \(GPUs 8-15\) already belongs to job 'A'$"):
        c.allocate("B", list(range(8, 16)))
    with pytest.raises(InputError, match="whole nodes of 8 GPUs"):
        c.allocate("C", list(range(17, 25)))
    with pytest.raises(InputError, match="GPU 64 is not in this cluster's 0..63"):
        c.allocate("D", [64])
    with pytest.raises(InputError, match="names a GPU twice"):
        c.allocate("E", [16] * 8)
    with pytest.raises(InputError, match="job name 'A' is used twice"):
        c.allocate("A", 8)
    with pytest.raises(InputError, match="not a whole number of nodes"):
        c.allocate("F", 12)
    with pytest.raises(InputError, match="placement must be one of packed, interleaved, got 'random'"):
        c.allocate("G", 8, "random")
    with pytest.raises(InputError, match="network backend must be one of"):
        cluster(backend="ns3")


def test_a_view_numbers_the_jobs_gpus_from_zero_and_counts_its_own_bytes():
    """A job given node 2 (GPUs 16-23): its transfer 0 -> 1 is the network's 16 -> 17, on the same
    links; its bytes are counted as its own, and the network's bytes sent show on its GPU 0."""
    c = cluster()
    view = c.view(c.allocate("A", [16 + i for i in range(8)]))
    assert view.num_gpus == 8 and view.gpus[0] == 16
    links, latency = view.links.route(0, 1)
    assert np.array_equal(links, c.links.route(16, 17)[0]) and latency == c.links.route(16, 17)[1]
    c.env.run(view.transfer(0, 1, 1e6))
    assert view.bytes_sent[0] == 1e6 and c.network.bytes_sent[16] == 1e6
    assert view.own_link_bytes[links].tolist() == [1e6] * links.size and view.own_link_bytes.sum() == 1e6 * links.size
    with pytest.raises(InputError, match="this job has GPUs 0..7"):
        view.transfer(0, 8, 1.0)


def test_a_ring_through_a_view_takes_what_it_takes_on_the_same_gpus():
    """A ring all-reduce over a job's 8 GPUs (node 1, after job A's node 0) through its view: the
    same time, bytes and links as the ring over GPUs 8-15 on a network of its own."""
    c = cluster()
    c.allocate("A", 8)
    view = c.view(c.allocate("B", 8))
    c.env.run(ring_all_reduce(view, list(range(8)), 64e6))
    env = simpy.Environment()
    alone = build_network(env, LinkTable(load_topology("h800-64")))
    env.run(ring_all_reduce(alone, list(range(8, 16)), 64e6))
    assert c.env.now == env.now
    np.testing.assert_array_equal(c.network.link_bytes, alone.link_bytes)
    np.testing.assert_array_equal(view.own_link_bytes, alone.link_bytes)


def test_a_view_of_a_view_and_ecmp_by_the_clusters_numbers():
    """Routes through a view are the whole table's between the same GPUs, whatever the numbering
    (the ECMP hash takes the cluster's numbers), and a view of a view composes."""
    table = LinkTable(load_topology("h800-2048"))
    view = table.view(list(range(1024, 2048)))
    for a, b in [(0, 8), (3, 700), (1023, 5)]:
        assert np.array_equal(view.route(a, b)[0], table.route(a + 1024, b + 1024)[0])
    _, links = view.routes([(0, 9), (17, 512)])
    _, whole = table.routes([(1024, 1033), (1041, 1536)])
    assert np.array_equal(links, whole)
    inner = view.view(list(range(8, 16)))
    assert inner.gpu_ids == list(range(1032, 1040))
    assert np.array_equal(inner.route(0, 3)[0], table.route(1032, 1035)[0])
    with pytest.raises(InputError, match="among this table's 0..1023"):
        view.view([1024])


def test_a_cluster_must_split_into_nodes():
    g = nx.path_graph(3)
    for n in g.nodes:
        g.nodes[n]["type"] = "gpu"
    for u, v in g.edges:
        g.edges[u, v].update(bandwidth=1e9, latency=0.0)
    g.graph["gpus"] = list(g.nodes)
    with pytest.raises(InputError, match="cannot be split into nodes of 2"):
        Cluster(LinkTable(g), 2)
    assert isinstance(NetworkView(Cluster(LinkTable(g), 3).network, [2, 1]).links, LinkTable)


def test_a_views_other_calls_map_its_gpus():
    """transfer_at, route_bandwidth and out-of-range sources through a view; bundles count as its
    own, added up, and a bundle beyond the links is the network's one-line refusal."""
    from sim.checks import InputError as Bad
    from sim.network import p2p_load
    c = cluster(gpu_rate=30e9)
    view = c.view(c.allocate("A", [24 + i for i in range(8)]))
    assert view.route_bandwidth(0, 1) == c.network.route_bandwidth(24, 25) == 30e9
    landed = []
    view.transfer_at(1e-3, 0, 1, 3e6, lambda: landed.append(c.env.now))
    load = p2p_load(view.links, [(0, 1)], 5e6)
    view.transfer_bundle(load)
    view.transfer_bundle(load)
    c.env.run()
    assert landed == [pytest.approx(1e-3 + c.links.route(24, 25)[1] + 3e6 / 30e9, rel=1e-9)]
    route = c.links.route(24, 25)[0]
    assert view.own_link_bytes[route].tolist() == [13e6] * route.size
    with pytest.raises(Bad, match="this job has GPUs 0..7"):
        view.transfer(8, 0, 1.0)
    from sim.network import LinkLoad
    n = len(c.links)
    with pytest.raises(Bad, match=rf"^bundle link out of range: this fabric has links 0..{n - 1}$"):
        view.transfer_bundle(LinkLoad(np.array([0, n]), np.array([1.0, 1.0]), 1.0, 1))
    with pytest.raises(Bad, match=rf"^bundle link out of range: this fabric has links 0..{n - 1}$"):
        view.transfer_bundle(LinkLoad(np.array([0, 1, n]), np.array([1.0, 1.0, 1.0]), 1.0, 1))


def test_a_cluster_bounds_each_gpus_kernels_and_labels_one_node():
    c = cluster(gpu_rate=20e9)
    assert c.network.route_bandwidth(0, 9) == 20e9
    assert c.allocate("A", 8).label() == "node 0"


def test_a_views_byte_sends_and_bundles_keep_their_own_sizes_and_times():
    """One-byte sends (one alone, one through a route set) count as the job's; a bundle through a
    view keeps its latency and drains at its links' speed (1 ms at NVLink's 160 GB/s), no slower."""
    from sim.network import p2p_load
    c = cluster()
    view = c.view(c.allocate("A", 8))
    view.transfer(0, 1, 1.0)
    view.transfer_set(view.route_set([2], [3]), 1.0, [lambda: None])
    done = view.transfer_bundle(p2p_load(view.links, [(4, 5)], 160e6), latency=2e-3)
    c.env.run(done)
    assert c.env.now == pytest.approx(2e-3 + 1e-3, rel=1e-9)
    for a, b in [(0, 1), (2, 3)]:
        route = c.links.route(a, b)[0]
        assert view.own_link_bytes[route].tolist() == [1.0] * route.size


def test_a_view_passes_a_transfers_own_bound_on():
    """A job's 1 GB from its GPU 0 to 1 (the network's 16 -> 17, NVLink) bound to 10 GB/s takes
    100 ms after the route's latency, now or started ahead, as on the network itself."""
    c = cluster()
    view = c.view(c.allocate("A", [16 + i for i in range(8)]))
    latency = c.links.route(16, 17)[1]
    t0 = c.env.now
    c.env.run(view.transfer(0, 1, 1e9, max_rate=10e9))
    assert c.env.now - t0 == pytest.approx(latency + 0.1, rel=1e-12)
    ends = []
    t0 = c.env.now
    view.transfer_at(t0 + 0.5, 0, 1, 1e9, lambda: ends.append(c.env.now), max_rate=10e9)
    c.env.run()
    assert ends[0] - t0 == pytest.approx(0.5 + latency + 0.1, rel=1e-12)
