"""Cluster topologies: networkx builders and YAML presets. They build graphs and nothing else."""
from .builders import TopologyError, check_graph, fat_tree_cluster, hgx_node, nvlink_domain_cluster
from .presets import build_from_spec, load_topology, preset_names, read_spec

__all__ = ["TopologyError", "build_from_spec", "check_graph", "fat_tree_cluster", "hgx_node", "load_topology",
           "nvlink_domain_cluster", "preset_names", "read_spec"]
