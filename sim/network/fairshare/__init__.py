"""The fair-share solver: max-min fair rates of flows over links, and keeping them fair as flows
start and end.

One algorithm, progressive filling (water-filling), written as

* :mod:`.oracle`: :func:`max_min_rates` in numpy, the reference every other form is held to;
* :mod:`.filling`: the compiled fillings (a heap of links, a heap of flows, and :mod:`.scan`'s
  scans) and :func:`fill`, the one place the method is chosen; :func:`rates` is the compiled
  twin of the oracle (pairs in any order);
* :mod:`.refill`: the incremental part: which flows an arrival or a departure may change (the
  refill set), and their filling on what the others leave;
* :mod:`.step`: the kernels of one event (drain, drop the finished flows, solve: the bottleneck
  test, else a refill);
* :mod:`.records`: the state those kernels share, as named records (:class:`Flows`,
  :class:`Pairs`, :class:`Links`, :class:`Scratch`, :class:`Instant`), passed whole;
* :mod:`.heap` (indexed heaps, grouping by key) and :mod:`.tallies` (per-link bytes and busy time).

Compiled with numba where installed (:mod:`sim.network.jit`); plain Python, the same rules,
where not. The event loop that owns the records is :class:`sim.network.flowloop.FlowLoop`.
"""
from .filling import COMPILED, WIDE_FLOW, fill, rates
from .oracle import max_min_rates
from .records import Flows, Index, Instant, Links, Pairs, Scratch, grown, new_flows, new_links, new_pairs, new_scratch
from .step import advance, drop_finished, solve
from .tallies import credit, credit_all

__all__ = ["COMPILED", "WIDE_FLOW", "Flows", "Index", "Instant", "Links", "Pairs", "Scratch", "advance", "credit",
           "credit_all", "drop_finished", "fill", "grown", "max_min_rates", "new_flows", "new_links", "new_pairs",
           "new_scratch", "rates", "solve"]
