"""Max-min fair rates by progressive filling (water-filling), vectorized with numpy.

Every flow starts at rate 0; all rates rise together until some link is full; the flows through
that link (its bottleneck) are frozen at their current rate; the others keep rising until the next
link fills, and so on. The result is the unique max-min fair allocation: no flow's rate can grow
without shrinking a flow whose rate is no larger.

Cost: O(iterations x pairs), where pairs = sum of route lengths and iterations = the number of
distinct bottleneck levels (a handful for the symmetric traffic of collectives), not O(flows^2).
"""
from __future__ import annotations

import numpy as np


def max_min_rates(flow_of_pair: np.ndarray, link_of_pair: np.ndarray, capacity: np.ndarray,
                  n_flows: int) -> np.ndarray:
    """Rates (bytes/s) of ``n_flows`` flows; pair k says flow ``flow_of_pair[k]`` uses link
    ``link_of_pair[k]``; ``capacity[l]`` is link l's bytes/s. A flow using no link gets ``inf``."""
    rates = np.full(n_flows, np.inf)
    if n_flows == 0 or flow_of_pair.size == 0:
        return rates
    # Work on the links actually used, renumbered 0..U-1.
    count = np.bincount(link_of_pair, minlength=capacity.size)
    used = np.flatnonzero(count)
    local = np.empty(capacity.size, dtype=np.int64)
    local[used] = np.arange(used.size)
    link_local = local[link_of_pair]
    remaining = capacity[used].astype(float)
    users = count[used].astype(float)
    flows = flow_of_pair
    links = link_local
    marked = np.zeros(n_flows, dtype=bool)
    share = np.empty(used.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        while flows.size:
            np.divide(remaining, users, out=share)
            share[users <= 0] = np.inf
            step = share.min()
            if not np.isfinite(step):
                break
            bottleneck = share <= step * (1 + 1e-12) + 1e-300
            newly = flows[bottleneck[links]]
            rates[newly] = step
            marked[newly] = True
            keep = ~marked[flows]
            counts = np.bincount(links, weights=~keep, minlength=used.size)
            remaining -= step * counts
            users -= counts
            np.maximum(remaining, 0.0, out=remaining)
            flows, links = flows[keep], links[keep]
    return rates
