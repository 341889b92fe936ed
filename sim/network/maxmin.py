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
round the bottleneck links taken from an indexed heap of link shares, and each frozen flow's links once),
which :func:`rates` uses. They agree to rounding (a property test). Cost: O(rounds x pairs) for
numpy, O(pairs log links) compiled, where rounds is the number of distinct bottleneck levels.

The fabric refills only the flows whose rates an arrival or a departure may change, and none when
the links that froze each flow show that no other rate can change (:mod:`sim.network.refill`,
:func:`sim.network.flowcore.rate_unchanged`): both fillings name, for every flow, the link that froze
it (its bottleneck).
"""
from __future__ import annotations

import numpy as np

from .jit import LEAF, njit              # numba, or None: the numpy versions below are the fallback


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


def _heap_less(key, a, b):
    """Whether link ``a`` comes before link ``b``: the lower share, then the lower link (the order
    of ``(share, link)`` tuples)."""
    return key[a] < key[b] or (key[a] == key[b] and a < b)


def _heap_up(heap, pos, key, i):
    """Move the entry at ``i`` of the indexed binary heap up to its place."""
    l = heap[i]
    while i > 0:
        parent = (i - 1) >> 1
        p = heap[parent]
        if not _heap_less(key, l, p):
            break
        heap[i] = p
        pos[p] = i
        i = parent
    heap[i] = l
    pos[l] = i


def _heap_down(heap, pos, key, i, size):
    """Move the entry at ``i`` of the indexed binary heap (of ``size`` entries) down to its place."""
    l = heap[i]
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        c = heap[child]
        if child + 1 < size and _heap_less(key, heap[child + 1], c):
            child += 1
            c = heap[child]
        if not _heap_less(key, c, l):
            break
        heap[i] = c
        pos[c] = i
        i = child
    heap[i] = l
    pos[l] = i


def _heap_remove(heap, pos, key, l, size):
    """Take link ``l`` out of the heap of ``size`` entries; returns the new size."""
    i = pos[l]
    pos[l] = -1
    size -= 1
    if i == size:
        return size
    last = heap[size]
    heap[i] = last
    pos[last] = i
    if i > 0 and _heap_less(key, last, heap[(i - 1) >> 1]):
        _heap_up(heap, pos, key, i)
    else:
        _heap_down(heap, pos, key, i, size)
    return size


def _fill(flow_of_pair, link_of_pair, weight_of_pair, capacity, rates, by_link_ptr, by_link, by_flow_ptr, by_flow,
          links, frozen_by):
    """Progressive filling of the flows on ``links`` (a closed set: every flow on them uses only
    links in it), writing their ``rates``. The links are kept in an indexed binary heap ordered by
    (key, link), one entry per link, where a link's key is at most its share (capacity left /
    weight of its unfrozen pairs): shares only rise as flows freeze, so a key is brought up to date
    only when its link reaches the top (and sinks if it rose); a share that rounding lowers moves
    up at once. A round takes out the bottleneck links (every share within 1e-12 of the lowest, in
    (share, link) order), freezes their flows at that share and takes those flows' rates off the
    other links they cross; ``frozen_by[f]`` gets the link that froze flow f (its bottleneck: full,
    and no flow on it is faster). O(pairs + heap moves x log links); links that never reach the top cost
    no heap move. (A heap of (share, link) tuples with stale entries gave the same rates, bit for
    bit, 1.3-1.7x slower on snapshots of skewed and one-plane all-to-alls.)"""
    L = capacity.size
    count = np.zeros(L, dtype=np.int64)              # unfrozen pairs on the link
    users = np.zeros(L)                              # their weight
    remaining = np.zeros(L)
    key = np.zeros(L)                                # share: remaining / users
    heap = np.empty(links.size, dtype=np.int64)
    pos = np.full(L, -1, dtype=np.int64)             # a link's place in the heap, -1 when out
    size = 0
    for l in links:
        count[l] = by_link_ptr[l + 1] - by_link_ptr[l]
        w = 0.0
        for q in range(by_link_ptr[l], by_link_ptr[l + 1]):
            w += weight_of_pair[by_link[q]]
        users[l] = w
        remaining[l] = capacity[l]
        key[l] = remaining[l] / users[l]
        heap[size] = l
        pos[l] = size
        size += 1
    for i in range(size // 2 - 1, -1, -1):
        _heap_down(heap, pos, key, i, size)
    frozen = np.zeros(rates.size, dtype=np.bool_)
    newly = np.empty(rates.size, dtype=np.int64)
    bottlenecks = np.empty(L, dtype=np.int64)
    touched = np.empty(L, dtype=np.int64)
    stamp = np.zeros(L, dtype=np.int64)              # the round a link was last touched in
    rnd = 0
    while size > 0:
        l = heap[0]
        if count[l] == 0:                             # every flow on it froze in an earlier round
            size = _heap_remove(heap, pos, key, l, size)
            continue
        share = remaining[l] / users[l]
        if share > key[l]:                            # its share rose since it was placed: sink it
            key[l] = share
            _heap_down(heap, pos, key, 0, size)
            continue
        rnd += 1
        step = share
        threshold = step * (1 + 1e-12) + 1e-300
        n_b = 0
        while size > 0 and key[heap[0]] <= threshold:
            l = heap[0]
            if count[l] > 0:
                share = remaining[l] / users[l]
                if share > key[l]:
                    key[l] = share
                    _heap_down(heap, pos, key, 0, size)
                    continue
                bottlenecks[n_b] = l
                n_b += 1
            size = _heap_remove(heap, pos, key, l, size)
        n_new = 0
        for i in range(n_b):
            l = bottlenecks[i]
            for q in range(by_link_ptr[l], by_link_ptr[l + 1]):
                f = flow_of_pair[by_link[q]]
                if not frozen[f]:
                    frozen[f] = True
                    rates[f] = step
                    frozen_by[f] = l
                    newly[n_new] = f
                    n_new += 1
        n_t = 0
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
                if stamp[l] != rnd:
                    stamp[l] = rnd
                    touched[n_t] = l
                    n_t += 1
        for i in range(n_t):       # shares only rise (their keys are raised when they reach the top),
            l = touched[i]         # but rounding may lower one a little: move that one up now
            if pos[l] >= 0 and count[l] > 0:
                share = remaining[l] / users[l]
                if share < key[l]:
                    key[l] = share
                    _heap_up(heap, pos, key, pos[l])


def _fill_flows(flow_of_pair, link_of_pair, weight_of_pair, capacity, rates, by_link_ptr, by_link, by_flow_ptr,
                by_flow, flows, frozen_by):
    """The same progressive filling as :func:`_fill` for the closed set ``flows``, with a heap of
    flows instead of links: each unfrozen flow keeps its tightest link share (``tight``, its key in
    an indexed binary heap ordered by (share, flow)) and that link; a round freezes the flows at the
    lowest share, takes their rates off their links, and recomputes only the flows whose tightest
    link was one of those (shares never fall, so no other flow's can change); ``frozen_by[f]``: the
    tightest link of flow f when it froze. Faster than a heap of links when a few flows (bundles)
    cross many links each. (A heap of (share, flow) tuples with stale entries gave the same rates,
    bit for bit, 10-16% slower on the live DeepSeek-V3 step's whole refills.)"""
    L = capacity.size
    users = np.zeros(L)
    remaining = np.zeros(L)
    for f in flows:
        for q in range(by_flow_ptr[f], by_flow_ptr[f + 1]):
            p = by_flow[q]
            l = link_of_pair[p]
            remaining[l] = capacity[l]
            users[l] += weight_of_pair[p]
    n = rates.size
    tight = np.full(n, np.inf)
    argmin = np.full(n, -1, dtype=np.int64)
    frozen = np.ones(n, dtype=np.bool_)
    heap = np.empty(flows.size, dtype=np.int64)
    pos = np.full(n, -1, dtype=np.int64)             # a flow's place in the heap, -1 when out
    size = 0
    for f in flows:
        frozen[f] = False
        t, a = np.inf, -1
        for q in range(by_flow_ptr[f], by_flow_ptr[f + 1]):
            l = link_of_pair[by_flow[q]]
            share = remaining[l] / users[l]
            if share < t:
                t, a = share, l
        tight[f], argmin[f] = t, a
        heap[size] = f
        pos[f] = size
        size += 1
    for i in range(size // 2 - 1, -1, -1):
        _heap_down(heap, pos, tight, i, size)
    newly = np.empty(n, dtype=np.int64)
    changed = np.empty(L, dtype=np.int64)
    mark = np.zeros(L, dtype=np.int64)
    rnd = 0
    while size > 0:
        rnd += 1
        step = tight[heap[0]]
        threshold = step * (1 + 1e-12) + 1e-300
        n_new = 0
        while size > 0 and tight[heap[0]] <= threshold:
            g = heap[0]
            frozen[g] = True
            newly[n_new] = g
            n_new += 1
            size = _heap_remove(heap, pos, tight, g, size)
        n_changed = 0
        for j in range(n_new):
            g = newly[j]
            rates[g] = step
            frozen_by[g] = argmin[g]
            for q in range(by_flow_ptr[g], by_flow_ptr[g + 1]):
                p = by_flow[q]
                l = link_of_pair[p]
                users[l] -= weight_of_pair[p]
                remaining[l] -= step * weight_of_pair[p]     # below 0 by rounding only where every
                if mark[l] != rnd:                           # flow froze: never read again
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
                if t != tight[g]:                      # shares rise; rounding may lower one a little:
                    tight[g] = t                       # down, then up, finds its place either way
                    _heap_down(heap, pos, tight, pos[g], size)
                    _heap_up(heap, pos, tight, pos[g])


WIDE_FLOW = 32   # a flow over more links than this (a bundle): fill with a heap of flows (see _fill_flows)


def _rates_compiled(flow_of_pair, link_of_pair, weight_of_pair, capacity, n_flows):
    rates = np.full(n_flows, np.inf)
    if n_flows == 0 or flow_of_pair.size == 0:
        return rates
    by_link_ptr, by_link = _csr(link_of_pair, capacity.size)
    by_flow_ptr, by_flow = _csr(flow_of_pair, n_flows)
    links = np.flatnonzero(by_link_ptr[1:] > by_link_ptr[:-1])
    frozen_by = np.empty(n_flows, dtype=np.int64)
    if np.diff(by_flow_ptr).max() > WIDE_FLOW:
        _fill_flows(flow_of_pair, link_of_pair, weight_of_pair, capacity, rates, by_link_ptr, by_link, by_flow_ptr,
                    by_flow, np.unique(flow_of_pair), frozen_by)
    else:
        _fill(flow_of_pair, link_of_pair, weight_of_pair, capacity, rates, by_link_ptr, by_link, by_flow_ptr, by_flow,
              links, frozen_by)
    return rates


if njit is not None:
    _csr = njit(cache=True)(_csr)
    _heap_less = njit(**LEAF)(_heap_less)
    _heap_up = njit(**LEAF)(_heap_up)
    _heap_down = njit(**LEAF)(_heap_down)
    _heap_remove = njit(**LEAF)(_heap_remove)
    _fill = njit(cache=True)(_fill)
    _fill_flows = njit(cache=True)(_fill_flows)
    _rates_compiled = njit(cache=True)(_rates_compiled)
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


__all__ = ["COMPILED", "max_min_rates", "rates"]
