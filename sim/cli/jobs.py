"""``python -m sim jobs A.yaml B.yaml [--topology T] [--placement packed|interleaved]``: several
training jobs on one cluster, each alone and all together (:mod:`sim.jobs`).

Printed (and in ``--json``; ``--out DIR`` writes ``jobs.csv``, ``jobs_shared_links.csv`` and the
figure ``jobs.png``): a row per job (its GPUs' nodes, its steps, the mean step alone and shared,
the slowdown, the exposed communication alone and shared, its arrival and end) and the links two or
more jobs loaded, each job's bytes on them. Each job runs one step, ``--steps N`` back to back or
steps within ``--window SECONDS``, from its ``--arrive`` time (:class:`~sim.jobs.JobLength`).
"""
from __future__ import annotations

from ..checks import InputError


def is_jobs_file(name: str) -> bool:
    """Whether ``name`` is a YAML file with a ``jobs:`` list (else: a scenario)."""
    from pathlib import Path
    path = Path(name)
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return False
    from ..checks import read_yaml
    doc = read_yaml(path)
    return isinstance(doc, dict) and "jobs" in doc


def cmd_jobs(args) -> int:
    from ..jobs import (
        StepJob,
        job_length,
        job_names,
        jobs_text,
        jobs_title,
        load_jobs_file,
        parse_gpus,
        plot_jobs,
        run_jobs,
    )
    from ..training.model.specs import load_scenario
    if len(args.scenarios) == 1 and is_jobs_file(args.scenarios[0]):
        for flag, key, value in (("--gpus", "gpus", args.gpus), ("--arrive", "arrive_s", args.arrive)):
            if value:
                raise InputError(f"{flag}: a jobs file gives each job's {key} itself")
        given = None if args.steps is None and args.window is None else \
            job_length(args.steps, args.window, "--steps/--window")       # replaces the file's steps or window
        jobs, placement, length = load_jobs_file(
            args.scenarios[0], given, topology=args.topology, placement=args.placement,
            communication=args.communication, network=args.network, mode=args.mode)
    else:
        overrides = {"topology": args.topology, "communication": args.communication or "live", "network": args.network}
        arrivals = per_job(args.arrive, len(args.scenarios), "--arrive") or [0.0] * len(args.scenarios)
        jobs = [StepJob(name, load_scenario(scenario, **overrides), args.mode or "auto", scenario, arrive)
                for name, scenario, arrive in zip(job_names(len(args.scenarios)), args.scenarios, arrivals)]
        placement = args.placement or "packed"
        if args.gpus:
            placement = {job.name: parse_gpus(text, "--gpus")
                         for job, text in zip(jobs, per_job(args.gpus, len(jobs), "--gpus"))}
        length = job_length(args.steps, args.window, "--steps/--window")
    result = run_jobs(jobs, placement, link_timeline=bool(args.trace), length=length)
    if args.out:
        from pathlib import Path

        from ..io import overwriting, write_csv_atomic
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        with overwriting(args.force):
            write_csv_atomic(result.jobs, out / "jobs.csv")
            write_csv_atomic(result.links, out / "jobs_shared_links.csv")
            plot_jobs(result.jobs, jobs_title(result), out / "jobs.png")
    if args.trace:
        from ..io import overwriting
        from ..trace import write_jobs_trace
        with overwriting(args.force):
            write_jobs_trace(result.results, args.trace)
    if args.json:
        from ..io import json_text
        print(json_text({"topology": result.topology, "gpus": result.gpus, "placement": result.placement,
                         "network": result.backend, "jobs": result.jobs.to_dict(orient="records"),
                         "shared_links": result.links.head(args.top).to_dict(orient="records"),
                         "shared_link_count": len(result.links), "wall_s": result.wall_s}))
    else:
        print(jobs_text(result, args.top))
    return 0


def per_job(values: list | None, count: int, flag: str) -> list | None:
    """A flag given once per job (``--gpus``, ``--arrive``): its values, one per job, or one line."""
    if values and len(values) != count:
        raise InputError(f"{flag}: give one per job ({count}), got {len(values)}")
    return values


def add_arguments(p) -> None:
    p.add_argument("scenarios", nargs="+", metavar="SCENARIO",
                   help="a job: a scenario preset or YAML (its steps), jobs named A, B, ... in this order; or one "
                        "jobs file (YAML with jobs: [{scenario, name, gpus, arrive_s}], topology, placement, "
                        "communication, network, mode, steps or window_s)")
    p.add_argument("--topology", help="the cluster every job runs on (default: the jobs' own, which must agree)")
    p.add_argument("--placement", choices=("packed", "interleaved"),
                   help="whole nodes per job: the lowest free ones in order (packed, default) or spread evenly "
                        "over the free ones (interleaved)")
    p.add_argument("--gpus", action="append",
                   help="explicit GPUs of a job, whole nodes (e.g. 0-1023); once per job, in order")
    p.add_argument("--steps", type=int,
                   help="steps each job runs back to back, each when its previous one ended (default 1)")
    p.add_argument("--window", type=float, metavar="SECONDS",
                   help="instead of --steps: each job runs steps back to back until one ends after this many "
                        "seconds of the cluster's clock")
    p.add_argument("--arrive", type=float, action="append", metavar="SECONDS",
                   help="when a job starts in the shared run (seconds; default 0); once per job, in order")
    p.add_argument("--communication", choices=("live", "measured"),
                   help="all-to-alls on the shared network among the other jobs' traffic (live, default) or "
                        "measured alone (then only pipeline sends and data-parallel traffic meet)")
    p.add_argument("--network", help="network backend: maxmin (default) or analytical (no contention: no job "
                                     "slows another)")
    p.add_argument("--mode", choices=("auto", "representative", "full"),
                   help="representative pipeline or every rank, per job")
    p.add_argument("--top", type=int, default=10, help="shared links to print (default 10)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", help="write jobs.csv, jobs_shared_links.csv and jobs.png (each job alone and shared) "
                                 "into this folder")
    p.add_argument("--trace", help="write a Chrome/Perfetto trace (JSON) of the shared run: a group of processes per "
                                   "job, and the shared network's busiest links")
    p.add_argument("--force", action="store_true",
                   help="replace files in --out or --trace even if this tool did not write them")


COMMANDS = {"jobs": ("several jobs on one cluster: each alone and all together", add_arguments, cmd_jobs)}
