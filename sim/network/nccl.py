"""NCCL's own model of a ring collective: its latency by protocol, and the protocol it picks; its
NVLS all-reduce inside a node whose NVSwitch reduces in the switch; and its tree all-reduce over
nodes.

NCCL chooses an algorithm and a protocol per call from a cost model in its source
(``src/graph/tuning.cc``, NCCL 2.20.3, github.com/NVIDIA/nccl); the constants below are that
file's. A ring of ``n`` ranks over ``N`` nodes runs

=================  ====================  ==========================
collective         steps ``S``           of them crossing nodes ``X``
=================  ====================  ==========================
all-gather         n - 1                 N - 1
reduce-scatter     n - 1                 N - 1
all-reduce         2 (n - 1)             2 N when N > 1, else 0
=================  ====================  ==========================

and NCCL puts its latency at

    latency = base[p] + (S - X) max(intra[p], o[p]) + X net[p]                       (us)

with ``base`` the protocol's fixed cost, ``intra`` a step inside a node (NVLink or PCIe),
``net`` a step over the network, and ``o`` the host's per-step network post overhead (1 us on an
x86 host, 3 us for Simple; 0 on one node). The protocols trade bandwidth for latency: LL sends 4
bytes of flag with every 4 of data and NCCL counts it at 1/4 of the bus bandwidth (1/3 for an
all-gather or reduce-scatter on one node), capped at ``LL_MAX_BUS_GBPS``; LL128 at 120/128 (0.92;
0.7 with one GPU per node) and only where the node's GPUs talk over NVLink; Simple at all of it.
NCCL estimates each protocol's time as ``latency + bytes / (bus x factor x n / S)`` and takes the
least (:func:`ring_cost`): LL for small buffers, Simple for large ones.

NVLS (NVLink SHARP, NCCL 2.17 and later, on third-generation NVSwitch and later: the topology's
``nvls``): an all-reduce inside one such node, whose NVSwitch reduces the GPUs' slices as they read
them (``multimem.ld_reduce``) and multicasts the results they write (``multimem.st``). Each GPU
reads its ``1/n`` slice reduced over all ``n`` GPUs and writes it once for all, and its memory
serves every other GPU's reads of its slices, so each GPU's NVLink port carries

    S (n + 1) / n  bytes each way,  against a ring's  2 S (n - 1) / n,

fewer from ``n = 4`` on (the same for 3); NCCL's latency for it is ``hwLat[NVLink][NVLS][Simple]``,
:data:`NVLS_LATENCY_US`, with no base. With ``auto``, an all-reduce on one NVLS node of 3 or more
GPUs takes NVLS where ``latency + S (n + 1) / (n x bus)`` beats the rings' estimate (:func:`ring_cost`):
from about 0.5 MB on an 8-GPU H100 node. A protocol named outright (``LL``, ``LL128``, ``Simple``)
keeps the ring, as ``NCCL_ALGO=Ring`` does.

The tree (an all-reduce over several nodes): NCCL 2.20 reduces up and broadcasts down a chain
inside each node and a double binary tree between nodes, each node's ``n / N`` GPUs one chain,
and puts its latency at

    latency = tree_base[p] + 2 ((n / N - 1) tree_intra[p] + floor(log2 N) tree_net[p])           (us)

(:data:`TREE_BASE_US`, :data:`TREE_STEP_US`) and its algorithm bandwidth at half its bus bandwidth,
``0.92 x bus`` (LL: a further 1/3.8, capped at the LL bus cap; LL128: 120/128), times
``treeCorrectionFactor`` for the buffer's size (:data:`TREE_CORRECTION`, powers of two from 64 B):
``latency + 2 bytes / (bus x share)``. With ``auto`` an all-reduce over two or more nodes takes the
tree where that beats every ring (NCCL's order on a tie: the tree first); small and middling
buffers over many nodes, whose ring pays ``2N`` network steps (:func:`ring_cost`).

Left out (documented in docs/network.md): CollNet and NVLS-tree, NVLS for all-gather and
reduce-scatter (NCCL's estimate prefers the ring for them on one node), the ring all-reduce's plateau
factor, the per-channel bandwidth caps of LL128 and the tree and the tree pattern's 0.85 (they need
NCCL's channel count and search), and an AMD host's 2 us overhead.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import InputError

KINDS = ("all_reduce", "all_gather", "reduce_scatter")
PROTOCOLS = ("LL", "LL128", "Simple")
CHOICES = ("auto",) + PROTOCOLS + ("none",)   # none: the fabric alone, each step its route's latency
HARDWARE = ("nvlink", "pci", "net")

RING_BASE_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
RING_STEP_US = {"nvlink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
                "pci": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
                "net": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}}
NET_OVERHEAD_US = 1.0                 # an Intel x86 host; Simple pays it 3 times
LL128_FACTOR, LL128_ONE_PER_NODE_FACTOR = 0.92, 0.7
# LL's bus bandwidth cap (GB/s): one node of Ampere or Hopper GPUs; 2 nodes; more (Intel host).
LL_MAX_BUS_GBPS = {1: 87.7, 2: 39.0, 3: 20.4}
RING, TREE = "Ring", "Tree"           # NCCL's algorithms (RingCost.algorithm)
NVLS = "NVLS"                         # the algorithm's name where a RingCost's protocol would be
NVLS_LATENCY_US = 23.0                # tuning.cc: hwLat[NVLINK][NVLS][SIMPLE], baseLat 0
NVLS_MIN_RANKS = 3                    # below, NVLS moves no fewer bytes than the ring
# The tree (NCCL 2.20.3 tuning.cc: baseLat[Tree], hwLat[NVLINK|PCI|NET][Tree], the refinements of busBw).
TREE_BASE_US = {"LL": 6.8, "LL128": 14.0, "Simple": 0.0}
TREE_STEP_US = {"nvlink": {"LL": 0.6, "LL128": 1.25, "Simple": 28.0},
                "pci": {"LL": 1.0, "LL128": 1.9, "Simple": 28.0},
                "net": {"LL": 5.0, "LL128": 8.5, "Simple": 28.0}}
TREE_BUS_SHARE = 0.92                 # busBw * .92
TREE_LL_SHARE = 1 / 3.8               # LL: busBw * 1/3.8, at most the LL cap
TREE_LL128_SHARE = 120 / 128          # LL128 over several nodes
# treeCorrectionFactor[protocol][floor(log2(bytes / 64))], 64 B to 256 MB; 1 beyond.
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9)}


def nvls_port_bytes(nbytes: float, ranks: int) -> float:
    """Bytes each GPU's NVLink port carries each way in an NVLS all-reduce of ``nbytes`` over
    ``ranks`` GPUs: ``S (n + 1) / n`` (see the module)."""
    return nbytes * (ranks + 1) / ranks


@dataclass(frozen=True)
class RingCost:
    """How NCCL runs one collective: ``protocol`` (:data:`NVLS` for an NVLS all-reduce, which
    is no ring: its bytes are :func:`nvls_port_bytes`), ``latency_s`` (NCCL's latency of the whole
    collective, seconds), ``bandwidth_factor`` (the share of the bus bandwidth its payload gets:
    the wire carries ``bytes / bandwidth_factor``) and ``algorithm`` (:data:`RING`, :data:`TREE`,
    whose GPUs each move ``2 x bytes / bandwidth_factor``, or :data:`NVLS`)."""

    protocol: str
    latency_s: float
    bandwidth_factor: float
    algorithm: str = RING       # RING, TREE (each GPU's data is 2 x bytes / bandwidth_factor) or NVLS


def check_protocol(protocol: str, field: str = "nccl_protocol") -> str:
    """``protocol`` if it is one of :data:`CHOICES`, else one clear line."""
    if protocol not in CHOICES:
        raise InputError(f"{field} must be one of {', '.join(CHOICES)}, got {protocol!r}")
    return protocol


def ring_protocol(choice: str) -> str | None:
    """What the ring collectives take for a run's ``nccl_protocol`` ``choice``: the protocol, or
    ``None`` for ``none`` (the fabric alone)."""
    return None if check_protocol(choice) == "none" else choice


def ring_steps(kind: str, ranks: int, nodes: int) -> tuple[int, int]:
    """(steps, of them crossing nodes) of a ring ``kind`` over ``ranks`` GPUs on ``nodes`` nodes."""
    if kind not in KINDS:
        raise InputError(f"ring collective kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not 1 <= nodes <= ranks:
        raise InputError(f"a ring of {ranks} GPUs spans 1 to {ranks} nodes, got {nodes}")
    if kind == "all_reduce":
        return 2 * (ranks - 1), (2 * nodes if nodes > 1 else 0)
    return ranks - 1, nodes - 1


def ring_latency_s(kind: str, protocol: str, ranks: int, nodes: int, intra: str = "nvlink") -> float:
    """NCCL's latency (s) of ring ``kind`` under ``protocol`` (see the module's formula); ``intra``:
    ``nvlink`` or ``pci``, how GPUs of one node reach each other."""
    if ranks < 2:
        return 0.0
    steps, inter = ring_steps(kind, ranks, nodes)
    step = RING_STEP_US[intra][protocol]
    if nodes > 1:
        step = max(step, NET_OVERHEAD_US * (3 if protocol == "Simple" else 1))
    us = RING_BASE_US[protocol] + (steps - inter) * step + inter * RING_STEP_US["net"][protocol]
    return us * 1e-6


def protocol_factor(kind: str, protocol: str, nodes: int, ranks: int, bus_GBps: float) -> float:
    """The share of the bus bandwidth ``bus_GBps`` (GB/s, above 0) the payload of ``protocol`` gets
    (see the module)."""
    if protocol == "Simple":
        return 1.0
    if protocol == "LL128":
        return LL128_FACTOR if ranks / nodes >= 2 else LL128_ONE_PER_NODE_FACTOR
    share = 1 / 4 if nodes > 1 or kind == "all_reduce" else 1 / 3
    return min(share, LL_MAX_BUS_GBPS[min(nodes, 3)] / bus_GBps)


def nvls_applies(kind: str, ranks: int, nodes: int, intra: str, nvls: bool) -> bool:
    """Whether NCCL may run ``kind`` as NVLS: an all-reduce of at least :data:`NVLS_MIN_RANKS`
    GPUs on one NVLink node whose switch has NVLink SHARP (``nvls``)."""
    return nvls and kind == "all_reduce" and nodes == 1 and intra == "nvlink" and ranks >= NVLS_MIN_RANKS


def log2i(n: float) -> int:
    """NCCL's ``log2i``: floor(log2 n) for n >= 1, 0 below."""
    return max(int(n), 1).bit_length() - 1


def tree_applies(kind: str, ranks: int, nodes: int) -> bool:
    """Whether NCCL may run ``kind`` as a tree: an all-reduce over two or more nodes (on one node
    NCCL's chain never beats its ring)."""
    return kind == "all_reduce" and 2 <= nodes <= ranks


def tree_latency_s(protocol: str, ranks: int, nodes: int, intra: str = "nvlink") -> float:
    """NCCL's latency (s) of a tree all-reduce under ``protocol`` over ``ranks`` GPUs on ``nodes``
    nodes: ``base + 2 ((ranks // nodes - 1) intra step + log2i(nodes) network step)``."""
    us = TREE_BASE_US[protocol] + 2 * ((ranks // nodes - 1) * TREE_STEP_US[intra][protocol]
                                       + log2i(nodes) * TREE_STEP_US["net"][protocol])
    return us * 1e-6


def tree_factor(protocol: str, nbytes: float, nodes: int, bus_GBps: float) -> float:
    """The share of the bus bandwidth ``bus_GBps`` a tree all-reduce of ``nbytes`` over ``nodes``
    nodes gets under ``protocol`` (its size's correction factor included); the tree's time is
    ``latency + 2 nbytes / (bus x share)``."""
    share = TREE_BUS_SHARE
    if protocol == "LL":
        share = min(share * TREE_LL_SHARE, LL_MAX_BUS_GBPS[min(nodes, 3)] / bus_GBps)
    elif protocol == "LL128":
        share *= TREE_LL128_SHARE
    size = log2i(int(nbytes) >> 6)
    table = TREE_CORRECTION[protocol]
    return share * (table[size] if size < len(table) else 1.0)


def ring_cost(kind: str, nbytes: float, ranks: int, nodes: int, bus_GBps: float, protocol: str = "auto",
              intra: str = "nvlink", nvls: bool = False) -> RingCost:
    """How NCCL runs ring ``kind`` of ``nbytes`` (the buffer: all-gather's output, reduce-scatter's
    input) over ``ranks`` (at least 2) GPUs on ``nodes`` nodes whose ring moves ``bus_GBps`` (GB/s per
    GPU, above 0 and finite):
    ``protocol`` as given, or with ``auto`` the one NCCL's estimate finds quickest (LL128 only over
    NVLink; a tie goes to the first of LL, LL128, Simple, as in NCCL), the tree among them where
    :func:`tree_applies` (first, as NCCL orders its algorithms) and NVLS where :func:`nvls_applies`
    (``nvls``: the node's switch has NVLink SHARP)."""
    if check_protocol(protocol) == "none":
        raise InputError("ring_cost needs an NCCL protocol or auto, got 'none'")
    if intra not in ("nvlink", "pci"):
        raise InputError(f"a node's GPUs talk over nvlink or pci, got {intra!r}")
    if not 0 < bus_GBps < float("inf"):
        raise InputError(f"a ring's bus bandwidth must be above 0 GB/s and finite, got {bus_GBps}")
    steps, _ = ring_steps(kind, ranks, nodes)
    candidates = PROTOCOLS if protocol == "auto" else (protocol,)
    best = None
    if protocol == "auto" and tree_applies(kind, ranks, nodes):
        for p in candidates:
            if p == "LL128" and intra != "nvlink":
                continue
            factor = tree_factor(p, nbytes, nodes, bus_GBps)
            latency = tree_latency_s(p, ranks, nodes, intra)
            seconds = latency + 2 * nbytes / (bus_GBps * 1e9 * factor)
            if best is None or seconds < best[0]:
                best = (seconds, RingCost(p, latency, factor, TREE))
    for p in candidates:
        if protocol == "auto" and p == "LL128" and intra != "nvlink":
            continue
        factor = protocol_factor(kind, p, nodes, ranks, bus_GBps)
        latency = ring_latency_s(kind, p, ranks, nodes, intra)
        seconds = latency + nbytes * steps / (bus_GBps * 1e9 * factor * ranks)
        if best is None or seconds < best[0]:
            best = (seconds, RingCost(p, latency, factor))
    if protocol == "auto" and nvls_applies(kind, ranks, nodes, intra, nvls):
        latency = NVLS_LATENCY_US * 1e-6
        seconds = latency + nvls_port_bytes(nbytes, ranks) / (bus_GBps * 1e9)
        if seconds < best[0]:
            best = (seconds, RingCost(NVLS, latency, 1.0, NVLS))
    return best[1]


__all__ = ["CHOICES", "HARDWARE", "KINDS", "LL128_FACTOR", "LL_MAX_BUS_GBPS", "NET_OVERHEAD_US", "NVLS",
           "NVLS_LATENCY_US", "NVLS_MIN_RANKS", "PROTOCOLS", "RING", "RING_BASE_US", "RING_STEP_US", "RingCost",
           "TREE", "TREE_BASE_US", "TREE_BUS_SHARE", "TREE_CORRECTION", "TREE_LL128_SHARE", "TREE_LL_SHARE",
           "TREE_STEP_US", "check_protocol", "log2i", "nvls_applies", "nvls_port_bytes", "protocol_factor",
           "ring_cost", "ring_latency_s", "ring_protocol", "ring_steps", "tree_applies", "tree_factor",
           "tree_latency_s"]
