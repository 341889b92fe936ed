"""All-to-all times of a run, measured on the flow-level fabric.

Which GPUs form an EP group is the :class:`~sim.training.model.layout.Layout`'s answer (EP group g of
pipeline rank r is GPUs ``r*dp + g*ep ..``, whole nodes when ep >= GPUs per node).

An all-to-all of one EP group is never alone: with balanced routing every group of a stage runs
the same collective at the same moment. So a collective's time is measured once per shape
(dispatch or combine) by running the all-to-alls of every EP group of a stage (``scope="stage"``)
or of every stage (``scope="cluster"``, an upper bound on cross-stage contention) at once on a
fresh fabric of the run's topology, and then charged to each comm part. Under skewed routing each
group has its own traffic (seed + group index) and its own time. ``scope="group"`` measures each EP
group alone: the live mode's speed of an all-to-all alone (:mod:`sim.training.comm.live`), which then meets
the other traffic on the step's fabric.
"""
from __future__ import annotations

import contextlib
import dataclasses
import weakref

import numpy as np
import simpy

from ...network import (
    LinkLoad,
    LinkTable,
    MoERouting,
    Transfers,
    all_to_all,
    all_to_all_alone_s,
    all_to_all_load,
    build_network,
    link_stats,
    route_tokens,
    sum_loads,
    transfers_on,
)
from ...orphans import watch_parent
from ...perf import gc_paused
from ..model.layout import Layout
from ..model.specs import ModelSpec, RunSpec, SpecError
from .collective_shapes import CollectiveShape, shape_named
from .flow_twins import TwinJobs, renamed_stats, route_signature, same_routes
from .kernels import KernelSpec

SCOPES = ("stage", "cluster", "group")
# Worker processes pay about 1-3 s each to start (imports, compiled kernels loaded from numba's
# cache); below these sizes one process is faster, so the work stays here (same numbers either way).
PARALLEL_MIN_TOKENS = 2_000_000     # routed tokens sampled at start
PARALLEL_MIN_FLOWS = 20_000         # GPU-to-GPU pairs of the all-to-alls measured together
# Flows due within this fraction of the time since the fabric became busy finish together
# (:class:`~sim.network.Fabric`'s ``completion_window``: an all-to-all's time moves by at most that
# fraction; not a ring's, whose thousands of dependent short steps would each finish at once). Used
# where flows end at scattered times, which costs one rate recomputation each:
# skewed routing, and the cluster scope, where every stage's EP groups meet on shared links each
# in its own way (on a one-plane, oversubscribed, non-rail cluster: 48,000 recomputations of up
# to 130,000 flows with it, none of the two measurements finished in 25 minutes without it).
# Balanced all-to-alls of one stage end phase by phase together and are measured exactly.
SCATTERED_WINDOW = 1e-3


class CommModel:
    """All-to-all seconds per (shape, pipeline rank, EP group), and each GPU's expert load, for the
    scenario's all-to-all shapes (:mod:`sim.training.comm.collective_shapes`)."""

    def __init__(self, run: RunSpec, model: ModelSpec, links: LinkTable, layout: Layout,
                 shapes: tuple[CollectiveShape, ...], scope: str = "stage", workers: int = 1,
                 kernels: KernelSpec | None = None, alone: bool = False):
        """``shapes``: the run's collectives (those that are all-to-alls are measured here).
        ``kernels``: the all-to-all kernels' launch and notify costs and SM throughput
        (:mod:`sim.training.comm.kernels`; ``None``: pure link time). ``workers`` > 1: sample skewed routing and measure all-to-alls (skewed, or balanced on a
        topology where stages sit differently) in that many processes when the work is large enough
        to pay for starting them (``PARALLEL_MIN_TOKENS``, ``PARALLEL_MIN_FLOWS``), the processes that
        sampled the routing measuring next; the same numbers as one process. ``alone``: each
        all-to-all's time with every transfer alone on its route, the analytical network's, from its
        closed form (:mod:`sim.network.alone`) without running a network, every stage on its own and
        no link statistics (a lower bound on the max-min fabric's times; the planner's screen)."""
        if scope not in SCOPES:
            raise SpecError(f"comm scope must be one of {', '.join(SCOPES)}, got {scope!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 1024:
            raise SpecError(f"workers must be a positive integer up to 1024, got {workers!r}")
        self.run, self.model, self.links, self.layout, self.scope = run, model, links, layout, scope
        self.shapes = tuple(s for s in shapes if s.is_all_to_all)
        self.token_bytes = {s.name: s.bytes_per_token for s in self.shapes}   # by shape name
        self.workers = workers      # balanced routing uses them only when stages differ (several units)
        self.kernels = kernels
        self.alone = alone
        self._alone: dict[tuple, float] = {}       # (shape, stage, group) -> seconds, with ``alone``
        self._transfers: Transfers | None = None
        self._gpu_rate = kernels.a2a_gpu_rate(run.comm_sms) if kernels is not None else None
        self._overheads: dict[tuple[int, int], float] = {}
        self._times: dict[tuple, np.ndarray] = {}
        self.link_frames = {}
        self._traffic = {}
        self._loads: dict[tuple, LinkLoad] = {}
        self._twins: dict[int, int] = {}
        self._signatures: dict[int, tuple] = {}
        self._kept_pool = None      # the routing's worker processes, kept for the measurements
        if model.is_moe:
            routings = [self._routing(g) for g in range(layout.groups_per_rank * run.pp)]
            tokens = sum(r.tokens_per_gpu * r.ep for r in routings)
            sampled = run.routing_skew > 0 and tokens >= PARALLEL_MIN_TOKENS     # expected counts are cheap
            if sampled and self.workers > 1:
                # The same processes measure the skewed all-to-alls next: starting them once saves a
                # start of every worker (imports and compiled kernels, 1-3 s).
                self._kept_pool = _pool(min(self.workers, len(routings)), links)
                weakref.finalize(self, self._kept_pool.shutdown, wait=False)
                self._traffic = dict(enumerate(self._kept_pool.map(route_tokens, routings)))
            else:
                self._traffic = dict(enumerate(map(route_tokens, routings)))
        self._load = self._load_factors() if model.is_moe and run.routing_skew > 0 else None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_kept_pool": None}       # worker processes do not travel

    def _routing(self, group: int) -> MoERouting:
        r = self.run
        return MoERouting(ep=r.ep, gpus_per_node=self.layout.ep_gpus_per_node, num_experts=self.model.routed_experts,
                          topk=self.model.topk, tokens_per_gpu=self.tokens_per_gpu, node_limit=r.node_limit,
                          skew=r.routing_skew, seed=r.routing_seed + group)

    @property
    def tokens_per_gpu(self) -> int:
        """Tokens each GPU of an EP group dispatches per micro-batch: its ``T / (tp x cp)`` sequence
        shard (the whole micro-batch's ``T`` when ``tp = cp = 1``)."""
        return self.run.tokens_per_microbatch // self.layout.model_parallel

    def traffic(self, stage: int, group: int):
        return self._traffic[stage * self.layout.groups_per_rank + group]

    def load(self, shape: str, stage: int, group: int) -> LinkLoad:
        """The bytes per link of one dispatch- or combine-shaped all-to-all of EP group ``group``
        at ``stage`` (:func:`~sim.network.all_to_all_load`), kept for later steps of the run. A
        stage whose twin (:meth:`_twin_stage`) is another gets the twin's load with the links
        renamed (:meth:`~sim.network.LinkLoad.renamed`): the same numbers, without walking
        thousands of messages again."""
        key = (shape, stage, group)
        if key in self._loads:
            return self._loads[key]
        unit, _ = self._unit(stage)
        if unit not in (-1, stage):
            (_, old), (_, new) = self._signature(unit), self._signature(stage)
            self._loads[key] = self.load(shape, unit, group).renamed(old, new)
        else:
            loads = [all_to_all_load(self.links, gpus, self.traffic(stage, group), self.token_bytes[shape],
                                     shape_named(self.shapes, shape).algorithm, shape)
                     for gpus in self.layout.ep_subgroups(stage, group)]
            self._loads[key] = loads[0] if len(loads) == 1 else sum_loads(loads)
        return self._loads[key]

    def _load_factors(self) -> np.ndarray:
        """[stage, replica]: tokens a replica's busiest GPU's experts receive relative to its
        group's mean (a replica's ``tp x cp`` GPUs wait for one another at their next TP or CP
        collective)."""
        out = np.ones((self.run.pp, self.run.dp))
        lay = self.layout
        for stage in range(self.run.pp):
            for g in range(lay.groups_per_rank):
                received = self.traffic(stage, g).gpu_tokens.sum(axis=0)
                if received.mean() > 0:
                    per_replica = received.reshape(lay.ep_replicas, -1).max(axis=1)
                    out[stage, lay.group_replicas(g)] = per_replica / received.mean()
        return out

    def load_factor(self, stage: int, replica: int) -> float:
        """Expert load of a GPU relative to the balanced mean: 1.0 unless routing is skewed."""
        return 1.0 if self._load is None else float(self._load[stage, replica])

    def time(self, shape: str, stage: int, group: int) -> float:
        """Seconds of one dispatch- or combine-shaped all-to-all of EP group ``group`` at ``stage``,
        from the barrier to its last byte: the kernel's overhead (:meth:`overhead`) and its data
        phase (:meth:`data_time`)."""
        return self.overhead(stage, group) + self.data_time(shape, stage, group)

    def overhead(self, stage: int, group: int) -> float:
        """Seconds before an all-to-all's data phase: launch, notify and the count exchange's round
        trip over the group's longest route (:meth:`~sim.training.comm.kernels.KernelSpec.a2a_overhead_s`;
        0 without kernels)."""
        if self.kernels is None:
            return 0.0
        key = (stage, group)
        if key not in self._overheads:
            latency = group_latency(self.links, self.layout.ep_group(stage, group))
            self._overheads[key] = self.kernels.a2a_overhead_s(latency)
        return self._overheads[key]

    def data_time(self, shape: str, stage: int, group: int) -> float:
        """Seconds of the data phase of one dispatch- or combine-shaped all-to-all of EP group
        ``group`` at ``stage``, on the fabric with each GPU's kernel bounded by its SMs.

        Measured once per (shape, unit): with balanced routing one stage stands for every stage
        whose all-to-alls are the same flow system on the network (all of them on the presets;
        not when EP groups straddle leaves differently); under skew each stage is measured; the
        cluster scope measures every stage at once."""
        if self.alone:
            return self._alone_time(shape, stage, group)
        unit, stages = self._unit(stage)
        if (shape, unit) not in self._times:
            self._measure({(shape, unit): stages})
        return float(self._times[(shape, unit)][stage if unit == -1 else unit, group])

    def _unit(self, stage: int) -> tuple[int, list[int]]:
        """(cache unit, stages measured together) for an all-to-all at ``stage``."""
        if self.scope == "cluster":
            return -1, list(range(self.run.pp))
        if self.run.routing_skew == 0:                   # one measurement per class of alike stages
            twin = self._twin_stage(stage)
            return twin, [twin]
        return stage, [stage]

    def _twin_stage(self, stage: int) -> int:
        """The first stage whose all-to-alls (every EP group's at once) are the same flow system as
        ``stage``'s: the same traffic per group, and routes between every two GPUs of each group
        that are the same up to renaming links (:func:`same_routes`), so their measured times are
        the same. On the presets every stage sits on the network alike and stage 0 stands for all;
        not when EP groups straddle leaves differently."""
        if stage not in self._twins:
            self._twins[stage] = next(s for s in range(stage + 1) if s == stage or (
                self._twins.get(s, s) == s and self._same_traffic(s, stage) and
                same_routes(self.links, self._signature(s), self._signature(stage))))
        return self._twins[stage]

    def _same_traffic(self, a: int, b: int) -> bool:
        return all(np.array_equal(self.traffic(a, g).gpu_tokens, self.traffic(b, g).gpu_tokens) and
                   np.array_equal(self.traffic(a, g).node_tokens, self.traffic(b, g).node_tokens)
                   for g in range(self.layout.groups_per_rank))

    def _signature(self, stage: int) -> tuple:
        """The routes between the GPUs of each EP group of ``stage`` (and its expert-TP siblings)
        that its all-to-alls may use (:meth:`_a2a_pairs`), group after group."""
        if stage not in self._signatures:
            pairs = [pair for g in range(self.layout.groups_per_rank) for gpus in self.layout.ep_subgroups(stage, g)
                     for pair in self._a2a_pairs(gpus)]
            self._signatures[stage] = route_signature(self.links, pairs)
        return self._signatures[stage]

    def _job(self, shape: str, stages: list[int]) -> tuple:
        """The arguments of :func:`measure_all_to_alls` after ``links``: every EP group of
        ``stages`` with its expert-TP siblings (:meth:`~sim.training.model.layout.Layout.ep_subgroups`, which
        carry the same traffic beside it), stage, group and sub-group in that order."""
        groups = [(gpus, self.traffic(s, g)) for s in stages for g in range(self.layout.groups_per_rank)
                  for gpus in self.layout.ep_subgroups(s, g)]
        return (groups, self.token_bytes[shape], shape_named(self.shapes, shape).algorithm, shape, self.run.a2a_chunks,
                self.completion_window, self._gpu_rate, self.run.network)

    @property
    def completion_window(self) -> float:
        """The fabric's completion window for this run's measurements: :data:`SCATTERED_WINDOW`
        under skewed routing or in the cluster scope, else 0 (exact)."""
        return SCATTERED_WINDOW if self.run.routing_skew > 0 or self.scope == "cluster" else 0.0

    def _ends_array(self, stages: list[int], ends: list[float]) -> np.ndarray:
        out = np.zeros((self.run.pp, self.layout.groups_per_rank))
        out[stages, :] = np.reshape(ends, (len(stages), self.layout.groups_per_rank))
        return out

    def serves(self, run: RunSpec, scope: str) -> bool:
        """Whether these measurements hold for ``run`` too: same run but for the schedule (and
        zb-auto's memory limit, which only shapes the schedule)."""
        return scope == self.scope and dataclasses.replace(self.run, schedule=run.schedule,
                                                           zb_memory_limit=run.zb_memory_limit) == run

    def measures(self, shape: str) -> bool:
        """Whether the collective ``shape`` (a name) is one of the all-to-alls measured here."""
        return shape in self.token_bytes

    def measure_all(self, progress: bool = False) -> None:
        """Measure now what :meth:`time` would measure on first use, in ``workers`` processes;
        with ``progress``, a bar when there are more than two (skewed routing: 2 x PP fabric runs,
        minutes at scale)."""
        todo = {}
        if self.model.is_moe:
            for shape in self.token_bytes:
                for stage in range(self.run.pp):
                    unit, stages = self._unit(stage)
                    if (shape, unit) not in self._times:
                        todo[(shape, unit)] = stages
        self._measure(todo, progress)

    def _measure_alone(self, todo: dict) -> None:
        """The times of ``todo`` (as :meth:`_measure`'s) from the closed form of each all-to-all
        alone (``alone``)."""
        for (shape, _), stages in todo.items():
            for stage in stages:
                for group in range(self.layout.groups_per_rank):
                    self._alone_time(shape, stage, group)

    def _alone_time(self, shape: str, stage: int, group: int) -> float:
        """One all-to-all's data phase alone (``alone``): EP group ``group`` of ``stage`` (its
        expert-TP sub-group 0, as :meth:`_measure` keeps), from the closed form, kept."""
        key = (shape, stage, group)
        seconds = self._alone.get(key)
        if seconds is None:
            if self._transfers is None:
                self._transfers = transfers_on(self.links)
            gpus = self.layout.ep_subgroups(stage, group)[0]
            seconds = self._alone[key] = all_to_all_alone_s(
                self._transfers, gpus, self.traffic(stage, group), self.token_bytes[shape],
                shape_named(self.shapes, shape).algorithm, shape, self.run.a2a_chunks, self._gpu_rate)
        return seconds

    def _measure(self, todo: dict, progress: bool = False) -> None:
        """Run the fabric measurements ``{(shape, unit): stages}`` (in worker processes when there
        are several and ``workers`` > 1) and keep their times and link statistics. The EP groups
        of a unit that share no link are measured in separate runs (:func:`disjoint_sets`): flows
        that share no link cannot change each other's rates, so their times are the same but for
        the completion window's batching, and each run's events cost half as much."""
        if self.alone:
            self._measure_alone(todo)
            return
        bar = None
        if progress and len(todo) > 2:
            from tqdm import tqdm
            bar = tqdm(total=len(todo), desc="all-to-alls on the fabric", unit="run")
        jobs, parts, twins, classes = {}, {}, {}, TwinJobs(self.links)
        for key, stages in todo.items():
            groups, *rest = self._job(key[0], stages)
            sets = [[i] for i in range(len(groups))] if self.scope == "group" else \
                disjoint_sets([self._group_links(gpus) for gpus, _ in groups])
            parts[key] = sets
            for i, members in enumerate(sets):
                job = ([groups[g] for g in members], *rest)
                twin = classes.twin_of((key, i), job, [p for g in members for p in self._a2a_pairs(groups[g][0])])
                if twin is None:
                    jobs[(key, i)] = job
                else:                               # the same flow system as a job already listed
                    twins[(key, i)] = (*twin, job)
        flows = sum(len(gpus) ** 2 for job in jobs.values() for gpus, _ in job[0])
        parallel = len(jobs) > 1 and flows >= PARALLEL_MIN_FLOWS
        pool, self._kept_pool = self._kept_pool, None     # the routing's processes, if any
        if pool is not None and not parallel:
            pool.shutdown()
            pool = None
        with pool if pool is not None else _pool(min(self.workers, len(jobs)) if parallel else 1, self.links) as pool:
            if pool is None:
                results = {k: measure_all_to_alls(self.links, *job) for k, job in jobs.items()}
            else:
                futures = {k: pool.submit(_measure_job, job) for k, job in jobs.items()}
                results = {k: fut.result() for k, fut in futures.items()}
        for name, (other, a, b, job) in twins.items():
            ends, frame = results[other]
            frame = renamed_stats(frame, self.links, a, b)
            results[name] = (ends, frame) if frame is not None else measure_all_to_alls(self.links, *job)
        for key, sets in parts.items():                   # in a fixed order: the same link_frames
            ends = np.zeros(sum(len(m) for m in sets))
            frames = []
            for i, members in enumerate(sets):
                part_ends, frame = results[(key, i)]
                ends[members] = part_ends
                frames.append(frame)
            shape, unit = key
            self.link_frames[shape] = merged_link_stats(frames, float(ends.max()))
            self._times[key] = self._ends_array(todo[key], list(ends[::self.layout.etp]))   # sub-group 0's
            if bar:
                bar.update(1)
        if bar:
            bar.close()

    def _a2a_pairs(self, gpus: list[int]) -> list[tuple[int, int]]:
        """The GPU pairs an all-to-all of ``gpus`` may send between: every two of them (flat), or
        within a node and to the same-index GPU of every other node (hierarchical, both shapes)."""
        gpn, flat = self.layout.gpus_per_node, self.run.a2a_algorithm == "flat"
        return [(a, b) for a in gpus for b in gpus if a != b and (flat or a // gpn == b // gpn or a % gpn == b % gpn)]

    def _group_links(self, gpus: list[int]) -> np.ndarray:
        """The links an all-to-all of ``gpus`` may use."""
        return np.unique(route_signature(self.links, self._a2a_pairs(gpus))[1])


def group_latency(links: LinkTable, gpus: list[int]) -> float:
    """The longest one-way route latency (s) between a group's first GPU and the others, either way:
    what a notify phase's message crossing the group pays."""
    first = gpus[0]
    return max((max(links.route(first, g)[1], links.route(g, first)[1]) for g in gpus[1:]), default=0.0)


def disjoint_sets(link_sets: list[np.ndarray]) -> list[list[int]]:
    """Indices of ``link_sets`` grouped so that sets in different groups share no link (union-find
    over shared links); groups in order of their first member."""
    parent = list(range(len(link_sets)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[int, int] = {}
    for i, links in enumerate(link_sets):
        for link in links.tolist():
            j = owner.setdefault(link, i)
            if j != i:
                parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(link_sets)):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def merged_link_stats(frames: list, window_s: float):
    """Link statistics of runs on disjoint links as one run of ``window_s`` seconds would give them:
    the rows together, mean utilisation over that window, sorted as :func:`link_stats` sorts."""
    import pandas as pd
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].copy()
    if window_s > 0:
        df["mean_util"] = df["bytes"] / (df["bandwidth_GBps"] * 1e9 * window_s)
    return df.sort_values(["bytes", "link"], ascending=[False, True], kind="stable").reset_index(drop=True)


def measure_all_to_alls(links: LinkTable, groups: list, token_bytes: float, algorithm: str, shape: str,
                        chunks: int, completion_window: float, gpu_rate: float | None = None,
                        backend: str = "maxmin") -> tuple[list[float], object]:
    """Run the all-to-alls of ``groups`` ([(GPU ids, Traffic)]) at once on a fresh network of
    ``backend`` (:func:`~sim.network.build_network`): (seconds until each group's last byte lands,
    link statistics). ``gpu_rate`` (bytes/s, ``None``: no limit) is what each GPU's kernel moves at
    most per direction (its SMs): a group's time is then at least its busiest GPU's bytes sent or
    received (forwards included) / ``gpu_rate``.

    The SM bound is a floor on the whole collective, not a link the GPU's flows share max-min
    fairly: DeepEP gives its RDMA senders and NVLink forwarders their own warps, so a fair split
    of the SMs among flows would starve the IB flows of a forwarding GPU, which the kernel does not."""
    env = simpy.Environment()
    fabric = build_network(env, links, backend, completion_window=completion_window)
    ends = [0.0] * len(groups)
    with gc_paused():                   # millions of short-lived events: see sim.perf
        for i, (gpus, traffic) in enumerate(groups):
            ev = all_to_all(fabric, gpus, traffic, token_bytes, algorithm, shape, chunks)
            ev.callbacks.append(lambda _e, i=i: ends.__setitem__(i, env.now))
        env.run()
    if gpu_rate is not None:
        sent, received = fabric.bytes_sent, fabric.bytes_received
        for i, (gpus, _) in enumerate(groups):
            ends[i] = max(ends[i], float(np.maximum(sent[gpus], received[gpus]).max()) / gpu_rate)
    return ends, link_stats(fabric)


_WORKER_LINKS: list[LinkTable] = []


def _set_worker_links(queue) -> None:
    """Pool initializer: keep the parent's link table (from ``queue``, if any) in this worker process,
    which ends when its parent does (:func:`sim.orphans.watch_parent`)."""
    watch_parent()
    if queue is not None:
        _WORKER_LINKS[:] = [queue.get()]


def _measure_job(job: tuple):
    """:func:`measure_all_to_alls` in a worker process, on the link table its pool was given
    (routes are deterministic, so they equal the parent's)."""
    return measure_all_to_alls(_WORKER_LINKS[0], *job)


def _pool(workers: int, links: LinkTable | None = None):
    """A process pool of ``workers`` (spawned: safe with threads and SimPy state), each holding
    ``links`` when given, or a context giving ``None`` (run here) for one worker. Give it at least
    ``workers`` tasks at once: the pool starts a process per task until it has ``workers``, and a
    copy of ``links`` that no process takes keeps the queue's feeder thread waiting (until exit)."""
    if workers <= 1:
        return contextlib.nullcontext(None)
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    ctx = mp.get_context("spawn")
    init = {"initializer": _set_worker_links, "initargs": (None,)}
    if links is not None:
        # The table travels through a queue, not as the initializer's argument: a start's arguments
        # are written to the new process before it returns, and 2 MB (2,048 GPUs) fill the pipe
        # until the process has imported its modules, so the workers would start one after the
        # other (1.2 s each). A queue's feeder thread writes in the background; all start at once.
        queue = ctx.Queue()
        queue.cancel_join_thread()          # exit does not wait for a table no worker read
        for _ in range(workers):
            queue.put(links)
        init = {"initializer": _set_worker_links, "initargs": (queue,)}
    return ProcessPoolExecutor(workers, mp_context=ctx, **init)
