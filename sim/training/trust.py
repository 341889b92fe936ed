"""How far to trust a step time: the validated published runs most like it, and the simulator's
errors on them.

The validation suite's errors (``python -m experiments.validate`` over the whole of
``validation/runs.csv``, part of ``make run``) are shipped in ``sim/training/presets/validation_errors.csv``:
one row per scored run of a whole training step (the communication-kernel micro-benchmarks left
out), with the features the rule below reads and the first-principles speed error, ``error_pct`` =
100 (predicted speed / measured speed - 1): positive means the simulator predicted a faster run
than was measured.

Similarity rule (:func:`similar_runs`), for a run on GPU generation ``g`` of a dense or MoE model:

1. the validated runs on generation ``g`` (:data:`GENERATIONS`: A100; Hopper = H100, H800, H200;
   Blackwell = B200, GB200) of the same kind of model (dense or MoE); none: no band;
2. then, in turn, each of these narrows them when at least :data:`MIN_RUNS` runs stay: the same use
   of model parallelism (TP or CP above 1, or neither); the same micro-batch class (1-2 sequences,
   or more: :data:`SMALL_MICROBATCH`); the same model-size class (fewer than :data:`LARGE_MODEL`
   parameters, or more).

The band (:class:`TrustBand`) is their count, what they share, and the median, lowest and highest
error. It says how the model fared on published runs like this one; it is not a correction, and
nothing is fitted to it.

Rankings (:func:`ranking_agreement`): the shipped rows also name the ranking group (``job``: one
source's runs of one job under two or more schedules, layouts or recipes, as
``experiments/ranking_pairs.py`` forms them) and the measured figure as a speed (a time metric's
inverse), so every two runs of a group are a pair whose measured order the model's
(``measured x (1 + error)``) either keeps or inverts;
pairs measured under :data:`SCORED_GAP_PCT` apart are not counted. A plan, which ranks candidates,
says how often the model kept the order of pairs like its own (the same GPU generation and kind of
model; all pairs when none is like it).
"""
from __future__ import annotations

import csv
import functools
import statistics
from dataclasses import dataclass
from pathlib import Path

from .model.params import layer_params
from .model.specs import PRESETS, ModelSpec

ERRORS = PRESETS / "validation_errors.csv"
COLUMNS = ("id", "source", "generation", "moe", "model_parallel", "microbatch_size", "params_b", "error_pct", "job",
           "measured")
GENERATIONS = {"a100": "A100", "h100": "Hopper", "h800": "Hopper", "h200": "Hopper", "b200": "Blackwell",
               "gb200": "Blackwell"}
FAMILY_GENERATIONS = {"sm80": "A100", "sm90": "Hopper", "sm100": "Blackwell", "gb200": "Blackwell"}
MIN_RUNS = 3
SMALL_MICROBATCH = 2          # sequences: a micro-batch of 1-2 is "small"
LARGE_MODEL = 50e9            # parameters
SCORED_GAP_PCT = 3.0          # a ranking pair counts when its runs were measured at least this far apart


def generation(gpu_name: str, family: str | None = None) -> str | None:
    """The GPU generation of a preset name (``h800`` -> ``Hopper``; a file's name containing one,
    such as ``h100-hbm2e-96``, counts as it), else of a kernel family (``sm90``), else ``None``."""
    name = Path(str(gpu_name)).stem.lower()
    for key in sorted(GENERATIONS, key=len, reverse=True):      # gb200 before b200
        if name == key or name.startswith(key + "-") or name.startswith(key + "_"):
            return GENERATIONS[key]
    return FAMILY_GENERATIONS.get(family or "")


def model_params(m: ModelSpec) -> float:
    """Total parameters: every layer (dense or MoE, all routed experts), the embedding and the head."""
    layers = sum(layer_params(m, m.is_moe and i >= m.dense_layers, ep=1).total for i in range(m.layers))
    return layers + 2 * m.vocab * m.hidden


@dataclass(frozen=True)
class TrustBand:
    """The validated runs most like a run (:func:`similar_runs`) and the simulator's errors on them
    (percent, predicted speed / measured speed - 1)."""

    runs: int
    like: str                    # what they share, e.g. "MoE on Hopper, micro-batch 1-2"
    median_pct: float
    low_pct: float
    high_pct: float
    ids: tuple = ()

    def line(self) -> str:
        """``like 12 published runs (MoE on Hopper, micro-batch 1-2): the model predicted them 30%
        fast at the median (-5% to +244%)``."""
        way = "fast" if self.median_pct >= 0 else "slow"
        return (f"like {self.runs} published run{'s' if self.runs != 1 else ''} ({self.like}): the model predicted "
                f"{'them' if self.runs != 1 else 'it'} {abs(self.median_pct):.0f}% {way} at the median "
                f"({self.low_pct:+.0f}% to {self.high_pct:+.0f}%)")

    def to_json(self) -> dict:
        return {"runs": self.runs, "like": self.like, "median_error_pct": self.median_pct,
                "low_error_pct": self.low_pct, "high_error_pct": self.high_pct, "line": self.line(),
                "ids": list(self.ids)}

    def columns(self) -> dict:
        """The summary CSV's trust columns."""
        return {"trust_runs": self.runs, "trust_like": self.like, "trust_median_error_pct": self.median_pct,
                "trust_low_error_pct": self.low_pct, "trust_high_error_pct": self.high_pct}


def band_from_columns(row) -> TrustBand | None:
    """The :class:`TrustBand` a summary row's trust columns hold (a CSV row, a dict), or ``None``."""
    try:
        runs = int(float(row.get("trust_runs") or 0))
    except (TypeError, ValueError):
        return None
    if runs < 1:
        return None
    return TrustBand(runs, str(row.get("trust_like", "")), float(row["trust_median_error_pct"]),
                     float(row["trust_low_error_pct"]), float(row["trust_high_error_pct"]))


EMPTY_COLUMNS = {"trust_runs": 0, "trust_like": "", "trust_median_error_pct": None, "trust_low_error_pct": None,
                 "trust_high_error_pct": None}


@functools.lru_cache(maxsize=4)
def load_errors(path: Path = ERRORS) -> tuple[dict, ...]:
    """The shipped validation errors (rows as dicts, numbers parsed); none when the file is absent."""
    if not path.is_file():
        return ()
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(line for line in f if not line.startswith("#"))]
    return tuple({"id": r["id"], "source": r["source"], "generation": r["generation"], "moe": r["moe"] == "1",
                  "model_parallel": r["model_parallel"] == "1", "microbatch_size": int(r["microbatch_size"]),
                  "params_b": float(r["params_b"]), "error_pct": float(r["error_pct"]), "job": r.get("job") or "",
                  "measured": float(r.get("measured") or "nan")} for r in rows)


def similar_runs(gen: str | None, moe: bool, model_parallel: bool, microbatch_size: int, params: float,
                 rows=None) -> tuple[list[dict], str]:
    """(the validated runs most like this run, what they share) by the module's rule; ``rows``: the
    validation errors (default :func:`load_errors`)."""
    rows = load_errors() if rows is None else rows
    if gen is None:
        return [], ""
    kind = "MoE" if moe else "dense"
    chosen = [r for r in rows if r["generation"] == gen and r["moe"] == moe]
    like = [f"{kind} on {gen}"]
    small = microbatch_size <= SMALL_MICROBATCH
    large = params >= LARGE_MODEL
    narrowings = (
        (lambda r: r["model_parallel"] == model_parallel, "with TP or CP" if model_parallel else "no TP or CP"),
        (lambda r: (r["microbatch_size"] <= SMALL_MICROBATCH) == small,
         f"micro-batch 1-{SMALL_MICROBATCH}" if small else f"micro-batch over {SMALL_MICROBATCH}"),
        (lambda r: (r["params_b"] * 1e9 >= LARGE_MODEL) == large,
         f"{LARGE_MODEL / 1e9:.0f}B parameters or more" if large else f"under {LARGE_MODEL / 1e9:.0f}B parameters"),
    )
    for keep, said in narrowings:
        narrower = [r for r in chosen if keep(r)]
        if len(narrower) >= MIN_RUNS:
            chosen = narrower
            like.append(said)
    return chosen, ", ".join(like)


def trust_band(gen: str | None, moe: bool, model_parallel: bool, microbatch_size: int, params: float,
               rows=None) -> TrustBand | None:
    """The :class:`TrustBand` of a run with these features, or ``None`` when no validated run is
    like it (another GPU generation, or no errors shipped)."""
    chosen, like = similar_runs(gen, moe, model_parallel, microbatch_size, params, rows)
    if not chosen:
        return None
    errors = [r["error_pct"] for r in chosen]
    return TrustBand(len(chosen), like, statistics.median(errors), min(errors), max(errors),
                     tuple(r["id"] for r in chosen))


@dataclass(frozen=True)
class RankingAgreement:
    """Of ``total`` pairs of published runs of one job (``like``: which), measured at least
    :data:`SCORED_GAP_PCT` apart, in ``groups`` groups, the model ordered ``same`` as measured."""

    same: int
    total: int
    groups: int
    like: str

    def line(self) -> str:
        """``of 91 pairs of published runs of one job (dense on A100) measured 3% or more apart, in 26
        groups, the model ordered 87 as measured``."""
        return (f"of {self.total} pair{'s' if self.total != 1 else ''} of published runs of one job ({self.like}) "
                f"measured {SCORED_GAP_PCT:g}% or more apart, in {self.groups} group{'s' if self.groups != 1 else ''}, "
                f"the model ordered {self.same} as measured")

    def to_json(self) -> dict:
        return {"same": self.same, "total": self.total, "groups": self.groups, "like": self.like, "line": self.line()}


def _pairs(rows) -> tuple[int, int, int]:
    """(pairs ordered as measured, pairs counted, groups with a counted pair) over ``rows``' jobs."""
    jobs: dict[str, list[dict]] = {}
    for r in rows:
        if r["job"] and r["measured"] > 0:
            jobs.setdefault(r["job"], []).append(r)
    same = total = groups = 0
    for runs in jobs.values():
        counted = 0
        for i, a in enumerate(runs):
            for b in runs[i + 1:]:
                fast, slow = (a, b) if a["measured"] >= b["measured"] else (b, a)
                if 100 * (fast["measured"] / slow["measured"] - 1) < SCORED_GAP_PCT:
                    continue
                counted += 1
                same += fast["measured"] * (1 + fast["error_pct"] / 100) > slow["measured"] * (1 + slow["error_pct"] / 100)
        total += counted
        groups += counted > 0
    return same, total, groups


def ranking_agreement(gen: str | None, moe: bool, rows=None) -> RankingAgreement | None:
    """How often the model ordered pairs of published runs of one job as measured (see the module):
    those on GPU generation ``gen`` of the same kind of model, else every pair; ``None`` when the
    shipped rows hold no pair."""
    rows = load_errors() if rows is None else rows
    kind = "MoE" if moe else "dense"
    like = [r for r in rows if r["generation"] == gen and r["moe"] == moe]
    same, total, groups = _pairs(like)
    if total:
        return RankingAgreement(same, total, groups, f"{kind} on {gen}")
    same, total, groups = _pairs(rows)
    if not total:
        return None
    kinds = sorted({("MoE" if r["moe"] else "dense") + " on " + r["generation"] for r in rows if r["job"]})
    return RankingAgreement(same, total, groups, f"no {kind} job on {gen} in the suite; all: {', '.join(kinds)}")


__all__ = ["COLUMNS", "EMPTY_COLUMNS", "RankingAgreement", "SCORED_GAP_PCT", "ranking_agreement", "band_from_columns", "ERRORS", "GENERATIONS", "LARGE_MODEL", "MIN_RUNS", "SMALL_MICROBATCH",
           "TrustBand", "generation", "load_errors", "model_params", "similar_runs", "trust_band"]
