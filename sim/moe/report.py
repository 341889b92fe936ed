"""Tables and pictures of step results: per-rank CSV, the F&B unit's two streams, stacked
per-rank time (compute / exposed communication / bubble)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ..plots import save_figure  # noqa: E402
from .step import StepResult  # noqa: E402

PART_COLORS = {"F": "#6baed6", "B": "#74c476", "W": "#bdbdbd", "HEAD": "#9e9ac8"}


def ranks_frame(res: StepResult) -> pd.DataFrame:
    df = pd.DataFrame([r.to_json() for r in res.ranks])
    df.insert(0, "schedule", res.run.schedule)
    return df


def summary_row(res: StepResult) -> dict:
    """One row for a comparison table (config first, then metrics with units)."""
    return {"schedule": res.run.schedule, "mode": res.mode, "pp": res.run.pp, "ep": res.run.ep, "dp": res.run.dp,
            "microbatches": res.run.microbatches, "step_time_s": res.step_time_s, "tokens_per_s": res.tokens_per_s,
            "mfu": res.mfu, "compute_comm_ratio": res.compute_comm_ratio, "exposed_comm_s": res.exposed_comm_s,
            "comm_hidden_fraction": res.comm_hidden_fraction,
            "mean_utilization": sum(r.utilization for r in res.ranks) / len(res.ranks),
            "max_memory_gb": max(r.memory.total_gb for r in res.ranks),
            "fits_hbm": not res.warnings}


def fb_unit_trace(res: StepResult) -> list[tuple]:
    """The part events of one overlapped F&B unit of the traced (middle) rank, mid-step."""
    seqs = sorted({t[0] for t in res.part_trace if t[1].startswith("[")})
    if not seqs:
        return []
    seq = seqs[len(seqs) // 2]
    return [t for t in res.part_trace if t[0] == seq]


def plot_fb_unit(res: StepResult, path: str | Path) -> Path | None:
    """Figure 4 of the DeepSeek-V3 report, simulated: one F&B unit's compute and communication
    streams, parts labelled, forward blue, backward (input gradient) green, weight gradient grey."""
    parts = fb_unit_trace(res)
    if not parts:
        return None
    t0 = min(p[4] for p in parts)
    fig, ax = plt.subplots(figsize=(14, 2.8))
    for seq, op, stream, name, a, b in parts:
        kind = "HEAD" if name.startswith("HEAD") else ("W" if "(W)" in name else ("F" if "(F)" in name else "B"))
        color = PART_COLORS[kind] if stream == 0 else {"F": "#fd8d3c", "B": "#e6550d"}.get(kind, "#fdae6b")
        y = 1 if stream == 0 else 0
        ax.broken_barh([((a - t0) * 1e3, (b - a) * 1e3)], (y + 0.1, 0.8), facecolors=color, edgecolor="white")
        if (b - a) * 1e3 > 0.02 * (max(p[5] for p in parts) - t0) * 1e3:
            ax.text(((a + b) / 2 - t0) * 1e3, y + 0.5, name, ha="center", va="center", fontsize=7)
    ax.set_yticks([0.5, 1.5], ["communication", "compute"])
    ax.set_xlabel("ms since the unit started")
    ax.set_title(f"{res.run.schedule}: one F&B unit on rank {res.run.pp // 2} ({parts[0][1]}), simulated streams; "
                 "compute: blue F, green B, grey W; communication: light F, dark B", fontsize=9)
    return save_figure(fig, path)


def plot_rank_breakdown(results: list[StepResult], path: str | Path, title: str = "") -> Path:
    """Per-rank stacked bars (seconds): compute, exposed communication, bubble; one panel per run."""
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.8), sharey=True, squeeze=False)
    for ax, res in zip(axes[0], results):
        ranks = [r.rank for r in res.ranks]
        comp = [r.compute_s for r in res.ranks]
        expo = [r.exposed_comm_s for r in res.ranks]
        bub = [max(0.0, r.bubble_s) for r in res.ranks]
        ax.bar(ranks, comp, color="#3182bd", label="compute")
        ax.bar(ranks, expo, bottom=comp, color="#e6550d", label="exposed comm")
        ax.bar(ranks, bub, bottom=[c + e for c, e in zip(comp, expo)], color="#d9d9d9", label="bubble")
        ax.set_title(f"{res.run.schedule}: {res.step_time_s:.2f} s/step", fontsize=9)
        ax.set_xlabel("rank")
    axes[0][0].set_ylabel("seconds per step")
    axes[0][-1].legend(fontsize=8, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)
