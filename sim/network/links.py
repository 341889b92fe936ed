"""The link table and routes of a topology graph (no SimPy here).

Each undirected edge becomes two directed links (u->v, v->u), each with the edge's ``bandwidth``
(bytes/s per direction) and ``latency`` (s). Routes are shortest by hop count; among equal-hop
next hops a route avoids transiting through another GPU (a GPU forwards over NVLink only when no
other shortest path exists, as between planes of a multi-plane fabric), then prefers a non-NVLink
link, and then picks one by a
deterministic hash of (source, destination, hop): deterministic ECMP, the same on every run.
Where a GPU must relay (between planes of a multi-plane fabric), the route leaves over the
scale-out network first and crosses NVLink at the far node, the shape of DeepSeek's dispatch.

Hop distances to the GPUs come from a breadth-first search per block of 256 GPUs; the walk along
them is compiled (numba; the same code as Python where numba is missing), one route at a time
(:meth:`LinkTable.route`) or many to a block at once (:meth:`LinkTable.routes`); both cache what
they find, with the same links and latencies.
"""
from __future__ import annotations

import networkx as nx
import numpy as np

from ..checks import InputError
from .jit import LEAF, njit


def _rank(v, link, is_gpu, is_nvlink):
    """A next hop's rank, lowest best: 2 if it relays through a GPU, plus 1 if its link is NVLink
    (the order of the tuple (relays, is NVLink), False first). The destination GPU itself is never
    ranked against another hop: it is the only neighbour at distance 0."""
    return 2 * int(is_gpu[v]) + int(is_nvlink[link])


def _walk(s, t, dist, col, indptr, nbrs, link_of, is_gpu, is_nvlink, choice, links):
    """The route from node ``s`` to node ``t`` (``dist[:, col]``: hops to t), hop by hop, into
    ``links``; ``choice`` and ``links`` hold one entry per hop. At each hop the candidates are the
    neighbours one hop nearer, in the table's order (by node number); the best by (relays through
    a GPU, is NVLink), False first; then the one at ``choice[hop] % their number``."""
    u = s
    hop = 0
    while u != t:
        want = dist[u, col] - 1
        best = 4                                     # above every rank
        count = 0
        for j in range(indptr[u], indptr[u + 1]):
            v = nbrs[j]
            if dist[v, col] == want:
                key = _rank(v, link_of[j], is_gpu, is_nvlink)
                if key < best:
                    best = key
                    count = 1
                elif key == best:
                    count += 1
        pick = choice[hop] % count                   # Python's modulo (numba's too): never negative
        for j in range(indptr[u], indptr[u + 1]):
            v = nbrs[j]
            if dist[v, col] == want and _rank(v, link_of[j], is_gpu, is_nvlink) == best:
                if pick == 0:
                    links[hop] = link_of[j]
                    u = v
                    break
                pick -= 1
        hop += 1


def _walk_all(sources, targets, cols, starts, dist, indptr, nbrs, link_of, is_gpu, is_nvlink, choice, links):
    """:func:`_walk` for many routes to GPUs of one distance table: route i, from node
    ``sources[i]`` to ``targets[i]`` (column ``cols[i]``), takes the ``choice`` and ``links``
    entries from ``starts[i]`` on, one per hop."""
    for i in range(sources.size):
        lo = starts[i]
        _walk(sources[i], targets[i], dist, cols[i], indptr, nbrs, link_of, is_gpu, is_nvlink, choice[lo:], links[lo:])


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
        self.gpus = [index[g] for g in graph.graph["gpus"]]
        self._gpu_index = {node: i for i, node in enumerate(self.gpus)}
        self._dist: dict[int, np.ndarray] = {}         # distance blocks by their first GPU
        self._routes: dict[tuple[int, int], tuple[np.ndarray, float]] = {}

    def __len__(self) -> int:
        return self.capacity.size

    def __getstate__(self) -> dict:
        """Pickled (to a worker process) without the route and distance caches, which the worker
        rebuilds as it needs them: routes are deterministic."""
        state = dict(self.__dict__)
        state["_dist"], state["_routes"] = {}, {}
        return state

    def scaled(self, factors: dict[str, float]) -> "LinkTable":
        """A table of the same links and routes (shared caches: routes do not depend on bandwidth)
        whose bandwidths are scaled by ``factors[kind]`` (kinds not named keep theirs)."""
        import copy
        out = copy.copy(self)
        scale = np.array([factors.get(kind, 1.0) for kind in self.kind])
        out.capacity = self.capacity * scale
        return out

    def link_name(self, link: int) -> str:
        return f"{self.names[self.src[link]]}->{self.names[self.dst[link]]}"

    _BLOCK = 256   # GPU targets searched together

    def _distances(self, target: int) -> tuple[np.ndarray, int]:
        """(hop distances of every node to a block of up to 256 GPUs, [node, GPU of the block];
        the column of the GPU node ``target``). A block is found by one breadth-first search from
        all its GPUs at once (one boolean matrix per hop) and kept."""
        at = self._gpu_index[target]
        first = at // self._BLOCK * self._BLOCK
        block = self._dist.get(first)
        if block is None:
            block = self._dist[first] = np.ascontiguousarray(self._bfs(self.gpus[first:first + self._BLOCK]))
        return block, at - first

    def _distances_to(self, target: int) -> np.ndarray:
        """Hop distance of every node to the GPU node ``target``."""
        block, col = self._distances(target)
        return block[:, col]

    def _bfs(self, targets: list[int]) -> np.ndarray:
        """[node, target] hop distances to each of ``targets`` (-1: unreachable). The reached set of
        each node is a row of bits (64 targets per word), so one hop is a gather and an OR over
        every node's neighbours."""
        n, k = len(self.names), len(targets)
        indptr, nbrs = self._indptr, self._csr_nbrs
        has = indptr[1:] > indptr[:-1]
        words = -(-k // 64)
        start = np.zeros((n, words * 64), dtype=bool)
        start[targets, np.arange(k)] = True
        frontier = np.packbits(start, axis=1).view(np.uint64)
        reached = frontier.copy()
        dist = np.where(start[:, :k], 0, -1).astype(np.int32)
        d = 0
        while frontier.any():
            d += 1
            step = np.zeros_like(frontier)           # one hop further: a neighbour was reached last hop
            step[has] = np.bitwise_or.reduceat(frontier[nbrs], indptr[:-1][has], axis=0)
            step &= ~reached
            dist[np.unpackbits(step.view(np.uint8), axis=1)[:, :k].astype(bool)] = d
            reached |= step
            frontier = step
        return dist

    def route(self, src_gpu: int, dst_gpu: int) -> tuple[np.ndarray, float]:
        """Links (ids) and latency (s) from GPU ``src_gpu`` to GPU ``dst_gpu`` (global indices)."""
        key = (src_gpu, dst_gpu)
        hit = self._routes.get(key)
        if hit is not None:
            return hit
        s, t = self.gpus[src_gpu], self.gpus[dst_gpu]
        dist, col = self._distances(t)
        hops = self._hops(dist, col, s, t)
        choice = np.array(_choices(src_gpu, dst_gpu, hops), dtype=np.int64)
        links = np.empty(hops, dtype=np.int64)
        _walk(s, t, dist, col, self._indptr, self._csr_nbrs, self._csr_links, self.is_gpu, self._is_nvlink, choice,
              links)
        result = (links, float(self.latency[links].sum()))
        self._routes[key] = result
        return result

    def _hops(self, dist: np.ndarray, col: int, s: int, t: int) -> int:
        hops = int(dist[s, col])
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
        """Walk the routes of ``pairs`` (distinct, none cached) together and cache them with their
        latencies (the sum of their links', added in route order as ``numpy.sum`` does up to 7 links;
        longer routes are summed by numpy itself)."""
        m = len(pairs)
        gpu_nodes = np.asarray(self.gpus, dtype=np.int64)
        src = np.array([a for a, _ in pairs], dtype=np.int64)
        dst = np.array([b for _, b in pairs], dtype=np.int64)
        sources, targets = gpu_nodes[src], gpu_nodes[dst]
        block_of = dst // self._BLOCK               # GPU b is column b % BLOCK of its block
        cols = dst % self._BLOCK
        hops = np.zeros(m, dtype=np.int64)
        blocks = {}
        for block in np.unique(block_of).tolist():
            idx = np.flatnonzero(block_of == block)
            dist, _ = self._distances(int(targets[idx[0]]))
            hops[idx] = dist[sources[idx], cols[idx]]
            if (hops[idx] < 0).any():
                i = int(idx[np.argmax(hops[idx] < 0)])
                self._hops(dist, int(cols[i]), int(sources[i]), int(targets[i]))      # raises, naming both
            blocks[block] = idx, dist
        starts = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(hops, out=starts[1:])
        choice = np.array([h for (a, b), n in zip(pairs, hops.tolist()) for h in _choices(a, b, n)], dtype=np.int64)
        links = np.empty(int(starts[-1]), dtype=np.int64)
        for idx, dist in blocks.values():
            _walk_all(sources[idx], targets[idx], cols[idx], starts[idx], dist, self._indptr, self._csr_nbrs,
                      self._csr_links, self.is_gpu, self._is_nvlink, choice, links)
        latency = np.empty(m)
        _latencies(self.latency, links, starts, latency)
        bounds = starts.tolist()
        for pair, lo, hi, lat in zip(pairs, bounds, bounds[1:], latency.tolist()):
            route = links[lo:hi]
            self._routes[pair] = (route, lat if hi - lo < 8 else float(self.latency[route].sum()))


if njit is not None:
    _rank = njit(**LEAF)(_rank)
    _walk = njit(**LEAF)(_walk)
    _walk_all = njit(cache=True)(_walk_all)
    _latencies = njit(cache=True)(_latencies)
