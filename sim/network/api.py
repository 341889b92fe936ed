"""The network a job talks to: the few calls a job may make (:class:`Network`), and the checks
both backends share; :mod:`sim.network.backends` builds one by name.

A job (a training step, a collective measurement) sees a network only through :class:`Network`:
it starts transfers, bundles and route sets, reads link statistics, and asks the clock
(``env``). It never reaches into how rates are found. Two backends implement it:

==============  ===============================================================================
``maxmin``      :class:`~sim.network.fabric.Fabric`: flows share each link's bandwidth max-min
                fairly, recomputed whenever a flow starts or ends (SimGrid's "flow" fidelity).
``analytical``  :class:`~sim.network.analytical.AnalyticalNetwork`: each transfer alone on its
                route (latency + bytes / the route's least bandwidth), no contention between
                transfers (ASTRA-sim's analytical backend without its congestion model).
==============  ===============================================================================

Both agree on a transfer that meets no other traffic, to the last bit; under contention the
max-min backend is slower (or as fast). Units: bytes, seconds, bytes/s; GPUs by their global
index in the link table.
"""
from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

import numpy as np
import simpy

from ..checks import InputError, number
from .links import LinkTable

@runtime_checkable
class Network(Protocol):
    """What a job may ask of a network (see the module)."""

    env: simpy.Environment
    links: LinkTable
    observers: list[Callable[[float, np.ndarray], None]]   # told (now, each link's rate) when rates change
    recomputations: int                                    # rate recomputations so far (0: none needed)

    @property
    def num_gpus(self) -> int: ...

    def transfer(self, src: int, dst: int, nbytes: float, on_done=None, max_rate: float | None = None
                 ) -> simpy.Event | None:
        """``nbytes`` from GPU ``src`` to GPU ``dst``: an event that fires when the last byte lands,
        or ``on_done()`` then (and None). ``max_rate`` (bytes/s): the transfer's own bound (the
        kernel that moves it), beside its route's links; None: none."""

    def transfer_at(self, at: float, src: int, dst: int, nbytes: float, on_done, max_rate: float | None = None
                    ) -> None:
        """:meth:`transfer` as if called at simulated time ``at`` (>= now)."""

    def route_set(self, srcs: list[int], dsts: list[int]):
        """The routes of many GPU pairs, prepared once for :meth:`transfer_set`."""

    def transfer_set(self, routes, nbytes: float, on_done: list) -> None:
        """:meth:`transfer` of ``nbytes`` over each pair of ``routes``; ``on_done[i]()`` for pair i."""

    def transfer_bundle(self, load, latency: float | None = None, min_seconds: float = 0.0,
                        on_done=None) -> simpy.Event | None:
        """The flows of a :class:`~sim.network.loads.LinkLoad` progressing together, after
        ``latency``, in no less than ``min_seconds``."""

    def route_bandwidth(self, src: int, dst: int) -> float:
        """Bytes/s a transfer from ``src`` to ``dst`` gets alone."""

    def sync(self) -> None:
        """Bring the link statistics up to now."""

    @property
    def link_bytes(self) -> np.ndarray: ...

    @property
    def link_busy_s(self) -> np.ndarray: ...

    @property
    def link_peak_util(self) -> np.ndarray: ...

    @property
    def bytes_sent(self) -> np.ndarray: ...

    @property
    def bytes_received(self) -> np.ndarray: ...


class GpuTotals:
    """What both backends keep per GPU: ``num_gpus`` and the bytes each GPU put on the wire
    (forwarded bytes count for the forwarder) and received, in ``_sent`` and ``_received``
    (lists of ``_n_gpus`` floats their transfers add to)."""

    _n_gpus: int
    _sent: list
    _received: list

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


def checked_bytes(n_gpus: int, src: int, dst: int, nbytes) -> float:
    """``nbytes`` of a transfer between GPUs ``src`` and ``dst`` as a float, once the GPUs (of
    ``n_gpus``) and the size are known good; else one line naming them."""
    if not (0 <= src < n_gpus and 0 <= dst < n_gpus):
        raise InputError(f"GPU index out of range: src={src}, dst={dst}; this fabric has GPUs 0..{n_gpus - 1}")
    if not (isinstance(nbytes, float) and 0.0 <= nbytes <= 1e18):     # the common case, checked cheaply
        nbytes = number(nbytes, "bytes", low=0, high=1e18)
    return float(nbytes)


def checked_rate(max_rate) -> float | None:
    """A transfer's own bound ``max_rate`` (bytes/s) once known good (None: no bound); else one line."""
    if max_rate is None:
        return None
    return float(number(max_rate, "max_rate (bytes/s)", low=0, low_open=True, high=1e18))


def completion(env: simpy.Environment, on_done):
    """(an event, its ``succeed``) when ``on_done`` is None, else (None, ``on_done``): how a
    transfer or bundle tells its end either way."""
    if on_done is not None:
        return None, on_done
    done = simpy.Event(env)
    return done, done.succeed


def open_bundle(env: simpy.Environment, load, latency: float | None, min_seconds: float, n_links: int, on_done):
    """What a bundle's start checks and sets up on either backend: (its latency, default the load's
    longest route latency; the event to return; the call at its end; whether it is already taken
    care of: a load on no link ends after its latency alone). Bad ``min_seconds``, ``latency``, or a
    link beyond the ``n_links`` of the topology: one line."""
    latency = load.latency if latency is None else latency
    if not 0 <= min_seconds < 1e9 or not 0 <= latency < 1e6:      # also refuses NaN
        raise InputError(f"bundle min_seconds must be in [0, 1e9) and latency in [0, 1e6) seconds, "
                         f"got {min_seconds!r} and {latency!r}")
    if load.links.size and load.links[-1] >= n_links:
        raise InputError(f"bundle link out of range: this fabric has links 0..{n_links - 1}")
    done, on_done = completion(env, on_done)
    if load.links.size:
        return latency, done, on_done, False
    if latency > 0:
        env.timeout(latency).callbacks.append(lambda _e: on_done())
    else:
        on_done()
    return latency, done, on_done, True


__all__ = ["GpuTotals", "Network", "checked_bytes", "checked_rate", "completion", "open_bundle"]
