"""The fabric's arithmetic between two events, as compiled kernels (numba; plain Python, slow but
the same rules, where numba is missing) over the active flows, kept in the named records of
:mod:`.records`:

* flows are numbered 0..n-1 in order of arrival (:class:`~.records.Flows`);
* a flow's (flow, link) pairs are contiguous and in flow order (``pairs.flow`` is non-decreasing),
  so every pass over them is sequential in memory; a pair's weight (1 for a plain flow) is how
  many times the flow's rate it puts on its link (:mod:`.oracle`);
* ``links.rate[l]`` is kept up to date as rates change.

Kernels: :func:`advance` drains every flow for ``dt``; :func:`drop_finished` removes the flows
due now (crediting their last bytes to their links' tallies, :mod:`.tallies`), compacting the
arrays in place and naming the links they leave; :func:`solve` gives the new flows their rates and
keeps every other rate when :func:`rate_unchanged` shows none can change (the bottleneck test
below), else :func:`~sim.network.fairshare.refill.refill` recomputes the rates of the flows that
may change; it keeps the links' rates and peak utilisation and returns the time to the next
completion.

The event loop calls :func:`advance`, :func:`drop_finished` and :func:`solve` with its records as
plain tuples, which they name first (``Flows(*flows)``, free once compiled): numba types a plain
tuple of arrays in its C fast path but a named tuple in Python, which cost 2-3 us a call (17% of
the live DeepSeek-V3 step).

Bottleneck bookkeeping (for :func:`rate_unchanged`): ``flows.bottleneck[f]`` is the link that
froze flow f in its last filling; per link, ``links.froze`` counts the flows it froze,
``links.users`` the flows on it with a rate, and ``links.fastest`` is at least the fastest of them
(exact after a refill; left as an upper bound when flows end).
"""
from __future__ import annotations

import numpy as np

from ..jit import LEAF, njit
from .records import Flows, Instant, Links, Pairs, Scratch
from .refill import refill
from .tallies import credit


def advance(flows, n, dt):
    """Drain the flows 0..n-1 for ``dt`` seconds (the links' tallies are kept by :func:`credit`)."""
    flows = Flows(*flows)
    rate, remaining = flows.rate, flows.remaining
    for f in range(n):
        remaining[f] -= rate[f] * dt


def drop_finished(flows, pairs, links, at, window, done_out, dirty_out):
    """Remove the flows due at ``at.now`` (``remaining <= rate x window``, with a byte of slack) of
    the ``at.n`` flows and ``at.n_pairs`` pairs: credit the bytes each still had to its links
    (first bringing their tallies to now, :func:`credit`), take its rate off them (a link left
    with no flow carries 0), take it out of ``links.users`` and ``links.froze``, compact the flow
    and pair arrays in place. Returns (flows left, pairs left, flows done, links they left);
    ``done_out`` gets the done flows' ids (``flows.flow_id``), ``dirty_out`` the links they used.

    The pairs are in flow order, so each done flow's pairs are found by bisection and the kept
    flows' pairs move as blocks (:func:`move_pairs`): the pairs before the first done flow's stay
    where they are. (A live step's all-to-all ends alone among thousands of pairs; moving the blocks
    with plain copies, not pair by pair, took a removal from 22 to 13 us on snapshots of one.)"""
    flows, pairs, links, at = Flows(*flows), Pairs(*pairs), Links(*links), Instant(*at)
    n, n_pairs, now = at.n, at.n_pairs, at.now
    size, remaining, rate, flow_id, bottleneck = flows
    done = np.empty(n, dtype=np.int64)          # the done flows, in order
    n_done = 0
    for f in range(n):
        if remaining[f] <= rate[f] * window + 1e-9 * size[f] + 1e-6:
            done_out[n_done] = flow_id[f]
            done[n_done] = f
            n_done += 1
            links.froze[bottleneck[f]] -= 1
    if n_done == 0:
        return n, n_pairs, 0, 0
    k = first_pair(pairs.flow, 0, n_pairs, done[0])
    p = k                                       # the pairs before p are placed (at 0..k-1)
    n_dirty = 0
    for i in range(n_done):
        f = done[i]
        start = first_pair(pairs.flow, p, n_pairs, f)
        k = move_pairs(pairs, p, start, k, i)
        p = first_pair(pairs.flow, start, n_pairs, f + 1)
        for q in range(start, p):
            l, w = pairs.link[q], pairs.weight[q]
            credit(links, l, now)
            if remaining[f] > 0.0:
                links.carried[l] += remaining[f] * w
            links.users[l] -= 1
            links.rate[l] = links.rate[l] - rate[f] * w if links.users[l] > 0 else 0.0
            dirty_out[n_dirty] = l
            n_dirty += 1
    k = move_pairs(pairs, p, n_pairs, k, n_done)
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


def first_pair(pair_flow, lo, hi, f):
    """The first pair in ``lo``..``hi``-1 of flow ``f`` or a later flow (``hi`` if none): bisection,
    as pairs are in flow order."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if pair_flow[mid] < f:
            lo = mid + 1
        else:
            hi = mid
    return lo


def move_pairs(pairs, start, end, to, fewer):
    """Move the kept flows' pairs ``start``..``end``-1 to ``to`` (<= ``start``), their flows numbered
    ``fewer`` lower (the done flows before them); returns where the next pairs go. Each array is
    copied through views from index 0 up: loops the compiler can vectorise (an index counted from
    0 needs no check for negative values)."""
    m = end - start
    copy_up(pairs.link[start:end], pairs.link[to:to + m])
    copy_up(pairs.weight[start:end], pairs.weight[to:to + m])
    src, dst = pairs.flow[start:end], pairs.flow[to:to + m]
    for j in range(m):
        dst[j] = src[j] - fewer
    return to + m


def copy_up(src, dst):
    """``dst[:] = src`` from the first element up (``dst`` may overlap ``src`` from below)."""
    for j in range(src.size):
        dst[j] = src[j]


def rate_unchanged(flows, pairs, links, scratch, at, first_new, saved):
    """The fast path of :func:`solve`: whether the flows that ended (on the links
    ``scratch.dirty[:at.n_dirty]``) and the new flows (``at.kept``..``at.n``-1, whose pairs start at
    ``first_new``) leave every other flow's rate as it is; if so, give each new flow its rate and
    return True, else change nothing.

    By the bottleneck property (Bertsekas and Gallager, *Data Networks*, 6.5.2), rates are max-min
    fair when every flow has a bottleneck: a full link on which no flow is faster (per unit of
    weight). Each flow keeps the link that froze it (``flows.bottleneck``; ``links.froze[l]``: how
    many flows link l froze). So the old rates stay max-min fair after
    * departures, when no remaining flow was frozen by a link the departed flows left (the others'
      bottlenecks are untouched: still full, and no flow on them got faster);
    * an arrival f crossing no such link, at the least spare capacity per unit of weight over its
      links, ``r = min_l (capacity_l - load_l) / w_fl`` (> 0), provided no flow on the link of that
      minimum is faster than r (``links.fastest[l]``: an upper bound of the rates on l): that link
      is then f's bottleneck, and the others' are untouched.
    New flows are tried one after the other (each sees the loads of those before it); if one
    fails, the loads are restored bit for bit from ``saved`` and :func:`solve` refills (which sets
    ``links.fastest`` anew on every link of the new flows)."""
    froze, users, fastest, link_rate = links.froze, links.users, links.fastest, links.rate
    for i in range(at.n_dirty):
        if froze[scratch.dirty[i]] > 0:
            return False
    n, n_pairs, now = at.n, at.n_pairs, at.now
    pair_flow, pair_link, pair_weight = pairs
    ok = True
    p = first_new
    f = at.kept
    while f < n:
        start = p
        while p < n_pairs and pair_flow[p] == f:
            p += 1
        r = np.inf
        arg = -1
        for q in range(start, p):
            l = pair_link[q]
            if froze[l] > 0:
                r = -1.0
                break
            spare = (links.capacity[l] - link_rate[l]) / pair_weight[q]
            if spare < r:
                r = spare
                arg = l
        if not (0.0 < r < np.inf) or (users[arg] > 0 and fastest[arg] > r):
            ok = False
            p = start
            break
        for q in range(start, p):
            l = pair_link[q]
            credit(links, l, now)
            saved[q - first_new] = link_rate[l]
            link_rate[l] += r * pair_weight[q]
            if users[l] == 0 or r > fastest[l]:
                fastest[l] = r
            users[l] += 1
        flows.rate[f] = r
        flows.bottleneck[f] = arg
        froze[arg] += 1
        f += 1
    if not ok:
        for q in range(p - 1, first_new - 1, -1):        # undo, last first: the loads before
            l = pair_link[q]
            link_rate[l] = saved[q - first_new]
            users[l] -= 1
        for g in range(at.kept, f):
            froze[flows.bottleneck[g]] -= 1
    return ok


def solve(flows, pairs, links, scratch, at):
    """Rates after the flows ``at.kept``..``at.n``-1 arrived and flows left the links
    ``scratch.dirty[:at.n_dirty]``: returns (seconds to the next completion, the number of flows
    whose rates were recomputed: 0 when every earlier flow kept its rate and the new ones got
    theirs from the bottleneck test).

    ``at.incremental``: first :func:`rate_unchanged` (departures and arrivals that leave every
    other rate as it is, decided from the per-link counts, without looking at the other flows),
    else :func:`~sim.network.fairshare.refill.refill` of the flows whose rates may change; not
    incremental: refill every flow. Keeps the links' rates, their peak utilisation and the
    bottleneck bookkeeping up to date."""
    flows, pairs, links, scratch, at = Flows(*flows), Pairs(*pairs), Links(*links), Scratch(*scratch), Instant(*at)
    n = at.n
    if n == 0:
        return np.inf, 0
    first_new = first_pair(pairs.flow, 0, at.n_pairs, at.kept)   # the new flows' pairs are the last ones
    unchanged = at.incremental and rate_unchanged(flows, pairs, links, scratch, at, first_new,
                                                  np.empty(at.n_pairs - first_new))
    refilled = 0
    if unchanged:
        for q in range(first_new, at.n_pairs):
            l = pairs.link[q]
            utilisation = links.rate[l] / links.capacity[l]
            if utilisation > links.peak[l]:
                links.peak[l] = utilisation
    else:
        refilled = refill(flows, pairs, links, scratch, at, first_new)
    nearest = np.inf
    for f in range(n):
        t = flows.remaining[f] / flows.rate[f]
        if t < nearest:
            nearest = t
    return nearest, refilled


if njit is not None:
    advance = njit(cache=True)(advance)
    first_pair = njit(**LEAF)(first_pair)
    copy_up = njit(**LEAF)(copy_up)
    move_pairs = njit(**LEAF)(move_pairs)
    drop_finished = njit(cache=True)(drop_finished)
    rate_unchanged = njit(cache=True)(rate_unchanged)
    solve = njit(cache=True)(solve)

__all__ = ["advance", "copy_up", "drop_finished", "first_pair", "move_pairs", "rate_unchanged", "solve"]
