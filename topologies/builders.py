"""Cluster topologies as networkx graphs. Builders check their arguments, build, and do nothing else.

Nodes carry ``type`` in {``gpu``, ``nvswitch``, ``nic``, ``leaf``, ``spine``}; GPUs also carry
``gpu`` (global index, node-major: ``node * gpus_per_node + local``), ``node`` and ``local``.
Edges carry ``bandwidth`` (bytes/s, per direction: a full-duplex link carries this much each way)
and ``latency`` (s), and ``kind`` in {``nvlink``, ``pcie``, ``ib``}.

Latencies are split so that path sums reproduce DeepSeek's measured small-message latencies
(DeepSeek's ISCA'25 "Insights" paper, arXiv 2505.09343): NVLink GPU->NVSwitch->GPU 3.3 us (1.65 us per hop); IB
GPU->NIC->leaf->NIC->GPU 2.8 us (0.5 us per GPU-NIC hop, 0.9 us per NIC-leaf hop); across leaves
the leaf->spine->leaf hops add 0.9 us (0.45 us each), 3.7 us in all.

Node names: ``n{node}/gpu{local}``, ``n{node}/nvswitch``, ``n{node}/nic{local}``,
``p{plane}/leaf{k}``, ``p{plane}/spine{k}``. ``graph.graph["gpus"]`` lists GPU node names by global
index.
"""
from __future__ import annotations

import math

import networkx as nx

from sim import limits
from sim.checks import InputError, number

NVLINK_HOP_LATENCY_S = 1.65e-6
GPU_NIC_LATENCY_S = 0.5e-6
NIC_LEAF_LATENCY_S = 0.9e-6
LEAF_SPINE_LATENCY_S = 0.45e-6


MAX_BANDWIDTH = 1e15      # bytes/s: a petabyte per second per link, far above any real link
MIN_BANDWIDTH = 1e6       # bytes/s: a megabyte per second, far below any real link (a slower one is a typo)
MAX_LATENCY_S = 1.0


class TopologyError(InputError):
    """A topology argument or graph is invalid; the message names the field, node or edge."""


def _positive(name: str, value, high: float = MAX_BANDWIDTH) -> float:
    return float(number(value, name, low=MIN_BANDWIDTH, high=high, error=TopologyError))


def _positive_int(name: str, value, high: int = 100_000_000) -> int:
    return number(value, name, integer=True, low=1, high=high, error=TopologyError)


def gpu_name(node: int, local: int) -> str:
    return f"n{node}/gpu{local}"


def add_hgx_node(g: nx.Graph, node: int, gpus_per_node: int, nvlink_bandwidth: float) -> None:
    """One HGX-style server: ``gpus_per_node`` GPUs on one NVSwitch, each GPU with
    ``nvlink_bandwidth`` bytes/s per direction to the switch (full bisection inside the node)."""
    sw = f"n{node}/nvswitch"
    g.add_node(sw, type="nvswitch", node=node)
    for local in range(gpus_per_node):
        gpu = gpu_name(node, local)
        g.add_node(gpu, type="gpu", gpu=node * gpus_per_node + local, node=node, local=local)
        g.add_edge(gpu, sw, bandwidth=nvlink_bandwidth, latency=NVLINK_HOP_LATENCY_S, kind="nvlink")


def hgx_node(gpus_per_node: int = 8, nvlink_bandwidth: float = 160e9) -> nx.Graph:
    """A single HGX node (no scale-out network). H800: 160e9 B/s effective per direction."""
    gpus_per_node = _positive_int("gpus_per_node", gpus_per_node, high=100_000)
    _positive("nvlink_bandwidth", nvlink_bandwidth)
    g = nx.Graph(name="hgx-node")
    add_hgx_node(g, 0, gpus_per_node, nvlink_bandwidth)
    g.graph["gpus"] = [gpu_name(0, i) for i in range(gpus_per_node)]
    g.graph.update(nodes=1, gpus_per_node=gpus_per_node)
    return g


def fat_tree_cluster(nodes: int, gpus_per_node: int = 8, nvlink_bandwidth: float = 160e9,
                     nic_bandwidth: float = 50e9, switch_radix: int = 64, oversubscription: float = 1.0,
                     rail_optimized: bool = True, planes: int = 1, name: str = "cluster") -> nx.Graph:
    """HGX nodes with one NIC per GPU on a two-layer leaf/spine fat-tree.

    - ``nic_bandwidth``: bytes/s per direction of each NIC port and fabric link (400 Gb/s = 50e9).
    - ``oversubscription`` o (down:up ports of a leaf, >= 1): a leaf of radix k has
      ``d = floor(k*o/(1+o))`` host ports and ``k - d`` uplinks, one to each spine of its plane.
    - ``rail_optimized``: NIC i of every node goes to the leaves of rail i (leaves are filled rail
      by rail), so same-index GPUs of different nodes meet one leaf up; otherwise NICs are cabled
      node by node (a node's NICs on the same leaf).
    - ``planes`` p (DeepSeek's multi-plane fat-tree): p independent fat-trees; GPU i (and its NIC)
      is on plane ``i mod p``. Traffic between planes must cross a node's NVLink.
    Each plane has ``ceil(hosts_in_plane / d)`` leaves and ``k - d`` spines.
    """
    nodes = _positive_int("nodes", nodes)
    gpus_per_node = _positive_int("gpus_per_node", gpus_per_node, high=100_000)
    _positive("nvlink_bandwidth", nvlink_bandwidth)
    fabric = _ScaleOut.check(nodes, gpus_per_node, nic_bandwidth, switch_radix, oversubscription, rail_optimized,
                             planes, name)
    g = nx.Graph(name=name)
    for n in range(nodes):
        add_hgx_node(g, n, gpus_per_node, nvlink_bandwidth)
    fabric.add_to(g)
    return g


def nvlink_domain_cluster(domains: int, gpus_per_domain: int = 72, gpus_per_tray: int = 4,
                          nvlink_bandwidth: float = 900e9, nic_bandwidth: float = 50e9, switch_radix: int = 64,
                          oversubscription: float = 1.0, rail_optimized: bool = True, planes: int = 1,
                          name: str = "nvl-cluster") -> nx.Graph:
    """Racks whose NVLink domain spans many compute trays (GB200 NVL72: 18 trays of 4 GPUs, 72 GPUs on
    one NVLink switch system), each GPU with its own NIC on a two-layer fat-tree between racks.

    The rack's NVLink switch trays are one non-blocking switch (NVIDIA: every GPU reaches every
    other of the 72 at its full NVLink bandwidth, 1.8 TB/s aggregate, 900 GB/s per direction), so
    an expert-parallel group of up to ``gpus_per_domain`` stays on NVLink. The scale-out fabric is
    :func:`fat_tree_cluster`'s, with a rack in the place of a node: GPUs carry ``node`` = rack,
    ``local`` (index in the rack) and ``tray``; ``graph.graph["gpus_per_node"]`` is the NVLink domain
    (what expert-parallel placement and hierarchical all-to-alls group by), ``gpus_per_tray`` the tray.
    """
    domains = _positive_int("domains", domains)
    gpus_per_domain = _positive_int("gpus_per_domain", gpus_per_domain, high=100_000)
    gpus_per_tray = _positive_int("gpus_per_tray", gpus_per_tray, high=100_000)
    if gpus_per_domain % gpus_per_tray:
        raise TopologyError(f"gpus_per_tray ({gpus_per_tray}) must divide gpus_per_domain ({gpus_per_domain})")
    g = fat_tree_cluster(domains, gpus_per_domain, nvlink_bandwidth, nic_bandwidth, switch_radix, oversubscription,
                         rail_optimized, planes, name)
    for gpu in g.graph["gpus"]:
        g.nodes[gpu]["tray"] = g.nodes[gpu]["local"] // gpus_per_tray
    g.graph.update(nvlink_domain=gpus_per_domain, gpus_per_tray=gpus_per_tray)
    return g


class _ScaleOut:
    """The NICs, leaves and spines of a (multi-plane) two-layer fat-tree over ``nodes`` NVLink
    domains of ``gpus_per_node`` GPUs each (see :func:`fat_tree_cluster`), checked before building."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    @classmethod
    def check(cls, nodes, gpus_per_node, nic_bandwidth, switch_radix, oversubscription, rail_optimized, planes,
              name) -> "_ScaleOut":
        _positive("nic_bandwidth", nic_bandwidth)
        switch_radix = number(switch_radix, "switch_radix", integer=True, low=2, high=100_000, error=TopologyError)
        planes = _positive_int("planes", planes, high=100_000)
        number(oversubscription, "oversubscription (down:up ports)", low=1, high=1_000, error=TopologyError)
        if not isinstance(rail_optimized, bool):
            raise TopologyError(f"rail_optimized must be true or false, got {rail_optimized!r}")
        if gpus_per_node % planes:
            raise TopologyError(f"planes must divide gpus_per_node, got planes={planes}, gpus_per_node={gpus_per_node}")
        down = int(switch_radix * oversubscription // (1 + oversubscription))
        up = switch_radix - down
        if down < 1 or up < 1:
            raise TopologyError(f"switch_radix={switch_radix} with oversubscription={oversubscription} leaves no "
                                f"down or up ports (down={down}, up={up})")
        hosts_per_plane = nodes * gpus_per_node // planes
        leaves_per_plane = math.ceil(hosts_per_plane / down)
        if leaves_per_plane > switch_radix:
            raise TopologyError(f"a two-layer fat-tree of radix {switch_radix} holds at most "
                                f"{switch_radix * down:,} hosts per plane, got {hosts_per_plane:,} (nodes={nodes:,}, "
                                f"planes={planes})")
        size = fat_tree_nodes(nodes, gpus_per_node, planes, leaves_per_plane, up)
        limits.check("max_graph_nodes", size, f"topology {name!r} ({nodes:,} nodes of {gpus_per_node} GPUs)")
        limits.check_memory(size, f"topology {name!r} ({nodes * gpus_per_node:,} GPUs)")
        return cls(nodes=nodes, gpus_per_node=gpus_per_node, nic_bandwidth=nic_bandwidth, rail_optimized=rail_optimized,
                   planes=planes, down=down, up=up, leaves_per_plane=leaves_per_plane)

    def add_to(self, g: nx.Graph) -> None:
        nodes, gpus_per_node, bw = self.nodes, self.gpus_per_node, self.nic_bandwidth
        for p in range(self.planes):
            for k in range(self.leaves_per_plane):
                g.add_node(f"p{p}/leaf{k}", type="leaf", plane=p)
            for s in range(self.up):
                g.add_node(f"p{p}/spine{s}", type="spine", plane=p)
                for k in range(self.leaves_per_plane):
                    g.add_edge(f"p{p}/leaf{k}", f"p{p}/spine{s}", bandwidth=bw, latency=LEAF_SPINE_LATENCY_S, kind="ib")
        # Host ports of each plane, in cabling order: rail by rail, or node by node.
        for p in range(self.planes):
            locals_on_plane = [i for i in range(gpus_per_node) if i % self.planes == p]
            if self.rail_optimized:
                order = [(n, i) for i in locals_on_plane for n in range(nodes)]
            else:
                order = [(n, i) for n in range(nodes) for i in locals_on_plane]
            for slot, (n, i) in enumerate(order):
                nic = f"n{n}/nic{i}"
                g.add_node(nic, type="nic", node=n, local=i, plane=p)
                g.add_edge(gpu_name(n, i), nic, bandwidth=bw, latency=GPU_NIC_LATENCY_S, kind="pcie")
                g.add_edge(nic, f"p{p}/leaf{slot // self.down}", bandwidth=bw, latency=NIC_LEAF_LATENCY_S, kind="ib")
        g.graph["gpus"] = [gpu_name(n, i) for n in range(nodes) for i in range(gpus_per_node)]
        g.graph.update(nodes=nodes, gpus_per_node=gpus_per_node, planes=self.planes,
                       leaves_per_plane=self.leaves_per_plane, spines_per_plane=self.up, host_ports_per_leaf=self.down)


def fat_tree_nodes(nodes: int, gpus_per_node: int, planes: int, leaves_per_plane: int, spines_per_plane: int) -> int:
    """Graph nodes of :func:`fat_tree_cluster`: per server one NVSwitch, its GPUs and their NICs,
    plus each plane's leaves and spines."""
    return nodes * (1 + 2 * gpus_per_node) + planes * (leaves_per_plane + spines_per_plane)


def check_graph(g: nx.Graph) -> nx.Graph:
    """Refuse a graph the fabric cannot use: missing or bad attributes, unreachable GPUs."""
    for node, data in g.nodes(data=True):
        if "type" not in data:
            raise TopologyError(f"node {node!r} has no 'type' attribute (gpu, nvswitch, nic, leaf, spine, ...)")
    for u, v, data in g.edges(data=True):
        for attr in ("bandwidth", "latency"):
            if attr not in data:
                raise TopologyError(f"edge ({u!r}, {v!r}) has no {attr!r} attribute")
        data["bandwidth"] = _positive(f"edge ({u!r}, {v!r}) bandwidth (bytes/s)", data["bandwidth"])
        data["latency"] = float(number(data["latency"], f"edge ({u!r}, {v!r}) latency (s)", low=0,
                                       high=MAX_LATENCY_S, error=TopologyError))
    gpus = g.graph.get("gpus") or [n for n, d in g.nodes(data=True) if d.get("type") == "gpu"]
    if not gpus:
        raise TopologyError("the topology has no node of type 'gpu'")
    g.graph["gpus"] = list(gpus)
    for gpu in gpus:
        if gpu not in g:
            raise TopologyError(f"graph lists GPU {gpu!r} but has no such node")
    reach = nx.node_connected_component(g, gpus[0])
    for gpu in gpus:
        if gpu not in reach:
            raise TopologyError(f"GPU {gpu!r} cannot reach GPU {gpus[0]!r}: no path between them")
    return g
