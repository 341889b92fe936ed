"""YAML presets (``topologies/presets/*.yaml``) and users' own YAML files -> networkx graphs.

A file is a mapping with ``kind``:

* ``fat_tree``: the fields of :func:`topologies.builders.fat_tree_cluster`, bandwidths in GB/s
  (``nvlink_bandwidth_GBps``, ``nic_bandwidth_GBps``: 1e9 bytes/s per direction);
* ``nvlink_domain``: the fields of :func:`topologies.builders.nvlink_domain_cluster` (racks whose
  NVLink domain spans many trays, GB200 NVL72): ``domains``, ``gpus_per_domain``, ``gpus_per_tray``
  and the fat-tree fields, bandwidths in GB/s as above;
* ``hgx_node``: ``gpus_per_node``, ``nvlink_bandwidth_GBps``;
* ``graph``: an explicit graph: ``nodes: [{name, type}]`` and
  ``edges: [{u, v, bandwidth_GBps, latency_us}]`` (GPUs in the order listed).

Optional everywhere: ``name``, ``gpu`` (a GPU preset name, for compute figures), ``description``,
``nvls`` (``true`` where the nodes' NVSwitches reduce and multicast in the switch, NVLink SHARP:
third-generation NVSwitch and later, HGX H100 and B200; NCCL's all-reduce inside such a node then
runs as NVLS, :mod:`sim.network.nccl`; default ``false``).
"""
from __future__ import annotations

from pathlib import Path

import networkx as nx

from sim import limits
from sim.checks import choice, did_you_mean, number, read_yaml, warn

from .builders import (
    MAX_BANDWIDTH,
    MAX_LATENCY_S,
    MIN_BANDWIDTH,
    TopologyError,
    check_graph,
    fat_tree_cluster,
    hgx_node,
    nvlink_domain_cluster,
)

PRESET_DIR = Path(__file__).with_name("presets")
# The fastest links on the market, GB/s per direction (a value above is accepted with a warning: a
# Gb/s figure typed into a GB/s field reads 8x too fast). NVLink 5 (B200, GB200): 1.8 TB/s per GPU
# both directions together (NVIDIA Blackwell datasheet); ConnectX-8 SuperNIC: 800 Gb/s (NVIDIA
# ConnectX-8 product page).
FASTEST_GBPS = {"nvlink_bandwidth_GBps": 900.0, "nic_bandwidth_GBps": 100.0}
COMMON = {"name", "kind", "gpu", "description", "nvls"}
FIELDS = {
    "fat_tree": {"nodes", "gpus_per_node", "nvlink_bandwidth_GBps", "nic_bandwidth_GBps", "switch_radix",
                 "oversubscription", "rail_optimized", "planes"},
    "nvlink_domain": {"domains", "gpus_per_domain", "gpus_per_tray", "nvlink_bandwidth_GBps", "nic_bandwidth_GBps",
                      "switch_radix", "oversubscription", "rail_optimized", "planes"},
    "hgx_node": {"gpus_per_node", "nvlink_bandwidth_GBps"},
    "graph": {"nodes", "edges"},
}


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def read_spec(name_or_path: str) -> dict:
    """The YAML mapping of a preset name or a file path; clear errors for unknown names."""
    path = Path(name_or_path)
    if name_or_path in preset_names():
        path = PRESET_DIR / f"{name_or_path}.yaml"
    elif not (path.suffix in (".yaml", ".yml") and path.exists()):
        raise TopologyError(f"unknown topology {name_or_path!r}: not a preset ({', '.join(preset_names())}) "
                            f"and not an existing .yaml file{did_you_mean(name_or_path, preset_names())}")
    spec = read_yaml(path, TopologyError)
    if not isinstance(spec, dict):
        raise TopologyError(f"{path}: expected a mapping of fields, got {type(spec).__name__}")
    spec.setdefault("name", path.stem)
    for key in ("name", "gpu", "description"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            raise TopologyError(f"{path}: {key} must be text, got {spec[key]!r}")
    return spec


def build_from_spec(spec: dict) -> nx.Graph:
    """Check the fields of a spec and build its graph."""
    kind = choice(spec.get("kind"), f"topology {spec.get('name')!r}: kind", tuple(FIELDS), error=TopologyError)
    unknown = set(spec) - COMMON - FIELDS[kind]
    if unknown:
        raise TopologyError(f"topology {spec.get('name')!r}: unknown field(s) {', '.join(repr(k) for k in sorted(unknown, key=str))}; "
                            f"allowed for kind {kind}: {', '.join(sorted(FIELDS[kind] | COMMON))}")
    if kind == "graph":
        g = _explicit_graph(spec)
    else:
        args = {k: v for k, v in spec.items() if k in FIELDS[kind]}
        for key in ("nvlink_bandwidth_GBps", "nic_bandwidth_GBps"):
            if key in args:
                value = number(args.pop(key), f"topology {spec.get('name')!r}: {key} (GB/s)", low=MIN_BANDWIDTH / 1e9,
                               high=MAX_BANDWIDTH / 1e9, error=TopologyError)
                if value > FASTEST_GBPS[key]:
                    warn(f"topology {spec.get('name')!r}: {key} {value:g} GB/s is above the fastest link on the "
                         f"market ({FASTEST_GBPS[key]:g} GB/s per direction); was a Gb/s figure meant "
                         f"({value / 8:g} GB/s)?")
                args[key.replace("_GBps", "")] = value * 1e9
        if kind in ("fat_tree", "nvlink_domain"):
            count = "nodes" if kind == "fat_tree" else "domains"
            if count not in args:
                raise TopologyError(f"topology {spec.get('name')!r}: missing field {count!r}")
            build = fat_tree_cluster if kind == "fat_tree" else nvlink_domain_cluster
            g = build(name=spec["name"], **args)
        else:
            g = hgx_node(**args)
    g.graph["name"] = spec["name"]
    g.graph["gpu_model"] = spec.get("gpu")
    if not isinstance(spec.get("nvls", False), bool):
        raise TopologyError(f"topology {spec.get('name')!r}: nvls must be true or false, got {spec['nvls']!r}")
    g.graph["nvls"] = spec.get("nvls", False)
    return check_graph(g)


def _explicit_graph(spec: dict) -> nx.Graph:
    name = spec.get("name")
    nodes, edges = spec.get("nodes") or [], spec.get("edges") or []
    for key, value in (("nodes", nodes), ("edges", edges)):
        if not isinstance(value, list):
            raise TopologyError(f"topology {name!r}: {key} must be a list of mappings, got {value!r}")
    limits.check("max_graph_nodes", len(nodes), f"topology {name!r}")
    limits.check_memory(len(nodes), f"topology {name!r}")
    g = nx.Graph(name=name)
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or "name" not in node or "type" not in node:
            raise TopologyError(f"topology {name!r}: nodes[{i}] must have 'name' and 'type', got {node!r}")
        if not isinstance(node["name"], (str, int)) or isinstance(node["name"], bool):
            raise TopologyError(f"topology {name!r}: nodes[{i}].name must be text or an integer, got {node['name']!r}")
        if node["name"] in g:
            raise TopologyError(f"topology {name!r}: nodes[{i}] repeats the name {node['name']!r}")
        g.add_node(node["name"], **{k: v for k, v in node.items() if k != "name"})
    for i, edge in enumerate(edges):
        if not isinstance(edge, dict):
            raise TopologyError(f"topology {name!r}: edges[{i}] must be a mapping of u, v, bandwidth_GBps, "
                                f"latency_us, got {edge!r}")
        missing = {"u", "v", "bandwidth_GBps", "latency_us"} - set(edge)
        if missing:
            raise TopologyError(f"topology {name!r}: edges[{i}] ({edge!r}) is missing {', '.join(sorted(missing))}")
        for end in ("u", "v"):
            if not isinstance(edge[end], (str, int)) or edge[end] not in g:
                raise TopologyError(f"topology {name!r}: edges[{i}] names node {edge[end]!r}, which is not in nodes")
        if edge["u"] == edge["v"]:
            raise TopologyError(f"topology {name!r}: edges[{i}] joins node {edge['u']!r} to itself")
        bw = number(edge["bandwidth_GBps"], f"topology {name!r}: edges[{i}].bandwidth_GBps", low=MIN_BANDWIDTH / 1e9,
                    high=MAX_BANDWIDTH / 1e9, error=TopologyError)
        lat = number(edge["latency_us"], f"topology {name!r}: edges[{i}].latency_us", low=0,
                     high=MAX_LATENCY_S * 1e6, error=TopologyError)
        g.add_edge(edge["u"], edge["v"], bandwidth=bw * 1e9, latency=lat * 1e-6, kind=str(edge.get("kind", "link")))
    g.graph["gpus"] = [n for n, d in g.nodes(data=True) if d.get("type") == "gpu"]
    return g


def load_topology(name_or_path: str) -> nx.Graph:
    """A preset by name (see :func:`preset_names`) or a user's YAML file, as a checked graph."""
    return build_from_spec(read_spec(name_or_path))
