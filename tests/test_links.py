"""sim.network.links: routes (shortest, deterministic ECMP, GPU relays only when forced), pickling."""
import pickle

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
    assert links.route(0, 1)[0].size == 1
    half = links.scaled({"nvlink": 0.5})
    assert {links.kind[i]: half.capacity[i] for i in range(len(links))} == {"nvlink": 0.5e9, "ib": 2e9}
