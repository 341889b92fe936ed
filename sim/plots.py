"""Pictures of a pipeline run: a per-rank timeline (Gantt) and per-rank utilization bars (PNG)."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .engine import EngineResult  # noqa: E402
from .io import write_figure_atomic  # noqa: E402
from .metrics import RunMetrics  # noqa: E402

# (kind, second stage held?) -> colour. Forward blues, input-gradient greens, weight greys,
# full backward oranges; the darker shade is the rank's second stage (up direction / back of V).
COLORS = {
    ("F", False): "#6baed6", ("F", True): "#2171b5",
    ("B", False): "#fdae6b", ("B", True): "#e6550d",
    ("I", False): "#74c476", ("I", True): "#238b45",
    ("W", False): "#bdbdbd", ("W", True): "#636363",
}


FIGURE_WIDTH_IN = 12.0      # every figure one width (1,320 px at 110 dpi), so pages line them up


def save_figure(fig, path: str | Path, dpi: int = 110) -> Path:
    """Lay out, write (creating the folder) and close a figure; returns the path."""
    fig.tight_layout()
    try:
        return write_figure_atomic(fig, path, dpi)
    finally:
        plt.close(fig)


def _second(result: EngineResult, mb: int, stage: int) -> bool:
    s = result.schedule
    if s.placement.kind == "bidirectional":
        return mb >= s.microbatches // 2
    return stage >= s.pp


def plot_timeline(result: EngineResult, path: str | Path, title: str | None = None,
                  label_ops: bool | None = None) -> Path:
    """Gantt chart: one row per rank, ops coloured by kind and direction; FB units are split in
    two halves (forward on top, backward below). Micro-batch numbers are printed when they fit."""
    sched = result.schedule
    P = sched.pp
    n_ops = len(result.records)
    if label_ops is None:
        label_ops = n_ops <= 1500
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 0.45 * P + 1.6))
    bars = defaultdict(list)  # (color, y0, height) -> [(start, width)]
    texts = []
    for rank, kind, mb, stage, b_mb, b_stage, start, end in result.records:
        y = P - 1 - rank
        width = end - start
        if kind == "FB":
            bars[(COLORS[("F", _second(result, mb, stage))], y + 0.5, 0.4)].append((start, width))
            bars[(COLORS[("B", _second(result, b_mb, b_stage))], y + 0.1, 0.4)].append((start, width))
            texts.append((start + width / 2, y + 0.7, str(mb)))
            texts.append((start + width / 2, y + 0.3, str(b_mb)))
        else:
            bars[(COLORS[(kind, _second(result, mb, stage))], y + 0.1, 0.8)].append((start, width))
            texts.append((start + width / 2, y + 0.5, str(mb)))
    for (color, y0, h), spans in bars.items():
        ax.broken_barh(spans, (y0, h), facecolors=color, edgecolor="white", linewidth=0.4)
    if label_ops:
        for x, y, t in texts:
            ax.text(x, y, t, ha="center", va="center", fontsize=6)
    ax.set_yticks([P - 1 - r + 0.5 for r in range(P)], [f"rank {r}" for r in range(P)])
    ax.set_xlim(0, result.makespan)
    ax.set_ylim(0, P)
    ax.set_xlabel("time")
    ax.set_title(title or f"{sched.name}: P={P}, M={sched.microbatches}, makespan {result.makespan:g}")
    legend = [Patch(color=COLORS[(k, d)], label=f"{k}{' (2nd stage / up)' if d else ''}")
              for k in "FBIW" for d in (False, True)]
    legend.append(Patch(facecolor="white", edgecolor="black", label="FB: F on top, B below"))
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.3 / P), ncol=5, fontsize=8,
              frameon=False)
    return save_figure(fig, path)


def plot_utilization(metrics: list[RunMetrics] | RunMetrics, path: str | Path, title: str | None = None) -> Path:
    """Per-rank utilization bars, one group of bars per run (schedule) side by side."""
    runs = [metrics] if isinstance(metrics, RunMetrics) else list(metrics)
    P = max(m.pp for m in runs)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 4.5))
    width = 0.8 / len(runs)
    for i, m in enumerate(runs):
        xs = [r.rank + (i - (len(runs) - 1) / 2) * width for r in m.ranks]
        ax.bar(xs, [100 * r.utilization for r in m.ranks], width=width,
               label=f"{m.schedule} (bubble {100 * m.bubble_fraction:.1f}%)")
    ax.set_xticks(range(P), [str(r) for r in range(P)])
    ax.set_xlabel("rank")
    ax.set_ylabel("utilization (%)")
    ax.set_ylim(0, 105)
    ax.set_title(title or "per-rank utilization")
    ax.legend(fontsize=8, ncol=3, loc="lower center")
    return save_figure(fig, path)
