"""A flow-level network in SimPy: transfers share link bandwidth by max-min fairness.

The model (SimGrid's "flow" fidelity, see README "Network model"):

1. A transfer of N bytes from GPU a to GPU b follows one route (``LinkTable.route``).
2. It first pays the route's latency (the sum of its links' latencies), which does not contend.
3. Then it becomes an active flow. Active flows share every link's bandwidth max-min fairly
   (``max_min_rates``); rates are recomputed whenever a flow starts or ends, and all starts and
   ends at the same instant are batched into one recomputation.
4. It completes when its last byte has drained: ``t_end = t_start + latency + time to drain``.

So one flow alone takes ``latency + N / min(bandwidth on route)``; k equal flows on one link get
``bandwidth / k`` each. Ignored: packets, headers, congestion control, PFC pauses and incast loss,
switch buffers, NIC/PCIe message-rate limits, adaptive routing; latency is paid once per transfer.
"""
from __future__ import annotations

from typing import Callable

import networkx as nx
import numpy as np
import simpy

from .links import LinkTable
from .maxmin import max_min_rates

_BATCH_PRIORITY = 2  # after every NORMAL (1) event of the same instant


class _Flow:
    __slots__ = ("links", "size", "on_done")

    def __init__(self, links: np.ndarray, size: float, on_done):
        self.links, self.size, self.on_done = links, size, on_done


class Fabric:
    """Transfers between GPUs (global indices) over the links of ``graph``.

    ``transfer(src, dst, nbytes)`` returns a SimPy event that fires when the last byte lands.
    Link statistics accumulate in ``link_bytes`` (bytes), ``link_busy_s`` (s with any traffic)
    and ``link_peak_util`` (max of carried rate / bandwidth)."""

    def __init__(self, env: simpy.Environment, graph: nx.Graph | LinkTable, completion_window: float = 0.0):
        if not 0 <= completion_window < 1:
            raise ValueError(f"completion_window must be in [0, 1), got {completion_window}")
        self.env = env
        self.completion_window = completion_window
        self._busy_since = None
        self.links = graph if isinstance(graph, LinkTable) else LinkTable(graph)
        L = len(self.links)
        self.link_bytes = np.zeros(L)
        self.link_busy_s = np.zeros(L)
        self.link_peak_util = np.zeros(L)
        self._n_gpus = len(self.links.gpus)
        self._sent = [0.0] * self._n_gpus
        self._received = [0.0] * self._n_gpus
        self.recomputations = 0
        self.observers: list[Callable[[float, np.ndarray], None]] = []  # (now, link rates) after each recompute
        # Active flows as arrays (no per-flow Python work when rates are recomputed): their
        # callbacks, sizes, bytes left, rates, and their (flow, link) pairs.
        self._done_cb = np.empty(0, dtype=object)
        self._size = np.zeros(0)
        self._remaining = np.zeros(0)
        self._rate = np.zeros(0)
        self._pair_flow = np.zeros(0, dtype=np.int64)
        self._pair_link = np.zeros(0, dtype=np.int64)
        self._link_rate = np.zeros(L)
        self._pending: list[_Flow] = []
        self._arrivals: dict[float, list[_Flow]] = {}
        self._last = env.now
        self._batch_scheduled = False
        self._timer_version = 0

    @property
    def num_gpus(self) -> int:
        return self._n_gpus

    @property
    def bytes_sent(self) -> np.ndarray:
        """Bytes each GPU has put on the wire (forwarded bytes count for the forwarder)."""
        return np.array(self._sent)

    @property
    def bytes_received(self) -> np.ndarray:
        return np.array(self._received)

    # -- public API ---------------------------------------------------------------------------
    def transfer(self, src: int, dst: int, nbytes: float, on_done=None) -> simpy.Event | None:
        """Send ``nbytes`` from GPU ``src`` to GPU ``dst``. Returns a SimPy event that fires when
        the last byte arrives, or, given ``on_done``, calls ``on_done()`` then and returns None
        (cheaper: what collectives use). Same GPU: instant. Zero bytes: the route's latency."""
        n = self._n_gpus
        if not (0 <= src < n and 0 <= dst < n):
            raise ValueError(f"GPU index out of range: src={src}, dst={dst}; this fabric has GPUs 0..{n - 1}")
        if not nbytes >= 0:
            raise ValueError(f"bytes must be >= 0, got {nbytes}")
        done = None
        if on_done is None:
            done = simpy.Event(self.env)
            on_done = done.succeed
        if src == dst:
            on_done()
            return done
        links, latency = self.links.route(src, dst)
        nbytes = float(nbytes)
        self._sent[src] += nbytes
        self._received[dst] += nbytes
        flow = _Flow(links, nbytes, on_done)
        if latency > 0:
            at = self.env.now + latency
            batch = self._arrivals.get(at)
            if batch is None:
                batch = self._arrivals[at] = []
                self.env.timeout(latency).callbacks.append(lambda _ev, at=at: self._arrive(at))
            batch.append(flow)
        else:
            self._pending.append(flow)
            self._request_batch()
        return done

    def active_flows(self) -> int:
        return self._size.size + len(self._pending) + sum(len(b) for b in self._arrivals.values())

    # -- internals ----------------------------------------------------------------------------
    def _arrive(self, at: float) -> None:
        """Flows whose latency has elapsed at ``at`` start to send (zero-byte ones finish)."""
        for flow in self._arrivals.pop(at):
            if flow.size == 0:
                flow.on_done()
            else:
                self._pending.append(flow)
        if self._pending:
            self._request_batch()

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
        self.env.schedule(ev, priority=_BATCH_PRIORITY, delay=0)

    def sync(self) -> None:
        """Bring bytes drained and link statistics up to the current simulated time (to read
        ``link_bytes`` or ``link_busy_s`` mid-run)."""
        self._advance()

    def _advance(self) -> None:
        """Drain bytes and accumulate link statistics from the last update to now."""
        dt = self.env.now - self._last
        if dt > 0:
            if self._size.size:
                self._remaining -= self._rate * dt
            self.link_bytes += self._link_rate * dt
            self.link_busy_s[self._link_rate > 0] += dt
        self._last = self.env.now

    def _complete_finished(self) -> None:
        """Finish every flow due now. Flows due within ``completion_window x (time since the
        fabric became busy)`` finish with them (their last bytes are credited to their links at
        once): this bounds the number of rate recomputations when skewed traffic spreads
        completions thinly; symmetric traffic is unaffected (its flows end together anyway)."""
        if not self._size.size:
            return
        window = self.completion_window * (self.env.now - self._busy_since) if self._busy_since is not None else 0.0
        slack = self._rate * window if self._rate.size == self._size.size else 0.0
        done = self._remaining <= slack + 1e-9 * self._size + 1e-6
        if not done.any():
            return
        left = np.where(done, np.maximum(self._remaining, 0.0), 0.0)
        if left.any():
            self.link_bytes += np.bincount(self._pair_link, weights=left[self._pair_flow], minlength=len(self.links))
        finished = self._done_cb[done]
        keep = ~done
        new_index = np.cumsum(keep) - 1
        pair_keep = keep[self._pair_flow]
        self._pair_flow = new_index[self._pair_flow[pair_keep]]
        self._pair_link = self._pair_link[pair_keep]
        self._done_cb = self._done_cb[keep]
        self._size = self._size[keep]
        self._remaining = self._remaining[keep]
        self._rate = self._rate[keep]
        for on_done in finished:
            on_done()

    def _activate_pending(self) -> None:
        """Append the pending flows to the active arrays."""
        flows, self._pending = self._pending, []
        n = self._size.size
        callbacks = np.empty(len(flows), dtype=object)
        callbacks[:] = [f.on_done for f in flows]
        sizes = np.array([f.size for f in flows])
        lengths = np.array([f.links.size for f in flows], dtype=np.int64)
        self._done_cb = np.concatenate([self._done_cb, callbacks])
        self._size = np.concatenate([self._size, sizes])
        self._remaining = np.concatenate([self._remaining, sizes])
        self._pair_flow = np.concatenate([self._pair_flow, n + np.repeat(np.arange(len(flows)), lengths)])
        self._pair_link = np.concatenate([self._pair_link] + [f.links for f in flows])

    def _recompute(self, _event=None) -> None:
        self._batch_scheduled = False
        self._advance()
        self._complete_finished()
        if self._pending:
            self._activate_pending()
        self.recomputations += 1
        n = self._size.size
        if n == 0:
            self._busy_since = None
            self._rate = np.zeros(0)
            self._link_rate[:] = 0
            self._timer_version += 1
            return
        if self._busy_since is None:
            self._busy_since = self.env.now
        flow_of_pair, link_of_pair = self._pair_flow, self._pair_link
        self._rate = max_min_rates(flow_of_pair, link_of_pair, self.links.capacity, n)
        self._link_rate = np.bincount(link_of_pair, weights=self._rate[flow_of_pair], minlength=len(self.links))
        np.maximum(self.link_peak_util, self._link_rate / self.links.capacity, out=self.link_peak_util)
        for observe in self.observers:
            observe(self.env.now, self._link_rate)
        finish = self._remaining / self._rate
        self._timer_version += 1
        version = self._timer_version
        self.env.timeout(float(finish.min())).callbacks.append(lambda _ev: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version != self._timer_version:
            return
        self._advance()
        self._complete_finished()
        # What the finished flows' owners start now joins the same batch.
        self._request_batch()
