"""One results page, ``results/index.html``, from the CSVs and figures under ``results/`` only.

Self-contained: plain HTML with its style inline and the figures beside it (``figures/*.png``,
linked relatively), so it opens from disk in any browser, no server needed. Sections appear for the
CSVs and figures that exist: the validation suite, the DeepSeek-V3 summary, per-rank utilization and memory, timelines,
the F&B unit, the schedule comparison, the lesson check, two jobs sharing a cluster and every sweep. Each figure has one
sentence saying what to look at.
"""
from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from experiments.common import script_main
from sim.io import write_text_atomic

STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 6px;
text-align:right;vertical-align:top}th{background:#f3f3f3}td.text{text-align:left;max-width:520px}
td.note{max-width:360px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
details{margin:.5em 0 1.5em}summary{cursor:pointer}figure{margin:1em 0 2em}img{max-width:100%;border:1px solid #ddd}figcaption{font-size:14px;color:#444}
nav a{margin-right:1em}.conclusion{font-size:17px;background:#f6f8fa;padding:.6em 1em;border-left:4px solid #3182bd}
.verdict-holds{color:#176117}.verdict-does{color:#a11}.verdict-only{color:#8a5a00}"""

# (section id, title, [(figure file, what to look at)], [(csv file, columns or None, what it is[, FOLD])]):
# each section's figures first, then its tables; a table marked FOLD sits behind a fold (<details>).
FOLD = "fold"
SECTIONS = [
    ("validation", "How far to trust it: published measured runs against the simulator",
     [("validation.png", "Left: every scored run, simulated against measured in its source's own figure, with the "
                         "+-10% and +-25% bands. Right: each run's speed error by source; points right of 0 are runs "
                         "the simulator predicts faster than they ran.")],
     [("validation_summary.csv", ["source", "mode", "rows", "median_abs_error_pct", "worst_abs_error_pct",
                                  "median_error_pct", "within_10pct", "within_25pct"],
       "median and worst |speed error| per source and mode (speed error = predicted / measured speed - 1)"),
      ("validation_rankings.csv", ["model", "gpus", "global_batch", "table", "measured_order",
                                   "first_principles_order", "first_principles_same_order", "profile_fed_same_order"],
       "settings measured under several schedules: the measured and simulated order, fastest first", FOLD),
      ("validation_pairs.csv", ["group", "faster", "slower", "kind", "measured_gap_pct", "tie",
                                "first_principles_gap_pct", "first_principles_same_order"],
       "every pair of runs of one job under two schedules or layouts: the measured and the simulated gap", FOLD),
      ("validation.csv", ["id", "role", "metric", "measured", "predicted_first_principles",
                          "error_first_principles_pct", "predicted_profile_fed", "error_profile_fed_pct", "note"],
       "every run of the suite (sources and layouts in the CSV)", FOLD)]),
    ("deepseek", "DeepSeek-V3 on 2,048 H800 (PP16 x DP128, EP64, 120 micro-batches)",
     [("deepseek_v3_ranks.png", "Per rank and schedule: where the step goes (stacked seconds: compute, recompute, "
                                "exposed all-to-all, pipeline transfer, DP sync, optimizer, bubble). Memory per rank "
                                "is in deepseek_v3_ranks.csv.")],
     [("deepseek_v3_summary.csv", ["schedule", "step_time_s", "tokens_per_s", "mfu", "mean_utilization",
                                   "bubble_share", "exposed_comm_share", "comm_hidden_fraction", "max_memory_gb",
                                   "fits_hbm", "bound"], "one step per schedule")]),
    ("timelines", "Timelines",
     [("timeline_deepseek_v3_dualpipe.png", "One DeepSeek-V3 step under DualPipe, every rank: the diagonal fill "
                                            "and drain are the bubble; the dense middle is F&B units."),
      ("timeline_1f1b_p8_m16.png", "1F1B at P=8, M=16 with equal costs: the idle triangles at both ends are its "
                                   "(P-1)(F+B) bubble."),
      ("timeline_zb-h1_p8_m16.png", "ZB-H1: weight gradients (W) fill the cool-down triangle."),
      ("timeline_dualpipe_p8_m16.png", "DualPipe: two directions fed from both ends; the overlapped F&B units in "
                                       "the middle."),
      ("timeline_dualpipev_p8_m16.png", "DualPipeV: the V placement, one parameter copy, the same kind of units."),
      ("timeline_zbv_p8_m16.png", "ZB-V: the V placement with split backwards."),
      ("timeline_interleaved-1f1b_p8_m16.png", "Interleaved 1F1B: v=2 chunks per rank shrink the bubble by v."),
      ("timeline_chimera_p8_m16.png", "Chimera: two pipelines in opposite directions, no F&B overlap."),
      ("timeline_gpipe_p8_m16.png", "GPipe: all forwards, then all backwards; the largest activation peak."),
      ("timeline_zb-h2_p8_m16.png", "ZB-H2: more warm-up forwards buy a parallelogram with no inner bubble.")],
     []),
    ("fb", "The F&B unit",
     [("deepseek_v3_fb_unit_dualpipe.png", "One overlapped unit of a middle rank: each all-to-all of one "
                                           "direction runs while the other direction computes."),
      ("deepseek_v3_fb_unit_dualpipev.png", "The same unit under DualPipeV.")],
     []),
    ("network", "Network",
     [("link_utilization.png", "The ten busiest links of the dispatch (orange) and the ten of the combine (blue), "
                               "every EP group of a stage at once, by mean utilization while the all-to-all runs."),
      ("nccl_curves.png", "NCCL's all-reduce, all-gather and reduce-scatter alone on the H100 cluster, nccl-tests' "
                          "bus bandwidth against size per GPU count (lines), and XLA's measured collectives on one "
                          "H100 node (x): where the model's curve flattens below the crosses, it is too slow.")],
     [("deepseek_v3_links.csv", None, "link statistics of the measured all-to-alls (the busiest first)"),
      ("nccl_curves.csv", ["topology", "kind", "gpus", "bytes", "seconds", "busbw_gbps", "measured_s", "error_pct"],
       "NCCL collectives alone, 8 B to 8 GiB, 2 to 1,024 GPUs (experiments/nccl_curves.py)", FOLD)]),
    ("comparison", "Schedules side by side (P=8, M=16, no communication)",
     [("utilization_p8_m16.png", "Per-rank utilization of every schedule at P=8, M=16 with equal op costs.")],
     [("schedule_comparison.csv", ["schedule", "makespan", "bubble_fraction", "mean_utilization",
                                   "parameter_copies", "note"], "every schedule at the same model size")]),
    ("lesson", "The DualPipe lesson's claims, checked",
     [], [("lesson_check.csv", ["id", "claim", "verdict", "explanation", "figures"], "claims L1-L15 and the "
                                                                                     "exercises")]),
    ("jobs", "Two jobs on one cluster",
     [("jobs.png", "Each job's mean step alone and beside the other, packed and interleaved (the title gives the "
                   "cluster, the steps and B's arrival): the percentage is what sharing the network cost it.")],
     [("jobs.csv", ["policy", "job", "placement", "arrive_s", "steps_shared", "alone_s", "shared_s", "slowdown_pct",
                    "exposed_comm_alone_s", "exposed_comm_shared_s", "end_s"],
       "per placement and job: mean step alone and shared (s), slowdown (%), arrival and end (s)"),
      ("jobs_shared_links.csv", None, "per placement, the links both jobs loaded, the busiest first", FOLD)]),
    ("sweeps", "Sweeps",
     [("bubble_vs_microbatches.png", "Bubble fraction against micro-batches M at P=8 and 16, equal op costs, no "
                                     "communication: every schedule's bubble falls as M grows."),
      ("sweep_ep.png", "Step time and exposed all-to-all against EP size (hollow points do not fit HBM; EP "
                       "sizes the layout refuses are named in the title)."),
      ("sweep_tp.png", "Step time and exposed TP collectives against TP size for a dense model at fixed GPUs "
                       "and batch, one line per PP (hollow points do not fit HBM)."),
      ("sweep_topology.png", "Step time across network variants: which fabric changes move the step."),
      ("sweep_faults.png", "Step time under kernel jitter, one slow GPU and link faults: which schedule absorbs "
                           "stragglers."),
      ("sweep_comm_sms.png", "Step time against the SMs given to the all-to-all kernels: communication speed vs "
                             "compute stretch."),
      ("benchmark_scaling.png", "Simulator wall time against GPUs and ops: how the cost grows.")],
     [("sweep_ep.csv", ["schedule", "ep", "step_time_s", "exposed_comm_share", "status"], "EP sweep"),
      ("sweep_tp.csv", ["tp", "pp", "dp", "step_time_s", "mean_tp_comm_s", "fits_hbm", "status"], "TP x PP sweep"),
      ("sweep_topology.csv", None, "topology sweep"),
      ("sweep_faults.csv", ["schedule", "fault", "fault_size", "step_time_s", "status"], "fault sweep"),
      ("sweep_comm_sms.csv", ["schedule", "comm_sms", "step_time_s", "a2a_dispatch_ms", "status"], "SM sweep"),
      ("benchmark.csv", None, "simulator speed")]),
]


MAX_ROWS = 30


def _table(df: pd.DataFrame, columns: list[str] | None) -> str:
    """An HTML table of ``columns`` (all if None), the first :data:`MAX_ROWS` rows (the busiest
    first where a ``mean_util`` column exists); the CSV link above it has every row."""
    if columns:
        df = df[[c for c in columns if c in df.columns]]
    if "mean_util" in df.columns:
        df = df.sort_values("mean_util", ascending=False)
    more = len(df) - MAX_ROWS
    df = df.head(MAX_ROWS)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = []
    for _, row in df.iterrows():
        cells = []
        for c, v in row.items():
            if isinstance(v, float):
                text, cls = ("" if pd.isna(v) else f"{v:.4g}"), ""
            else:
                text, cls = str(v), ' class="text"'
            if c == "verdict":
                kind = "holds" if text == "holds" else ("only" if "only" in text else "does")
                cls = f' class="text verdict-{kind}"'
            if c == "note":                     # one line; the whole note on hover and in the CSV
                cls = f' class="text note" title="{html.escape(text)}"'
            cells.append(f"<td{cls}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f"<p>... and {more} more rows in the CSV.</p>" if more > 0 else ""
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{note}"


def headline(results: Path) -> str:
    """The page's conclusion, from the CSVs: the DeepSeek-V3 step's fastest schedule and speed-up
    (:func:`sim.training.reports.runpage.conclusion`) and the validation suite's median error per mode."""
    from sim.training.reports.runpage import conclusion
    out = []
    summary = results / "deepseek_v3_summary.csv"
    if summary.is_file() and summary.stat().st_size > 0:
        out.append("DeepSeek-V3 on 2,048 H800 (PP16 x DP128, EP64): " + conclusion(pd.read_csv(summary), 80))
    validation = results / "validation_summary.csv"
    if validation.is_file() and validation.stat().st_size > 0:
        df = pd.read_csv(validation)
        rows = df[df["source"] == "all sources"]
        if len(rows):
            out.append("Against published measured runs, the median speed error is " + ", ".join(
                f"{r['median_abs_error_pct']:.1f}% {r['mode'].replace('_', '-')} ({int(r['rows'])} runs)"
                for _, r in rows.iterrows()) + ".")
    return " ".join(out)


def build_page(results: Path) -> str:
    """The page's HTML for what exists under ``results``."""
    parts, nav = [], []
    lead = headline(results)
    if lead:
        parts.append(f'<p class="conclusion">{html.escape(lead)}</p>')
    for sid, title, figures, tables in SECTIONS:
        body = []
        for name, caption in figures:
            if (results / "figures" / name).is_file():
                src = html.escape(f"figures/{name}")
                body.append(f'<figure><a href="{src}"><img src="{src}" alt="{html.escape(name)}"></a>'
                            f"<figcaption>{html.escape(caption)}</figcaption></figure>")
        for name, columns, what, *fold in tables:
            path = results / name
            if path.is_file() and path.stat().st_size > 0:
                df = pd.read_csv(path)
                link = f'<a href="{html.escape(name)}">{html.escape(name)}</a>: {html.escape(what)}'
                if fold:
                    body.append(f"<details><summary>{link} ({len(df)} rows)</summary>{_table(df, columns)}</details>")
                else:
                    body.append(f"<p>{link}</p>" + _table(df, columns))
        if body:
            nav.append(f'<a href="#{sid}">{html.escape(title.split(" (")[0])}</a>')
            parts.append(f'<section id="{sid}"><h2>{html.escape(title)}</h2>{"".join(body)}</section>')
    listed = {name for _, _, figures, _ in SECTIONS for name, _ in figures}
    others = sorted(p.name for p in (results / "figures").glob("*.png") if p.name not in listed) \
        if (results / "figures").is_dir() else []
    if others:
        nav.append('<a href="#other">Other figures</a>')
        parts.append('<section id="other"><h2>Other figures</h2>' + "".join(
            f'<figure><a href="figures/{html.escape(n)}"><img src="figures/{html.escape(n)}" alt="{html.escape(n)}">'
            f"</a><figcaption>{html.escape(n)}</figcaption></figure>" for n in others) + "</section>")
    if not parts:
        parts.append("<p>No results yet: run <code>make run</code>.</p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>moe-pipesim results</title>"
            f"<style>{STYLE}</style></head><body><h1>moe-pipesim results</h1>"
            "<p>Generated from the CSVs and figures in this folder by <code>python -m experiments.results_page"
            "</code>; columns and units: " + ('<a href="README.md">README.md</a>' if (results / "README.md").is_file()
                                         else "the project's results/README.md") + ".</p>"
            f"<nav>{''.join(nav)}</nav>{''.join(parts)}</body></html>\n")


def add_arguments(parser) -> None:
    parser.add_argument("--results", default="results", help="folder with the CSVs and figures/ (default results)")


def run(args) -> int:
    path = write_text_atomic(build_page(Path(args.results)), Path(args.results) / "index.html")
    print(f"wrote {path}")
    return 0


def main(argv=None) -> int:
    return script_main(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
