"""The results page of one ``python -m sim run --out DIR``: ``DIR/index.html``, read from the CSVs
and figures the run wrote beside it (never from memory), so that what the page says is what the
files hold.

It opens with the conclusion (:func:`conclusion`: the fastest schedule, its step time, its speed-up
over the slowest, what does not fit HBM, what could not run and why), then the recipe, a summary
table with named columns and units, and each figure once, with a caption computed from the same CSV
(:func:`captions`): a caption never claims what its figure does not show; last, the kernels of a
layer of each kind (``<stem>_kernels.csv``, :mod:`sim.training.costs.kernel_report`).
"""
from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from ...io import truthy, write_text_atomic
from ..costs.kernel_report import kernel_tables_html
from ..trust import band_from_columns

STYLE = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
         "table{border-collapse:collapse;font-size:13px;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;"
         "padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}"
         "img{width:100%;border:1px solid #ddd}figure{margin:1em 0 2em}figcaption{font-size:14px;color:#444}"
         ".conclusion{font-size:17px;background:#f6f8fa;padding:.6em 1em;border-left:4px solid #3182bd}")

# summary CSV column -> (heading with its unit, scale, decimals; "g": four significant digits)
SUMMARY_COLUMNS = {"schedule": ("Schedule", None, None), "step_time_s": ("Step time (s)", 1, "g"),
                   "tokens_per_s": ("Throughput (M tokens/s)", 1e-6, "g"), "mfu": ("MFU (of the GEMM peak)", 1, 3),
                   "bubble_share": ("Bubble (% of rank-time)", 100, 1),
                   "exposed_comm_share": ("Exposed communication (% of step)", 100, 1),
                   "mean_tp_comm_s": ("TP collectives (s per rank)", 1, "g"),
                   "mean_cp_comm_s": ("CP rings, unhidden (s per rank)", 1, "g"),
                   "mean_peer_wait_s": ("Waiting for peers at collectives (s per GPU)", 1, "g"),
                   "max_memory_gb": ("Peak memory (GB)", 1, 1), "fits_hbm": ("Fits HBM", None, None)}

OPTIONAL_COLUMNS = ("mean_tp_comm_s", "mean_cp_comm_s", "mean_peer_wait_s")      # shown only when a run has some


def conclusion(summary: pd.DataFrame, hbm_gb: float | None = None, skipped: dict | None = None) -> str:
    """One or two sentences from a run's summary CSV: the fastest schedule and its step time (a run of
    one schedule: that schedule, not called the fastest), its speed-up over the slowest (step time slowest / fastest), which schedules do not fit HBM, which
    could not run."""
    df = summary.sort_values("step_time_s", kind="stable")
    best, worst = df.iloc[0], df.iloc[-1]
    text = (f"{best['schedule']}{' is the fastest' if len(df) > 1 else ''}: {best['step_time_s']:.4g} s per step "
            f"({best['tokens_per_s'] / 1e6:.3g}M tokens/s, MFU {best['mfu']:.2f})")
    if len(df) > 1:
        text += (f", a speed-up of {worst['step_time_s'] / best['step_time_s']:.2f}x over the slowest, "
                 f"{worst['schedule']} ({worst['step_time_s']:.4g} s)")
    text += "."
    unfit = df[~truthy(df["fits_hbm"])]
    if len(unfit):
        limit = f" > {hbm_gb:g} GB HBM" if hbm_gb else " beyond HBM"
        text += " Does not fit: " + ", ".join(f"{r['schedule']} (peak {r['max_memory_gb']:.1f} GB{limit})"
                                             for _, r in unfit.iterrows()) + "."
    if skipped:
        text += " Not run: " + "; ".join(f"{k} ({v})" for k, v in skipped.items()) + "."
    return text


def summary_table(summary: pd.DataFrame) -> str:
    """The summary as an HTML table: named columns with units, rounded numbers, fastest first."""
    df = summary.sort_values("step_time_s", kind="stable")
    cols = [c for c in SUMMARY_COLUMNS if c in df.columns and (c not in OPTIONAL_COLUMNS or df[c].fillna(0).any())]
    head = "".join(f"<th>{html.escape(SUMMARY_COLUMNS[c][0])}</th>" for c in cols)
    rows = []
    for _, r in df.iterrows():
        cells = []
        for c in cols:
            _, scale, decimals = SUMMARY_COLUMNS[c]
            v = r[c]
            if scale is None:
                cells.append(html.escape(str(v)))
            else:
                cells.append(f"{float(v) * scale:.4g}" if decimals == "g" else f"{float(v) * scale:,.{decimals}f}")
        rows.append("<tr>" + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def captions(stem: str, summary: pd.DataFrame, ranks: pd.DataFrame | None, communication: str) -> dict[str, str]:
    """Figure file -> its caption, each claim computed from the CSVs."""
    out = {}
    if ranks is not None and len(ranks):
        busy = ranks.assign(busy=ranks["compute_s"] + ranks.get("recompute_s", 0.0))
        parts = []
        for name, g in busy.groupby("schedule", sort=False):
            top = g.loc[g["busy"].idxmax()]
            parts.append(f"{name}: rank {int(top['rank'])} computes most ({top['busy']:.3g} s)")
        out[f"{stem}_ranks.png"] = ("Where each rank's step goes, stacked seconds per schedule (compute, "
                                    "recompute, exposed all-to-all, pipeline transfer, DP sync, optimizer, bubble); "
                                    + "; ".join(parts) + ".")
    for name in summary["schedule"]:
        out[f"{stem}_fb_unit_{name}.png"] = (f"{name}: one forward-and-backward unit of a middle rank, its compute "
                                             "stream above its communication stream (milliseconds).")
    if communication == "live":
        out[f"{stem}_link_timeline.png"] = ("The step fabric's busiest links over the step, per schedule: pipeline "
                                            "sends, data-parallel traffic and every all-to-all (live communication).")
    else:
        out[f"{stem}_link_timeline.png"] = ("The step fabric's busiest links over the step, per schedule: pipeline "
                                            "sends and data-parallel traffic only. The all-to-alls were measured "
                                            "apart (communication: measured) and are not on this fabric; "
                                            "--communication live puts them here.")
    return out


def build_run_page(folder: Path, stem: str, title: str, recipe_line: str = "", hbm_gb: float | None = None,
                   skipped: dict | None = None) -> str:
    """The HTML of a run's page, from ``<stem>_summary.csv``, ``<stem>_ranks.csv`` and ``figures/``."""
    summary = pd.read_csv(folder / f"{stem}_summary.csv")
    ranks_csv = folder / f"{stem}_ranks.csv"
    ranks = pd.read_csv(ranks_csv) if ranks_csv.is_file() else None
    communication = str(summary["communication"].iloc[0]) if "communication" in summary else "measured"
    body = [f'<p class="conclusion">{html.escape(conclusion(summary, hbm_gb, skipped))}</p>']
    band = band_from_columns(summary.iloc[0].to_dict()) if len(summary) else None
    if band is not None:
        body.append(f"<p><b>How far to trust it:</b> {html.escape(band.line())}. Compare schedules and layouts "
                    "with it; read the step time against that band.</p>")
    if recipe_line:
        body.append(f"<p>{html.escape(recipe_line)}</p>")
    body.append(summary_table(summary))
    body.append(f'<p>Every number: <a href="{stem}_summary.csv">{stem}_summary.csv</a> (a row per schedule), '
                f'<a href="{stem}_ranks.csv">{stem}_ranks.csv</a> (a row per schedule and rank).</p>')
    kernels_csv = folder / f"{stem}_kernels.csv"
    kernels = kernel_tables_html(pd.read_csv(kernels_csv, keep_default_na=False)) if kernels_csv.is_file() else ""
    for name, caption in captions(stem, summary, ranks, communication).items():
        if (folder / "figures" / name).is_file():
            src = html.escape(f"figures/{name}")
            body.append(f'<figure><img src="{src}" alt="{html.escape(name)}">'
                        f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    body.append(kernels)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>{''.join(body)}</body></html>\n")


def write_run_page(folder: str | Path, stem: str, title: str, recipe_line: str = "", hbm_gb: float | None = None,
                   skipped: dict | None = None) -> Path:
    """Write ``folder/index.html`` (atomically) for the run whose CSVs are there."""
    folder = Path(folder)
    return write_text_atomic(build_run_page(folder, stem, title, recipe_line, hbm_gb, skipped), folder / "index.html")


__all__ = ["SUMMARY_COLUMNS", "build_run_page", "captions", "conclusion", "summary_table", "write_run_page"]
