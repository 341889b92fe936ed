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

With a ``screen`` (``plan --screen analytical``, the default: :mod:`sim.plan_screen`, a candidate's
step on the analytical network timed without SimPy, a lower bound on its simulated step: about
10 ms against a simulation's 150-200 ms), the same candidates are screened instead (every layout with its
likeliest recipe, then the ``top`` layouts by the screen with each of their other recipes), and
only the candidates whose screen is below the best simulated step are simulated, in the screen's
order, ``batch`` at a time (branch and bound: a candidate whose lower bound is above a simulated
step cannot win). So the answer is the fastest of the screened candidates, as if every one of them
had been simulated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:                   # the CLI imports this module; pandas only when a search runs
    import pandas as pd

LAYOUT_FIELDS = ("tp", "cp", "pp", "ep", "schedule", "last_stage_layers")
TOP_LAYOUTS = 8
SCREEN_BATCH = 4                  # candidates simulated at a time under a screen (two per worker of 2 cores)


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
    screened: int = 0               # with a screen: candidates screened (0: no screen)

    def line(self) -> str:
        if self.screened:
            return (f"screened {self.screened} of {self.candidates} candidates that fit on the analytical network "
                    f"(each of the {self.layouts} layouts with its likeliest recipe, the "
                    f"{min(self.top, self.layouts)} best by the screen with their other recipes; {self.unsearched} "
                    f"recipes of the other layouts not screened); simulated the {self.simulated} whose screen, a "
                    f"lower bound on the step, was below the best simulated step ({self.pruned} could not win)")
        return (f"simulated {self.simulated} of {self.candidates} candidates that fit: each of the "
                f"{self.layouts} layouts with its likeliest recipe, the {min(self.top, self.layouts)} fastest "
                f"with their other recipes ({self.pruned} skipped: their compute bound is above the best "
                f"step; {self.unsearched} recipes of the other layouts not simulated)")


def layout_key(p: dict) -> tuple:
    return tuple(str(p[k]) for k in LAYOUT_FIELDS)


def likeliest_first(points: list[dict]) -> list[dict]:
    """``points`` in the order step 1 tries their recipes: without ZeRO-3 first, then by bound."""
    return sorted(points, key=lambda p: (int(p["zero_stage"]) == 3, float(p["bound_s"])))


def search(points: list[dict], simulate: Callable[[list[dict]], pd.DataFrame], top: int = TOP_LAYOUTS,
           screen: Callable[[list[dict]], list[float]] | None = None,
           batch: int = SCREEN_BATCH) -> tuple[pd.DataFrame, SearchSummary]:
    """Run the search of the module. ``simulate(points)``: their rows (the points' fields, then
    ``step_time_s``, ``status``...), the points given before included (a resumable sweep);
    ``screen(points)``: a lower bound on each one's step (s; ``-inf`` where it could not be found:
    simulated first), or ``None``; returns (every simulated row, the summary)."""
    by_layout: dict[tuple, list[dict]] = {}
    for p in points:
        by_layout.setdefault(layout_key(p), []).append(p)
    ordered = {key: likeliest_first(ps) for key, ps in by_layout.items()}
    chosen = [ps[0] for ps in ordered.values()]
    if screen is not None:
        return _screened(points, ordered, chosen, simulate, screen, top, batch)
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


def _screened(points: list[dict], ordered: dict, chosen: list[dict], simulate, screen, top: int, batch: int):
    """The search under a screen (see the module): screen, then branch and bound."""
    bounds = dict(zip(map(id, chosen), screen(chosen)))
    by_screen = sorted(ordered, key=lambda key: bounds[id(ordered[key][0])])       # stable: layouts' order
    rest = [p for key in by_screen[:top] for p in ordered[key][1:]]
    if rest:
        bounds.update(zip(map(id, rest), screen(rest)))
    pool = sorted(chosen + rest, key=lambda p: bounds[id(p)])
    done: list[dict] = []
    best, df = math.inf, None
    while len(done) < len(pool) and bounds[id(pool[len(done)])] < best:
        done += [p for p in pool[len(done):len(done) + batch] if bounds[id(p)] < best]
        df = simulate(done)
        good = df[df["status"] == "ok"]
        if not good.empty:
            best = float(good["step_time_s"].min())
    summary = SearchSummary(len(points), len(ordered), len(done), len(pool) - len(done),
                            len(points) - len(pool), top, screened=len(pool))
    return df, summary


__all__ = ["LAYOUT_FIELDS", "SCREEN_BATCH", "SearchSummary", "TOP_LAYOUTS", "layout_key", "likeliest_first", "search"]
