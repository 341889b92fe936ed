"""Schedule ops and their compact notation.

A schedule is data: ``dict[rank, list[op]]``. An op is one of

* :class:`Op` -- ``F`` (forward), ``I`` (backward for inputs only), ``W`` (the deferred weight
  gradient of an earlier ``I``) or ``B`` (full backward = I + W) of one ``(mb, stage)``;
* :class:`FBOp` -- a forward and a full backward of *different* micro-batches run as one
  overlapped unit (DualPipe's F&B chunk).

Notation (round trip with :func:`parse_op`): ``F3@0`` is the forward of micro-batch 3 at stage 0
(``kind mb@stage``); an overlapped unit prints as
``[F3@0&B5@3]``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

from ..checks import InputError, number

KINDS = ("F", "I", "W", "B")
BACKWARD_KINDS = ("I", "B")


@dataclass(frozen=True, slots=True)
class Op:
    """One compute op of one micro-batch at one stage."""

    kind: str
    mb: int
    stage: int

    def __str__(self) -> str:
        return f"{self.kind}{self.mb}@{self.stage}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "mb": self.mb, "stage": self.stage}


@dataclass(frozen=True, slots=True)
class FBOp:
    """A forward ``f`` and a full backward ``b`` of different micro-batches, overlapped."""

    f: Op
    b: Op
    kind = "FB"

    def __str__(self) -> str:
        return f"[{self.f}&{self.b}]"

    def to_json(self) -> dict:
        return {
            "kind": "FB",
            "f": {"mb": self.f.mb, "stage": self.f.stage},
            "b": {"mb": self.b.mb, "stage": self.b.stage},
        }


AnyOp = Union[Op, FBOp]

_SIMPLE = re.compile(r"^\s*([FIWB])(\d+)@(\d+)\s*$")
_FB = re.compile(r"^\s*\[\s*F(\d+)@(\d+)\s*&\s*B(\d+)@(\d+)\s*\]\s*$")


def parse_op(text: str) -> AnyOp:
    """Parse ``F3@0`` or ``[F3@0&B5@3]``; raise ``ValueError`` showing the expected form."""
    m = _SIMPLE.match(text)
    if m:
        return Op(m.group(1), int(m.group(2)), int(m.group(3)))
    m = _FB.match(text)
    if m:
        return FBOp(Op("F", int(m.group(1)), int(m.group(2))), Op("B", int(m.group(3)), int(m.group(4))))
    raise InputError(
        f"cannot parse op {text!r}: expected KIND MB@STAGE with KIND in F, I, W, B "
        "(e.g. 'F3@0', 'I2@1') or an overlapped unit '[F3@0&B5@3]'"
    )


def op_from_json(obj: dict) -> AnyOp:
    """Inverse of ``to_json``; raises :class:`~sim.checks.InputError` naming the bad field."""
    if not isinstance(obj, dict) or "kind" not in obj:
        raise InputError(f"op must be an object with a 'kind' field, got {obj!r}")
    kind = obj["kind"]

    def index(where: dict, field: str) -> int:
        if not isinstance(where, dict) or field not in where:
            raise InputError(f"op {obj!r} is missing {field!r}")
        return number(where[field], f"op {obj!r}: {field}", integer=True, low=0, high=1_000_000_000)
    if kind == "FB":
        f, b = obj.get("f"), obj.get("b")
        return FBOp(Op("F", index(f, "mb"), index(f, "stage")), Op("B", index(b, "mb"), index(b, "stage")))
    if isinstance(kind, str) and kind in KINDS:
        return Op(kind, index(obj, "mb"), index(obj, "stage"))
    raise InputError(f"op kind {kind!r} is not one of F, I, W, B, FB")


def parts(op: AnyOp) -> tuple[Op, ...]:
    """The simple ops an op consists of (one, or two for an overlapped unit)."""
    return (op.f, op.b) if isinstance(op, FBOp) else (op,)
