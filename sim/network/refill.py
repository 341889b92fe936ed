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
still grows after ``MAX_FILLINGS`` fillings, or a bundle in it (a flow over more than
``WIDE_FLOW`` links) finds a faster flow on its bottleneck, every flow is refilled
(:func:`refill_all`). The
result is the max-min allocation, which is unique: a whole refill's, up to rounding (sums are taken
in another order; tests hold both to the numpy oracle on random arrivals and departures).

S is usually much smaller than the connected component of the flow-link graph (the flows that
share a link with the changed ones, directly or through others), which the fabric refilled before:
a departure from a crowded link changes the flows that link froze and, through them, few others
(on snapshots of a skewed EP256 all-to-all: 1,120 flows at the median, against 3,500 in the
component and 14,400 active).

What it costs. Finding S needs the flows each link froze and, for the others' load, the pairs on
S's links. S is found without an index of every pair by link (:func:`refill_affected`): one pass
over the flows groups them by bottleneck, one over the pairs per filling sums the others' load. On
100 snapshots of a skewed EP256 all-to-all that made refills 15-19% faster, with the same rates
bit for bit. A whole refill renumbers the links in use (:func:`index`: two passes over the pairs);
the pairs are grouped by link only for a heap filling (:func:`_fill_grouped`): a set holding a
bundle is filled by scans (:mod:`sim.network.fillscan`), which need no such index.
"""
from __future__ import annotations

import numpy as np

from .fillscan import fill_scan
from .jit import LEAF, njit
from .maxmin import WIDE_FLOW, _csr, _fill, _fill_flows
from .tallies import credit

MAX_FILLINGS = 3   # fillings of the refill set before refilling every flow instead (see refill_affected)


def refill(n, kept, n_pairs, first_new, pair_flow, pair_link, pair_weight, capacity, rate, dirty, n_dirty, link_rate,
           peak, incremental, gen, local, tick, bottleneck, link_users, link_max, bott_count, now, link_bytes,
           link_busy, since):
    """New max-min rates after the flows ``kept``..n-1 (pairs from ``first_new``) arrived and flows
    left the links ``dirty``: ``incremental``, the set S of the module docstring (unless the new
    flows are more than half); else, or when S gives way, every flow. Keeps the links' rates, peak
    utilisation and the bottleneck bookkeeping (see :mod:`sim.network.flowcore`).
    ``gen``/``local``: per-link scratch; ``tick``: a value ``gen`` does not hold yet (S marks
    links with ``-tick``, ``-tick - 2**50`` and ``-tick - 2**51``, the index of every pair with
    ``tick``). Returns the number of flows refilled."""
    pf = pair_flow[:n_pairs]
    if incremental and kept > 0 and 2 * (n - kept) <= n:
        refilled = refill_affected(n, kept, n_pairs, first_new, pf, pair_link, pair_weight, capacity, rate, dirty,
                                   n_dirty, gen, local, -tick, link_rate, peak, bottleneck, link_users, link_max,
                                   bott_count, now, link_bytes, link_busy, since)
        if refilled >= 0:
            return refilled
    used, U, pl, by_flow_ptr = index(n, n_pairs, pf, pair_link, gen, local, tick)
    refill_all(n, kept, n_pairs, first_new, pf, pl, pair_link, pair_weight, capacity, used, U, by_flow_ptr, rate,
               link_rate, peak, bottleneck, link_users, link_max, bott_count, now, link_bytes, link_busy, since)
    return n


def index(n, n_pairs, pf, pair_link, gen, local, tick):
    """The links in use renumbered 0..U-1 (``gen``/``local``: per-link scratch, ``tick`` a value
    ``gen`` does not hold yet, so every work array is sized by the links in use, not the
    topology's) and where each flow's pairs start (:func:`flow_starts`). Returns (used: the
    topology's number of each local link, U, pl: each pair's local link, by_flow_ptr)."""
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
    return used, U, pl, flow_starts(n, n_pairs, pf)


def flow_starts(n, n_pairs, pf):
    """Where each of the flows 0..n-1 starts among the pairs (in flow order, ``pf`` their
    flows): flow f's pairs are ``ptr[f]``..``ptr[f + 1]``-1, ``ptr[n]`` = ``n_pairs``; one
    sequential pass."""
    ptr = np.empty(n + 1, dtype=np.int64)
    f = 0
    for p in range(n_pairs):
        while f <= pf[p]:
            ptr[f] = p
            f += 1
    while f <= n:
        ptr[f] = n_pairs
        f += 1
    return ptr


def _frozen_by(kept, bottleneck, bott_count, gen, local, mark):
    """The flows 0..kept-1 grouped by the link that froze them, in one pass (``bott_count[l]``: how
    many link l froze, so each group's place is known when its link first comes up). Each such
    link l gets a slot ``local[l]`` (``gen[l] = mark``). Returns (start, frozen): the flows slot s
    froze are ``frozen[start[s]:start[s] + bott_count[l]]``, in increasing order."""
    start = np.empty(kept, dtype=np.int64)
    at = np.empty(kept, dtype=np.int64)
    frozen = np.empty(kept, dtype=np.int64)
    nb = 0
    total = 0
    for g in range(kept):
        l = bottleneck[g]
        if gen[l] != mark:
            gen[l] = mark
            local[l] = nb
            start[nb] = total
            at[nb] = total
            total += bott_count[l]
            nb += 1
        s = local[l]
        frozen[at[s]] = g
        at[s] += 1
    return start, frozen


def _first_members(n_new, first_new, n_pairs, pair_link, dirty, n_dirty, bott_count, gen, probe):
    """How many flows the set holds before any filling, at least: the new flows (pairs
    ``first_new``..``n_pairs``-1) and the flows frozen by a link they cross or a departed flow left
    (``dirty``). A flow has one bottleneck, so the counts of distinct links add up (a counted link
    is marked ``gen[l] = probe``)."""
    count = n_new
    for q in range(first_new, n_pairs):
        l = pair_link[q]
        if gen[l] != probe:
            gen[l] = probe
            count += bott_count[l]
    for i in range(n_dirty):
        l = dirty[i]
        if gen[l] != probe:
            gen[l] = probe
            count += bott_count[l]
    return count


def _take_frozen(l, start, frozen, bott_count, local, flow_in, flows, n_f):
    """Add to the set (``flows[:n_f]``, marked in ``flow_in``) the earlier flows that link ``l``
    froze (its group of :func:`_frozen_by`); returns the set's new size."""
    count = bott_count[l]
    if count == 0:
        return n_f                                   # it froze none (and has no group)
    s = start[local[l]]
    for k in range(s, s + count):
        g = frozen[k]
        if not flow_in[g]:
            flow_in[g] = True
            flows[n_f] = g
            n_f += 1
    return n_f


def _fill_set(n_f, n_l, first, last, pair_link, local, sub_cap, pair_weight):
    """Progressive filling of the set's flows alone (member j's pairs are ``first[j]``..``last[j]``-1),
    on its ``n_l`` links (link l is the set's link ``local[l]``) of capacities
    ``sub_cap`` (what the other flows leave). Returns (rates, the set's link that froze each flow,
    and the set's pairs: per member ``flow_ptr``, their links and weights)."""
    n_sub = 0
    widest = 0
    for j in range(n_f):
        width = last[j] - first[j]
        n_sub += width
        widest = max(widest, width)
    s_flow = np.empty(n_sub, dtype=np.int64)     # the set's pairs, flows and links renumbered
    s_link = np.empty(n_sub, dtype=np.int64)
    s_weight = np.empty(n_sub)
    s_flow_ptr = np.empty(n_f + 1, dtype=np.int64)
    k = 0
    for j in range(n_f):
        s_flow_ptr[j] = k
        for q in range(first[j], last[j]):
            s_flow[k] = j
            s_link[k] = local[pair_link[q]]
            s_weight[k] = pair_weight[q]
            k += 1
    s_flow_ptr[n_f] = k
    s_rate = np.full(n_f, np.inf)
    s_frozen_by = np.empty(n_f, dtype=np.int64)
    _fill_grouped(s_flow, s_link, s_weight, sub_cap[:n_l], s_rate, s_flow_ptr, n_f, widest, s_frozen_by)
    return s_rate, s_frozen_by, s_flow_ptr, s_link, s_weight


def _fill_grouped(flow_of_pair, link_of_pair, weight_of_pair, capacity, rates, by_flow_ptr, n, widest, frozen_by):
    """Progressive filling of the flows 0..n-1, whose pairs are grouped by flow (``by_flow_ptr``)
    and whose widest crosses ``widest`` links: a bundle among them, by scans
    (:func:`sim.network.fillscan.fill_scan`; with the heap of flows, :func:`sim.network.maxmin._fill_flows`,
    when it gives up); else with the heap of links (:func:`sim.network.maxmin._fill`)."""
    if widest > WIDE_FLOW and fill_scan(flow_of_pair, link_of_pair, weight_of_pair, capacity, rates, by_flow_ptr, n,
                                        frozen_by):
        return
    by_link_ptr, by_link = _csr(link_of_pair, capacity.size)
    by_flow = np.arange(by_flow_ptr[n])
    if widest > WIDE_FLOW:
        _fill_flows(flow_of_pair, link_of_pair, weight_of_pair, capacity, rates, by_link_ptr, by_link, by_flow_ptr,
                    by_flow, np.arange(n), frozen_by)
    else:
        _fill(flow_of_pair, link_of_pair, weight_of_pair, capacity, rates, by_link_ptr, by_link, by_flow_ptr, by_flow,
              np.arange(capacity.size), frozen_by)


def _settle(l, capacity, link_rate, peak):
    """After a refill, link l's rate: a rate below 1e-9 of its capacity is the rounding of many
    additions and removals (set to 0); its peak utilisation is raised to the new rate's."""
    if link_rate[l] < 1e-9 * capacity[l]:
        link_rate[l] = 0.0
    utilisation = link_rate[l] / capacity[l]
    if utilisation > peak[l]:
        peak[l] = utilisation


def refill_affected(n, kept, n_pairs, first_new, pf, pair_link, pair_weight, capacity, rate, dirty, n_dirty, gen,
                    local, mark, link_rate, peak, bottleneck, link_users, link_max, bott_count, now, link_bytes,
                    link_busy, since):
    """Refill the set S of flows whose rates may change (module docstring): the new flows, the
    flows frozen by a link a departed flow left (``dirty``), and, for every link of a member, the
    flows that link froze; filled on what the other flows leave of their links; a flow outside S
    faster than a member on the member's new bottleneck joins S and the filling runs again.
    Returns the number of flows refilled, or -1, changing nothing, once S is over half the flows
    (checked first from the links of the new and departed flows alone, :func:`_first_members`,
    before any array is built), still grows after ``MAX_FILLINGS`` fillings, or a bundle (over
    more than ``WIDE_FLOW`` links) of S finds a faster flow outside S on its bottleneck. (A new
    bundle over hundreds of links, filled alone on what the others leave, finds a few faster flows
    on its bottleneck each time: it took up to 100 fillings in the live DeepSeek-V3 step before
    the bound, and 2,112 of the 2,126 sets of that step whose bundle met one gave way later
    anyway. One growth is the most a skewed all-to-all's refills needed on the snapshots
    measured.)

    No index of every pair is built: the flows each link froze come from one pass over the flows
    (:func:`_frozen_by`), the members' pairs from one sequential pass (pairs are in flow order),
    and the others' load on the set's links from one pass over the pairs per filling. A link that
    froze a flow is marked ``gen[l] = mark`` (``local[l]``: its group), a link of the set
    ``gen[l] = mark - 2**50`` (``local[l]``: its place among the set's links), a link counted by
    :func:`_first_members` ``gen[l] = mark - 2**51``: values no tick reaches."""
    limit = n // 2
    if _first_members(n - kept, first_new, n_pairs, pair_link, dirty, n_dirty, bott_count, gen,
                      mark - 2 ** 51) > limit:
        return -1                                    # over half before any filling: spare the set's arrays
    in_set = mark - 2 ** 50
    start, frozen = _frozen_by(kept, bottleneck, bott_count, gen, local, mark)
    flow_ptr = flow_starts(n, n_pairs, pf)           # flow f's pairs: flow_ptr[f]..flow_ptr[f + 1]-1
    flows = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)              # member j's pairs: first[j]..last[j]-1
    last = np.empty(n, dtype=np.int64)
    flow_in = np.zeros(n, dtype=np.bool_)
    links = np.empty(n_pairs, dtype=np.int64)        # the set's links, in order
    n_f = n_l = 0
    for f in range(kept, n):
        flow_in[f] = True
        flows[n_f] = f
        n_f += 1
    for i in range(n_dirty):                         # flows whose bottleneck a departed flow left
        n_f = _take_frozen(dirty[i], start, frozen, bott_count, local, flow_in, flows, n_f)
    head = 0
    other = np.empty(n_pairs)                        # per link of the set: load of the flows outside it
    other_max = np.empty(n_pairs)                    # and the fastest of them
    sub_cap = np.empty(n_pairs)
    hits = np.empty(n_pairs, dtype=np.int64)
    for filling in range(MAX_FILLINGS + 1):
        if filling == MAX_FILLINGS:
            return -1                                # still growing: cheaper to refill every flow
        while head < n_f:                            # close the set: the flows a member's links froze
            if n_f > limit:                          # (checked whenever it grew: at the end it is not)
                return -1
            f = flows[head]
            a = flow_ptr[f]
            b = flow_ptr[f + 1]
            first[head] = a
            last[head] = b
            head += 1
            for q in range(a, b):
                l = pair_link[q]
                if gen[l] == in_set:
                    continue
                n_f = _take_frozen(l, start, frozen, bott_count, local, flow_in, flows, n_f)
                gen[l] = in_set
                local[l] = n_l
                links[n_l] = l
                n_l += 1
        for i in range(n_l):
            other[i] = 0.0
            other_max[i] = 0.0
        n_hits = 0
        for p in range(n_pairs):                     # what the others leave of each link
            l = pair_link[p]
            if gen[l] != in_set:
                continue
            hits[n_hits] = p                         # (the pairs on the set's links)
            n_hits += 1
            i = local[l]
            g = pf[p]
            if not flow_in[g]:
                other[i] += rate[g] * pair_weight[p]
                if rate[g] > other_max[i]:
                    other_max[i] = rate[g]
        for i in range(n_l):
            sub_cap[i] = max(capacity[links[i]] - other[i], 0.0)
        s_rate, s_frozen_by, s_flow_ptr, s_link, s_weight = _fill_set(n_f, n_l, first, last, pair_link, local,
                                                                     sub_cap, pair_weight)
        faster = False                               # a bottleneck: no flow outside the set faster there
        for j in range(n_f):
            if other_max[s_frozen_by[j]] > s_rate[j] * (1 + 1e-12):
                if last[j] - first[j] > WIDE_FLOW:
                    return -1                        # a bundle: S would grow a link at a time
                faster = True
        if not faster:
            break
        on_ptr, on = _csr(local[pair_link[hits[:n_hits]]], n_l)   # those pairs by the set's link, in order
        for j in range(n_f):
            b = s_frozen_by[j]
            bound = s_rate[j] * (1 + 1e-12)
            if other_max[b] > bound:
                for r in range(on_ptr[b], on_ptr[b + 1]):
                    g = pf[hits[on[r]]]
                    if not flow_in[g] and rate[g] > bound:
                        flow_in[g] = True
                        flows[n_f] = g
                        n_f += 1
    for i in range(n_l):                             # their rates change: tallies up to now first
        credit(links[i], now, link_rate, link_users, link_bytes, link_busy, since)
    for j in range(n_f):
        f = flows[j]
        if f < kept:
            bott_count[bottleneck[f]] -= 1
    for q in range(first_new, n_pairs):
        link_users[pair_link[q]] += 1
    for i in range(n_l):
        l = links[i]
        link_rate[l] = other[i]
        link_max[l] = other_max[i]
    for j in range(n_f):
        f = flows[j]
        r = s_rate[j]
        rate[f] = r
        bottleneck[f] = links[s_frozen_by[j]]
        bott_count[bottleneck[f]] += 1
        for q in range(s_flow_ptr[j], s_flow_ptr[j + 1]):
            l = links[s_link[q]]
            link_rate[l] += r * s_weight[q]
            if r > link_max[l]:
                link_max[l] = r
    for i in range(n_l):
        _settle(links[i], capacity, link_rate, peak)
    return n_f


def refill_all(n, kept, n_pairs, first_new, pf, pl, pair_link, pair_weight, capacity, used, U, by_flow_ptr, rate,
               link_rate, peak, bottleneck, link_users, link_max, bott_count, now, link_bytes, link_busy, since):
    """Refill every flow: their old rates leave their links, the filling gives them new ones
    (:func:`_fill_grouped`). Pairs are in flow order, so each pass over them is one sequential loop."""
    cap = np.empty(U)
    for u in range(U):
        cap[u] = capacity[used[u]]
    for u in range(U):                                   # their rates change: tallies up to now first
        credit(used[u], now, link_rate, link_users, link_bytes, link_busy, since)
    for p in range(first_new):                           # the old rates leave their links
        link_rate[used[pl[p]]] -= rate[pf[p]] * pair_weight[p]
    widest = 0
    for f in range(n):
        if f < kept:
            bott_count[bottleneck[f]] -= 1
        rate[f] = np.inf
        widest = max(widest, by_flow_ptr[f + 1] - by_flow_ptr[f])
    frozen_by = np.empty(n, dtype=np.int64)
    _fill_grouped(pf, pl, pair_weight, cap, rate, by_flow_ptr, n, widest, frozen_by)
    for u in range(U):
        link_max[used[u]] = 0.0
    for q in range(first_new, n_pairs):
        link_users[pair_link[q]] += 1
    for f in range(n):
        bottleneck[f] = used[frozen_by[f]]
        bott_count[bottleneck[f]] += 1
    for p in range(n_pairs):
        l = used[pl[p]]
        r = rate[pf[p]]
        link_rate[l] += r * pair_weight[p]
        if r > link_max[l]:
            link_max[l] = r
    for u in range(U):
        _settle(used[u], capacity, link_rate, peak)


if njit is not None:
    index = njit(cache=True)(index)
    flow_starts = njit(cache=True)(flow_starts)
    _frozen_by = njit(cache=True)(_frozen_by)
    _settle = njit(**LEAF)(_settle)
    _take_frozen = njit(**LEAF)(_take_frozen)
    _first_members = njit(**LEAF)(_first_members)
    _fill_set = njit(cache=True)(_fill_set)
    _fill_grouped = njit(cache=True)(_fill_grouped)
    refill_affected = njit(cache=True)(refill_affected)
    refill_all = njit(cache=True)(refill_all)
    refill = njit(cache=True)(refill)
