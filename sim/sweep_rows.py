"""The rows of a sweep: each point's identity (:func:`point_key`), one point run as a row
(:func:`run_point`, :func:`failed_row`), the fingerprint of the code that computed it
(:func:`code_fingerprint`) and the table of rows written as they come (:class:`SweepTable`).

Shared by the sweep's two ways of running points, in this process (:mod:`sim.sweep`) and on Dask
(:mod:`sim.sweep_dask`), which both import it and not each other.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from .io import write_csv_atomic
from .limits import DeadlineExceeded, deadline

STATUS_COLUMNS = ("status", "error", "wall_s", "sim_code")
_ROOT = Path(__file__).resolve().parent.parent

@functools.lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """``src-`` and 12 hex digits of SHA-256 over the source and preset files (Python, YAML, JSON) of ``sim/`` and
    ``topologies/`` (paths and contents, in path order): it changes whenever the model could.
    Computed once per process."""
    h = hashlib.sha256()
    for package in ("sim", "topologies"):
        for path in sorted((_ROOT / package).rglob("*")):
            if path.suffix in (".py", ".yaml", ".yml", ".json") and path.is_file():
                h.update(str(path.relative_to(_ROOT)).encode())
                h.update(path.read_bytes())
    return "src-" + h.hexdigest()[:12]      # never read back from CSV as a number


def point_key(point: dict) -> str:
    """A point's identity as text, the same before and after a CSV round trip."""
    return json.dumps({k: str(v) for k, v in point.items()}, sort_keys=True)


def failed_row(point: dict, status: str, error: str, wall_s: float = 0.0) -> dict:
    return {**point, "status": status, "error": error, "wall_s": wall_s, "sim_code": code_fingerprint()}


def run_point(fn: Callable[[dict], dict], point: dict, timeout_s: float | None = None) -> dict:
    """``fn(point)`` as a row; an exception or a run past ``timeout_s`` (checked by the engine and
    the fabric as they go, :func:`sim.limits.deadline`) becomes a failed row."""
    t0 = time.perf_counter()
    try:
        with deadline(timeout_s):
            metrics = fn(dict(point))
        row = {**point, **metrics, "status": "ok", "error": ""}
    except DeadlineExceeded:
        row = {**point, "status": "timeout", "error": f"ran past the time limit of {timeout_s:g} s per point"}
    except Exception as exc:  # a failed point is data, not a crash
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        row = {**point, "status": "error", "error": last}
    row["wall_s"] = time.perf_counter() - t0
    row["sim_code"] = code_fingerprint()    # of the code that ran it (a Dask worker's, maybe remote)
    return row


def ran_out(row: dict) -> bool:
    """A row that says nothing about its point, only about the run that tried it: a timeout (the
    next run may allow more time) or a lost worker. Run again on resume; a point that raised keeps
    its error row (the same code gives the same error)."""
    return row.get("status") == "timeout" or str(row.get("error")).startswith("worker died")


SAVE_EVERY_S = 1.0      # a sweep's CSV is rewritten at most this often while rows come in, and at its end


class SweepTable:
    """The rows of a sweep, one per point key, written to ``path`` (in point order) as they are
    added, at most every :data:`SAVE_EVERY_S` (a sweep of points that take milliseconds would
    spend its time rewriting the file), and on :meth:`save` (the sweep's end, an interruption)."""

    def __init__(self, path: Path, points: list[dict], rows: list[dict]):
        self.path, self.columns = path, list(points[0]) if points else []
        self.order = {point_key(p): i for i, p in enumerate(points)}
        self.rows = {self.key(r): r for r in rows}
        self._saved = -math.inf                     # time.monotonic() of the last save

    def key(self, row: dict) -> str:
        return point_key({c: row.get(c) for c in self.columns})

    def __contains__(self, point: dict) -> bool:
        return self._answered(point_key(point))

    def _answered(self, key: str) -> bool:
        """Whether the point of ``key`` has its answer: a row that did not run out (:func:`ran_out`)."""
        row = self.rows.get(key)
        return row is not None and not ran_out(row)

    def left(self) -> int:
        """How many of the sweep's points have no answer yet."""
        return sum(not self._answered(key) for key in self.order)

    def add(self, row: dict) -> None:
        self.rows[self.key(row)] = row
        if time.monotonic() - self._saved >= SAVE_EVERY_S:
            self.save()

    def save(self) -> None:
        self._saved = time.monotonic()
        rows = sorted(self.rows.values(), key=lambda r: self.order.get(self.key(r), len(self.order)))
        df = pd.DataFrame(rows)
        if not df.empty:
            metric_cols = [c for c in df.columns if c not in self.columns and c not in STATUS_COLUMNS]
            df = df[self.columns + metric_cols + [c for c in STATUS_COLUMNS if c in df.columns]]
        write_csv_atomic(df, self.path)


__all__ = ["SAVE_EVERY_S", "STATUS_COLUMNS", "SweepTable", "code_fingerprint", "failed_row", "point_key", "ran_out",
           "run_point"]
