"""``python -m sim plan``: search PP, EP, schedule and micro-batch count within HBM, rank by
simulated step time, and say why the winner wins (the search itself: :mod:`sim.planner`)."""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from ..checks import arg
from ..moe.specs import COMPARED_SCHEDULES, GEMM_PRECISIONS, MEMORY_POLICIES, gpu_names
from ..planner import PlanRequest


def cmd_plan(args) -> int:
    import pandas as pd

    from ..io import check_output, json_text, overwriting
    from ..planner import candidates, evaluate
    from ..sweep import run_sweep
    req = PlanRequest(gpus=args.gpus, model=args.model, topology=args.topology, gpu=args.gpu,
                      global_batch=args.global_batch, seq_len=args.seq_len, microbatch_size=args.microbatch_size,
                      pps=tuple(args.pp), eps=tuple(args.ep), schedules=tuple(args.schedules),
                      gemm_precision=args.gemm_precision, node_limit=args.node_limit,
                      memory_policy=args.memory_policy, zero_stage=args.zero_stage, head_cuts=tuple(args.head_cuts))
    with overwriting(args.force):
        check_output(args.out)                      # before the search, not after it
    ok, refused = candidates(req)
    if not ok and args.json:
        print(json_text({"recommendation": None, "candidates": [], "refused": refused}))
        return 1
    if not ok:
        print(f"No candidate can run on {args.gpus} {args.gpu} GPUs ({len(refused)} refused); the closest:")
        df = pd.DataFrame(refused)
        if "memory_gb" in df:
            df = df.sort_values("memory_gb", na_position="last")
        print(df.head(args.top).to_string(index=False))
        print("Memory model: README 'Memory'; --memory-policy (none, selective, full, deepseek-v3) and "
              "--zero-stage (0-3) change what each GPU keeps.")
        return 1
    with overwriting(args.force):
        df = run_sweep(evaluate, ok, Path(args.out), scheduler="serial" if args.serial else args.scheduler,
                       progress=not args.json, desc="plan")
    failed = df[df["status"] != "ok"]
    df = df[df["status"] == "ok"].sort_values("step_time_s").reset_index(drop=True)
    if args.json:
        print(json_text({"recommendation": df.iloc[0].to_dict() if len(df) else None,
                         "candidates": df.head(args.top).to_dict("records"), "refused": refused,
                         "failed": failed.to_dict("records")}))
        return 0 if len(df) else 1
    if df.empty:
        print(f"None of the {len(failed)} candidates that fit in memory could be simulated; the first error: "
              f"{failed['error'].iloc[0]} (every row: {args.out})")
        return 1
    cols = ["schedule", "pp", "ep", "dp", "microbatches", "last_stage_layers", "step_time_s", "tokens_per_s", "mfu",
            "bubble_share", "exposed_comm_share", "compute_spread", "busiest_rank", "bound", "max_memory_gb",
            "min_headroom_gb"]
    print(df[cols].head(args.top).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print("last_stage_layers: 0 = the even split; compute_spread: (most - least) / most of the ranks' compute; "
          "bound: the largest loss besides compute")
    best = df.iloc[0]
    split = "even layer split" if not best["last_stage_layers"] else \
        f"{best['last_stage_layers']} layers on the stage with the heads and MTP"
    print(f"\nRecommendation: {best['schedule']} with PP{best['pp']} x DP{best['dp']}, EP{best['ep']}, "
          f"{best['microbatches']} micro-batches, {split}: {best['step_time_s']:.4g} s per step, "
          f"{best['tokens_per_s'] / 1e6:.2f}M tokens/s.")
    print(f"Why: bubble {100 * best['bubble_share']:.1f}% of rank-time, exposed all-to-all "
          f"{100 * best['exposed_comm_share']:.1f}%, ranks' compute spread {100 * best['compute_spread']:.0f}% "
          f"(rank {best['busiest_rank']} the busiest); "
          f"bound by {best['bound']}; peak memory {best['max_memory_gb']:.1f} GB "
          f"({best['min_headroom_gb']:.1f} GB of headroom).")
    if len(df) > 1:
        second = df.iloc[1]
        print(f"Next: {second['schedule']} PP{second['pp']} EP{second['ep']} at {second['step_time_s']:.4g} s "
              f"(bubble {100 * second['bubble_share']:.1f}%, exposed {100 * second['exposed_comm_share']:.1f}%).")
    if refused:
        print(f"{len(refused)} candidates refused (memory or layout); see --json.")
    from ..moe.specs import load_model
    for phrase in load_model(args.model).not_costed:
        print(f"not costed: {phrase}")
    return 0


def _ints(low: int):
    """An argparse type: comma-separated integers >= ``low``."""
    import argparse

    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
        if not values or min(values) < low or max(values) > 100_000_000:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers in [{low}, 100,000,000], got {text!r}")
        return values
    parse.__name__ = "integers"
    return parse


def _names(text: str) -> list[str]:
    import argparse

    from ..schedules import SCHEDULE_NAMES
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [n for n in names if n not in SCHEDULE_NAMES]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"unknown schedule(s) {', '.join(bad) or repr(text)}; valid: "
                                         f"{', '.join(SCHEDULE_NAMES)}")
    return names


def add_arguments(p) -> None:
    d = {f.name: f.default for f in fields(PlanRequest)}
    count = arg(integer=True, low=1, high=100_000_000)
    p.add_argument("--gpus", type=count, required=True, help="GPUs to plan for")
    p.add_argument("--model", required=True, help="model: a preset (python -m sim run --help lists them), a Hugging "
                                                   "Face config.json, or a YAML file of ModelSpec fields")
    p.add_argument("--topology", required=True, help="topology preset or YAML")
    p.add_argument("--gpu", default=d["gpu"], help=f"GPU preset ({', '.join(gpu_names())}) or a YAML file of GPUSpec "
                                                   f"fields (default {d['gpu']})")
    p.add_argument("--global-batch", type=count, default=d["global_batch"],
                   help=f"sequences per step (default {d['global_batch']})")
    p.add_argument("--seq-len", type=count, default=d["seq_len"])
    p.add_argument("--microbatch-size", type=count, default=d["microbatch_size"])
    p.add_argument("--pp", type=_ints(1), default=list(d["pps"]), help="PP sizes to try (default 8,16)")
    p.add_argument("--ep", type=_ints(1), default=list(d["eps"]), help="EP sizes to try (default 8,16,32,64)")
    p.add_argument("--schedules", type=_names, default=list(COMPARED_SCHEDULES))
    p.add_argument("--gemm-precision", default=d["gemm_precision"], choices=GEMM_PRECISIONS,
                   help=f"precision of the GEMMs (mxfp8 needs a Blackwell GPU; default {d['gemm_precision']})")
    p.add_argument("--node-limit", type=arg(integer=True, low=0, high=100_000), default=d["node_limit"],
                   help="max nodes per token (0 = no limit)")
    p.add_argument("--memory-policy", default=d["memory_policy"], choices=MEMORY_POLICIES,
                   help=f"what layers store and recompute (default {d['memory_policy']})")
    p.add_argument("--zero-stage", type=int, default=d["zero_stage"], choices=(0, 1, 2, 3),
                   help=f"ZeRO stage (default {d['zero_stage']})")
    p.add_argument("--head-cuts", type=_ints(0), default=list(d["head_cuts"]),
                   help="layer splits to try: fewer layers than the even split on the stage with the heads and "
                        "MTP (default 0,1)")
    p.add_argument("--top", type=count, default=8, help="rows to show")
    p.add_argument("--out", default="results/plan.csv", help="CSV of the simulated candidates (resumable)")
    p.add_argument("--force", action="store_true", help="replace --out even if it is not a plan this tool wrote")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address (default: local cluster)")
    p.add_argument("--serial", action="store_true", help="no Dask")
    p.add_argument("--json", action="store_true")


COMMANDS = {"plan": ("search PP, EP, schedule and micro-batches within HBM", add_arguments, cmd_plan)}
