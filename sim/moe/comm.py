"""All-to-all times of a run, measured on the flow-level fabric.

GPU layout: stage r of the pipeline runs on GPUs ``r*dp .. r*dp + dp-1`` (node-major), data-parallel
replica d of stage r on GPU ``r*dp + d``; EP group e of stage r is replicas ``e*ep .. e*ep + ep-1``
(whole nodes when ep >= GPUs per node). Pipeline d's rank r is GPU ``r*dp + d``.

An all-to-all of one EP group is never alone: with balanced routing every group of a stage runs
the same collective at the same moment. So a collective's time is measured once per shape
(dispatch or combine) by running the all-to-alls of every EP group of a stage (``scope="stage"``)
or of every stage (``scope="cluster"``, an upper bound on cross-stage contention) at once on a
fresh fabric of the run's topology, and then charged to each comm part. Under skewed routing each
group has its own traffic (seed + group index) and its own time.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import simpy

from ..network import Fabric, LinkTable, MoERouting, all_to_all, link_stats, route_tokens
from .specs import ModelSpec, RunSpec, SpecError

SCOPES = ("stage", "cluster")


class CommModel:
    def __init__(self, run: RunSpec, model: ModelSpec, links: LinkTable, gpus_per_node: int,
                 token_bytes: dict[str, float], scope: str = "stage"):
        if scope not in SCOPES:
            raise SpecError(f"comm scope must be one of {', '.join(SCOPES)}, got {scope!r}")
        self.run, self.model, self.links, self.scope = run, model, links, scope
        self.token_bytes = token_bytes  # {"dispatch": bytes, "combine": bytes}
        self.gpus_per_node = gpus_per_node
        self.groups_per_stage = run.dp // run.ep
        self._times: dict[tuple, np.ndarray] = {}
        self.link_frames = {}
        self._traffic = {}
        if model.is_moe:
            for g in range(self.groups_per_stage * run.pp):
                self._traffic[g] = route_tokens(self._routing(g))
        self._load = self._load_factors() if model.is_moe and run.routing_skew > 0 else None

    def _routing(self, group: int) -> MoERouting:
        r = self.run
        return MoERouting(ep=r.ep, gpus_per_node=self.gpus_per_node, num_experts=self.model.routed_experts,
                          topk=self.model.topk, tokens_per_gpu=r.tokens_per_microbatch, node_limit=r.node_limit,
                          skew=r.routing_skew, seed=r.routing_seed + group)

    def group_gpus(self, stage: int, group: int) -> list[int]:
        start = stage * self.run.dp + group * self.run.ep
        return list(range(start, start + self.run.ep))

    def group_of_replica(self, replica: int) -> int:
        return replica // self.run.ep

    def traffic(self, stage: int, group: int):
        return self._traffic[stage * self.groups_per_stage + group]

    def _load_factors(self) -> np.ndarray:
        """[stage, replica]: tokens a GPU's experts receive relative to its group's mean."""
        out = np.ones((self.run.pp, self.run.dp))
        for stage in range(self.run.pp):
            for g in range(self.groups_per_stage):
                received = self.traffic(stage, g).gpu_tokens.sum(axis=0)
                if received.mean() > 0:
                    out[stage, g * self.run.ep:(g + 1) * self.run.ep] = received / received.mean()
        return out

    def load_factor(self, stage: int, replica: int) -> float:
        """Expert load of a GPU relative to the balanced mean: 1.0 unless routing is skewed."""
        return 1.0 if self._load is None else float(self._load[stage, replica])

    def time(self, shape: str, stage: int, group: int) -> float:
        """Seconds of one dispatch- or combine-shaped all-to-all of EP group ``group`` at ``stage``.

        Measured once per (shape, unit): with balanced routing and stage scope every stage is
        alike and stage 0 stands for all; otherwise each stage (stage scope) or the whole
        cluster at once (cluster scope) is measured."""
        if self.scope == "cluster":
            unit, stages = -1, list(range(self.run.pp))
        elif self.run.routing_skew == 0:
            unit, stages = 0, [0]
        else:
            unit, stages = stage, [stage]
        times = self._times.get((shape, unit))
        if times is None:
            times = self._times[(shape, unit)] = self._measure(shape, stages)
        return float(times[stage if unit == -1 else unit, group])

    def serves(self, run: RunSpec, scope: str) -> bool:
        """Whether these measurements hold for ``run`` too: same run but for the schedule."""
        return scope == self.scope and dataclasses.replace(self.run, schedule=run.schedule) == run

    def units(self) -> list[tuple[str, int]]:
        """(shape, stage) of every measurement a step needs: one per shape with balanced routing
        (stage scope) or cluster scope, one per shape and stage with skewed routing."""
        if not self.model.is_moe:
            return []
        stages = [0] if self.scope == "cluster" or self.run.routing_skew == 0 else range(self.run.pp)
        return [(shape, stage) for shape in ("dispatch", "combine") for stage in stages]

    def measure_all(self, progress: bool = False) -> None:
        """Measure now what :meth:`time` would measure on first use; with ``progress``, a bar
        when there are more than two (skewed routing: 2 x PP fabric runs, minutes at scale)."""
        units = self.units()
        bar = None
        if progress and len(units) > 2:
            from tqdm import tqdm
            bar = tqdm(total=len(units), desc="skewed all-to-alls on the fabric", unit="run")
        for shape, stage in units:
            self.time(shape, stage, 0)
            if bar:
                bar.update(1)
        if bar:
            bar.close()

    def _measure(self, shape: str, stages: list[int]) -> np.ndarray:
        env = simpy.Environment()
        fabric = Fabric(env, self.links, completion_window=0.0 if self.run.routing_skew == 0 else 1e-3)
        ends = np.zeros((self.run.pp, self.groups_per_stage))
        for s in stages:
            for g in range(self.groups_per_stage):
                ev = all_to_all(fabric, self.group_gpus(s, g), self.traffic(s, g), self.token_bytes[shape],
                                self.run.a2a_algorithm, shape, self.run.a2a_chunks)
                ev.callbacks.append(lambda _e, s=s, g=g: ends.__setitem__((s, g), env.now))
        env.run()
        self.link_frames[shape] = link_stats(fabric)
        return ends
