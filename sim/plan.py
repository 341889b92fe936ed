"""``python -m sim plan``: search PP, EP, schedule and micro-batch count within HBM, rank by
simulated step time, and say why the winner wins.

Candidates: every PP in ``--pp`` that divides the GPUs (DP = GPUs / PP) and every EP in ``--ep``
that divides DP, the model's routed experts and fits whole nodes; M = global batch / DP
sequences of ``--microbatch-size``. Each candidate's memory is checked first (no simulation); the
ones that fit HBM are simulated (a sweep: local Dask cluster or ``--scheduler``; rows in
``--out``) and ranked by step time.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .cli import EXTRA_COMMANDS

SCHEDULES = ("1f1b", "zb-h1", "dualpipe", "dualpipev")


def _run_spec(p: dict):
    from .moe.specs import RunSpec
    return RunSpec(model=p["model"], gpu=p["gpu"], topology=p["topology"], pp=int(p["pp"]), ep=int(p["ep"]),
                   dp=int(p["dp"]), schedule=p["schedule"], microbatches=int(p["microbatches"]),
                   seq_len=int(p["seq_len"]), microbatch_size=int(p["microbatch_size"]),
                   gemm_precision=p["gemm_precision"], node_limit=int(p["node_limit"]) or None,
                   activation_factor=float(p["activation_factor"]))


def evaluate(p: dict) -> dict:
    """Simulate one candidate (a sweep point)."""
    from .moe.step import simulate_step
    res = simulate_step(_run_spec(p))
    step = res.step_time_s
    return {"step_time_s": step, "tokens_per_s": res.tokens_per_s, "mfu": res.mfu,
            "bubble_share": sum(max(0.0, r.bubble_s) for r in res.ranks) / (len(res.ranks) * step),
            "exposed_comm_share": sum(r.exposed_comm_s for r in res.ranks) / (len(res.ranks) * step),
            "max_memory_gb": max(r.memory.total_gb for r in res.ranks)}


def candidates(args) -> tuple[list[dict], list[dict]]:
    """(points that fit HBM, rows of refused or non-fitting candidates with the reason)."""
    from .moe.specs import load_gpu, load_model
    from .moe.step import MoEStep
    model, gpu = load_model(args.model), load_gpu(args.gpu)
    ok, refused = [], []
    for pp in args.pp:
        if args.gpus % pp:
            continue
        dp = args.gpus // pp
        if args.global_batch % (dp * args.microbatch_size):
            refused.append({"pp": pp, "reason": f"global batch {args.global_batch} not divisible by DP {dp}"})
            continue
        M = args.global_batch // (dp * args.microbatch_size)
        for ep in (args.ep if model.is_moe else [1]):
            for schedule in args.schedules:
                p = {"pp": pp, "ep": ep, "dp": dp, "schedule": schedule, "microbatches": M, "model": args.model,
                     "gpu": args.gpu, "topology": args.topology, "seq_len": args.seq_len,
                     "microbatch_size": args.microbatch_size, "gemm_precision": args.gemm_precision,
                     "node_limit": args.node_limit or 0, "activation_factor": args.activation_factor}
                try:
                    mem = max(m.total_gb for m in MoEStep(_run_spec(p)).memory)
                except ValueError as exc:
                    refused.append({"pp": pp, "ep": ep, "schedule": schedule, "reason": str(exc)})
                    continue
                if mem > gpu.hbm_gb:
                    refused.append({"pp": pp, "ep": ep, "schedule": schedule, "memory_gb": round(mem, 1),
                                    "reason": f"needs {mem:.1f} GB > {gpu.hbm_gb:g} GB HBM"})
                else:
                    ok.append(p)
    return ok, refused


def cmd_plan(args) -> int:
    from .sweep import run_sweep
    ok, refused = candidates(args)
    if not ok:
        print(f"No candidate fits {args.gpu}'s HBM. Closest ({len(refused)} refused):")
        df = pd.DataFrame(refused)
        if "memory_gb" in df:
            df = df.sort_values("memory_gb", na_position="last")
        print(df.head(args.top).to_string(index=False))
        print("Memory model: README 'The MoE training step'; --activation-factor changes the activation bytes "
              "per token per hidden unit per layer (34 = no recomputation).")
        return 1
    out = Path(args.out)
    df = run_sweep(evaluate, ok, out, scheduler="serial" if args.serial else args.scheduler,
                   progress=not args.json, desc="plan")
    df = df[df["status"] == "ok"].sort_values("step_time_s").reset_index(drop=True)
    if args.json:
        print(json.dumps({"recommendation": df.iloc[0].to_dict() if len(df) else None,
                          "candidates": df.head(args.top).to_dict("records"), "refused": refused}, default=str))
        return 0
    cols = ["schedule", "pp", "ep", "dp", "microbatches", "step_time_s", "tokens_per_s", "mfu", "bubble_share",
            "exposed_comm_share", "max_memory_gb"]
    print(df[cols].head(args.top).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    best = df.iloc[0]
    print(f"\nRecommendation: {best['schedule']} with PP{best['pp']} x DP{best['dp']}, EP{best['ep']}, "
          f"{best['microbatches']} micro-batches: {best['step_time_s']:.4g} s per step, "
          f"{best['tokens_per_s'] / 1e6:.2f}M tokens/s.")
    print(f"Why: bubble {100 * best['bubble_share']:.1f}% of rank-time, exposed all-to-all "
          f"{100 * best['exposed_comm_share']:.1f}%, peak memory {best['max_memory_gb']:.1f} GB of HBM.")
    if len(df) > 1:
        second = df.iloc[1]
        print(f"Next: {second['schedule']} PP{second['pp']} EP{second['ep']} at {second['step_time_s']:.4g} s "
              f"(bubble {100 * second['bubble_share']:.1f}%, exposed {100 * second['exposed_comm_share']:.1f}%).")
    if refused:
        print(f"{len(refused)} candidates refused (memory or layout); see --json.")
    return 0


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None


def add_arguments(p) -> None:
    p.add_argument("--gpus", type=int, required=True, help="GPUs to plan for")
    p.add_argument("--model", required=True, help="model preset")
    p.add_argument("--topology", required=True, help="topology preset or YAML")
    p.add_argument("--gpu", default="h800", help="GPU preset (default h800)")
    p.add_argument("--global-batch", type=int, default=15360, help="sequences per step (default 15360)")
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--microbatch-size", type=int, default=1)
    p.add_argument("--pp", type=_ints, default=[8, 16], help="PP sizes to try (default 8,16)")
    p.add_argument("--ep", type=_ints, default=[8, 16, 32, 64], help="EP sizes to try (default 8,16,32,64)")
    p.add_argument("--schedules", type=lambda s: s.split(","), default=list(SCHEDULES))
    p.add_argument("--gemm-precision", default="fp8", choices=("fp8", "bf16"))
    p.add_argument("--node-limit", type=int, default=4)
    p.add_argument("--activation-factor", type=float, default=34.0,
                   help="activation bytes per token per hidden unit per layer (34: no recomputation)")
    p.add_argument("--top", type=int, default=8, help="rows to show")
    p.add_argument("--out", default="results/plan.csv", help="CSV of the simulated candidates (resumable)")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address (default: local cluster)")
    p.add_argument("--serial", action="store_true", help="no Dask")
    p.add_argument("--json", action="store_true")


EXTRA_COMMANDS["plan"] = ("search PP, EP, schedule and micro-batches within HBM", add_arguments, cmd_plan)
