"""Per-link statistics of a fabric as a pandas DataFrame.

Columns: ``link`` ("u->v"), ``src``, ``dst``, ``kind`` (nvlink, pcie, ib), ``bandwidth_GBps``
(per direction), ``bytes``, ``busy_s`` (time with any traffic), ``peak_util`` (max carried rate /
bandwidth), ``mean_util`` (bytes / (bandwidth x window)), with ``window_s`` the time observed.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .fabric import Fabric


def link_stats(fabric: Fabric, window_s: float | None = None, only_used: bool = True) -> pd.DataFrame:
    links = fabric.links
    fabric.sync()
    window = fabric.env.now if window_s is None else window_s
    idx = np.flatnonzero(fabric.link_bytes > 0) if only_used else np.arange(len(links))
    df = pd.DataFrame({
        "link": [links.link_name(i) for i in idx],
        "src": [links.names[links.src[i]] for i in idx],
        "dst": [links.names[links.dst[i]] for i in idx],
        "kind": [links.kind[i] for i in idx],
        "bandwidth_GBps": links.capacity[idx] / 1e9,
        "bytes": fabric.link_bytes[idx],
        "busy_s": fabric.link_busy_s[idx],
        "peak_util": fabric.link_peak_util[idx],
        "mean_util": fabric.link_bytes[idx] / (links.capacity[idx] * window) if window > 0 else 0.0,
    })
    return df.sort_values(["bytes", "link"], ascending=[False, True], kind="stable").reset_index(drop=True)


def busiest_links(fabric: Fabric, k: int = 5, window_s: float | None = None) -> list[dict]:
    """The ``k`` links that carried the most bytes, as plain dicts (for JSON)."""
    df = link_stats(fabric, window_s).head(k)
    return [{"link": r.link, "kind": r.kind, "bytes": float(r.bytes), "mean_util": float(r.mean_util),
             "peak_util": float(r.peak_util)} for r in df.itertuples()]
