"""Where every piece of a run sits: which GPU holds pipeline rank r of data-parallel replica d, which
GPUs form an expert-parallel (EP) group, which GPUs hold copies of the same parameter shard.

GPU ids are global and node-major (``node * gpus_per_node + local``, as the topology builders
number them). The layout is rank-major:

* pipeline rank r of replica d is GPU ``r * dp + d`` (a rank holds one stage, or two for
  DualPipe, DualPipeV, ZB-V and Chimera; the stages follow the schedule's placement);
* EP group g of rank r is replicas ``g * ep .. g * ep + ep - 1`` of that rank, i.e. GPUs
  ``r * dp + g * ep ..`` (whole nodes when ``ep >= gpus_per_node``);
* the data-parallel group of a rank's dense parameters is every replica of the rank (``dp`` GPUs);
  its expert parameters are replicated only over the GPUs at the same position of every EP group
  of the rank (``dp / ep`` GPUs): for DeepSeek-V3, 2,048 / (16 x 64) = 2.

Every layout rule is checked here, once, when the layout is built (:meth:`Layout.check`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..network import ep_group_error
from .specs import SpecError


@dataclass(frozen=True)
class Layout:
    pp: int
    dp: int
    ep: int
    gpus_per_node: int

    @classmethod
    def check(cls, pp: int, dp: int, ep: int, gpus_per_node: int, topology_gpus: int, topology: str,
              routed_experts: int = 0) -> "Layout":
        """The layout of PP x DP GPUs with EP groups of ``ep``, or a :class:`SpecError` naming the
        rule: EP groups are made of data-parallel replicas (``ep`` divides ``dp``), fit the nodes
        and divide the routed experts; the topology has the GPUs."""
        if dp % ep:
            raise SpecError(f"RunSpec.ep ({ep}) must divide dp ({dp}): an EP group is made of "
                            f"{ep} data-parallel replicas of one stage")
        if pp * dp > topology_gpus:
            raise SpecError(f"pp x dp = {pp} x {dp} = {pp * dp} GPUs, but topology {topology!r} has {topology_gpus}")
        problem = ep_group_error(ep, gpus_per_node, routed_experts or None)
        if problem:
            raise SpecError(problem)
        return cls(pp, dp, ep, gpus_per_node)

    @property
    def gpus(self) -> int:
        return self.pp * self.dp

    @property
    def groups_per_rank(self) -> int:
        """EP groups at each pipeline rank (``dp / ep``)."""
        return self.dp // self.ep

    @property
    def traced_rank(self) -> int:
        """The rank whose parts a step records for traces and the F&B figure: a middle rank."""
        return self.pp // 2

    def gpu(self, rank: int, replica: int) -> int:
        """The GPU holding pipeline rank ``rank`` of data-parallel replica ``replica``."""
        return rank * self.dp + replica

    def gpus_of(self, rank: int, replicas: np.ndarray) -> np.ndarray:
        """:meth:`gpu` for a vector of replicas."""
        return rank * self.dp + np.asarray(replicas)

    def group_of_replica(self, replica: int) -> int:
        return replica // self.ep

    def group_replicas(self, group: int) -> list[int]:
        """The data-parallel replicas whose GPUs form EP group ``group`` (at every rank)."""
        return list(range(group * self.ep, (group + 1) * self.ep))

    def ep_group(self, rank: int, group: int) -> list[int]:
        """GPUs of EP group ``group`` at pipeline rank ``rank``."""
        start = self.gpu(rank, group * self.ep)
        return list(range(start, start + self.ep))

    def dense_dp_group(self, rank: int) -> list[int]:
        """GPUs holding copies of rank ``rank``'s dense parameters (attention, shared experts, ...)."""
        return list(range(self.gpu(rank, 0), self.gpu(rank, self.dp)))

    def expert_dp_group(self, rank: int, position: int) -> list[int]:
        """GPUs holding copies of the routed experts at ``position`` (0..ep-1) of rank ``rank``'s EP
        groups: one GPU per EP group."""
        return [self.gpu(rank, g * self.ep + position) for g in range(self.groups_per_rank)]


__all__ = ["Layout"]
