"""``simulate_pipeline``: schedule (data) -> engine -> metrics, for fixed op costs; ``compare_frame``:
every schedule side by side."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from .checks import InputError, number
from .engine import Costs, EngineResult, ZeroCommRunner, run_schedule
from .limits import TooLarge
from .metrics import RunMetrics, summarize
from .perf import gc_paused
from .schedules import SEARCHED, STANDALONE, Schedule, make_schedule, takes_chunks, validate

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class PipelineRun:
    schedule: Schedule
    result: EngineResult
    metrics: RunMetrics


def simulate_pipeline(name: str, pp: int, microbatches: int, chunks: Optional[int] = None,
                      F: Costs = 1.0, I: Costs = 1.0, W: Costs = 1.0, check: bool = True,
                      cost_per: str = "stage", memory_limit: Optional[float] = None,
                      group: Optional[int] = None) -> PipelineRun:
    """Build, validate and run schedule ``name`` with op costs F, I, W (scalars or per stage).
    Zero Bubble's searched schedules (zb-1p, zb-2p, zb-auto with ``memory_limit``) are built from
    the same costs (no send time, a W freeing half of a forward's memory).

    ``cost_per="stage"``: the costs are those of one op on one stage (the closed forms of the
    docs/model.md's engine section use this). ``cost_per="rank"``: the costs are those of one rank's
    share of the model (1/P of it), so schedules with S > P stages (interleaved, ZB-V, DualPipeV)
    get ``cost * P / S`` per stage and every schedule trains the same model; use it to compare.
    ``group``: the interleaved orders' micro-batches per model chunk at a time (Megatron-Core's
    ``microbatch_group_size_per_vp_stage``; P when None).
    """
    costs = None
    if name in SEARCHED:
        from .schedules.zbauto import StageCosts
        stages = [(c,) * pp if isinstance(c, (int, float)) else tuple(c) for c in (F, I, W)]
        costs = StageCosts(*stages, 0.0, (2.0,) * pp, (-1.0,) * pp, (-1.0,) * pp)
    return simulate_schedule(make_schedule(name, pp, microbatches, chunks, memory_limit, costs, group), F, I, W,
                             check, cost_per)


def simulate_schedule(schedule: Schedule, F: Costs = 1.0, I: Costs = 1.0, W: Costs = 1.0, check: bool = True,
                      cost_per: str = "stage") -> PipelineRun:
    """Validate (when ``check``) and run a built schedule (a generator's or a user's own, see
    :meth:`Schedule.from_json`) with op costs F, I, W; ``cost_per`` as in :func:`simulate_pipeline`."""
    if cost_per not in ("stage", "rank"):
        raise InputError(f"cost_per must be 'stage' or 'rank', got {cost_per!r}")
    if check:
        validate(schedule)
    if cost_per == "rank" and schedule.num_stages != schedule.pp:
        scale = schedule.pp / schedule.num_stages
        F, I, W = (_scaled(c, scale) for c in (F, I, W))
    with gc_paused():
        result = run_schedule(schedule, ZeroCommRunner(schedule.num_stages, F, I, W))
    return PipelineRun(schedule, result, summarize(result))


def _scaled(cost: Costs, scale: float) -> Costs:
    if isinstance(cost, (int, float)):
        return cost * scale
    return [c * scale for c in cost]


MAX_COST = 1e12      # time units per op: with the op limit, makespans stay finite


def parse_costs(text: str) -> dict[str, float]:
    """Parse ``F=1,I=1,W=1`` (any subset; missing ones are 1). Raises ``InputError`` naming the field."""
    costs = {"F": 1.0, "I": 1.0, "W": 1.0}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().upper()
        if not sep or key not in costs:
            raise InputError(f"cost item {item!r}: expected NAME=VALUE with NAME one of F, I, W (e.g. F=1,I=1,W=1)")
        try:
            cost = float(value)
        except ValueError:
            raise InputError(f"cost {key}={value!r} is not a number") from None
        costs[key] = number(cost, f"cost {key}", low=0, low_open=True, high=MAX_COST)
        if cost < sys.float_info.min:        # a subnormal float: 1e-320 underflows every sum it enters
            raise InputError(f"cost {key} must be at least {sys.float_info.min:.4g} (a normal float), got {cost!r}")
    return costs


def compare_frame(pp: int, microbatches: int, chunks: int = 2, costs: dict | None = None) -> "pd.DataFrame":
    """Every schedule at (P, M): bubble, utilization, parameter copies, peak activations per rank.
    Schedules that refuse (P, M) get a row with the reason in ``note``."""
    import pandas as pd
    rows = []
    for name in STANDALONE:
        v = chunks if takes_chunks(name, pp) else None
        try:
            run = simulate_pipeline(name, pp, microbatches, v, cost_per="rank", **(costs or {}))
        except TooLarge:
            raise                                  # a size limit: refuse the comparison, not one row
        except InputError as exc:
            rows.append({"schedule": name, "note": str(exc)})
            continue
        m = run.metrics
        rows.append({
            "schedule": name, "makespan": m.makespan, "bubble_fraction": round(m.bubble_fraction, 4),
            "mean_utilization": round(m.mean_utilization, 4),
            "parameter_copies": max(r.parameter_copies for r in m.ranks),
            "peak_activations_mb": "/".join(f"{r.peak_activations_mb:g}" for r in m.ranks), "note": "",
        })
    return pd.DataFrame(rows)
