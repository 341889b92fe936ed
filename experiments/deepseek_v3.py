"""The DeepSeek-V3 case study: 2,048 H800, PP16, EP64 over 8 nodes, about 120 micro-batches per
pipeline, under 1f1b, zb-h1, dualpipe and dualpipev (representative pipeline, balanced routing).

Writes ``results/deepseek_v3_summary.csv`` (one row per schedule), ``results/deepseek_v3_ranks.csv``
(per rank: compute, exposed communication, bubble, utilization, memory) and figures under
``results/figures/``: ``deepseek_v3_ranks.png`` and ``deepseek_v3_fb_unit_<schedule>.png``."""
from __future__ import annotations

import argparse

from sim.moe.cli import DEFAULT_SCHEDULES, _print, run_scenario


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results")
    parser.add_argument("--trace", default=None, help="also write a Chrome trace of the DualPipe run")
    args = parser.parse_args(argv)
    results = run_scenario("deepseek-v3", DEFAULT_SCHEDULES, {}, out=args.out, trace=args.trace)
    _print(results)
    print(f"wrote {args.out}/deepseek_v3_summary.csv, deepseek_v3_ranks.csv and figures")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
