"""The fabric's event loop: flows wait out their latency, start in batches, drain at their rates
and end, with one rate recomputation per instant.

:class:`FlowLoop` is the half of :class:`~sim.network.Fabric` that moves time: it keeps the
active flows in growable arrays (sizes, bytes left, rates, ids, and their (flow, link) pairs,
contiguous per flow) as the named records of :mod:`sim.network.fairshare`, which it builds and
grows, hands them to that package's compiled kernels to change in place, and schedules SimPy
events: a flow's arrival after its latency, one batch per instant (every start and end of that
instant share one recomputation, run after the instant's other events), and a timer for the next
completion. The fabric's other half (``fabric.py``) turns transfers, sets of
routes and bundles into :class:`Flow` s for it, and says which links there are (the topology's,
the GPUs' engines; bundles' private links come and go through :meth:`FlowLoop.add_link`).
"""
from __future__ import annotations

import math
from heapq import heappush
from typing import Callable

import numpy as np
import simpy

from ..limits import check_deadline
from .fairshare import advance, credit_all, drop_finished, grown, new_flows, new_links, new_pairs, new_scratch, solve

_NORMAL_PRIORITY = 1  # SimPy's NORMAL: timeouts and succeeded events
_BATCH_PRIORITY = 2  # after every NORMAL (1) event of the same instant
_CLOCK_RESOLUTION = 2.0 ** -52  # x now: at least half the float clock's spacing (a shorter delay does not advance it)


class Flow:
    """A flow waiting to start, or a block of flows of one size (``lengths``: each one's number of
    links, ``links`` theirs one after the other, ``on_done`` a list of their callbacks)."""
    __slots__ = ("links", "size", "on_done", "weights", "lengths")

    def __init__(self, links: np.ndarray, size: float, on_done, weights: np.ndarray | None = None,
                 lengths: list[int] | None = None):
        self.links, self.size, self.on_done = links, size, on_done
        self.weights = weights                           # bundle: pair weights (its rate limit included)
        self.lengths = lengths


class FlowLoop:
    """The event loop of :class:`~sim.network.Fabric` (its base class). A flow handed to
    :meth:`enqueue` arrives after its latency, joins the active flows at the next batch
    (:meth:`_recompute`), drains, and ends with its ``on_done()``; :meth:`sync` brings the links'
    tallies up to now.

    ``capacity`` (bytes/s): the links' (every link the flows may cross); ``completion_window``:
    see :meth:`_complete_finished`; ``incremental``: recompute only the rates that may change
    (:mod:`sim.network.fairshare.refill`), else every rate each time. ``link_state``: the links'
    record (:class:`~sim.network.fairshare.Links`): rates, tallies, peak utilisation. ``observed``:
    how many of the first links the ``observers`` are shown (default: all of ``capacity``); links
    beyond them (a fabric's GPU engines, bundles' added links) carry rates the observers never see."""

    def __init__(self, env: simpy.Environment, capacity: np.ndarray, completion_window: float = 0.0,
                 incremental: bool = True, observed: int | None = None):
        self.env = env
        self.completion_window = completion_window
        self.incremental = incremental
        self.link_state = new_links(capacity)
        self._scratch = new_scratch(capacity.size)
        # Active flows (fairshare's kernels work on them in place): sizes, bytes left, rates, ids,
        # bottlenecks, and their (flow, link) pairs, contiguous per flow; callbacks by id.
        self._flows = new_flows(64)
        self._pairs = new_pairs(256)
        self._n = 0
        self._n_pairs = 0
        self._n_dirty = 0                             # links left by flows that ended since the last solve
        self._done = np.zeros(64, dtype=np.int64)     # scratch: ids of the flows drop_finished removes
        self._callbacks: dict[int, Callable] = {}
        self._next_id = 0
        self._free_links: list[int] = []              # added links given back (add_link, release_link)
        self.recomputations = 0
        self.unchanged_solves = 0                     # recomputations that left every earlier rate as it was
        self.refilled_flows = 0                       # flows whose rates recomputations refilled, in all
        self.observers: list[Callable[[float, np.ndarray], None]] = []  # (now, link rates) after each recompute
        self._observed = capacity.size if observed is None else int(observed)   # the links observers see (the first ones)
        self._tick = 0                                # scratch marks compare against ever-increasing ticks
        self._busy_since = None
        self._settled = False                         # no flow is due now that _complete_finished would remove
        self._pending: list[Flow] = []
        self._arrivals: dict[float, list[Flow]] = {}
        self._last = env.now
        self._batch_scheduled = False
        self._timer_version = 0
        self._timer_at = None                         # when the live timer fires (None: no live timer)

    def add_link(self, capacity: float) -> int:
        """A link of ``capacity`` bytes/s beyond the first ones (a bundle's rate limit), until
        :meth:`release_link`; returns its number."""
        if not self._free_links:
            L = self.link_state.capacity.size
            grow = max(16, L // 2)
            self.link_state = grown(self.link_state, L, L + grow)
            self._scratch = self._scratch._replace(gen=np.concatenate([self._scratch.gen, np.zeros(grow, dtype=np.int64)]),
                                                   local=np.concatenate([self._scratch.local,
                                                                         np.zeros(grow, dtype=np.int64)]))
            self._free_links.extend(range(L + grow - 1, L - 1, -1))
        link = self._free_links.pop()
        self.link_state.capacity[link] = capacity
        self.link_state.rate[link] = 0.0
        return link

    def release_link(self, link: int) -> None:
        """Give back a link of :meth:`add_link` (its flows have ended)."""
        self._free_links.append(link)

    def enqueue(self, flow: Flow, latency: float, at: float | None = None) -> None:
        """``flow`` starts to send after ``latency`` (flows due at the same instant arrive together);
        ``at``: the instant it is due, when not ``now + latency`` (a transfer started ahead)."""
        if latency > 0:
            env = self.env
            if at is None:
                at = env.now + latency
            batch = self._arrivals.get(at)
            if batch is None:
                batch = self._arrivals[at] = []
                event_at(env, at).callbacks.append(lambda _ev, at=at: self._arrive(at))
            batch.append(flow)
        else:
            self._pending.append(flow)
            self._request_batch()

    def start_now(self, flow: Flow) -> None:
        """A flow of no latency whose start ``Fabric.transfer_at`` scheduled: it starts now."""
        self._pending.append(flow)
        self._batch_or_now()

    def _arrive(self, at: float) -> None:
        """Flows whose latency has elapsed at ``at`` start to send (zero-byte ones finish)."""
        for flow in self._arrivals.pop(at):
            if flow.size == 0:
                flow.on_done()
            else:
                self._pending.append(flow)
        if self._pending:
            self._batch_or_now()

    def _request_batch(self) -> None:
        if self._batch_scheduled:
            return
        self._batch_scheduled = True
        ev = simpy.Event(self.env)
        # SimPy internals on purpose: ``succeed()`` would schedule the event at NORMAL priority;
        # marking it triggered by hand and scheduling it at a lower priority makes the batch run
        # after every other event of this instant (so all starts and ends of one instant share
        # one recomputation). SimPy has no public call for "triggered, at this priority".
        ev._ok, ev._value = True, None
        ev.callbacks.append(self._recompute)
        self.env.schedule(ev, priority=_BATCH_PRIORITY)      # now (SimPy's default delay)

    def _batch_or_now(self) -> None:
        """At the end of a fabric event: recompute at once when nothing else is due at this instant
        (the batch would be the next event: the same state, one SimPy event less), else batch."""
        env = self.env
        if not self._batch_scheduled and env.peek() > env.now:
            self._recompute()
        else:
            self._request_batch()

    def sync(self) -> None:
        """Bring bytes drained and link statistics up to the current simulated time (to read
        ``link_bytes`` or ``link_busy_s`` mid-run; each link's are otherwise brought up to date
        when its rate changes, and are complete once its flows have ended)."""
        self._advance()
        credit_all(self.link_state, self.env.now)

    def _advance(self) -> None:
        """Drain the flows from the last update to now."""
        dt = self.env.now - self._last
        if dt > 0 and self._n:
            self._settled = False
            advance(tuple(self._flows), self._n, dt)
        self._last = self.env.now

    def _complete_finished(self) -> None:
        """Finish every flow due now. Flows due within ``completion_window x (time since the
        fabric became busy)`` finish with them (their last bytes are credited to their links at
        once): this bounds the number of rate recomputations when skewed traffic spreads
        completions thinly; symmetric traffic is unaffected (its flows end together anyway).
        Flows due within the clock's resolution at now (``now x 2**-52`` s, half a float's spacing
        at least) finish now too: a timer that short would fire at the same instant, forever."""
        n = self._n
        if not n or self._settled:              # nothing drained nor re-rated since the last look
            return
        self._settled = True
        now = self.env.now
        window = self.completion_window * (now - self._busy_since) + now * _CLOCK_RESOLUTION  # flows are active
        done = self._done
        dirty = self._scratch.dirty
        if self._n_dirty + self._n_pairs > dirty.size:
            dirty = np.concatenate([dirty, np.zeros(self._n_dirty + 2 * self._n_pairs, dtype=np.int64)])
            self._scratch = self._scratch._replace(dirty=dirty)
        self._n, self._n_pairs, n_done, n_dirty = drop_finished(      # plain tuples: see fairshare.step
            tuple(self._flows), tuple(self._pairs), tuple(self.link_state), self._instant(n, n, now), window, done,
            dirty[self._n_dirty:])
        self._n_dirty += n_dirty
        pop = self._callbacks.pop
        for flow_id in done[:n_done].tolist():
            pop(flow_id)()

    def _activate_pending(self) -> None:
        """Append the pending flows to the active arrays (one by one when they are few: cheaper
        than building arrays for them)."""
        pending, self._pending = self._pending, []
        n, m, P = self._n, len(pending), self._n_pairs
        if m <= 4 and all(f.lengths is None for f in pending):
            self._grow(n + m, P + sum(f.links.size for f in pending))
            active, pairs = self._flows, self._pairs
            for f in pending:
                size, links = f.size, f.links
                flow_id = self._next_id
                self._next_id += 1
                self._callbacks[flow_id] = f.on_done
                active.flow_id[n] = flow_id
                active.size[n] = size
                active.remaining[n] = size
                active.rate[n] = 0.0
                end = P + links.size
                pairs.flow[P:end] = n
                pairs.link[P:end] = links
                pairs.weight[P:end] = 1.0 if f.weights is None else f.weights
                n, P = n + 1, end
            self._n, self._n_pairs = n, P
            return
        if any(f.lengths is not None for f in pending):   # blocks: one entry per flow
            counts = [1 if f.lengths is None else len(f.lengths) for f in pending]
            lengths = np.array([k for f in pending for k in (f.lengths or (f.links.size,))], dtype=np.int64)
            callbacks = [cb for f in pending for cb in (f.on_done if f.lengths is not None else (f.on_done,))]
            sizes = np.repeat([f.size for f in pending], counts)
            m = len(lengths)
        else:
            lengths = np.array([f.links.size for f in pending], dtype=np.int64)
            callbacks = [f.on_done for f in pending]
            sizes = np.array([f.size for f in pending])
        total = int(lengths.sum())
        self._grow(n + m, P + total)
        active, pairs = self._flows, self._pairs
        first = self._next_id
        self._next_id += m
        self._callbacks.update(zip(range(first, first + m), callbacks))
        active.flow_id[n:n + m] = np.arange(first, first + m)
        active.size[n:n + m] = sizes
        active.remaining[n:n + m] = sizes
        active.rate[n:n + m] = 0.0
        pairs.flow[P:P + total] = n + np.repeat(np.arange(m), lengths)
        pairs.link[P:P + total] = np.concatenate([f.links for f in pending])
        weights = pairs.weight[P:P + total]
        weights[:] = 1.0
        at = 0
        for f in pending:                             # bundles only; plain pending weigh 1
            size = f.links.size
            if f.weights is not None:
                weights[at:at + size] = f.weights
            at += size
        self._n, self._n_pairs = n + m, P + total

    def _grow(self, flows: int, pairs: int) -> None:
        """Make room for ``flows`` flows and ``pairs`` pairs (doubling)."""
        if flows > self._done.size:
            size = max(flows, 2 * self._done.size)
            self._flows = grown(self._flows, self._n, size)
            self._done = np.zeros(size, dtype=np.int64)
        if pairs > self._pairs.flow.size:
            self._pairs = grown(self._pairs, self._n_pairs, max(pairs, 2 * self._pairs.flow.size), fill=1)

    def _recompute(self, _event=None) -> None:
        if not self.recomputations & 255:
            check_deadline()                    # a sweep's per-point time limit (sim.limits), now and then
        self._batch_scheduled = False
        self._advance()
        self._complete_finished()
        kept = self._n                          # flows that had a rate (those that did not end)
        if self._pending:
            self._activate_pending()
        self.recomputations += 1
        n = self._n
        if n == 0:
            self._busy_since = None
            self.link_state.rate[:] = 0
            self._n_dirty = 0
            self._timer_version += 1
            self._timer_at = None
            self._notify()
            return
        if self._busy_since is None:
            self._busy_since = self.env.now
        self._tick += 1
        nearest, refilled = solve(tuple(self._flows), tuple(self._pairs), tuple(self.link_state), tuple(self._scratch),
                                  self._instant(n, kept, self.env.now))
        self.unchanged_solves += refilled == 0
        self.refilled_flows += refilled
        self._settled = False                   # new rates: a flow may now be due within the window
        self._n_dirty = 0
        self._notify()
        at = self.env.now + nearest             # as SimPy adds a timeout's delay
        if at != self._timer_at:                # else the live timer already fires then
            if not at < math.inf:               # a timer there would fire there forever: a hang
                raise RuntimeError(f"fabric: the next flow completion is at {at} s (now {self.env.now} s); "
                                   "a time or a rate is not finite")
            self._timer_at = at
            self._timer_version += 1
            version = self._timer_version
            self.env.timeout(float(nearest)).callbacks.append(lambda _ev: self._on_timer(version))

    def _instant(self, n: int, kept: int, now: float) -> tuple:
        """The scalars of a kernel call (an :class:`~sim.network.fairshare.Instant` as a plain tuple):
        ``n`` flows of which ``kept`` had a rate, at ``now``."""
        return (n, kept, self._n_pairs, self._n_dirty, now, self._tick, self.incremental)

    def _notify(self) -> None:
        """Tell the observers the links' rates, which hold until the next recomputation."""
        for observe in self.observers:
            observe(self.env.now, self.link_state.rate[:self._observed])

    def _on_timer(self, version: int) -> None:
        if version != self._timer_version:
            return
        self._timer_at = None
        self._advance()
        self._complete_finished()
        # What the finished flows' owners start now joins the same batch.
        self._batch_or_now()


def event_at(env: simpy.Environment, at: float) -> simpy.Event:
    """An event that fires at exactly ``at`` (>= now). SimPy internals on purpose (as the batch
    event's): a timeout lands at ``now + delay``, and no delay reaches every instant (when the
    exact sum falls halfway between two floats it rounds to the even one, skipping the other),
    so the event is put on SimPy's queue at ``at`` itself, at normal priority, as a timeout made
    now would be."""
    ev = simpy.Event(env)
    ev._ok, ev._value = True, None
    heappush(env._queue, (at, _NORMAL_PRIORITY, next(env._eid), ev))
    return ev


__all__ = ["Flow", "FlowLoop", "event_at"]
