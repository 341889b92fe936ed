"""Several training jobs on one cluster: each alone, then all together on one network, and what
each loses to the others.

A :class:`StepJob` runs training steps of a run (:class:`~sim.training.model.specs.RunSpec`) as a job of a
:class:`~sim.cluster.Cluster`: it builds its scenario on the GPUs it was given (numbered 0, 1, ...
in their order, :meth:`~sim.network.LinkTable.view`) and starts the step's ranks on its view of the
shared network (:meth:`~sim.training.step.MoEStep.start`). :func:`run_jobs` places the jobs once
(:data:`~sim.cluster.PLACEMENTS`), runs each alone on a fresh cluster with that placement (the
same GPUs, the same routes, no other traffic) and then every job at once on one
cluster, and reports per job:

* ``alone_s`` and ``shared_s``: its mean step time alone and beside the others; ``slowdown_pct``:
  ``100 (shared / alone - 1)``;
* ``exposed_comm_alone_s`` and ``exposed_comm_shared_s``: the communication its ranks waited for
  (mean over ranks and steps), where sharing the network shows first;
* ``steps_alone``, ``steps_shared``, ``arrive_s`` and ``end_s``: how many steps it ran, when it
  arrived and when its last shared step ended (seconds on the cluster's clock);

and per link that two or more jobs loaded (:func:`shared_links`): each job's bytes on it (what its
own transfers, collectives and bundles put there) and their mean utilisation over the shared run.

A job runs :class:`JobLength`: one step (the default), ``steps`` steps back to back, or steps back
to back within a time window; a step starts when the job's previous one has ended on every rank
(its optimizer step and weight gather included), so a job's steps do not overlap (nor does
``optimizer_sync: bypass`` carry one step's optimizer into the next); under kernel jitter each
step draws its own (the first step's draws are the one-step run's). In the shared run a job
starts at its ``arrive_s`` (default 0); alone, at 0. Traffic meets on the network only where it
runs there: pipeline sends, data-parallel synchronisation and, with ``communication: live`` (the
``jobs`` command's default), the all-to-alls; measured all-to-alls are timed alone on their own
fabric and do not meet the other jobs. A job that ends first leaves the network to the others.
"""
from __future__ import annotations

import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .checks import InputError, gpu_ranges, number
from .cluster import Allocation, Cluster
from .training.model.specs import RunSpec
from .training.scenario import Scenario
from .training.step import MoEStep, StepResult

MAX_STEPS = 10_000          # steps a job may run back to back (a guard against a typo: --window 1e9)


@dataclass
class StepJob:
    """One training step of ``run`` as a cluster job named ``name`` (see the module); ``mode`` as
    :class:`~sim.training.step.MoEStep`'s."""

    name: str
    run: RunSpec
    mode: str = "auto"
    label: str = ""                         # what the job runs, as the user named it (a preset or a file)
    arrive_s: float = 0.0                   # when it starts in the shared run (seconds on the cluster's clock)
    _steps: dict = field(default_factory=dict, repr=False)     # allocation's GPUs -> MoEStep (reused)
    own_link_bytes: np.ndarray | None = field(default=None, repr=False)   # of its last start

    def __post_init__(self):
        number(self.arrive_s, f"job {self.name!r}: arrive_s", low=0.0)

    @property
    def gpus_needed(self) -> int:
        return self.run.gpus

    def step(self, allocation: Allocation) -> MoEStep:
        """The step on ``allocation``'s GPUs (built once per allocation: its measurements are kept)."""
        key = allocation.gpus
        if key not in self._steps:
            self._steps[key] = MoEStep(Scenario(self.run, gpus=list(allocation.gpus)), self.mode)
        return self._steps[key]

    def start(self, cluster: Cluster, allocation: Allocation, link_timeline: bool = False,
              length: "JobLength | None" = None, arrive_s: float = 0.0):
        """Run steps on ``cluster``'s network, on ``allocation``'s GPUs, back to back: the first at
        ``arrive_s`` (seconds on the cluster's clock), each next one when the last has ended (every
        rank's optimizer step and weight gather), as many as ``length`` says (default: one).
        Returns the call that, once the cluster has run, gives the steps'
        :class:`~sim.training.step.StepResult` in order (each ``start_s`` when it started; it
        raises the first step's error, a rank stuck included) and keeps the bytes the job put on
        each link over all of them; ``link_timeline``: the first step records the network's
        busiest links from its start to the end of the run (:meth:`~sim.training.step.MoEStep.start`)."""
        step = self.step(allocation)
        if not np.array_equal(step.scenario.links.capacity, cluster.links.capacity):
            raise InputError(f"job {self.name!r}: its communication kernels ({self.run.kernels}) scale the links' "
                             "bandwidths otherwise than the cluster's; give every job the same kernels")
        length = length or JobLength()
        view = cluster.view(allocation)
        env = cluster.env
        started = []

        def steps():
            if arrive_s > 0:
                yield env.timeout(arrive_s)
            for k in range(MAX_STEPS):
                started.append(step.start(view, link_timeline and k == 0, k))
                yield started[-1].done
                if not length.more(k + 1, env.now):
                    return
        env.process(steps())

        def results() -> list[StepResult]:
            out = [begun() for begun in started]
            self.own_link_bytes = view.own_link_bytes.copy()
            return out
        return results


@dataclass(frozen=True)
class JobLength:
    """How long each job runs: ``steps`` steps back to back (default 1), or, with ``window_s``,
    steps back to back as long as the last one ended before ``window_s`` seconds of the cluster's
    clock (at least one: the step that crosses the window's end runs to its end, the others'
    traffic beside it), and at most :data:`MAX_STEPS` (a window far longer than the steps)."""

    steps: int = 1
    window_s: float | None = None

    def __post_init__(self):
        if self.window_s is None:
            number(self.steps, "steps", integer=True, low=1, high=MAX_STEPS)
        else:
            number(self.window_s, "window_s", low=0.0, low_open=True)

    def more(self, done: int, now: float) -> bool:
        """Whether a job that has run ``done`` steps, the last ending at ``now``, starts another
        (never past :data:`MAX_STEPS`, a window's included)."""
        if self.window_s is not None:
            return now < self.window_s and done < MAX_STEPS
        return done < self.steps

    def label(self) -> str:
        return (f"steps back to back until {self.window_s:g} s" if self.window_s is not None else
                "one step" if self.steps == 1 else f"{self.steps} steps back to back")


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
    results: dict = field(default_factory=dict, repr=False)    # job name -> its StepResults of the shared run
    length: str = "one step"                                   # how long each job ran (JobLength.label)


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
    return lambda: Cluster(links, gpus_per_node, first.run.network, first.kernels.nccl_gpu_rate,
                           first.kernels.nccl_rates)


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


def run_jobs(jobs: list[StepJob], placement: str | dict = "packed", link_timeline: bool = False,
             length: JobLength | None = None) -> JobsResult:
    """Place ``jobs``, run each alone, then all together (see the module), each for ``length``
    (default one step; alone as shared). Every job's step is built first (bad input: one line,
    before anything runs). A job whose run fails gets its error in its row (``error``) and the
    others keep their results; ``link_timeline``: the shared run records its busiest links over
    time (for :func:`~sim.trace.write_jobs_trace`)."""
    if not jobs:
        raise InputError("jobs: give at least one job")
    t0 = time.perf_counter()
    length = length or JobLength()
    fresh = cluster_for(jobs)
    allocations = place(jobs, placement, fresh)
    for job in jobs:
        job.step(allocations[job.name])
    alone, errors = {}, {}
    for job in jobs:
        try:
            cluster = fresh()
            finish = job.start(cluster, allocations[job.name], length=length)
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
        finishes = {job.name: job.start(cluster, allocations[job.name], link_timeline and k == 0, length, job.arrive_s)
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
    rows = [job_row(job, allocations[job.name], alone.get(job.name), shared.get(job.name), errors) for job in jobs]
    end = max((r.start_s + r.step_time_s for steps in shared.values() for r in steps), default=0.0)
    own = {job.name: job.own_link_bytes for job in running if job.own_link_bytes is not None}
    links = shared_links(cluster, own, end) if len(own) > 1 else shared_links(cluster, {}, end)
    label = placement if isinstance(placement, str) else "explicit"
    return JobsResult(pd.DataFrame(rows), links, jobs[0].run.topology, cluster.num_gpus, label, cluster.backend,
                      time.perf_counter() - t0, shared, length.label())


def job_row(job: StepJob, allocation: Allocation, alone: list[StepResult] | None, shared: list[StepResult] | None,
            errors: dict) -> dict:
    """A job's row of :func:`run_jobs`: its steps alone and shared, their mean times (NaN where it
    did not run) and the slowdown of the shared mean over the alone one."""
    nan = float("nan")

    def mean(steps, field):
        return float(np.mean([getattr(r, field) for r in steps])) if steps else nan
    a, s = mean(alone, "step_time_s"), mean(shared, "step_time_s")
    return {"job": job.name, "scenario": job.label or job.run.description, "gpus": job.gpus_needed,
            "placement": allocation.label(), "node_runs": allocation.runs, "schedule": job.run.schedule,
            "arrive_s": job.arrive_s, "steps_alone": len(alone or ()), "steps_shared": len(shared or ()),
            "alone_s": a, "shared_s": s, "slowdown_pct": 100 * (s / a - 1) if alone and shared else nan,
            "exposed_comm_alone_s": mean(alone, "exposed_comm_s"),
            "exposed_comm_shared_s": mean(shared, "exposed_comm_s"),
            "end_s": shared[-1].start_s + shared[-1].step_time_s if shared else nan,
            **({"error": errors.get(job.name, "")} if errors else {})}


GPU_NUMBERS = 10 ** 7          # GPU numbers a list may name (the cluster checks its own)
def plot_jobs(jobs: pd.DataFrame, title: str, path: str | Path) -> Path:
    """:func:`jobs_figure` saved to ``path``."""
    from .plots import save_figure
    return save_figure(jobs_figure(jobs, title), path)


def jobs_figure(jobs: pd.DataFrame, title: str):
    """Each job's mean step alone and shared (bars, seconds; ``jobs``: :func:`run_jobs`'s rows, or
    those of ``jobs.csv``), its slowdown written above: where people would rather look than read."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import FIGURE_WIDTH_IN
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 4.0))
    x = np.arange(len(jobs))
    ax.bar(x - 0.2, jobs.alone_s, 0.4, label="alone", color="#6baed6")
    ax.bar(x + 0.2, jobs.shared_s, 0.4, label="with the other jobs", color="#e6550d")
    for i, row in enumerate(jobs.itertuples()):
        if np.isfinite(row.slowdown_pct):
            shown = round(row.slowdown_pct, 1) + 0.0            # a rounding's -1e-13 % as +0.0 %
            ax.annotate(f"{shown:+.1f}%", (i + 0.2, row.shared_s), ha="center", va="bottom")
    labels = [f"{row.job}\n" + textwrap.fill(f"{row.gpus:,} GPUs, {row.placement}", 30) for row in jobs.itertuples()]
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("mean step time (s)")
    ax.margins(y=0.12)
    ax.set_title(title, fontsize=10)
    ax.legend(loc="lower right")
    return fig


def jobs_title(result: JobsResult) -> str:
    """The figure's title: the jobs, the cluster, the placement, the network and their length."""
    return (f"{len(result.jobs)} jobs on {result.topology} ({result.gpus:,} GPUs), {result.placement} placement, "
            f"{result.backend} network, {result.length}")


JOBS_FILE_KEYS = ("topology", "placement", "communication", "network", "mode", "steps", "window_s", "jobs")
JOB_KEYS = ("scenario", "name", "gpus", "arrive_s")


def load_jobs_file(path: str, length: JobLength | None = None, **overrides
                   ) -> tuple[list[StepJob], str | dict, JobLength]:
    """The jobs of a YAML file (``jobs:``, a list of ``scenario`` with an optional ``name``,
    explicit ``gpus`` and ``arrive_s``; ``topology``, ``placement``, ``communication``,
    ``network``, ``mode`` and how long each job runs, ``steps`` or ``window_s``, for all of them;
    paths relative to the file), their placement and length. ``length`` (not None) replaces the
    file's steps or window, ``overrides`` (not None) its other values. Bad keys or values: one line
    naming the file and the entry."""
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
    settings = {k: doc.get(k) for k in ("topology", "placement", "communication", "network", "mode", "steps",
                                        "window_s")}
    settings["topology"] = local(settings["topology"])
    settings.update({k: v for k, v in overrides.items() if v is not None})
    length = length or job_length(settings["steps"], settings["window_s"], path)
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
        arrive = number(entry.get("arrive_s", 0.0), f"{where}: arrive_s", low=0.0)
        jobs.append(StepJob(name, run, settings["mode"] or "auto", str(entry["scenario"]), float(arrive)))
        if "gpus" in entry:
            explicit[name] = parse_gpus(str(entry["gpus"]), f"{where}: gpus")
    if explicit and len(explicit) != len(jobs):
        raise InputError(f"{path}: give gpus for every job or for none ({len(explicit)} of {len(jobs)} have them)")
    return jobs, explicit or settings["placement"] or "packed", length


def job_length(steps, window_s, where: str = "jobs") -> JobLength:
    """:class:`JobLength` of ``steps`` (default 1) or ``window_s``; both given: one line."""
    if steps is not None and window_s is not None:
        raise InputError(f"{where}: give steps or window_s, not both (got steps {steps!r}, window_s {window_s!r})")
    try:
        return JobLength(window_s=window_s) if window_s is not None else JobLength(1 if steps is None else steps)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


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
    late = result.jobs["arrive_s"].gt(0).any() if "arrive_s" in result.jobs else False
    lines = [f"cluster {result.topology} ({result.gpus:,} GPUs), network {result.backend}, placement "
             f"{result.placement}; {result.length} per job, each alone, then all at once from "
             f"{'its arrival (arrive_s)' if late else 'time 0'}; alone_s and shared_s: mean step time",
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


__all__ = ["JOBS_FILE_KEYS", "JOB_KEYS", "JobLength", "JobsResult", "StepJob", "cluster_for", "job_length", "job_names",
           "job_row", "jobs_figure", "jobs_text", "jobs_title", "load_jobs_file",
           "parse_gpus", "place", "plot_jobs", "run_jobs", "shared_links"]
