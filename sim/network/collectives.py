"""Collectives on the fabric. Each returns a SimPy event that fires when its last byte lands.

They are chains of :meth:`Fabric.transfer` calls joined by event callbacks (no process per
transfer, so a 2,048-GPU all-to-all stays cheap).

* :func:`p2p` -- one send (pipeline activations and gradients).
* :func:`all_to_all` -- MoE dispatch or combine over an EP group, ``flat`` (every GPU straight to
  every expert GPU) or ``hierarchical`` as DeepSeek does it: dispatch goes over IB once per target
  node to the GPU with the same in-node index, which forwards over NVLink to the GPUs holding the
  experts; each message goes in ``chunks`` pieces and a piece is forwarded as soon as it has
  landed, so forwarding overlaps the IB transfer as in DeepSeek's kernels; GPUs of the source's
  own node are reached over NVLink directly. Combine is the reverse: each target node first
  gathers a source's results over NVLink on its same-index GPU, which sends them back once over IB.
* :func:`ring_all_reduce`, :func:`ring_reduce_scatter`, :func:`ring_all_gather` -- ring
  algorithms: in step k rank i sends one chunk (N/n bytes) to rank i+1 once it has received step
  k-1's chunk from rank i-1 and finished its own previous send.
* :func:`hierarchical_reduce_scatter`, :func:`hierarchical_all_gather` -- for a group spread
  over several nodes (data-parallel gradients): a ring inside every node over NVLink, then one
  ring per rail (the GPUs with the same in-node index, each on its own NIC) over the scale-out
  network on 1/g of the data, so every NIC carries a share, as NCCL's multi-channel rings do;
  all-gather is the reverse. A group with one GPU per node, or on one node, is a plain ring. The
  rings are sent in bulk (one transfer per neighbour pair, see :func:`ring_reduce_scatter`).

Given an NCCL ``protocol`` (``auto``, ``LL``, ``LL128`` or ``Simple``, :mod:`sim.network.nccl`),
a ring collective runs as NCCL would: its payload moves at the protocol's share of the links
(``bytes / bandwidth_factor`` on the wire), and it starts after NCCL's latency of the whole
collective less the per-step latency the fabric already charges (steps x the ring's hop latency),
so that on an empty fabric it ends at NCCL's latency plus the data's time. ``protocol=None``: the
fabric alone (each step pays its route's latency).
"""
from __future__ import annotations

from typing import Sequence

import simpy

from ..checks import InputError, number
from .fabric import Fabric
from .nccl import NVLS, TREE, nvls_port_bytes, ring_cost
from .nccl_rates import NcclRates
from .nccl_rates import charged as charged_cost
from .traffic import Traffic

ALGORITHMS = ("hierarchical", "flat")
DIRECTIONS = ("dispatch", "combine")


def p2p(fabric: Fabric, src: int, dst: int, nbytes: float) -> simpy.Event:
    return fabric.transfer(src, dst, nbytes)


class _Join:
    """After ``count`` arrivals (at once for zero) calls ``then()`` and fires the event ``done``
    (made only when ``event=True``)."""

    def __init__(self, env: simpy.Environment, count: int, then=None, event: bool = True):
        self.left = count
        self.done = env.event() if event else None
        self.then = then
        if count == 0:
            self._finish()

    def arrive(self, _ev=None) -> None:
        self.left -= 1
        if self.left == 0:
            self._finish()

    def _finish(self) -> None:
        if self.then is not None:
            self.then()
        if self.done is not None:
            self.done.succeed()


def _send(fabric: Fabric, src: int, dst: int, nbytes: float, then) -> None:
    """A transfer whose completion calls ``then()`` directly (no SimPy event)."""
    fabric.transfer(src, dst, nbytes, on_done=then)


def check_all_to_all(group: Sequence[int], traffic: Traffic, algorithm: str, direction: str, chunks: int) -> int:
    """One clear line for an all-to-all's bad argument (its algorithm, direction, chunks, or a group
    that is not the routing's EP size); the chunks as an int."""
    if algorithm not in ALGORITHMS:
        raise InputError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    chunks = number(chunks, "chunks", integer=True, low=1, high=1_000)
    if direction not in DIRECTIONS:
        raise InputError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    if len(group) != traffic.routing.ep:
        raise InputError(f"group has {len(group)} GPUs but the routing is for ep={traffic.routing.ep}")
    return chunks


def all_to_all(fabric: Fabric, group: Sequence[int], traffic: Traffic, token_bytes: float,
               algorithm: str = "hierarchical", direction: str = "dispatch", chunks: int = 4) -> simpy.Event:
    """MoE all-to-all over ``group`` (global GPU ids, node by node, ``traffic.routing.ep`` of them).

    ``token_bytes``: bytes of one token copy on the wire (hidden x bytes per element, plus any
    scales). Dispatch sends ``gpu_tokens[a, b] * token_bytes`` from a to b (flat) or
    ``node_tokens[a, n] * token_bytes`` over IB per target node (hierarchical); combine returns
    the same amounts the other way. ``chunks``: a hierarchical message is sent in this many
    pieces so NVLink forwarding overlaps the IB transfer, as DeepSeek's kernels do (1 = plain
    store-and-forward)."""
    chunks = check_all_to_all(group, traffic, algorithm, direction, chunks)
    r = traffic.routing
    env = fabric.env
    g = r.gpus_in_node
    G, N = traffic.gpu_tokens, traffic.node_tokens
    tb = float(token_bytes)

    if algorithm == "flat":
        pairs = [(a, b) for a in range(r.ep) for b in range(r.ep) if a != b and G[a, b] > 0]
        join = _Join(env, len(pairs))
        for a, b in pairs:
            src, dst = (a, b) if direction == "dispatch" else (b, a)
            _send(fabric, group[src], group[dst], G[a, b] * tb, join.arrive)
        return join.done

    # hierarchical
    units = []  # one per (source a, target node n): completes when all of its bytes have landed
    for a in range(r.ep):
        home = r.node_of(a)
        for n in range(r.nodes):
            if n == home:
                for y in range(n * g, (n + 1) * g):
                    if y != a and G[a, y] > 0:
                        units.append(("local", a, y))
            elif N[a, n] > 0:
                units.append(("remote", a, n))
    join = _Join(env, len(units))
    for unit in units:
        if unit[0] == "local":
            _, a, y = unit
            src, dst = (a, y) if direction == "dispatch" else (y, a)
            _send(fabric, group[src], group[dst], G[a, y] * tb, join.arrive)
            continue
        _, a, n = unit
        x = n * g + a % g                       # same in-node index on the target node
        others = [y for y in range(n * g, (n + 1) * g) if y != x and G[a, y] > 0]
        if direction == "dispatch":
            _dispatch_unit(fabric, group, a, x, others, N[a, n] * tb, [G[a, y] * tb for y in others],
                           chunks, join.arrive)
        else:
            _combine_unit(fabric, group, a, x, others, N[a, n] * tb, [G[a, y] * tb for y in others],
                          chunks, join.arrive)
    return join.done


def _dispatch_unit(fabric, group, a, x, others, ib_bytes, fwd_bytes, chunks, done) -> None:
    """IB a -> x in ``chunks`` pieces, one after the other; each piece is forwarded over NVLink
    to ``others`` as soon as it has landed on x. ``done`` when the last forward lands."""
    env = fabric.env
    fan = _Join(env, chunks * len(others) if others else chunks, then=done, event=False)

    def send(i: int) -> None:
        def landed():
            if i + 1 < chunks:
                send(i + 1)
            if not others:
                fan.arrive()
            for y, nbytes in zip(others, fwd_bytes):
                _send(fabric, group[x], group[y], nbytes / chunks, fan.arrive)
        _send(fabric, group[a], group[x], ib_bytes / chunks, landed)
    send(0)


def _combine_unit(fabric, group, a, x, others, ib_bytes, fwd_bytes, chunks, done) -> None:
    """The reverse: ``others`` send their results for a to x over NVLink, piece by piece; x
    sends piece i back to a over IB once every other GPU's piece i and its own piece i-1 landed."""
    env = fabric.env
    gathered = [0] * chunks
    state = {"next": 0, "busy": False}
    finish = _Join(env, chunks, then=done, event=False)

    def try_send_back() -> None:
        i = state["next"]
        if state["busy"] or i >= chunks or gathered[i] < len(others):
            return
        state["busy"], state["next"] = True, i + 1

        def landed():
            state["busy"] = False
            finish.arrive()
            try_send_back()
        _send(fabric, group[x], group[a], ib_bytes / chunks, landed)

    def piece(i: int, y: int, nbytes: float) -> None:
        def landed():
            gathered[i] += 1
            if i + 1 < chunks:
                piece(i + 1, y, nbytes)
            try_send_back()
        _send(fabric, group[y], group[x], nbytes / chunks, landed)

    for y, nbytes in zip(others, fwd_bytes):
        piece(0, y, nbytes)
    try_send_back()


def hop_hardware(fabric: Fabric, src: int, dst: int) -> str:
    """``nvlink``, ``pci`` or ``net``: what NCCL's model calls the path from GPU ``src`` to ``dst``
    (``net`` when it takes a scale-out link, ``nvlink`` when it takes only NVLink)."""
    kinds = {fabric.links.kind[link] for link in fabric.links.route(src, dst)[0]}
    if kinds <= {"nvlink"}:
        return "nvlink"
    return "pci" if kinds <= {"nvlink", "pcie"} else "net"


def _bottleneck_GBps(fabric: Fabric, src: int, dst: int) -> float:
    links = fabric.links.route(src, dst)[0]
    return float(fabric.links.capacity[links].min()) / 1e9 if links.size else float("inf")


def nccl_ring_cost(fabric: Fabric, kind: str, ranks: Sequence[int], nbytes: float, protocol: str,
                   gpus_per_node: int | None = None, rates: NcclRates | None = None):
    """(NCCL's :class:`~sim.network.nccl.RingCost` of ring ``kind`` over ``ranks``, the latency (s)
    the fabric already charges for it). Without ``gpus_per_node``, a plain ring: its nodes are its
    hops over the network (at least 1), its bus bandwidth the slowest hop's bottleneck, and the
    fabric charges steps x its slowest hop's latency. With it, a hierarchical collective: the nodes
    are the node groups, the bus bandwidth the lesser of the in-node hop's and g rails' (g GPUs a
    node), and the fabric charges the in-node ring's g - 1 steps and the rails' nodes - 1. An NVLS
    all-reduce (on a topology with ``nvls``) runs as :func:`nvls_all_reduce`, whose two steps the
    fabric charges; a tree all-reduce (over nodes) as :func:`tree_all_reduce`, whose one step it
    charges. The cost is NCCL's as charged under ``rates`` (default: the fabric's ``nccl_rates``,
    :func:`~sim.network.nccl_rates.charged`: each GPU's slice pass, NVLS's rate and latency)."""
    if rates is None:
        rates = getattr(fabric, "nccl_rates", None)
    engine = getattr(fabric, "gpu_rate", None)
    n = len(ranks)
    if gpus_per_node is None:
        hops = [(ranks[i], ranks[(i + 1) % n]) for i in range(n)]
        hardware = [hop_hardware(fabric, a, b) for a, b in hops]
        nodes = max(1, hardware.count("net"))
        intra = "pci" if "pci" in hardware else "nvlink"
        bus = min(_bottleneck_GBps(fabric, a, b) for a, b in hops)
        cost = ring_cost(kind, nbytes, n, min(nodes, n), bus, protocol, intra, fabric.links.nvls)
        cost = charged_cost(cost, kind, nbytes, n, rates, _path_GBps(bus, engine))
        steps = {NVLS: 2, TREE: 1}.get(cost.algorithm, 2 * (n - 1) if kind == "all_reduce" else n - 1)
        return cost, steps * max(fabric.links.route(a, b)[1] for a, b in hops)
    members = list(_by_node(ranks, gpus_per_node).values())
    nodes, g = len(members), len(members[0])
    intra, bus, in_node, between = "nvlink", float("inf"), 0.0, 0.0
    if g > 1:
        a, b = members[0][0], members[0][1]
        intra = "pci" if hop_hardware(fabric, a, b) == "pci" else "nvlink"
        bus = _bottleneck_GBps(fabric, a, b)
        in_node = fabric.links.route(a, b)[1]
    if nodes > 1:
        a, b = members[0][0], members[1][0]
        bus = min(bus, g * _bottleneck_GBps(fabric, a, b))
        between = fabric.links.route(a, b)[1]
    cost = charged_cost(ring_cost(kind, nbytes, n, min(nodes, n), bus, protocol, intra), kind, nbytes, n, rates,
                        _path_GBps(bus, engine))
    if cost.algorithm == TREE:
        return cost, max(in_node, between)
    return cost, (g - 1) * in_node + (nodes - 1) * between


def _path_GBps(bus_GBps: float, gpu_rate: float | None) -> float:
    """The rate (GB/s) a collective's path gives: its links' ``bus_GBps`` and the GPU's NCCL engine
    (``gpu_rate``, bytes/s; ``None``: none), the lesser."""
    return bus_GBps if gpu_rate is None else min(bus_GBps, gpu_rate / 1e9)


def _after(env: simpy.Environment, delay: float, start) -> simpy.Event:
    """``start()`` (which returns an event) after ``delay`` seconds; an event that fires with it."""
    if delay <= 0:
        return start()
    done = env.event()
    env.timeout(delay).callbacks.append(lambda _e: start().callbacks.append(lambda _f: done.succeed()))
    return done


def _ring(fabric: Fabric, ranks: Sequence[int], nbytes: float, steps: int, bulk: bool = False,
          kind: str = "all_gather", protocol: str | None = None, on_receive=None) -> simpy.Event:
    """The ring collectives' one engine: ``steps`` steps of ``nbytes / n`` from each rank to the
    next, a rank sending its k-th chunk once it has sent the one before and received k - 1
    (``bulk``: each rank's chunks as one transfer, see :func:`ring_reduce_scatter`); NCCL's
    latency and bandwidth factor for ``protocol`` first. ``on_receive(i)``, if given, is called
    as ``ranks[i]`` receives each chunk (not with ``bulk``)."""
    n = len(ranks)
    env = fabric.env
    if on_receive is not None and bulk:
        raise ValueError("on_receive needs the ring step by step, not bulk")
    if n < 2 or nbytes == 0:
        ev = env.event()
        ev.succeed()
        return ev
    if protocol is not None:
        cost, charged = nccl_ring_cost(fabric, kind, ranks, nbytes, protocol)
        if cost.protocol == NVLS:
            wire = nbytes / cost.bandwidth_factor          # NVLS's own rate (sim.network.nccl_rates)
            return _after(env, cost.latency_s - charged, lambda: nvls_all_reduce(fabric, ranks, wire, bulk))
        wire = nbytes / cost.bandwidth_factor
        if cost.algorithm == TREE:
            return _after(env, cost.latency_s - charged, lambda: tree_all_reduce(fabric, ranks, wire))
        return _after(env, cost.latency_s - charged,
                      lambda: _ring(fabric, ranks, wire, steps, bulk, on_receive=on_receive))
    chunk = nbytes / n
    join = _Join(env, n)
    fabric.links.routes([(ranks[i], ranks[(i + 1) % n]) for i in range(n)])   # found together: cheaper
    if bulk:
        for i in range(n):
            src, dst = ranks[i], ranks[(i + 1) % n]
            latency = fabric.links.route(src, dst)[1] if src != dst else 0.0
            start = lambda _e=None, src=src, dst=dst: _send(fabric, src, dst, steps * chunk, join.arrive)
            if steps > 1 and latency > 0:
                env.timeout((steps - 1) * latency).callbacks.append(start)
            else:
                start()
        return join.done
    sent = [0] * n          # sends finished per rank
    received = [0] * n      # chunks received per rank
    in_flight = [False] * n

    def try_send(i: int) -> None:
        k = sent[i]
        if k >= steps or in_flight[i]:
            return
        if k > 0 and received[i] < k:
            return
        in_flight[i] = True
        nxt = (i + 1) % n

        def landed(i=i, nxt=nxt):
            in_flight[i] = False
            sent[i] += 1
            received[nxt] += 1
            if on_receive is not None:
                on_receive(nxt)
            if sent[i] == steps:
                join.arrive()
            try_send(i)
            try_send(nxt)
        _send(fabric, ranks[i], ranks[nxt], chunk, landed)

    for i in range(n):
        try_send(i)
    return join.done


def nvls_all_reduce(fabric: Fabric, ranks: Sequence[int], nbytes: float, bulk: bool = False) -> simpy.Event:
    """NVLS all-reduce of ``nbytes`` per rank on one NVLink node whose switch reduces and
    multicasts (:mod:`sim.network.nccl`): what each GPU's port carries each way,
    :func:`~sim.network.nccl.nvls_port_bytes`, as two ring steps (the switch's reduce, then its
    multicast) to the next GPU, so each port's load is the NVLS one on a non-blocking switch; the
    fabric alone, without NCCL's latency (:func:`ring_all_reduce` adds it)."""
    n = len(ranks)
    return _ring(fabric, ranks, nvls_port_bytes(nbytes, n) * n / 2 if n else 0.0, 2, bulk)


def tree_all_reduce(fabric: Fabric, ranks: Sequence[int], nbytes: float,
                    gpus_per_node: int | None = None) -> simpy.Event:
    """The data of NCCL's tree all-reduce of ``nbytes`` per rank (:mod:`sim.network.nccl`), the
    fabric alone, without NCCL's latency (:func:`ring_all_reduce` and :func:`nccl_all_reduce` add
    it): NCCL's estimate moves ``2 x nbytes`` at the bus bandwidth, so each GPU sends ``2 x nbytes``
    to the next in ``ranks``' order; with ``gpus_per_node``, to the next GPU of its node, and each
    rail (the GPUs of one in-node index) ``2 x nbytes / g`` to the next node's, the g rails sharing
    what crosses between nodes as the tree's channels share the node's NICs; all at once (a ring
    of one GPU sends nothing)."""
    if gpus_per_node is None or not ranks:
        return _ring(fabric, ranks, 2 * nbytes * len(ranks), 1)
    members = list(_by_node(ranks, gpus_per_node).values())
    nodes, g = len(members), len(members[0])
    events = [_ring(fabric, node, 2 * nbytes * g, 1) for node in members]
    events += [_ring(fabric, [node[i] for node in members], 2 * nbytes * nodes / g, 1) for i in range(g)]
    return simpy.AllOf(fabric.env, events)


def nccl_all_reduce(fabric: Fabric, ranks: Sequence[int], nbytes: float, gpus_per_node: int,
                    protocol: str | None = None) -> simpy.Event:
    """All-reduce of ``nbytes`` per rank over ranks spread on nodes of ``gpus_per_node`` as NCCL
    runs it under ``protocol``: the tree where NCCL's estimate takes it (``auto``, two or more
    nodes: :func:`tree_all_reduce` on the node's chain and the rails, after NCCL's latency less the
    one step the fabric charges), else a reduce-scatter then an all-gather
    (:func:`hierarchical_reduce_scatter`, :func:`hierarchical_all_gather`), each with its ring's
    latency (``protocol=None``: the two on the fabric alone)."""
    node_groups(ranks, gpus_per_node)
    env = fabric.env
    if protocol is not None and len(ranks) > 1 and nbytes > 0:
        cost, charged = nccl_ring_cost(fabric, "all_reduce", ranks, nbytes, protocol, gpus_per_node)
        if cost.algorithm == TREE:
            wire = nbytes / cost.bandwidth_factor
            return _after(env, cost.latency_s - charged,
                          lambda: tree_all_reduce(fabric, ranks, wire, gpus_per_node))
    done = env.event()
    first = hierarchical_reduce_scatter(fabric, ranks, nbytes, gpus_per_node, protocol)
    first.callbacks.append(lambda _e: hierarchical_all_gather(fabric, ranks, nbytes, gpus_per_node, protocol)
                           .callbacks.append(lambda _f: done.succeed()))
    return done


def ring_all_reduce(fabric: Fabric, ranks: Sequence[int], nbytes: float, bulk: bool = False,
                    protocol: str | None = None) -> simpy.Event:
    """Ring all-reduce of ``nbytes`` per rank: 2(n-1) steps of N/n bytes. ``bulk``: see
    :func:`ring_reduce_scatter`; ``protocol``: NCCL's (see the module; ``auto`` on a topology with
    ``nvls`` may take :func:`nvls_all_reduce`, and over nodes :func:`tree_all_reduce`)."""
    return _ring(fabric, ranks, nbytes, 2 * (len(ranks) - 1), bulk, "all_reduce", protocol)


def ring_reduce_scatter(fabric: Fabric, ranks: Sequence[int], nbytes: float, bulk: bool = False,
                        protocol: str | None = None) -> simpy.Event:
    """Ring reduce-scatter of ``nbytes`` per rank: n-1 steps of N/n bytes.

    ``bulk``: every step of a ring goes to the same neighbour, so send them as one transfer of
    (n-1) N/n bytes per neighbour pair that pays the route's latency n-1 times: the same time as the
    steps one by one whenever the links' shares do not change during the collective (symmetric
    rings), for 1/(n-1) of the transfers; the step-to-step dependency is not simulated. ``protocol``:
    NCCL's (see the module)."""
    return _ring(fabric, ranks, nbytes, len(ranks) - 1, bulk, "reduce_scatter", protocol)


def ring_all_gather(fabric: Fabric, ranks: Sequence[int], nbytes: float, bulk: bool = False,
                    protocol: str | None = None, on_receive=None) -> simpy.Event:
    """Ring all-gather to ``nbytes`` per rank: n-1 steps of N/n bytes (``bulk``: see
    :func:`ring_reduce_scatter`; ``protocol``: NCCL's, see the module); ``on_receive(i)`` as
    ``ranks[i]`` receives each other rank's block (a context-parallel ring's attention waits for
    them one by one)."""
    return _ring(fabric, ranks, nbytes, len(ranks) - 1, bulk, "all_gather", protocol, on_receive)


def _by_node(ranks: Sequence[int], gpus_per_node: int) -> dict[int, list[int]]:
    nodes: dict[int, list[int]] = {}
    for r in ranks:
        nodes.setdefault(r // gpus_per_node, []).append(r)
    return nodes


def node_groups(ranks: Sequence[int], gpus_per_node: int) -> dict[int, list[int]]:
    """``ranks`` by node (``rank // gpus_per_node``), each in order; one clear line unless every
    node holds as many of them (the hierarchical collectives' rails need it)."""
    nodes = _by_node(ranks, gpus_per_node)
    sizes = sorted({len(members) for members in nodes.values()})
    if len(sizes) > 1:
        raise InputError(f"hierarchical collectives need the same number of GPUs on every node, got {sizes}")
    return nodes


def _phases(fabric: Fabric, phases: list, done: simpy.Event) -> None:
    """Run ``phases`` (each a list of (op, ranks, nbytes) started together, rings sent in bulk) one
    after the other."""
    if not phases:
        done.succeed()
        return
    events = [op(fabric, ranks, nbytes, bulk=True) for op, ranks, nbytes in phases[0]]
    simpy.AllOf(fabric.env, events).callbacks.append(lambda _e: _phases(fabric, phases[1:], done))


def _hierarchical(fabric: Fabric, ranks: Sequence[int], nbytes: float, gpus_per_node: int,
                  gather: bool, protocol: str | None = None) -> simpy.Event:
    nodes = node_groups(ranks, gpus_per_node)
    sizes = {len(members) for members in nodes.values()}
    if protocol is not None and len(ranks) > 1 and nbytes > 0:
        cost, charged = nccl_ring_cost(fabric, "all_gather" if gather else "reduce_scatter", ranks, nbytes,
                                       protocol, gpus_per_node)
        wire = nbytes / cost.bandwidth_factor
        return _after(fabric.env, cost.latency_s - charged,
                      lambda: _hierarchical(fabric, ranks, wire, gpus_per_node, gather))
    op = ring_all_gather if gather else ring_reduce_scatter
    done = fabric.env.event()
    if len(nodes) == 1 or sizes == {1}:
        _phases(fabric, [[(op, list(ranks), nbytes)]], done)
        return done
    g = sizes.pop()
    intra = [(op, members, nbytes) for members in nodes.values()]
    members = list(nodes.values())
    inter = [(op, [node[i] for node in members], nbytes / g) for i in range(g)]
    _phases(fabric, [inter, intra] if gather else [intra, inter], done)
    return done


def hierarchical_reduce_scatter(fabric: Fabric, ranks: Sequence[int], nbytes: float,
                                gpus_per_node: int, protocol: str | None = None) -> simpy.Event:
    """Reduce-scatter of ``nbytes`` per rank over ranks spread on nodes of ``gpus_per_node``: a ring
    inside each node (each GPU keeps ``nbytes / g``), then a ring per rail on those ``nbytes / g``
    (``protocol``: NCCL's, see the module, for the whole collective)."""
    return _hierarchical(fabric, ranks, nbytes, gpus_per_node, False, protocol)


def hierarchical_all_gather(fabric: Fabric, ranks: Sequence[int], nbytes: float, gpus_per_node: int,
                            protocol: str | None = None) -> simpy.Event:
    """All-gather to ``nbytes`` per rank: a ring per rail on ``nbytes / g``, then a ring inside each
    node (``protocol``: NCCL's, see the module, for the whole collective)."""
    return _hierarchical(fabric, ranks, nbytes, gpus_per_node, True, protocol)
