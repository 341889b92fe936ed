"""The fabric's arithmetic between two events, as compiled kernels (numba; plain Python, slow but
the same rules, where numba is missing) over the active flows kept in contiguous arrays:

* flows are numbered 0..n-1 in order of arrival, with ``size``, ``remaining`` and ``rate``;
* a flow's (flow, link) pairs are contiguous and in flow order (``pair_flow`` is non-decreasing),
  so every pass over them is sequential in memory; a pair's ``pair_weight`` (1 for a plain flow)
  is how many times the flow's rate it puts on its link (:mod:`sim.network.maxmin`);
* ``link_rate[l]`` is kept up to date as rates change.

Kernels: :func:`advance` drains every flow for ``dt``; :func:`drop_finished` removes the flows
due now (crediting their last bytes to their links' tallies, :mod:`sim.network.tallies`),
compacting the arrays in place and naming the links they leave; :func:`solve` gives the new flows
their rates and keeps every other rate when :func:`rate_unchanged` shows none can change (the
bottleneck test below), else :func:`sim.network.refill.refill` recomputes the rates of the flows
that may change; it keeps the links' rates and peak utilisation and returns the time to the next
completion.

Bottleneck bookkeeping (for :func:`rate_unchanged`): ``bottleneck[f]`` is the link that froze flow f
in its last filling; per link, ``bott_count`` counts the flows it froze, ``link_users`` the flows on
it with a rate, and ``link_max`` is at least the fastest of them (exact after a refill; left as an
upper bound when flows end).
"""
from __future__ import annotations

import numpy as np

from .jit import LEAF, njit
from .refill import refill
from .tallies import credit


def advance(dt, n, rate, remaining):
    """Drain every flow for ``dt`` seconds (the links' tallies are kept by :func:`credit`)."""
    for f in range(n):
        remaining[f] -= rate[f] * dt


def drop_finished(n, n_pairs, size, remaining, rate, flow_id, bottleneck, window, pair_flow, pair_link, pair_weight,
                  now, link_bytes, link_busy, since, link_rate, link_users, bott_count, done_out, dirty_out):
    """Remove the flows due now (``remaining <= rate x window``, with a byte of slack): credit the
    bytes each still had to its links (first bringing their tallies to ``now``, :func:`credit`),
    take its rate off them (a link left with no flow carries 0),
    take it out of ``link_users`` (flows per link) and ``bott_count`` (flows per bottleneck link),
    compact the flow and pair arrays in place. Returns (flows left, pairs left, flows done, links
    they left); ``done_out`` gets the done flows' ids (``flow_id``), ``dirty_out`` the links they used.

    The pairs are in flow order, so each done flow's pairs are found by bisection and the kept
    flows' pairs move as blocks (:func:`_move_pairs`): the pairs before the first done flow's stay
    where they are. (A live step's all-to-all ends alone among thousands of pairs; moving the blocks
    with plain copies, not pair by pair, took a removal from 22 to 13 us on snapshots of one.)"""
    done = np.empty(n, dtype=np.int64)          # the done flows, in order
    n_done = 0
    for f in range(n):
        if remaining[f] <= rate[f] * window + 1e-9 * size[f] + 1e-6:
            done_out[n_done] = flow_id[f]
            done[n_done] = f
            n_done += 1
            bott_count[bottleneck[f]] -= 1
    if n_done == 0:
        return n, n_pairs, 0, 0
    k = _first_pair(pair_flow, 0, n_pairs, done[0])
    p = k                                       # the pairs before p are placed (at 0..k-1)
    n_dirty = 0
    for i in range(n_done):
        f = done[i]
        start = _first_pair(pair_flow, p, n_pairs, f)
        k = _move_pairs(pair_flow, pair_link, pair_weight, p, start, k, i)
        p = _first_pair(pair_flow, start, n_pairs, f + 1)
        for q in range(start, p):
            l, w = pair_link[q], pair_weight[q]
            credit(l, now, link_rate, link_users, link_bytes, link_busy, since)
            if remaining[f] > 0.0:
                link_bytes[l] += remaining[f] * w
            link_users[l] -= 1
            link_rate[l] = link_rate[l] - rate[f] * w if link_users[l] > 0 else 0.0
            dirty_out[n_dirty] = l
            n_dirty += 1
    k = _move_pairs(pair_flow, pair_link, pair_weight, p, n_pairs, k, n_done)
    g = done[0]
    i = 1
    for f in range(g + 1, n):
        if i < n_done and done[i] == f:
            i += 1
        else:
            size[g] = size[f]
            remaining[g] = remaining[f]
            rate[g] = rate[f]
            flow_id[g] = flow_id[f]
            bottleneck[g] = bottleneck[f]
            g += 1
    return n - n_done, k, n_done, n_dirty


def _first_pair(pair_flow, lo, hi, f):
    """The first pair in ``lo``..``hi``-1 of flow ``f`` or a later flow (``hi`` if none): bisection,
    as pairs are in flow order."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if pair_flow[mid] < f:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _move_pairs(pair_flow, pair_link, pair_weight, start, end, to, fewer):
    """Move the kept flows' pairs ``start``..``end``-1 to ``to`` (<= ``start``), their flows numbered
    ``fewer`` lower (the done flows before them); returns where the next pairs go. Each array is
    copied through views from index 0 up: loops the compiler can vectorise (an index counted from
    0 needs no check for negative values)."""
    m = end - start
    _copy(pair_link[start:end], pair_link[to:to + m])
    _copy(pair_weight[start:end], pair_weight[to:to + m])
    src, dst = pair_flow[start:end], pair_flow[to:to + m]
    for j in range(m):
        dst[j] = src[j] - fewer
    return to + m


def _copy(src, dst):
    """``dst[:] = src`` from the first element up (``dst`` may overlap ``src`` from below)."""
    for j in range(src.size):
        dst[j] = src[j]


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
    (seconds to the next completion, the number of flows whose rates were recomputed: 0 when every
    earlier flow kept its rate and the new ones got theirs from the bottleneck test).

    ``incremental``: first :func:`rate_unchanged` (departures and arrivals that leave every other
    rate as it is, decided from the per-link counts, without looking at the other flows), else
    :func:`sim.network.refill.refill` of the flows whose rates may change; not ``incremental``:
    refill every flow. Keeps the links' rates, their peak utilisation and the bottleneck
    bookkeeping (``bottleneck``, ``link_users``, ``link_max``, ``bott_count``) up to date;
    ``gen``/``local``/``tick``: the refill's per-link scratch."""
    if n == 0:
        return np.inf, 0
    first_new = _first_pair(pair_flow, 0, n_pairs, kept)   # the new flows' pairs are the last ones
    unchanged = incremental and rate_unchanged(n, kept, n_pairs, first_new, pair_flow, pair_link, pair_weight, capacity,
                                               rate, dirty, n_dirty, link_rate, bottleneck, link_users, link_max,
                                               bott_count, np.empty(n_pairs - first_new), now, link_bytes, link_busy,
                                               since)
    refilled = 0
    if unchanged:
        for q in range(first_new, n_pairs):
            l = pair_link[q]
            utilisation = link_rate[l] / capacity[l]
            if utilisation > peak[l]:
                peak[l] = utilisation
    else:
        refilled = refill(n, kept, n_pairs, first_new, pair_flow, pair_link, pair_weight, capacity, rate, dirty,
                          n_dirty, link_rate, peak, incremental, gen, local, tick, bottleneck, link_users, link_max,
                          bott_count, now, link_bytes, link_busy, since)
    nearest = np.inf
    for f in range(n):
        t = remaining[f] / rate[f]
        if t < nearest:
            nearest = t
    return nearest, refilled


if njit is not None:
    advance = njit(cache=True)(advance)
    _first_pair = njit(**LEAF)(_first_pair)
    _copy = njit(**LEAF)(_copy)
    _move_pairs = njit(**LEAF)(_move_pairs)
    drop_finished = njit(cache=True)(drop_finished)
    rate_unchanged = njit(cache=True)(rate_unchanged)
    solve = njit(cache=True)(solve)
