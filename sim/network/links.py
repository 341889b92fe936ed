"""The link table and routes of a topology graph (no SimPy here).

Each undirected edge becomes two directed links (u->v, v->u), each with the edge's ``bandwidth``
(bytes/s per direction) and ``latency`` (s). Routes are shortest by hop count; among equal-hop
next hops a route avoids transiting through another GPU (a GPU forwards over NVLink only when no
other shortest path exists, as between planes of a multi-plane fabric), then prefers a non-NVLink
link, and then picks one by a
deterministic hash of (source, destination, hop): deterministic ECMP, the same on every run.
Where a GPU must relay (between planes of a multi-plane fabric), the route leaves over the
scale-out network first and crosses NVLink at the far node, the shape of DeepSeek's dispatch.

Hop distances to a GPU come from a compiled breadth-first search from it, done only for the GPUs a
run routes to: for one route (:meth:`LinkTable.route`) a whole search (``O(nodes + links)``, 2
bytes a node), kept in a cache of bounded size (:data:`DISTANCE_CACHE_BYTES`); for many at once
(:meth:`LinkTable.routes`) a search per destination that stops at its farthest source
(:func:`_bfs_until`), kept only while its routes are walked. So a cluster's memory grows with the
routes a run takes, not with the square of its GPUs, and the time of a ring's or a node's routes
with the hops they span. The walk along the distances is compiled too (numba; the same code as
Python where numba is missing); both ways cache what they find, with the same links and
latencies.
"""
from __future__ import annotations

from collections import OrderedDict

import networkx as nx
import numpy as np

from ..checks import InputError
from .jit import LEAF, njit


DISTANCE_CACHE_BYTES = 64 << 20    # distances kept per link table (2 bytes a node per GPU routed to)


def _bfs_until(target, need, stamp, wanted, indptr, nbrs, dist, queue):
    """Breadth-first search from node ``target`` that stops once the ``wanted`` nodes marked
    ``need[v] == stamp`` all have their distance (``wanted`` -1: a whole search), or the search
    is exhausted: ``dist[v]`` becomes v's hop distance to ``target`` for every node reached (the
    others keep -1; ``dist`` is all -1 on entry). Returns how many nodes it reached
    (``queue[:count]``, for the caller to reset).

    Stopping early is exact for the routes from the wanted nodes: a search finds nodes in order of
    distance, so when the last wanted node is reached at distance D every node nearer than D has its
    distance, and a route's walk from a node at distance d only asks which neighbours lie at d - 1
    (a node not reached is farther than D - 1). Links come in both directions, so the hops from
    ``target`` to v are the hops from v to ``target``."""
    dist[target] = 0
    queue[0] = target
    head, tail = 0, 1
    left = wanted
    if need[target] == stamp:
        left -= 1
    while head < tail and left != 0:
        u = queue[head]
        head += 1
        d = dist[u] + 1
        for j in range(indptr[u], indptr[u + 1]):
            v = nbrs[j]
            if dist[v] < 0:
                dist[v] = d
                queue[tail] = v
                tail += 1
                if need[v] == stamp:
                    left -= 1
    return tail


def _rank(v, link, is_gpu, is_nvlink):
    """A next hop's rank, lowest best: 2 if it relays through a GPU, plus 1 if its link is NVLink
    (the order of the tuple (relays, is NVLink), False first). The destination GPU itself is never
    ranked against another hop: it is the only neighbour at distance 0."""
    return 2 * int(is_gpu[v]) + int(is_nvlink[link])


def _walk(s, t, dist, graph, choice, links):
    """The route from node ``s`` to node ``t`` (``dist``: every node's hops to t), hop by hop, into
    ``links``; ``choice`` and ``links`` hold one entry per hop; ``graph`` is the table's
    (indptr, neighbours, link of each neighbour entry, is a GPU, is NVLink) arrays
    (:attr:`LinkTable.csr`). At each hop the candidates are the neighbours one hop nearer, in the
    table's order (by node number); the best by (relays through a GPU, is NVLink), False first;
    then the one at ``choice[hop] % their number``."""
    indptr, nbrs, link_of, is_gpu, is_nvlink = graph
    u = s
    hop = 0
    while u != t:
        want = dist[u] - 1
        best = 4                                     # above every rank
        count = 0
        for j in range(indptr[u], indptr[u + 1]):
            v = nbrs[j]
            if dist[v] == want:
                key = _rank(v, link_of[j], is_gpu, is_nvlink)
                if key < best:
                    best = key
                    count = 1
                elif key == best:
                    count += 1
        pick = choice[hop] % count                   # Python's modulo (numba's too): never negative
        for j in range(indptr[u], indptr[u + 1]):
            v = nbrs[j]
            if dist[v] == want and _rank(v, link_of[j], is_gpu, is_nvlink) == best:
                if pick == 0:
                    links[hop] = link_of[j]
                    u = v
                    break
                pick -= 1
        hop += 1


def _walk_all(sources, target, starts, dist, graph, choice, links):
    """:func:`_walk` for many routes to one GPU node ``target`` (``dist``: hops to it): route i,
    from node ``sources[i]``, takes the ``choice`` and ``links`` entries from ``starts[i]`` on, one
    per hop."""
    for i in range(sources.size):
        lo = starts[i]
        _walk(sources[i], target, dist, graph, choice[lo:], links[lo:])


def _latencies(latency, links, starts, out):
    """``out[i]``: the sum of the latencies of the links ``links[starts[i]:starts[i + 1]]``, added
    one after the other from the first."""
    for i in range(out.size):
        total = 0.0
        for q in range(starts[i], starts[i + 1]):
            total += latency[links[q]]
        out[i] = total


def _choices(src_gpu: int, dst_gpu: int, hops: int) -> list[int]:
    """The ECMP choice at each hop of a route: ``hash((source, destination, hop))`` of the GPUs'
    indices (ints hash the same every run; drawn in Python because the tuple hash is Python's)."""
    return [hash((src_gpu, dst_gpu, hop)) for hop in range(hops)]


class LinkTable:
    """Directed links of a graph, with ``route(src_gpu, dst_gpu) -> (link ids, path latency)``."""

    def __init__(self, graph: nx.Graph):
        self.graph = graph
        self.names = list(graph.nodes)
        index = {n: i for i, n in enumerate(self.names)}
        self.node_type = [graph.nodes[n].get("type") for n in self.names]
        self.is_gpu = np.array([t == "gpu" for t in self.node_type])
        heads, tails, caps, lats, kinds = [], [], [], [], []
        for u, v, data in graph.edges(data=True):
            for a, b in ((u, v), (v, u)):
                heads.append(index[a])
                tails.append(index[b])
                caps.append(float(data["bandwidth"]))
                lats.append(float(data["latency"]))
                kinds.append(data.get("kind", "link"))
        self.src = np.array(heads, dtype=np.int64)
        self.dst = np.array(tails, dtype=np.int64)
        self.capacity = np.array(caps)
        self.latency = np.array(lats)
        self.kind = kinds
        n = len(self.names)
        order = np.lexsort((self.dst, self.src))
        self._csr_nbrs = self.dst[order]
        self._indptr = np.searchsorted(self.src[order], np.arange(n + 1))
        self._csr_links = order                      # the link of each (node, neighbour) entry
        self._is_nvlink = np.array([k == "nvlink" for k in kinds], dtype=np.bool_)
        # What a route's walk reads, as one record: (indptr, neighbours, link of each entry, is a GPU, is NVLink).
        self.csr = (self._indptr, self._csr_nbrs, self._csr_links, self.is_gpu, self._is_nvlink)
        self.gpus = [index[g] for g in graph.graph["gpus"]]
        self.gpu_ids: list[int] | None = None         # a view's GPUs as the whole table numbers them (view())
        self._dist: OrderedDict[int, np.ndarray] = OrderedDict()   # hops to a GPU node, by that node
        self._routes: dict[tuple[int, int], tuple[np.ndarray, float]] = {}

    def __len__(self) -> int:
        return self.capacity.size

    @property
    def nvls(self) -> bool:
        """Whether a node's NVSwitch reduces and multicasts in the switch (NVLink SHARP: the
        topology's ``nvls``), so that NCCL may run an all-reduce inside a node as NVLS."""
        return bool(self.graph.graph.get("nvls", False))

    def __getstate__(self) -> dict:
        """Pickled (to a worker process) without the route and distance caches, which the worker
        rebuilds as it needs them (routes are deterministic), and without the graph's nodes and
        edges (the table holds what routes and flows need; ``graph.graph``, the attributes, stays)."""
        state = dict(self.__dict__)
        state["_dist"], state["_routes"] = OrderedDict(), {}
        bare = nx.Graph()                            # the graph's attributes only: the table is the network
        bare.graph.update(self.graph.graph)
        state["graph"] = bare
        return state

    def scaled(self, factors: dict[str, float]) -> "LinkTable":
        """A table of the same links and routes (shared caches: routes do not depend on bandwidth)
        whose bandwidths are scaled by ``factors[kind]`` (kinds not named keep theirs)."""
        import copy
        out = copy.copy(self)
        scale = np.array([factors.get(kind, 1.0) for kind in self.kind])
        out.capacity = self.capacity * scale
        return out

    def view(self, gpus: list[int]) -> "LinkTable":
        """The same links (same ids, capacities and distance cache) whose GPU ``i`` is this table's
        GPU ``gpus[i]``: a job's own numbering of the GPUs it was given. Its routes are this table's
        routes between the same GPUs, link for link (the ECMP hash takes the GPUs' numbers in the
        whole table, :attr:`gpu_ids`)."""
        import copy
        gpus = list(gpus)
        out = copy.copy(self)
        out.gpu_ids = self._global(gpus)
        out.gpus = [self.gpus[g] for g in gpus]
        out._routes = {}
        return out

    def _global(self, gpus: list[int]) -> list[int]:
        """GPU numbers of this table as the whole table (the one views come from) numbers them."""
        n = len(self.gpus)
        bad = [g for g in gpus if not 0 <= g < n]
        if bad:
            raise InputError(f"a view's GPUs must be among this table's 0..{n - 1}, got {bad[0]}")
        if len(set(gpus)) != len(gpus):
            raise InputError("a view names a GPU twice")
        return gpus if self.gpu_ids is None else [self.gpu_ids[g] for g in gpus]

    def _hashed(self, gpu: int) -> int:
        return gpu if self.gpu_ids is None else self.gpu_ids[gpu]

    def link_name(self, link: int) -> str:
        return f"{self.names[self.src[link]]}->{self.names[self.dst[link]]}"

    def _distances_to(self, target: int) -> np.ndarray:
        """Hop distance (int16: routes of at most 32,767 hops; -1: unreachable) of every node to the
        GPU node ``target``: one breadth-first search, kept in a cache of at most
        :data:`DISTANCE_CACHE_BYTES` (the least recently used dropped first; found again if asked
        again: routes are deterministic)."""
        cache = self._dist
        dist = cache.get(target)
        if dist is not None:
            cache.move_to_end(target)
            return dist
        n = len(self.names)
        dist = np.full(n, -1, dtype=np.int16)
        _bfs_until(target, np.zeros(n, dtype=np.int64), 1, -1, self._indptr, self._csr_nbrs, dist,
                   np.empty(n, dtype=np.int64))
        self._remember(target, dist)
        return dist

    def _remember(self, target: int, dist: np.ndarray) -> None:
        cache = self._dist
        cache[target] = dist
        while len(cache) > max(1, DISTANCE_CACHE_BYTES // dist.nbytes):
            cache.popitem(last=False)

    def route(self, src_gpu: int, dst_gpu: int) -> tuple[np.ndarray, float]:
        """Links (ids) and latency (s) from GPU ``src_gpu`` to GPU ``dst_gpu`` (global indices)."""
        key = (src_gpu, dst_gpu)
        hit = self._routes.get(key)
        if hit is not None:
            return hit
        s, t = self.gpus[src_gpu], self.gpus[dst_gpu]
        dist = self._distances_to(t)
        hops = self._hops(dist, s, t)
        choice = np.array(_choices(self._hashed(src_gpu), self._hashed(dst_gpu), hops), dtype=np.int64)
        links = np.empty(hops, dtype=np.int64)
        _walk(s, t, dist, self.csr, choice, links)
        result = (links, float(self.latency[links].sum()))
        self._routes[key] = result
        return result

    def _hops(self, dist: np.ndarray, s: int, t: int) -> int:
        hops = int(dist[s])
        if hops < 0:
            raise InputError(f"GPU {self.names[s]!r} cannot reach GPU {self.names[t]!r}")
        return hops

    def routes(self, pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """(hops of each route, the routes' links one after the other) of GPU ``pairs``: the links
        :meth:`route` gives. Those not cached yet are found together (one compiled walk per block
        of destinations, not a call per route) and cached as :meth:`route` caches them."""
        cache = self._routes
        missing = [pair for pair in dict.fromkeys(pairs) if pair not in cache]
        if missing:
            self._find(missing)
        found = [cache[pair][0] for pair in pairs]
        hops = np.array([r.size for r in found], dtype=np.int64)
        return hops, (np.concatenate(found) if found else np.zeros(0, dtype=np.int64))

    def _find(self, pairs: list[tuple[int, int]]) -> None:
        """Walk the routes of ``pairs`` (distinct, none cached), those to one GPU together, each
        destination's distances found by a search that stops at its farthest source
        (:func:`_bfs_until`: a ring's neighbours or a node's peers are a few hops apart, so the
        search touches a few nodes, not the cluster), and cache them with their latencies (the sum
        of their links', added in route order as ``numpy.sum`` does up to 7 links; longer routes
        are summed by numpy itself)."""
        n = len(self.names)
        gpu_nodes = np.asarray(self.gpus, dtype=np.int64)
        src = np.array([a for a, _ in pairs], dtype=np.int64)
        dst = np.array([b for _, b in pairs], dtype=np.int64)
        sources, targets = gpu_nodes[src], gpu_nodes[dst]
        order = np.argsort(targets, kind="stable")
        bounds = np.flatnonzero(np.diff(targets[order])) + 1
        dist = np.full(n, -1, dtype=np.int16)           # scratch, reset after each destination
        queue = np.empty(n, dtype=np.int64)
        need = np.zeros(n, dtype=np.int64)
        for stamp, idx in enumerate(np.split(order, bounds), start=1):
            target = int(targets[idx[0]])
            wanted = np.unique(sources[idx])
            need[wanted] = stamp
            reached = _bfs_until(target, need, stamp, wanted.size, self._indptr, self._csr_nbrs, dist, queue)
            hops = dist[sources[idx]].astype(np.int64)
            if (hops < 0).any():
                i = int(idx[np.argmax(hops < 0)])
                self._hops(dist, int(sources[i]), target)      # raises, naming both
            starts = np.zeros(idx.size + 1, dtype=np.int64)
            np.cumsum(hops, out=starts[1:])
            hashed = pairs if self.gpu_ids is None else [(self.gpu_ids[a], self.gpu_ids[b]) for a, b in pairs]
            choice = np.array([h for i, k in zip(idx.tolist(), hops.tolist()) for h in _choices(*hashed[i], k)],
                              dtype=np.int64)
            links = np.empty(int(starts[-1]), dtype=np.int64)
            _walk_all(sources[idx], target, starts, dist, self.csr, choice, links)
            dist[queue[:reached]] = -1
            latency = np.empty(idx.size)
            _latencies(self.latency, links, starts, latency)
            ends = starts.tolist()
            for i, lo, hi, lat in zip(idx.tolist(), ends, ends[1:], latency.tolist()):
                route = links[lo:hi]
                self._routes[pairs[i]] = (route, lat if hi - lo < 8 else float(self.latency[route].sum()))


if njit is not None:
    _rank = njit(**LEAF)(_rank)
    _walk = njit(**LEAF)(_walk)
    _walk_all = njit(cache=True)(_walk_all)
    _bfs_until = njit(**LEAF)(_bfs_until)
    _latencies = njit(cache=True)(_latencies)
