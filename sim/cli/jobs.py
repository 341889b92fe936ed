"""``python -m sim jobs A.yaml B.yaml [--topology T] [--placement packed|interleaved]``: several
training jobs on one cluster, each alone and all together (:mod:`sim.jobs`).

Printed (and in ``--json``; ``--out DIR`` writes ``jobs.csv`` and ``jobs_shared_links.csv``): a row
per job (its GPUs' nodes, step alone and shared, the slowdown, the exposed communication alone and
shared) and the links two or more jobs loaded, each job's bytes on them.
"""
from __future__ import annotations

import string

from ..checks import InputError
from .collective import parse_ranks


def job_names(count: int) -> list[str]:
    """``A``, ``B``, ... (then ``J27``, ...)."""
    letters = string.ascii_uppercase
    return [letters[i] if i < len(letters) else f"J{i + 1}" for i in range(count)]


def cmd_jobs(args) -> int:
    from ..jobs import StepJob, jobs_text, run_jobs
    from ..moe.specs import load_scenario
    overrides = {"topology": args.topology, "communication": args.communication, "network": args.network}
    names = job_names(len(args.scenarios))
    jobs = [StepJob(name, load_scenario(scenario, **overrides), args.mode) for name, scenario in
            zip(names, args.scenarios)]
    placement = args.placement
    if args.gpus:
        if len(args.gpus) != len(jobs):
            raise InputError(f"--gpus: give one list per job ({len(jobs)}), got {len(args.gpus)}")
        placement = {job.name: parse_ranks(text, 10 ** 9) for job, text in zip(jobs, args.gpus)}
    result = run_jobs(jobs, placement)
    result.jobs.insert(1, "scenario", list(args.scenarios))
    if args.out:
        from pathlib import Path

        from ..io import overwriting, write_csv_atomic
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        with overwriting(args.force):
            write_csv_atomic(result.jobs, out / "jobs.csv")
            write_csv_atomic(result.links, out / "jobs_shared_links.csv")
    if args.json:
        from ..io import json_text
        print(json_text({"topology": result.topology, "gpus": result.gpus, "placement": result.placement,
                         "network": result.backend, "jobs": result.jobs.to_dict(orient="records"),
                         "shared_links": result.links.head(args.top).to_dict(orient="records"),
                         "shared_link_count": len(result.links), "wall_s": result.wall_s}))
    else:
        print(jobs_text(result, args.top))
    return 0


def add_arguments(p) -> None:
    p.add_argument("scenarios", nargs="+", metavar="SCENARIO",
                   help="a job: a scenario preset or YAML (one step of it); jobs are named A, B, ... in this order")
    p.add_argument("--topology", help="the cluster every job runs on (default: the jobs' own, which must agree)")
    p.add_argument("--placement", choices=("packed", "interleaved"), default="packed",
                   help="whole nodes per job: the lowest free ones in order (packed, default) or spread evenly "
                        "over the free ones (interleaved)")
    p.add_argument("--gpus", action="append",
                   help="explicit GPUs of a job, whole nodes (e.g. 0-1023); once per job, in order")
    p.add_argument("--communication", choices=("live", "measured"), default="live",
                   help="all-to-alls on the shared network among the other jobs' traffic (live, default) or "
                        "measured alone (then only pipeline sends and data-parallel traffic meet)")
    p.add_argument("--network", help="network backend: maxmin (default) or analytical (no contention: no job "
                                     "slows another)")
    p.add_argument("--mode", choices=("auto", "representative", "full"), default="auto",
                   help="representative pipeline or every rank, per job")
    p.add_argument("--top", type=int, default=10, help="shared links to print (default 10)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", help="write jobs.csv and jobs_shared_links.csv into this folder")
    p.add_argument("--force", action="store_true", help="replace files in --out even if this tool did not write them")


COMMANDS = {"jobs": ("several jobs on one cluster: each alone and all together", add_arguments, cmd_jobs)}
