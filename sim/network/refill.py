"""Refilling the fabric's rates after an event, when the bottleneck test
(:func:`sim.network.flowcore.rate_unchanged`) cannot keep them: which flows to recompute, and the
progressive filling of just those. Compiled with numba where installed (plain Python, the same
rules, where not).

Which flows. Rates are max-min fair exactly when every flow has a bottleneck: a full link on which
no flow is faster (Bertsekas and Gallager, *Data Networks*, 6.5.2). The fabric keeps, for every
flow, the link that froze it in its last filling (``bottleneck``). A flow outside a set S keeps a
max-min fair rate, unchanged, if no flow of S crosses its bottleneck and no departed flow left it:
that link then carries the same flows at the same rates, still full, and none of them faster. So S
starts with the new flows and the flows whose bottleneck a departed flow left, and takes in, for
every link of a member, the flows that link froze. The members are filled progressively on what
the others leave of their links (capacity minus the others' load), which gives every member a
bottleneck among its own; it is one for the whole allocation unless a flow outside S is faster
there (by more than 1e-12 relative, the filling's own tolerance for ties): such a flow joins S
(with the flows its links froze) and S is filled again. Once S is more than half of the flows, or
still grows after ``MAX_FILLINGS`` fillings, every flow is refilled (:func:`refill_all`). The
result is the max-min allocation, which is unique: a whole refill's, up to rounding (sums are taken
in another order; tests hold both to the numpy oracle on random arrivals and departures).

S is usually much smaller than the connected component of the flow-link graph (the flows that
share a link with the changed ones, directly or through others), which the fabric refilled before:
a departure from a crowded link changes the flows that link froze and, through them, few others
(on snapshots of a skewed EP256 all-to-all: 1,120 flows at the median, against 3,500 in the
component and 14,400 active).
"""
from __future__ import annotations

import numpy as np

from .maxmin import WIDE_FLOW, _csr, _fill, _fill_flows, njit
from .tallies import credit

MAX_FILLINGS = 3   # fillings of the refill set before refilling every flow instead (see refill_affected)


def refill(n, kept, n_pairs, first_new, pair_flow, pair_link, pair_weight, capacity, rate, dirty, n_dirty, link_rate,
           peak, incremental, gen, local, tick, bottleneck, link_users, link_max, bott_count, now, link_bytes,
           link_busy, since):
    """New max-min rates after the flows ``kept``..n-1 (pairs from ``first_new``) arrived and flows
    left the links ``dirty``: ``incremental``, the set S of the module docstring (unless the new
    flows are more than half); else, or when S is more than half, every flow. Keeps the links'
    rates, peak utilisation and the bottleneck bookkeeping (see :mod:`sim.network.flowcore`).
    Returns the number of flows refilled."""
    pf = pair_flow[:n_pairs]
    used, U, pl, by_link_ptr, by_link, by_flow_ptr = index(n, n_pairs, pf, pair_link, gen, local, tick)
    if incremental and kept > 0 and 2 * (n - kept) <= n:
        refilled = refill_affected(n, kept, n_pairs, first_new, pf, pl, pair_weight, capacity, used, U, by_link_ptr,
                                   by_link, by_flow_ptr, rate, dirty, n_dirty, gen, local, tick, link_rate, peak,
                                   bottleneck, link_users, link_max, bott_count, now, link_bytes, link_busy, since)
        if refilled >= 0:
            return refilled
    refill_all(n, kept, n_pairs, first_new, pf, pl, pair_link, pair_weight, capacity, used, U, by_link_ptr, by_link,
               by_flow_ptr, rate, link_rate, peak, bottleneck, link_users, link_max, bott_count, now, link_bytes,
               link_busy, since)
    return n


def index(n, n_pairs, pf, pair_link, gen, local, tick):
    """The links in use renumbered 0..U-1 (``gen``/``local``: per-link scratch, ``tick`` a value
    ``gen`` does not hold yet, so every work array is sized by the links in use, not the
    topology's) and the pairs grouped by link and by flow (counting sorts). Returns (used: the
    topology's number of each local link, U, pl: each pair's local link, by_link_ptr, by_link,
    by_flow_ptr)."""
    used = np.empty(n_pairs, dtype=np.int64)
    U = 0
    pl = np.empty(n_pairs, dtype=np.int64)      # pairs' links, renumbered
    for p in range(n_pairs):
        l = pair_link[p]
        if gen[l] != tick:
            gen[l] = tick
            local[l] = U
            used[U] = l
            U += 1
        pl[p] = local[l]
    by_link_ptr = np.zeros(U + 1, dtype=np.int64)           # pairs by link (counting sort)
    for p in range(n_pairs):
        by_link_ptr[pl[p] + 1] += 1
    for u in range(U):
        by_link_ptr[u + 1] += by_link_ptr[u]
    at = by_link_ptr[:-1].copy()
    by_link = np.empty(n_pairs, dtype=np.int64)
    for p in range(n_pairs):
        u = pl[p]
        by_link[at[u]] = p
        at[u] += 1
    by_flow_ptr = np.zeros(n + 1, dtype=np.int64)           # pairs are in flow order
    for p in range(n_pairs):
        by_flow_ptr[pf[p] + 1] += 1
    for f in range(n):
        by_flow_ptr[f + 1] += by_flow_ptr[f]
    return used, U, pl, by_link_ptr, by_link, by_flow_ptr


def _take_frozen(u, l, kept, pf, by_link_ptr, by_link, bottleneck, flow_in, flows, n_f):
    """Add to the set (``flows[:n_f]``, marked in ``flow_in``) the earlier flows that link ``l``
    (local number ``u``) froze; returns the set's new size."""
    for q in range(by_link_ptr[u], by_link_ptr[u + 1]):
        g = pf[by_link[q]]
        if g < kept and not flow_in[g] and bottleneck[g] == l:
            flow_in[g] = True
            flows[n_f] = g
            n_f += 1
    return n_f


def _fill_set(flows, n_f, n_l, sub_of, sub_cap, by_flow_ptr, pl, pair_weight):
    """Progressive filling of the set's flows ``flows[:n_f]`` alone, on its ``n_l`` links (local
    link u is the set's link ``sub_of[u]``) of capacities ``sub_cap`` (what the other flows leave).
    Returns (rates, the set's link that froze each flow, and the set's pairs: per flow ``flow_ptr``,
    their links and weights)."""
    n_sub = 0
    widest = 0
    for j in range(n_f):
        f = flows[j]
        width = by_flow_ptr[f + 1] - by_flow_ptr[f]
        n_sub += width
        widest = max(widest, width)
    s_flow = np.empty(n_sub, dtype=np.int64)     # the set's pairs, flows and links renumbered
    s_link = np.empty(n_sub, dtype=np.int64)
    s_weight = np.empty(n_sub)
    s_flow_ptr = np.empty(n_f + 1, dtype=np.int64)
    k = 0
    for j in range(n_f):
        f = flows[j]
        s_flow_ptr[j] = k
        for q in range(by_flow_ptr[f], by_flow_ptr[f + 1]):
            s_flow[k] = j
            s_link[k] = sub_of[pl[q]]
            s_weight[k] = pair_weight[q]
            k += 1
    s_flow_ptr[n_f] = k
    s_link_ptr, s_by_link = _csr(s_link, n_l)
    s_rate = np.full(n_f, np.inf)
    s_frozen_by = np.empty(n_f, dtype=np.int64)
    s_links = np.arange(n_l)
    if widest > WIDE_FLOW:
        _fill_flows(s_flow, s_link, s_weight, sub_cap[:n_l], s_rate, s_link_ptr, s_by_link, s_flow_ptr,
                    np.arange(n_sub), np.arange(n_f), s_frozen_by)
    else:
        _fill(s_flow, s_link, s_weight, sub_cap[:n_l], s_rate, s_link_ptr, s_by_link, s_flow_ptr, np.arange(n_sub),
              s_links, s_frozen_by)
    return s_rate, s_frozen_by, s_flow_ptr, s_link, s_weight


def _settle(l, capacity, link_rate, peak):
    """After a refill, link l's rate: a rate below 1e-9 of its capacity is the rounding of many
    additions and removals (set to 0); its peak utilisation is raised to the new rate's."""
    if link_rate[l] < 1e-9 * capacity[l]:
        link_rate[l] = 0.0
    utilisation = link_rate[l] / capacity[l]
    if utilisation > peak[l]:
        peak[l] = utilisation


def refill_affected(n, kept, n_pairs, first_new, pf, pl, pair_weight, capacity, used, U, by_link_ptr, by_link,
                    by_flow_ptr, rate, dirty, n_dirty, gen, local, tick, link_rate, peak, bottleneck, link_users,
                    link_max, bott_count, now, link_bytes, link_busy, since):
    """Refill the set S of flows whose rates may change (module docstring): the new flows, the
    flows frozen by a link a departed flow left (``dirty``), and, for every link of a member, the
    flows that link froze; filled on what the other flows leave of their links; a flow outside S
    faster than a member on the member's new bottleneck joins S and the filling runs again.
    Returns the number of flows refilled, or -1, changing nothing, once S is over half the flows or
    still grows after ``MAX_FILLINGS`` fillings. (A new bundle over hundreds of links, filled alone
    on what the others leave, finds a few faster flows on its bottleneck each time: it took up to
    100 fillings in the live DeepSeek-V3 step before this bound. One growth is the most a skewed
    all-to-all's refills needed on the snapshots measured.)"""
    limit = n // 2
    flows = np.empty(n, dtype=np.int64)
    flow_in = np.zeros(n, dtype=np.bool_)
    links = np.empty(U, dtype=np.int64)              # the links of those flows (renumbered), in order
    link_in = np.zeros(U, dtype=np.bool_)
    n_f = n_l = 0
    for f in range(kept, n):
        flow_in[f] = True
        flows[n_f] = f
        n_f += 1
    for i in range(n_dirty):                         # flows whose bottleneck a departed flow left
        l = dirty[i]
        if gen[l] != tick:
            continue                                 # no active flow uses it any more
        n_f = _take_frozen(local[l], l, kept, pf, by_link_ptr, by_link, bottleneck, flow_in, flows, n_f)
    head = 0
    other = np.empty(U)                              # per link of the set: load of the flows outside it
    other_max = np.empty(U)                          # and the fastest of them
    sub_cap = np.empty(U)
    sub_of = np.empty(U, dtype=np.int64)             # a link's place among the set's links
    for filling in range(MAX_FILLINGS + 1):
        if filling == MAX_FILLINGS:
            return -1                                # still growing: cheaper to refill every flow
        while head < n_f:                            # close the set: the flows a member's links froze
            if n_f > limit:                          # (checked whenever it grew: at the end it is not)
                return -1
            f = flows[head]
            head += 1
            for q in range(by_flow_ptr[f], by_flow_ptr[f + 1]):
                u = pl[q]
                if link_in[u]:
                    continue
                link_in[u] = True
                links[n_l] = u
                n_l += 1
                n_f = _take_frozen(u, used[u], kept, pf, by_link_ptr, by_link, bottleneck, flow_in, flows, n_f)
        for i in range(n_l):                         # what the others leave of each link
            u = links[i]
            sub_of[u] = i
            s = 0.0
            m = 0.0
            for r in range(by_link_ptr[u], by_link_ptr[u + 1]):
                p = by_link[r]
                g = pf[p]
                if not flow_in[g]:
                    s += rate[g] * pair_weight[p]
                    if rate[g] > m:
                        m = rate[g]
            other[i] = s
            other_max[i] = m
            sub_cap[i] = max(capacity[used[u]] - s, 0.0)
        s_rate, s_frozen_by, s_flow_ptr, s_link, s_weight = _fill_set(flows, n_f, n_l, sub_of, sub_cap, by_flow_ptr,
                                                                     pl, pair_weight)
        grew = False
        for j in range(n_f):                         # a bottleneck: no flow outside the set faster there
            b = s_frozen_by[j]
            bound = s_rate[j] * (1 + 1e-12)
            if other_max[b] > bound:
                u = links[b]
                for r in range(by_link_ptr[u], by_link_ptr[u + 1]):
                    g = pf[by_link[r]]
                    if not flow_in[g] and rate[g] > bound:
                        flow_in[g] = True
                        flows[n_f] = g
                        n_f += 1
                        grew = True
        if not grew:
            break
    for i in range(n_l):                             # their rates change: tallies up to now first
        credit(used[links[i]], now, link_rate, link_users, link_bytes, link_busy, since)
    for j in range(n_f):
        f = flows[j]
        if f < kept:
            bott_count[bottleneck[f]] -= 1
    for q in range(first_new, n_pairs):
        link_users[used[pl[q]]] += 1
    for i in range(n_l):
        l = used[links[i]]
        link_rate[l] = other[i]
        link_max[l] = other_max[i]
    for j in range(n_f):
        f = flows[j]
        r = s_rate[j]
        rate[f] = r
        bottleneck[f] = used[links[s_frozen_by[j]]]
        bott_count[bottleneck[f]] += 1
        for q in range(s_flow_ptr[j], s_flow_ptr[j + 1]):
            l = used[links[s_link[q]]]
            link_rate[l] += r * s_weight[q]
            if r > link_max[l]:
                link_max[l] = r
    for i in range(n_l):
        _settle(used[links[i]], capacity, link_rate, peak)
    return n_f


def refill_all(n, kept, n_pairs, first_new, pf, pl, pair_link, pair_weight, capacity, used, U, by_link_ptr, by_link,
               by_flow_ptr, rate, link_rate, peak, bottleneck, link_users, link_max, bott_count, now, link_bytes,
               link_busy, since):
    """Refill every flow: their old rates leave their links, the filling gives them new ones."""
    cap = np.empty(U)
    for u in range(U):
        cap[u] = capacity[used[u]]
    flows = np.arange(n)
    links = np.arange(U)
    by_flow = np.arange(n_pairs)                         # pairs are in flow order
    for u in links:                                      # their rates change: tallies up to now first
        credit(used[u], now, link_rate, link_users, link_bytes, link_busy, since)
    widest = 0
    for f in flows:                                      # their old rates leave their links
        if f < kept:
            for q in range(by_flow_ptr[f], by_flow_ptr[f + 1]):
                link_rate[used[pl[q]]] -= rate[f] * pair_weight[q]
            bott_count[bottleneck[f]] -= 1
        rate[f] = np.inf
        widest = max(widest, by_flow_ptr[f + 1] - by_flow_ptr[f])
    frozen_by = np.empty(n, dtype=np.int64)
    if widest > WIDE_FLOW:                               # a bundle over many links: a heap of flows
        _fill_flows(pf, pl, pair_weight, cap, rate, by_link_ptr, by_link, by_flow_ptr, by_flow, flows, frozen_by)
    else:
        _fill(pf, pl, pair_weight, cap, rate, by_link_ptr, by_link, by_flow_ptr, by_flow, links, frozen_by)
    for u in links:
        link_max[used[u]] = 0.0
    for q in range(first_new, n_pairs):
        link_users[pair_link[q]] += 1
    for f in flows:
        bottleneck[f] = used[frozen_by[f]]
        bott_count[bottleneck[f]] += 1
        for q in range(by_flow_ptr[f], by_flow_ptr[f + 1]):
            l = used[pl[q]]
            link_rate[l] += rate[f] * pair_weight[q]
            if rate[f] > link_max[l]:
                link_max[l] = rate[f]
    for u in links:
        _settle(used[u], capacity, link_rate, peak)


if njit is not None:
    index = njit(cache=True)(index)
    _settle = njit(cache=True, inline='always')(_settle)
    _take_frozen = njit(cache=True)(_take_frozen)
    _fill_set = njit(cache=True)(_fill_set)
    refill_affected = njit(cache=True)(refill_affected)
    refill_all = njit(cache=True)(refill_all)
    refill = njit(cache=True)(refill)
