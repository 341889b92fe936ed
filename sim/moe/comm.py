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

    def load_factor(self, stage: int, replica: int) -> float:
        """Tokens a GPU's experts receive relative to the balanced mean (1.0 when uniform)."""
        if not self.model.is_moe:
            return 1.0
        g = self.group_of_replica(replica)
        received = self.traffic(stage, g).gpu_tokens.sum(axis=0)
        return float(received[replica % self.run.ep] / received.mean()) if received.mean() > 0 else 1.0

    def time(self, shape: str, stage: int, group: int) -> float:
        """Seconds of one dispatch- or combine-shaped all-to-all of EP group ``group`` at ``stage``."""
        balanced = self.run.routing_skew == 0
        key = (shape,) if balanced and self.scope == "stage" else (shape, stage if self.scope == "stage" else -1)
        times = self._times.get(key)
        if times is None:
            stages = [stage] if self.scope == "stage" else list(range(self.run.pp))
            if balanced and self.scope == "stage":
                stages = [0]
            times = self._measure(shape, stages)
            self._times[key] = times
        s = 0 if (balanced and self.scope == "stage") else stage
        return float(times[s, group])

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
