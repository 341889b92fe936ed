"""A job's view of a shared network: its own GPU numbers, everyone's links.

A job numbers the GPUs it was given 0, 1, ... (its layout's numbering); :class:`NetworkView`
turns each of its calls into the shared network's call on the same GPUs (``gpus[i]`` for the
job's GPU ``i``), so several jobs' traffic meets on one set of links. Its ``links`` is the shared
table's :meth:`~sim.network.LinkTable.view` (same link ids, the same routes between the same
GPUs), so what a job builds from it (bundles' link loads, ring routes) holds on the shared network.

Besides passing calls on, a view counts the bytes its own job put on each link (``own_link_bytes``,
credited when a transfer or bundle starts: a transfer's bytes on every link of its route, a
bundle's load per link), which is how :mod:`sim.cluster` says who loads a shared link. Link
statistics (``link_bytes`` and the rest) are the shared network's: every job's traffic.
"""
from __future__ import annotations

import numpy as np
import simpy

from .api import Network
from .links import LinkTable


class NetworkView:
    """``network`` as seen by a job given its GPUs ``gpus`` (the network's numbers, in the job's
    order; see the module). The calls of :class:`~sim.network.api.Network`."""

    def __init__(self, network: Network, gpus: list[int]):
        self.network = network
        self.env: simpy.Environment = network.env
        self.links: LinkTable = network.links.view(gpus)
        self.observers = network.observers
        self.gpus = list(gpus)
        self._index = np.asarray(self.gpus, dtype=np.int64)
        self.own_link_bytes = np.zeros(len(self.links))

    @property
    def recomputations(self) -> int:
        return self.network.recomputations

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    def _own(self, src: int, dst: int, nbytes: float) -> tuple[int, int]:
        """The network's numbers of GPUs ``src`` and ``dst``, the transfer's bytes counted as this
        job's on its route."""
        if not (0 <= src < len(self.gpus) and 0 <= dst < len(self.gpus)):
            from ..checks import InputError
            raise InputError(f"GPU index out of range: src={src}, dst={dst}; this job has GPUs 0..{len(self.gpus) - 1}")
        a, b = self.gpus[src], self.gpus[dst]
        if a != b and nbytes > 0:
            self.own_link_bytes[self.links.route(src, dst)[0]] += nbytes
        return a, b

    def transfer(self, src: int, dst: int, nbytes: float, on_done=None, max_rate: float | None = None
                 ) -> simpy.Event | None:
        return self.network.transfer(*self._own(src, dst, nbytes), nbytes, on_done, max_rate)

    def transfer_at(self, at: float, src: int, dst: int, nbytes: float, on_done, max_rate: float | None = None
                    ) -> None:
        self.network.transfer_at(at, *self._own(src, dst, nbytes), nbytes, on_done, max_rate)

    def route_set(self, srcs: list[int], dsts: list[int]):
        return self.network.route_set([self.gpus[s] for s in srcs], [self.gpus[d] for d in dsts])

    def transfer_set(self, routes, nbytes: float, on_done: list) -> None:
        if nbytes > 0:
            _, links = self.network.links.routes(list(zip(routes.srcs, routes.dsts)))
            np.add.at(self.own_link_bytes, links, nbytes)
        self.network.transfer_set(routes, nbytes, on_done)

    def transfer_bundle(self, load, latency: float | None = None, min_seconds: float = 0.0,
                        on_done=None) -> simpy.Event | None:
        if load.links.size and load.links[-1] < self.own_link_bytes.size:
            self.own_link_bytes[load.links] += load.link_bytes
        return self.network.transfer_bundle(load, latency, min_seconds, on_done)

    def route_bandwidth(self, src: int, dst: int) -> float:
        return self.network.route_bandwidth(self.gpus[src], self.gpus[dst])

    def sync(self) -> None:
        self.network.sync()

    @property
    def link_bytes(self) -> np.ndarray:
        return self.network.link_bytes

    @property
    def link_busy_s(self) -> np.ndarray:
        return self.network.link_busy_s

    @property
    def link_peak_util(self) -> np.ndarray:
        return self.network.link_peak_util

    @property
    def bytes_sent(self) -> np.ndarray:
        return self.network.bytes_sent[self._index]

    @property
    def bytes_received(self) -> np.ndarray:
        return self.network.bytes_received[self._index]


__all__ = ["NetworkView"]
