"""Topology builders: counts by formula, presets, bad input."""
import math

import networkx as nx
import pytest

from topologies import TopologyError, check_graph, fat_tree_cluster, hgx_node, load_topology, preset_names
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


def test_presets():
    assert {"h800-2048", "h800-16", "h100-1024"} <= set(preset_names())
    g = load_topology("h800-2048")
    assert len(g.graph["gpus"]) == 2048 and g.graph["planes"] == 8 and g.graph["gpu_model"] == "h800"
    assert g.graph["leaves_per_plane"] == 8 and g.graph["spines_per_plane"] == 32
    e = g.edges["n0/gpu0", "n0/nvswitch"]
    assert e["bandwidth"] == 160e9 and e["kind"] == "nvlink"
    assert g.edges["n0/nic0", "p0/leaf0"]["bandwidth"] == 50e9
    h = load_topology("h100-1024")
    assert len(h.graph["gpus"]) == 1024 and h.graph["planes"] == 1
    assert h.edges["n0/gpu0", "n0/nvswitch"]["bandwidth"] == 450e9


def test_user_yaml(tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text("kind: fat_tree\nnodes: 4\ngpus_per_node: 8\nnvlink_bandwidth_GBps: 200\nnic_bandwidth_GBps: 25\n"
                 "switch_radix: 16\noversubscription: 3\nrail_optimized: false\nplanes: 1\n")
    g = load_topology(str(p))
    assert len(g.graph["gpus"]) == 32 and g.graph["name"] == "mine"


def test_explicit_graph_yaml(tmp_path):
    p = tmp_path / "g.yaml"
    p.write_text("kind: graph\nnodes:\n- {name: a, type: gpu}\n- {name: b, type: gpu}\n- {name: s, type: nvswitch}\n"
                 "edges:\n- {u: a, v: s, bandwidth_GBps: 10, latency_us: 1}\n- {u: b, v: s, bandwidth_GBps: 10, latency_us: 1}\n")
    g = load_topology(str(p))
    assert g.graph["gpus"] == ["a", "b"] and g.edges["a", "s"]["bandwidth"] == 10e9


@pytest.mark.parametrize("text,pattern", [
    ("kind: fat_tree\nnodes: 2\nnic_bandwidth_GBps: -5\n", "nic_bandwidth must be a positive number, got -5"),
    ("kind: fat_tree\nnodes: 0\n", "nodes must be a positive integer, got 0"),
    ("kind: fat_tree\nnodes: 2\nfoo: 1\n", "unknown field\\(s\\) foo"),
    ("kind: torus\n", "kind must be one of"),
    ("kind: fat_tree\n", "missing field 'nodes'"),
    ("kind: fat_tree\nnodes: 2\nplanes: 3\n", "planes must divide gpus_per_node"),
    ("kind: graph\nnodes:\n- {name: a, type: gpu}\n- {name: b, type: gpu}\nedges: []\n", "GPU 'b' cannot reach GPU 'a'"),
    ("kind: graph\nnodes:\n- {name: a, type: gpu}\n- {name: b, type: gpu}\nedges:\n- {u: a, v: b, latency_us: 1}\n",
     "edges\\[0\\].*missing bandwidth_GBps"),
    ("kind: graph\nnodes:\n- {name: a, type: gpu}\n- {name: b, type: gpu}\nedges:\n- {u: a, v: b, bandwidth_GBps: 0, latency_us: 1}\n",
     "edge \\('a', 'b'\\) has bandwidth 0"),
    ("- just a list\n", "expected a mapping"),
])
def test_bad_yaml(tmp_path, text, pattern):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(TopologyError, match=pattern):
        load_topology(str(p))


def test_unknown_preset_lists_presets():
    with pytest.raises(TopologyError, match="h800-2048"):
        load_topology("h900-4096")


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
