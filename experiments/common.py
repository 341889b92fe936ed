"""Shared command line of the sweep scripts: ``--out``, ``--scheduler``, ``--workers``, ``--serial``."""
from __future__ import annotations

import argparse
from pathlib import Path

from sim.sweep import run_sweep


def sweep_main(name: str, point, points, doc: str, argv=None) -> int:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", default="results", help="folder for <name>.csv (default results)")
    parser.add_argument("--scheduler", default=None,
                        help="Dask scheduler address (tcp://HOST:8786); default: a local cluster, one worker per core")
    parser.add_argument("--workers", type=int, default=None, help="workers of the local cluster")
    parser.add_argument("--serial", action="store_true", help="run in this process, no Dask")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    out = Path(args.out) / f"{name}.csv"
    df = run_sweep(point, points(), out, scheduler="serial" if args.serial else args.scheduler,
                   workers=args.workers, progress=not args.no_progress, desc=name)
    failed = int((df["status"] != "ok").sum()) if "status" in df else 0
    print(f"wrote {out}: {len(df)} rows, {failed} failed")
    return 0
