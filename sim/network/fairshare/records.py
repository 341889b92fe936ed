"""The fair-share solver's state as named records: numba-friendly named tuples of arrays, passed
whole to the compiled kernels (numba compiles a named tuple as a struct of its fields; a field is
read as fast as an argument of its own).

* :class:`Flows`: per active flow (numbered 0..n-1 in order of arrival).
* :class:`Pairs`: per (flow, link) pair, contiguous per flow and in flow order.
* :class:`Links`: per link (the topology's, the GPUs' engines, private links), its rate and
  tallies and the bottleneck bookkeeping.
* :class:`Scratch`: per-link work arrays of the refill, and the links flows left since the last
  solve.
* :class:`Instant`: the scalars of one recomputation.
* :class:`Index`: pairs grouped by link and by flow, for the heap fillings.

The arrays are the owner's (:class:`~sim.network.flowloop.FlowLoop`): a kernel changes them in
place; a record is rebuilt (cheaply) when its arrays grow.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

Flows = namedtuple("Flows", "size remaining rate flow_id bottleneck")
Flows.__doc__ = """Per flow: ``size`` and ``remaining`` (bytes), ``rate`` (bytes/s), ``flow_id`` (the
owner's id), ``bottleneck`` (the link that froze it in its last filling)."""

Pairs = namedtuple("Pairs", "flow link weight")
Pairs.__doc__ = """Per (flow, link) pair: its flow, its link, and its ``weight``: how many times the
flow's rate it puts on the link (1 for a plain flow; a bundle's flows there, :mod:`.oracle`)."""

Links = namedtuple("Links", "capacity rate users fastest froze peak carried busy since")
Links.__doc__ = """Per link: ``capacity`` and ``rate`` (bytes/s, kept up to date as rates change),
``users`` (flows with a rate on it), ``fastest`` (at least the fastest of them, per unit of weight:
exact after a refill, an upper bound once flows end), ``froze`` (how many flows it froze),
``peak`` (highest rate / capacity seen), tallies ``carried`` (bytes) and ``busy`` (s with any
flow) run up to ``since`` (s)."""

Scratch = namedtuple("Scratch", "gen local dirty")
Scratch.__doc__ = """Per-link work arrays of the refill (``gen``: marks compared against ever-increasing
ticks; ``local``: a link's slot) and ``dirty``: the links flows left since the last solve."""

Instant = namedtuple("Instant", "n kept n_pairs n_dirty now tick incremental")
Instant.__doc__ = """One recomputation: ``n`` flows, of which ``kept`` had a rate (the others, to
n-1, are new), ``n_pairs`` pairs, ``n_dirty`` links left (``Scratch.dirty[:n_dirty]``), the time
``now`` (s), ``tick`` (a value ``Scratch.gen`` does not hold yet) and whether to refill
``incremental`` ly (only the rates that may change) or every flow."""

Index = namedtuple("Index", "link_ptr by_link flow_ptr by_flow")
Index.__doc__ = """Pairs grouped by link (link l's: ``by_link[link_ptr[l]:link_ptr[l + 1]]``) and by flow
(flow f's: ``by_flow[flow_ptr[f]:flow_ptr[f + 1]]``)."""


def new_flows(size: int) -> Flows:
    """Room for ``size`` flows."""
    return Flows(np.zeros(size), np.zeros(size), np.zeros(size), np.zeros(size, dtype=np.int64),
                 np.zeros(size, dtype=np.int64))


def new_pairs(size: int) -> Pairs:
    """Room for ``size`` pairs (of weight 1)."""
    return Pairs(np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64), np.ones(size))


def new_links(capacity: np.ndarray) -> Links:
    """Links of ``capacity`` (bytes/s), idle."""
    L = capacity.size
    return Links(np.asarray(capacity, dtype=float).copy(), np.zeros(L), np.zeros(L, dtype=np.int64), np.zeros(L),
                 np.zeros(L, dtype=np.int64), np.zeros(L), np.zeros(L), np.zeros(L), np.zeros(L))


def new_scratch(n_links: int, dirty: int = 256) -> Scratch:
    return Scratch(np.zeros(n_links, dtype=np.int64), np.zeros(n_links, dtype=np.int64),
                   np.zeros(dirty, dtype=np.int64))


def grown(record, used: int, size: int, fill=0):
    """``record`` with every array ``size`` long, its first ``used`` entries kept, the others ``fill``."""
    arrays = []
    for old in record:
        new = np.full(size, fill, dtype=old.dtype)
        new[:used] = old[:used]
        arrays.append(new)
    return type(record)(*arrays)


__all__ = ["Flows", "Index", "Instant", "Links", "Pairs", "Scratch", "grown", "new_flows", "new_links", "new_pairs",
           "new_scratch"]
