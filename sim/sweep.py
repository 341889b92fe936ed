"""Sweeps: a factorial product of points, run on Dask, written to CSV as points finish.

* Each point is a dict of config values; its row is those values (config columns first), then the
  metrics the point function returns, then ``status`` and ``error``. ``status`` is ``ok``,
  ``error`` (the point raised: ``error`` holds the last line), ``timeout`` (it ran past the
  per-point time limit) or ``error`` with ``worker died: ...`` (it killed its worker twice, see
  :mod:`sim.sweep_dask`). A failed point is a row and does not stop the sweep.
* Rows are written as they finish, atomically (temporary file + rename), so an interrupted sweep
  loses no finished row; run it again and it resumes with the points not yet in the CSV (and those
  that timed out or lost their worker: a longer ``--point-timeout`` gets their answer). Each row
  carries ``sim_code``, a fingerprint of the simulator's source and presets: rows computed by other
  code (an older version) are not resumed but run again, so a CSV never mixes two models.
* The output CSV must be ours (:mod:`sim.io`): a file of the user's at that path is refused unless
  ``force``. Temporaries of an interrupted run are removed at the start. One sweep at a time per
  CSV: a second run given a CSV that a running sweep is writing is refused (:func:`sim.io.sole_writer`).
* By default the points run on an embedded ``LocalCluster`` (one worker process per core);
  ``scheduler="tcp://HOST:8786"`` uses an existing Dask cluster; ``scheduler="serial"`` runs them in
  this process. The final CSV is sorted in point order, so every way of running gives the same
  file (the ``wall_s`` column aside).
"""
from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from .checks import number
from .io import check_output, overwriting, remove_stale_temporaries, sole_writer
from .sweep_rows import STATUS_COLUMNS, SweepTable, code_fingerprint, failed_row, point_key, run_point

DEFAULT_POINT_TIMEOUT_S = 1800.0
MIN_POINT_TIMEOUT_S = 1e-3      # a shorter limit times every point out before it starts



def grid(**factors: Iterable) -> list[dict]:
    """The factorial product of the factors, in order: ``grid(a=[1, 2], b="xy")``."""
    names = list(factors)
    return [dict(zip(names, values)) for values in itertools.product(*(list(v) for v in factors.values()))]


def _finished_rows(path: Path, columns: list[str], code: str) -> list[dict]:
    """The rows of ``path`` computed by simulator code ``code`` (none if the file is empty, or
    unreadable and being replaced with ``--force``)."""
    if not path.exists():
        return []
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError):
        return []               # ours but empty, or a user's file that --force replaces
    if not set(columns) | {"sim_code"} <= set(df.columns):
        return []
    rows = [r for r in df.to_dict("records") if r.get("sim_code") == code]
    if len(rows) < len(df):
        print(f"{path}: {len(df) - len(rows)} of {len(df)} rows were computed by other simulator code "
              f"(sim_code is not {code}); running them again", file=sys.stderr)
    return rows


def run_sweep(fn: Callable[[dict], dict], points: list[dict], out_csv: str | Path, scheduler: str | None = None,
              workers: int | None = None, progress: bool = True, desc: str = "sweep",
              point_timeout_s: float | None = DEFAULT_POINT_TIMEOUT_S, force: bool = False,
              lost_after_s: float = 30.0) -> pd.DataFrame:
    """Run ``fn(point) -> metrics`` over ``points`` and keep ``out_csv`` up to date.

    ``point_timeout_s``: a point running longer gets a ``timeout`` row (``None``: no limit).
    ``lost_after_s``: with Dask, how long the sweep waits with no worker, or for an unreachable
    scheduler, before it stops (:class:`~sim.sweep_dask.ClusterLost`, the rows kept)."""
    out = Path(out_csv)
    if workers is not None:
        number(workers, "workers", integer=True, low=1, high=10_000)
    if point_timeout_s is not None:
        number(point_timeout_s, "point time limit (s)", low=MIN_POINT_TIMEOUT_S)
    with overwriting(force), sole_writer(check_output(out)):   # a second sweep on this CSV is refused
        remove_stale_temporaries(out)                           # left by an interrupted run
        table = SweepTable(out, points, _finished_rows(out, list(points[0]) if points else [], code_fingerprint()))
        todo = [p for p in points if p not in table]
        again = sum(point_key(p) in table.rows for p in todo)
        if again:
            print(f"{out}: {again} row(s) ran past their time limit or lost their worker; running them again",
                  file=sys.stderr)
        bar = _progress(len(points), len(points) - len(todo), desc) if progress else None
        try:
            if todo and scheduler == "serial":
                for p in todo:
                    table.add(run_point(fn, p, point_timeout_s))
                    bar and bar.update(1)
            elif todo:
                from .sweep_dask import run_on_dask
                run_on_dask(fn, todo, table, scheduler, workers, point_timeout_s, lost_after_s, bar)
        finally:
            table.save()
            if bar:
                bar.close()
    return rows_of(out, points)


def rows_of(path: Path, points: list[dict]) -> pd.DataFrame:
    """The rows of ``path`` for ``points`` only: a CSV keeps the rows of other points it was given
    before (another plan's candidates, an earlier grid), which are not this sweep's answer."""
    df = read_rows(path)
    if df.empty or not points:
        return df
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)      # as the resume reads it: same keys
    columns, wanted = list(points[0]), {point_key(p) for p in points}
    mask = [point_key({c: r.get(c, "") for c in columns}) in wanted for r in raw.to_dict("records")]
    return df[mask].reset_index(drop=True)


def read_rows(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return pd.DataFrame()


def _progress(total: int, done: int, desc: str):
    from tqdm import tqdm
    return tqdm(total=total, initial=done, desc=desc, unit="point")


__all__ = ["DEFAULT_POINT_TIMEOUT_S", "MIN_POINT_TIMEOUT_S", "STATUS_COLUMNS", "SweepTable", "code_fingerprint",
           "failed_row", "grid", "point_key", "rows_of", "run_point", "run_sweep"]
