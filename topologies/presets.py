"""YAML presets (``topologies/presets/*.yaml``) and users' own YAML files -> networkx graphs.

A file is a mapping with ``kind``:

* ``fat_tree``: the fields of :func:`topologies.builders.fat_tree_cluster`, bandwidths in GB/s
  (``nvlink_bandwidth_GBps``, ``nic_bandwidth_GBps``: 1e9 bytes/s per direction);
* ``hgx_node``: ``gpus_per_node``, ``nvlink_bandwidth_GBps``;
* ``graph``: an explicit graph: ``nodes: [{name, type}]`` and
  ``edges: [{u, v, bandwidth_GBps, latency_us}]`` (GPUs in the order listed).

Optional everywhere: ``name``, ``gpu`` (a GPU preset name, for compute figures), ``description``.
"""
from __future__ import annotations

from pathlib import Path

import networkx as nx
import yaml

from .builders import TopologyError, check_graph, fat_tree_cluster, hgx_node

PRESET_DIR = Path(__file__).with_name("presets")
COMMON = {"name", "kind", "gpu", "description"}
FIELDS = {
    "fat_tree": {"nodes", "gpus_per_node", "nvlink_bandwidth_GBps", "nic_bandwidth_GBps", "switch_radix",
                 "oversubscription", "rail_optimized", "planes"},
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
                            "and not an existing .yaml file")
    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise TopologyError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(spec, dict):
        raise TopologyError(f"{path}: expected a mapping of fields, got {type(spec).__name__}")
    spec.setdefault("name", path.stem)
    return spec


def build_from_spec(spec: dict) -> nx.Graph:
    """Check the fields of a spec and build its graph."""
    kind = spec.get("kind")
    if kind not in FIELDS:
        raise TopologyError(f"topology {spec.get('name')!r}: kind must be one of {', '.join(FIELDS)}, got {kind!r}")
    unknown = set(spec) - COMMON - FIELDS[kind]
    if unknown:
        raise TopologyError(f"topology {spec.get('name')!r}: unknown field(s) {', '.join(sorted(unknown))}; "
                            f"allowed for kind {kind}: {', '.join(sorted(FIELDS[kind] | COMMON))}")
    if kind == "graph":
        g = _explicit_graph(spec)
    else:
        args = {k: v for k, v in spec.items() if k in FIELDS[kind]}
        for key in ("nvlink_bandwidth_GBps", "nic_bandwidth_GBps"):
            if key in args:
                value = args.pop(key)
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise TopologyError(f"topology {spec.get('name')!r}: {key} must be a number (GB/s), got {value!r}")
                args[key.replace("_GBps", "")] = value * 1e9
        if kind == "fat_tree":
            if "nodes" not in args:
                raise TopologyError(f"topology {spec.get('name')!r}: missing field 'nodes'")
            g = fat_tree_cluster(name=spec["name"], **args)
        else:
            g = hgx_node(**args)
    g.graph["name"] = spec["name"]
    g.graph["gpu_model"] = spec.get("gpu")
    return check_graph(g)


def _explicit_graph(spec: dict) -> nx.Graph:
    g = nx.Graph(name=spec.get("name"))
    for i, node in enumerate(spec.get("nodes") or []):
        if not isinstance(node, dict) or "name" not in node or "type" not in node:
            raise TopologyError(f"nodes[{i}] must have 'name' and 'type', got {node!r}")
        g.add_node(node["name"], **{k: v for k, v in node.items() if k != "name"})
    for i, edge in enumerate(spec.get("edges") or []):
        missing = {"u", "v", "bandwidth_GBps", "latency_us"} - set(edge or {})
        if missing:
            raise TopologyError(f"edges[{i}] ({edge!r}) is missing {', '.join(sorted(missing))}")
        for end in ("u", "v"):
            if edge[end] not in g:
                raise TopologyError(f"edges[{i}] names node {edge[end]!r}, which is not in nodes")
        bw, lat = edge["bandwidth_GBps"], edge["latency_us"]
        g.add_edge(edge["u"], edge["v"], bandwidth=bw * 1e9 if isinstance(bw, (int, float)) else bw,
                   latency=lat * 1e-6 if isinstance(lat, (int, float)) else lat, kind=edge.get("kind", "link"))
    g.graph["gpus"] = [n for n, d in g.nodes(data=True) if d.get("type") == "gpu"]
    return g


def load_topology(name_or_path: str) -> nx.Graph:
    """A preset by name (see :func:`preset_names`) or a user's YAML file, as a checked graph."""
    return build_from_spec(read_spec(name_or_path))
