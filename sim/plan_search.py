"""Which of a plan's candidates to simulate: every layout once, the fastest layouts with each recipe.

A plan has hundreds of candidates that fit HBM (a layout: TP, CP, PP, EP, schedule, layer split;
times a recipe: :mod:`sim.plan_recipes`), and each simulation takes a second or so. The search:

1. **Every layout once**, with its likeliest recipe: the lowest lower bound on the step
   (:func:`~sim.plan_recipes.compute_bound_s`), recipes without ZeRO-3 first (the weights' gathers
   before every layer are communication, which the bound does not hold).
2. **The** ``top`` **fastest layouts** of step 1 **with each of their other recipes**, in order of
   the bound, skipping any whose bound is already above the best simulated step (it cannot win).

The answer is the fastest simulated candidate. What is not simulated is counted, not hidden
(:class:`SearchSummary`): a layout outside the ``top`` keeps its other recipes unsimulated, though
their bounds may lie below the best step (the bound holds compute only; an MoE step is far above
it), so the search is exact over the layouts and greedy over their recipes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:                   # the CLI imports this module; pandas only when a search runs
    import pandas as pd

LAYOUT_FIELDS = ("tp", "cp", "pp", "ep", "schedule", "last_stage_layers")
TOP_LAYOUTS = 8


@dataclass(frozen=True)
class SearchSummary:
    """What a search simulated: ``candidates`` that fit, ``layouts`` among them, ``simulated`` in
    all, ``pruned`` by their bound (above the best step), ``unsearched`` recipes of layouts outside
    the top."""

    candidates: int
    layouts: int
    simulated: int
    pruned: int
    unsearched: int
    top: int

    def line(self) -> str:
        return (f"simulated {self.simulated} of {self.candidates} candidates that fit: each of the "
                f"{self.layouts} layouts with its likeliest recipe, the {min(self.top, self.layouts)} fastest "
                f"with their other recipes ({self.pruned} skipped: their compute bound is above the best "
                f"step; {self.unsearched} recipes of the other layouts not simulated)")


def layout_key(p: dict) -> tuple:
    return tuple(str(p[k]) for k in LAYOUT_FIELDS)


def likeliest_first(points: list[dict]) -> list[dict]:
    """``points`` in the order step 1 tries their recipes: without ZeRO-3 first, then by bound."""
    return sorted(points, key=lambda p: (int(p["zero_stage"]) == 3, float(p["bound_s"])))


def search(points: list[dict], simulate: Callable[[list[dict]], pd.DataFrame],
           top: int = TOP_LAYOUTS) -> tuple[pd.DataFrame, SearchSummary]:
    """Run the search of the module. ``simulate(points)``: their rows (the points' fields, then
    ``step_time_s``, ``status``...), the points given before included (a resumable sweep); returns
    (every simulated row, the summary)."""
    by_layout: dict[tuple, list[dict]] = {}
    for p in points:
        by_layout.setdefault(layout_key(p), []).append(p)
    ordered = {key: likeliest_first(ps) for key, ps in by_layout.items()}
    chosen = [ps[0] for ps in ordered.values()]
    df = simulate(chosen)
    good = df[df["status"] == "ok"]
    if good.empty:
        return df, SearchSummary(len(points), len(by_layout), len(chosen), 0, len(points) - len(chosen), top)
    fastest = good.sort_values("step_time_s", kind="stable")
    top_keys = list(dict.fromkeys(layout_key(r) for r in fastest.to_dict("records")))[:top]
    best = float(fastest["step_time_s"].iloc[0])
    rest = sorted((p for key in top_keys for p in ordered[key][1:]), key=lambda p: float(p["bound_s"]))
    pruned = [p for p in rest if float(p["bound_s"]) >= best]
    more = [p for p in rest if float(p["bound_s"]) < best]
    if more:
        df = simulate(chosen + more)
    unsearched = len(points) - len(chosen) - len(rest)
    return df, SearchSummary(len(points), len(by_layout), len(chosen) + len(more), len(pruned), unsearched, top)


__all__ = ["LAYOUT_FIELDS", "SearchSummary", "TOP_LAYOUTS", "layout_key", "likeliest_first", "search"]
