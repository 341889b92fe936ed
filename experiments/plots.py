"""Figures from the result CSVs (this script only reads CSVs) -> ``results/figures/*.png``.

* ``bubble_vs_microbatches.png`` from bubble_vs_microbatches.csv
* ``sweep_ep.png`` (step time and exposed communication against EP size, per schedule) from sweep_ep.csv
* ``sweep_tp.png`` (step time and exposed TP collectives against TP size, per PP) from sweep_tp.csv
* ``sweep_comm_sms.png`` (step time and all-to-all time against the SMs given to communication) from sweep_comm_sms.csv
* ``sweep_topology.png`` from sweep_topology.csv
* ``sweep_faults.png`` (step time against jitter and a slow GPU's slowdown, link faults' cost) from sweep_faults.csv
* ``timeline_deepseek_v3_dualpipe.png`` (one step) from deepseek_v3_events_dualpipe.csv
* ``link_utilization.png`` (busiest links during the all-to-alls) from deepseek_v3_links.csv
* ``validation.png`` (predicted against measured, every scored run of the validation suite) from validation.csv
* ``jobs.png`` (two jobs on one cluster, each alone and shared, per placement) from jobs.csv
* ``nccl_curves.png`` (bus bandwidth against size per collective and GPU count on the H100 preset, with
  XLA's measured H100 points) from nccl_curves.csv
Missing CSVs are skipped with a note. ``--only NAME ...`` draws the figures of those CSVs alone (names
without ``.csv``), ``--skip NAME ...`` all the others (``make run`` draws the validation figure last).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.common import script_main  # noqa: E402
from sim.io import truthy  # noqa: E402
from sim.plots import COLORS, FIGURE_WIDTH_IN, save_figure  # noqa: E402


def _save(fig, path: Path) -> None:
    print(f"wrote {save_figure(fig, path)}")


def bubble_vs_microbatches(df: pd.DataFrame, out: Path) -> None:
    df = df[df["status"] == "ok"]
    pps = sorted(df["pp"].unique())
    fig, axes = plt.subplots(1, len(pps), figsize=(FIGURE_WIDTH_IN, 4), sharey=True, squeeze=False)
    for ax, pp in zip(axes[0], pps):
        for name, g in df[df["pp"] == pp].groupby("schedule", sort=False):
            ax.plot(g["microbatches"], g["bubble_fraction"], marker="o", label=name)
        ax.set_title(f"P = {pp}, equal costs, no communication")
        ax.set_xlabel("micro-batches M")
        ax.set_xscale("log", base=2)
    axes[0][0].set_ylabel("bubble fraction")
    axes[0][-1].legend(fontsize=8)
    _save(fig, out / "bubble_vs_microbatches.png")


def _fit_lines(ok: pd.DataFrame, by: str, label, x: str, panels: tuple, sort: bool = False) -> plt.Figure:
    """Two panels against ``x`` (log 2), one line per ``by`` group (in order of appearance, or
    sorted) labelled ``label(key)``: each panel's (column, y label); a point that does not fit HBM
    hollow, said in the legend."""
    from matplotlib.lines import Line2D
    fig, axes = plt.subplots(1, 2, figsize=(FIGURE_WIDTH_IN, 4))
    fits = truthy(ok["fits_hbm"]) if "fits_hbm" in ok else pd.Series(True, ok.index)
    for i, (key, g) in enumerate(ok.groupby(by, sort=sort)):
        color = plt.get_cmap("tab10").colors[i % 10]
        good = fits[g.index]
        for ax, (column, _) in zip(axes, panels):
            ax.plot(g[x], g[column], color=color, lw=1, label=label(key))
            ax.scatter(g.loc[good, x], g.loc[good, column], color=color, s=22, zorder=3)
            ax.scatter(g.loc[~good, x], g.loc[~good, column], facecolors="none", edgecolors=color, s=30, zorder=3)
    for ax, (_, ylabel) in zip(axes, panels):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"{x.upper()} size")
        ax.set_ylabel(ylabel)
    handles, labels = axes[0].get_legend_handles_labels()
    handles.append(Line2D([], [], marker="o", ls="", markerfacecolor="none", markeredgecolor="grey"))
    labels.append("hollow: does not fit HBM")
    axes[1].legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig


def sweep_ep(df: pd.DataFrame, out: Path) -> None:
    """Step time and exposed all-to-all against EP, per schedule; a point that does not fit HBM is
    drawn hollow (said in the legend); EP sizes the layout cannot run are named in the title."""
    failed = sorted({int(e) for e in df.loc[df["status"] != "ok", "ep"]})
    fig = _fit_lines(df[df["status"] == "ok"], "schedule", str, "ep",
                     (("step_time_s", "step time (s)"), ("exposed_comm_s", "exposed all-to-all per rank (s)")))
    scenario = str(df["scenario"].iloc[0]) if "scenario" in df and len(df) else "deepseek-v3"
    note = f"; not run (layout refused): EP {', '.join(map(str, failed))}" if failed else ""
    fig.suptitle(f"{scenario}: EP size x schedule, the scenario's PP and DP{note}", fontsize=10)
    _save(fig, out / "sweep_ep.png")


def sweep_tp(df: pd.DataFrame, out: Path) -> None:
    """Step time and exposed TP collectives against TP size, one line per PP; a point that does not
    fit HBM is drawn hollow."""
    fig = _fit_lines(df[df["status"] == "ok"], "pp", lambda pp: f"PP {pp}", "tp",
                     (("step_time_s", "step time (s)"), ("mean_tp_comm_s", "exposed TP collectives per rank (s)")), sort=True)
    scenario = str(df["scenario"].iloc[0]) if "scenario" in df and len(df) else "llama3-70b"
    fig.suptitle(f"{scenario}: TP x PP at the scenario's GPUs and global batch (DP = GPUs / (TP x PP))", fontsize=10)
    _save(fig, out / "sweep_tp.png")


def sweep_topology(df: pd.DataFrame, out: Path) -> None:
    """Step time per topology variant, one bar per schedule and communication mode (measured once
    per all-to-all shape, or live among the other traffic), variants in the sweep's order."""
    df = df[df["status"] == "ok"].copy()
    if "communication" not in df:
        df["communication"] = "measured"
    order = list(dict.fromkeys(df["variant"]))
    piv = df.pivot_table(index="variant", columns=["schedule", "communication"], values="step_time_s").reindex(order)
    piv.columns = [f"{s} ({c})" for s, c in piv.columns]
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 4.5))
    piv.plot.bar(ax=ax, width=0.8)
    ax.set_ylabel("step time (s)")
    ax.legend(fontsize=8)
    ax.set_title("DeepSeek-V3 step under topology variants of the 2,048-H800 cluster (live: all-to-alls among the "
                 "other traffic)", fontsize=9)
    _save(fig, out / "sweep_topology.png")


def sweep_comm_sms(df: pd.DataFrame, out: Path) -> None:
    """Step time and the dispatch's time against the SMs the all-to-all kernels hold, per schedule."""
    df = df[df["status"] == "ok"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(FIGURE_WIDTH_IN, 4))
    fits = truthy(df["fits_hbm"]) if "fits_hbm" in df else pd.Series(True, df.index)
    for name, g in df.groupby("schedule", sort=False):
        line, = a.plot(g["comm_sms"], g["step_time_s"], marker="o", label=name)
        unfit = g[~fits[g.index]]
        a.scatter(unfit["comm_sms"], unfit["step_time_s"], s=60, facecolors="white", edgecolors=line.get_color(),
                  zorder=3, label=f"{name}: does not fit HBM" if len(unfit) else None)
    first = df.drop_duplicates("comm_sms")
    b.plot(first["comm_sms"], first["a2a_dispatch_ms"], marker="o", label="dispatch")
    b.plot(first["comm_sms"], first["a2a_combine_ms"], marker="o", label="combine")
    for ax, label in ((a, "step time (s)"), (b, "all-to-all per layer (ms)")):
        ax.set_xlabel("SMs of the all-to-all kernels (of 132)")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle("DeepSeek-V3 on 2,048 H800: SMs for communication vs compute", fontsize=10)
    _save(fig, out / "sweep_comm_sms.png")


def sweep_faults(df: pd.DataFrame, out: Path) -> None:
    """Step time against fault size per schedule: jitter, one slow GPU (of the first or the last
    rank), and the link faults as bars (each against the fault-free step of its schedule)."""
    df = df[df["status"] == "ok"]
    base = df[df["fault"] == "none"].set_index("schedule")["step_time_s"]
    fig, axes = plt.subplots(1, 4, figsize=(FIGURE_WIDTH_IN, 4))
    for ax, fault, label in ((axes[0], "jitter", "kernel-time jitter (coefficient of variation)"),
                             (axes[1], "slow_gpu", "slowdown of one GPU of rank 0 (x)"),
                             (axes[2], "slow_gpu_last", "slowdown of one GPU of the last rank (x)")):
        for name, g in df[df["fault"] == fault].groupby("schedule", sort=False):
            x0 = 0.0 if fault == "jitter" else 1.0
            ax.plot([x0, *g["fault_size"]], [base.get(name, float("nan")), *g["step_time_s"]], marker="o", label=name)
        ax.set_xlabel(label)
        ax.set_ylabel("step time (s)")
        if ax.lines:
            ax.legend(fontsize=8)
    links = df[df["fault"].isin(["failed_nic", "degraded_spine"])].copy()
    links["cost_s"] = links["step_time_s"] - links["schedule"].map(base)
    piv = links.pivot_table(index="fault", columns="schedule", values="cost_s")
    if piv.empty:                        # a partial CSV (the sweep still running): no link faults yet
        axes[3].text(0.5, 0.5, "no link-fault rows", ha="center", va="center", transform=axes[3].transAxes)
    else:
        piv.plot.bar(ax=axes[3], rot=0)
    axes[3].set_ylabel("step time - fault-free (s)")
    axes[3].set_xlabel("")
    fig.suptitle("DeepSeek-V3 on 2,048 H800: what stragglers and faults cost each schedule (every rank simulated)",
                 fontsize=10)
    _save(fig, out / "sweep_faults.png")


def timeline(df: pd.DataFrame, out: Path, name: str) -> None:
    P = int(df["rank"].max()) + 1
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 0.35 * P + 1.5))
    for row in df.itertuples():
        kind = "F" if row.kind in ("F", "FB") else row.kind
        color = COLORS[(kind, False)] if row.kind != "FB" else "#9e9ac8"
        ax.broken_barh([(row.start, row.end - row.start)], (P - 1 - row.rank + 0.1, 0.8), facecolors=color)
    ax.set_yticks([P - 1 - r + 0.5 for r in range(P)], [f"rank {r}" for r in range(P)])
    ax.set_xlabel("seconds")
    ax.set_title(f"one step, {name} (F blue, B orange, I green, W grey, F&B units purple)")
    _save(fig, out / f"timeline_{name}.png")


def link_utilization(df: pd.DataFrame, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 4))
    for shape, g in df.groupby("shape"):
        top = g.sort_values("mean_util", ascending=False).head(10)
        ax.barh([f"{shape}: {link}" for link in top["link"]], 100 * top["mean_util"])
    ax.set_xlabel("mean utilization during the all-to-all (%)")
    ax.set_title("busiest links of one DeepSeek-V3 dispatch and combine (every EP group of a stage at once)")
    _save(fig, out / "link_utilization.png")


MARKERS = "osD^vP*Xhp"
SOURCE_COLORS = plt.get_cmap("tab10").colors


def validation_figure(df: pd.DataFrame, out: Path) -> None:
    """Left: predicted against measured, log-log, one marker and colour per source, the +-10% and +-25%
    bands, first-principles filled and profile-fed hollow (each run in its source's own figure and
    unit). Right: each scored run's speed error by source and mode."""
    df = df[(df["role"] == "scored") & (df["status"] == "ok")]
    modes = [m for m in ("first_principles", "profile_fed")
             if f"predicted_{m}" in df and df[f"predicted_{m}"].notna().any()]
    sources = list(dict.fromkeys(df["source"]))
    style = {s: (MARKERS[i % len(MARKERS)], SOURCE_COLORS[i % len(SOURCE_COLORS)]) for i, s in enumerate(sources)}
    fig = plt.figure(figsize=(FIGURE_WIDTH_IN, 6.6))
    grid = fig.add_gridspec(2, 2, width_ratios=[1, 1.15], height_ratios=[1, 0.16])
    ax, bx, legend = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, :])
    lo, hi = df["measured"].min() / 2, df["measured"].max() * 2
    x = np.geomspace(lo, hi, 50)
    ax.plot(x, x, color="black", lw=0.8)
    for f, alpha in ((0.10, 0.30), (0.25, 0.12)):
        ax.fill_between(x, x * (1 - f), x * (1 + f), color="#4c72b0", alpha=alpha, lw=0, label=f"within {100 * f:.0f}%")
    for source in sources:
        marker, color = style[source]
        for mode in modes:
            g = df[(df["source"] == source) & df[f"predicted_{mode}"].notna()]
            if len(g):
                ax.scatter(g["measured"], g[f"predicted_{mode}"], marker=marker, s=30, linewidths=0.8,
                           facecolors=color if mode == "first_principles" else "none", edgecolors=color,
                           label=f"{source}, {mode.replace('_', '-')} ({len(g)})")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured (the source's own figure)",
           ylabel="simulated", title="simulated against measured")
    for i, mode in enumerate(modes):
        for j, source in enumerate(sources):
            e = df.loc[df["source"] == source, f"error_{mode}_pct"].dropna()
            if e.empty:
                continue
            marker, color = style[source]
            y = j + (i - (len(modes) - 1) / 2) * 0.3 + np.linspace(-0.1, 0.1, len(e))
            bx.scatter(1 + e / 100, y, marker=marker, s=22, linewidths=0.8, edgecolors=color,
                       facecolors=color if mode == "first_principles" else "none")
    for f in (0.10, 0.25):
        bx.axvspan(1 - f, 1 + f, color="#4c72b0", alpha=0.12, lw=0)
    bx.axvline(1, color="black", lw=0.8)
    ticks = [0.5, 0.75, 1, 1.25, 2, 3, 4]            # +50% left out: its label would touch +25%'s
    bx.set_xscale("log")
    bx.set_xticks(ticks, [f"{100 * (t - 1):+.0f}%" if t != 1 else "0" for t in ticks])
    bx.minorticks_off()
    bx.set_xlim(0.45, max(4.4, 1.1 * (1 + df[[f"error_{m}_pct" for m in modes]].max().max() / 100)))
    bx.set_yticks(range(len(sources)), sources)
    bx.invert_yaxis()
    bx.set_xlabel("speed error: predicted / measured speed - 1 (right of 0: optimistic)")
    bx.set_title("error per run (filled: first-principles, hollow: profile-fed)")
    legend.axis("off")
    legend.legend(*ax.get_legend_handles_labels(), loc="center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("Validation: the simulator against published measurements", fontsize=11)
    _save(fig, out / "validation.png")


def jobs_figure(df: pd.DataFrame, out: Path) -> None:
    """Each job's mean step alone and beside the other, per placement (experiments/jobs_sharing.py)."""
    from sim.jobs import plot_jobs
    first = df.iloc[0]
    title = (f"2 jobs on {Path(str(first.topology)).stem}, {first.steps} steps each, B from {first.arrive_b_s:g} s")
    frame = df.assign(job=df["job"] + ", " + df["policy"])
    print(f"wrote {plot_jobs(frame, title, out / 'jobs.png')}")


def nccl_curves(df: pd.DataFrame, out: Path) -> None:
    """nccl-tests' bus bandwidth against size, one panel per collective: the model's curve per GPU
    count on the H100 preset (lines) and XLA's measured H100 collectives (markers, same colour) where
    the calibration table has them (experiments/nccl_curves.py)."""
    df = df[(df["status"] == "ok") & (df["gpu"] == "h100")]
    if df.empty:
        print("skip nccl_curves.csv: no H100 rows")
        return
    kinds = list(dict.fromkeys(df["kind"]))
    fig, axes = plt.subplots(1, len(kinds), figsize=(FIGURE_WIDTH_IN, 4), sharey=True, squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        for i, (gpus, g) in enumerate(df[df["kind"] == kind].groupby("gpus", sort=True)):
            color = f"C{i % 10}"
            ax.plot(g["bytes"], g["busbw_gbps"], color=color, label=f"{gpus} GPUs")
            seen = g[pd.to_numeric(g["measured_s"], errors="coerce").notna()]
            if len(seen):
                factor = g["busbw_gbps"] / g["algbw_gbps"]
                measured = seen["bytes"] / seen["measured_s"].astype(float) / 1e9 * factor[seen.index]
                ax.scatter(seen["bytes"], measured, s=12, color=color, marker="x", zorder=3)
        ax.set_xscale("log", base=2)
        ax.set_title(kind.replace("_", "-"), fontsize=9)
        ax.set_xlabel("bytes (nccl-tests' size)")
    axes[0][0].set_ylabel("bus bandwidth (GB/s)")
    axes[0][-1].legend(fontsize=7, title="model; x: XLA, H100", title_fontsize=7)
    fig.suptitle(f"NCCL collectives alone on {df['topology'].iloc[0]} (hierarchical rings, deepep kernels)",
                 fontsize=10)
    _save(fig, out / "nccl_curves.png")


TIMELINE = "deepseek_v3_events_dualpipe"
FIGURES = {"bubble_vs_microbatches": bubble_vs_microbatches, "sweep_ep": sweep_ep, "sweep_tp": sweep_tp,
           "sweep_topology": sweep_topology, "sweep_comm_sms": sweep_comm_sms, "sweep_faults": sweep_faults,
           "deepseek_v3_links": link_utilization, "validation": validation_figure, "jobs": jobs_figure,
           "nccl_curves": nccl_curves, TIMELINE: lambda df, out: timeline(df, out, "deepseek_v3_dualpipe")}
FIGURE_SOURCES = tuple(FIGURES)     # the CSVs (without .csv) whose figures this script draws


def add_arguments(parser) -> None:
    parser.add_argument("--results", default="results", help="folder of the CSVs; figures go to its figures/")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--only", nargs="+", metavar="CSV", choices=FIGURE_SOURCES,
                       help="draw only the figures of these CSVs (names without .csv)")
    which.add_argument("--skip", nargs="+", metavar="CSV", choices=FIGURE_SOURCES,
                       help="draw every figure but those of these CSVs")


def main(argv=None) -> int:
    return script_main(__doc__, add_arguments, run, argv)


def run(args) -> int:
    res = Path(args.results)
    figs = res / "figures"
    wanted = set(args.only or FIGURE_SOURCES) - set(args.skip or ())
    for name, fn in FIGURES.items():
        path = res / f"{name}.csv"
        if name not in wanted:
            continue
        if path.exists():
            fn(pd.read_csv(path), figs)
        elif name != TIMELINE:
            print(f"skip {name}.csv: not there (run its experiment first)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
