"""Per-link utilization over time: what each link carried in each time bin of a run.

A :class:`LinkTimeline` watches a :class:`~sim.network.Fabric` (its ``observers`` are told the
links' rates after every recomputation; rates are constant in between) and adds rate x time into
bins of ``bin_s`` seconds. It keeps at most ``max_bins`` bins: when a run outgrows them, adjacent
bins are merged and the width doubles, so memory stays ``max_bins x links`` floats whatever the
run's length, and a bin's utilization is exact: bytes carried in the bin / (bandwidth x width).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .fabric import Fabric


class LinkTimeline:
    """Bytes each link carried per time bin, from ``fabric``'s rates (attach before the run)."""

    def __init__(self, fabric: Fabric, bin_s: float = 1e-3, max_bins: int = 256):
        if not (bin_s > 0 and np.isfinite(bin_s)) or max_bins < 2:
            raise ValueError(f"bin_s must be > 0 and max_bins >= 2, got {bin_s!r} and {max_bins!r}")
        self.fabric, self.bin_s, self.max_bins = fabric, float(bin_s), int(max_bins)
        self.bytes = np.zeros((self.max_bins, len(fabric.links)))
        self._t = fabric.env.now
        self._active = np.zeros(0, dtype=np.int64)      # links with traffic since the last recomputation
        self._rates = np.zeros(0)
        fabric.observers.append(self._observe)

    def _observe(self, now: float, link_rates: np.ndarray) -> None:
        self._add(self._t, now)
        self._t = now
        self._active = np.flatnonzero(link_rates > 0)      # (rounding can leave -1e-17 on an idle link)
        self._rates = link_rates[self._active].copy()

    def _add(self, t0: float, t1: float) -> None:
        """Credit the current rates from ``t0`` to ``t1`` to the bins they cover."""
        if t1 <= t0 or not self._active.size:
            return
        while t1 > self.bin_s * self.max_bins:
            self._coarsen()
        first, last = int(t0 // self.bin_s), min(int(t1 // self.bin_s), self.max_bins - 1)
        for b in range(first, last + 1):
            overlap = min(t1, (b + 1) * self.bin_s) - max(t0, b * self.bin_s)
            if overlap > 0:
                self.bytes[b, self._active] += self._rates * overlap

    def _coarsen(self) -> None:
        """Merge bins 2i and 2i + 1 into bin i (an odd count's last bin alone) and double the width."""
        merged = self.bytes[0::2].copy()
        merged[:self.max_bins // 2] += self.bytes[1::2]
        self.bytes[:] = 0.0
        self.bytes[:merged.shape[0]] = merged
        self.bin_s *= 2

    def finish(self, now: float | None = None) -> None:
        """Credit the rates up to ``now`` (default: the simulated time)."""
        now = self.fabric.env.now if now is None else now
        self._add(self._t, now)
        self._t = now

    def utilization(self, links: np.ndarray | None = None, k: int = 16) -> pd.DataFrame:
        """Long table of the ``links`` (default: the ``k`` that carried the most bytes): ``time_s``
        (bin start), ``bin_s``, ``link``, ``kind``, ``utilization`` (bytes in the bin / (bandwidth x
        bin width)), for the bins up to the last one with traffic."""
        table = self.fabric.links
        totals = self.bytes.sum(axis=0)
        if links is None:
            order = np.lexsort((np.arange(totals.size), -totals))
            links = order[:k][totals[order[:k]] > 0]
        used = np.flatnonzero(self.bytes.sum(axis=1) > 0)
        bins = np.arange(used.max() + 1 if used.size else 0)
        rows = []
        for link in links:
            util = self.bytes[bins, link] / (table.capacity[link] * self.bin_s)
            rows.append(pd.DataFrame({"time_s": bins * self.bin_s, "bin_s": self.bin_s,
                                      "link": table.link_name(int(link)), "kind": table.kind[link],
                                      "utilization": util}))
        columns = ["time_s", "bin_s", "link", "kind", "utilization"]
        return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=columns)


__all__ = ["LinkTimeline"]
