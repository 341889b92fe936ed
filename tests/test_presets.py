"""topologies.presets: preset and user YAML files, and what they refuse."""
import pytest

from sim.checks import InputError
from topologies import TopologyError, load_topology, preset_names


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
    ("kind: fat_tree\nnodes: 2\nnic_bandwidth_GBps: -5\n", r"nic_bandwidth_GBps \(GB/s\) must be a finite number in \[0.001, 1,000,000\], got -5"),
    ("kind: fat_tree\nnodes: 0\n", r"nodes must be an integer in \[1, 100,000,000\], got 0"),
    ("kind: fat_tree\nnodes: 2\nfoo: 1\n", "unknown field\\(s\\) 'foo'"),
    ("kind: torus\n", "kind must be one of"),
    ("kind: fat_tree\n", "missing field 'nodes'"),
    ("kind: fat_tree\nnodes: 2\nplanes: 3\n", "planes must divide gpus_per_node"),
    ("kind: graph\nnodes:\n- {name: a, type: gpu}\n- {name: b, type: gpu}\nedges: []\n", "GPU 'b' cannot reach GPU 'a'"),
    ("kind: graph\nnodes:\n- {name: a, type: gpu}\n- {name: b, type: gpu}\nedges:\n- {u: a, v: b, latency_us: 1}\n",
     "edges\\[0\\].*missing bandwidth_GBps"),
    ("kind: graph\nnodes:\n- {name: a, type: gpu}\n- {name: b, type: gpu}\nedges:\n- {u: a, v: b, bandwidth_GBps: 0, latency_us: 1}\n",
     r"edges\[0\].bandwidth_GBps must be a finite number in \[0.001, 1,000,000\], got 0"),
    ("kind: graph\nnodes:\n- {name: a, type: gpu}\n- {name: b, type: gpu}\nedges:\n- {u: a, v: b, bandwidth_GBps: 1, latency_us: .nan}\n",
     r"edges\[0\].latency_us must be a finite number in \[0, 1,000,000\], got nan"),
    ("kind: graph\nnodes: 5\n", "nodes must be a list of mappings, got 5"),
    ("kind: graph\nnodes:\n- {name: [1], type: gpu}\n", r"nodes\[0\].name must be text or an integer"),
    ("kind: graph\nnodes:\n- {name: a, type: gpu}\nedges: [x]\n", r"edges\[0\] must be a mapping"),
    ("kind: [fat_tree]\n", "kind must be one of"),
    ("kind: fat_tree\nnodes: 2\n1: 2\n", "unknown field\\(s\\) 1"),
    ("kind: fat_tree\nnodes: 100000000\nswitch_radix: 100000\n", r"needs about .* graph nodes, over the limit of "
     r"1,000,000; raise it with --max-nodes"),
    ("kind: fat_tree\nnodes: 5\nswitch_radix: 1000000\n", r"switch_radix must be an integer in \[2, 100,000\]"),
    ("kind: fat_tree\nnodes: 2\nrail_optimized: 3\n", "rail_optimized must be true or false"),
    ("kind: hgx_node\nnvls: yes please\n", "nvls must be true or false, got 'yes please'"),
    ("kind: [1, 2\n", r"not valid YAML at line 2, column 1"),
    ("name: !!python/object/apply:os.system [echo hi]\nkind: hgx_node\n", r"not valid YAML at line 1.*python"),
    ("- just a list\n", "expected a mapping"),
])
def test_bad_yaml(tmp_path, text, pattern):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(InputError, match=pattern):      # TopologyError, or TooLarge for the size limit
        load_topology(str(p))


def test_unknown_preset_lists_presets():
    with pytest.raises(TopologyError, match="h800-2048"):
        load_topology("h900-4096")


@pytest.mark.parametrize("name,gpus,per_node,nvlink,nic,gpu", [
    ("dgx-a100-superpod", 3072, 8, 300e9, 25e9, "a100"),
    ("dgx-h100-superpod", 1024, 8, 450e9, 50e9, "h100"),
    ("dgx-b200", 256, 8, 900e9, 50e9, "b200"),
    ("gb200-nvl72", 576, 72, 900e9, 50e9, "gb200"),
    ("gb200-nvl72-64gpu", 512, 64, 900e9, 50e9, "gb200"),
    ("zb-a100-roce", 32, 8, 300e9, 25e9, "a100"),
])
def test_cluster_presets_of_the_validation_suite(name, gpus, per_node, nvlink, nic, gpu):
    g = load_topology(name)
    assert len(g.graph["gpus"]) == gpus and g.graph["gpus_per_node"] == per_node and g.graph["gpu_model"] == gpu
    assert g.edges["n0/gpu0", "n0/nvswitch"]["bandwidth"] == nvlink
    assert g.edges["n0/gpu0", "n0/nic0"]["bandwidth"] == nic


@pytest.mark.parametrize("field,value,shown", [
    ("nic_bandwidth_GBps", 400, "nic_bandwidth_GBps 400 GB/s is above the fastest link on the market (100 GB/s per "
                                "direction); was a Gb/s figure meant (50 GB/s)?"),
    ("nvlink_bandwidth_GBps", 3600, "nvlink_bandwidth_GBps 3600 GB/s is above the fastest link on the market (900 "
                                    "GB/s per direction); was a Gb/s figure meant (450 GB/s)?"),
])
def test_a_link_faster_than_any_on_the_market_is_warned(tmp_path, field, value, shown):
    """A Gb/s figure typed into a GB/s field (400 for a 400G NIC) is accepted with a warning naming
    the field, the value and the fastest on the market; the presets' own figures raise none."""
    import warnings

    from sim.checks import InputWarning
    spec = {"kind": "fat_tree", "gpu": "h100", "nodes": 2, "gpus_per_node": 8, "nvlink_bandwidth_GBps": 450,
            "nic_bandwidth_GBps": 50, field: value}
    path = tmp_path / "mine.yaml"
    path.write_text("\n".join(f"{k}: {v}" for k, v in spec.items()))
    with pytest.warns(InputWarning) as caught:
        load_topology(str(path))
    assert [str(w.message) for w in caught] == [f"topology 'mine': {shown}"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputWarning)
        for name in preset_names():
            load_topology(name)
