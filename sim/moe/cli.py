"""``python -m sim run SCENARIO [--schedule NAME] [--json] [--out DIR]``: one training step.

Without ``--schedule`` the scenario runs under 1f1b, zb-h1, dualpipe and dualpipev and prints
them side by side (``--json``: the scenario's own schedule, with the others under
``comparison``); with ``--out`` it writes ``<name>_summary.csv``, ``<name>_ranks.csv``,
``<name>_events_<schedule>.csv`` (op events of pipeline 0), ``<name>_links.csv`` (link statistics
of the measured all-to-alls) and figures (per-rank breakdown, one F&B unit's two streams) there.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from ..cli import EXTRA_COMMANDS
from ..io import write_csv_atomic
from ..metrics import events_frame
from .report import plot_fb_unit, plot_rank_breakdown, ranks_frame, summary_row
from .specs import load_scenario
from .step import MODES, simulate_schedules

DEFAULT_SCHEDULES = ("1f1b", "zb-h1", "dualpipe", "dualpipev")


def run_scenario(scenario: str, schedules, overrides: dict, mode: str = "auto", scope: str = "stage",
                 out: str | None = None, trace: str | None = None, workers: int = 1) -> list:
    runs = [load_scenario(scenario, **{**overrides, "schedule": name}) for name in schedules]
    results = simulate_schedules(runs, mode, scope, progress=True, workers=workers)
    if out:
        stem = Path(scenario).stem.replace("-", "_")
        folder = Path(out)
        write_csv_atomic(pd.DataFrame([summary_row(r) for r in results]), folder / f"{stem}_summary.csv")
        write_csv_atomic(pd.concat([ranks_frame(r) for r in results]), folder / f"{stem}_ranks.csv")
        plot_rank_breakdown(results, folder / "figures" / f"{stem}_ranks.png",
                            title=f"{scenario}: per-rank time per step")
        for r in results:
            plot_fb_unit(r, folder / "figures" / f"{stem}_fb_unit_{r.run.schedule}.png")
            write_csv_atomic(events_frame(r.engine), folder / f"{stem}_events_{r.run.schedule}.csv")
        links = [df.assign(shape=shape) for shape, df in results[-1].link_stats.items()]
        if links:
            write_csv_atomic(pd.concat(links), folder / f"{stem}_links.csv")
    if trace:
        from ..trace import write_chrome_trace
        write_chrome_trace(results[-1], trace)
    return results


def _print(results) -> None:
    base = next((r for r in results if r.run.schedule == "1f1b"), None)
    first = results[0]
    print(f"{first.run.description or first.run.model} ({first.mode} mode)")
    print(f"chunk computation : communication = {first.compute_comm_ratio:.2f} : 1 (derived: forward chunk of a "
          f"MoE stage vs its dispatch {first.a2a_dispatch_s * 1e3:.2f} ms + combine {first.a2a_combine_s * 1e3:.2f} ms "
          "per layer)")
    rows = pd.DataFrame([summary_row(r) for r in results])
    cols = ["schedule", "step_time_s", "tokens_per_s", "mfu", "exposed_comm_s", "comm_hidden_fraction",
            "mean_utilization", "max_memory_gb", "fits_hbm"]
    print(rows[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for r in results:
        if base is not None and r is not base:
            print(f"{r.run.schedule}: hides {100 * r.comm_hidden_fraction:.0f}% of its all-to-all time "
                  f"(1f1b: {100 * base.comm_hidden_fraction:.0f}%); exposed {r.exposed_comm_s:.2f} s vs "
                  f"{base.exposed_comm_s:.2f} s per rank per step")
    for r in results:
        util = " ".join(f"{100 * x.utilization:.0f}" for x in r.ranks)
        print(f"{r.run.schedule:>10} utilization per rank (%): {util}")
        for w in r.warnings[:2]:
            print(f"{'':>10} warning: {w}")
        if len(r.warnings) > 2:
            print(f"{'':>10} ... and {len(r.warnings) - 2} more ranks do not fit")
        if r.late_send_s > 0:
            print(f"{'':>10} note: lockstep started some pipeline sends up to {r.late_send_s * 1e6:.3g} us late "
                  "(ops without all-to-all; README, 'Modes')")


def cmd_run(args) -> int:
    overrides = {"microbatches": args.microbatches, "routing_skew": args.skew, "routing_seed": args.seed,
                 "topology": args.topology, "ep": args.ep, "pp": args.pp, "dp": args.dp}
    schedules = [args.schedule] if args.schedule else list(DEFAULT_SCHEDULES)
    own = load_scenario(args.scenario, **overrides).schedule
    if not args.schedule and own not in schedules:
        schedules.append(own)
    results = run_scenario(args.scenario, schedules, overrides, args.mode, args.scope, args.out, args.trace,
                           args.workers)
    if args.json:
        main = next(r for r in results if r.run.schedule == (args.schedule or own))
        out = main.to_json()
        if len(results) > 1:
            out["comparison"] = [{k: v for k, v in r.to_json().items() if k != "ranks"} for r in results]
        print(json.dumps(out))
    else:
        _print(results)
        if args.out:
            print(f"wrote CSV and figures under {args.out}")
    return 0


def add_arguments(p) -> None:
    p.add_argument("scenario", help="scenario preset (deepseek-v3, tiny) or a YAML file of RunSpec fields")
    p.add_argument("--schedule", help="run only this schedule (default: 1f1b, zb-h1, dualpipe, dualpipev)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", help="write CSV and PNG into this folder")
    p.add_argument("--trace", help="write a Chrome/Perfetto trace (JSON) of the last run")
    p.add_argument("--mode", choices=MODES, default="auto", help="representative pipeline or every rank")
    p.add_argument("--scope", choices=("stage", "cluster"), default="stage",
                   help="all-to-all contention measured per stage (default) or with every stage at once")
    p.add_argument("--microbatches", type=int, help="override the scenario's micro-batches")
    p.add_argument("--pp", type=int, help="override pipeline ranks")
    p.add_argument("--ep", type=int, help="override the expert-parallel size")
    p.add_argument("--dp", type=int, help="override data-parallel replicas")
    p.add_argument("--topology", help="override the topology (preset or YAML)")
    p.add_argument("--skew", type=float, help="Zipf exponent of expert popularity (> 0 simulates every rank)")
    p.add_argument("--seed", type=int, help="seed of the skewed routing")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="processes that sample skewed routing and measure skewed all-to-alls (default: one per core)")


EXTRA_COMMANDS["run"] = ("simulate one training step of a scenario", add_arguments, cmd_run)
