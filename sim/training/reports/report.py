"""Tables, text, pictures and files of step results: the comparison table, per-rank CSV, the F&B
unit's two streams, stacked per-rank time (compute / exposed communication / bubble)."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ...io import shown, write_csv_atomic  # noqa: E402
from ...metrics import events_frame  # noqa: E402
from ...plots import FIGURE_WIDTH_IN, save_figure  # noqa: E402
from ..costs.kernel_report import summary_lines  # noqa: E402
from ..model.recipe import recipe_line, recipe_warnings  # noqa: E402
from ..runner import PartEvent  # noqa: E402
from ..step import TIME_COLUMNS, StepResult  # noqa: E402

PART_COLORS = {"F": "#6baed6", "B": "#74c476", "W": "#bdbdbd", "R": "#c7e9c0", "HEAD": "#9e9ac8", "EMBED": "#9e9ac8"}
TABLE_COLUMNS = ["schedule", "step_time_s", "tokens_per_s", "mfu", "exposed_comm_s", "comm_hidden_fraction",
                 "mean_utilization", "max_memory_gb", "fits_hbm"]


def ranks_frame(res: StepResult) -> pd.DataFrame:
    df = pd.DataFrame([r.to_json() for r in res.ranks])
    df.insert(0, "schedule", res.run.schedule)
    return df


def summary_frame(results: list[StepResult]) -> pd.DataFrame:
    return pd.DataFrame([r.summary() for r in results])


def breakdown_frame(results: list[StepResult]) -> pd.DataFrame:
    """Per schedule, the step time and its parts, each the mean over ranks (seconds)."""
    rows = [{"schedule": r.run.schedule, "step_time_s": r.step_time_s,
             **{c: r.mean_per_rank(c) for c in TIME_COLUMNS}} for r in results]
    return pd.DataFrame(rows)


def model_sources(run) -> str:
    """One line: which parts of the model are calibrated from measurements and which are
    first-principles defaults (compute: a profile CSV, the kernel model fitted to its declared tables,
    or the FLOPs model; communication kernels: a calibrated preset or the defaults,
    :mod:`sim.training.comm.kernels`)."""
    from ..comm.kernels import load_kernels
    from ..model.specs import load_model
    if run.profile:
        compute = f"compute: measured profile {run.profile}"
    elif run.compute_model == "kernels":
        compute = ("compute: kernel model fitted to " + (run.compute_kernels or "the declared kernel tables "
                   "(python -m sim calibrate --kernels)"))
    else:
        compute = "compute: FLOPs model (first-principles defaults)"
    not_costed = load_model(run.model).not_costed
    return (f"model sources: {compute}; {load_kernels(run.kernels).provenance()}" +
            "".join(f"\nnot costed: {phrase}" for phrase in not_costed))


def _number(v: float) -> str:
    return f"{shown(v):.4g}"


def model_parallel_lines(results: list[StepResult]) -> list[str]:
    """One line per schedule with TP or CP: the seconds per rank of its TP collectives and of the
    CP rings' unhidden rest (mean over ranks; inside the exposed communication)."""
    out = []
    for r in results:
        if r.run.tp * r.run.cp > 1:
            tp = sum(k.tp_comm_s for k in r.ranks) / len(r.ranks)
            cp = sum(k.cp_comm_s for k in r.ranks) / len(r.ranks)
            out.append(f"{r.run.schedule}: TP collectives {tp:.3f} s, CP key/value rings (what attention did not "
                       f"hide) {cp:.3f} s per rank (on the compute path in plain ops, beside the other chunk's "
                       "compute in F&B units)")
    return out


def trust_line(band) -> str:
    """``trust: like 5 published runs (...): ...`` (:mod:`sim.training.trust`), or what is missing."""
    if band is None:
        return "trust: no validated published run is like this one (its GPU generation is not in the suite)"
    return f"trust: {band.line()}; see docs/validation.md"


def beside_comm_lines(results: list[StepResult]) -> list[str]:
    """What a communication kernel took from the compute that ran beside it (SMs, HBM bandwidth)
    and how much longer that compute ran, per schedule whose traced rank had any: one line, or
    none when no compute part ran beside one."""
    stretched = {r.run.schedule: [e.stretch for e in r.part_trace if e.stretch > 1.0] for r in results}
    stretched = {name: s for name, s in stretched.items() if s}
    if not stretched:
        return []
    held, sms, share = results[0].beside_comm
    each = ", ".join(f"{name} {min(s):.3f}-{max(s):.3f}x" for name, s in stretched.items())
    return [f"beside a communication kernel: compute on {sms - held} of {sms} SMs and {100 * (1 - share):.0f}% of "
            f"the HBM bandwidth (its copies take {100 * share:.0f}%); those parts ran longer than alone: {each}"]


def peer_wait_lines(results: list[StepResult]) -> list[str]:
    """How long the GPUs waited at their collectives for the group's last GPU to launch them (a
    slow or overloaded peer: :mod:`sim.training.costs.streams`, rule 3), per schedule of an MoE run:
    the median and most per GPU per step and their share of the communication time; in
    representative mode, where that wait went instead."""
    first = results[0]
    if first.run.ep <= 1:
        return []
    if first.mode != "full":
        return ["waiting for peers at the all-to-alls: not separated in representative mode (one GPU stands for its "
                "EP group and starts each op when the group's last input has arrived); --mode full shows it"]
    out = []
    for r in results:
        spreads = [(x.rank, x.replica_peer_wait, x.replica_comm) for x in r.ranks if x.replica_peer_wait is not None]
        rank, most, _ = max(spreads, key=lambda s: s[1].max_s)
        comm = sum(c.median_s for _, _, c in spreads)
        share = r.peer_wait_s * len(r.ranks) / comm if comm > 0 else 0.0
        out.append(f"{r.run.schedule}: waiting for peers at collectives (launch to the group's last launch) "
                   f"{r.peer_wait_s:.3g} s per GPU per step ({100 * share:.0f}% of its communication time; median "
                   f"replica, mean over ranks), most {most.max_s:.3g} s (rank {rank}, replica {most.max_replica})")
    return out


def comparison_text(results: list[StepResult]) -> str:
    """What ``python -m sim run`` prints: the chunk ratio, a table of the schedules, how much of
    its all-to-all time each hides against 1F1B, utilization per rank and memory warnings."""
    base = next((r for r in results if r.run.schedule == "1f1b"), None)
    first = results[0]
    lines = [f"{recipe_line(first.recipe)} ({first.mode} mode)",
             trust_line(first.trust),
             *(f"warning: {w}" for w in recipe_warnings(first.recipe)),
             *([f"chunk computation : communication = {first.compute_comm_ratio:.2f} : 1 (derived: forward chunk of a "
                f"MoE stage vs its dispatch {first.a2a_dispatch_s * 1e3:.2f} ms + combine "
                f"{first.a2a_combine_s * 1e3:.2f} ms per layer)"] if math.isfinite(first.compute_comm_ratio) else []),
             *model_parallel_lines(results),
             *beside_comm_lines(results),
             *peer_wait_lines(results),
             *(summary_lines(first.kernels) if first.kernels is not None and len(first.kernels) else []),
             *([("live communication: every all-to-all ran on the step's fabric among the other traffic; "
                 "time live / alone: " + ", ".join(f"{r.run.schedule} {r.a2a_slowdown:.3f}x" for r in results))]
               if first.run.communication == "live" else []),
             model_sources(first.run),
             *([f"faults: {first.run.faults.describe()}"] if first.run.faults is not None and first.run.faults.any
               else []),
             summary_frame(results)[TABLE_COLUMNS].to_string(index=False, float_format=_number),
             "where the step goes (seconds, mean over ranks; the columns add up to the step time):",
             breakdown_frame(results).to_string(index=False, float_format=lambda v: f"{v:.3f}")]
    for r in results:
        if r.fault_free_s is not None:
            lines.append(f"{r.run.schedule}: the faults cost {r.step_time_s - r.fault_free_s:+.4g} s "
                         f"({100 * (r.step_time_s / r.fault_free_s - 1):+.2f}%) against the same run without them "
                         f"({r.fault_free_s:.6g} s, every rank simulated)")
    for r in results:
        if base is not None and r is not base:
            lines.append(f"{r.run.schedule}: hides {shown(100 * r.comm_hidden_fraction):.0f}% of its all-to-all time "
                         f"(1f1b: {shown(100 * base.comm_hidden_fraction):.0f}%); exposed {r.exposed_comm_s:.2f} s vs "
                         f"{base.exposed_comm_s:.2f} s per rank per step")
    lines.append("per rank: utilization (%); memory GB (headroom GB) against "
                 f"{first.hbm_gb:g} GB HBM, {first.run.memory_policy} memory policy, ZeRO-{first.run.zero_stage}")
    for r in results:
        util = " ".join(f"{100 * x.utilization:.0f}" for x in r.ranks)
        lines.append(f"{r.run.schedule:>10} utilization per rank (%): {util}")
        mem = " ".join(f"{x.memory.total_gb:.1f}({x.memory.headroom_gb:+.1f})" for x in r.ranks)
        lines.append(f"{'':>10} memory per rank: {mem}")
        lines.extend(f"{'':>10} warning: {w}" for w in r.recipe_warnings if w.startswith("MFU"))
        lines.extend(f"{'':>10} warning: {w}" for w in r.warnings[:2])
        if len(r.warnings) > 2:
            lines.append(f"{'':>10} ... and {len(r.warnings) - 2} more ranks do not fit")
        if r.mode == "full" and r.run.faults is not None and r.run.faults.any:
            spread = " ".join(f"{x.replica_compute.median_s:.4g}/{x.replica_compute.max_s:.4g}"
                              f"(r{x.replica_compute.max_replica})" for x in r.ranks if x.replica_compute)
            lines.append(f"{'':>10} compute per replica, median/max s (slowest replica): {spread}")
            waits = " ".join(f"{x.replica_comm.min_s:.4g}/{x.replica_comm.max_s:.4g}" for x in r.ranks if x.replica_comm)
            lines.append(f"{'':>10} all-to-all incl. barrier waits per replica, min/max s: {waits}")
        if r.late_send_s > 0:
            lines.append(f"{'':>10} note: lockstep started some pipeline sends up to {r.late_send_s * 1e6:.3g} us "
                         "late (ops without all-to-all; docs/model.md, 'Modes')")
    return "\n".join(lines)


def fb_unit_trace(res: StepResult) -> list[PartEvent]:
    """The part events of one overlapped F&B unit of the traced (middle) rank, mid-step."""
    seqs = sorted({e.seq for e in res.part_trace if e.fb})
    if not seqs:
        return []
    seq = seqs[len(seqs) // 2]
    return [e for e in res.part_trace if e.seq == seq]


def plot_fb_unit(res: StepResult, path: str | Path) -> Path | None:
    """Figure 4 of the DeepSeek-V3 report, simulated: one F&B unit's compute and communication
    streams, parts labelled, forward blue, backward (input gradient) green, recomputation light
    green, weight gradient grey."""
    parts = fb_unit_trace(res)
    if not parts:
        return None
    t0 = min(p.start for p in parts)
    t1 = max(p.end for p in parts)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 2.8))
    for e in parts:
        name = e.name
        kind = next((k for k in ("HEAD", "EMBED") if name.startswith(k)), None) or \
            next((k for k in ("W", "F", "R") if f"({k})" in name), "B")
        color = PART_COLORS[kind] if e.stream == 0 else {"F": "#fd8d3c", "B": "#e6550d"}.get(kind, "#fdae6b")
        y = 1 if e.stream == 0 else 0
        ax.broken_barh([((e.start - t0) * 1e3, (e.end - e.start) * 1e3)], (y + 0.1, 0.8), facecolors=color,
                       edgecolor="white")
        # a label only where it fits in its bar (7 pt text, about 4.2 pt a character, on ~750 pt of axis)
        if (e.end - e.start) / (t1 - t0) * 750 > 4.2 * len(name) + 4:
            ax.text(((e.start + e.end) / 2 - t0) * 1e3, y + 0.5, name, ha="center", va="center", fontsize=7)
    ax.set_yticks([0.5, 1.5], ["communication", "compute"])
    ax.set_xlabel("ms since the unit started")
    ax.set_title(f"{res.run.schedule}: one F&B unit on rank {res.traced_rank} ({parts[0].op}), simulated streams\n"
                 "compute: blue F, green B, light green R(ecompute), grey W; communication: light F, dark B", fontsize=9)
    return save_figure(fig, path)


BREAKDOWN_COLORS = {"compute_s": ("compute", "#3182bd"), "recompute_s": ("recompute", "#9ecae1"),
                    "exposed_comm_s": ("exposed communication", "#e6550d"), "exposed_pp_s": ("pipeline transfer", "#fdae6b"),
                    "dp_sync_s": ("DP sync", "#31a354"), "optimizer_s": ("optimizer", "#a1d99b"),
                    "bubble_s": ("bubble", "#d9d9d9")}


def alike_links(timeline: pd.DataFrame, links: list[str]) -> list[list[str]]:
    """``links`` grouped by their utilization over time (one schedule's ``timeline`` rows): links
    whose series are equal form one group, in the order of their first member."""
    groups: dict[tuple, list[str]] = {}
    for link in links:
        h = timeline[timeline["link"] == link]
        key = (tuple(h["time_s"].round(9)), tuple(h["utilization"].round(6)))
        groups.setdefault(key, []).append(link)
    return list(groups.values())


def plot_link_timeline(timeline: pd.DataFrame, path: str | Path, title: str = "", k: int = 6) -> Path:
    """Utilization over the step of the ``k`` busiest links (by mean utilization), one panel per
    schedule; ``timeline``: the columns of ``*_link_timeline.csv`` (schedule, time_s, link, kind,
    utilization)."""
    names = list(dict.fromkeys(timeline["schedule"]))
    fig, axes = plt.subplots(len(names), 1, figsize=(FIGURE_WIDTH_IN, 2.2 * len(names)), sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        g = timeline[timeline["schedule"] == name]
        top = g.groupby("link", sort=False)["utilization"].mean().sort_values(ascending=False, kind="stable").index[:k]
        for links in alike_links(g, list(top)):         # links whose lines would lie on each other: one line
            h = g[g["link"] == links[0]]
            more = f" and {len(links) - 1} more alike" if len(links) > 1 else ""
            ax.step(h["time_s"], h["utilization"], where="post", lw=0.9, label=f"{links[0]} ({h['kind'].iloc[0]}){more}")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("utilization")
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))     # outside the data
    axes[-1][0].set_xlabel("time in the step (s)")
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def plot_rank_breakdown(ranks: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Per-rank stacked bars (seconds per step) of the columns that add up to the step time:
    compute, recompute, exposed all-to-all, pipeline transfer, DP sync, optimizer, bubble; one panel
    per schedule. ``ranks``: the columns of :func:`ranks_frame`, e.g. read back from ``*_ranks.csv``
    (columns it lacks count as zero)."""
    names = list(dict.fromkeys(ranks["schedule"]))
    fig, axes = plt.subplots(1, len(names), figsize=(FIGURE_WIDTH_IN, 3.8), sharey=True, squeeze=False)
    for ax, name in zip(axes[0], names):
        g = ranks[ranks["schedule"] == name]
        bottom = pd.Series(0.0, index=g.index)
        for column, (label, color) in BREAKDOWN_COLORS.items():
            values = g[column].clip(lower=0.0) if column in g else pd.Series(0.0, index=g.index)
            ax.bar(g["rank"], values, bottom=bottom, color=color, label=label)
            bottom = bottom + values
        ax.set_title(f"{name}: {bottom.max():.2f} s/step", fontsize=9)
        ax.set_xlabel("rank")
    axes[0][0].set_ylabel("seconds per step")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))      # outside the bars
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def planned_outputs(stem: str, folder: str | Path, schedules: list[str]) -> list[Path]:
    """Every file :func:`write_outputs` writes for these schedules (to check them before a run)."""
    folder = Path(folder)
    files = [folder / f"{stem}_summary.csv", folder / f"{stem}_ranks.csv", folder / f"{stem}_links.csv",
             folder / f"{stem}_kernels.csv",
             folder / f"{stem}_link_timeline.csv", folder / "figures" / f"{stem}_ranks.png",
             folder / "figures" / f"{stem}_link_timeline.png"]
    for name in schedules:
        files += [folder / "figures" / f"{stem}_fb_unit_{name}.png", folder / f"{stem}_events_{name}.csv"]
    return files


def write_outputs(results: list[StepResult], stem: str, folder: str | Path, title: str) -> None:
    """Under ``folder``: ``<stem>_summary.csv`` (a row per schedule), ``<stem>_ranks.csv`` (a row per
    schedule and rank), ``<stem>_kernels.csv`` (every kernel of a layer of each kind, the kernel model), ``<stem>_events_<schedule>.csv`` (op events of pipeline 0),
    ``<stem>_links.csv`` (link statistics of the measured all-to-alls), ``<stem>_link_timeline.csv``
    (the step fabric's busiest links per time bin, per schedule, when recorded) and under
    ``figures/`` the per-rank breakdown, one F&B unit per schedule and the busiest links over time."""
    folder = Path(folder)
    write_csv_atomic(summary_frame(results), folder / f"{stem}_summary.csv")
    ranks = pd.concat([ranks_frame(r) for r in results])
    write_csv_atomic(ranks, folder / f"{stem}_ranks.csv")
    if results[0].kernels is not None and len(results[0].kernels):
        write_csv_atomic(results[0].kernels, folder / f"{stem}_kernels.csv")
    plot_rank_breakdown(ranks, folder / "figures" / f"{stem}_ranks.png", title=f"{title}: per-rank time per step")
    for r in results:
        plot_fb_unit(r, folder / "figures" / f"{stem}_fb_unit_{r.run.schedule}.png")
        write_csv_atomic(events_frame(r.engine), folder / f"{stem}_events_{r.run.schedule}.csv")
    links = [df.assign(shape=shape) for shape, df in results[-1].link_stats.items()]
    if links:
        write_csv_atomic(pd.concat(links), folder / f"{stem}_links.csv")
    timelines = [r.link_timeline.assign(schedule=r.run.schedule) for r in results if r.link_timeline is not None]
    if timelines:
        timeline = pd.concat(timelines, ignore_index=True)
        write_csv_atomic(timeline[["schedule", *timelines[0].columns[:-1]]], folder / f"{stem}_link_timeline.csv")
    if timelines and not timeline.empty:             # one GPU, no EP, PP or DP: no link carried anything
        plot_link_timeline(timeline, folder / "figures" / f"{stem}_link_timeline.png",
                           title=f"{title}: busiest links of the step fabric")
