"""A flow-level network in SimPy: transfers share link bandwidth by max-min fairness.

The model (SimGrid's "flow" fidelity, see docs/network.md, "Network model"):

1. A transfer of N bytes from GPU a to GPU b follows one route (``LinkTable.route``).
2. It first pays the route's latency (the sum of its links' latencies), which does not contend.
3. Then it becomes an active flow. Active flows share every link's bandwidth max-min fairly
   (:mod:`sim.network.fairshare`); rates are recomputed whenever a flow starts or ends (only
   those that may change, :mod:`sim.network.fairshare.refill`; none when a flow ends on links that
   froze no other flow, or starts on spare capacity without slowing a faster flow:
   :func:`~sim.network.fairshare.step.rate_unchanged`), and all starts and ends at the same instant are
   batched into one recomputation.
4. It completes when its last byte has drained: ``t_end = t_start + latency + time to drain``.

So one flow alone takes ``latency + N / min(bandwidth on route)``; k equal flows on one link get
``bandwidth / k`` each.

A bundle (:meth:`Fabric.transfer_bundle`) is many flows that progress together, such as a whole
all-to-all: one flow of the mean flow's size whose weight on each link is the number of its flows
there (its bytes on that link / the mean flow's bytes), optionally no faster than a rate limit (a
private link of that capacity). Alone it drains each link's bytes no faster than the link allows;
beside other traffic it counts on a link as that many flows. Ignored: packets, headers, congestion
control, PFC pauses and incast loss, switch buffers, NIC/PCIe message-rate limits, adaptive
routing; latency is paid once per transfer.

This module turns transfers into flows; :mod:`sim.network.flowloop` (the base class) runs them:
arrivals, batches, the recomputations and the completion timer, on the solver's state it owns.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import networkx as nx
import numpy as np
import simpy

from ..checks import InputError, number
from .api import GpuTotals, checked_bytes, checked_rate, completion, open_bundle
from .flowloop import Flow, FlowLoop, event_at
from .links import LinkTable
from .nccl_rates import NcclRates


class RouteSet(NamedTuple):
    """The routes of many GPU pairs (``srcs[i]`` to ``dsts[i]``), prepared once by
    :meth:`Fabric.route_set` for :meth:`Fabric.transfer_set`: ``groups`` holds, per route latency
    (s; the first pair's first), (latency, the pairs' indices, their links one after the other,
    each one's number of links)."""

    srcs: list[int]
    dsts: list[int]
    groups: list[tuple[float, list[int], np.ndarray, list[int]]]


class Fabric(FlowLoop, GpuTotals):
    """Transfers between GPUs (global indices) over the links of ``graph``.

    ``transfer(src, dst, nbytes)`` returns a SimPy event that fires when the last byte lands.
    Link statistics accumulate in ``link_bytes`` (bytes), ``link_busy_s`` (s with any traffic)
    and ``link_peak_util`` (max of carried rate / bandwidth)."""

    def __init__(self, env: simpy.Environment, graph: nx.Graph | LinkTable, completion_window: float = 0.0,
                 incremental: bool = True, gpu_rate: float | None = None, nccl_rates: NcclRates | None = None):
        """``incremental``: recompute only the rates that may change when flows start or end (the
        bottleneck test, then the set of :mod:`sim.network.fairshare.refill`); the others keep theirs.
        ``False`` recomputes every rate each time.

        ``gpu_rate`` (bytes/s): the most a GPU's communication kernels move per direction, however
        fast its links (the SMs they run on: :mod:`sim.training.comm.kernels`). Each GPU then has an outgoing
        and an incoming engine, two more links of that capacity that every :meth:`transfer` from
        or to it crosses (a forwarded message counts for its forwarder). ``None``: no limit.
        ``nccl_rates``: what the NCCL collectives on this fabric are charged beyond NCCL's own model
        (:mod:`sim.network.nccl_rates`; ``None``: nothing)."""
        number(completion_window, "completion_window", low=0, high=1, high_open=True)
        if gpu_rate is not None:
            number(gpu_rate, "gpu_rate (bytes/s)", low=0, low_open=True, high=1e18)
        self.links = graph if isinstance(graph, LinkTable) else LinkTable(graph)
        self._n_links = len(self.links)
        self._n_gpus = len(self.links.gpus)
        # The event loop's links: the topology's, then the GPUs' engines (out, then in) when
        # ``gpu_rate`` is set; bundles' rate limits are added links (FlowLoop.add_link).
        capacity = self.links.capacity.astype(float)
        self.gpu_rate = gpu_rate
        self.nccl_rates = nccl_rates
        if gpu_rate is not None:
            capacity = np.concatenate([capacity, np.full(2 * self._n_gpus, float(gpu_rate))])
        # Observers (a LinkTimeline) see the topology's links only: the engines come after them and
        # carry rates whenever they bind (links faster than ``gpu_rate``, such as 450 GB/s NVLink).
        super().__init__(env, capacity, completion_window, incremental, observed=self._n_links)
        self._routes: dict[tuple[int, int], tuple[np.ndarray, float]] = {}   # (links, engines too; latency)
        if gpu_rate is not None:
            # An engine that cannot bind is left out (the same rates, fewer pairs): a GPU's flows
            # leave it over its own links, so their total rate is at most those links' capacity.
            gpu_nodes = np.asarray(self.links.gpus)
            out_cap = np.bincount(self.links.src, weights=self.links.capacity, minlength=len(self.links.names))
            in_cap = np.bincount(self.links.dst, weights=self.links.capacity, minlength=len(self.links.names))
            self._engine_out = out_cap[gpu_nodes] > gpu_rate
            self._engine_in = in_cap[gpu_nodes] > gpu_rate
        self._sent = [0.0] * self._n_gpus
        self._received = [0.0] * self._n_gpus

    @property
    def link_bytes(self) -> np.ndarray:
        """Bytes each link of the topology has carried (up to the last update, see :meth:`sync`)."""
        return self.link_state.carried[:self._n_links]

    @property
    def link_busy_s(self) -> np.ndarray:
        """Seconds each link of the topology carried any traffic."""
        return self.link_state.busy[:self._n_links]

    @property
    def link_peak_util(self) -> np.ndarray:
        """The highest carried rate / bandwidth each link of the topology has seen."""
        return self.link_state.peak[:self._n_links]

    # -- public API ---------------------------------------------------------------------------
    def transfer(self, src: int, dst: int, nbytes: float, on_done=None, max_rate: float | None = None
                 ) -> simpy.Event | None:
        """Send ``nbytes`` from GPU ``src`` to GPU ``dst``. Returns a SimPy event that fires when
        the last byte arrives, or, given ``on_done``, calls ``on_done()`` then and returns None
        (cheaper: what collectives use). Same GPU: instant. Zero bytes: the route's latency.
        ``max_rate`` (bytes/s): the transfer's own bound (the kernel moving it), a private link of
        that capacity on its route while it lasts; None: none."""
        nbytes = self._checked(src, dst, nbytes)
        done, on_done = completion(self.env, on_done)
        if src == dst:
            on_done()
            return done
        self.enqueue(*self._new_flow(src, dst, nbytes, on_done, checked_rate(max_rate)))
        return done

    def transfer_at(self, at: float, src: int, dst: int, nbytes: float, on_done, max_rate: float | None = None
                    ) -> None:
        """:meth:`transfer` as if called at simulated time ``at`` (> now), calling ``on_done()``
        when the last byte arrives, without a process that waits until ``at`` to start it: the
        flow's latency runs from ``at`` (the same instants, to the last bit, as a process that
        yields ``env.timeout(at - now)`` and then calls :meth:`transfer`), so sends that a model
        knows ahead cost one event each instead of two and a process switch."""
        now = self.env.now
        start = now + (at - now)                # where such a timeout would put the clock
        if not start > now:
            self.transfer(src, dst, nbytes, on_done, max_rate)
            return
        nbytes = self._checked(src, dst, nbytes)
        if src == dst:
            event_at(self.env, start).callbacks.append(lambda _ev: on_done())
            return
        flow, latency = self._new_flow(src, dst, nbytes, on_done, checked_rate(max_rate))
        if latency > 0:
            self.enqueue(flow, latency, start + latency)
        else:                                   # as transfer() then: pending at once, even with no bytes
            event_at(self.env, start).callbacks.append(lambda _ev: self.start_now(flow))

    def route_bandwidth(self, src: int, dst: int) -> float:
        """Bytes/s a flow from GPU ``src`` to GPU ``dst`` gets alone: the least capacity on its route
        (the GPUs' engines included; infinite from a GPU to itself)."""
        self._checked(src, dst, 0.0)
        if src == dst:
            return math.inf
        links, _ = self._routes.get((src, dst)) or self._route(src, dst)
        return float(self.link_state.capacity[links].min())

    def route_set(self, srcs: list[int], dsts: list[int]) -> RouteSet:
        """The routes of the GPU pairs ``srcs[i]`` to ``dsts[i]`` (two GPUs each), grouped by
        latency for :meth:`transfer_set`."""
        groups: dict[float, tuple[list, list]] = {}
        for i, (src, dst) in enumerate(zip(srcs, dsts)):
            self._checked(src, dst, 0.0)
            if src == dst:
                raise InputError(f"a route set's pairs join two GPUs; pair {i} is GPU {src} to itself")
            links, latency = self._routes.get((src, dst)) or self._route(src, dst)
            index, found = groups.setdefault(latency, ([], []))
            index.append(i)
            found.append(links)
        return RouteSet(list(srcs), list(dsts), [(latency, index, np.concatenate(found), [r.size for r in found])
                                                 for latency, (index, found) in groups.items()])

    def transfer_set(self, routes: RouteSet, nbytes: float, on_done: list) -> None:
        """:meth:`transfer` of ``nbytes`` over each pair of ``routes``, calling ``on_done[i]()``
        when pair i's last byte lands: the same flows, started as blocks (one per latency)."""
        nbytes = float(number(nbytes, "bytes", low=0, high=1e18))
        if nbytes == 0:
            for src, dst, done in zip(routes.srcs, routes.dsts, on_done):
                self.transfer(src, dst, nbytes, done)
            return
        sent, received = self._sent, self._received
        for src, dst in zip(routes.srcs, routes.dsts):
            sent[src] += nbytes
            received[dst] += nbytes
        for latency, index, links, lengths in routes.groups:
            self.enqueue(Flow(links, nbytes, [on_done[i] for i in index], lengths=lengths), latency)

    def _checked(self, src: int, dst: int, nbytes) -> float:
        """``nbytes`` as a float, once the GPUs and the size are known good (else one line naming them)."""
        return checked_bytes(self._n_gpus, src, dst, nbytes)

    def _new_flow(self, src: int, dst: int, nbytes: float, on_done, max_rate: float | None = None
                  ) -> tuple[Flow, float]:
        """(the flow of a transfer between two GPUs, its route's latency); its bytes count as sent
        and received. A ``max_rate`` below the route's bandwidth is a private link of that capacity
        on the flow's route, given back when it ends."""
        route = self._routes.get((src, dst))
        if route is None:
            route = self._route(src, dst)
        links, latency = route
        self._sent[src] += nbytes
        self._received[dst] += nbytes
        if max_rate is not None and max_rate < self.link_state.capacity[links].min():
            private = self.add_link(max_rate)
            links, inner = _appended(links, private), on_done

            def on_done(private=private, inner=inner):
                self.release_link(private)
                inner()
        return Flow(links, nbytes, on_done), latency

    def transfer_bundle(self, load, latency: float | None = None, min_seconds: float = 0.0,
                        on_done=None) -> simpy.Event | None:
        """Start a bundle: the flows of ``load`` (a :class:`~sim.network.loads.LinkLoad`: bytes per
        link, bytes injected by its messages) progressing together, as one flow of the mean
        message's size (``load.size``) whose weight on each link is its bytes there / that size.
        It pays ``latency`` first (default: the load's longest route latency), then drains no
        faster than its links allow nor in less than ``min_seconds`` (its own speed alone, e.g. a
        collective's measured time: a private link of ``size / min_seconds`` bytes/s). Returns an
        event, or calls ``on_done()`` (as :meth:`transfer`)."""
        latency, done, on_done, handled = open_bundle(self.env, load, latency, min_seconds, self._n_links, on_done)
        if handled:
            return done
        links, weights = load.links, load.weights
        if min_seconds > 0:
            private = self.add_link(load.size / min_seconds)
            links, weights = _appended(links, private), _appended(weights, 1.0)
            inner = on_done

            def on_done(private=private, inner=inner):
                self.release_link(private)
                inner()
        self.enqueue(Flow(links, load.size, on_done, weights), latency)
        return done

    def _route(self, src: int, dst: int) -> tuple[np.ndarray, float]:
        """(links, latency) of a transfer from ``src`` to ``dst``: the route's links and, with
        ``gpu_rate``, the two GPUs' engines (kept per pair)."""
        links, latency = self.links.route(src, dst)
        if self.gpu_rate is not None:
            L, n = self._n_links, self._n_gpus
            engines = ([L + src] if self._engine_out[src] else []) + ([L + n + dst] if self._engine_in[dst] else [])
            if engines:
                links = np.append(links, engines)          # int64: the route's links and ints
        route = self._routes[(src, dst)] = (links, latency)
        return route


def _appended(values: np.ndarray, last) -> np.ndarray:
    """``np.append(values, last)`` for a 1-d ``values``, without its conversions (a bundle's
    every start pays it)."""
    out = np.empty(values.size + 1, dtype=values.dtype)
    out[:-1] = values
    out[-1] = last
    return out
