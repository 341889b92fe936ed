"""The collectives inside an op, as named records: what the step's communication parts are made of.

An op (a micro-batch's forward or backward through a stage) issues collectives between its
compute parts: an MoE layer's all-to-alls dispatch tokens to their experts and combine the
results over the expert-parallel (EP) group. Each kind is a :class:`CollectiveShape`: its name
(the communication parts of :mod:`sim.training.costs.parts` carry it), the group axis it runs over (Megatron's
names: ``ep``, ``tp``, ``cp``, ``dp``), the algorithm it runs with, and the bytes one token puts on
the wire. The comm model (:class:`~sim.training.comm.alltoall.CommModel`), live communication and the runner read
the scenario's shapes (:func:`op_collectives`) instead of naming them, so a new kind (tensor- or
context-parallel collectives) joins by adding a record here.

The shapes: an MoE model's ``dispatch`` and ``combine`` all-to-alls over ``ep``, with the run's
all-to-all algorithm (``hierarchical``: through a GPU of the destination node, DeepEP's normal
kernels; ``flat``: straight to each expert's GPU) and each direction's precision (dispatch FP8 with
its scales, combine BF16 in DeepSeek-V3's recipe: report section 3.3); with tensor parallelism
(``tp`` > 1) the ring collectives Megatron issues around each attention and MLP block on the
block's BF16 activations (``h`` x 2 bytes a token): ``tp_all_reduce`` without sequence
parallelism, ``tp_all_gather`` and ``tp_reduce_scatter`` with it (Korthikanti et al. 2022,
section 4.2.2); with context parallelism (``cp`` > 1) the ring that passes each GPU's keys and
values round the CP group, ``cp_kv`` (2 x key/value heads on the GPU x head_dim x 2 bytes a token);
with expert tensor parallelism (``expert_tp`` > 1) the rings around an MoE layer's routed experts
over the expert-TP group: ``etp_all_gather`` of the token copies the all-to-all brought (at the
dispatch precision) and ``etp_reduce_scatter`` of the experts' output (at the combine precision).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...network import token_bytes
from ..model.specs import PRECISION_BYTES, ModelSpec, RunSpec, SpecError

AXES = ("ep", "tp", "cp", "dp", "etp")        # the group axes a collective runs over (Megatron-Core's names)
ALL_TO_ALL_ALGORITHMS = ("hierarchical", "flat")


@dataclass(frozen=True)
class CollectiveShape:
    """One kind of collective inside an op: ``name`` (as the communication parts carry it),
    ``axis`` (the group it runs over, one of :data:`AXES`), ``algorithm`` and ``bytes_per_token``
    (bytes of one token copy on the wire, > 0)."""

    name: str
    axis: str
    algorithm: str
    bytes_per_token: float

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise SpecError(f"collective shape name must be a non-empty string, got {self.name!r}")
        if self.axis not in AXES:
            raise SpecError(f"collective {self.name!r}: axis must be one of {', '.join(AXES)}, got {self.axis!r}")
        b = self.bytes_per_token
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not (0 < b < math.inf):
            raise SpecError(f"collective {self.name!r}: bytes_per_token must be a positive finite number, got {b!r}")

    @property
    def is_all_to_all(self) -> bool:
        """Whether this is an all-to-all (over ``ep``: what the comm model measures on the fabric)."""
        return self.algorithm in ALL_TO_ALL_ALGORITHMS


RING = "ring"
TP_SHAPES = ("tp_all_reduce", "tp_all_gather", "tp_reduce_scatter")
ETP_SHAPES = ("etp_all_gather", "etp_reduce_scatter")
CP_SHAPE = "cp_kv"


def op_collectives(model: ModelSpec, run: RunSpec) -> tuple[CollectiveShape, ...]:
    """The collectives an op of ``run`` issues: an MoE model's dispatch and combine all-to-alls
    (:func:`all_to_all_shapes`), then the tensor- and context-parallel ones
    (:func:`model_parallel_shapes`)."""
    return (all_to_all_shapes(model, run) if model.is_moe else ()) + model_parallel_shapes(model, run)


def model_parallel_shapes(model: ModelSpec, run: RunSpec) -> tuple[CollectiveShape, ...]:
    """The TP collectives of a run with ``tp`` > 1 (all-reduce; all-gather and reduce-scatter under
    sequence parallelism), the CP key/value ring with ``cp`` > 1 and an MoE model's expert-TP
    all-gather and reduce-scatter with ``expert_tp`` > 1; none otherwise."""
    out = []
    activation = model.hidden * 2.0                       # BF16
    if run.tp > 1:
        names = ("tp_all_gather", "tp_reduce_scatter") if run.sequence_parallel else ("tp_all_reduce",)
        out += [CollectiveShape(name, "tp", RING, activation) for name in names]
    if run.cp > 1:
        out.append(CollectiveShape(CP_SHAPE, "cp", RING, 2 * kv_heads_per_gpu(model, run.tp) * model.head_dim * 2.0))
    if run.expert_tp > 1 and model.is_moe:
        for name, precision in zip(ETP_SHAPES, (run.dispatch_precision, run.combine_precision)):
            out.append(CollectiveShape(name, "etp", RING, token_bytes(model.hidden, PRECISION_BYTES[precision])))
    return tuple(out)


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> float:
    """Key/value heads one GPU of a TP group holds: ``kv_heads / tp``, at least one (a head copied to
    several GPUs when there are fewer heads than GPUs; ``kv_heads`` 0 means one per head). MLA's
    latent counts as its heads' keys and values (an upper bound: the latent is smaller)."""
    return max(1.0, (model.kv_heads or model.heads) / tp)


def all_to_all_shapes(model: ModelSpec, run: RunSpec) -> tuple[CollectiveShape, ...]:
    """The dispatch and combine all-to-alls over ``ep`` of ``model``'s tokens under ``run``: bytes
    per token from :func:`sim.network.token_bytes` at each direction's precision, the run's
    all-to-all algorithm (what calibration measures too, whatever the model)."""
    return (CollectiveShape("dispatch", "ep", run.a2a_algorithm,
                            token_bytes(model.hidden, PRECISION_BYTES[run.dispatch_precision])),
            CollectiveShape("combine", "ep", run.a2a_algorithm,
                            token_bytes(model.hidden, PRECISION_BYTES[run.combine_precision])))


def shape_named(shapes, name: str) -> CollectiveShape:
    """The shape called ``name`` among ``shapes`` (one line naming the known ones if none is)."""
    for shape in shapes:
        if shape.name == name:
            return shape
    raise SpecError(f"no collective shape {name!r}; this run's are: {', '.join(s.name for s in shapes) or 'none'}")


__all__ = ["ALL_TO_ALL_ALGORITHMS", "AXES", "CP_SHAPE", "CollectiveShape", "ETP_SHAPES", "RING", "TP_SHAPES",
           "all_to_all_shapes", "kv_heads_per_gpu", "model_parallel_shapes", "op_collectives", "shape_named"]
