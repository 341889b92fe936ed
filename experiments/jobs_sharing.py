"""Two DeepSeek-V3 jobs of 1,024 H800 on one cluster, placed packed and interleaved: what each loses
to the other over two steps back to back, job B arriving 10 s after job A.

The cluster is the what-if variant of DeepSeek's 2,048-GPU fat tree with one plane and 4:1
oversubscribed leaves (``topologies/variants/h800-2048-one-plane-oversub4.yaml``), where an EP
group's all-to-alls cross the spine; the jobs are the DeepSeek-V3 preset at DP 64
(``examples/jobs/deepseek-v3-1024.yaml``), all-to-alls live on the shared network (:mod:`sim.jobs`).
B's late arrival puts its first step beside the second half of A's first and its last step beside
A's idle tail: the slowdown of a job is the mean over its steps.

Writes ``results/jobs.csv`` (a row per placement and job: ``policy`` (packed or interleaved),
``scenario_file``, ``topology``, ``steps``, then :func:`sim.jobs.run_jobs`'s columns: alone and
shared mean step times (s), slowdown (%), exposed communication (s), arrival and end (s on the
cluster's clock)) and ``results/jobs_shared_links.csv`` (per placement, the 20 most loaded links
both jobs used: GB per job, mean utilisation over the shared run); each row carries ``sim_code``
(the simulator's fingerprint, as a sweep's rows do). A placement already in ``jobs.csv`` with the
same settings and code is not run again (an interrupted run resumes); ``plots`` draws
``figures/jobs.png`` from the CSV. About 3.5 minutes on 2 cores.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.common import script_main
from sim.io import check_output, write_csv_atomic

ROOT = Path(__file__).resolve().parent.parent            # the files below, from any working folder
SCENARIO = str(ROOT / "examples" / "jobs" / "deepseek-v3-1024.yaml")
TOPOLOGY = str(ROOT / "topologies" / "variants" / "h800-2048-one-plane-oversub4.yaml")
POLICIES = ("packed", "interleaved")
LINKS_KEPT = 20
SETTINGS = ("scenario_file", "topology", "steps", "arrive_b_s", "sim_code")


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="results")
    parser.add_argument("--scenario", default=SCENARIO, help="each job's scenario (a preset or a YAML file)")
    parser.add_argument("--topology", default=TOPOLOGY, help="the cluster (a preset or a YAML file)")
    parser.add_argument("--steps", type=int, default=2, help="steps each job runs back to back (default 2)")
    parser.add_argument("--arrive", type=float, default=10.0, help="when job B arrives, seconds (default 10)")


def main(argv=None) -> int:
    return script_main(__doc__, add_arguments, run, argv)


def one_placement(policy: str, settings: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both jobs under ``policy``: their rows and the most loaded shared links, each row with the
    policy and ``settings``."""
    from sim.jobs import StepJob, job_length, run_jobs
    from sim.training.model.specs import load_scenario
    run = load_scenario(settings["scenario_file"], topology=settings["topology"], communication="live")
    jobs = [StepJob("A", run, label=Path(settings["scenario_file"]).name),
            StepJob("B", run, label=Path(settings["scenario_file"]).name, arrive_s=settings["arrive_b_s"])]
    result = run_jobs(jobs, policy, length=job_length(settings["steps"], None, "--steps"))
    tag = {"policy": policy, **settings}
    rows = result.jobs.assign(**tag)
    links = result.links.head(LINKS_KEPT).assign(**tag)
    return rows[[*tag, *result.jobs.columns]], links[[*tag, *result.links.columns]]


def run(args) -> int:
    out = Path(args.out)
    jobs_csv, links_csv = check_output(out / "jobs.csv"), check_output(out / "jobs_shared_links.csv")
    from sim.sweep_rows import code_fingerprint
    settings = {"scenario_file": args.scenario, "topology": args.topology, "steps": args.steps,
                "arrive_b_s": float(args.arrive), "sim_code": code_fingerprint()}
    rows, links = kept(jobs_csv, settings), kept(links_csv, settings)
    for policy in POLICIES:
        if not rows.empty and policy in set(rows["policy"]):
            print(f"{policy}: kept from {jobs_csv} (same settings)")
            continue
        new_rows, new_links = one_placement(policy, settings)
        rows = pd.concat([rows, new_rows], ignore_index=True)
        links = pd.concat([links, new_links], ignore_index=True)
        write_csv_atomic(links, links_csv)          # links first: a policy counts as done once its rows are in
        write_csv_atomic(rows, jobs_csv)
        for r in new_rows.itertuples():
            print(f"{policy}: job {r.job} {r.alone_s:.4g} s alone, {r.shared_s:.4g} s shared ({r.slowdown_pct:+.1f}%), "
                  f"{r.steps_shared} steps from {r.arrive_s:g} s")
    print(f"wrote {jobs_csv} and {links_csv}")
    return 0


def kept(path: Path, settings: dict) -> pd.DataFrame:
    """The rows of an earlier run's ``path`` made with the same ``settings`` (none if it is not there
    or was made otherwise)."""
    if not path.is_file():
        return pd.DataFrame()
    df = pd.read_csv(path)
    if df.empty or any(c not in df.columns for c in ("policy", *SETTINGS)):
        return pd.DataFrame()
    same = pd.Series(True, index=df.index)
    for key, value in settings.items():
        same &= df[key].astype(str) == str(value)
    return df[same].reset_index(drop=True)


if __name__ == "__main__":
    raise SystemExit(main())
