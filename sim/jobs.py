"""Several training jobs on one cluster: each alone, then all together on one network, and what
each loses to the others.

A :class:`StepJob` is one training step of a run (:class:`~sim.training.model.specs.RunSpec`) as a job of a
:class:`~sim.cluster.Cluster`: it builds its scenario on the GPUs it was given (numbered 0, 1, ...
in their order, :meth:`~sim.network.LinkTable.view`) and starts the step's ranks on its view of the
shared network (:meth:`~sim.training.step.MoEStep.start`). :func:`run_jobs` places the jobs once
(:data:`~sim.cluster.PLACEMENTS`), runs each alone on a fresh cluster with that placement (the
same GPUs, the same routes, no other traffic) and then every job at once from time 0 on one
cluster, and reports per job:

* ``alone_s`` and ``shared_s``: its step time alone and beside the others; ``slowdown_pct``:
  ``100 (shared / alone - 1)``;
* ``exposed_comm_alone_s`` and ``exposed_comm_shared_s``: the communication its ranks waited for
  (mean over ranks), where sharing the network shows first;

and per link that two or more jobs loaded (:func:`shared_links`): each job's bytes on it (what its
own transfers, collectives and bundles put there) and their mean utilisation over the shared run.

Traffic meets on the network only where it runs there: pipeline sends, data-parallel
synchronisation and, with ``communication: live`` (the ``jobs`` command's default), the
all-to-alls; measured all-to-alls are timed alone on their own fabric and do not meet the other
jobs. Each job runs one step; both start together at time 0, so a shorter job's last part and
the longer job's tail run without the other (steps repeated back to back are not modelled).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .checks import InputError, gpu_ranges
from .cluster import Allocation, Cluster
from .training.model.specs import RunSpec
from .training.scenario import Scenario
from .training.step import MoEStep, StepResult


@dataclass
class StepJob:
    """One training step of ``run`` as a cluster job named ``name`` (see the module); ``mode`` as
    :class:`~sim.training.step.MoEStep`'s."""

    name: str
    run: RunSpec
    mode: str = "auto"
    label: str = ""                         # what the job runs, as the user named it (a preset or a file)
    _steps: dict = field(default_factory=dict, repr=False)     # allocation's GPUs -> MoEStep (reused)
    own_link_bytes: np.ndarray | None = field(default=None, repr=False)   # of its last start

    @property
    def gpus_needed(self) -> int:
        return self.run.gpus

    def step(self, allocation: Allocation) -> MoEStep:
        """The step on ``allocation``'s GPUs (built once per allocation: its measurements are kept)."""
        key = allocation.gpus
        if key not in self._steps:
            self._steps[key] = MoEStep(Scenario(self.run, gpus=list(allocation.gpus)), self.mode)
        return self._steps[key]

    def start(self, cluster: Cluster, allocation: Allocation, link_timeline: bool = False):
        """Start the step on ``cluster``'s network, on ``allocation``'s GPUs; returns the call that
        gives its :class:`~sim.training.step.StepResult` (and keeps the bytes it put on each link);
        ``link_timeline`` as :meth:`~sim.training.step.MoEStep.start`'s."""
        step = self.step(allocation)
        if not np.array_equal(step.scenario.links.capacity, cluster.links.capacity):
            raise InputError(f"job {self.name!r}: its communication kernels ({self.run.kernels}) scale the links' "
                             "bandwidths otherwise than the cluster's; give every job the same kernels")
        view = cluster.view(allocation)
        finish = step.start(view, link_timeline)

        def result() -> StepResult:
            out = finish()
            self.own_link_bytes = view.own_link_bytes.copy()
            return out
        return result


@dataclass
class JobsResult:
    """What :func:`run_jobs` found: ``jobs`` (a row per job), ``links`` (a row per link two or more
    jobs loaded), the cluster's description and the wall time."""

    jobs: pd.DataFrame
    links: pd.DataFrame
    topology: str
    gpus: int
    placement: str
    backend: str
    wall_s: float
    results: dict = field(default_factory=dict, repr=False)    # job name -> StepResult of the shared run


def cluster_for(jobs: list[StepJob]):
    """The call that makes a fresh cluster of the jobs' topology, network backend and NCCL bound
    (the first job's; the others must agree: one line naming the first that does not). The jobs
    are checked and the first one's scenario assembled once, here."""
    first = Scenario(jobs[0].run)
    for job in jobs[1:]:
        for what, mine, theirs in (("topology", job.run.topology, jobs[0].run.topology),
                                   ("network", job.run.network, jobs[0].run.network),
                                   ("kernels", job.run.kernels, jobs[0].run.kernels)):
            if mine != theirs:
                raise InputError(f"job {job.name!r}: {what} {mine!r}, but job {jobs[0].name!r} has {theirs!r}; "
                                 f"jobs on one cluster share its {what}")
    graph = first.graph
    n = len(graph.graph["gpus"])
    links, gpus_per_node = first.kernels.scale_links(first.topology.links), graph.graph.get("gpus_per_node", n)
    return lambda: Cluster(links, gpus_per_node, first.run.network, first.kernels.nccl_gpu_rate)


def place(jobs: list[StepJob], placement: str | dict, fresh=None) -> dict[str, Allocation]:
    """Each job's GPUs on an empty cluster of theirs (``fresh()``, default :func:`cluster_for`'s),
    by ``placement``: one of :data:`~sim.cluster.PLACEMENTS` for all, or a mapping job name ->
    explicit GPU list."""
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise InputError(f"job names must differ, got {names}")
    cluster = (fresh or cluster_for(jobs))()
    need = sum(job.gpus_needed for job in jobs)
    if need > cluster.num_gpus:
        raise InputError(f"the jobs need {need:,} GPUs together ({', '.join(f'{j.name} {j.gpus_needed:,}' for j in jobs)}"
                         f"); the cluster has {cluster.num_gpus:,}")
    out = {}
    for job in jobs:
        if isinstance(placement, dict):
            gpus = placement[job.name]
            if len(gpus) != job.gpus_needed:
                raise InputError(f"job {job.name!r} needs {job.gpus_needed:,} GPUs, its list names {len(gpus):,}")
            out[job.name] = cluster.allocate(job.name, gpus)
        else:
            out[job.name] = cluster.allocate(job.name, job.gpus_needed, placement)
    return out


def run_jobs(jobs: list[StepJob], placement: str | dict = "packed", link_timeline: bool = False) -> JobsResult:
    """Place ``jobs``, run each alone, then all together (see the module). Every job's step is
    built first (bad input: one line, before anything runs). A job whose run fails gets its error
    in its row (``error``) and the others keep their results; ``link_timeline``: the shared run
    records its busiest links over time (for :func:`~sim.trace.write_jobs_trace`)."""
    if not jobs:
        raise InputError("jobs: give at least one job")
    t0 = time.perf_counter()
    fresh = cluster_for(jobs)
    allocations = place(jobs, placement, fresh)
    for job in jobs:
        job.step(allocations[job.name])
    alone, errors = {}, {}
    for job in jobs:
        try:
            cluster = fresh()
            finish = job.start(cluster, allocations[job.name])
            cluster.run()
            alone[job.name] = finish()
        except InputError:
            raise
        except Exception as exc:                    # noqa: BLE001 (kept in the job's row; the others go on)
            errors[job.name] = f"alone: {type(exc).__name__}: {exc}"
    running = [job for job in jobs if job.name in alone]
    cluster = fresh()
    shared = {}
    try:
        finishes = {job.name: job.start(cluster, allocations[job.name], link_timeline and k == 0)
                    for k, job in enumerate(running)}
        cluster.run()
        for name, finish in finishes.items():
            try:
                shared[name] = finish()
            except Exception as exc:                # noqa: BLE001
                errors[name] = f"shared: {type(exc).__name__}: {exc}"
    except InputError:
        raise
    except Exception as exc:                        # noqa: BLE001 (the shared run as a whole)
        for job in running:
            errors.setdefault(job.name, f"shared run: {type(exc).__name__}: {exc}")
    rows = []
    for job in jobs:
        a, s = alone.get(job.name), shared.get(job.name)
        rows.append({"job": job.name, "scenario": job.label or job.run.description, "gpus": job.gpus_needed, "placement": allocations[job.name].label(),
                     "node_runs": allocations[job.name].runs, "schedule": job.run.schedule,
                     "alone_s": a.step_time_s if a else float("nan"), "shared_s": s.step_time_s if s else float("nan"),
                     "slowdown_pct": 100 * (s.step_time_s / a.step_time_s - 1) if a and s else float("nan"),
                     "exposed_comm_alone_s": a.exposed_comm_s if a else float("nan"),
                     "exposed_comm_shared_s": s.exposed_comm_s if s else float("nan"),
                     **({"error": errors.get(job.name, "")} if errors else {})})
    window = max((r.step_time_s for r in shared.values()), default=0.0)
    own = {job.name: job.own_link_bytes for job in running if job.own_link_bytes is not None}
    links = shared_links(cluster, own, window) if len(own) > 1 else shared_links(cluster, {}, window)
    label = placement if isinstance(placement, str) else "explicit"
    return JobsResult(pd.DataFrame(rows), links, jobs[0].run.topology, cluster.num_gpus, label, cluster.backend,
                      time.perf_counter() - t0, shared)


GPU_NUMBERS = 10 ** 7          # GPU numbers a list may name (the cluster checks its own)
def plot_jobs(result: JobsResult, path: str | Path) -> Path:
    """Each job's step alone and shared (bars, seconds), its slowdown written above: where people
    would rather look than read."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import FIGURE_WIDTH_IN, save_figure
    jobs = result.jobs
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 4.0))
    x = np.arange(len(jobs))
    ax.bar(x - 0.2, jobs.alone_s, 0.4, label="alone", color="#6baed6")
    ax.bar(x + 0.2, jobs.shared_s, 0.4, label="with the other jobs", color="#e6550d")
    for i, row in enumerate(jobs.itertuples()):
        if np.isfinite(row.slowdown_pct):
            ax.annotate(f"{row.slowdown_pct:+.1f}%", (i + 0.2, row.shared_s), ha="center", va="bottom")
    ax.set_xticks(x, [f"{row.job}: {row.gpus:,} GPUs, {row.placement}" for row in jobs.itertuples()], fontsize=8)
    ax.set_ylabel("step time (s)")
    ax.margins(y=0.12)
    ax.set_title(f"{len(jobs)} jobs on {result.topology} ({result.gpus:,} GPUs), {result.placement} placement, "
                 f"{result.backend} network")
    ax.legend(loc="lower right")
    return save_figure(fig, path)


JOBS_FILE_KEYS = ("topology", "placement", "communication", "network", "mode", "jobs")
JOB_KEYS = ("scenario", "name", "gpus")


def load_jobs_file(path: str, **overrides) -> tuple[list[StepJob], str | dict]:
    """The jobs of a YAML file (``jobs:``, a list of ``scenario`` with an optional ``name`` and
    explicit ``gpus``; ``topology``, ``placement``, ``communication``, ``network`` and ``mode``
    for all of them; paths relative to the file) and their placement. ``overrides`` (not None)
    replace the file's values. Bad keys or values: one line naming the file and the entry."""
    from .checks import read_yaml
    from .training.model.specs import load_scenario
    doc = read_yaml(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list) or not doc["jobs"]:
        raise InputError(f"{path}: a jobs file is a mapping with a non-empty list under 'jobs:'")
    unknown = sorted(set(doc) - set(JOBS_FILE_KEYS))
    if unknown:
        raise InputError(f"{path}: unknown key {unknown[0]!r}; a jobs file takes {', '.join(JOBS_FILE_KEYS)}")
    folder = Path(path).resolve().parent

    def local(value):
        """A file named relative to the jobs file (a preset name stays as it is)."""
        if isinstance(value, str) and value.endswith((".yaml", ".yml")) and (folder / value).exists():
            return str(folder / value)
        return value
    settings = {k: doc.get(k) for k in ("topology", "placement", "communication", "network", "mode")}
    settings["topology"] = local(settings["topology"])
    settings.update({k: v for k, v in overrides.items() if v is not None})
    names = job_names(len(doc["jobs"]))
    jobs, explicit = [], {}
    for k, entry in enumerate(doc["jobs"]):
        where = f"{path}: jobs[{k}]"
        if not isinstance(entry, dict) or "scenario" not in entry:
            raise InputError(f"{where}: each job is a mapping with a 'scenario' (a preset or a YAML file)")
        bad = sorted(set(entry) - set(JOB_KEYS))
        if bad:
            raise InputError(f"{where}: unknown key {bad[0]!r}; a job takes {', '.join(JOB_KEYS)}")
        name = str(entry.get("name", names[k]))
        run = load_scenario(local(entry["scenario"]), topology=settings["topology"],
                            communication=settings["communication"] or "live", network=settings["network"])
        jobs.append(StepJob(name, run, settings["mode"] or "auto", str(entry["scenario"])))
        if "gpus" in entry:
            explicit[name] = parse_gpus(str(entry["gpus"]), f"{where}: gpus")
    if explicit and len(explicit) != len(jobs):
        raise InputError(f"{path}: give gpus for every job or for none ({len(explicit)} of {len(jobs)} have them)")
    return jobs, explicit or settings["placement"] or "packed"


def job_names(count: int) -> list[str]:
    """``A``, ``B``, ... (then ``J27``, ...): jobs named by their order."""
    import string
    letters = string.ascii_uppercase
    return [letters[i] if i < len(letters) else f"J{i + 1}" for i in range(count)]


def parse_gpus(text: str, field: str) -> list[int]:
    """``0-1023`` or ``8-15,0-7`` -> GPU numbers (one line naming ``field`` if it cannot be read)."""
    out = gpu_ranges(text, field, GPU_NUMBERS, "0-1023 or 8-15,0-7")
    if not out:
        raise InputError(f"{field}: no GPU named in {text!r}")
    return out


def shared_links(cluster: Cluster, own: dict[str, np.ndarray], window_s: float) -> pd.DataFrame:
    """A row per link that two or more jobs put bytes on: ``link``, ``kind``, ``bandwidth_GBps``,
    each job's bytes (``bytes_<job>``), ``bytes`` (all), ``mean_util`` (all bytes / (bandwidth x
    ``window_s``)), the most loaded first."""
    table = cluster.links
    loads = np.vstack([own[name] for name in own]) if own else np.zeros((0, len(table)))
    both = np.flatnonzero((loads > 0).sum(axis=0) >= 2)
    total = loads[:, both].sum(axis=0)
    order = both[np.lexsort((both, -total))]
    frame = pd.DataFrame({"link": [table.link_name(int(i)) for i in order], "kind": [table.kind[i] for i in order],
                          "bandwidth_GBps": table.capacity[order] / 1e9})
    for k, name in enumerate(own):
        frame[f"bytes_{name}"] = loads[k, order]
    frame["bytes"] = loads[:, order].sum(axis=0)
    frame["mean_util"] = frame["bytes"] / (table.capacity[order] * window_s) if window_s > 0 else 0.0
    return frame


def jobs_text(result: JobsResult, top: int = 10) -> str:
    """The jobs' table and the most loaded shared links, as ``python -m sim jobs`` prints them."""
    lines = [f"cluster {result.topology} ({result.gpus:,} GPUs), network {result.backend}, placement "
             f"{result.placement}; each job alone, then all at once from time 0",
             result.jobs.to_string(index=False, float_format=lambda v: f"{v:.4g}")]
    links = result.links
    if links.empty:
        lines.append("links two or more jobs loaded: none (the jobs' traffic met on no link)")
    else:
        lines.append(f"links two or more jobs loaded: {len(links):,}; the {min(top, len(links))} most loaded "
                     "(bytes per job; mean utilisation over the shared run):")
        shown = links.head(top).copy()
        for col in [c for c in shown.columns if c.startswith("bytes")]:
            shown[col] = shown[col] / 1e9
        shown = shown.rename(columns={c: c.replace("bytes", "GB") for c in shown.columns if c.startswith("bytes")})
        lines.append(shown.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return "\n".join(lines)


__all__ = ["JOBS_FILE_KEYS", "JOB_KEYS", "JobsResult", "StepJob", "cluster_for", "job_names", "jobs_text", "load_jobs_file",
           "parse_gpus", "place", "plot_jobs", "run_jobs", "shared_links"]
