"""Several training jobs on one cluster: each alone, then all together on one network, and what
each loses to the others.

A :class:`StepJob` is one training step of a run (:class:`~sim.moe.specs.RunSpec`) as a job of a
:class:`~sim.cluster.Cluster`: it builds its scenario on the GPUs it was given (numbered 0, 1, ...
in their order, :meth:`~sim.network.LinkTable.view`) and starts the step's ranks on its view of the
shared network (:meth:`~sim.moe.step.MoEStep.start`). :func:`run_jobs` places the jobs once
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

import numpy as np
import pandas as pd

from .checks import InputError
from .cluster import Allocation, Cluster
from .moe.scenario import Scenario
from .moe.specs import RunSpec
from .moe.step import MoEStep, StepResult


@dataclass
class StepJob:
    """One training step of ``run`` as a cluster job named ``name`` (see the module); ``mode`` as
    :class:`~sim.moe.step.MoEStep`'s."""

    name: str
    run: RunSpec
    mode: str = "auto"
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

    def start(self, cluster: Cluster, allocation: Allocation):
        """Start the step on ``cluster``'s network, on ``allocation``'s GPUs; returns the call that
        gives its :class:`~sim.moe.step.StepResult` (and keeps the bytes it put on each link)."""
        step = self.step(allocation)
        if not np.array_equal(step.scenario.links.capacity, cluster.links.capacity):
            raise InputError(f"job {self.name!r}: its communication kernels ({self.run.kernels}) scale the links' "
                             "bandwidths otherwise than the cluster's; give every job the same kernels")
        view = cluster.view(allocation)
        finish = step.start(view)

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


def cluster_for(jobs: list[StepJob]) -> Cluster:
    """A fresh cluster of the jobs' topology, network backend and NCCL bound (the first job's;
    the others must agree: one line naming the first that does not)."""
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
    return Cluster(first.kernels.scale_links(first.topology.links), graph.graph.get("gpus_per_node", n),
                   first.run.network, first.kernels.nccl_gpu_rate)


def place(jobs: list[StepJob], placement: str | dict) -> dict[str, Allocation]:
    """Each job's GPUs on an empty cluster of theirs, by ``placement``: one of
    :data:`~sim.cluster.PLACEMENTS` for all, or a mapping job name -> explicit GPU list."""
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise InputError(f"job names must differ, got {names}")
    cluster = cluster_for(jobs)
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


def run_jobs(jobs: list[StepJob], placement: str | dict = "packed") -> JobsResult:
    """Place ``jobs``, run each alone, then all together (see the module)."""
    if not jobs:
        raise InputError("jobs: give at least one job")
    t0 = time.perf_counter()
    allocations = place(jobs, placement)
    alone = {}
    for job in jobs:
        cluster = cluster_for(jobs)
        finish = job.start(cluster, allocations[job.name])
        cluster.run()
        alone[job.name] = finish()
    cluster = cluster_for(jobs)
    finishes = {job.name: job.start(cluster, allocations[job.name]) for job in jobs}
    cluster.run()
    shared = {name: finish() for name, finish in finishes.items()}
    rows = []
    for job in jobs:
        a, s = alone[job.name], shared[job.name]
        rows.append({"job": job.name, "gpus": job.gpus_needed, "placement": allocations[job.name].label(),
                     "node_runs": allocations[job.name].runs, "schedule": job.run.schedule,
                     "alone_s": a.step_time_s, "shared_s": s.step_time_s,
                     "slowdown_pct": 100 * (s.step_time_s / a.step_time_s - 1),
                     "exposed_comm_alone_s": a.exposed_comm_s, "exposed_comm_shared_s": s.exposed_comm_s})
    window = max(r.step_time_s for r in shared.values())
    links = shared_links(cluster, {job.name: job.own_link_bytes for job in jobs}, window)
    label = placement if isinstance(placement, str) else "explicit"
    return JobsResult(pd.DataFrame(rows), links, jobs[0].run.topology, cluster.num_gpus, label, cluster.backend,
                      time.perf_counter() - t0)


def shared_links(cluster: Cluster, own: dict[str, np.ndarray], window_s: float) -> pd.DataFrame:
    """A row per link that two or more jobs put bytes on: ``link``, ``kind``, ``bandwidth_GBps``,
    each job's bytes (``bytes_<job>``), ``bytes`` (all), ``mean_util`` (all bytes / (bandwidth x
    ``window_s``)), the most loaded first."""
    table = cluster.links
    loads = np.vstack([own[name] for name in own])
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


__all__ = ["JobsResult", "StepJob", "cluster_for", "jobs_text", "place", "run_jobs", "shared_links"]
