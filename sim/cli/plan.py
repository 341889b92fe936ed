"""``python -m sim plan``: search TP, CP, PP, EP, schedule and micro-batch count within HBM, rank by
simulated step time, and say why the winner wins (the search itself: :mod:`sim.planner`)."""
from __future__ import annotations

import contextlib
from dataclasses import fields
from pathlib import Path

from ..checks import arg
from ..plan_recipes import recipe_text as recipe_of
from ..plan_search import TOP_LAYOUTS
from ..planner import PLAN_SCHEDULES, VIRTUAL_STAGES, PlanRequest
from ..training.model.recipe import idle_warning, layout_label, mfu_warning
from ..training.model.specs import GEMM_PRECISIONS, MEMORY_POLICIES, gpu_names, load_gpu, model_names, spec_label
from ..training.trust import band_from_columns, generation, ranking_agreement

# the recipe's columns in the candidates table, by the short names it prints
RECIPE_COLUMNS = {"microbatch_size": "mbs", "gemm_precision": "gemm", "memory_policy": "recompute", "zero_stage": "zero",
                  "expert_tp": "etp", "tp_comm_overlap": "tp_ovl"}


def cmd_plan(args) -> int:
    import tempfile

    from ..planner import plan_request
    req = plan_request(args.scenario or "", gpus=args.gpus, model=args.model, topology=args.topology, gpu=args.gpu,
                       global_batch=args.global_batch, seq_len=args.seq_len, microbatch_size=args.microbatch_size,
                       pps=tuple(args.pp), eps=tuple(args.ep), tps=tuple(args.tp or ()), cps=tuple(args.cp or ()),
                       sequence_parallel=not args.no_sequence_parallel, schedules=tuple(args.schedules),
                       gemm_precision=args.gemm_precision, node_limit=args.node_limit,
                       memory_policy=args.memory_policy, zero_stage=args.zero_stage, head_cuts=tuple(args.head_cuts),
                       expert_tp=args.expert_tp,
                       tp_comm_overlap=None if args.tp_comm_overlap is None else args.tp_comm_overlap == "on")
    scratch = None
    if args.out is None:                            # nothing written where the command runs unless asked
        scratch = tempfile.TemporaryDirectory(prefix="sim-plan-")
        args.out = str(Path(scratch.name) / "plan.csv")
    try:
        return _plan(args, req)
    finally:
        if scratch is not None:
            scratch.cleanup()


def recipe_text(req: PlanRequest, gpu: str) -> str:
    """What every candidate of a plan shares, and what it searches, in one line."""
    tokens = req.global_batch * req.seq_len

    def fixed(name: str, what: str, text: str) -> str:
        return f"{what} {text}" if getattr(req, name) is not None else f"{what} searched"
    recipe = "; ".join([fixed("microbatch_size", "micro-batch size", str(req.microbatch_size)),
                        fixed("gemm_precision", "GEMMs", str(req.gemm_precision)),
                        fixed("memory_policy", "recomputation", str(req.memory_policy)),
                        fixed("zero_stage", "ZeRO stage", str(req.zero_stage)),
                        fixed("expert_tp", "expert TP", str(req.expert_tp)),
                        fixed("tp_comm_overlap", "TP-communication overlap", "on" if req.tp_comm_overlap else "off")])
    return (f"plan: {spec_label(req.model)} on {req.gpus:,} {spec_label(gpu)} of {spec_label(req.topology)}; "
            f"global batch {req.global_batch:,} sequences x {req.seq_len:,} tokens = {tokens / 1e6:.3g}M tokens; "
            f"{recipe}; node limit {req.node_limit or 'none'}"
            + (f"; the rest from scenario {req.scenario}" if req.scenario else "; the rest: `run`'s defaults"))


def plan_agreement(req: PlanRequest, gpu: str):
    """How often the model ordered published runs of one job as measured, for runs like this plan's
    (:func:`sim.training.trust.ranking_agreement`: its GPU generation and kind of model)."""
    from ..training.model.specs import load_model
    figures = load_gpu(gpu).figures()
    return ranking_agreement(generation(figures.name, figures.family or None), load_model(req.model).is_moe)


def pick_fields(best: dict) -> dict:
    """The pick's :class:`~sim.training.model.specs.RunSpec` fields that are not defaults (a scenario)."""
    from ..planner import run_spec
    from ..training.model.specs import scenario_fields
    return scenario_fields(run_spec(best))


def pick_command(best: dict, path: str | None) -> str:
    """The ``run`` command of a plan's pick: of the scenario file written, else inline."""
    import shlex

    import yaml
    if path:
        return f"python -m sim run {shlex.quote(path)}"
    text = yaml.safe_dump(pick_fields(best), default_flow_style=True, sort_keys=False, width=10 ** 6)
    return f"python -m sim run {shlex.quote(text.strip())}"


def write_scenario(best: dict, path: str, force: bool) -> None:
    """The pick as a scenario file (:func:`pick_fields`, with a description)."""
    import yaml

    from ..io import check_output, overwriting, write_text_atomic
    fields_ = pick_fields(best)
    fields_["description"] = fields_.get("description") or "written by python -m sim plan: its recommendation"
    with overwriting(force):
        write_text_atomic(yaml.safe_dump(fields_, sort_keys=False), check_output(path))


def _plan(args, req: PlanRequest) -> int:
    import pandas as pd

    from topologies import load_topology

    from ..io import check_output, json_text, overwriting, shown
    from ..plan_screen import screen_blocker
    from ..plan_search import search
    from ..planner import candidates, evaluate, gpu_of, run_spec
    from ..sweep import run_sweep
    graph = load_topology(req.topology)
    gpu = gpu_of(req, graph)
    have = len(graph.graph["gpus"])
    idle = idle_warning(req.gpus, have, spec_label(req.topology), what="plan")
    warnings = [idle] if idle else []
    with overwriting(args.force):
        check_output(args.out)                      # before the search, not after it
        check_output(screen_path(args.out))
    ok, refused = candidates(req, graph)
    recipe = recipe_text(req, gpu)
    if not args.json:
        print(recipe)
        for w in warnings:
            print(f"warning: {w}")
    if not ok and args.json:
        print(json_text({"recipe": recipe, "warnings": warnings, "recommendation": None, "candidates": [],
                         "refused": refused}))
        return 1
    if not ok:
        print(f"No candidate can run on {req.gpus} {spec_label(gpu)} GPUs with any recipe tried ({len(refused)} "
              "refused); the closest:")
        df = pd.DataFrame(refused)
        if "memory_gb" in df:
            df = df.sort_values("memory_gb", na_position="last")
            near = df.iloc[0]
            if pd.notna(near["memory_gb"]):
                print(f"Nearest: {near['schedule']} TP{near['tp']} x CP{near['cp']} x PP{near['pp']}, EP{near['ep']} "
                      f"with recomputation {near['memory_policy']}, ZeRO-{int(near['zero_stage'])}: "
                      f"{near['memory_gb']:.1f} GB, {near['memory_gb'] - load_gpu(gpu).hbm_gb:.1f} GB more than "
                      f"the {load_gpu(gpu).hbm_gb:g} GB HBM.")
        print(df.head(args.top).to_string(index=False))
        fixed = [f"--{name.replace('_', '-')}" for name in ("memory_policy", "zero_stage", "microbatch_size")
                 if getattr(req, name) is not None]
        print("Memory model: docs/model.md, 'Memory'; "
              + (f"{', '.join(fixed)} fixed part of the recipe (leave them out to search it); " if fixed else
                 "every recipe was tried; ")
              + "more GPUs, a larger PP or EP, or a smaller global batch shrink what each GPU keeps.")
        return 1
    screen_csv = screen_path(args.out)
    blocker = screen_blocker(run_spec(ok[0])) if args.screen == "analytical" else ""
    if blocker:
        warnings.append(f"no screen: the analytical network's bound does not hold under {blocker}; the search "
                        "simulates its candidates")
        if not args.json:
            print(f"warning: {warnings[-1]}")
    with overwriting(args.force), _cluster(args) as scheduler:
        def simulate(points: list[dict]):
            return run_sweep(evaluate, points, Path(args.out), scheduler=scheduler, progress=not args.json,
                             desc="plan")

        def screened(points: list[dict]) -> list[float]:
            return screen_values(points, screen_csv, progress=not args.json)
        use_screen = args.screen == "analytical" and not blocker
        df, searched = search(ok, simulate, top=args.top_layouts, screen=screened if use_screen else None)
    failed = df[df["status"] != "ok"]
    df = df[df["status"] == "ok"].sort_values("step_time_s").reset_index(drop=True)
    if args.json:
        if len(df) and args.write_scenario:
            write_scenario(df.iloc[0].to_dict(), args.write_scenario, args.force)
        agreement = plan_agreement(req, gpu)
        print(json_text({"recipe": recipe, "warnings": warnings, "search": searched.__dict__,
                         "ranking_agreement": agreement.to_json() if agreement is not None else None,
                         "recommendation": df.iloc[0].to_dict() if len(df) else None,
                         "run_command": pick_command(df.iloc[0].to_dict(), args.write_scenario) if len(df) else None,
                         "candidates": df.head(args.top).to_dict("records"), "refused": refused,
                         "failed": failed.to_dict("records")}))
        return 0 if len(df) else 1
    if df.empty:
        print(f"None of the {len(failed)} candidates that fit in memory could be simulated; the first error: "
              f"{failed['error'].iloc[0]} (every row: {args.out})")
        return 1
    cols = ["schedule", "tp", "cp", "pp", "ep", "dp", "microbatches", "last_stage_layers", *RECIPE_COLUMNS,
            "step_time_s", "tokens_per_s", "mfu", "bubble_share", "exposed_comm_share", "compute_spread",
            "busiest_rank", "bound", "max_memory_gb", "min_headroom_gb"]
    shown_df = df[cols].head(args.top).rename(columns=RECIPE_COLUMNS)
    print(shown_df.to_string(index=False, float_format=lambda v: f"{shown(v):.4g}"))
    print("last_stage_layers: 0 = the even split; mbs: micro-batch size; gemm: GEMM precision; recompute: memory "
          "policy; zero: ZeRO stage; etp: expert TP; tp_ovl: TP-communication overlap; compute_spread: (most - "
          "least) / most of the ranks' compute; bound: the largest loss besides compute")
    print(f"Search: {searched.line()}.")
    best = df.iloc[0]
    split = "even layer split" if not best["last_stage_layers"] else \
        f"{best['last_stage_layers']} layers on the stage with the heads and MTP"
    print(f"\nRecommendation: {best['schedule']} with {layout_label(best)}, EP{best['ep']}, "
          f"{best['microbatches']} micro-batches, {split}: {best['step_time_s']:.4g} s per step, "
          f"{best['tokens_per_s'] / 1e6:.2f}M tokens/s.")
    print(f"Recipe: {recipe_of(best.to_dict())}.")
    print(f"Why: bubble {100 * best['bubble_share']:.1f}% of rank-time, exposed communication "
          f"{100 * best['exposed_comm_share']:.1f}%, ranks' compute spread {100 * best['compute_spread']:.0f}% "
          f"(rank {best['busiest_rank']} the busiest); "
          f"bound by {best['bound']}; peak memory {best['max_memory_gb']:.1f} GB "
          f"({best['min_headroom_gb']:.1f} GB of headroom); MFU {best['mfu']:.2f} against the "
          f"{best['gemm_precision']} peak.")
    band = band_from_columns(best.to_dict())
    print(f"Trust: {band.line()}." if band is not None else
          "Trust: no validated published run is like this one (its GPU generation is not in the suite).")
    agreement = plan_agreement(req, gpu)
    if agreement is not None:
        print(f"Ranking: {agreement.line()}.")
    high = mfu_warning(best["mfu"], best["gemm_precision"], run_spec(best.to_dict()).gemm_efficiency)
    if high:
        print(f"warning: {high}")
    if len(df) > 1:
        second = df.iloc[1]
        print(f"Next: {second['schedule']} {layout_label(second)}, EP{second['ep']} at {second['step_time_s']:.4g} s "
              f"(bubble {100 * second['bubble_share']:.1f}%, exposed {100 * second['exposed_comm_share']:.1f}%).")
    if refused:
        print(f"{len(refused)} candidates refused (memory or layout); see --json.")
    if args.write_scenario:
        write_scenario(best.to_dict(), args.write_scenario, args.force)
        print(f"Wrote {args.write_scenario}.")
    print(f"Run it: {pick_command(best.to_dict(), args.write_scenario)}")
    from ..training.model.specs import load_model
    for phrase in load_model(req.model).not_costed:
        print(f"not costed: {phrase}")
    return 0


def screen_path(out: str) -> Path:
    """The CSV of a plan's screens beside its CSV of simulations: ``plan.csv`` -> ``plan-screen.csv``."""
    path = Path(out)
    return path.with_name(f"{path.stem}-screen{path.suffix or '.csv'}")


def screen_values(points: list[dict], path: Path, progress: bool) -> list[float]:
    """Each point's screen (:func:`sim.planner.screen`, a resumable sweep into ``path``, run in this
    process: a screen takes about 10 ms, less than sending it to a worker), in the points' order;
    ``-inf`` where it failed (the search then simulates it: its error shows there)."""
    import math

    import pandas as pd

    from ..planner import screen
    from ..sweep import point_key, run_sweep
    run_sweep(screen, points, path, scheduler="serial", progress=progress, desc="screen")
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)         # keys as the sweep's resume reads them
    columns = list(points[0])
    rows = {point_key({c: r.get(c, "") for c in columns}): r for r in raw.to_dict("records")}
    values = []
    for p in points:
        row = rows.get(point_key(p))
        values.append(float(row["screen_s"]) if row is not None and row.get("status") == "ok" else -math.inf)
    return values


@contextlib.contextmanager
def _cluster(args):
    """The scheduler every round of the search uses: ``serial``, the user's address, or one local
    Dask cluster started once for the whole plan."""
    if args.serial or args.scheduler:
        yield "serial" if args.serial else args.scheduler
        return
    from ..sweep_dask import local_cluster
    with local_cluster() as cluster:
        yield cluster.scheduler_address


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
    p.add_argument("--scenario", help="take the recipe (model, GPU, topology, batch, precisions, memory policy, "
                                      "ZeRO) from this scenario preset or YAML file; flags given win (e.g. deepseek-v3)")
    p.add_argument("--gpus", type=count, required=True, help="GPUs to plan for")
    p.add_argument("--model", help=f"model: a preset ({', '.join(model_names())}), a Hugging Face config.json, a "
                                   "YAML file of ModelSpec fields or an inline YAML mapping (required without "
                                   "--scenario)")
    p.add_argument("--topology", help="topology preset or YAML file (required without --scenario)")
    p.add_argument("--gpu", help=f"GPU preset ({', '.join(gpu_names())}), a YAML file of GPUSpec fields or an inline "
                                 "mapping (default: the topology's own GPU)")
    p.add_argument("--global-batch", type=count,
                   help=f"sequences per step (default {d['global_batch']:,}, or the scenario's)")
    p.add_argument("--seq-len", type=count, help=f"tokens per sequence (default {d['seq_len']:,}, or the scenario's)")
    p.add_argument("--microbatch-size", type=count,
                   help=f"sequences per micro-batch (default {d['microbatch_size']}, or the scenario's)")
    p.add_argument("--pp", type=_ints(1), default=list(d["pps"]),
                   help=f"PP sizes to try (default {','.join(map(str, d['pps']))})")
    p.add_argument("--ep", type=_ints(1), default=list(d["eps"]),
                   help=f"EP sizes to try (default {','.join(map(str, d['eps']))})")
    p.add_argument("--tp", type=_ints(1), default=None,
                   help="TP sizes to try (default 1,2,4,8 for a dense model; 1,2 for an MoE model, its experts "
                        "not split by TP: EP folded over TP and DP)")
    p.add_argument("--cp", type=_ints(1), default=None,
                   help="CP sizes to try for a dense model (default 1, or 1,2,4,8 for sequences over 8K tokens)")
    p.add_argument("--no-sequence-parallel", action="store_true",
                   help="TP without Megatron's sequence parallelism (default: with it)")
    p.add_argument("--schedules", type=_names, default=list(PLAN_SCHEDULES),
                   help=f"schedules to try, comma-separated (default {','.join(PLAN_SCHEDULES)}; interleaved-1f1b "
                        f"with {VIRTUAL_STAGES} model chunks per rank)")
    p.add_argument("--gemm-precision", choices=GEMM_PRECISIONS,
                   help=f"precision of the GEMMs (mxfp8 needs a Blackwell GPU; default {d['gemm_precision']}, or the "
                        "scenario's)")
    p.add_argument("--node-limit", type=arg(integer=True, low=0, high=100_000),
                   help="max nodes per token (0 = no limit, the default, or the scenario's)")
    p.add_argument("--memory-policy", choices=MEMORY_POLICIES,
                   help=f"what layers store and recompute (default {d['memory_policy']}, or the scenario's)")
    p.add_argument("--zero-stage", type=int, choices=(0, 1, 2, 3),
                   help=f"ZeRO stage (default {d['zero_stage']}, or the scenario's)")
    p.add_argument("--head-cuts", type=_ints(0), default=list(d["head_cuts"]),
                   help="layer splits to try: fewer layers than the even split on the stage with the heads and "
                        "MTP (default 0,1)")
    p.add_argument("--expert-tp", type=count, help="expert-TP size (default: searched, 1 and TP for an MoE model)")
    p.add_argument("--tp-comm-overlap", choices=("on", "off"),
                   help="TP-communication overlap (default: searched where TP > 1 with sequence parallelism)")
    p.add_argument("--top", type=count, default=8, help="rows to show (default 8)")
    p.add_argument("--top-layouts", type=count, default=TOP_LAYOUTS,
                   help=f"layouts whose every recipe is searched, screened or simulated (default {TOP_LAYOUTS}; the "
                        "others: their likeliest)")
    p.add_argument("--screen", choices=("analytical", "none"), default="analytical",
                   help="analytical (default): screen the candidates on the analytical network, a lower bound on "
                        "each step, and simulate only those that could beat the best simulated step (their screens "
                        "in OUT-screen.csv beside --out); none: simulate every candidate of the search")
    p.add_argument("--write-scenario", metavar="FILE", help="write the recommendation as a scenario YAML file")
    p.add_argument("--out", help="CSV of the simulated candidates, resumable (default: none kept)")
    p.add_argument("--force", action="store_true", help="replace --out even if it is not a plan this tool wrote")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address (default: a local cluster)")
    p.add_argument("--serial", action="store_true", help="no Dask: candidates one after another in this process")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")


COMMANDS = {"plan": ("search TP, CP, PP, EP, schedule and micro-batches within HBM", add_arguments, cmd_plan)}
