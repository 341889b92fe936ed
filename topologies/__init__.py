"""Cluster topologies: networkx builders and YAML presets. They build graphs and nothing else."""
from .builders import TopologyError, check_graph, fat_tree_cluster, hgx_node
from .presets import build_from_spec, load_topology, preset_names, read_spec

__all__ = ["TopologyError", "check_graph", "fat_tree_cluster", "hgx_node", "build_from_spec", "load_topology",
           "preset_names", "read_spec"]
