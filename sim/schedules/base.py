"""The :class:`Schedule` container and stage placements.

Conventions (those of PyTorch's ``torch.distributed.pipelining`` and DeepSeek's DualPipe): ``stage`` indexes a stage along the micro-batch's own path,
``0 .. S-1``. A :class:`Placement` says which rank holds stage ``s`` of micro-batch ``mb``:

* ``linear``: rank ``s mod P`` (GPipe, 1F1B, ZB-H1/H2; interleaved with S = vP);
* ``v``: S = 2P, rank ``s`` for ``s < P`` and ``2P-1-s`` after (ZB-V, DualPipeV);
* ``bidirectional``: S = P; micro-batches ``0 .. M/2-1`` go down (rank ``s``), the others go up
  (rank ``P-1-s``) (DualPipe, Chimera).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..checks import InputError
from .ops import AnyOp, FBOp, Op, op_from_json, parts

PLACEMENTS = ("linear", "v", "bidirectional")


@dataclass(frozen=True)
class Placement:
    """Which rank holds each (micro-batch, stage)."""

    kind: str
    pp: int
    num_stages: int
    microbatches: int

    def rank(self, mb: int, stage: int) -> int:
        """Rank that runs ``stage`` of micro-batch ``mb``."""
        P = self.pp
        if self.kind == "linear":
            return stage % P
        if self.kind == "v":
            return stage if stage < P else 2 * P - 1 - stage
        if self.kind == "bidirectional":
            return stage if mb < self.microbatches // 2 else P - 1 - stage
        raise InputError(f"unknown placement {self.kind!r}; valid: {', '.join(PLACEMENTS)}")

    def stages_held(self, rank: int) -> int:
        """How many distinct stage weights ``rank`` holds (2 for DualPipe: one per direction)."""
        if self.kind == "linear":
            return len(range(rank, self.num_stages, self.pp))
        return 2

    def parameter_copies(self, rank: int) -> float:
        """Parameters on ``rank`` in units of a 1F1B stage (model / P): DualPipe 2, others 1."""
        return self.stages_held(rank) * self.pp / self.num_stages


@dataclass
class Schedule:
    """Per-rank op lists plus what is needed to interpret them."""

    name: str
    pp: int
    num_stages: int
    microbatches: int
    ranks: dict[int, list[AnyOp]]
    placement: Placement = field(repr=False)
    # Per rank, the positions of ops that share the pipeline exchange of the op before them (their
    # sends leave together after the last; the next exchange's inputs arrive together), where the
    # runtime batches them: Megatron's interleaved 1F1B. Empty: an exchange after every op. Only a
    # blocking runtime (``pipeline_sends: blocking``) waits at exchanges.
    joined: dict[int, frozenset] = field(default_factory=dict, repr=False)
    # Figures derived from the ops, computed once per schedule object (each new one, a copy
    # included, starts empty): sim.schedules.timing.exchange_inputs.
    memo: dict = field(default_factory=dict, repr=False, compare=False, init=False)

    def to_json(self) -> dict:
        """The JSON contract of ``python -m sim schedule --json``."""
        return {
            "schedule": self.name,
            "pp": self.pp,
            "num_stages": self.num_stages,
            "microbatches": self.microbatches,
            "placement": self.placement.kind,
            "ranks": {str(r): [op.to_json() for op in ops] for r, ops in sorted(self.ranks.items())},
        }

    @classmethod
    def from_json(cls, obj, source: str = "schedule") -> "Schedule":
        """Inverse of :meth:`to_json` (a user's own schedule): checks the fields, the placement's
        stage count and the op count limit (:mod:`sim.limits`); :func:`~sim.schedules.validate`
        then checks the ops themselves. Raises :class:`~sim.checks.InputError` naming ``source``."""
        from .. import limits
        from ..checks import choice, number
        if not isinstance(obj, dict):
            raise InputError(f"{source}: expected a JSON object with schedule, pp, num_stages, microbatches, "
                             f"placement and ranks, got {type(obj).__name__}")
        missing = [k for k in ("pp", "num_stages", "microbatches", "ranks") if k not in obj]
        if missing:
            raise InputError(f"{source}: missing field(s) {', '.join(missing)}")
        P, S, M = (number(obj[k], f"{source}: {k}", integer=True, low=1, high=100_000_000)
                   for k in ("pp", "num_stages", "microbatches"))
        name = obj.get("schedule", "custom")
        if not isinstance(name, str):
            raise InputError(f"{source}: schedule must be a name (text), got {name!r}")
        kind = choice(obj.get("placement", "linear"), f"{source}: placement", PLACEMENTS)
        need = {"linear": S % P == 0, "v": S == 2 * P, "bidirectional": S == P and M % 2 == 0}[kind]
        if not need:
            raise InputError(f"{source}: placement {kind} needs " + {
                "linear": "num_stages a multiple of pp", "v": "num_stages = 2 pp",
                "bidirectional": "num_stages = pp and an even number of micro-batches"}[kind] +
                f", got pp={P}, num_stages={S}, microbatches={M}")
        ranks = obj["ranks"]
        if not isinstance(ranks, dict) or sorted(map(str, ranks)) != sorted(map(str, range(P))):
            raise InputError(f"{source}: ranks must map each rank \"0\" .. \"{P - 1}\" to its list of ops")
        if any(not isinstance(ops, list) for ops in ranks.values()):
            raise InputError(f"{source}: each rank's ops must be a list")
        limits.check("max_ops", sum(len(ops) for ops in ranks.values()), f"{source}")
        parsed = {}
        for r, ops in ranks.items():
            try:
                parsed[int(r)] = [op_from_json(op) for op in ops]
            except InputError as exc:
                raise InputError(f"{source}: rank {r}: {exc}") from None
        return cls(name, P, S, M, parsed, Placement(kind, P, S, M))

    @classmethod
    def from_file(cls, path: str) -> "Schedule":
        """A schedule from a JSON file (the format of ``python -m sim schedule --json`` and of
        ``search-schedule --out``), checked field by field (:meth:`from_json`)."""
        try:
            with open(path, encoding="utf-8") as fh:
                obj = json.load(fh)
        except OSError as exc:
            raise InputError(f"{path}: cannot read the schedule file: {exc.strerror or exc}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}: not valid JSON: {exc}") from None
        except RecursionError:
            raise InputError(f"{path}: not valid JSON: nested too deeply") from None
        return cls.from_json(obj, path)

    def num_ops(self) -> int:
        return sum(len(ops) for ops in self.ranks.values())

    def peak_activations(self) -> dict[int, int]:
        """Per rank, the most stage-forwards whose input gradient is not yet computed.

        An ``F`` stores one stage's activations; the ``I`` or ``B`` of that (mb, stage) frees them.
        Inside an overlapped ``FB`` the forward is counted before the backward frees (both run at
        once). For schedules with S = P this is in micro-batches (1F1B rank 0: P)."""
        peaks = {}
        for rank, ops in self.ranks.items():
            live = peak = 0
            for op in ops:
                for part in parts(op):
                    if part.kind == "F":
                        live += 1
                        peak = max(peak, live)
                    elif part.kind in ("I", "B"):
                        live -= 1
            peaks[rank] = peak
        return peaks

    def peak_activations_mb(self) -> dict[int, float]:
        """Peak activations in micro-batches of a 1F1B stage: stage-forwards x P / S."""
        scale = self.pp / self.num_stages
        return {r: n * scale for r, n in self.peak_activations().items()}


def fifo_weights(ops: list[AnyOp]) -> list[AnyOp]:
    """Give each placeholder ``W`` (mb = -1) the (mb, stage) of the oldest pending ``I`` on the rank.

    DualPipe keeps deferred weight gradients in a FIFO; generators emit ``Op('W', -1, -1)`` and
    this pass fills in which ``I`` it completes. Raises ``ValueError`` if a W has no pending I.
    """
    pending: list[Op] = []
    out: list[AnyOp] = []
    head = 0
    for op in ops:
        if isinstance(op, Op) and op.kind == "W" and op.mb < 0:
            if head >= len(pending):
                raise ValueError("a W was scheduled with no pending I on this rank")
            src = pending[head]
            head += 1
            out.append(Op("W", src.mb, src.stage))
            continue
        if isinstance(op, Op) and op.kind == "I":
            pending.append(op)
        out.append(op)
    return out


def is_fb(op: AnyOp) -> bool:
    return isinstance(op, FBOp)
