"""Collectives alone: the closed forms of the MoE all-to-all (:func:`~sim.network.all_to_all`) and
of the rings the data-parallel synchronisation runs (:func:`ring_alone_s`,
:func:`hierarchical_alone_s`) on the analytical network (:class:`~sim.network.AnalyticalNetwork`:
every transfer alone on its route), without running it; the planner's screen
(:mod:`sim.plan_screen`) times thousands of them.

A transfer of ``N`` bytes from GPU ``a`` to GPU ``b`` started at ``t`` lands at ``t + L + N / B``
(``L`` its route's latency, ``B`` the least bandwidth on it; ``N = 0``: ``t + L``), whatever else is
in flight. The collective's transfers wait only for one another, so each of its units ends at the
end of its longest chain (``c`` pieces per hierarchical message, ``T_ab(n)`` one transfer of ``n``
bytes from ``a`` to ``b`` alone):

* **flat**, and a hierarchical GPU's own node: one transfer per pair, ``T_ab(tokens x bytes)``.
* **hierarchical dispatch** from GPU ``a`` to node ``n`` through its same-index GPU ``x``: the IB
  pieces leave one after the other, piece ``i`` landing at ``l_i = l_{i-1} + T_ax(IB / c)``
  (``l_{-1} = 0``), and each is forwarded to every other GPU ``y`` of the node holding tokens for
  ``a``: the unit ends at ``l_{c-1} + max_y T_xy(fwd_y / c)`` (at ``l_{c-1}`` without forwards).
* **hierarchical combine** (the reverse): every ``y`` sends its pieces to ``x`` one after the
  other, piece ``i`` landing at ``g_{y,i} = g_{y,i-1} + T_yx(fwd_y / c)``; ``x`` sends piece ``i``
  back to ``a`` once every ``g_{y,i}`` has landed and its own piece ``i-1`` has:
  ``e_i = max(max_y g_{y,i}, e_{i-1}) + T_xa(IB / c)`` (``e_{-1} = 0``); the unit ends at ``e_{c-1}``.

The group's all-to-all ends when its last unit does; these are the same sums in the same order
the analytical network adds them, so the times agree to the last bit (``tests/test_alone.py``
runs both). The SM bound of :func:`~sim.training.comm.alltoall.measure_all_to_alls` (a GPU's kernel
moves at most ``gpu_rate`` bytes/s) is applied by :func:`all_to_all_alone_s` as there: the group's
time is at least its busiest GPU's bytes sent or received (forwards included) over ``gpu_rate``.
So an all-to-all on the max-min fabric, whose transfers share links, takes at least this long; so
does a ring, whose transfers are each one alone after its ``steps - 1`` latencies (bulk, as the
fabric sends them), a hierarchical collective being its phases one after the other.
"""
from __future__ import annotations

import weakref
from typing import Sequence

import numpy as np

from .collectives import check_all_to_all, nccl_ring_cost, node_groups
from .links import LinkTable
from .nccl_rates import NcclRates
from .traffic import Traffic


class Transfers:
    """Transfers alone on ``links``: each route's latency and least bandwidth, looked up once."""

    def __init__(self, links: LinkTable):
        self.links = links
        self._capacity = links.capacity.astype(float)
        self._routes: dict[tuple[int, int], tuple[float, float]] = {}
        self._matrices: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._kinds: dict[tuple[bytes, bytes], int] = {}          # the matrices' contents, numbered
        self._alike: dict[tuple, int] = {}                        # GPU list -> its matrices' number
        self.times: dict[tuple, float] = {}                       # all_to_all_alone_s's, by alike groups

    def route(self, src: int, dst: int) -> tuple[float, float]:
        """(latency in s, least bandwidth in bytes/s) of the route from GPU ``src`` to GPU ``dst``."""
        hit = self._routes.get((src, dst))
        if hit is None:
            route_links, latency = self.links.route(src, dst)
            hit = self._routes[(src, dst)] = (latency, float(self._capacity[route_links].min()))
        return hit

    def matrices(self, gpus: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """([i, j] latency in s, [i, j] least bandwidth in bytes/s) of the routes between ``gpus``
        (0 and infinity from a GPU to itself: nothing to drain), found together and kept."""
        key = tuple(gpus)
        hit = self._matrices.get(key)
        if hit is None:
            n = len(key)
            pairs = [(src, dst) for src in key for dst in key if src != dst]
            lat, bw = np.zeros((n, n)), np.full((n, n), np.inf)
            if pairs:
                hops, flat = self.links.routes(pairs)
                starts = np.concatenate(([0], np.cumsum(hops)[:-1]))
                off = ~np.eye(n, dtype=bool)
                lat[off] = [self.links.route(src, dst)[1] for src, dst in pairs]     # cached by routes()
                bw[off] = np.minimum.reduceat(self._capacity[flat], starts)
            hit = self._matrices[key] = (lat, bw)
            self._alike[key] = self._kinds.setdefault((lat.tobytes(), bw.tobytes()), len(self._kinds))
        return hit

    def alike(self, gpus: Sequence[int]) -> int:
        """A number shared by the GPU lists whose routes have the same latencies and bandwidths
        (:meth:`matrices`): a collective over any of them takes the same time alone."""
        self.matrices(gpus)
        return self._alike[tuple(gpus)]


_ON: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def transfers_on(links: LinkTable) -> Transfers:
    """The :class:`Transfers` of ``links``, one per link table and process (its routes' figures
    found once for all the runs that share the table)."""
    transfers = _ON.get(links)
    if transfers is None:
        transfers = _ON[links] = Transfers(links)
    return transfers


def all_to_all_alone(transfers: Transfers, group: Sequence[int], traffic: Traffic, token_bytes: float,
                     algorithm: str = "hierarchical", direction: str = "dispatch", chunks: int = 4
                     ) -> tuple[float, np.ndarray, np.ndarray]:
    """(seconds until the last byte lands, bytes each GPU of ``group`` sends, bytes each receives) of
    :func:`~sim.network.all_to_all` with the same arguments, every transfer alone (see the module).
    Vectorised over the group's pairs and units; each element sees the network's own float
    operations in its order (``begin = at + latency``, ``end = begin + bytes / bandwidth``)."""
    chunks = check_all_to_all(group, traffic, algorithm, direction, chunks)
    r = traffic.routing
    ep, tb = r.ep, float(token_bytes)
    G = np.asarray(traffic.gpu_tokens, dtype=float) * tb               # bytes a sends to b's experts
    lat, bw = transfers.matrices(group)                                 # [src, dst] of the group's members
    dispatch = direction == "dispatch"
    member = np.arange(ep)
    if algorithm == "flat":
        pairs = (G > 0) & (member[:, None] != member[None, :])
        return _direct(G, pairs, lat, bw, dispatch)
    g = r.gpus_in_node
    node = member // g
    local = (G > 0) & (node[:, None] == node[None, :]) & (member[:, None] != member[None, :])
    end, sent, received = _direct(G, local, lat, bw, dispatch)
    N = np.asarray(traffic.node_tokens, dtype=float) * tb               # IB bytes from a to node n
    a, n = np.nonzero((N > 0) & (np.arange(r.nodes)[None, :] != node[:, None]))
    if len(a) == 0:
        return end, sent, received
    x = n * g + a % g                                                   # the same-index GPU on node n
    ys = n[:, None] * g + np.arange(g)[None, :]                         # [unit, node's GPUs]
    fwd = G[a[:, None], ys]
    forwarded = (fwd > 0) & (ys != x[:, None])                          # the others of each unit
    ib = N[a, n]
    if dispatch:
        unit_end = _dispatch_units(lat, bw, a, x, ys, ib, fwd, forwarded, chunks)
        np.add.at(sent, a, ib)
        np.add.at(received, x, ib)
        np.add.at(sent, np.broadcast_to(x[:, None], ys.shape)[forwarded], fwd[forwarded])
        np.add.at(received, ys[forwarded], fwd[forwarded])
    else:
        unit_end = _combine_units(lat, bw, a, x, ys, ib, fwd, forwarded, chunks)
        np.add.at(sent, x, ib)
        np.add.at(received, a, ib)
        np.add.at(sent, ys[forwarded], fwd[forwarded])
        np.add.at(received, np.broadcast_to(x[:, None], ys.shape)[forwarded], fwd[forwarded])
    return max(end, float(unit_end.max())), sent, received


def _direct(G: np.ndarray, pairs: np.ndarray, lat: np.ndarray, bw: np.ndarray, dispatch: bool):
    """(last end, sent, received) of one transfer per marked pair ``(a, b)``: ``a`` to ``b`` for a
    dispatch, ``b`` to ``a`` for a combine, each started at 0."""
    L, B = (lat, bw) if dispatch else (lat.T, bw.T)
    ends = (0.0 + L[pairs]) + G[pairs] / B[pairs]
    by_source, by_target = np.where(pairs, G, 0.0).sum(axis=1), np.where(pairs, G, 0.0).sum(axis=0)
    sent, received = (by_source, by_target) if dispatch else (by_target, by_source)
    return (float(ends.max()) if ends.size else 0.0), sent.copy(), received.copy()


def _dispatch_units(lat, bw, a, x, ys, ib, fwd, forwarded, chunks: int) -> np.ndarray:
    """Each hierarchical dispatch unit's end: ``chunks`` IB pieces one after the other, the last
    one forwarded to the unit's others."""
    landed = np.zeros(len(a))
    piece, l_ib, b_ib = ib / chunks, lat[a, x], bw[a, x]
    for _ in range(chunks):
        landed = (landed + l_ib) + piece / b_ib
    xs = np.broadcast_to(x[:, None], ys.shape)
    ends = (landed[:, None] + lat[xs, ys]) + (fwd / chunks) / bw[xs, ys]
    return np.where(forwarded.any(axis=1), np.where(forwarded, ends, -np.inf).max(axis=1), landed)


def _combine_units(lat, bw, a, x, ys, ib, fwd, forwarded, chunks: int) -> np.ndarray:
    """Each hierarchical combine unit's end: the others' pieces to ``x`` one after the other,
    ``x``'s piece ``i`` back to ``a`` once they and its piece ``i - 1`` have landed."""
    xs = np.broadcast_to(x[:, None], ys.shape)
    l_nv, b_nv, part = lat[ys, xs], bw[ys, xs], fwd / chunks
    gathered = np.zeros(ys.shape)
    back = np.zeros(len(a))
    piece, l_ib, b_ib = ib / chunks, lat[x, a], bw[x, a]
    for _ in range(chunks):
        gathered = (gathered + l_nv) + part / b_nv
        ready = np.maximum(back, np.where(forwarded, gathered, -np.inf).max(axis=1))
        back = (ready + l_ib) + piece / b_ib
    return back


def all_to_all_alone_s(transfers: Transfers, group: Sequence[int], traffic: Traffic, token_bytes: float,
                       algorithm: str = "hierarchical", direction: str = "dispatch", chunks: int = 4,
                       gpu_rate: float | None = None) -> float:
    """Seconds of the all-to-all alone (:func:`all_to_all_alone`), at least its busiest GPU's bytes
    sent or received over ``gpu_rate`` (bytes/s; ``None``: no such bound). Kept in ``transfers``
    for every group whose routes are alike (:meth:`Transfers.alike`) with the same traffic."""
    routing = traffic.routing
    key = (transfers.alike(group), np.asarray(traffic.gpu_tokens).tobytes(), np.asarray(traffic.node_tokens).tobytes(),
           routing.ep, routing.gpus_per_node, float(token_bytes), algorithm, direction, chunks, gpu_rate)
    end = transfers.times.get(key)
    if end is None:
        end, sent, received = all_to_all_alone(transfers, group, traffic, token_bytes, algorithm, direction, chunks)
        if gpu_rate is not None:
            end = max(end, float(np.maximum(sent, received).max()) / gpu_rate)
        transfers.times[key] = end
    return end


def ring_alone_s(transfers: Transfers, ranks: Sequence[int], nbytes: float, steps: int) -> float:
    """Seconds of a ring of ``steps`` steps of ``nbytes / n`` bytes sent in bulk
    (:func:`~sim.network.collectives.ring_reduce_scatter` with ``bulk``) with every transfer alone:
    each rank's one transfer to the next waits ``(steps - 1)`` latencies of its route, then pays
    its latency and ``steps x nbytes / n`` bytes at its route's least bandwidth; the ring ends with
    its last transfer."""
    n = len(ranks)
    if n < 2 or nbytes == 0:
        return 0.0
    chunk, end = nbytes / n, 0.0
    for i in range(n):
        src, dst = ranks[i], ranks[(i + 1) % n]
        if src == dst:
            continue
        latency, bandwidth = transfers.route(src, dst)
        start = (steps - 1) * latency if steps > 1 and latency > 0 else 0.0
        end = max(end, (start + latency) + steps * chunk / bandwidth)
    return end


def hierarchical_alone_s(transfers: Transfers, ranks: Sequence[int], nbytes: float, gpus_per_node: int,
                         gather: bool, protocol: str | None = None, rates: NcclRates | None = None) -> float:
    """Seconds of :func:`~sim.network.hierarchical_reduce_scatter` (``gather``: all-gather) with
    every transfer alone: NCCL's latency (as charged under ``rates``,
    :mod:`sim.network.nccl_rates`) less what the rings charge (``protocol``), then the phases
    one after the other (a ring inside each node on ``nbytes``, one per rail on ``nbytes / g``; the
    rails first for an all-gather), each as long as its slowest ring (:func:`ring_alone_s`)."""
    nodes = node_groups(ranks, gpus_per_node)
    sizes = {len(members) for members in nodes.values()}
    if protocol is not None and len(ranks) > 1 and nbytes > 0:
        cost, charged = nccl_ring_cost(transfers,      # it reads only the link table of what it is given
                                       "all_gather" if gather else "reduce_scatter", ranks, nbytes,
                                       protocol, gpus_per_node, rates)
        return max(cost.latency_s - charged, 0.0) + hierarchical_alone_s(
            transfers, ranks, nbytes / cost.bandwidth_factor, gpus_per_node, gather)
    if len(nodes) == 1 or sizes == {1}:
        return ring_alone_s(transfers, list(ranks), nbytes, len(ranks) - 1)
    g = sizes.pop()
    members = list(nodes.values())
    intra = max(ring_alone_s(transfers, node, nbytes, g - 1) for node in members)
    inter = max(ring_alone_s(transfers, [node[i] for node in members], nbytes / g, len(members) - 1)
                for i in range(g))
    return intra + inter


__all__ = ["Transfers", "all_to_all_alone", "all_to_all_alone_s", "hierarchical_alone_s", "ring_alone_s",
           "transfers_on"]
