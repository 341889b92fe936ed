"""The compiled progressive fillings and :func:`fill`, which chooses among them.

Each computes the allocation of :func:`~sim.network.fairshare.oracle.max_min_rates` (to rounding;
a property test) for a closed set of flows (every flow on their links is one of them), writes
their rates and, for every flow, the link that froze it (its bottleneck: full, and no flow on it is
faster), which the incremental refill (:mod:`.refill`) and the bottleneck test
(:func:`~sim.network.fairshare.step.rate_unchanged`) read.

* :func:`fill_links`: a heap of links by share; O(pairs + heap moves x log links).
* :func:`fill_flows`: a heap of flows by their tightest link share; faster when a few flows
  (bundles) cross many links each.
* :func:`~sim.network.fairshare.scan.fill_scan`: the rounds of :func:`fill_flows` found by scans,
  for the few distinct levels of a bundle's refill; gives up after a bound.

:func:`fill` is the one place the method is chosen: a set holding a flow over more than
``WIDE_FLOW`` links is filled by scans, then, if they give up, by the heap of flows; any other by
the heap of links. :func:`rates` is the same filling for pairs in any order (the compiled twin of
the oracle).
"""
from __future__ import annotations

import numpy as np

from ..jit import njit
from .heap import group_by, heap_down, heap_remove, heap_up, heapify
from .oracle import max_min_rates
from .records import Index, Pairs
from .scan import fill_scan

WIDE_FLOW = 32   # a flow over more links than this (a bundle): fill by scans or a heap of flows


def fill_links(pairs, index, capacity, links, rates, frozen_by):
    """Progressive filling of the flows on ``links`` (a closed set: every flow on them uses only
    links in it; ``pairs`` indexed by ``index``), writing their ``rates``. The links are kept in an indexed binary heap ordered by
    (key, link), one entry per link, where a link's key is at most its share (capacity left /
    weight of its unfrozen pairs): shares only rise as flows freeze, so a key is brought up to date
    only when its link reaches the top (and sinks if it rose); a share that rounding lowers moves
    up at once. A round takes out the bottleneck links (every share within 1e-12 of the lowest, in
    (share, link) order), freezes their flows at that share and takes those flows' rates off the
    other links they cross; ``frozen_by[f]`` gets the link that froze flow f (its bottleneck: full,
    and no flow on it is faster). O(pairs + heap moves x log links); links that never reach the top cost
    no heap move. (A heap of (share, link) tuples with stale entries gave the same rates, bit for
    bit, 1.3-1.7x slower on snapshots of skewed and one-plane all-to-alls.)"""
    flow_of_pair, link_of_pair, weight_of_pair = pairs
    by_link_ptr, by_link, by_flow_ptr, by_flow = index
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
    heapify(heap, pos, key, size)
    frozen = np.zeros(rates.size, dtype=np.bool_)
    newly = np.empty(rates.size, dtype=np.int64)
    bottlenecks = np.empty(L, dtype=np.int64)
    touched = np.empty(L, dtype=np.int64)
    stamp = np.zeros(L, dtype=np.int64)              # the round a link was last touched in
    rnd = 0
    while size > 0:
        l = heap[0]
        if count[l] == 0:                             # every flow on it froze in an earlier round
            size = heap_remove(heap, pos, key, l, size)
            continue
        share = remaining[l] / users[l]
        if share > key[l]:                            # its share rose since it was placed: sink it
            key[l] = share
            heap_down(heap, pos, key, 0, size)
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
                    heap_down(heap, pos, key, 0, size)
                    continue
                bottlenecks[n_b] = l
                n_b += 1
            size = heap_remove(heap, pos, key, l, size)
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
                    heap_up(heap, pos, key, pos[l])


def fill_flows(pairs, index, capacity, flows, rates, frozen_by):
    """The same progressive filling as :func:`fill_links` for the closed set ``flows``, with a heap of
    flows instead of links: each unfrozen flow keeps its tightest link share (``tight``, its key in
    an indexed binary heap ordered by (share, flow)) and that link; a round freezes the flows at the
    lowest share, takes their rates off their links, and recomputes only the flows whose tightest
    link was one of those (shares never fall, so no other flow's can change); ``frozen_by[f]``: the
    tightest link of flow f when it froze. Faster than a heap of links when a few flows (bundles)
    cross many links each. (A heap of (share, flow) tuples with stale entries gave the same rates,
    bit for bit, 10-16% slower on the live DeepSeek-V3 step's whole refills.)"""
    flow_of_pair, link_of_pair, weight_of_pair = pairs
    by_link_ptr, by_link, by_flow_ptr, by_flow = index
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
    heapify(heap, pos, tight, size)
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
            size = heap_remove(heap, pos, tight, g, size)
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
                    heap_down(heap, pos, tight, pos[g], size)
                    heap_up(heap, pos, tight, pos[g])


def fill(pairs, flow_ptr, capacity, rates, frozen_by):
    """Progressive filling of the flows 0..n-1 (n = ``flow_ptr.size - 1``), whose pairs are grouped
    by flow (flow f's: ``flow_ptr[f]``..``flow_ptr[f + 1]``-1), on links of bytes/s ``capacity``
    (each one used by some pair): writes ``rates[:n]`` and ``frozen_by[:n]``. A set with a flow over
    more than ``WIDE_FLOW`` links is filled by scans (:func:`~sim.network.fairshare.scan.fill_scan`),
    or, when they give up, by the heap of flows (:func:`fill_flows`); any other by the heap of
    links (:func:`fill_links`)."""
    n = flow_ptr.size - 1
    widest = 0
    for f in range(n):
        widest = max(widest, flow_ptr[f + 1] - flow_ptr[f])
    if widest > WIDE_FLOW and fill_scan(pairs, flow_ptr, capacity, rates, frozen_by):
        return
    link_ptr, by_link = group_by(pairs.link[:flow_ptr[n]], capacity.size)
    index = Index(link_ptr, by_link, flow_ptr, np.arange(flow_ptr[n]))
    if widest > WIDE_FLOW:
        fill_flows(pairs, index, capacity, np.arange(n), rates, frozen_by)
    else:
        fill_links(pairs, index, capacity, np.arange(capacity.size), rates, frozen_by)


if njit is not None:
    fill_links = njit(cache=True)(fill_links)
    fill_flows = njit(cache=True)(fill_flows)
    fill = njit(cache=True)(fill)
    COMPILED = True
else:                                    # pragma: no cover - depends on the environment
    COMPILED = False


def rates(flow_of_pair: np.ndarray, link_of_pair: np.ndarray, capacity: np.ndarray, n_flows: int,
          weight_of_pair: np.ndarray | None = None) -> np.ndarray:
    """:func:`~sim.network.fairshare.oracle.max_min_rates` by :func:`fill` (pairs in any order:
    grouped by flow, links renumbered to those in use first) when numba is installed, else the
    oracle itself."""
    if not COMPILED:
        return max_min_rates(flow_of_pair, link_of_pair, capacity, n_flows, weight_of_pair)
    out = np.full(n_flows, np.inf)
    if n_flows == 0 or flow_of_pair.size == 0:
        return out
    flow_of_pair = np.asarray(flow_of_pair, dtype=np.int64)
    order = np.argsort(flow_of_pair, kind="stable")
    used, local = np.unique(np.asarray(link_of_pair, dtype=np.int64)[order], return_inverse=True)
    weights = np.ones(flow_of_pair.size) if weight_of_pair is None else np.asarray(weight_of_pair, dtype=float)
    flow_ptr = np.searchsorted(flow_of_pair[order], np.arange(n_flows + 1)).astype(np.int64)
    pairs = Pairs(flow_of_pair[order], local.astype(np.int64), weights[order])
    fill(pairs, flow_ptr, np.asarray(capacity, dtype=np.float64)[used], out, np.empty(n_flows, dtype=np.int64))
    return out


__all__ = ["COMPILED", "WIDE_FLOW", "fill", "fill_flows", "fill_links", "rates"]
