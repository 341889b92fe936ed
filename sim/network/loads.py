"""What a collective puts on each link: the bytes per link of its messages, for bundles.

A live collective (:meth:`~sim.network.Fabric.transfer_bundle`) is one fabric flow whose weight on a
link is the number of its flows there. :class:`LinkLoad` holds what that needs: the links, the bytes
each carries, and the bytes injected by the collective's messages and their count (so the mean
message, the bundle's size, is ``injected / messages``). A message's bytes count on every link of
its route; a forwarded message (hierarchical all-to-all: IB to the same-index GPU of the target
node, then NVLink inside it) is two messages, as on the fabric.

The messages are exactly those :func:`~sim.network.all_to_all` sends (the pieces of a chunked
message together: chunking changes when bytes move, not how many cross each link), and the
point-to-point sends of many pairs at once (:func:`p2p_load`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..checks import InputError, number
from .collectives import ALGORITHMS, DIRECTIONS
from .links import LinkTable
from .traffic import Traffic


@dataclass(frozen=True)
class LinkLoad:
    """Bytes a collective puts on each of ``links`` (``link_bytes``, same order, all > 0), the bytes
    its ``messages`` messages inject, and the longest route latency among them (seconds)."""

    links: np.ndarray
    link_bytes: np.ndarray
    injected: float
    messages: int
    latency: float = 0.0
    weights: np.ndarray = field(init=False, repr=False, compare=False)   # link_bytes / size

    def __post_init__(self):
        links = np.asarray(self.links, dtype=np.int64)
        nbytes = np.asarray(self.link_bytes, dtype=float)
        if links.ndim != 1 or links.shape != nbytes.shape:
            raise InputError(f"a link load needs one byte count per link, got {links.shape} links and "
                             f"{nbytes.shape} byte counts")
        if nbytes.size and not (np.isfinite(nbytes).all() and nbytes.min() > 0):
            raise InputError("a link load's bytes must be finite and > 0 on every link it lists")
        number(self.injected, "LinkLoad.injected (bytes)", low=0, high=1e18)
        number(self.messages, "LinkLoad.messages", integer=True, low=0)
        number(self.latency, "LinkLoad.latency (s)", low=0, high=1e6)
        if nbytes.size and not (self.injected > 0 and self.messages > 0):
            raise InputError("a link load with bytes on links needs injected bytes > 0 and messages > 0")
        order = np.argsort(links)                # any sort: a link listed twice is refused below
        links, nbytes = links[order], nbytes[order]
        if (np.diff(links) == 0).any():
            raise InputError("a link load lists a link twice: give each link's bytes once")
        if links.size and links[0] < 0:
            raise InputError(f"a link load's links must be link ids >= 0, got {int(links[0])}")
        object.__setattr__(self, "links", links)
        object.__setattr__(self, "link_bytes", nbytes)
        object.__setattr__(self, "weights", nbytes / self.size)   # no link, no message: empty / 0 is empty

    @staticmethod
    def empty() -> "LinkLoad":
        """A load that puts nothing anywhere (no message): 0 bytes, latency 0."""
        return LinkLoad(np.zeros(0, dtype=np.int64), np.zeros(0), 0.0, 0)

    @property
    def size(self) -> float:
        """The mean message (bytes): a bundle's flow size."""
        return self.injected / self.messages if self.messages else 0.0

    def renamed(self, old: np.ndarray, new: np.ndarray) -> "LinkLoad":
        """This load with link ``old[i]`` renamed ``new[i]`` (a one-to-one renaming, repeats
        allowed): the same collective on a twin set of links, e.g. another stage's EP groups whose
        routes are the same up to renaming links (:func:`~sim.training.comm.alltoall.same_routes`). Its bytes
        per link are those computed afresh would be, bit for bit (the same messages, summed in the
        same order); a link the renaming does not name is refused."""
        if not self.links.size:
            return self
        mapping = np.full(max(int(self.links[-1]), int(old.max(initial=0))) + 1, -1, dtype=np.int64)
        mapping[old] = new
        links = mapping[self.links]
        if (links < 0).any():
            raise InputError(f"a link load renamed: link {int(self.links[np.argmax(links < 0)])} has no new name")
        return LinkLoad(links, self.link_bytes, self.injected, self.messages, self.latency)

    @staticmethod
    def of(table: LinkTable, messages: list[tuple[int, int, float]]) -> "LinkLoad":
        """The load of ``messages`` ([(source GPU, destination GPU, bytes)]); same-GPU and empty
        messages carry nothing and do not count."""
        sends = [(a, b, x) for a, b, x in messages if a != b and x > 0]
        if not sends:
            return LinkLoad.empty()
        routes = [table.route(a, b) for a, b, _ in sends]
        links = np.concatenate([r[0] for r in routes])
        nbytes = np.repeat([x for _, _, x in sends], [r[0].size for r in routes])
        per_link = np.bincount(links, weights=nbytes)
        used = np.flatnonzero(per_link > 0)
        return LinkLoad(used, per_link[used], float(sum(x for _, _, x in sends)), len(sends),
                        max(r[1] for r in routes))


def sum_loads(loads: Sequence[LinkLoad]) -> LinkLoad:
    """Several collectives as one bundle (e.g. the all-to-alls of every EP group of a stage)."""
    loads = [x for x in loads if x.messages]
    if not loads:
        return LinkLoad.empty()
    links = np.concatenate([x.links for x in loads])
    used, inverse = np.unique(links, return_inverse=True)
    nbytes = np.bincount(inverse, weights=np.concatenate([x.link_bytes for x in loads]))
    return LinkLoad(used, nbytes, sum(x.injected for x in loads), sum(x.messages for x in loads),
                    max(x.latency for x in loads))


def all_to_all_messages(group: Sequence[int], traffic: Traffic, token_bytes: float, algorithm: str = "hierarchical",
                        direction: str = "dispatch") -> list[tuple[int, int, float]]:
    """The messages (source GPU, destination GPU, bytes) of :func:`~sim.network.all_to_all` with the
    same arguments, each chunked message whole."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    r = traffic.routing
    G, N, tb, g = traffic.gpu_tokens, traffic.node_tokens, float(token_bytes), r.gpus_in_node
    out = []

    def send(a: int, b: int, nbytes: float) -> None:
        src, dst = (a, b) if direction == "dispatch" else (b, a)
        out.append((group[src], group[dst], nbytes))

    if algorithm == "flat":
        for a in range(r.ep):
            for b in range(r.ep):
                if a != b and G[a, b] > 0:
                    send(a, b, G[a, b] * tb)
        return out
    for a in range(r.ep):
        home = r.node_of(a)
        for n in range(r.nodes):
            members = range(n * g, (n + 1) * g)
            if n == home:
                for y in members:
                    if y != a and G[a, y] > 0:
                        send(a, y, G[a, y] * tb)
            elif N[a, n] > 0:
                x = n * g + a % g
                send(a, x, N[a, n] * tb)
                for y in members:
                    if y != x and G[a, y] > 0:
                        send(x, y, G[a, y] * tb)
    return out


def all_to_all_load(table: LinkTable, group: Sequence[int], traffic: Traffic, token_bytes: float,
                    algorithm: str = "hierarchical", direction: str = "dispatch") -> LinkLoad:
    """The :class:`LinkLoad` of one MoE all-to-all (arguments as :func:`~sim.network.all_to_all`)."""
    return LinkLoad.of(table, all_to_all_messages(group, traffic, token_bytes, algorithm, direction))


def p2p_load(table: LinkTable, pairs: Sequence[tuple[int, int]], nbytes: float) -> LinkLoad:
    """The :class:`LinkLoad` of ``nbytes`` sent from each source to its destination in ``pairs``."""
    return LinkLoad.of(table, [(a, b, nbytes) for a, b in pairs])


__all__ = ["LinkLoad", "all_to_all_load", "all_to_all_messages", "p2p_load", "sum_loads"]
