"""All-to-all times of a run, measured on the flow-level fabric.

Which GPUs form an EP group is the :class:`~sim.moe.layout.Layout`'s answer (EP group g of
pipeline rank r is GPUs ``r*dp + g*ep ..``, whole nodes when ep >= GPUs per node).

An all-to-all of one EP group is never alone: with balanced routing every group of a stage runs
the same collective at the same moment. So a collective's time is measured once per shape
(dispatch or combine) by running the all-to-alls of every EP group of a stage (``scope="stage"``)
or of every stage (``scope="cluster"``, an upper bound on cross-stage contention) at once on a
fresh fabric of the run's topology, and then charged to each comm part. Under skewed routing each
group has its own traffic (seed + group index) and its own time.
"""
from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import simpy

from ..network import Fabric, LinkTable, MoERouting, all_to_all, link_stats, route_tokens
from .layout import Layout
from .specs import ModelSpec, RunSpec, SpecError

SCOPES = ("stage", "cluster")


class CommModel:
    """All-to-all seconds per (shape, pipeline rank, EP group), and each GPU's expert load."""

    def __init__(self, run: RunSpec, model: ModelSpec, links: LinkTable, layout: Layout,
                 token_bytes: dict[str, float], scope: str = "stage", workers: int = 1):
        """``workers`` > 1: sample skewed routing and measure skewed all-to-alls in that many
        processes (the same numbers as one process; uniform routing needs no workers)."""
        if scope not in SCOPES:
            raise SpecError(f"comm scope must be one of {', '.join(SCOPES)}, got {scope!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise SpecError(f"workers must be a positive integer, got {workers!r}")
        self.run, self.model, self.links, self.layout, self.scope = run, model, links, layout, scope
        self.token_bytes = token_bytes  # {"dispatch": bytes, "combine": bytes}
        self.workers = workers if run.routing_skew > 0 else 1
        self._times: dict[tuple, np.ndarray] = {}
        self.link_frames = {}
        self._traffic = {}
        if model.is_moe:
            routings = [self._routing(g) for g in range(layout.groups_per_rank * run.pp)]
            with _pool(self.workers) as pool:
                self._traffic = dict(enumerate((pool.map if pool else map)(route_tokens, routings)))
        self._load = self._load_factors() if model.is_moe and run.routing_skew > 0 else None

    def _routing(self, group: int) -> MoERouting:
        r = self.run
        return MoERouting(ep=r.ep, gpus_per_node=self.layout.gpus_per_node, num_experts=self.model.routed_experts,
                          topk=self.model.topk, tokens_per_gpu=r.tokens_per_microbatch, node_limit=r.node_limit,
                          skew=r.routing_skew, seed=r.routing_seed + group)

    def traffic(self, stage: int, group: int):
        return self._traffic[stage * self.layout.groups_per_rank + group]

    def _load_factors(self) -> np.ndarray:
        """[stage, replica]: tokens a GPU's experts receive relative to its group's mean."""
        out = np.ones((self.run.pp, self.run.dp))
        for stage in range(self.run.pp):
            for g in range(self.layout.groups_per_rank):
                received = self.traffic(stage, g).gpu_tokens.sum(axis=0)
                if received.mean() > 0:
                    out[stage, self.layout.group_replicas(g)] = received / received.mean()
        return out

    def load_factor(self, stage: int, replica: int) -> float:
        """Expert load of a GPU relative to the balanced mean: 1.0 unless routing is skewed."""
        return 1.0 if self._load is None else float(self._load[stage, replica])

    def time(self, shape: str, stage: int, group: int) -> float:
        """Seconds of one dispatch- or combine-shaped all-to-all of EP group ``group`` at ``stage``.

        Measured once per (shape, unit): with balanced routing and stage scope every stage is
        alike and stage 0 stands for all; otherwise each stage (stage scope) or the whole
        cluster at once (cluster scope) is measured."""
        unit, stages = self._unit(stage)
        if (shape, unit) not in self._times:
            self._measure({(shape, unit): stages})
        return float(self._times[(shape, unit)][stage if unit == -1 else unit, group])

    def _unit(self, stage: int) -> tuple[int, list[int]]:
        """(cache unit, stages measured together) for an all-to-all at ``stage``."""
        if self.scope == "cluster":
            return -1, list(range(self.run.pp))
        if self.run.routing_skew == 0:
            return 0, [0]
        return stage, [stage]

    def _job(self, shape: str, stages: list[int]) -> tuple:
        """The arguments of :func:`measure_all_to_alls` after ``links``."""
        groups = [(self.layout.ep_group(s, g), self.traffic(s, g)) for s in stages
                  for g in range(self.layout.groups_per_rank)]
        return (groups, self.token_bytes[shape], self.run.a2a_algorithm, shape, self.run.a2a_chunks,
                0.0 if self.run.routing_skew == 0 else 1e-3)

    def _ends_array(self, stages: list[int], ends: list[float]) -> np.ndarray:
        out = np.zeros((self.run.pp, self.layout.groups_per_rank))
        out[stages, :] = np.reshape(ends, (len(stages), self.layout.groups_per_rank))
        return out

    def serves(self, run: RunSpec, scope: str) -> bool:
        """Whether these measurements hold for ``run`` too: same run but for the schedule."""
        return scope == self.scope and dataclasses.replace(self.run, schedule=run.schedule) == run

    def measure_all(self, progress: bool = False) -> None:
        """Measure now what :meth:`time` would measure on first use, in ``workers`` processes;
        with ``progress``, a bar when there are more than two (skewed routing: 2 x PP fabric runs,
        minutes at scale)."""
        todo = {}
        if self.model.is_moe:
            for shape in ("dispatch", "combine"):
                for stage in range(self.run.pp):
                    unit, stages = self._unit(stage)
                    if (shape, unit) not in self._times:
                        todo[(shape, unit)] = stages
        self._measure(todo, progress)

    def _measure(self, todo: dict, progress: bool = False) -> None:
        """Run the fabric measurements ``{(shape, unit): stages}`` (in worker processes when there
        are several and ``workers`` > 1) and keep their times and link statistics."""
        bar = None
        if progress and len(todo) > 2:
            from tqdm import tqdm
            bar = tqdm(total=len(todo), desc="skewed all-to-alls on the fabric", unit="run")
        jobs = {key: self._job(key[0], stages) for key, stages in todo.items()}
        with _pool(self.workers if len(jobs) > 1 else 1, self.links) as pool:
            if pool is None:
                results = ((key, measure_all_to_alls(self.links, *job)) for key, job in jobs.items())
            else:
                futures = [(key, pool.submit(_measure_job, job)) for key, job in jobs.items()]
                results = ((key, fut.result()) for key, fut in futures)
            for (shape, unit), (ends, frame) in results:   # in a fixed order: the same link_frames
                self.link_frames[shape] = frame
                self._times[(shape, unit)] = self._ends_array(todo[(shape, unit)], ends)
                if bar:
                    bar.update(1)
        if bar:
            bar.close()


def measure_all_to_alls(links: LinkTable, groups: list, token_bytes: float, algorithm: str, shape: str,
                        chunks: int, completion_window: float) -> tuple[list[float], object]:
    """Run the all-to-alls of ``groups`` ([(GPU ids, Traffic)]) at once on a fresh fabric:
    (seconds until each group's last byte lands, link statistics)."""
    env = simpy.Environment()
    fabric = Fabric(env, links, completion_window=completion_window)
    ends = [0.0] * len(groups)
    for i, (gpus, traffic) in enumerate(groups):
        ev = all_to_all(fabric, gpus, traffic, token_bytes, algorithm, shape, chunks)
        ev.callbacks.append(lambda _e, i=i: ends.__setitem__(i, env.now))
    env.run()
    return ends, link_stats(fabric)


_WORKER_LINKS: list[LinkTable] = []


def _set_worker_links(links: LinkTable) -> None:
    """Pool initializer: keep the parent's link table in this worker process."""
    _WORKER_LINKS[:] = [links]


def _measure_job(job: tuple):
    """:func:`measure_all_to_alls` in a worker process, on the link table its pool was given
    (routes are deterministic, so they equal the parent's)."""
    return measure_all_to_alls(_WORKER_LINKS[0], *job)


def _pool(workers: int, links: LinkTable | None = None):
    """A process pool of ``workers`` (spawned: safe with threads and SimPy state), each holding
    ``links`` when given, or a context giving ``None`` (run here) for one worker."""
    if workers <= 1:
        return contextlib.nullcontext(None)
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    init = {"initializer": _set_worker_links, "initargs": (links,)} if links is not None else {}
    return ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), **init)
