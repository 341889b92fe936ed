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
  step with the attention over the block already there: a GPU computes its own block first
  (``a = core / c`` seconds, ``core`` the attention core's seconds on a GPU), then block j as soon
  as it has both finished block j - 1 and received block j, which lands ``T_j`` seconds after the
  ring's launch (simulated step by step on the fabric, :func:`~sim.network.ring_all_gather`'s
  ``on_receive``). Its attention ends ``max(c a, max_j (T_j + (c - j) a))`` after the launch, so
  the compute stream waits ``max(0, max_j (T_j - j a))`` for the ring (:func:`blocks_wait`), the
  slowest GPU's for a replica. With equal steps of s after a latency L (``T_j = L + j s``) that is
  ``max(0, L + s - a, L + (c - 1)(s - a))``: the last term alone is the whole ring less ``(c - 1)
  a``, and the first says that the first block's latency cannot hide behind later blocks.
  ``cp_kv:f`` is the forward's; ``cp_kv:b``, the backward's, passes twice the bytes (keys and
  values, then their gradients) behind twice the core.
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
        launch to the last byte; of a CP ring, what the attention does not hide (:meth:`exposed`)."""
        if shape not in self._times:
            self._times[shape] = self.exposed(shape, *self._measure(shape))
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
        return self._measure(shape)[0]

    def _measure(self, shape: str) -> tuple[float, list | None]:
        """(:meth:`ring_seconds`, and for a CP ring when each GPU received each block, seconds
        after the launch, ``[ring][GPU][block]``; else ``None``)."""
        ring, groups, nbytes = self.rings(shape, 0, self._replicas_on_first_node())
        env = simpy.Environment()
        arrivals = self.arrivals_for(shape, groups)
        with gc_paused():
            fabric = self.sc.step_fabric(env)
            events = [ring(fabric, gpus, nbytes, **receiving(arrivals, g, lambda: self.launch_s + env.now))
                      for g, gpus in enumerate(groups)]
            ends: list[float] = []
            simpy.AllOf(env, events).callbacks.append(lambda _e: ends.append(env.now))
            env.run()
        return self.launch_s + ends[0], arrivals

    def arrivals_for(self, shape: str, groups: list) -> list | None:
        """Empty arrival lists ``[ring][GPU]`` for a CP ring ``shape`` over ``groups`` (else
        ``None``): what :func:`receiving` fills."""
        return [[[] for _ in gpus] for gpus in groups] if self.axis(shape) == "cp" else None

    def cp_ring_seconds(self, backward: bool = False) -> float:
        """Seconds of the whole key/value ring of the CP groups (before any overlap): a ring
        all-gather of ``cp`` blocks (twice the bytes in the backward)."""
        return self.ring_seconds(CP_SHAPE + ":b" if backward else CP_SHAPE)

    def exposed(self, shape: str, seconds: float, arrivals: list | None = None) -> float:
        """Seconds the compute stream waits for collective ``shape`` that ran ``seconds`` from its
        launch to its last byte: all of them for a TP collective; for a CP ring what the attention
        does not hide of the blocks that landed at ``arrivals`` (``[ring][GPU][block]``, seconds
        after the launch): the most any GPU waits, :func:`blocks_wait`."""
        if self.axis(shape) != "cp":
            return seconds
        if not arrivals:
            raise ValueError(f"{shape}: a CP ring's exposed time needs its blocks' arrivals (arrivals_for)")
        return max(blocks_wait(gpu, self.block_seconds(shape)) for ring in arrivals for gpu in ring)

    def block_seconds(self, shape: str) -> float:
        """Seconds of a CP ring's attention over one block of keys and values: ``core / cp``, the
        attention core on a GPU (twice that in the backward, ``cp_kv:b``)."""
        core = self.sc.chunk.stage_layers[0][0].core_f * (2.0 if shape.endswith(":b") else 1.0)
        return core / self.sc.run.cp

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


def blocks_wait(arrivals: list[float], block_s: float) -> float:
    """Seconds a GPU's attention waits for its context-parallel ring: it computes its own block
    (``block_s``) from the launch, then each received block in order as soon as it has both
    finished the one before and received it (the j-th at ``arrivals[j - 1]`` seconds after the
    launch, j = 1 ... c - 1): ``max(0, max_j (arrivals[j - 1] - j x block_s))``."""
    return max([0.0] + [t - j * block_s for j, t in enumerate(sorted(arrivals), start=1)])


def receiving(arrivals: list | None, ring: int, now) -> dict:
    """The keyword arguments that make ring number ``ring`` note ``now()`` in ``arrivals[ring][i]``
    each time its i-th GPU receives a block (:func:`~sim.network.ring_all_gather`'s
    ``on_receive``); none without ``arrivals``."""
    if arrivals is None:
        return {}
    return {"on_receive": lambda i: arrivals[ring][i].append(now())}


__all__ = ["ModelParallelComm", "RINGS", "blocks_wait", "receiving"]
