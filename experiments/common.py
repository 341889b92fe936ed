"""Shared command line of the sweep scripts: ``--out``, ``--scheduler``, ``--workers``, ``--serial``,
``--point-timeout``, ``--force``; exit status as ``python -m sim`` (:mod:`sim.cli`)."""
from __future__ import annotations

from pathlib import Path

from sim.checks import arg
from sim.cli import Parser, guarded
from sim.io import overwriting
from sim.sweep import DEFAULT_POINT_TIMEOUT_S, MIN_POINT_TIMEOUT_S, run_sweep


def script_main(doc: str, add_arguments, body, argv=None) -> int:
    """Parse ``argv`` (``add_arguments(parser)`` plus ``--force``) and run ``body(args)`` with the
    exit-status rules of ``python -m sim``: one line for bad input, 130 for Ctrl-C."""
    def call() -> int:
        parser = Parser(description=doc.splitlines()[0])
        add_arguments(parser)
        parser.add_argument("--force", action="store_true",
                            help="replace output files even if this tool did not write them")
        args = parser.parse_args(argv)
        with overwriting(args.force):
            return body(args)
    return guarded(call)


def compile_kernels() -> float:
    """Compile the fabric's numba kernels in this process (one step of the ``tiny`` preset), so that
    processes started after it (a sweep's workers) load them from numba's on-disk cache instead of
    each compiling them again: about 20 s of one core each on a fresh checkout, well under a second
    once cached. Returns the seconds it took."""
    import time

    from sim.training.model.specs import load_scenario
    from sim.training.step import simulate_step
    t0 = time.perf_counter()
    simulate_step(load_scenario("tiny"))
    return time.perf_counter() - t0


def skipped(points: list[dict], reason) -> list[dict]:
    """The ``points`` for which ``reason(point)`` is ``None``; for the others, one note per reason
    on stderr (``note: skipped 4 points: EP 256 does not divide ...``)."""
    import sys
    kept: list[dict] = []
    left: dict[str, int] = {}
    for p in points:
        why = reason(p)
        if why is None:
            kept.append(p)
        else:
            left[why] = left.get(why, 0) + 1
    for why, n in left.items():
        print(f"note: skipped {n} point{'s' if n > 1 else ''}: {why}", file=sys.stderr)
    return kept


def sweep_parser(doc: str) -> Parser:
    parser = Parser(description=doc.splitlines()[0])
    parser.add_argument("--out", default="results", help="folder for <name>.csv (default results)")
    parser.add_argument("--scheduler", default=None,
                        help="Dask scheduler address (tcp://HOST:8786); default: a local cluster, one worker per core")
    parser.add_argument("--workers", type=arg(integer=True, low=1, high=1_024), default=None,
                        help="workers of the local cluster")
    parser.add_argument("--serial", action="store_true", help="run in this process, no Dask")
    parser.add_argument("--point-timeout", type=arg(low=MIN_POINT_TIMEOUT_S), default=DEFAULT_POINT_TIMEOUT_S,
                        help=f"seconds a point may run before it gets a timeout row (default {DEFAULT_POINT_TIMEOUT_S:g})")
    parser.add_argument("--force", action="store_true",
                        help="replace the output CSV even if it is not one this tool wrote")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def sweep_main(name: str, point, points, doc: str, argv=None, scenario: str | None = None, skip=None) -> int:
    """Run sweep ``name``: ``points()`` through ``point`` into ``--out/<name>.csv``. ``scenario``:
    the sweep varies a scenario, this one by default; ``--scenario`` names another (a preset or a
    user's YAML file), which every point then carries in its ``scenario`` column. ``skip(base,
    point)`` (with a scenario; ``base`` its RunSpec): why a point cannot run on it, or ``None``; the
    points it names are left out, one note on stderr per reason."""
    def call() -> int:
        parser = sweep_parser(doc)
        if scenario is not None:
            parser.add_argument("--scenario", default=scenario,
                                help=f"the scenario to vary: a preset or a YAML file (default {scenario})")
        args = parser.parse_args(argv)
        out = Path(args.out) / f"{name}.csv"
        grid_points = points()
        if scenario is not None:
            from sim.training.model.specs import load_scenario
            base = load_scenario(args.scenario)         # a bad name is one line now, not an error per point
            grid_points = [{"scenario": args.scenario, **p} for p in grid_points]
            if skip is not None:
                grid_points = skipped(grid_points, lambda p: skip(base, p))
        df = run_sweep(point, grid_points, out, scheduler="serial" if args.serial else args.scheduler,
                       workers=args.workers, progress=not args.no_progress, desc=name,
                       point_timeout_s=args.point_timeout, force=args.force)
        failed = int((df["status"] != "ok").sum()) if "status" in df else 0
        print(f"wrote {out}: {len(df)} rows, {failed} failed")
        return 0
    return guarded(call)
