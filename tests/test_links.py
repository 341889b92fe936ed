"""sim.network.links: routes (shortest, deterministic ECMP, GPU relays only when forced), pickling."""
import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest
import simpy

from sim.network import Fabric, LinkTable
from topologies import load_topology


def test_deterministic_ecmp():
    a = Fabric(simpy.Environment(), load_topology("h100-1024")).links
    b = Fabric(simpy.Environment(), load_topology("h100-1024")).links
    pairs = [(0, 9), (3, 1000), (17, 517), (100, 900)]
    assert [a.route(*p)[0].tolist() for p in pairs] == [b.route(*p)[0].tolist() for p in pairs]
    # different pairs across leaves spread over several spines
    spines = {a.names[a.dst[a.route(s, 1023 - s)[0][2]]] for s in range(0, 512, 8)}
    assert len(spines) > 4


def test_routes_avoid_gpu_transit_unless_forced():
    links = Fabric(simpy.Environment(), load_topology("h100-1024")).links
    path, _ = links.route(0, 9)      # node 0 GPU 0 -> node 1 GPU 1, single plane: IB all the way
    assert all(links.node_type[links.dst[l]] != "gpu" for l in path[:-1])
    mp = Fabric(simpy.Environment(), load_topology("h800-16")).links
    path, _ = mp.route(0, 9)          # multi-plane: plane 0 then NVLink on the far node
    assert mp.kind[path[-1]] == "nvlink"


def test_route_is_shortest_and_latency_is_the_sum():
    links = load_topology_links("h800-16")
    path, latency = links.route(0, 8)          # node 0 GPU 0 -> node 1 GPU 0: GPU, NIC, leaf, NIC, GPU
    assert len(path) == 4
    assert latency == pytest.approx(links.latency[path].sum()) and latency == pytest.approx(2.8e-6)
    names = [links.names[links.dst[l]] for l in path]
    assert names == ["n0/nic0", "p0/leaf0", "n1/nic0", "n1/gpu0"]


def test_pickled_table_routes_the_same_without_its_caches():
    links = load_topology_links("h800-16")
    size = len(pickle.dumps(links))
    before = [links.route(s, d)[0].tolist() for s in range(16) for d in range(16) if s != d]
    assert len(pickle.dumps(links)) == size                   # route caches are not shipped to workers
    copy = pickle.loads(pickle.dumps(links))
    assert [copy.route(s, d)[0].tolist() for s in range(16) for d in range(16) if s != d] == before


def load_topology_links(name):
    return LinkTable(load_topology(name))


def test_an_equal_route_through_a_switch_beats_one_through_a_gpu():
    """GPUs a and b joined by two equal two-hop paths over PCIe-kind links, one through GPU c and
    one through switch s: the route relays through the switch. A link without a kind is 'link'."""
    import networkx as nx
    g = nx.Graph(gpus=["a", "b", "c"])
    g.add_nodes_from(["a", "b", "c"], type="gpu")
    g.add_node("s", type="switch")
    for u, v in (("a", "c"), ("c", "b"), ("a", "s"), ("s", "b")):
        g.add_edge(u, v, bandwidth=1e9, latency=1e-6, kind="pcie")
    g.add_edge("c", "s", bandwidth=1e9, latency=1e-6)
    links = LinkTable(g)
    path, latency = links.route(0, 1)
    assert [links.names[links.dst[link]] for link in path] == ["s", "b"] and latency == pytest.approx(2e-6)
    kinds = {links.link_name(i): links.kind[i] for i in range(len(links))}
    assert kinds["c->s"] == kinds["s->c"] == "link" and kinds["a->s"] == "pcie" and links.graph is g


@pytest.mark.parametrize("gpus", [65, 130, 195])
def test_route_lengths_equal_networkx_shortest_paths_for_any_block_of_gpus(gpus):
    """The bitwise breadth-first search packs 64 target GPUs per word: for 65, 130 and 195 GPUs (one
    bit past a word) every route has as many hops as networkx's shortest path, and its latency is
    the sum of its links'."""
    import networkx as nx

    from topologies.builders import fat_tree_cluster
    g = fat_tree_cluster(nodes=gpus // 5, gpus_per_node=5)
    links = LinkTable(g)
    assert len(links.gpus) == gpus
    lengths = nx.single_source_shortest_path_length(g, links.names[links.gpus[0]])
    for dst in range(1, gpus):
        path, latency = links.route(0, dst)
        assert len(path) == lengths[links.names[links.gpus[dst]]], dst
        assert latency == pytest.approx(float(links.latency[path].sum()))


def test_a_gpu_cut_off_is_named_and_scaling_keeps_unnamed_kinds():
    """Two GPUs with no path between them: the route names both. ``scaled`` changes only the kinds
    it is given."""
    import networkx as nx

    from sim.checks import InputError
    g = nx.Graph(gpus=["a", "b", "c"])
    g.add_nodes_from(["a", "b", "c"], type="gpu")
    g.add_edge("a", "b", bandwidth=1e9, latency=1e-6, kind="nvlink")
    g.add_node("s", type="switch")
    g.add_edge("c", "s", bandwidth=2e9, latency=1e-6, kind="ib")
    links = LinkTable(g)
    with pytest.raises(InputError, match="GPU 'a' cannot reach GPU 'c'"):
        links.route(0, 2)
    with pytest.raises(InputError, match="GPU 'c' cannot reach GPU 'b'"):
        links.routes([(0, 0), (0, 1), (2, 1)])              # named after a pair of no hop
    assert links.route(0, 1)[0].size == 1
    assert links.route(2, 2)[0].size == 0 and links.route(2, 2)[1] == 0.0      # a GPU to itself: no link
    half = links.scaled({"nvlink": 0.5})
    assert {links.kind[i]: half.capacity[i] for i in range(len(links))} == {"nvlink": 0.5e9, "ib": 2e9}


def reference_route(links, src_gpu, dst_gpu):
    """The routing rule in plain Python, neighbour by neighbour (the compiled walk must agree)."""
    s, t = links.gpus[src_gpu], links.gpus[dst_gpu]
    dist = links._distances_to(t)
    path, u, hop = [], s, 0
    while u != t:
        lo, hi = links._indptr[u], links._indptr[u + 1]
        cands = [(int(v), int(link)) for v, link in zip(links._csr_nbrs[lo:hi], links._csr_links[lo:hi])
                 if dist[v] == dist[u] - 1]
        rank = [(bool(links.is_gpu[v]) and v != t, links.kind[link] == "nvlink") for v, link in cands]
        cands = [c for c, k in zip(cands, rank) if k == min(rank)]
        v, link = cands[hash((src_gpu, dst_gpu, hop)) % len(cands)]
        path.append(link)
        u, hop = v, hop + 1
    return path


@pytest.mark.parametrize("name,step", [("h800-64", 1), ("h100-1024", 37),
                                       ("topologies/variants/h800-2048-one-plane-oversub4.yaml", 97)])
def test_the_compiled_walk_follows_the_rule(name, step):
    """Every pair of h800-64 (8 planes: relays over NVLink), and a spread of pairs on a single-plane
    cluster and on an oversubscribed one-plane fabric (spines: many equal next hops): the same
    links as the rule applied in plain Python, and a latency that is their sum."""
    links = LinkTable(load_topology(name))
    n = len(links.gpus)
    pairs = [(s, d) for s in range(0, n, step) for d in range(0, n, max(1, step // 3)) if s != d]
    assert len(pairs) > 300
    for s, d in pairs:
        path, latency = links.route(s, d)
        assert path.tolist() == reference_route(links, s, d), (s, d)
        assert latency == float(links.latency[path].sum())
    fresh = LinkTable(links.graph)                    # routes found together: the same links and latencies
    hops, together = fresh.routes(pairs + [(3, 3)])
    assert hops.tolist() == [links.route(s, d)[0].size for s, d in pairs] + [0]
    assert together.tolist() == [link for s, d in pairs for link in links.route(s, d)[0].tolist()]
    assert all(fresh.route(s, d)[1] == links.route(s, d)[1] for s, d in pairs)      # cached by routes()
    assert [x.size for x in fresh.routes([])] == [0, 0]


def test_routes_found_together_have_the_latencies_of_routes_found_alone():
    """A line of 12 GPUs with random link latencies: the routes of every pair (1 to 11 hops) found
    together carry the very floats ``route`` computes (numpy's sum, whose order changes past 7
    terms)."""
    import networkx as nx
    import numpy as np
    rng = np.random.default_rng(5)
    names = [f"g{i}" for i in range(12)]
    g = nx.Graph(gpus=names)
    g.add_nodes_from(names, type="gpu")
    for a, b in zip(names, names[1:]):
        g.add_edge(a, b, bandwidth=1e9, latency=float(rng.random() * 10 ** rng.uniform(-8, -5)), kind="nvlink")
    pairs = [(s, d) for s in range(12) for d in range(12) if s != d]
    alone, together = LinkTable(g), LinkTable(g)
    together.routes(pairs)
    for s, d in pairs:
        assert together._routes[(s, d)][1] == alone.route(s, d)[1], (s, d)
        assert together._routes[(s, d)][0].tolist() == alone.route(s, d)[0].tolist()


def test_a_route_that_can_only_relay_over_nvlink_through_a_gpu_takes_it():
    """GPUs a - c - b in a line of NVLinks: the only route from a to b relays through GPU c (the
    worst rank a hop can have, and the only candidate)."""
    import networkx as nx
    g = nx.Graph(gpus=["a", "b", "c"])
    g.add_nodes_from(["a", "b", "c"], type="gpu")
    g.add_edge("a", "c", bandwidth=1e9, latency=1e-6, kind="nvlink")
    g.add_edge("c", "b", bandwidth=1e9, latency=2e-6, kind="nvlink")
    links = LinkTable(g)
    path, latency = links.route(0, 1)
    assert [links.link_name(link) for link in path] == ["a->c", "c->b"] and latency == pytest.approx(3e-6)


def random_cluster(seed: int, gpus: int, switches: int, extra_edges: int):
    """A random connected graph of GPUs and switches (a spanning tree plus extra edges)."""
    import random

    import networkx as nx
    rng = random.Random(seed)
    g = nx.Graph(gpus=[f"g{i}" for i in range(gpus)])
    nodes = [f"g{i}" for i in range(gpus)] + [f"s{i}" for i in range(switches)]
    for name in nodes:
        g.add_node(name, type="gpu" if name[0] == "g" else "switch")
    order = nodes[:]
    rng.shuffle(order)
    for i in range(1, len(order)):
        g.add_edge(order[i], order[rng.randrange(i)], bandwidth=1e9, latency=1e-6, kind=rng.choice(["nvlink", "ib"]))
    for _ in range(extra_edges):
        a, b = rng.sample(nodes, 2)
        g.add_edge(a, b, bandwidth=2e9, latency=1e-6, kind="ib")
    return g


@given(seed=st.integers(0, 10_000), gpus=st.integers(2, 70), switches=st.integers(0, 12),
       extra=st.integers(0, 40))
@settings(max_examples=40, deadline=None)
def test_distances_and_routes_match_networkx_on_random_graphs(seed, gpus, switches, extra):
    """The distances of a whole search (sim.network.links) are networkx's shortest path lengths;
    every route is a shortest path of links that exist, the same whichever way it was found (one
    by one from whole searches, all together from searches stopped at each destination's farthest
    source, one by one with a distance cache of one entry)."""
    import networkx as nx

    from sim.network import links as links_module
    g = random_cluster(seed, gpus, switches, extra)
    table = LinkTable(g)
    index = {n: i for i, n in enumerate(table.names)}
    for t in range(gpus):
        want = nx.single_source_shortest_path_length(g, f"g{t}")
        got = table._distances_to(table.gpus[t])
        assert {table.names[v]: int(d) for v, d in enumerate(got)} == want
    pairs = [(a, b) for a in range(gpus) for b in range(gpus)]
    together = LinkTable(g)
    together.routes(pairs)                       # searches stopped at each destination's farthest source
    tiny = LinkTable(g)
    old = links_module.DISTANCE_CACHE_BYTES
    links_module.DISTANCE_CACHE_BYTES = 1        # one distance array kept at a time
    try:
        for a, b in pairs:
            one = table.route(a, b)[0].tolist()
            assert together.route(a, b)[0].tolist() == one == tiny.route(a, b)[0].tolist()
            assert len(one) == nx.shortest_path_length(g, f"g{a}", f"g{b}")
            node = index[f"g{a}"]
            for link in one:                    # a chain of links from a to b
                assert table.src[link] == node
                node = table.dst[link]
            assert node == index[f"g{b}"]
    finally:
        links_module.DISTANCE_CACHE_BYTES = old
