"""Seconds of the tensor- and context-parallel collectives inside an op, measured on the fabric.

A replica of a pipeline rank is ``tp x cp`` GPUs (:mod:`sim.training.model.layout`); the collectives among
them are the run's TP and CP shapes (:func:`~sim.training.comm.collective_shapes.model_parallel_shapes`).
Like the all-to-alls, each shape is measured once on a fresh fabric of the run's topology with
NCCL's per-GPU bound (:meth:`~sim.training.scenario.Scenario.step_fabric`), with every replica whose
GPUs share the first node running it at once, after an NCCL kernel launch:

* TP, on the ``T / cp`` tokens a GPU holds (n = T / cp x h x 2 bytes): ``tp_all_reduce`` a ring
  all-reduce of n bytes (2 (t - 1) steps of n / t), ``tp_all_gather`` and ``tp_reduce_scatter``
  rings of t - 1 steps of n / t (:mod:`sim.network.collectives`). On one NVLink node of
  bandwidth B per direction a ring all-reduce takes 2 (t - 1) / t x n / B plus the launch.
* CP: the ring that passes each GPU's keys and values (K bytes: T / cp tokens x
  :attr:`~sim.training.comm.collective_shapes.CollectiveShape.bytes_per_token`) to every other GPU of its CP
  group, c - 1 steps, i.e. a ring all-gather of c K bytes. Megatron-Core and Llama 3 overlap each
  step with the attention over the block already there, so what the compute stream waits for is
  ``max(0, ring - (c - 1) / c x core)`` (``core``: the attention core's seconds on a GPU; its
  first block waits for nothing). ``cp_kv:f`` is the forward's; ``cp_kv:b``, the backward's,
  passes twice the bytes (keys and values, then their gradients) behind twice the core.
* Expert TP (``expert_tp`` = e > 1, an MoE model): around the routed experts, a ring all-gather
  over the e GPUs of an expert-TP group of the token copies each received from the all-to-all
  (balanced routing: ``topk x T / (tp x cp)`` of them, e times that gathered), ``etp_all_gather``,
  and a ring reduce-scatter of the experts' output, ``etp_reduce_scatter``; counted with TP.
"""
from __future__ import annotations

import functools

import simpy

from ...network import ring_all_gather, ring_all_reduce, ring_reduce_scatter
from ...perf import gc_paused
from .collective_shapes import CP_SHAPE

RINGS = {"tp_all_reduce": ring_all_reduce, "tp_all_gather": ring_all_gather, "tp_reduce_scatter": ring_reduce_scatter,
         "etp_all_gather": ring_all_gather, "etp_reduce_scatter": ring_reduce_scatter}


class ModelParallelComm:
    """The TP and CP collectives of a scenario: :meth:`time` of a communication part's shape
    (``tp_all_reduce``, ``tp_all_gather``, ``tp_reduce_scatter``, ``cp_kv:f``, ``cp_kv:b``,
    ``etp_all_gather``, ``etp_reduce_scatter``)."""

    def __init__(self, scenario):
        self.sc = scenario
        self.shapes = {s.name: s for s in scenario.collectives if s.axis in ("tp", "cp", "etp")}
        self._times: dict[str, float] = {}

    def measures(self, shape: str) -> bool:
        """Whether ``shape`` (a communication part's) is a TP or CP collective of this run."""
        return shape.split(":")[0] in self.shapes

    def axis(self, shape: str) -> str:
        """``tp``, ``cp`` or ``""``: the model-parallel axis a communication part's ``shape`` runs
        over, from its :class:`~sim.training.comm.collective_shapes.CollectiveShape`'s ``axis`` (expert TP's
        rings count as ``tp``; a shape not measured here, such as an all-to-all, has none)."""
        found = self.shapes.get(shape.split(":")[0])
        if found is None:
            return ""
        return "tp" if found.axis == "etp" else found.axis

    def time(self, shape: str) -> float:
        """Seconds one GPU's compute stream waits for the collective ``shape``: its rings
        (:meth:`rings`) of every replica whose GPUs share the first node, at once, from the NCCL
        launch to the last byte, less what the attention hides of a CP ring (:meth:`exposed`)."""
        if shape not in self._times:
            self._times[shape] = self.exposed(shape, self.ring_seconds(shape))
        return self._times[shape]

    @property
    def tokens(self) -> int:
        """Tokens one GPU holds: ``T / cp``."""
        return self.sc.run.tokens_per_microbatch // self.sc.run.cp

    @property
    def launch_s(self) -> float:
        """An NCCL kernel's launch before each ring (:mod:`sim.training.comm.kernels`)."""
        return self.sc.kernels.nccl_launch_s

    @property
    def etp_factor(self) -> float:
        """An expert-TP ring's bytes per GPU over ``tokens x bytes_per_token``: the ``topk x T /
        (tp x cp)`` token copies a GPU received, gathered from ``expert_tp`` GPUs."""
        run = self.sc.run
        return run.expert_tp * self.sc.model.topk / run.tp

    def _replicas_on_first_node(self) -> range:
        """The replicas with a GPU on the first node: ``ceil(gpus_per_node / (tp x cp))``, at most ``dp``."""
        lay = self.sc.layout
        return range(min(lay.dp, -(-lay.gpus_per_node // lay.model_parallel)))

    def ring_seconds(self, shape: str) -> float:
        """Seconds of the rings of collective ``shape`` (:meth:`rings` of rank 0's replicas on the
        first node) at once on a fresh fabric of the run's topology, from the NCCL launch to the
        last byte (before any overlap)."""
        ring, groups, nbytes = self.rings(shape, 0, self._replicas_on_first_node())
        env = simpy.Environment()
        with gc_paused():
            fabric = self.sc.step_fabric(env)
            events = [ring(fabric, gpus, nbytes) for gpus in groups]
            ends: list[float] = []
            simpy.AllOf(env, events).callbacks.append(lambda _e: ends.append(env.now))
            env.run()
        return self.launch_s + ends[0]

    def cp_ring_seconds(self, backward: bool = False) -> float:
        """Seconds of the whole key/value ring of the CP groups (before any overlap): a ring
        all-gather of ``cp`` blocks (twice the bytes in the backward)."""
        return self.ring_seconds(CP_SHAPE + ":b" if backward else CP_SHAPE)

    def exposed(self, shape: str, seconds: float) -> float:
        """Seconds the compute stream waits for collective ``shape`` that ran ``seconds`` from its
        launch to its last byte: all of them for a TP collective; for the CP ring what the
        attention core does not hide, ``max(0, seconds - (cp - 1) / cp x core)``."""
        if self.axis(shape) != "cp":
            return seconds
        cp, backward = self.sc.run.cp, shape.endswith(":b")
        core = self.sc.chunk.stage_layers[0][0].core_f * (2.0 if backward else 1.0)
        return max(0.0, seconds - (cp - 1) / cp * core)

    def rings(self, shape: str, rank: int, replicas) -> tuple:
        """(ring function, GPU groups, bytes per GPU) of collective ``shape`` run by ``replicas`` of
        pipeline rank ``rank``: every TP group (at each CP coordinate), expert-TP group or CP group
        (at each TP coordinate) of those replicas. :meth:`time` measures them; live communication
        (:mod:`sim.training.comm.live`) starts them on the step's fabric. The ring function runs as NCCL
        would under the run's ``nccl_protocol`` (:mod:`sim.network.nccl`)."""
        ring, groups, nbytes = self._rings(shape, rank, replicas)
        return functools.partial(ring, protocol=self.sc.kernels.ring_protocol(self.sc.run.nccl_protocol)), groups, nbytes

    def _rings(self, shape: str, rank: int, replicas) -> tuple:
        lay, name = self.sc.layout, shape.split(":")[0]
        collective = self.shapes[name]
        per_token = self.tokens * collective.bytes_per_token
        if collective.axis == "cp":
            factor = self.sc.run.cp * (2.0 if shape.endswith(":b") else 1.0)
            groups = [lay.cp_group(rank, int(d), t) for d in replicas for t in range(lay.tp)]
            return ring_all_gather, groups, factor * per_token
        if collective.axis == "etp":
            groups = [lay.etp_group(rank, int(d), i) for d in replicas for i in range(lay.model_parallel // lay.etp)]
            return RINGS[name], groups, self.etp_factor * per_token
        groups = [lay.tp_group(rank, int(d), c) for d in replicas for c in range(lay.cp)]
        return RINGS[name], groups, per_token


__all__ = ["ModelParallelComm", "RINGS"]
