"""Progressive filling by scans, for the fabric's refills of bundles: the rounds of
:func:`~sim.network.fairshare.filling.fill_flows` (a heap of flows, each keyed by its tightest link share)
with each round's lowest share found by one pass over the unfrozen flows instead of a heap.

Why. A refill of the live DeepSeek-V3 step holds a few hundred flows: each pipeline send once per
data-parallel replica, and a few bundles over hundreds of links each. By symmetry many of them
freeze at the same share: the whole refills of the representative step have 3 distinct rates at
the median and 18 at most. With so few rounds, a pass over the unfrozen flows per round costs less
than a heap move per flow, and a flow's tightest link can be looked at again when the next round
starts (its link changed in the last one) instead of through every changed link's pairs, so no
index of the pairs by link is needed at all. On 100 snapshots of that step's whole refills:
the same rates and bottlenecks bit for bit, 189 -> 121 us per filling.

The rates are exactly the heap's: a round freezes the unfrozen flows whose tightest share is
within 1e-12 of the lowest, in the heap's order (by share, then by flow), and a flow's tightest
link is recomputed after the rounds in which it changed, as the heap does (so sums and ties fall
the same way). Many distinct shares (a skewed all-to-all's hundreds of levels) make the passes
cost rounds x flows: after ``SCAN_ROUNDS`` rounds :func:`fill_scan` gives up and the caller fills
with the heap.
"""
from __future__ import annotations

import numpy as np

from ..jit import njit

SCAN_ROUNDS = 32   # rounds a filling by scans runs before handing over to the heap of flows


def fill_scan(pairs, by_flow_ptr, capacity, rates, frozen_by):
    """Progressive filling of the flows 0..n-1 (n = ``by_flow_ptr.size - 1``; a closed set: every
    flow on their links is one of them) whose ``pairs`` are grouped by flow (flow f's:
    ``by_flow_ptr[f]``..``by_flow_ptr[f + 1]``-1, from ``by_flow_ptr[0]`` = 0), on links of bytes/s
    ``capacity``: writes ``rates`` and
    ``frozen_by`` (the link that froze each flow: its tightest when it froze) as
    :func:`~sim.network.fairshare.filling.fill_flows` does, and returns
    True; or returns False after ``SCAN_ROUNDS`` rounds with flows left (``rates`` then partly
    written: the caller fills again). O(pairs + rounds x flows)."""
    flow_of_pair, link_of_pair, weight_of_pair = pairs
    n = by_flow_ptr.size - 1
    L = capacity.size
    users = np.zeros(L)
    remaining = np.zeros(L)
    n_pairs = by_flow_ptr[n]
    for p in range(n_pairs):
        l = link_of_pair[p]
        remaining[l] = capacity[l]
        users[l] += weight_of_pair[p]
    tight = np.full(n, np.inf)                       # a flow's lowest share over its links
    argmin = np.full(n, -1, dtype=np.int64)          # and that link (the first of equal ones)
    for p in range(n_pairs):
        l = link_of_pair[p]
        share = remaining[l] / users[l]
        f = flow_of_pair[p]
        if share < tight[f]:
            tight[f] = share
            argmin[f] = l
    live = np.arange(n)                              # the unfrozen flows, in increasing order
    n_live = n
    newly = np.empty(n, dtype=np.int64)
    changed = np.zeros(L, dtype=np.int64)            # the round in which a link last changed
    rnd = 0
    while n_live > 0:
        if rnd == SCAN_ROUNDS:
            return False
        step = np.inf
        for i in range(n_live):
            g = live[i]
            a = argmin[g]
            if rnd > 0 and a >= 0 and changed[a] == rnd:   # its tightest link changed: look again
                t, a = np.inf, -1
                for q in range(by_flow_ptr[g], by_flow_ptr[g + 1]):
                    k = link_of_pair[q]
                    share = remaining[k] / users[k]
                    if share < t:
                        t, a = share, k
                tight[g] = t
                argmin[g] = a
            if tight[g] < step:
                step = tight[g]
        rnd += 1
        threshold = step * (1 + 1e-12) + 1e-300
        n_new = 0
        n_kept = 0
        in_order = True
        for i in range(n_live):
            g = live[i]
            if tight[g] <= threshold:
                if n_new > 0 and tight[g] < tight[newly[n_new - 1]]:
                    in_order = False
                newly[n_new] = g
                n_new += 1
            else:
                live[n_kept] = g
                n_kept += 1
        n_live = n_kept
        if not in_order:
            in_heap_order(newly, n_new, tight)
        for j in range(n_new):
            g = newly[j]
            rates[g] = step
            frozen_by[g] = argmin[g]
            for p in range(by_flow_ptr[g], by_flow_ptr[g + 1]):
                l = link_of_pair[p]
                users[l] -= weight_of_pair[p]
                remaining[l] -= step * weight_of_pair[p]   # below 0 by rounding only where every
                changed[l] = rnd                           # flow froze: never read again
    return True


def in_heap_order(newly, n_new, tight):
    """Put a round's flows ``newly[:n_new]`` (in increasing order) in the order the heap of flows
    pops them: by share (``tight``), then by flow, which is a stable sort by share."""
    order = np.argsort(tight[newly[:n_new]], kind="mergesort")
    newly[:n_new] = newly[:n_new][order]


if njit is not None:
    in_heap_order = njit(cache=True)(in_heap_order)
    fill_scan = njit(cache=True)(fill_scan)

__all__ = ["SCAN_ROUNDS", "fill_scan"]
