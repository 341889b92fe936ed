"""``python -m sim schedule | simulate | compare``: schedules as grids or JSON, one schedule with fixed
op costs (no communication), every schedule side by side."""
from __future__ import annotations

import argparse

from ..checks import InputError, arg
from ..pipeline import compare_frame, parse_costs, simulate_pipeline, simulate_schedule
from ..schedules import SCHEDULE_NAMES, Schedule
from ..textgrid import render

COUNT = arg(integer=True, low=1, high=100_000_000)


def _add_pipeline_args(p: argparse.ArgumentParser, positional_name: bool) -> None:
    if positional_name:
        p.add_argument("name", metavar="NAME", help=f"schedule: {', '.join(SCHEDULE_NAMES)}")
        required = True
    else:
        p.add_argument("--schedule", required=True,
                       help=f"schedule: {', '.join(SCHEDULE_NAMES)}, or a JSON file in the format of "
                            "`schedule --json` (your own schedule; --pp and --microbatches then come from it)")
        required = False
    p.add_argument("--pp", type=COUNT, required=required, help="pipeline ranks P")
    p.add_argument("--microbatches", type=COUNT, required=required, help="micro-batches M per step")
    p.add_argument("--chunks", type=COUNT, default=None, help="model chunks per rank v (interleaved-1f1b, combined-1f1b)")
    p.add_argument("--microbatch-group-size-per-vp-stage", dest="group", type=COUNT, default=None, metavar="G",
                   help="interleaved-1f1b, combined-1f1b: micro-batches each model chunk takes at a time, P to M "
                        "(Megatron-Core's; default P)")
    p.add_argument("--memory-limit", type=arg(low=1, high=1e9), default=None, metavar="N",
                   help="zb-auto only: activation memory limit, in micro-batches of one stage's forward activations "
                        "(zb-1p is P, zb-2p is 2P)")


def cmd_schedule(args) -> int:
    run = simulate_pipeline(args.name, args.pp, args.microbatches, args.chunks, memory_limit=args.memory_limit,
                            group=args.group)
    if args.json:
        from ..io import json_text
        print(json_text(run.schedule.to_json()))
        return 0
    print(render(run.result))
    return 0


def cmd_simulate(args) -> int:
    from ..io import overwriting
    with overwriting(args.force):
        return _simulate(args)


def _simulate(args) -> int:
    from ..io import check_output, json_text
    costs = parse_costs(args.cost)
    for path in (args.csv, args.plot, args.trace):
        if path:
            check_output(path)                      # before the run, not after it
    if args.schedule.endswith(".json"):
        sched = Schedule.from_file(args.schedule)
        for flag, given, own in (("--pp", args.pp, sched.pp),
                                 ("--microbatches", args.microbatches, sched.microbatches)):
            if given is not None and given != own:
                raise InputError(f"{flag} {given} differs from the schedule file's {own}; leave it out")
        run = simulate_schedule(sched, cost_per=args.cost_per, **costs)
    else:
        for flag, given in (("--pp", args.pp), ("--microbatches", args.microbatches)):
            if given is None:
                raise InputError(f"simulate needs {flag} with a named schedule")
        run = simulate_pipeline(args.schedule, args.pp, args.microbatches, args.chunks, cost_per=args.cost_per,
                                memory_limit=args.memory_limit, group=args.group, **costs)
    m = run.metrics
    if args.csv:
        from ..io import write_csv_atomic
        from ..metrics import events_frame
        write_csv_atomic(events_frame(run.result), args.csv)
    if args.plot:
        from ..plots import plot_timeline
        plot_timeline(run.result, args.plot)
    if args.trace:
        from ..trace import write_chrome_trace
        write_chrome_trace(run.result, args.trace)
    if args.json:
        out = {"makespan": m.makespan, "bubble_fraction": m.bubble_fraction,
               "ranks": [{"rank": r.rank, "busy": r.busy, "idle": r.idle, "utilization": r.utilization,
                          "peak_activations": r.peak_activations} for r in m.ranks]}
        print(json_text(out))
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
    from ..io import check_output, json_text, overwriting
    if args.csv:
        with overwriting(args.force):
            check_output(args.csv)
    df = compare_frame(args.pp, args.microbatches, args.chunks, parse_costs(args.cost))
    if args.json:
        print(json_text(df.to_dict("records")))
    else:
        print(f"P={args.pp}, M={args.microbatches} (interleaved v={args.chunks}); costs are per rank's 1/P "
              "share of the model; peak activations per rank in micro-batches of one 1F1B stage")
        print(df.astype(object).where(df.notna(), "").to_string(index=False))
    if args.csv:
        from ..io import write_csv_atomic
        with overwriting(args.force):
            write_csv_atomic(df, args.csv)
    return 0


def _schedule_arguments(p) -> None:
    _add_pipeline_args(p, positional_name=True)
    p.add_argument("--json", action="store_true", help="print the per-rank op lists as JSON")


def _simulate_arguments(p) -> None:
    _add_pipeline_args(p, positional_name=False)
    p.add_argument("--cost", default="F=1,I=1,W=1", help="op costs, e.g. F=1,I=1,W=1 (B = I+W)")
    p.add_argument("--cost-per", choices=("stage", "rank"), default="stage",
                   help="costs of one stage (default) or of one rank's 1/P share of the model")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    p.add_argument("--csv", help="write the op events (rank, kind, mb, stage, start, end) to this CSV")
    p.add_argument("--plot", help="write a timeline PNG to this path")
    p.add_argument("--trace", help="write a Chrome/Perfetto trace (JSON) to this path")
    p.add_argument("--force", action="store_true", help="replace these files even if this tool did not write them")


def _compare_arguments(p) -> None:
    p.add_argument("--pp", type=COUNT, required=True, help="pipeline ranks P")
    p.add_argument("--microbatches", type=COUNT, required=True, help="micro-batches M")
    p.add_argument("--chunks", type=arg(integer=True, low=2, high=1_000), default=2,
                   help="v for interleaved-1f1b (default 2)")
    p.add_argument("--cost", default="F=1,I=1,W=1", help="op costs, e.g. F=1,I=1,W=1")
    p.add_argument("--json", action="store_true", help="print the table as JSON records")
    p.add_argument("--csv", help="also write the table to this CSV")
    p.add_argument("--force", action="store_true", help="replace --csv even if this tool did not write it")


COMMANDS = {
    "schedule": ("print a schedule as a rank x time grid or as JSON", _schedule_arguments, cmd_schedule),
    "simulate": ("simulate a schedule with fixed op costs (no communication)", _simulate_arguments, cmd_simulate),
    "compare": ("every schedule side by side", _compare_arguments, cmd_compare),
}
