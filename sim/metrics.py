"""Metrics of one pipeline run, from the engine's records.

Glossary (time in the runner's units; seconds for a network-aware run):

* ``makespan``: end of the last op; all ranks start at 0.
* ``busy`` (per rank): sum of that rank's op durations.
* ``idle`` (per rank): ``makespan - busy``, the rank's bubble.
* ``utilization`` (per rank): ``busy / makespan``.
* ``bubble_fraction``: ``sum(idle) / (P * makespan)``.
* ``peak_activations``: most stage-forwards held at once (their I/B not yet run); for schedules
  with S = P stages this is in micro-batches (1F1B rank 0: P). ``peak_activations_mb`` rescales
  by P/S to micro-batches of a 1F1B stage.
* ``parameter_copies``: weights held, in units of a 1F1B stage (DualPipe and Chimera 2).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .engine import EngineResult

if TYPE_CHECKING:
    import pandas as pd


def events_frame(result: EngineResult) -> "pd.DataFrame":
    """One row per op: rank, kind, mb, stage, start, end (and b_mb, b_stage for ``FB``)."""
    import pandas as pd
    df = pd.DataFrame.from_records(result.records, columns=list(EngineResult.RECORD_COLUMNS))
    return df.sort_values(["rank", "start"], kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class RankMetrics:
    rank: int
    busy: float
    idle: float
    utilization: float
    peak_activations: int
    peak_activations_mb: float
    parameter_copies: float

    def to_json(self) -> dict:
        return {"rank": self.rank, "busy": self.busy, "idle": self.idle, "utilization": self.utilization,
                "peak_activations": self.peak_activations, "peak_activations_mb": self.peak_activations_mb,
                "parameter_copies": self.parameter_copies}


@dataclass(frozen=True)
class RunMetrics:
    schedule: str
    pp: int
    microbatches: int
    makespan: float
    bubble_fraction: float
    ranks: tuple[RankMetrics, ...]

    @property
    def mean_utilization(self) -> float:
        """Mean over ranks of busy / makespan."""
        return sum(r.utilization for r in self.ranks) / len(self.ranks)

    def to_json(self) -> dict:
        return {"schedule": self.schedule, "pp": self.pp, "microbatches": self.microbatches,
                "makespan": self.makespan, "bubble_fraction": self.bubble_fraction,
                "ranks": [r.to_json() for r in self.ranks]}

    def ranks_frame(self) -> "pd.DataFrame":
        import pandas as pd
        return pd.DataFrame([r.to_json() for r in self.ranks])


def summarize(result: EngineResult) -> RunMetrics:
    """Per-rank busy/idle/utilization and the run's makespan and bubble fraction."""
    sched = result.schedule
    busy = {r: 0.0 for r in sched.ranks}
    for rec in result.records:
        busy[rec.rank] += rec.end - rec.start
    span = result.makespan
    peaks = sched.peak_activations()
    scale = sched.pp / sched.num_stages
    ranks = tuple(
        RankMetrics(rank=r, busy=busy[r], idle=span - busy[r],
                    utilization=busy[r] / span if span > 0 else 0.0,
                    peak_activations=peaks[r], peak_activations_mb=peaks[r] * scale,
                    parameter_copies=sched.placement.parameter_copies(r))
        for r in sorted(sched.ranks))
    total_idle = sum(r.idle for r in ranks)
    bubble = total_idle / (sched.pp * span) if span > 0 else 0.0
    return RunMetrics(sched.name, sched.pp, sched.microbatches, span, bubble, ranks)
