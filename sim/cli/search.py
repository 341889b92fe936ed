"""``python -m sim search-schedule SCENARIO --memory-limit-gb GB``: search orders better than the
named schedules for one scenario under an HBM limit (the search itself: :mod:`sim.training.search`).

Prints one row per start (the named schedule's step time and memory, the best order's, the gain,
the bound no order of that placement beats) and the best order overall; ``--out DIR`` writes
``search.csv`` and each start's best order as ``search-<start>.json`` (run it again with
``python -m sim run SCENARIO --schedule DIR/search-<start>.json``); ``--json`` prints it all.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..checks import arg


def _starts(text: str) -> tuple[str, ...]:
    from ..schedules import SCHEDULE_NAMES
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    valid = ("zb",) + SCHEDULE_NAMES
    bad = [n for n in names if n not in valid or n in ("zb-auto",)]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"unknown start(s) {', '.join(bad) or repr(text)}; valid: zb (Zero "
                                         f"Bubble's searched order at the limit) or a schedule: "
                                         f"{', '.join(n for n in SCHEDULE_NAMES if n != 'zb-auto')}")
    return names


def cmd_search(args) -> int:
    import pandas as pd

    from ..io import check_output, json_text, overwriting, write_csv_atomic, write_json_atomic
    from ..training.model.specs import load_scenario
    from ..training.scenario import Scenario
    from ..training.search import search_schedules
    out = Path(args.out) if args.out else None
    with overwriting(args.force):
        if out is not None:                          # before the search, not after it
            for path in [out / "search.csv"] + [out / f"search-{s}.json" for s in args.starts]:
                check_output(path)
        overrides = {"model": args.model, "gpu": args.gpu, "microbatches": args.microbatches}
        scenario = Scenario(load_scenario(args.scenario, **overrides))
        limit = args.memory_limit_gb if args.memory_limit_gb is not None else scenario.gpu.hbm_gb
        results = search_schedules(scenario, limit, args.budget, args.seed, args.starts,
                                   progress=None if not args.json else False)
        df = pd.DataFrame([r.row() for r in results])
        if out is not None:
            write_csv_atomic(df, out / "search.csv")
            for r in results:
                write_json_atomic(r.order.to_json(), out / f"search-{r.start}.json")
    best = min(results, key=lambda r: r.best_step_s)
    if args.json:
        print(json_text({"memory_limit_gb": limit, "results": df.to_dict("records"), "best": best.row(),
                         "best_order": best.order.to_json()}))
        return 0
    cols = ["start", "schedule", "named_step_s", "named_memory_gb", "best_step_s", "best_memory_gb", "gain",
            "bound_s", "surrogate_named_s", "moves_kept", "verified", "wall_s"]
    print(f"{args.scenario}: orders searched under {limit:g} GB per GPU, {args.budget:,} moves per start, "
          f"seed {args.seed}")
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.6g}"))
    print("gain: named / best step time; bound_s: no order of that placement and layer split is faster (each "
          "rank's ops back to back); surrogate_named_s: the fast timing the moves are judged by, beside the full "
          "step's named_step_s")
    print(f"best: {best.order.name}: {best.best_step_s:.6g} s per step, {best.best_memory_gb:.1f} GB on the fullest "
          f"GPU ({best.gain:.4f}x {best.schedule}'s {best.named_step_s:.6g} s); searched in "
          f"{sum(r.wall_s for r in results):.0f} s")
    skipped = [s for s in args.starts if s not in {r.start for r in results}]
    if skipped:
        print(f"not searched (even one micro-batch does not fit {limit:g} GB): {', '.join(skipped)}")
    if out is not None:
        print(f"wrote {out / 'search.csv'} and the orders (search-<start>.json: run --schedule FILE)")
    return 0


# The search's defaults, as :mod:`sim.training.search` sets them (a test holds them equal); written out
# here so that building the parser imports no simulator module.
DEFAULT_BUDGET, MAX_BUDGET, STARTS = 10_000, 10_000_000, ("zb", "dualpipe", "dualpipev")


def add_arguments(p) -> None:
    p.add_argument("scenario", help="scenario preset (deepseek-v3, tiny) or a YAML file of RunSpec fields")
    p.add_argument("--memory-limit-gb", type=arg(low=0, low_open=True, high=1e6),
                   help="HBM per GPU an order may use (default: the GPU's)")
    p.add_argument("--budget", type=arg(integer=True, low=1, high=MAX_BUDGET), default=DEFAULT_BUDGET,
                   help=f"moves tried per start (default {DEFAULT_BUDGET:,}: about a minute per start for DeepSeek-V3)")
    p.add_argument("--seed", type=arg(integer=True, low=0, high=2 ** 63 - 1), default=0,
                   help="seed of the moves (same seed, same orders)")
    p.add_argument("--starts", type=_starts, default=STARTS,
                   help=f"named schedules to start from (default {','.join(STARTS)}; zb: Zero Bubble's searched "
                        "order at the limit)")
    count = arg(integer=True, low=1, high=100_000_000)
    p.add_argument("--microbatches", type=count, help="override the scenario's micro-batches")
    p.add_argument("--model", help="override the model: a preset, a Hugging Face config.json or a YAML file")
    p.add_argument("--gpu", help="override the GPU: a preset or a YAML file of GPUSpec fields")
    p.add_argument("--json", action="store_true", help="print the results and the best order as JSON")
    p.add_argument("--out", help="write search.csv and the best orders (search-<start>.json) into this folder")
    p.add_argument("--force", action="store_true", help="replace files in --out this tool did not write")


COMMANDS = {"search-schedule": ("search orders better than the named schedules under an HBM limit",
                                add_arguments, cmd_search)}
