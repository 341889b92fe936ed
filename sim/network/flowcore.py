"""The fabric's arithmetic between two events, as compiled kernels (numba; plain Python, slow but
the same rules, where numba is missing) over the active flows kept in contiguous arrays:

* flows are numbered 0..n-1 in order of arrival, with ``size``, ``remaining`` and ``rate``;
* a flow's (flow, link) pairs are contiguous and in flow order (``pair_flow`` is non-decreasing),
  so every pass over them is sequential in memory; a pair's ``pair_weight`` (1 for a plain flow)
  is how many times the flow's rate it puts on its link (:mod:`sim.network.maxmin`);
* ``link_rate[l]`` is kept up to date as rates change.

Kernels: :func:`advance` drains every flow for ``dt``; :func:`credit` brings a link's bytes and busy
time up to now, before its rate changes (the rate is constant in between);
:func:`drop_finished` removes the flows due now (crediting their last bytes), compacting the arrays
in place and naming the links they leave; :func:`solve` gives the new flows their rates and keeps
every other rate when :func:`rate_unchanged` shows none can change (the bottleneck test below),
else :func:`refill` recomputes the max-min rates of the flows connected to the new flows and to
those links (all flows when more than half are); it keeps the links' rates and peak utilisation and
returns the time to the next completion. The filling itself is :func:`sim.network.maxmin._fill`,
on the links in use renumbered 0..U-1.

Bottleneck bookkeeping (for :func:`rate_unchanged`): ``bottleneck[f]`` is the link that froze flow f
in its last filling; per link, ``bott_count`` counts the flows it froze, ``link_users`` the flows on
it with a rate, and ``link_max`` is at least the fastest of them (exact after a refill; left as an
upper bound when flows end).
"""
from __future__ import annotations

import numpy as np

from .maxmin import WIDE_FLOW, _fill, _fill_flows, njit


def advance(dt, n, rate, remaining):
    """Drain every flow for ``dt`` seconds (the links' tallies are kept by :func:`credit`)."""
    for f in range(n):
        remaining[f] -= rate[f] * dt


def credit(l, now, link_rate, link_users, link_bytes, link_busy, since):
    """Bring link l's tallies up to ``now``: it has carried ``link_rate[l]`` bytes/s, and been busy if
    any flow was on it, since ``since[l]``. Called before its rate or flows change, so each link
    costs one update per change instead of one per pair per event."""
    dt = now - since[l]
    if dt > 0.0:
        if link_users[l] > 0:
            link_bytes[l] += link_rate[l] * dt
            link_busy[l] += dt
        since[l] = now


def credit_all(now, link_rate, link_users, link_bytes, link_busy, since):
    """:func:`credit` every link (to read the tallies mid-run)."""
    for l in range(link_rate.size):
        credit(l, now, link_rate, link_users, link_bytes, link_busy, since)


def drop_finished(n, n_pairs, size, remaining, rate, flow_id, bottleneck, window, pair_flow, pair_link, pair_weight,
                  now, link_bytes, link_busy, since, link_rate, link_users, bott_count, done_out, dirty_out):
    """Remove the flows due now (``remaining <= rate x window``, with a byte of slack): credit the
    bytes each still had to its links (first bringing their tallies to ``now``, :func:`credit`),
    take its rate off them (a link left with no flow carries 0),
    take it out of ``link_users`` (flows per link) and ``bott_count`` (flows per bottleneck link),
    compact the flow and pair arrays in place. Returns (flows left, pairs left, flows done, links
    they left); ``done_out`` gets the done flows' ids (``flow_id``), ``dirty_out`` the links they used."""
    new_index = np.empty(n, dtype=np.int64)
    n_keep = 0
    n_done = 0
    for f in range(n):
        if remaining[f] <= rate[f] * window + 1e-9 * size[f] + 1e-6:
            done_out[n_done] = flow_id[f]
            n_done += 1
            new_index[f] = -1
            bott_count[bottleneck[f]] -= 1
        else:
            new_index[f] = n_keep
            n_keep += 1
    if n_done == 0:
        return n, n_pairs, 0, 0
    k = 0
    n_dirty = 0
    for p in range(n_pairs):
        f, l, w = pair_flow[p], pair_link[p], pair_weight[p]
        g = new_index[f]
        if g < 0:
            credit(l, now, link_rate, link_users, link_bytes, link_busy, since)
            if remaining[f] > 0.0:
                link_bytes[l] += remaining[f] * w
            link_users[l] -= 1
            link_rate[l] = link_rate[l] - rate[f] * w if link_users[l] > 0 else 0.0
            dirty_out[n_dirty] = l
            n_dirty += 1
        else:
            pair_flow[k] = g
            pair_link[k] = l
            pair_weight[k] = w
            k += 1
    for f in range(n):
        g = new_index[f]
        if g >= 0:
            size[g] = size[f]
            remaining[g] = remaining[f]
            rate[g] = rate[f]
            flow_id[g] = flow_id[f]
            bottleneck[g] = bottleneck[f]
    return n_keep, k, n_done, n_dirty


def rate_unchanged(n, kept, n_pairs, first_new, pair_flow, pair_link, pair_weight, capacity, rate, dirty, n_dirty,
                   link_rate, bottleneck, link_users, link_max, bott_count, saved, now, link_bytes, link_busy, since):
    """The fast path of :func:`solve`: whether the flows that ended (on the links ``dirty``) and
    the new flows (``kept``..n-1, whose pairs start at ``first_new``) leave every other flow's rate
    as it is; if so, give each new flow its rate and return True, else change nothing.

    By the bottleneck property (Bertsekas and Gallager, *Data Networks*, 6.5.2), rates are max-min
    fair when every flow has a bottleneck: a full link on which no flow is faster (per unit of
    weight). Each flow keeps the link that froze it (``bottleneck``; ``bott_count[l]``: how many
    flows link l froze). So the old rates stay max-min fair after
    * departures, when no remaining flow was frozen by a link the departed flows left (the others'
      bottlenecks are untouched: still full, and no flow on them got faster);
    * an arrival f crossing no such link, at the least spare capacity per unit of weight over its
      links, ``r = min_l (capacity_l - load_l) / w_fl`` (> 0), provided no flow on the link of that
      minimum is faster than r (``link_max[l]``: an upper bound of the rates on l): that link is
      then f's bottleneck, and the others' are untouched.
    New flows are tried one after the other (each sees the loads of those before it); if one
    fails, the loads are restored bit for bit from ``saved`` and :func:`solve` refills (which sets
    ``link_max`` anew on every link of the new flows)."""
    for i in range(n_dirty):
        if bott_count[dirty[i]] > 0:
            return False
    ok = True
    p = first_new
    f = kept
    while f < n:
        start = p
        while p < n_pairs and pair_flow[p] == f:
            p += 1
        r = np.inf
        arg = -1
        for q in range(start, p):
            l = pair_link[q]
            if bott_count[l] > 0:
                r = -1.0
                break
            spare = (capacity[l] - link_rate[l]) / pair_weight[q]
            if spare < r:
                r = spare
                arg = l
        if not (0.0 < r < np.inf) or (link_users[arg] > 0 and link_max[arg] > r):
            ok = False
            p = start
            break
        for q in range(start, p):
            l = pair_link[q]
            credit(l, now, link_rate, link_users, link_bytes, link_busy, since)
            saved[q - first_new] = link_rate[l]
            link_rate[l] += r * pair_weight[q]
            if link_users[l] == 0 or r > link_max[l]:
                link_max[l] = r
            link_users[l] += 1
        rate[f] = r
        bottleneck[f] = arg
        bott_count[arg] += 1
        f += 1
    if not ok:
        for q in range(p - 1, first_new - 1, -1):        # undo, last first: the loads before
            l = pair_link[q]
            link_rate[l] = saved[q - first_new]
            link_users[l] -= 1
        for g in range(kept, f):
            bott_count[bottleneck[g]] -= 1
    return ok


def solve(n, kept, n_pairs, pair_flow, pair_link, pair_weight, capacity, rate, remaining, dirty, n_dirty, link_rate,
          peak, incremental, gen, local, tick, bottleneck, link_users, link_max, bott_count, now, link_bytes, link_busy,
          since):
    """Rates after the flows ``kept``..n-1 arrived and flows left the links ``dirty``: returns
    (seconds to the next completion, whether no earlier flow's rate had to change).

    ``incremental``: first :func:`rate_unchanged` (departures and arrivals that leave every other
    rate as it is, decided from the per-link counts, without looking at the other flows), else refill
    the flows connected to the new flows and to the links ``dirty`` (all of them when more than half
    of the flows are); not ``incremental``: refill every flow. Keeps the links' rates, their peak
    utilisation and the bottleneck bookkeeping (``bottleneck``, ``link_users``, ``link_max``,
    ``bott_count``) up to date. Before a refill the links in use are renumbered 0..U-1
    (``gen``/``local``: per-link scratch, ``tick`` a value ``gen`` does not hold yet), so every work
    array is sized by the links in use, not the topology's."""
    if n == 0:
        return np.inf, True
    first_new = n_pairs                         # the new flows' pairs are the last ones
    while first_new > 0 and pair_flow[first_new - 1] >= kept:
        first_new -= 1
    unchanged = incremental and rate_unchanged(n, kept, n_pairs, first_new, pair_flow, pair_link, pair_weight, capacity,
                                               rate, dirty, n_dirty, link_rate, bottleneck, link_users, link_max,
                                               bott_count, np.empty(n_pairs - first_new), now, link_bytes, link_busy,
                                               since)
    if unchanged:
        for q in range(first_new, n_pairs):
            l = pair_link[q]
            utilisation = link_rate[l] / capacity[l]
            if utilisation > peak[l]:
                peak[l] = utilisation
    else:
        refill(n, kept, n_pairs, first_new, pair_flow, pair_link, pair_weight, capacity, rate, dirty, n_dirty,
               link_rate, peak, incremental, gen, local, tick, bottleneck, link_users, link_max, bott_count, now,
               link_bytes, link_busy, since)
    nearest = np.inf
    for f in range(n):
        t = remaining[f] / rate[f]
        if t < nearest:
            nearest = t
    return nearest, unchanged


def refill(n, kept, n_pairs, first_new, pair_flow, pair_link, pair_weight, capacity, rate, dirty, n_dirty, link_rate,
           peak, incremental, gen, local, tick, bottleneck, link_users, link_max, bott_count, now, link_bytes,
           link_busy, since):
    """The progressive filling of :func:`solve`'s flows to refill (see there), with its bookkeeping."""
    pf = pair_flow[:n_pairs]
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
    cap = np.empty(U)
    for u in range(U):
        cap[u] = capacity[used[u]]
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
    by_flow = np.arange(n_pairs)
    whole = not incremental or kept == 0 or 2 * (n - kept) > n
    flows = np.empty(n, dtype=np.int64)
    links = np.empty(U, dtype=np.int64)
    n_f = n_l = 0
    if not whole:
        flow_in = np.zeros(n, dtype=np.bool_)
        link_in = np.zeros(U, dtype=np.bool_)
        for f in range(kept, n):
            flow_in[f] = True
            flows[n_f] = f
            n_f += 1
        for i in range(n_dirty):
            l = dirty[i]
            if gen[l] != tick:
                continue                                 # no active flow uses it any more
            u = local[l]
            for q in range(by_link_ptr[u], by_link_ptr[u + 1]):
                f = pf[by_link[q]]
                if not flow_in[f]:
                    flow_in[f] = True
                    flows[n_f] = f
                    n_f += 1
        head = 0
        limit = n // 2
        while head < n_f and n_f <= limit:               # the component; stop once it is most flows
            f = flows[head]
            head += 1
            for q in range(by_flow_ptr[f], by_flow_ptr[f + 1]):
                u = pl[q]
                if link_in[u]:
                    continue
                link_in[u] = True
                links[n_l] = u
                n_l += 1
                for r in range(by_link_ptr[u], by_link_ptr[u + 1]):
                    g = pf[by_link[r]]
                    if not flow_in[g]:
                        flow_in[g] = True
                        flows[n_f] = g
                        n_f += 1
        whole = n_f > limit
    if whole:
        n_f, n_l = n, U
        for f in range(n):
            flows[f] = f
        for u in range(U):
            links[u] = u
    flows = flows[:n_f]
    links = links[:n_l]
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
        l = used[u]
        if link_rate[l] < 1e-9 * capacity[l]:
            link_rate[l] = 0.0                          # rounding of many additions and removals
        utilisation = link_rate[l] / capacity[l]
        if utilisation > peak[l]:
            peak[l] = utilisation


if njit is not None:
    advance = njit(cache=True)(advance)
    credit = njit(cache=True, inline='always')(credit)
    credit_all = njit(cache=True)(credit_all)
    drop_finished = njit(cache=True)(drop_finished)
    rate_unchanged = njit(cache=True)(rate_unchanged)
    refill = njit(cache=True)(refill)
    solve = njit(cache=True)(solve)
