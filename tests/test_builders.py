"""topologies.builders: counts by formula, rails, planes, graph checks."""
import math

import networkx as nx
import pytest

from topologies import TopologyError, check_graph, fat_tree_cluster, hgx_node
from topologies.builders import gpu_name


def by_type(g):
    out = {}
    for _, d in g.nodes(data=True):
        out[d["type"]] = out.get(d["type"], 0) + 1
    return out


@pytest.mark.parametrize("gpus", [1, 4, 8])
def test_hgx_node_counts(gpus):
    g = hgx_node(gpus, 160e9)
    assert by_type(g) == {"nvswitch": 1, "gpu": gpus}
    assert g.number_of_edges() == gpus
    assert g.degree("n0/nvswitch") == gpus
    assert all(d["bandwidth"] == 160e9 for _, _, d in g.edges(data=True))


@pytest.mark.parametrize("nodes", [1, 2, 5, 16])
@pytest.mark.parametrize("gpn,planes", [(8, 1), (8, 8), (8, 2), (4, 4)])
@pytest.mark.parametrize("radix,over", [(8, 1), (16, 1), (16, 3)])
def test_fat_tree_counts_by_formula(nodes, gpn, planes, radix, over):
    down = int(radix * over // (1 + over))
    up = radix - down
    hosts = nodes * gpn // planes
    leaves = math.ceil(hosts / down)
    if leaves > radix:
        with pytest.raises(TopologyError, match="holds at most"):
            fat_tree_cluster(nodes, gpn, switch_radix=radix, oversubscription=over, planes=planes)
        return
    g = fat_tree_cluster(nodes, gpn, switch_radix=radix, oversubscription=over, planes=planes)
    assert by_type(g) == {"gpu": nodes * gpn, "nvswitch": nodes, "nic": nodes * gpn,
                          "leaf": planes * leaves, "spine": planes * up}
    assert g.number_of_edges() == 3 * nodes * gpn + planes * leaves * up
    for n, d in g.nodes(data=True):
        if d["type"] == "gpu":
            assert g.degree(n) == 2
        elif d["type"] == "nic":
            assert g.degree(n) == 2
        elif d["type"] == "nvswitch":
            assert g.degree(n) == gpn
        elif d["type"] == "spine":
            assert g.degree(n) == leaves
        elif d["type"] == "leaf":
            assert up < g.degree(n) <= up + down
    assert sum(g.degree(n) - up for n, d in g.nodes(data=True) if d["type"] == "leaf") == nodes * gpn
    assert nx.is_connected(g)
    if nodes > 1:
        assert g.graph["gpus"][gpn + 1] == gpu_name(1, 1)


def test_rail_optimized_puts_same_index_gpus_on_one_leaf():
    g = fat_tree_cluster(4, 8, switch_radix=16, rail_optimized=True)
    leaf = lambda n, i: next(v for v in g[f"n{n}/nic{i}"] if g.nodes[v]["type"] == "leaf")
    assert len({leaf(n, 3) for n in range(4)}) == 1
    g2 = fat_tree_cluster(4, 8, switch_radix=16, rail_optimized=False)
    leaf2 = lambda n, i: next(v for v in g2[f"n{n}/nic{i}"] if g2.nodes[v]["type"] == "leaf")
    assert len({leaf2(0, i) for i in range(8)}) == 1
    assert leaf2(0, 0) != leaf2(2, 0)


def test_multi_plane_planes_are_disjoint():
    g = fat_tree_cluster(4, 8, switch_radix=16, planes=8)
    for i in range(8):
        nic = f"n0/nic{i}"
        assert g.nodes[nic]["plane"] == i
        leaf = next(v for v in g[nic] if g.nodes[v]["type"] == "leaf")
        assert leaf.startswith(f"p{i}/")
    # without the NVSwitches the planes fall apart into 8 components (+ isolated GPUs)
    h = g.copy()
    h.remove_nodes_from([n for n, d in g.nodes(data=True) if d["type"] in ("nvswitch", "gpu")])
    assert nx.number_connected_components(h) == 8


def test_check_graph_refuses_a_link_slower_than_a_megabyte_per_second():
    g = nx.Graph()
    g.add_node("a", type="gpu")
    g.add_node("b", type="gpu")
    g.add_edge("a", "b", bandwidth=1e6, latency=0.0)
    assert check_graph(g).edges["a", "b"]["bandwidth"] == 1e6
    g.edges["a", "b"]["bandwidth"] = 5e-324
    with pytest.raises(TopologyError, match=r"edge \('a', 'b'\) bandwidth \(bytes/s\) must be a finite number in "
                                            r"\[1,000,000, "):
        check_graph(g)


def test_check_graph_missing_attribute():
    g = nx.Graph()
    g.add_node("a", type="gpu")
    g.add_node("b")
    g.add_edge("a", "b", bandwidth=1.0, latency=0.0)
    with pytest.raises(TopologyError, match="node 'b' has no 'type'"):
        check_graph(g)
    g.nodes["b"]["type"] = "gpu"
    del g.edges["a", "b"]["latency"]
    with pytest.raises(TopologyError, match="edge \\('a', 'b'\\) has no 'latency'"):
        check_graph(g)


@pytest.mark.parametrize("domains,per,tray", [(1, 72, 4), (4, 72, 4), (2, 64, 4), (3, 16, 8)])
def test_nvlink_domain_counts_and_trays(domains, per, tray):
    """GB200 NVL72's shape: each domain's GPUs on one NVLink switch (an EP group of up to ``per`` GPUs
    stays on NVLink), one NIC per GPU on the fat-tree, trays numbered within the domain."""
    from topologies import nvlink_domain_cluster
    g = nvlink_domain_cluster(domains, per, tray, nvlink_bandwidth=900e9, nic_bandwidth=50e9)
    types = by_type(g)
    assert types["gpu"] == types["nic"] == domains * per and types["nvswitch"] == domains
    assert g.graph["gpus_per_node"] == g.graph["nvlink_domain"] == per and g.graph["gpus_per_tray"] == tray
    assert g.degree("n0/nvswitch") == per
    assert [g.nodes[gpu_name(0, i)]["tray"] for i in (0, tray - 1, tray, per - 1)] == [0, 0, 1, per // tray - 1]
    assert nx.shortest_path_length(g, gpu_name(0, 0), gpu_name(0, per - 1)) == 2          # NVLink, one switch hop
    assert g.edges[gpu_name(0, 5), "n0/nvswitch"]["bandwidth"] == 900e9


def test_nvlink_domain_refusals():
    from topologies import nvlink_domain_cluster
    with pytest.raises(TopologyError, match=r"gpus_per_tray \(5\) must divide gpus_per_domain \(72\)"):
        nvlink_domain_cluster(2, 72, 5)
    with pytest.raises(TopologyError, match=r"domains must be an integer in \[1, 100,000,000\], got 0"):
        nvlink_domain_cluster(0)
