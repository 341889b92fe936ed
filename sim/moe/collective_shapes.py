"""The collectives inside an op, as named records: what the step's communication parts are made of.

An op (a micro-batch's forward or backward through a stage) issues collectives between its
compute parts: an MoE layer's all-to-alls dispatch tokens to their experts and combine the
results over the expert-parallel (EP) group. Each kind is a :class:`CollectiveShape`: its name
(the communication parts of :mod:`sim.moe.parts` carry it), the group axis it runs over (Megatron's
names: ``ep``, ``tp``, ``cp``, ``dp``), the algorithm it runs with, and the bytes one token puts on
the wire. The comm model (:class:`~sim.moe.comm.CommModel`), live communication and the runner read
the scenario's shapes (:func:`op_collectives`) instead of naming them, so a new kind (tensor- or
context-parallel collectives) joins by adding a record here.

Today's shapes: an MoE model's ``dispatch`` and ``combine`` all-to-alls over ``ep``, with the run's
all-to-all algorithm (``hierarchical``: through a GPU of the destination node, DeepEP's normal
kernels; ``flat``: straight to each expert's GPU) and each direction's precision (dispatch FP8 with
its scales, combine BF16 in DeepSeek-V3's recipe: report section 3.3). A dense model has none.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..network import token_bytes
from .specs import PRECISION_BYTES, ModelSpec, RunSpec, SpecError

AXES = ("ep", "tp", "cp", "dp")        # the group axes a collective runs over (Megatron-Core's names)
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


def op_collectives(model: ModelSpec, run: RunSpec) -> tuple[CollectiveShape, ...]:
    """The collectives an op of ``run`` issues: an MoE model's dispatch and combine all-to-alls
    (:func:`all_to_all_shapes`); none for a dense model."""
    return all_to_all_shapes(model, run) if model.is_moe else ()


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


__all__ = ["ALL_TO_ALL_ALGORITHMS", "AXES", "CollectiveShape", "all_to_all_shapes", "op_collectives", "shape_named"]
