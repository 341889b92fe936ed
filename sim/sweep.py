"""Sweeps: a factorial product of points, run on Dask, written to CSV as points finish.

* Each point is a dict of config values; its row is those values (config columns first), then the
  metrics the point function returns, then ``status`` (``ok`` or ``error``) and ``error``.
* Rows are written as they finish, atomically (temporary file + rename), so an interrupted sweep
  loses no finished row; run it again and it resumes with the points not yet in the CSV. Each row
  carries ``sim_code``, a fingerprint of the simulator's source and presets: rows computed by other
  code (an older version) are not resumed but run again, so a CSV never mixes two models.
* A failed point is recorded with its error and does not stop the sweep.
* By default the points run on an embedded ``LocalCluster`` (one worker process per core);
  ``scheduler="tcp://HOST:8786"`` uses an existing Dask cluster; ``scheduler="serial"`` runs them in
  this process. The final CSV is sorted in point order, so every way of running gives the same
  file (the ``wall_s`` column aside).
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from .io import write_csv_atomic

STATUS_COLUMNS = ("status", "error", "wall_s", "sim_code")
_ROOT = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """``src-`` and 12 hex digits of SHA-256 over the source and preset files of ``sim/`` and
    ``topologies/`` (paths and contents, in path order): it changes whenever the model could.
    Computed once per process."""
    h = hashlib.sha256()
    for package in ("sim", "topologies"):
        for path in sorted((_ROOT / package).rglob("*")):
            if path.suffix in (".py", ".yaml", ".yml") and path.is_file():
                h.update(str(path.relative_to(_ROOT)).encode())
                h.update(path.read_bytes())
    return "src-" + h.hexdigest()[:12]      # never read back from CSV as a number


def grid(**factors: Iterable) -> list[dict]:
    """The factorial product of the factors, in order: ``grid(a=[1, 2], b="xy")``."""
    names = list(factors)
    return [dict(zip(names, values)) for values in itertools.product(*(list(v) for v in factors.values()))]


def point_key(point: dict) -> str:
    """A point's identity as text, the same before and after a CSV round trip."""
    return json.dumps({k: str(v) for k, v in point.items()}, sort_keys=True)


def _run_point(fn: Callable[[dict], dict], point: dict) -> dict:
    t0 = time.perf_counter()
    try:
        metrics = fn(dict(point))
        row = {**point, **metrics, "status": "ok", "error": ""}
    except Exception as exc:  # a failed point is data, not a crash
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        row = {**point, "status": "error", "error": last}
    row["wall_s"] = time.perf_counter() - t0
    row["sim_code"] = code_fingerprint()    # of the code that ran it (a Dask worker's, maybe remote)
    return row


def _finished_keys(path: Path, columns: list[str], code: str) -> tuple[list[dict], set[str]]:
    """The rows of ``path`` computed by simulator code ``code`` and their point keys."""
    if not path.exists():
        return [], set()
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    rows = [r for r in df.to_dict("records") if r.get("sim_code") == code]
    if len(rows) < len(df):
        print(f"{path}: {len(df) - len(rows)} of {len(df)} rows were computed by other simulator code "
              f"(sim_code is not {code}); running them again", file=sys.stderr)
    return rows, {point_key({c: row.get(c) for c in columns}) for row in rows}


def run_sweep(fn: Callable[[dict], dict], points: list[dict], out_csv: str | Path, scheduler: str | None = None,
              workers: int | None = None, progress: bool = True, desc: str = "sweep") -> pd.DataFrame:
    """Run ``fn(point) -> metrics`` over ``points`` and keep ``out_csv`` up to date."""
    out = Path(out_csv)
    columns = list(points[0]) if points else []
    code = code_fingerprint()
    done_rows, done = _finished_keys(out, columns, code)
    todo = [p for p in points if point_key(p) not in done]
    rows = list(done_rows)
    order = {point_key(p): i for i, p in enumerate(points)}

    def save() -> None:
        df = pd.DataFrame(rows)
        if not df.empty:
            df["_order"] = [order.get(point_key({c: r.get(c) for c in columns}), len(order)) for r in rows]
            df = df.sort_values("_order", kind="stable").drop(columns="_order")
            metric_cols = [c for c in df.columns if c not in columns and c not in STATUS_COLUMNS]
            df = df[columns + metric_cols + [c for c in STATUS_COLUMNS if c in df.columns]]
        write_csv_atomic(df, out)

    bar = _progress(len(points), len(points) - len(todo), desc) if progress else None
    if todo:
        if scheduler == "serial":
            for p in todo:
                rows.append(_run_point(fn, p))
                save()
                bar and bar.update(1)
        else:
            _run_dask(fn, todo, scheduler, workers, rows, save, bar)
    save()
    if bar:
        bar.close()
    return pd.read_csv(out) if out.exists() else pd.DataFrame()


def _run_dask(fn, todo, scheduler, workers, rows, save, bar) -> None:
    from dask.distributed import Client, LocalCluster, as_completed
    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        n = workers or os.cpu_count() or 1
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        futures = [client.submit(_run_point, fn, p, pure=False) for p in todo]
        for fut in as_completed(futures):
            rows.append(fut.result())
            save()
            if bar:
                bar.update(1)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _progress(total: int, done: int, desc: str):
    from tqdm import tqdm
    return tqdm(total=total, initial=done, desc=desc, unit="point")
