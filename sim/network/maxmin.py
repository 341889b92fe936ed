"""Max-min fair rates by progressive filling (water-filling).

Every flow starts at rate 0; all rates rise together until some link is full; the flows through
that link (its bottleneck) are frozen at their current rate; the others keep rising until the next
link fills, and so on. The result is the unique max-min fair allocation: no flow's rate can grow
without shrinking a flow whose rate is no larger.

Weighted pairs: a pair may carry a weight ``w`` (default 1): a flow at rate ``r`` then loads that
link with ``w x r`` bytes/s, and counts there as ``w`` flows of the fair share. A bundle of flows that
progress together (a collective on the fabric, :meth:`~sim.network.Fabric.transfer_bundle`) is one
flow whose weight on each link is the number of its flows there, in units of its mean flow.

Two implementations of the same rounds: :func:`max_min_rates` in numpy (the oracle: a few vector
operations per round over every flow-link pair) and a compiled one (numba, when installed: per
round the bottleneck links popped from a heap of link shares, and each frozen flow's links once),
which :func:`rates` uses. They agree to rounding (a property test). Cost: O(rounds x pairs) for
numpy, O(pairs log links) compiled, where rounds is the number of distinct bottleneck levels.

The allocation splits over the connected components of the flow-link graph (flows that share no
link, directly or through other flows, do not affect each other): :func:`touched_flows` finds the
flows connected to a set of seed flows, so that the fabric recomputes only the components an
arrival or a departure touched.
"""
from __future__ import annotations

import heapq

import numpy as np

try:                                     # optional: the numpy versions below are the fallback
    from numba import njit
except ImportError:                      # pragma: no cover - depends on the environment
    njit = None


def max_min_rates(flow_of_pair: np.ndarray, link_of_pair: np.ndarray, capacity: np.ndarray,
                  n_flows: int, weight_of_pair: np.ndarray | None = None) -> np.ndarray:
    """Rates (bytes/s) of ``n_flows`` flows; pair k says flow ``flow_of_pair[k]`` uses link
    ``link_of_pair[k]`` with weight ``weight_of_pair[k]`` (default 1); ``capacity[l]`` is link l's
    bytes/s. A flow using no link gets ``inf``."""
    rates = np.full(n_flows, np.inf)
    if n_flows == 0 or flow_of_pair.size == 0:
        return rates
    # Work on the links actually used, renumbered 0..U-1.
    count = np.bincount(link_of_pair, minlength=capacity.size)
    used = np.flatnonzero(count)
    local = np.empty(capacity.size, dtype=np.int64)
    local[used] = np.arange(used.size)
    link_local = local[link_of_pair]
    remaining = capacity[used].astype(float)
    weights = np.ones(flow_of_pair.size) if weight_of_pair is None else np.asarray(weight_of_pair, dtype=float)
    users = np.bincount(link_local, weights=weights, minlength=used.size)
    flows = flow_of_pair
    links = link_local
    marked = np.zeros(n_flows, dtype=bool)
    share = np.empty(used.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        while flows.size:
            np.divide(remaining, users, out=share)
            share[users <= 0] = np.inf
            step = share.min()
            if not np.isfinite(step):
                break
            bottleneck = share <= step * (1 + 1e-12) + 1e-300
            newly = flows[bottleneck[links]]
            rates[newly] = step
            marked[newly] = True
            keep = ~marked[flows]
            counts = np.bincount(links, weights=weights * ~keep, minlength=used.size)
            remaining -= step * counts
            users -= counts
            users[np.bincount(links, weights=keep, minlength=used.size) == 0] = 0.0
            np.maximum(remaining, 0.0, out=remaining)
            flows, links, weights = flows[keep], links[keep], weights[keep]
    return rates


def _touched_numpy(seeds: np.ndarray, flow_of_pair: np.ndarray, link_of_pair: np.ndarray, n_flows: int,
                   n_links: int) -> np.ndarray:
    """:func:`touched_flows` by repeated vector steps (the fallback)."""
    flow_in = np.zeros(n_flows, dtype=bool)
    flow_in[seeds] = True
    size = -1
    while size != int(flow_in.sum()):
        size = int(flow_in.sum())
        link_in = np.zeros(n_links, dtype=bool)
        link_in[link_of_pair[flow_in[flow_of_pair]]] = True
        flow_in[flow_of_pair[link_in[link_of_pair]]] = True
    return flow_in


def _csr(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, order): the positions of ``keys`` grouped by key, by counting sort."""
    indptr = np.zeros(n + 1, dtype=np.int64)
    for k in keys:
        indptr[k + 1] += 1
    for i in range(n):
        indptr[i + 1] += indptr[i]
    fill = indptr[:-1].copy()
    order = np.empty(keys.size, dtype=np.int64)
    for p in range(keys.size):
        k = keys[p]
        order[fill[k]] = p
        fill[k] += 1
    return indptr, order


def _fill(flow_of_pair, link_of_pair, weight_of_pair, capacity, rates, by_link_ptr, by_link, by_flow_ptr, by_flow,
          links):
    """Progressive filling of the flows on ``links`` (a closed set: every flow on them uses only
    links in it), writing their ``rates``; shares (capacity left / weight of the unfrozen pairs) in
    a heap, stale entries skipped when popped. A round pops the bottleneck links, freezes their
    flows and pushes the new shares of the links those flows leave, which never fall below the
    round's level."""
    L = capacity.size
    count = np.zeros(L, dtype=np.int64)              # unfrozen pairs on the link
    users = np.zeros(L)                              # their weight
    remaining = np.zeros(L)
    heap = [(0.0, 0)]
    heap.pop()
    for l in links:
        count[l] = by_link_ptr[l + 1] - by_link_ptr[l]
        w = 0.0
        for q in range(by_link_ptr[l], by_link_ptr[l + 1]):
            w += weight_of_pair[by_link[q]]
        users[l] = w
        remaining[l] = capacity[l]
        heap.append((remaining[l] / users[l], l))
    heapq.heapify(heap)
    frozen = np.zeros(rates.size, dtype=np.bool_)
    newly = np.empty(rates.size, dtype=np.int64)
    bottlenecks = np.empty(L, dtype=np.int64)
    stamp = np.zeros(L, dtype=np.int64)              # the round a link was last collected or pushed in
    rnd = 0
    while heap:
        share, l = heapq.heappop(heap)
        if count[l] == 0 or share != remaining[l] / users[l]:
            continue                                  # stale
        rnd += 1
        step = share
        threshold = step * (1 + 1e-12) + 1e-300
        n_b = 1
        bottlenecks[0] = l
        stamp[l] = rnd
        while heap and heap[0][0] <= threshold:
            share, l = heapq.heappop(heap)
            if count[l] > 0 and stamp[l] != rnd and share == remaining[l] / users[l]:
                bottlenecks[n_b] = l
                stamp[l] = rnd
                n_b += 1
        n_new = 0
        for i in range(n_b):
            l = bottlenecks[i]
            for q in range(by_link_ptr[l], by_link_ptr[l + 1]):
                f = flow_of_pair[by_link[q]]
                if not frozen[f]:
                    frozen[f] = True
                    rates[f] = step
                    newly[n_new] = f
                    n_new += 1
        for j in range(n_new):
            f = newly[j]
            for q in range(by_flow_ptr[f], by_flow_ptr[f + 1]):
                p = by_flow[q]
                l = link_of_pair[p]
                count[l] -= 1
                users[l] -= weight_of_pair[p]
                remaining[l] -= step * weight_of_pair[p]
                if remaining[l] < 0.0:
                    remaining[l] = 0.0
        rnd += 1                                      # a new stamp for this round's pushes
        for j in range(n_new):
            f = newly[j]
            for q in range(by_flow_ptr[f], by_flow_ptr[f + 1]):
                l = link_of_pair[by_flow[q]]
                if count[l] > 0 and stamp[l] != rnd:
                    stamp[l] = rnd
                    heapq.heappush(heap, (remaining[l] / users[l], l))


def _fill_flows(flow_of_pair, link_of_pair, weight_of_pair, capacity, rates, by_link_ptr, by_link, by_flow_ptr,
                by_flow, flows):
    """The same progressive filling as :func:`_fill` for the closed set ``flows``, with a heap of
    flows instead of links: each unfrozen flow keeps its tightest link share and that link; a round
    freezes the flows at the lowest share, takes their rates off their links, and recomputes only
    the flows whose tightest link was one of those (shares never fall, so no other flow's can
    change). Faster than a heap of links when a few flows (bundles) cross many links each."""
    L = capacity.size
    users = np.zeros(L)
    remaining = np.zeros(L)
    seen = np.zeros(L, dtype=np.bool_)
    for f in flows:
        for q in range(by_flow_ptr[f], by_flow_ptr[f + 1]):
            p = by_flow[q]
            l = link_of_pair[p]
            if not seen[l]:
                seen[l] = True
                remaining[l] = capacity[l]
            users[l] += weight_of_pair[p]
    n = rates.size
    tight = np.full(n, np.inf)
    argmin = np.full(n, -1, dtype=np.int64)
    frozen = np.ones(n, dtype=np.bool_)
    heap = [(0.0, 0)]
    heap.pop()
    for f in flows:
        frozen[f] = False
        t, a = np.inf, -1
        for q in range(by_flow_ptr[f], by_flow_ptr[f + 1]):
            l = link_of_pair[by_flow[q]]
            share = remaining[l] / users[l]
            if share < t:
                t, a = share, l
        tight[f], argmin[f] = t, a
        heap.append((t, f))
    heapq.heapify(heap)
    newly = np.empty(n, dtype=np.int64)
    changed = np.empty(L, dtype=np.int64)
    mark = np.zeros(L, dtype=np.int64)
    rnd = 0
    while heap:
        t, f = heapq.heappop(heap)
        if frozen[f] or t != tight[f]:
            continue                                   # stale
        rnd += 1
        step = t
        threshold = step * (1 + 1e-12) + 1e-300
        n_new = 1
        newly[0] = f
        frozen[f] = True
        while heap and heap[0][0] <= threshold:
            t, g = heapq.heappop(heap)
            if not frozen[g] and t == tight[g]:
                frozen[g] = True
                newly[n_new] = g
                n_new += 1
        n_changed = 0
        for j in range(n_new):
            g = newly[j]
            rates[g] = step
            for q in range(by_flow_ptr[g], by_flow_ptr[g + 1]):
                p = by_flow[q]
                l = link_of_pair[p]
                users[l] -= weight_of_pair[p]
                remaining[l] -= step * weight_of_pair[p]
                if remaining[l] < 0.0:
                    remaining[l] = 0.0
                if mark[l] != rnd:
                    mark[l] = rnd
                    changed[n_changed] = l
                    n_changed += 1
        for i in range(n_changed):                     # flows whose tightest link changed
            l = changed[i]
            for r in range(by_link_ptr[l], by_link_ptr[l + 1]):
                g = flow_of_pair[by_link[r]]
                if frozen[g] or argmin[g] != l:
                    continue
                t, a = np.inf, -1
                for q in range(by_flow_ptr[g], by_flow_ptr[g + 1]):
                    k = link_of_pair[by_flow[q]]
                    share = remaining[k] / users[k]
                    if share < t:
                        t, a = share, k
                argmin[g] = a
                if t != tight[g]:
                    tight[g] = t
                    heapq.heappush(heap, (t, g))


WIDE_FLOW = 32   # a flow over more links than this (a bundle): fill with a heap of flows (see _fill_flows)


def _rates_compiled(flow_of_pair, link_of_pair, weight_of_pair, capacity, n_flows):
    rates = np.full(n_flows, np.inf)
    if n_flows == 0 or flow_of_pair.size == 0:
        return rates
    by_link_ptr, by_link = _csr(link_of_pair, capacity.size)
    by_flow_ptr, by_flow = _csr(flow_of_pair, n_flows)
    links = np.flatnonzero(by_link_ptr[1:] > by_link_ptr[:-1])
    if np.diff(by_flow_ptr).max() > WIDE_FLOW:
        _fill_flows(flow_of_pair, link_of_pair, weight_of_pair, capacity, rates, by_link_ptr, by_link, by_flow_ptr,
                    by_flow, np.unique(flow_of_pair))
    else:
        _fill(flow_of_pair, link_of_pair, weight_of_pair, capacity, rates, by_link_ptr, by_link, by_flow_ptr, by_flow,
              links)
    return rates


def _component(seeds, flow_of_pair, link_of_pair, by_link_ptr, by_link, by_flow_ptr, by_flow, n_flows, n_links,
               limit):
    """(flows, links) connected to ``seeds``; (empty, empty) once more than ``limit`` flows are found."""
    flow_in = np.zeros(n_flows, dtype=np.bool_)
    link_in = np.zeros(n_links, dtype=np.bool_)
    flows = np.empty(n_flows, dtype=np.int64)
    links = np.empty(n_links, dtype=np.int64)
    n_f = n_l = 0
    for f in seeds:
        if not flow_in[f]:
            flow_in[f] = True
            flows[n_f] = f
            n_f += 1
    head = 0
    while head < n_f:
        f = flows[head]
        head += 1
        for q in range(by_flow_ptr[f], by_flow_ptr[f + 1]):
            l = link_of_pair[by_flow[q]]
            if link_in[l]:
                continue
            link_in[l] = True
            links[n_l] = l
            n_l += 1
            for r in range(by_link_ptr[l], by_link_ptr[l + 1]):
                g = flow_of_pair[by_link[r]]
                if not flow_in[g]:
                    flow_in[g] = True
                    flows[n_f] = g
                    n_f += 1
                    if n_f > limit:
                        return flows[:0], links[:0]
    return flows[:n_f], links[:n_l]


def _update_compiled(flow_of_pair, link_of_pair, capacity, rates, seeds, limit):
    """Recompute in place the rates of the flows connected to ``seeds``, unless there are more than
    ``limit`` of them: then every rate. Returns the number of flows recomputed."""
    n_flows = rates.size
    by_link_ptr, by_link = _csr(link_of_pair, capacity.size)
    by_flow_ptr, by_flow = _csr(flow_of_pair, n_flows)
    flows, links = _component(seeds, flow_of_pair, link_of_pair, by_link_ptr, by_link, by_flow_ptr, by_flow,
                              n_flows, capacity.size, limit)
    if flows.size == 0:
        links = np.flatnonzero(by_link_ptr[1:] > by_link_ptr[:-1])
        rates[:] = np.inf
    else:
        for f in flows:
            rates[f] = np.inf
    _fill(flow_of_pair, link_of_pair, np.ones(flow_of_pair.size), capacity, rates, by_link_ptr, by_link, by_flow_ptr,
          by_flow, links)
    return n_flows if flows.size == 0 else flows.size


def _touched_compiled(seeds, flow_of_pair, link_of_pair, n_flows, n_links):
    by_link_ptr, by_link = _csr(link_of_pair, n_links)
    by_flow_ptr, by_flow = _csr(flow_of_pair, n_flows)
    flow_in = np.zeros(n_flows, dtype=np.bool_)
    link_in = np.zeros(n_links, dtype=np.bool_)
    stack = np.empty(n_flows, dtype=np.int64)
    top = 0
    for f in seeds:
        if not flow_in[f]:
            flow_in[f] = True
            stack[top] = f
            top += 1
    while top > 0:
        top -= 1
        f = stack[top]
        for q in range(by_flow_ptr[f], by_flow_ptr[f + 1]):
            l = link_of_pair[by_flow[q]]
            if link_in[l]:
                continue
            link_in[l] = True
            for r in range(by_link_ptr[l], by_link_ptr[l + 1]):
                g = flow_of_pair[by_link[r]]
                if not flow_in[g]:
                    flow_in[g] = True
                    stack[top] = g
                    top += 1
    return flow_in


def _drop_compiled(done, left, pair_flow, pair_link, link_bytes):
    n_keep = 0
    new_index = np.empty(done.size, dtype=np.int64)
    for f in range(done.size):
        new_index[f] = n_keep
        if not done[f]:
            n_keep += 1
    P = pair_flow.size
    keep_flow = np.empty(P, dtype=np.int64)
    keep_link = np.empty(P, dtype=np.int64)
    dropped = np.empty(P, dtype=np.int64)
    n_k = n_d = 0
    for p in range(P):
        f, l = pair_flow[p], pair_link[p]
        if done[f]:
            link_bytes[l] += left[f]
            dropped[n_d] = l
            n_d += 1
        else:
            keep_flow[n_k] = new_index[f]
            keep_link[n_k] = l
            n_k += 1
    return keep_flow[:n_k].copy(), keep_link[:n_k].copy(), dropped[:n_d].copy()


if njit is not None:
    _csr = njit(cache=True)(_csr)
    _fill = njit(cache=True)(_fill)
    _fill_flows = njit(cache=True)(_fill_flows)
    _rates_compiled = njit(cache=True)(_rates_compiled)
    _component = njit(cache=True)(_component)
    _update_compiled = njit(cache=True)(_update_compiled)
    _touched_compiled = njit(cache=True)(_touched_compiled)
    _drop_compiled = njit(cache=True)(_drop_compiled)
    COMPILED = True
else:                                    # pragma: no cover - depends on the environment
    COMPILED = False


def rates(flow_of_pair: np.ndarray, link_of_pair: np.ndarray, capacity: np.ndarray, n_flows: int,
          weight_of_pair: np.ndarray | None = None) -> np.ndarray:
    """:func:`max_min_rates`, compiled when numba is installed."""
    if COMPILED:
        weights = np.ones(flow_of_pair.size) if weight_of_pair is None else weight_of_pair
        return _rates_compiled(flow_of_pair.astype(np.int64, copy=False), link_of_pair.astype(np.int64, copy=False),
                               np.asarray(weights, dtype=np.float64), capacity.astype(np.float64, copy=False),
                               int(n_flows))
    return max_min_rates(flow_of_pair, link_of_pair, capacity, n_flows, weight_of_pair)


def touched_flows(seeds: np.ndarray, flow_of_pair: np.ndarray, link_of_pair: np.ndarray, n_flows: int,
                  n_links: int) -> np.ndarray:
    """A boolean mask of the flows connected to ``seeds`` (flow indices) through shared links: the
    union of their components of the flow-link graph."""
    seeds = np.asarray(seeds, dtype=np.int64)
    if COMPILED:
        return _touched_compiled(seeds, flow_of_pair.astype(np.int64, copy=False),
                                 link_of_pair.astype(np.int64, copy=False), int(n_flows), int(n_links))
    return _touched_numpy(seeds, flow_of_pair, link_of_pair, n_flows, n_links)


def drop_flows(done: np.ndarray, left: np.ndarray, pair_flow: np.ndarray, pair_link: np.ndarray,
               link_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Remove the flows ``done`` (a mask) from the flow-link pairs, crediting each one's ``left``
    bytes to its links' ``link_bytes`` (in place): (pair flows renumbered, pair links, the links of
    the dropped flows)."""
    if COMPILED:
        return _drop_compiled(done, left, pair_flow, pair_link, link_bytes)
    keep = ~done
    new_index = np.cumsum(keep) - 1
    pair_keep = keep[pair_flow]
    if left.any():
        link_bytes += np.bincount(pair_link, weights=left[pair_flow], minlength=link_bytes.size)
    return new_index[pair_flow[pair_keep]], pair_link[pair_keep], pair_link[~pair_keep]


def update_rates(flow_of_pair: np.ndarray, link_of_pair: np.ndarray, capacity: np.ndarray, rates: np.ndarray,
                 seeds: np.ndarray, limit: int) -> int:
    """Recompute in place the max-min rates of the flows connected to ``seeds`` (flow indices: the
    flows that started, and those sharing a link with a flow that ended); the other flows' rates
    stand. When more than ``limit`` flows are connected, every rate is recomputed. Returns how
    many were."""
    seeds = np.asarray(seeds, dtype=np.int64)
    n = rates.size
    if COMPILED:
        return int(_update_compiled(flow_of_pair.astype(np.int64, copy=False), link_of_pair.astype(np.int64, copy=False),
                                    capacity.astype(np.float64, copy=False), rates, seeds, int(limit)))
    touched = touched_flows(seeds, flow_of_pair, link_of_pair, n, capacity.size)
    count = int(touched.sum())
    if count > limit:
        rates[:] = max_min_rates(flow_of_pair, link_of_pair, capacity, n)
        return n
    pairs = touched[flow_of_pair]
    local = np.cumsum(touched) - 1
    rates[touched] = max_min_rates(local[flow_of_pair[pairs]], link_of_pair[pairs], capacity, count)
    return count


__all__ = ["COMPILED", "drop_flows", "max_min_rates", "rates", "touched_flows", "update_rates"]
