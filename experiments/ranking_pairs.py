"""Rankings scored pair by pair: does the simulator order two measured runs of one job as measured?

A *ranking group* is the scored step-level runs of one source that measured one job (the same
model, GPU, GPU count, sequence length, global batch and precision) under two or more schedules,
layouts (TP, CP, PP, virtual stages, DP, EP, micro-batch size, ZeRO stage) or recipes
(recomputation, kernel fusion, TP-communication overlap): Zero Bubble's schedules at one setting,
Megatron-LM 2021's PTD against ZeRO-3 at one size, torchtitan's eager against compiled FSDP. Every two runs of a group are a *pair*: its measured gap is the faster
run's measured speed over the slower's, minus 1 (a speed: the figure of a throughput metric, the
inverse of a time metric's, such as seconds a step); its simulated gap the same two runs' predictions
in that order. A pair is ordered as measured when its simulated gap is positive. Pairs whose
measured gap is under :data:`TIE_PCT` are ties (measurement noise can order them either way) and
are listed but not scored; the headline figure is the share of pairs with a measured gap of at
least :data:`SCORED_GAP_PCT` that the simulator orders as measured.
"""
from __future__ import annotations

from itertools import combinations

import pandas as pd

from sim.training.trust import SCORED_GAP_PCT
from validation.suite import KERNEL_METRICS, METRICS

JOB = ["source", "model", "gpu", "gpus", "seq_len", "global_batch", "precision"]
LAYOUT = ["tp", "cp", "pp", "vp", "layers_per_virtual_stage", "dp", "ep", "microbatch_size", "zero", "schedule",
          "recompute", "optimizer_sync", "fusion", "tp_comm_overlap"]
SCHEDULE_COLUMNS = {"schedule", "vp", "layers_per_virtual_stage", "optimizer_sync"}   # a pair of kind "schedule"
RECIPE_COLUMNS = {"recompute", "fusion", "tp_comm_overlap"}                           # a pair of kind "recipe"
TIE_PCT = 2.0           # measured gaps below this are ties; the headline counts pairs at least SCORED_GAP_PCT apart


def speed(run, column: str) -> float:
    """``run``'s figure in ``column`` as a speed (higher is faster): the figure itself for a
    throughput metric, its inverse for a time metric (``validation.suite.METRICS``)."""
    value = float(run[column])
    return value if METRICS[run["metric"]][1] == "throughput" else 1.0 / value


def ranking_pairs(df: pd.DataFrame, modes: tuple[str, ...] = ("first_principles", "profile_fed")) -> pd.DataFrame:
    """Every pair of every ranking group of the validation table ``df`` (``results/validation.csv``'s
    columns): ``group`` (the job), ``faster`` and ``slower`` (ids, by the measured figure),
    ``kind`` (``schedule`` when only the schedule differs, ``recipe`` when only the recipe does, else
    ``layout``), ``measured_gap_pct``,
    ``tie``, and per mode ``{mode}_gap_pct`` and ``{mode}_same_order`` (None where a run has no
    prediction in that mode). A group's runs share a metric; the communication-kernel rows form none."""
    scored = df[(df["role"] == "scored") & ~df["metric"].isin(KERNEL_METRICS)]
    layout = [c for c in LAYOUT if c in scored]
    rows = []
    for key, g in scored.groupby(JOB + ["metric"], sort=False, dropna=False):
        if len(g) < 2 or g[layout].astype(str).drop_duplicates().shape[0] < 2:
            continue
        name = " / ".join(str(v) for v in key[:-1])
        for (_, a), (_, b) in combinations(g.iterrows(), 2):
            fast, slow = (a, b) if speed(a, "measured") >= speed(b, "measured") else (b, a)
            gap = 100 * (speed(fast, "measured") / speed(slow, "measured") - 1)
            differs = [c for c in layout if str(fast[c]) != str(slow[c])]
            kind = ("schedule" if set(differs) <= SCHEDULE_COLUMNS else "recipe" if set(differs) <= RECIPE_COLUMNS
                    else "layout")
            row = {"group": name, "faster": fast["id"], "slower": slow["id"], "kind": kind,
                   "measured_gap_pct": gap, "tie": gap < TIE_PCT}
            for mode in modes:
                col = f"predicted_{mode}"
                if col not in g or pd.isna(fast[col]) or pd.isna(slow[col]):
                    row[f"{mode}_gap_pct"], row[f"{mode}_same_order"] = None, None
                    continue
                sim = 100 * (speed(fast, col) / speed(slow, col) - 1)
                row[f"{mode}_gap_pct"], row[f"{mode}_same_order"] = sim, sim > 0
            rows.append(row)
    return pd.DataFrame(rows)


def agreement(pairs: pd.DataFrame, mode: str, min_gap_pct: float = SCORED_GAP_PCT) -> tuple[int, int]:
    """(pairs ordered as measured, pairs scored): the pairs with a measured gap of at least
    ``min_gap_pct`` and a prediction in ``mode``."""
    col = f"{mode}_same_order"
    if pairs.empty or col not in pairs:
        return 0, 0
    scored = pairs[(pairs["measured_gap_pct"] >= min_gap_pct) & pairs[col].notna()]
    return int(scored[col].astype(bool).sum()), len(scored)


def pairs_text(pairs: pd.DataFrame, modes: tuple[str, ...] = ("first_principles", "profile_fed")) -> list[str]:
    """One line per mode: the groups, the pairs, the ties and the agreement on clear pairs."""
    if pairs.empty:
        return []
    groups, sources = pairs["group"].nunique(), pairs["group"].str.split(" / ").str[0].nunique()
    kinds = pairs.groupby("group")["kind"].agg(set)
    layouts = int(kinds.apply(lambda k: "layout" in k).sum())
    recipes = int(kinds.apply(lambda k: "layout" not in k and "recipe" in k).sum())
    lines = [f"ranking pairs: {len(pairs)} pairs in {groups} groups ({groups - layouts - recipes} of schedules, "
             f"{layouts} of layouts, {recipes} of recipes) from {sources} sources; {int(pairs['tie'].sum())} ties "
             f"(measured gap under {TIE_PCT:g}%)"]
    for mode in modes:
        same, total = agreement(pairs, mode)
        if total:
            lines.append(f"ranking pairs, {mode}: {same} of {total} pairs with a measured gap of "
                         f"{SCORED_GAP_PCT:g}% or more ordered as measured ({100 * same / total:.0f}%)")
    return lines


__all__ = ["JOB", "LAYOUT", "RECIPE_COLUMNS", "SCHEDULE_COLUMNS", "SCORED_GAP_PCT", "TIE_PCT", "agreement", "pairs_text", "ranking_pairs"]
