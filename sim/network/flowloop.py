"""The fabric's event loop: flows wait out their latency, start in batches, drain at their rates
and end, with one rate recomputation per instant.

:class:`FlowLoop` is the half of :class:`~sim.network.Fabric` that moves time: it keeps the
active flows in growable arrays (sizes, bytes left, rates, ids, and their (flow, link) pairs,
contiguous per flow), hands them to the compiled kernels of :mod:`sim.network.flowcore` in place,
and schedules SimPy events: a flow's arrival after its latency, one batch per instant (every start
and end of that instant share one recomputation, run after the instant's other events), and a
timer for the next completion. The fabric's other half (``fabric.py``) turns transfers, sets of
routes and bundles into :class:`Flow` s for it and sets up the state both halves read (in
``Fabric.__init__``: the per-link arrays hold the topology's links, the GPUs' engines and the
bundles' private links).
"""
from __future__ import annotations

import math
from heapq import heappush

import numpy as np
import simpy

from ..limits import check_deadline
from . import flowcore, tallies

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
    """The event loop of :class:`~sim.network.Fabric` (its base class; ``Fabric.__init__`` sets up
    the state, see the module). A flow handed to :meth:`_enqueue` arrives after its latency, joins
    the active flows at the next batch (:meth:`_recompute`), drains, and ends with its
    ``on_done()``; :meth:`sync` brings the links' tallies up to now."""

    def _enqueue(self, flow: Flow, latency: float, at: float | None = None) -> None:
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

    def _start_now(self, flow: Flow) -> None:
        """A flow of no latency whose start :meth:`transfer_at` scheduled: it starts now."""
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
        tallies.credit_all(self.env.now, self._link_rate, self._link_users, self._link_bytes, self._link_busy_s,
                           self._since)

    def _advance(self) -> None:
        """Drain the flows from the last update to now."""
        dt = self.env.now - self._last
        if dt > 0 and self._n:
            self._settled = False
            flowcore.advance(dt, self._n, self._rate, self._remaining)
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
        if self._n_dirty + self._n_pairs > self._dirty.size:
            self._dirty = np.concatenate([self._dirty, np.zeros(self._n_dirty + 2 * self._n_pairs, dtype=np.int64)])
        self._n, self._n_pairs, n_done, n_dirty = flowcore.drop_finished(
            n, self._n_pairs, self._size, self._remaining, self._rate, self._flow_id, self._bottleneck, window,
            self._pair_flow, self._pair_link, self._pair_weight, now, self._link_bytes, self._link_busy_s,
            self._since, self._link_rate, self._link_users, self._bott_count, done, self._dirty[self._n_dirty:])
        self._n_dirty += n_dirty
        pop = self._callbacks.pop
        for flow_id in done[:n_done].tolist():
            pop(flow_id)()

    def _activate_pending(self) -> None:
        """Append the pending flows to the active arrays (one by one when they are few: cheaper
        than building arrays for them)."""
        flows, self._pending = self._pending, []
        n, m, P = self._n, len(flows), self._n_pairs
        if m <= 4 and all(f.lengths is None for f in flows):
            self._grow(n + m, P + sum(f.links.size for f in flows))
            for f in flows:
                size, links = f.size, f.links
                flow_id = self._next_id
                self._next_id += 1
                self._callbacks[flow_id] = f.on_done
                self._flow_id[n] = flow_id
                self._size[n] = size
                self._remaining[n] = size
                self._rate[n] = 0.0
                end = P + links.size
                self._pair_flow[P:end] = n
                self._pair_link[P:end] = links
                self._pair_weight[P:end] = 1.0 if f.weights is None else f.weights
                n, P = n + 1, end
            self._n, self._n_pairs = n, P
            return
        if any(f.lengths is not None for f in flows):   # blocks: one entry per flow
            counts = [1 if f.lengths is None else len(f.lengths) for f in flows]
            lengths = np.array([k for f in flows for k in (f.lengths or (f.links.size,))], dtype=np.int64)
            callbacks = [cb for f in flows for cb in (f.on_done if f.lengths is not None else (f.on_done,))]
            sizes = np.repeat([f.size for f in flows], counts)
            m = len(lengths)
        else:
            lengths = np.array([f.links.size for f in flows], dtype=np.int64)
            callbacks = [f.on_done for f in flows]
            sizes = np.array([f.size for f in flows])
        total = int(lengths.sum())
        self._grow(n + m, P + total)
        first = self._next_id
        self._next_id += m
        self._callbacks.update(zip(range(first, first + m), callbacks))
        self._flow_id[n:n + m] = np.arange(first, first + m)
        self._size[n:n + m] = sizes
        self._remaining[n:n + m] = sizes
        self._rate[n:n + m] = 0.0
        self._pair_flow[P:P + total] = n + np.repeat(np.arange(m), lengths)
        self._pair_link[P:P + total] = np.concatenate([f.links for f in flows])
        weights = self._pair_weight[P:P + total]
        weights[:] = 1.0
        at = 0
        for f in flows:                             # bundles only; plain flows weigh 1
            size = f.links.size
            if f.weights is not None:
                weights[at:at + size] = f.weights
            at += size
        self._n, self._n_pairs = n + m, P + total

    def _grow(self, flows: int, pairs: int) -> None:
        """Make room for ``flows`` flows and ``pairs`` pairs (doubling)."""
        if flows > self._size.size:
            size = max(flows, 2 * self._size.size)
            for name in ("_size", "_remaining", "_rate", "_flow_id", "_done", "_bottleneck"):
                old = getattr(self, name)
                new = np.zeros(size, dtype=old.dtype)
                new[:self._n] = old[:self._n]
                setattr(self, name, new)
        if pairs > self._pair_flow.size:
            size = max(pairs, 2 * self._pair_flow.size)
            for name in ("_pair_flow", "_pair_link", "_pair_weight"):
                old = getattr(self, name)
                new = np.ones(size, dtype=old.dtype)
                new[:self._n_pairs] = old[:self._n_pairs]
                setattr(self, name, new)

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
            self._link_rate[:] = 0
            self._n_dirty = 0
            self._timer_version += 1
            self._timer_at = None
            self._notify()
            return
        if self._busy_since is None:
            self._busy_since = self.env.now
        self._tick += 1
        nearest, refilled = flowcore.solve(
            n, kept, self._n_pairs, self._pair_flow, self._pair_link, self._pair_weight, self._capacity, self._rate,
            self._remaining, self._dirty, self._n_dirty, self._link_rate, self._link_peak_util, self.incremental,
            self._gen, self._local, self._tick, self._bottleneck, self._link_users, self._link_max, self._bott_count,
            self.env.now, self._link_bytes, self._link_busy_s, self._since)
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

    def _notify(self) -> None:
        """Tell the observers the links' rates, which hold until the next recomputation."""
        for observe in self.observers:
            observe(self.env.now, self._link_rate[:self._n_links])

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
