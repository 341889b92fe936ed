"""All-to-all measurements that are the same flow system up to renaming links, measured once.

A measurement job runs the all-to-alls of a set of EP groups on a fresh fabric
(:func:`sim.training.comm.alltoall.measure_all_to_alls`). Two jobs whose groups carry the same traffic (token
counts per GPU and per node, the same shape, bytes, algorithm, chunks, completion window and SM
rate) over routes that are the same up to renaming links (:func:`same_routes`: equal lengths,
corresponding links of equal bandwidth and latency, one consistent one-to-one renaming) are the
same flow system: every flow meets the same rates at the same moments, so their groups end at the
same times and their links carry the same bytes. :class:`TwinJobs` finds such twins so that only
one of each class runs; :func:`renamed_stats` gives a twin's link statistics from its class's.

On a large cluster this is what keeps the measurement sub-linear: 2,048 GPUs a stage at EP 64 are
32 EP groups, most of them alike (inside one leaf, or across two leaves the same way), so a stage's
30 separate runs become a few.
"""
from __future__ import annotations

import numpy as np

from ...network import LinkTable


def route_signature(links: LinkTable, pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(number of links of each pair's route, the routes' links one after the other):
    :meth:`LinkTable.routes`, which finds them together."""
    return links.routes(pairs)


def same_routes(links: LinkTable, a: tuple, b: tuple) -> bool:
    """Whether two :func:`route_signature` s (of corresponding pairs) are the same routes up to
    renaming links: equal lengths, corresponding links of equal bandwidth and latency, and one
    consistent one-to-one renaming of ``a``'s links into ``b``'s (so the same pairs share links).
    Messages of equal bytes over such pairs are the same flow system: they take the same time on
    an empty fabric."""
    (len_a, la), (len_b, lb) = a, b
    if len_a.shape != len_b.shape or (len_a != len_b).any():
        return False
    if (links.capacity[la] != links.capacity[lb]).any() or (links.latency[la] != links.latency[lb]).any():
        return False
    pairs = np.unique(la * len(links) + lb)          # the renaming, one entry per (a link, b link)
    return pairs.size == np.unique(la).size == np.unique(lb).size


def traffic_key(job: tuple) -> tuple:
    """What a job's flow system depends on besides its routes: each group's size and token counts
    (per GPU pair and per node pair, as bytes of the arrays) and the job's other arguments."""
    groups, *rest = job
    return (tuple((len(gpus), traffic.gpu_tokens.tobytes(), traffic.gpu_tokens.shape, traffic.node_tokens.tobytes(),
                   traffic.node_tokens.shape) for gpus, traffic in groups), tuple(rest))


class TwinJobs:
    """Remembers measured jobs by class: :meth:`twin_of` names an earlier job that is the same
    flow system as a new one, or files the new one as its class's first."""

    def __init__(self, links: LinkTable):
        self.links = links
        self._classes: dict[tuple, list[tuple]] = {}   # traffic key -> [(job name, signature)]

    def twin_of(self, name, job: tuple, pairs: list[tuple[int, int]]) -> tuple | None:
        """(the earlier job's name, its signature, this job's signature) if an earlier job is this
        one's twin (``pairs``: every GPU pair its all-to-alls may send between, group after group),
        else ``None`` (and this job is remembered)."""
        signature = route_signature(self.links, pairs)
        members = self._classes.setdefault(traffic_key(job), [])
        for other, other_signature in members:
            if same_routes(self.links, other_signature, signature):
                return other, other_signature, signature
        members.append((name, signature))
        return None


def renamed_stats(frame, links: LinkTable, a: tuple, b: tuple):
    """The link statistics (:func:`sim.network.link_stats`'s frame) of job ``a``'s twin ``b`` (their
    route signatures): each of ``a``'s links renamed to the link of ``b`` it corresponds to, sorted
    as :func:`~sim.network.link_stats` sorts; ``None`` if a link of the frame is on none of ``a``'s
    routes (then measure the twin itself)."""
    la, lb = a[1], b[1]
    names = {}
    for x, y in zip(la.tolist(), lb.tolist()):
        names.setdefault(links.link_name(x), y)
    if not set(frame["link"]).issubset(names):
        return None
    out = frame.copy()
    ids = [names[name] for name in frame["link"]]
    out["link"] = [links.link_name(i) for i in ids]
    out["src"] = [links.names[links.src[i]] for i in ids]
    out["dst"] = [links.names[links.dst[i]] for i in ids]
    return out.sort_values(["bytes", "link"], ascending=[False, True], kind="stable").reset_index(drop=True)


__all__ = ["TwinJobs", "renamed_stats", "route_signature", "same_routes", "traffic_key"]
