"""An analytical network: every transfer as if alone on its route, no contention.

The model (ASTRA-sim's analytical backend without congestion; the ``analytical`` backend of
:func:`~sim.network.backends.build_network`):

1. A transfer of N bytes from GPU a to GPU b follows the route the max-min fabric uses
   (``LinkTable.route``) and first pays its latency ``L`` (the sum of its links' latencies).
2. It then drains at ``B``, the least bandwidth on its route (and no faster than ``gpu_rate``,
   the GPU's communication kernels, when set), whatever else crosses those links:
   ``t_end = t_start + L + N / B``.
3. A bundle (the flows of a :class:`~sim.network.loads.LinkLoad` together) drains at
   ``r = min over its links of capacity / weight`` (and no faster than ``size / min_seconds``):
   ``t_end = t_start + latency + size / r``, its own links' sharing and nothing else's.

So a transfer that meets no other traffic takes exactly what the max-min fabric gives it (the same
expression, to the last bit); beside other traffic it is faster, or as fast. A link may then
carry more than its bandwidth: ``link_peak_util`` above 1 says by how much the analytical model
let more through than the link can, which is where it is optimistic. Link statistics: ``bytes``
carried up to now (rate x time), ``busy_s`` (time with any transfer draining), ``peak_util`` (the
highest carried rate / bandwidth). No rate is ever recomputed (``recomputations`` stays 0);
observers (a :class:`~sim.network.LinkTimeline`) are told the links' rates whenever a transfer
starts or stops draining.
"""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import simpy

from ..checks import InputError, number
from .api import GpuTotals, checked_bytes, checked_rate, completion, open_bundle
from .fabric import RouteSet
from .flowloop import event_at
from .links import LinkTable
from .nccl_rates import NcclRates


class AnalyticalNetwork(GpuTotals):
    """Transfers between GPUs (global indices) over the links of ``graph``, each alone on its
    route (see the module). The same calls as :class:`~sim.network.Fabric`
    (:class:`~sim.network.api.Network`)."""

    def __init__(self, env: simpy.Environment, graph: nx.Graph | LinkTable, gpu_rate: float | None = None,
                 nccl_rates: NcclRates | None = None):
        """``gpu_rate`` (bytes/s): the most a GPU's communication kernels move per direction (a
        transfer drains no faster); ``None``: no limit. ``nccl_rates``: as the max-min fabric's."""
        if gpu_rate is not None:
            number(gpu_rate, "gpu_rate (bytes/s)", low=0, low_open=True, high=1e18)
        self.env = env
        self.links = graph if isinstance(graph, LinkTable) else LinkTable(graph)
        self.gpu_rate = gpu_rate
        self.nccl_rates = nccl_rates
        self.observers: list = []
        self.recomputations = 0
        n = len(self.links)
        self._n_links, self._n_gpus = n, len(self.links.gpus)
        self._capacity = self.links.capacity.astype(float)
        self._rate = np.zeros(n)                 # bytes/s each link carries now (kept for observers)
        self._draining = np.zeros(n, dtype=np.int64)   # transfers draining on each link now (for observers)
        self._pending: list[tuple] = []          # (begin, end, links, rates) of every transfer that drains
        self._tallied = (0.0, 0)                 # (time, transfers) of the statistics' last tally
        self._carried, self._busy, self._peak = np.zeros(n), np.zeros(n), np.zeros(n)
        self._sent = [0.0] * self._n_gpus
        self._received = [0.0] * self._n_gpus
        self._routes: dict[tuple[int, int], tuple[np.ndarray, float, float]] = {}   # links, latency, bandwidth

    @property
    def link_bytes(self) -> np.ndarray:
        """Bytes each link has carried up to now."""
        self._tally()
        return self._carried

    @property
    def link_busy_s(self) -> np.ndarray:
        """Seconds each link had a transfer draining, up to now."""
        self._tally()
        return self._busy

    @property
    def link_peak_util(self) -> np.ndarray:
        """The highest carried rate / bandwidth of each link (above 1: more than it can carry)."""
        self._tally()
        return self._peak

    def transfer(self, src: int, dst: int, nbytes: float, on_done=None, max_rate: float | None = None
                 ) -> simpy.Event | None:
        """Send ``nbytes`` from GPU ``src`` to GPU ``dst``: an event that fires when the last byte
        lands, or ``on_done()`` then (and None). Same GPU: instant. ``max_rate`` (bytes/s): the
        transfer's own bound beside its route's."""
        nbytes = checked_bytes(self._n_gpus, src, dst, nbytes)
        done, on_done = completion(self.env, on_done)
        if src == dst:
            on_done()
            return done
        self._start(self.env.now, src, dst, nbytes, on_done, checked_rate(max_rate))
        return done

    def transfer_at(self, at: float, src: int, dst: int, nbytes: float, on_done, max_rate: float | None = None
                    ) -> None:
        """:meth:`transfer` as if called at simulated time ``at``, calling ``on_done()`` when the
        last byte lands."""
        now = self.env.now
        start = now + (at - now)
        if not start > now:
            self.transfer(src, dst, nbytes, on_done, max_rate)
            return
        nbytes = checked_bytes(self._n_gpus, src, dst, nbytes)
        if src == dst:
            event_at(self.env, start).callbacks.append(lambda _ev: on_done())
            return
        self._start(start, src, dst, nbytes, on_done, checked_rate(max_rate))

    def route_bandwidth(self, src: int, dst: int) -> float:
        """Bytes/s a transfer from ``src`` to ``dst`` drains at (infinite from a GPU to itself)."""
        checked_bytes(self._n_gpus, src, dst, 0.0)
        return math.inf if src == dst else self._route(src, dst)[2]

    def route_set(self, srcs: list[int], dsts: list[int]) -> RouteSet:
        """The GPU pairs ``srcs[i]`` to ``dsts[i]`` for :meth:`transfer_set` (their routes are
        found as each transfer starts)."""
        for i, (src, dst) in enumerate(zip(srcs, dsts)):
            checked_bytes(self._n_gpus, src, dst, 0.0)
            if src == dst:
                raise InputError(f"a route set's pairs join two GPUs; pair {i} is GPU {src} to itself")
        return RouteSet(list(srcs), list(dsts), [])

    def transfer_set(self, routes: RouteSet, nbytes: float, on_done: list) -> None:
        """:meth:`transfer` of ``nbytes`` over each pair of ``routes``, calling ``on_done[i]()`` when
        pair i's last byte lands."""
        for src, dst, done in zip(routes.srcs, routes.dsts, on_done):
            self.transfer(src, dst, nbytes, done)

    def transfer_bundle(self, load, latency: float | None = None, min_seconds: float = 0.0,
                        on_done=None) -> simpy.Event | None:
        """The flows of ``load`` together (see the module), after ``latency`` (default: the load's
        longest route latency), in no less than ``min_seconds``."""
        latency, done, on_done, handled = open_bundle(self.env, load, latency, min_seconds, self._n_links, on_done)
        if handled:
            return done
        rate = float((self._capacity[load.links] / load.weights).min())
        if min_seconds > 0:
            rate = min(rate, load.size / min_seconds)
        self._drain(self.env.now + latency, load.links, load.weights * rate, load.size / rate, on_done)
        return done

    def sync(self) -> None:
        """Bring every link's bytes, busy time and peak up to now (read from the properties, they
        always are)."""
        self._tally()

    def _route(self, src: int, dst: int) -> tuple[np.ndarray, float, float]:
        route = self._routes.get((src, dst))
        if route is None:
            links, latency = self.links.route(src, dst)
            bandwidth = float(self._capacity[links].min())
            if self.gpu_rate is not None:
                bandwidth = min(bandwidth, float(self.gpu_rate))
            route = self._routes[(src, dst)] = (links, latency, bandwidth)
        return route

    def _start(self, at: float, src: int, dst: int, nbytes: float, on_done, max_rate: float | None = None) -> None:
        """A transfer that starts at ``at``: its latency, then its bytes at its route's bandwidth
        (at most ``max_rate``)."""
        links, latency, bandwidth = self._route(src, dst)
        if max_rate is not None:
            bandwidth = min(bandwidth, max_rate)
        self._sent[src] += nbytes
        self._received[dst] += nbytes
        begin = at + latency
        if nbytes == 0:
            event_at(self.env, begin).callbacks.append(lambda _ev: on_done())
            return
        self._drain(begin, links, bandwidth, nbytes / bandwidth, on_done)

    def _drain(self, begin: float, links: np.ndarray, rates, seconds: float, on_done) -> None:
        """``rates`` (bytes/s, one for all or one per link) on ``links`` from ``begin`` for
        ``seconds``, then ``on_done()``. The statistics are tallied from these records when read
        (:meth:`sync`); with observers, each start and stop tells them the links' rates."""
        end = begin + seconds
        self._pending.append((begin, end, links, rates))
        if not self.observers:
            event_at(self.env, end).callbacks.append(lambda _ev: on_done())
            return
        rates = np.broadcast_to(np.asarray(rates, dtype=float), links.shape)

        def stop(_ev) -> None:
            self._change(links, -rates, -1)
            on_done()
        if begin > self.env.now:
            event_at(self.env, begin).callbacks.append(lambda _ev: self._change(links, rates, 1))
        else:
            self._change(links, rates, 1)
        event_at(self.env, end).callbacks.append(stop)

    def _change(self, links: np.ndarray, rates: np.ndarray, draining: int) -> None:
        """A transfer starts (``draining`` 1) or stops (-1) carrying ``rates`` on ``links``: the
        observers are told every link's rate."""
        self._draining[links] += draining
        rate = self._rate[links] + rates
        self._rate[links] = np.where(self._draining[links] > 0, rate, 0.0)   # idle: exactly 0
        for observe in self.observers:
            observe(self.env.now, self._rate)

    def _tally(self) -> None:
        """The links' bytes, busy time and peak utilisation up to now, from every transfer's
        (begin, end, links, rates): per link, its rate steps sorted by time (stops before starts
        at one instant), the running rate and number of transfers between steps."""
        now, n = self.env.now, self._n_links
        if not self._pending or self._tallied == (now, len(self._pending)):
            return
        self._tallied = (now, len(self._pending))
        begins = np.array([r[0] for r in self._pending])
        ends = np.minimum(np.array([r[1] for r in self._pending]), now)
        lengths = np.array([r[2].size for r in self._pending])
        links = np.concatenate([r[2] for r in self._pending])
        rates = np.concatenate([np.broadcast_to(np.asarray(r[3], dtype=float), r[2].shape) for r in self._pending])
        begin, end = np.repeat(begins, lengths), np.repeat(ends, lengths)
        keep = begin < end                                # started draining before now
        links, rates, begin, end = links[keep], rates[keep], begin[keep], end[keep]
        self._carried = np.bincount(links, weights=rates * (end - begin), minlength=n)
        at = np.concatenate([begin, end])
        where = np.concatenate([links, links])
        starts = np.concatenate([np.ones(links.size, dtype=np.int64), np.zeros(links.size, dtype=np.int64)])
        order = np.lexsort((starts, at, where))           # by link, then time, stops first
        at, where, starts = at[order], where[order], starts[order]
        step = np.concatenate([rates, -rates])[order]
        count = np.cumsum(2 * starts - 1)                 # transfers draining after each step (exact)
        running = np.cumsum(step)
        first = np.flatnonzero(np.r_[True, where[1:] != where[:-1]])          # each link's first step
        before = np.repeat(np.r_[0.0, running][first], np.diff(np.r_[first, where.size]))
        rate = np.where(count > 0, running - before, 0.0)
        same = np.r_[where[1:] == where[:-1], False]
        dt = np.where(same, np.r_[at[1:], 0.0] - at, 0.0)
        self._busy = np.bincount(where, weights=np.where(count > 0, dt, 0.0), minlength=n)
        self._peak = np.zeros(n)
        np.maximum.at(self._peak, where, rate / self._capacity[where])


__all__ = ["AnalyticalNetwork"]
