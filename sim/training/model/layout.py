"""Where every piece of a run sits: which GPUs hold pipeline rank r of data-parallel replica d, which
GPUs form a tensor-parallel (TP), context-parallel (CP), expert-parallel (EP) or data-parallel
group.

GPU ids are global and node-major (``node * gpus_per_node + local``, as the topology builders
number them). The layout follows Megatron-Core's default order, ``tp-cp-ep-dp-pp``: the TP
coordinate varies fastest, then CP, then the data-parallel replica (whose lowest digits are the
EP coordinate), then the pipeline rank, so that

    GPU(t, c, d, r) = t + tp * (c + cp * (d + dp * r)).

* a replica of pipeline rank r is the ``tp x cp`` GPUs starting at its *lead* GPU
  ``GPU(0, 0, d, r)`` (:meth:`Layout.gpu`); the TP group of a replica is ``tp`` consecutive GPUs
  (one NVLink domain when ``tp`` divides the GPUs of a node), its CP group the GPUs at the same TP
  coordinate, ``tp`` apart;
* an EP group is ``ep`` consecutive GPUs of a rank: EP group g of rank r is replicas
  ``g * e .. g * e + e - 1`` of that rank, all their GPUs, with ``e = ep / (tp x cp)`` replicas
  per group (:attr:`Layout.ep_replicas`). An MoE model's experts are not split by TP: each GPU
  holds ``E / ep`` whole experts and dispatches its own ``T / (tp x cp)`` tokens (its sequence
  shard: expert tensor parallelism 1 under Megatron-Core's MoE "parallel folding", whose expert
  order ``etp-ep-edp-pp`` folds EP over the attention's TP, CP and DP GPUs); with ``tp = cp = 1``
  an EP group is ``ep`` replicas, as in DeepSeek-V3. With expert tensor parallelism
  (``expert_tp`` = e, a divisor of ``tp``) each expert is split over e consecutive GPUs and an EP
  group is every e-th GPU of a block of ``e x ep`` (whole replicas: ``e x ep / (tp x cp)`` of
  them); the block's e EP groups run their all-to-alls side by side, the lead GPUs' group (sub 0)
  standing for the step;
* the data-parallel group of a rank's dense parameters is every replica of the rank at one
  (t, c) coordinate (``dp`` GPUs); its expert parameters are replicated only over the GPUs at the
  same position of every EP group of the rank (``tp x cp x dp / ep`` GPUs): for DeepSeek-V3,
  2,048 / (16 x 64) = 2.

The step plays each replica on its lead GPU: the other ``tp x cp - 1`` GPUs of the replica do the
same work at the same time on links of their own (each GPU has its own NIC on every preset), so a
lead's pipeline sends and data-parallel rings carry its own share of the bytes (``1 / tp``) and
stand for its peers'. The TP and CP collectives inside the replica run on the fabric among the
replica's own GPUs (:mod:`sim.training.comm.model_parallel`).

Every layout rule is checked here, once, when the layout is built (:meth:`Layout.check`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ...checks import SpecError
from ...network import ep_group_error

ORDER = ("tp", "cp", "dp", "pp")       # fastest first; EP is the low digits of dp (Megatron's tp-cp-ep-dp-pp)
GROUP_AXES = ("tp", "cp", "ep", "dp", "pp", "etp")


class Coordinates(NamedTuple):
    """A GPU's place in the layout: TP and CP coordinates, data-parallel replica, pipeline rank."""

    tp: int
    cp: int
    dp: int
    pp: int


@dataclass(frozen=True)
class LayoutRequest:
    """What :meth:`Layout.check` checks a layout against: the parallel sizes (``pp``, ``dp``,
    ``ep``, ``tp``, ``cp``, ``expert_tp``; Megatron-Core's names), the cluster (``gpus_per_node``,
    ``topology_gpus``, and the ``topology``'s name for the messages), the model (``routed_experts``,
    0 for a dense model; attention ``heads`` and ``kv_heads``, 0: not checked) and the run's
    choices (``tp_across_nodes``, ``sequence_parallel``)."""

    pp: int
    dp: int
    ep: int
    gpus_per_node: int
    topology_gpus: int
    topology: str
    routed_experts: int = 0
    tp: int = 1
    cp: int = 1
    heads: int = 0
    kv_heads: int = 0
    tp_across_nodes: bool = False
    sequence_parallel: bool = False
    expert_tp: int = 1


@dataclass(frozen=True)
class Layout:
    pp: int
    dp: int
    ep: int
    gpus_per_node: int
    tp: int = 1
    cp: int = 1
    etp: int = 1

    @classmethod
    def check(cls, request: LayoutRequest) -> "Layout":
        """The layout ``request`` asks for (:class:`LayoutRequest`): ``tp x cp x pp x dp`` GPUs with
        EP groups of ``ep`` GPUs, or a
        :class:`SpecError` naming the rule: EP groups are made of whole data-parallel replicas
        (``ep`` a multiple of ``tp x cp`` whose quotient divides ``dp``), fit the nodes and divide
        the routed experts; an MoE model with TP uses sequence parallelism (Megatron-Core refuses it
        otherwise); TP divides the attention heads (and key/value heads) and, unless
        ``tp_across_nodes``, the GPUs of a node; the topology has the GPUs."""
        r = request
        pp, dp, ep, tp, cp, expert_tp = r.pp, r.dp, r.ep, r.tp, r.cp, r.expert_tp
        gpus_per_node, topology_gpus, topology = r.gpus_per_node, r.topology_gpus, r.topology
        routed_experts, heads, kv_heads = r.routed_experts, r.heads, r.kv_heads
        tp_across_nodes, sequence_parallel = r.tp_across_nodes, r.sequence_parallel
        mp, block = tp * cp, expert_tp * ep
        if expert_tp > 1 and not routed_experts:
            raise SpecError(f"RunSpec.expert_tp ({expert_tp}) splits an MoE model's routed experts: a dense model "
                            "leaves it 1")
        if mp > 1 and block > 1 and block % mp and expert_tp == 1:      # folding
            raise SpecError(f"RunSpec.ep ({ep}) must be a multiple of tp x cp ({tp} x {cp} = {mp}) for an MoE "
                            "model: an EP group is made of whole replicas' GPUs (expert tensor parallelism 1, "
                            "Megatron-Core's parallel folding)")
        if mp > 1 and block > 1 and block % mp:
            raise SpecError(f"RunSpec.ep x expert_tp ({ep} x {expert_tp} = {block}) must be a multiple of tp x cp "
                            f"({tp} x {cp} = {mp}): an EP group's GPUs and their expert-TP partners are whole "
                            "replicas")
        replicas = max(1, block // mp)
        if dp % replicas and mp == 1:
            raise SpecError(f"RunSpec.ep ({ep}) must divide dp ({dp}): an EP group is made of "
                            f"{ep} data-parallel replicas of one stage")
        if dp % replicas:
            what = f"an EP group is made of {ep} GPUs" if expert_tp == 1 else \
                f"an EP group and its expert-TP partners are {block} GPUs"
            raise SpecError(f"RunSpec.ep ({ep}) must divide tp x cp x dp ({mp * dp}) in whole replicas: {what} = "
                            f"{replicas} data-parallel replicas of {mp} GPUs of one stage, and dp ({dp}) must be a "
                            f"multiple of {replicas}")
        if routed_experts and tp > 1 and not sequence_parallel:
            raise SpecError(f"RunSpec.sequence_parallel must be true for an MoE model with tp ({tp}) above 1 "
                            "(Megatron-Core requires sequence parallelism with MoE and tensor parallelism)")
        gpus = tp * cp * pp * dp
        if gpus > topology_gpus:
            raise SpecError(f"tp x cp x pp x dp = {tp} x {cp} x {pp} x {dp} = {gpus} GPUs, but topology "
                            f"{topology!r} has {topology_gpus}")
        if heads and heads % tp:
            raise SpecError(f"RunSpec.tp ({tp}) must divide the model's {heads} attention heads: allowed "
                            f"{', '.join(map(str, divisors(heads)))}")
        if kv_heads and kv_heads % tp and tp % kv_heads:
            raise SpecError(f"RunSpec.tp ({tp}) and the model's {kv_heads} key/value heads must divide one "
                            "another (each TP GPU holds whole key/value heads, or a head is copied to several)")
        if not tp_across_nodes and gpus_per_node % tp:
            raise SpecError(f"RunSpec.tp ({tp}) must divide the {gpus_per_node} GPUs of a node of {topology!r} "
                            f"(a TP group inside one NVLink domain): allowed "
                            f"{', '.join(str(t) for t in divisors(gpus_per_node))}, or set tp_across_nodes: true")
        problem = ep_group_error(ep, max(1, gpus_per_node // expert_tp), routed_experts or None)
        if problem:
            raise SpecError(problem if expert_tp == 1 else f"{problem} (EP groups of expert_tp {expert_tp}: "
                            f"{max(1, gpus_per_node // expert_tp)} of a node's GPUs in each)")
        return cls(pp, dp, ep, gpus_per_node, tp, cp, expert_tp)

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def model_parallel(self) -> int:
        """GPUs of one replica of a pipeline rank: ``tp x cp``."""
        return self.tp * self.cp

    @property
    def tp_spans_nodes(self) -> bool:
        """Whether a TP group leaves its node (allowed only with ``tp_across_nodes``)."""
        return self.tp > self.gpus_per_node or self.gpus_per_node % self.tp != 0

    @property
    def ep_replicas(self) -> int:
        """Data-parallel replicas whose GPUs make one EP group and its expert-TP partners:
        ``expert_tp x ep / (tp x cp)`` (at least 1)."""
        return max(1, self.etp * self.ep // self.model_parallel)

    @property
    def ep_gpus_per_node(self) -> int:
        """GPUs of one EP group in a node: a node's GPUs / ``expert_tp`` (an EP group takes every
        ``expert_tp``-th GPU)."""
        return max(1, self.gpus_per_node // self.etp)

    @property
    def groups_per_rank(self) -> int:
        """EP groups at each pipeline rank (``dp / ep_replicas``)."""
        return self.dp // self.ep_replicas

    @property
    def traced_rank(self) -> int:
        """The rank whose parts a step records for traces and the F&B figure: a middle rank."""
        return self.pp // 2

    def gpu(self, rank: int, replica: int) -> int:
        """The lead GPU (TP and CP coordinate 0) of pipeline rank ``rank`` of replica ``replica``."""
        return (rank * self.dp + replica) * self.model_parallel

    def gpus_of(self, rank: int, replicas: np.ndarray) -> np.ndarray:
        """:meth:`gpu` for a vector of replicas."""
        return (rank * self.dp + np.asarray(replicas)) * self.model_parallel

    def gpu_at(self, c: Coordinates) -> int:
        """The GPU at coordinates ``c``: ``t + tp (c + cp (d + dp r))``."""
        return c.tp + self.tp * (c.cp + self.cp * (c.dp + self.dp * c.pp))

    def coordinates(self, gpu: int) -> Coordinates:
        """The coordinates of ``gpu`` (the inverse of :meth:`gpu_at`)."""
        if not 0 <= gpu < self.gpus:
            raise ValueError(f"GPU {gpu} is not in this layout of {self.gpus} GPUs")
        rest, t = divmod(gpu, self.tp)
        rest, c = divmod(rest, self.cp)
        r, d = divmod(rest, self.dp)
        return Coordinates(t, c, d, r)

    def group_of_replica(self, replica: int) -> int:
        return replica // self.ep_replicas

    def group_replicas(self, group: int) -> list[int]:
        """The data-parallel replicas whose GPUs form EP group ``group`` (at every rank)."""
        e = self.ep_replicas
        return list(range(group * e, (group + 1) * e))

    def ep_group(self, rank: int, group: int, sub: int = 0) -> list[int]:
        """The GPUs of EP group ``group`` at pipeline rank ``rank``: its replicas' GPUs at expert-TP
        coordinate ``sub`` (every ``expert_tp``-th GPU from the first replica's lead GPU plus
        ``sub``; ``ep`` consecutive GPUs when ``expert_tp`` is 1, the replicas' lead GPUs when
        ``tp = cp = 1``). Group ``group`` with ``sub`` 0 holds the lead GPUs the step plays; the
        ``expert_tp - 1`` others (:meth:`ep_subgroups`) run the same all-to-alls beside it."""
        first = self.gpu(rank, group * self.ep_replicas) + sub
        return list(range(first, first + self.etp * self.ep, self.etp))

    def ep_subgroups(self, rank: int, group: int) -> list[list[int]]:
        """The ``expert_tp`` EP groups on the replicas of EP group ``group`` (sub 0 first)."""
        return [self.ep_group(rank, group, sub) for sub in range(self.etp)]

    def etp_group(self, rank: int, replica: int, index: int = 0) -> list[int]:
        """GPUs of expert-TP group ``index`` of replica ``replica`` of rank ``rank``: ``expert_tp``
        consecutive GPUs, which split each of their experts and gather their tokens."""
        first = self.gpu(rank, replica) + index * self.etp
        return list(range(first, first + self.etp))

    def tp_group(self, rank: int, replica: int, cp: int = 0) -> list[int]:
        """GPUs of the TP group at CP coordinate ``cp`` of replica ``replica`` of rank ``rank``."""
        first = self.gpu(rank, replica) + cp * self.tp
        return list(range(first, first + self.tp))

    def cp_group(self, rank: int, replica: int, tp: int = 0) -> list[int]:
        """GPUs of the CP group at TP coordinate ``tp`` of replica ``replica`` of rank ``rank`` (the
        ring the attention's keys and values travel)."""
        return [self.gpu(rank, replica) + tp + c * self.tp for c in range(self.cp)]

    def dense_dp_group(self, rank: int) -> list[int]:
        """Lead GPUs holding copies of rank ``rank``'s dense parameters (attention, shared experts, ...)."""
        return [self.gpu(rank, d) for d in range(self.dp)]

    def expert_dp_group(self, rank: int, position: int) -> list[int]:
        """Lead GPUs holding copies of the routed experts of the replica at ``position``
        (0..ep_replicas-1) of rank ``rank``'s EP groups: one GPU per EP group (each standing for
        the other GPUs of its replica, which hold other experts and sync them over their own
        links)."""
        return [self.gpu(rank, g * self.ep_replicas + position) for g in range(self.groups_per_rank)]

    def groups(self, axis: str) -> list[list[int]]:
        """Every group of ``axis`` (:data:`GROUP_AXES`) over all GPUs: the GPUs that differ only in
        that coordinate (``ep``: in the EP digits of the replica). The groups of an axis partition
        the GPUs; in the flattened (t, c, d) index Megatron-Core's expert order etp-ep-edp folds EP
        and expert TP over them: an expert-TP group is ``expert_tp`` consecutive GPUs and an EP group
        every ``expert_tp``-th GPU of a block of ``expert_tp x ep``."""
        if axis not in GROUP_AXES:
            raise ValueError(f"axis must be one of {', '.join(GROUP_AXES)}, got {axis!r}")
        out: dict[tuple, list[int]] = {}
        for gpu in range(self.gpus):
            c = self.coordinates(gpu)
            flat = c.tp + self.tp * (c.cp + self.cp * c.dp)
            key = {"tp": (c.cp, c.dp, c.pp), "cp": (c.tp, c.dp, c.pp), "dp": (c.tp, c.cp, c.pp),
                   "pp": (c.tp, c.cp, c.dp),
                   "ep": (flat % self.etp, flat // (self.etp * self.ep), c.pp),
                   "etp": (flat // self.etp, c.pp)}[axis]
            out.setdefault(key, []).append(gpu)
        return list(out.values())


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


__all__ = ["LayoutRequest", "Coordinates", "GROUP_AXES", "Layout", "ORDER", "divisors"]
