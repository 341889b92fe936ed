"""The DeepSeek-V3 case study: 2,048 H800, PP16, EP64 over 8 nodes, about 120 micro-batches per
pipeline, under 1f1b, zb-h1, dualpipe and dualpipev (representative pipeline, balanced routing).

Writes ``results/deepseek_v3_summary.csv`` (one row per schedule), ``results/deepseek_v3_ranks.csv``
(per rank: compute, exposed communication, bubble, utilization, memory),
``results/deepseek_v3_link_timeline.csv`` (the step fabric's 16 busiest links per time bin) and
figures under ``results/figures/``: ``deepseek_v3_ranks.png``, ``deepseek_v3_fb_unit_<schedule>.png``
and ``deepseek_v3_link_timeline.png``."""
from __future__ import annotations

from experiments.common import script_main
from sim.io import check_output
from sim.training.model.specs import load_scenario
from sim.training.reports.report import comparison_text, planned_outputs, write_outputs
from sim.training.scenario import Scenario
from sim.training.step import COMPARED_SCHEDULES, simulate_schedules


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="results")
    parser.add_argument("--trace", default=None, help="also write a Chrome trace of the DualPipe run")


def main(argv=None, keep=None) -> int:
    """The script; ``keep(results)``, if given, receives the four steps (``make run`` hands them to
    the lesson check, which would otherwise simulate them again)."""
    return script_main(__doc__, add_arguments, lambda args: run(args, keep), argv)


def run(args, keep=None) -> int:
    for path in planned_outputs("deepseek_v3", args.out, list(COMPARED_SCHEDULES)) + \
            ([args.trace] if args.trace else []):
        check_output(path)
    scenario = Scenario(load_scenario("deepseek-v3"))
    results = simulate_schedules(scenario, list(COMPARED_SCHEDULES), progress=True, link_timeline=True)
    if keep is not None:
        keep(results)
    write_outputs(results, "deepseek_v3", args.out, title="deepseek-v3")
    if args.trace:
        from sim.trace import write_chrome_trace
        write_chrome_trace(next(r for r in results if r.run.schedule == "dualpipe"), args.trace)
    print(comparison_text(results))
    print(f"wrote {args.out}/deepseek_v3_summary.csv, deepseek_v3_ranks.csv and figures")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
