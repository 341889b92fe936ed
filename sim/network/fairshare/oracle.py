"""Max-min fair rates by progressive filling (water-filling), in numpy: the oracle the compiled
fillings (:mod:`.filling`, :mod:`.scan`) are held to.

Every flow starts at rate 0; all rates rise together until some link is full; the flows through
that link (its bottleneck) are frozen at their current rate; the others keep rising until the next
link fills, and so on. The result is the unique max-min fair allocation: no flow's rate can grow
without shrinking a flow whose rate is no larger.

Weighted pairs: a pair may carry a weight ``w`` (default 1): a flow at rate ``r`` then loads that
link with ``w x r`` bytes/s, and counts there as ``w`` flows of the fair share. A bundle of flows that
progress together (a collective on the fabric, :meth:`~sim.network.Fabric.transfer_bundle`) is one
flow whose weight on each link is the number of its flows there, in units of its mean flow.

A few vector operations per round over every flow-link pair: O(rounds x pairs), where rounds is
the number of distinct bottleneck levels.
"""
from __future__ import annotations

import numpy as np


def max_min_rates(flow_of_pair: np.ndarray, link_of_pair: np.ndarray, capacity: np.ndarray,
                  n_flows: int, weight_of_pair: np.ndarray | None = None) -> np.ndarray:
    """Rates (bytes/s) of ``n_flows`` flows; pair k says flow ``flow_of_pair[k]`` uses link
    ``link_of_pair[k]`` with weight ``weight_of_pair[k]`` (default 1); ``capacity[l]`` is link l's
    bytes/s. A flow using no link gets ``inf``."""
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
    weights = np.ones(flow_of_pair.size) if weight_of_pair is None else np.asarray(weight_of_pair, dtype=float)
    users = np.bincount(link_local, weights=weights, minlength=used.size)
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
            counts = np.bincount(links, weights=weights * ~keep, minlength=used.size)
            remaining -= step * counts
            users -= counts
            users[np.bincount(links, weights=keep, minlength=used.size) == 0] = 0.0
            np.maximum(remaining, 0.0, out=remaining)
            flows, links, weights = flows[keep], links[keep], weights[keep]
    return rates


__all__ = ["max_min_rates"]
