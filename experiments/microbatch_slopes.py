"""Where the Zero Bubble rows' error lies: a step's time as a straight line in its micro-batches.

A pipeline's step over ``m`` micro-batches costs ``m`` times what one micro-batch adds in the
steady state (the *slot*) plus what does not grow with ``m`` (the fill and drain of the pipeline,
the optimizer): ``step(m) = slot x m + fixed``. The Zero Bubble paper measured every schedule of
each model at three (Table 4) or four (Table 12) micro-batch counts and profiled, in the same runs,
one micro-batch's pass through a stage (Table 9: ``T_F + T_B + T_W``). A least-squares line
through each schedule's measured steps, and through the simulator's predictions of the same runs,
splits the error in two:

* ``*_slot``: the line's slope over ``T_F + T_B + T_W`` of the model (the mean over its Table 9
  rows): 1.0 when a micro-batch costs exactly its profiled passes;
* ``*_fixed_slots``: the intercept in the same unit: ``p - 1`` for 1F1B's fill and drain over
  ``p`` equal stages, about 0 for ZB-2p;
* ``{mode}_slot_ratio``: the measured slope over the mode's, what each micro-batch costs on the
  hardware for one the simulator charges (above 1: the simulator is optimistic per micro-batch),
  and ``{mode}_fixed_gap_slots``, the measured intercept less the mode's.

A step here is ``global_batch / (gpus x samples per GPU per second)``, measured or predicted, so
a line is what the table's own figures say. Nothing is fitted to the model; the lines only read the
validation table (``results/validation.csv``) and Table 9.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from validation.predict import MODES
from validation.suite import load_zero_bubble_profiles

SOURCE = "zero-bubble"
METRIC = "samples_per_s_per_gpu"
GROUP = ["table", "model", "gpus", "schedule", "microbatch_size", "optimizer_sync"]


def pass_ms(profiles: dict[str, dict] | None = None) -> dict[str, float]:
    """Per model, ``T_F + T_B + T_W`` of one micro-batch through a middle stage in ms, the mean over
    its Table 9 rows."""
    profiles = load_zero_bubble_profiles() if profiles is None else profiles
    sums: dict[str, list[float]] = {}
    for entry in profiles.values():
        sums.setdefault(entry["model"], []).append(entry["t_f_ms"] + entry["t_b_ms"] + entry["t_w_ms"])
    return {model: float(np.mean(v)) for model, v in sums.items()}


def line(microbatches, steps) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line of ``steps`` against ``microbatches``."""
    slope, intercept = np.polyfit(np.asarray(microbatches, float), np.asarray(steps, float), 1)
    return float(slope), float(intercept)


def microbatch_slopes(df: pd.DataFrame, unit_ms: dict[str, float] | None = None) -> pd.DataFrame:
    """One row per Zero Bubble table, model and schedule measured at two or more micro-batch counts
    (``df``: ``results/validation.csv``'s columns): ``microbatches`` (``24/32/64``), ``pass_ms``
    (the model's ``T_F + T_B + T_W``), and for ``measured`` and each mode ``{x}_slot`` and
    ``{x}_fixed_slots`` (see the module; empty where a mode has no prediction of every run)."""
    unit_ms = pass_ms() if unit_ms is None else unit_ms
    rows = df[(df["source"] == SOURCE) & (df["role"] == "scored") & (df["metric"] == METRIC)].copy()
    if rows.empty:
        return pd.DataFrame()
    rows["table"] = rows["where"].str.split(",").str[0]
    rows["optimizer_sync"] = rows["optimizer_sync"].fillna("")
    rows["m"] = rows["global_batch"] / (rows["microbatch_size"] * rows["dp"])
    out = []
    for key, g in rows.groupby(GROUP, sort=False):
        if g["m"].nunique() < 2 or key[1] not in unit_ms:
            continue
        g = g.sort_values("m")
        unit = unit_ms[key[1]] / 1e3
        row = dict(zip(GROUP, key))
        row.update(microbatches="/".join(str(int(m)) for m in g["m"]), pass_ms=unit_ms[key[1]])
        for name, col in [("measured", "measured")] + [(mode, f"predicted_{mode}") for mode in MODES]:
            if col not in g or g[col].isna().any():
                row[f"{name}_slot"] = row[f"{name}_fixed_slots"] = None
                continue
            slope, intercept = line(g["m"], g["global_batch"] / (g["gpus"] * g[col]))
            row[f"{name}_slot"], row[f"{name}_fixed_slots"] = slope / unit, intercept / unit
        for mode in MODES:
            known = row["measured_slot"] is not None and row[f"{mode}_slot"] is not None
            row[f"{mode}_slot_ratio"] = row["measured_slot"] / row[f"{mode}_slot"] if known else None
            row[f"{mode}_fixed_gap_slots"] = (row["measured_fixed_slots"] - row[f"{mode}_fixed_slots"]
                                              if known else None)
        out.append(row)
    return pd.DataFrame(out)


def slopes_text(slopes: pd.DataFrame) -> list[str]:
    """One line per mode: the median and range of the measured micro-batch cost over the simulated
    one, and the median gap of the fixed part, over the schedule lines."""
    if slopes.empty:
        return []
    lines = []
    for mode in MODES:
        ratio, gap = slopes.get(f"{mode}_slot_ratio"), slopes.get(f"{mode}_fixed_gap_slots")
        if ratio is None or ratio.isna().all():
            continue
        ratio, gap = ratio.dropna().astype(float), gap.dropna().astype(float)
        lines.append(f"Zero Bubble, {len(ratio)} schedule lines, {mode}: a micro-batch costs {ratio.median():.3f}x "
                     f"(from {ratio.min():.3f} to {ratio.max():.3f}) what the simulator charges, the fixed part "
                     f"{round(gap.median(), 1) + 0.0:+.1f} slots (median; a slot is Table 9's T_F + T_B + T_W)")
    return lines


__all__ = ["GROUP", "METRIC", "SOURCE", "line", "microbatch_slopes", "pass_ms", "slopes_text"]
