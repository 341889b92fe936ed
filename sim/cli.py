"""Command line: ``python -m sim COMMAND ...`` (``--help`` on each).

Bad input never shows a traceback: every error names the field, the value and what is allowed,
and the command exits with status 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from .pipeline import compare_frame, parse_costs, simulate_pipeline
from .schedules import SCHEDULE_NAMES, make_schedule, validate
from .textgrid import render

# Other modules add their commands here: name -> (add_arguments, handler).
EXTRA_COMMANDS: dict[str, tuple[str, Callable, Callable]] = {}


class UserError(Exception):
    """An error to show as one clean line."""


def _add_pipeline_args(p: argparse.ArgumentParser, positional_name: bool) -> None:
    if positional_name:
        p.add_argument("name", metavar="NAME", help=f"schedule: {', '.join(SCHEDULE_NAMES)}")
    else:
        p.add_argument("--schedule", required=True, help=f"schedule: {', '.join(SCHEDULE_NAMES)}")
    p.add_argument("--pp", type=int, required=True, help="pipeline ranks P")
    p.add_argument("--microbatches", type=int, required=True, help="micro-batches M per step")
    p.add_argument("--chunks", type=int, default=None, help="model chunks per rank v (interleaved-1f1b only)")


def cmd_schedule(args) -> int:
    sched = validate(make_schedule(args.name, args.pp, args.microbatches, args.chunks))
    if args.json:
        print(json.dumps(sched.to_json()))
        return 0
    run = simulate_pipeline(args.name, args.pp, args.microbatches, args.chunks, check=False)
    print(render(run.result))
    return 0


def cmd_simulate(args) -> int:
    costs = parse_costs(args.cost)
    run = simulate_pipeline(args.schedule, args.pp, args.microbatches, args.chunks, cost_per=args.cost_per,
                            **costs)
    m = run.metrics
    if args.csv:
        from .metrics import events_frame
        from .io import write_csv_atomic
        write_csv_atomic(events_frame(run.result), args.csv)
    if args.plot:
        from .plots import plot_timeline
        plot_timeline(run.result, args.plot)
    if args.trace:
        from .trace import write_chrome_trace
        write_chrome_trace(run.result, args.trace)
    if args.json:
        out = {"makespan": m.makespan, "bubble_fraction": m.bubble_fraction,
               "ranks": [{"rank": r.rank, "busy": r.busy, "idle": r.idle, "utilization": r.utilization,
                          "peak_activations": r.peak_activations} for r in m.ranks]}
        print(json.dumps(out))
        return 0
    print(f"{m.schedule}: P={m.pp}, M={m.microbatches}, costs F={costs['F']:g} I={costs['I']:g} W={costs['W']:g}")
    print(f"makespan {m.makespan:g}, bubble fraction {m.bubble_fraction:.4f}")
    print(m.ranks_frame().to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.csv:
        print(f"events written to {args.csv}")
    if args.plot:
        print(f"timeline written to {args.plot}")
    return 0


def cmd_compare(args) -> int:
    df = compare_frame(args.pp, args.microbatches, args.chunks, parse_costs(args.cost))
    if args.json:
        print(df.to_json(orient="records"))
    else:
        print(f"P={args.pp}, M={args.microbatches} (interleaved v={args.chunks}); costs are per rank's 1/P "
              "share of the model; peak activations per rank in micro-batches of one 1F1B stage")
        print(df.fillna("").to_string(index=False))
    if args.csv:
        from .io import write_csv_atomic
        write_csv_atomic(df, args.csv)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("schedule", help="print a schedule as a rank x time grid or as JSON")
    _add_pipeline_args(p, positional_name=True)
    p.add_argument("--json", action="store_true", help="print the per-rank op lists as JSON")
    p.set_defaults(func=cmd_schedule)

    p = sub.add_parser("simulate", help="simulate a schedule with fixed op costs (no communication)")
    _add_pipeline_args(p, positional_name=False)
    p.add_argument("--cost", default="F=1,I=1,W=1", help="op costs, e.g. F=1,I=1,W=1 (B = I+W)")
    p.add_argument("--cost-per", choices=("stage", "rank"), default="stage",
                   help="costs of one stage (default) or of one rank's 1/P share of the model")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    p.add_argument("--csv", help="write the op events (rank, kind, mb, stage, start, end) to this CSV")
    p.add_argument("--plot", help="write a timeline PNG to this path")
    p.add_argument("--trace", help="write a Chrome/Perfetto trace (JSON) to this path")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("compare", help="every schedule side by side")
    p.add_argument("--pp", type=int, required=True, help="pipeline ranks P")
    p.add_argument("--microbatches", type=int, required=True, help="micro-batches M")
    p.add_argument("--chunks", type=int, default=2, help="v for interleaved-1f1b (default 2)")
    p.add_argument("--cost", default="F=1,I=1,W=1", help="op costs, e.g. F=1,I=1,W=1")
    p.add_argument("--json", action="store_true", help="print the table as JSON records")
    p.add_argument("--csv", help="also write the table to this CSV")
    p.set_defaults(func=cmd_compare)

    for name, (help_text, add_args, handler) in EXTRA_COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        add_args(p)
        p.set_defaults(func=handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    _load_extra_commands()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except (UserError, ValueError, KeyError, FileNotFoundError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {msg}", file=sys.stderr)
        return 2


def _load_extra_commands() -> None:
    """Import the modules that register more commands."""
    import importlib
    for mod in EXTRA_COMMAND_MODULES:
        importlib.import_module(mod)


EXTRA_COMMAND_MODULES = ("sim.network.cli", "sim.moe.cli", "sim.plan")
