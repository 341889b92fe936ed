"""Schedule names, their argument rules, and :func:`make_schedule`.

Every refused input raises :class:`ScheduleConfigError` naming the rule and the values given.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from .. import limits
from ..checks import InputError, did_you_mean, number
from . import chimera, classic, dualpipe, zbauto, zerobubble
from .base import Placement, Schedule


class ScheduleConfigError(InputError):
    """A schedule was asked for with parameters it does not support."""


@dataclass(frozen=True)
class ScheduleSpec:
    """How to build one schedule: generator, placement and stages per rank."""

    name: str
    build: Callable[..., dict]
    placement: str
    stages_per_rank: int | None  # None: the --chunks value (interleaved)
    description: str


SCHEDULES: dict[str, ScheduleSpec] = {s.name: s for s in [
    ScheduleSpec("gpipe", classic.gpipe, "linear", 1, "all forwards, then all backwards"),
    ScheduleSpec("1f1b", classic.one_f_one_b, "linear", 1, "one forward, one backward (PipeDream-flush)"),
    ScheduleSpec("interleaved-1f1b", classic.interleaved_1f1b, "linear", None,
                 "Megatron virtual pipeline, v chunks per rank"),
    ScheduleSpec("combined-1f1b", classic.combined_1f1b, "linear", None,
                 "interleaved 1F1B, each steady-state F and B overlapped (Megatron-Core's EP overlap)"),
    ScheduleSpec("zb-h1", zerobubble.zb_h1, "linear", 1, "Zero Bubble H1, 1F1B memory"),
    ScheduleSpec("zb-h2", zerobubble.zb_h2, "linear", 1, "Zero Bubble H2, up to 2P-1 micro-batches"),
    ScheduleSpec("zb-1p", zbauto.zb_1p, "linear", 1, "Zero Bubble's searched schedule at 1F1B's memory (P)"),
    ScheduleSpec("zb-2p", zbauto.zb_2p, "linear", 1, "Zero Bubble's searched schedule at twice it (2P)"),
    ScheduleSpec("zb-auto", zbauto.zb_auto, "linear", 1, "Zero Bubble's search under --memory-limit N"),
    ScheduleSpec("zbv", zerobubble.zbv, "v", 2, "Zero Bubble V (PyTorch ScheduleZBVZeroBubble)"),
    ScheduleSpec("dualpipe", dualpipe.dualpipe, "bidirectional", 1, "DeepSeek DualPipe, 2x parameters"),
    ScheduleSpec("dualpipev", dualpipe.dualpipev, "v", 2, "DualPipe cut in half (V shape)"),
    ScheduleSpec("chimera", chimera.chimera, "bidirectional", 1, "Chimera, two opposite pipelines"),
]}

SCHEDULE_NAMES = tuple(SCHEDULES)
CHUNKED = ("interleaved-1f1b", "combined-1f1b")   # take v, the model chunks per rank (Megatron's virtual pipeline)
SEARCHED = ("zb-1p", "zb-2p", "zb-auto")      # built from profiled stage times (zbauto.StageCosts)
# Schedules that need nothing but P and M (and v for interleaved): what "every schedule" comparisons run.
STANDALONE = tuple(n for n in SCHEDULE_NAMES if n != "zb-auto")


def takes_chunks(name: str, pp: int) -> bool:
    """Whether schedule ``name`` on ``pp`` ranks takes v, the model chunks per rank: interleaved 1F1B
    always, combined 1F1B over a pipeline (on one rank it has one stage)."""
    return name == "interleaved-1f1b" or (name == "combined-1f1b" and pp > 1)


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScheduleConfigError(f"{name} must be an integer, got {value!r}")
    return number(value, name, integer=True, low=minimum, error=ScheduleConfigError)


def _check_group(name: str, P: int, M: int, group: Optional[int]) -> None:
    """Megatron-Core's rules for the micro-batches a model chunk takes at a time, ``G``
    (``microbatch_group_size_per_vp_stage``, P when None): ``P <= G <= M``, and the last group,
    ``M mod G`` micro-batches, none or at least P (fewer would leave the pipeline waiting)."""
    if M < P:
        raise ScheduleConfigError(f"{name} needs M >= P (Megatron sends groups of at least P micro-batches "
                                  f"through each chunk), got M={M}, P={P}")
    if group is None:
        if M % P:
            fits = min(g for g in range(P, M + 1) if M % g == 0 or M % g >= P)
            raise ScheduleConfigError(f"{name} needs M divisible by P (Megatron sends groups of P micro-batches "
                                      f"through each chunk; microbatch_group_size_per_vp_stage G sets another "
                                      f"group, P <= G <= M, the least here {fits}), got M={M}, P={P}")
        return
    G = _check_int("microbatch_group_size_per_vp_stage (G, micro-batches a model chunk takes at a time)", group, 1)
    if not P <= G <= M:
        raise ScheduleConfigError(f"microbatch_group_size_per_vp_stage must lie in [P, M] = [{P}, {M}] "
                                  f"(Megatron-Core's rule), got {G}")
    if 0 < M % G < P:
        raise ScheduleConfigError(f"microbatch_group_size_per_vp_stage {G} leaves a last group of M mod G = {M % G} "
                                  f"micro-batches, fewer than P={P} (Megatron-Core refuses it: the pipeline would "
                                  f"wait); choose G dividing M={M} or leaving at least P")


def check_arguments(name: str, pp: int, microbatches: int, chunks: Optional[int] = None,
                    memory_limit: Optional[float] = None, group: Optional[int] = None) -> None:
    """Raise :class:`ScheduleConfigError` if ``name`` cannot run with these arguments (``group``:
    Megatron-Core's ``microbatch_group_size_per_vp_stage`` for the interleaved orders)."""
    if name not in SCHEDULES:
        raise ScheduleConfigError(
            f"unknown schedule {name!r}; valid schedules: {', '.join(SCHEDULE_NAMES)}{did_you_mean(name, SCHEDULE_NAMES)}")
    P = _check_int("pp (P, pipeline ranks)", pp, 1)
    M = _check_int("microbatches (M)", microbatches, 1)
    if name == "interleaved-1f1b":
        if chunks is None:
            raise ScheduleConfigError("interleaved-1f1b needs chunks (v, model chunks per rank) >= 2")
        v = _check_int("chunks (v, model chunks per rank)", chunks, 2)
        del v
        _check_group(name, P, M, group)
    elif name == "combined-1f1b":
        if P == 1 and chunks not in (None, 1):
            raise ScheduleConfigError(f"combined-1f1b on one rank (P=1, no pipeline) takes chunks 1, got "
                                      f"chunks={chunks}")
        if P > 1:
            if chunks is None or isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 2:
                raise ScheduleConfigError(f"combined-1f1b with P={P} needs chunks (v, model chunks per rank) >= 2 "
                                          f"(Megatron-Core overlaps expert-parallel communication only in its "
                                          f"interleaved pipeline), got chunks={chunks}")
            _check_group(name, P, M, group)
    elif chunks not in (None, 1):
        raise ScheduleConfigError(f"chunks (v) applies only to {' and '.join(CHUNKED)}, got chunks={chunks} for "
                                  f"{name}")
    if group is not None and not (takes_chunks(name, P)):
        raise ScheduleConfigError(f"microbatch_group_size_per_vp_stage applies only to interleaved-1f1b and to "
                                  f"combined-1f1b over a pipeline (P > 1), got {group} for {name} with P={P}")
    limits.check("max_ops", limits.schedule_ops(P, M, chunks if name in CHUNKED else None),
                 f"schedule {name} with P={P:,}, M={M:,}")
    if name == "dualpipe":
        if P % 2 or P < 2:
            raise ScheduleConfigError(f"dualpipe needs an even P >= 2 (ranks r and P-1-r mirror each other), got P={P}")
        if M % 2 or M < 2 * P:
            raise ScheduleConfigError(f"dualpipe needs an even M >= 2P, got M={M} with P={P} (2P={2 * P})")
    if name == "zb-auto":
        if memory_limit is None:
            raise ScheduleConfigError("zb-auto needs memory_limit (--memory-limit N: micro-batches of activations "
                                      "per stage, at least 1; zb-1p is P, zb-2p is 2P)")
        number(memory_limit, "memory_limit (micro-batches of activations per stage)", low=1, high=1e9,
               error=ScheduleConfigError)
    elif memory_limit is not None:
        raise ScheduleConfigError(f"memory_limit applies only to zb-auto, got memory_limit={memory_limit} for {name}")
    if name == "dualpipev" and M < 2 * P:
        raise ScheduleConfigError(f"dualpipev needs M >= 2P, got M={M} with P={P} (2P={2 * P})")
    if name == "chimera":
        if P % 2 or P < 2:
            raise ScheduleConfigError(f"chimera needs an even number of stages D = P >= 2, got P={P}")
        if M % P or M < 2 * P:
            raise ScheduleConfigError(f"chimera needs M divisible by D = P (whole basic units of D "
                                      f"micro-batches) and M >= 2P, got M={M}, P={P}")


def make_schedule(name: str, pp: int, microbatches: int, chunks: Optional[int] = None,
                  memory_limit: Optional[float] = None, costs: Optional[zbauto.StageCosts] = None,
                  group: Optional[int] = None) -> Schedule:
    """Build schedule ``name`` for ``pp`` ranks and ``microbatches`` micro-batches. The searched Zero
    Bubble schedules (:data:`SEARCHED`) take the stages' profiled ``costs`` (unit costs without),
    zb-auto a ``memory_limit`` (micro-batches of activations per stage), and the interleaved orders
    a ``group`` (Megatron-Core's ``microbatch_group_size_per_vp_stage``; P when None)."""
    check_arguments(name, pp, microbatches, chunks, memory_limit, group)
    spec = SCHEDULES[name]
    if name in CHUNKED:
        chunks = chunks or 1                 # combined-1f1b without a pipeline: one stage
    per_rank = chunks if spec.stages_per_rank is None else spec.stages_per_rank
    num_stages = pp * per_rank          # a bidirectional schedule holds one stage per rank: S = P
    if name == "zb-auto":
        ranks = zbauto.zb_auto(pp, microbatches, memory_limit, costs).ranks
    elif name in SEARCHED:
        ranks = spec.build(pp, microbatches, costs)
    else:
        args = (pp, microbatches, chunks, group) if spec.stages_per_rank is None else (pp, microbatches)
        ranks = spec.build(*args)
    placement = Placement(spec.placement, pp, num_stages, microbatches)
    joined = classic.interleaved_exchanges(pp, microbatches, chunks, group) if name == "interleaved-1f1b" else {}
    return Schedule(name, pp, num_stages, microbatches, ranks, placement, joined)
