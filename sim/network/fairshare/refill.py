"""Refilling the fabric's rates after an event, when the bottleneck test
(:func:`~sim.network.fairshare.step.rate_unchanged`) cannot keep them: which flows to recompute, and the
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
(:func:`refill_all`). The result is the max-min allocation, which is unique: a whole refill's, up to rounding (sums are taken
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
the pairs are grouped by link only for a heap filling (:func:`~sim.network.fairshare.filling.fill`): a set
holding a bundle is filled by scans (:mod:`.scan`), which need no such index.
"""
from __future__ import annotations

import numpy as np

from ..jit import LEAF, njit
from .filling import WIDE_FLOW, fill
from .heap import group_by
from .records import Pairs
from .tallies import credit

MAX_FILLINGS = 3   # fillings of the refill set before refilling every flow instead (see refill_affected)
IN_SET = 2 ** 50   # below -tick: marks a link of the set S (refill_affected)
PROBED = 2 ** 51   # below -tick: marks a link counted by first_members


def refill(flows, pairs, links, scratch, at, first_new):
    """New max-min rates after the flows ``at.kept``..``at.n``-1 (pairs from ``first_new``)
    arrived and flows left the links ``scratch.dirty[:at.n_dirty]``: ``at.incremental``, the set
    S of the module docstring (unless the new flows are more than half); else, or when S gives
    way, every flow. Keeps the links' rates, peak utilisation and the bottleneck bookkeeping (see
    :mod:`.step`). ``at.tick``: a value ``scratch.gen`` does not hold yet (S marks links with
    ``-tick``, ``-tick - IN_SET`` and ``-tick - PROBED``, the index of every pair with ``tick``).
    Returns the number of flows refilled."""
    n, kept = at.n, at.kept
    if at.incremental and kept > 0 and 2 * (n - kept) <= n:
        refilled = refill_affected(flows, pairs, links, scratch, at, first_new)
        if refilled >= 0:
            return refilled
    refill_all(flows, pairs, links, at, first_new, index(pairs, scratch, at))
    return n


def index(pairs, scratch, at):
    """The links in use renumbered 0..U-1 (``scratch.gen``/``local``: per-link scratch, ``at.tick``
    a value ``gen`` does not hold yet, so every work array is sized by the links in use, not the
    topology's) and where each flow's pairs start (:func:`flow_starts`). Returns (used: the
    topology's number of each local link, pl: each pair's local link, flow_ptr)."""
    n_pairs, tick = at.n_pairs, at.tick
    gen, local = scratch.gen, scratch.local
    used = np.empty(n_pairs, dtype=np.int64)
    U = 0
    pl = np.empty(n_pairs, dtype=np.int64)      # pairs' links, renumbered
    for p in range(n_pairs):
        l = pairs.link[p]
        if gen[l] != tick:
            gen[l] = tick
            local[l] = U
            used[U] = l
            U += 1
        pl[p] = local[l]
    return used[:U], pl, flow_starts(at.n, n_pairs, pairs.flow)


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


def group_by_bottleneck(bottleneck, froze, scratch, kept, mark):
    """The flows 0..kept-1 grouped by the link that froze them (``bottleneck``), in one pass
    (``froze[l]``: how many link l froze, so each group's place is known when its link first comes
    up). Each such link l gets a slot ``scratch.local[l]`` (``scratch.gen[l] = mark``). Returns
    (start, frozen): the flows slot s froze are ``frozen[start[s]:start[s] + froze[l]]``, in
    increasing order."""
    gen, local = scratch.gen, scratch.local
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
            total += froze[l]
            nb += 1
        s = local[l]
        frozen[at[s]] = g
        at[s] += 1
    return start, frozen


def first_members(pairs, froze, scratch, at, first_new, probe):
    """How many flows the set holds before any filling, at least: the new flows (pairs
    ``first_new``..``at.n_pairs``-1) and the flows frozen (``froze``: per link) by a link they
    cross or a departed flow left (``scratch.dirty``). A flow has one bottleneck, so the counts of
    distinct links add up (a counted link is marked ``scratch.gen[l] = probe``)."""
    gen = scratch.gen
    count = at.n - at.kept
    for q in range(first_new, at.n_pairs):
        l = pairs.link[q]
        if gen[l] != probe:
            gen[l] = probe
            count += froze[l]
    for i in range(at.n_dirty):
        l = scratch.dirty[i]
        if gen[l] != probe:
            gen[l] = probe
            count += froze[l]
    return count


def take_frozen(l, groups, froze, local, members, n_f):
    """Add to the set (``members``: its flows, of which ``n_f`` so far, and a flag per flow) the
    earlier flows that link ``l`` froze (its group of :func:`group_by_bottleneck`, ``groups``);
    returns the set's new size."""
    count = froze[l]
    if count == 0:
        return n_f                                   # it froze none (and has no group)
    start, frozen = groups
    flows, flow_in = members
    s = start[local[l]]
    for k in range(s, s + count):
        g = frozen[k]
        if not flow_in[g]:
            flow_in[g] = True
            flows[n_f] = g
            n_f += 1
    return n_f


def fill_set(pairs, local, first, last, n_f, sub_cap):
    """Progressive filling of the set's ``n_f`` flows alone (member j's pairs are
    ``first[j]``..``last[j]``-1), on its links (link l is the set's link ``local[l]``) of
    capacities ``sub_cap`` (what the other flows leave). Returns (rates, the set's link that froze
    each flow, and the set's pairs: per member ``flow_ptr``, their links and weights)."""
    n_sub = 0
    for j in range(n_f):
        n_sub += last[j] - first[j]
    s_flow = np.empty(n_sub, dtype=np.int64)     # the set's pairs, flows and links renumbered
    s_link = np.empty(n_sub, dtype=np.int64)
    s_weight = np.empty(n_sub)
    s_flow_ptr = np.empty(n_f + 1, dtype=np.int64)
    k = 0
    for j in range(n_f):
        s_flow_ptr[j] = k
        for q in range(first[j], last[j]):
            s_flow[k] = j
            s_link[k] = local[pairs.link[q]]
            s_weight[k] = pairs.weight[q]
            k += 1
    s_flow_ptr[n_f] = k
    s_rate = np.full(n_f, np.inf)
    s_frozen_by = np.empty(n_f, dtype=np.int64)
    fill(Pairs(s_flow, s_link, s_weight), s_flow_ptr, sub_cap, s_rate, s_frozen_by)
    return s_rate, s_frozen_by, s_flow_ptr, s_link, s_weight


def settle(links, l):
    """After a refill, link l's rate: a rate below 1e-9 of its capacity is the rounding of many
    additions and removals (set to 0); its peak utilisation is raised to the new rate's."""
    if links.rate[l] < 1e-9 * links.capacity[l]:
        links.rate[l] = 0.0
    utilisation = links.rate[l] / links.capacity[l]
    if utilisation > links.peak[l]:
        links.peak[l] = utilisation


def refill_affected(flows, pairs, links, scratch, at, first_new):
    """Refill the set S of flows whose rates may change (module docstring): the new flows, the
    flows frozen by a link a departed flow left (``scratch.dirty``), and, for every link of a
    member, the flows that link froze; filled on what the other flows leave of their links; a flow
    outside S faster than a member on the member's new bottleneck joins S and the filling runs
    again. Returns the number of flows refilled, or -1, changing nothing, once S is over half the
    flows (checked first from the links of the new and departed flows alone,
    :func:`first_members`, before any array is built), still grows after ``MAX_FILLINGS``
    fillings, or a bundle (over more than ``WIDE_FLOW`` links) of S finds a faster flow outside S
    on its bottleneck. (A new bundle over hundreds of links, filled alone on what the others leave,
    finds a few faster flows on its bottleneck each time: it took up to 100 fillings in the live
    DeepSeek-V3 step before the bound, and 2,112 of the 2,126 sets of that step whose bundle met
    one gave way later anyway. One growth is the most a skewed all-to-all's refills needed on the
    snapshots measured.)

    No index of every pair is built: the flows each link froze come from one pass over the flows
    (:func:`group_by_bottleneck`), the members' pairs from one sequential pass (pairs are in flow
    order), and the others' load on the set's links from one pass over the pairs per filling. A
    link that froze a flow is marked ``gen[l] = -tick`` (``local[l]``: its group), a link of the
    set ``gen[l] = -tick - IN_SET`` (``local[l]``: its place among the set's links), a link counted
    by :func:`first_members` ``gen[l] = -tick - PROBED``: values no tick reaches."""
    n, kept, n_pairs, now = at.n, at.kept, at.n_pairs, at.now
    gen, local = scratch.gen, scratch.local
    pf, pair_link, pair_weight = pairs.flow[:n_pairs], pairs.link, pairs.weight
    rate, froze = flows.rate, links.froze
    mark = -at.tick
    limit = n // 2
    if first_members(pairs, froze, scratch, at, first_new, mark - PROBED) > limit:
        return -1                                    # over half before any filling: spare the set's arrays
    in_set = mark - IN_SET
    groups = group_by_bottleneck(flows.bottleneck, froze, scratch, kept, mark)
    flow_ptr = flow_starts(n, n_pairs, pf)           # flow f's pairs: flow_ptr[f]..flow_ptr[f + 1]-1
    members = (np.empty(n, dtype=np.int64), np.zeros(n, dtype=np.bool_))    # the set's flows, and a flag per flow
    member, flow_in = members
    first = np.empty(n, dtype=np.int64)              # member j's pairs: first[j]..last[j]-1
    last = np.empty(n, dtype=np.int64)
    set_links = np.empty(n_pairs, dtype=np.int64)    # the set's links, in order
    n_f = n_l = 0
    for f in range(kept, n):
        flow_in[f] = True
        member[n_f] = f
        n_f += 1
    for i in range(at.n_dirty):                      # flows whose bottleneck a departed flow left
        n_f = take_frozen(scratch.dirty[i], groups, froze, local, members, n_f)
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
            f = member[head]
            a = flow_ptr[f]
            b = flow_ptr[f + 1]
            first[head] = a
            last[head] = b
            head += 1
            for q in range(a, b):
                l = pair_link[q]
                if gen[l] == in_set:
                    continue
                n_f = take_frozen(l, groups, froze, local, members, n_f)
                gen[l] = in_set
                local[l] = n_l
                set_links[n_l] = l
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
            sub_cap[i] = max(links.capacity[set_links[i]] - other[i], 0.0)
        s_rate, s_frozen_by, s_flow_ptr, s_link, s_weight = fill_set(pairs, local, first, last, n_f, sub_cap[:n_l])
        faster = False                               # a bottleneck: no flow outside the set faster there
        for j in range(n_f):
            if other_max[s_frozen_by[j]] > s_rate[j] * (1 + 1e-12):
                if last[j] - first[j] > WIDE_FLOW:
                    return -1                        # a bundle: S would grow a link at a time
                faster = True
        if not faster:
            break
        on_ptr, on = group_by(local[pair_link[hits[:n_hits]]], n_l)   # those pairs by the set's link, in order
        for j in range(n_f):
            b = s_frozen_by[j]
            bound = s_rate[j] * (1 + 1e-12)
            if other_max[b] > bound:
                for r in range(on_ptr[b], on_ptr[b + 1]):
                    g = pf[hits[on[r]]]
                    if not flow_in[g] and rate[g] > bound:
                        flow_in[g] = True
                        member[n_f] = g
                        n_f += 1
    for i in range(n_l):                             # their rates change: tallies up to now first
        credit(links, set_links[i], now)
    for j in range(n_f):
        f = member[j]
        if f < kept:
            froze[flows.bottleneck[f]] -= 1
    for q in range(first_new, n_pairs):
        links.users[pair_link[q]] += 1
    for i in range(n_l):
        l = set_links[i]
        links.rate[l] = other[i]
        links.fastest[l] = other_max[i]
    for j in range(n_f):
        f = member[j]
        r = s_rate[j]
        rate[f] = r
        flows.bottleneck[f] = set_links[s_frozen_by[j]]
        froze[flows.bottleneck[f]] += 1
        for q in range(s_flow_ptr[j], s_flow_ptr[j + 1]):
            l = set_links[s_link[q]]
            links.rate[l] += r * s_weight[q]
            if r > links.fastest[l]:
                links.fastest[l] = r
    for i in range(n_l):
        settle(links, set_links[i])
    return n_f


def refill_all(flows, pairs, links, at, first_new, renumbered):
    """Refill every flow: their old rates leave their links, the filling gives them new ones
    (:func:`~sim.network.fairshare.filling.fill`) on the links in use (``renumbered``, from
    :func:`index`). Pairs are in flow order, so each pass over them is one sequential loop."""
    n, kept, n_pairs, now = at.n, at.kept, at.n_pairs, at.now
    used, pl, flow_ptr = renumbered
    pf, pair_link, pair_weight = pairs.flow[:n_pairs], pairs.link, pairs.weight
    rate, bottleneck, froze = flows.rate, flows.bottleneck, links.froze
    U = used.size
    cap = np.empty(U)
    for u in range(U):
        cap[u] = links.capacity[used[u]]
    for u in range(U):                                   # their rates change: tallies up to now first
        credit(links, used[u], now)
    for p in range(first_new):                           # the old rates leave their links
        links.rate[used[pl[p]]] -= rate[pf[p]] * pair_weight[p]
    for f in range(n):
        if f < kept:
            froze[bottleneck[f]] -= 1
        rate[f] = np.inf
    frozen_by = np.empty(n, dtype=np.int64)
    fill(Pairs(pf, pl, pair_weight), flow_ptr, cap, rate[:n], frozen_by)
    for u in range(U):
        links.fastest[used[u]] = 0.0
    for q in range(first_new, n_pairs):
        links.users[pair_link[q]] += 1
    for f in range(n):
        bottleneck[f] = used[frozen_by[f]]
        froze[bottleneck[f]] += 1
    for p in range(n_pairs):
        l = used[pl[p]]
        r = rate[pf[p]]
        links.rate[l] += r * pair_weight[p]
        if r > links.fastest[l]:
            links.fastest[l] = r
    for u in range(U):
        settle(links, used[u])


if njit is not None:
    index = njit(cache=True)(index)
    flow_starts = njit(cache=True)(flow_starts)
    group_by_bottleneck = njit(cache=True)(group_by_bottleneck)
    settle = njit(**LEAF)(settle)
    take_frozen = njit(**LEAF)(take_frozen)
    first_members = njit(**LEAF)(first_members)
    fill_set = njit(cache=True)(fill_set)
    refill_affected = njit(cache=True)(refill_affected)
    refill_all = njit(cache=True)(refill_all)
    refill = njit(cache=True)(refill)

__all__ = ["IN_SET", "MAX_FILLINGS", "PROBED", "first_members", "fill_set", "flow_starts", "group_by_bottleneck",
           "index", "refill", "refill_affected", "refill_all", "settle", "take_frozen"]
