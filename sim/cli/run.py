"""``python -m sim run SCENARIO [--schedule NAME] [--json] [--out DIR]``: one training step.

Without ``--schedule`` the scenario runs under 1f1b, zb-h1, dualpipe and dualpipev (and its own
schedule if it is another) and prints them side by side (``--json``: the scenario's own schedule,
with the others under ``comparison``); with ``--out`` it writes ``<name>_summary.csv``,
``<name>_ranks.csv``, ``<name>_events_<schedule>.csv`` (op events of pipeline 0),
``<name>_links.csv`` (link statistics of the measured all-to-alls), ``<name>_link_timeline.csv``
(utilization of the step fabric's 16 busiest links per time bin, per schedule) and figures
(per-rank breakdown, one F&B unit's two streams, the busiest links over time) there.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..checks import InputError, arg
from ..training.model.faults import MAX_SEND_GRID_S
from ..training.model.specs import (
    COMMUNICATION,
    COMPARED_SCHEDULES,
    DP_SYNC,
    MEMORY_POLICIES,
    MODES,
    OPTIMIZER_SYNC,
    load_scenario,
)

if TYPE_CHECKING:
    from ..training.step import StepResult


def run_scenario(scenario: str, schedules, overrides: dict | None = None, mode: str = "auto", scope: str = "stage",
                 out: str | None = None, trace: str | None = None, workers: int = 1,
                 progress: bool | None = None, skipped: dict | None = None) -> "list[StepResult]":
    """Simulate scenario ``scenario`` (preset or YAML, fields replaced by ``overrides``) under each of
    ``schedules``, assembled once; write CSV and figures under ``out`` and a Chrome trace of the
    last schedule to ``trace`` when given (``skipped``: schedules left out and why, for the results
    page). ``progress``: a bar on stderr counting the steps (each
    schedule's, and under faults each one's again without them: minutes at scale); default: when
    stderr is a terminal."""
    from ..io import check_output
    from ..training.reports.report import planned_outputs, write_outputs
    from ..training.scenario import Scenario
    from ..training.step import simulate_schedules
    stem = Path(scenario).stem.replace("-", "_")
    pages = [Path(out) / "index.html"] if out else []
    for path in (planned_outputs(stem, out, schedules) if out else []) + pages + ([Path(trace)] if trace else []):
        check_output(path)                          # before the run, not after it
    base = Scenario(load_scenario(scenario, **{**(overrides or {}), "schedule": schedules[0]}))
    faulty = base.run.faults is not None and base.run.faults.any
    bar = _steps_bar(len(schedules) * (2 if faulty else 1), progress)

    def done(result) -> None:
        if bar is not None:
            bar.set_postfix_str(f"{result.run.schedule} done", refresh=False)
            bar.update(1)
    try:
        results = simulate_schedules(base, list(schedules), mode, scope, progress=True, workers=workers,
                                     link_timeline=bool(out or trace), done=done)
        if faulty:                                  # what the faults cost: the same run without them
            clean = Scenario(base.run.with_(faults=None))
            for r, c in zip(results, simulate_schedules(clean, list(schedules), "full", scope, workers=workers,
                                                        done=done)):
                r.fault_free_s = c.step_time_s
    finally:
        if bar is not None:
            bar.close()
    if out:
        from ..training.model.recipe import recipe_line
        from ..training.reports.runpage import write_run_page
        write_outputs(results, stem, Path(out), title=scenario)
        write_run_page(out, stem, f"{Path(scenario).stem}: one training step", recipe_line(results[0].recipe),
                       results[0].hbm_gb, skipped)
    if trace:
        from ..trace import write_chrome_trace
        write_chrome_trace(results[-1], trace)
    return results


def _steps_bar(total: int, progress: bool | None):
    """A tqdm bar of ``total`` steps on stderr, or ``None`` (one step, or ``progress`` false, or by
    default stderr not a terminal: piped output and tests stay clean)."""
    import sys
    if total < 2 or not (sys.stderr.isatty() if progress is None else progress):
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc="steps", unit="step", file=sys.stderr)


def cmd_run(args) -> int:
    if args.example:
        from ..training.model.example import example_yaml
        from ..training.model.specs import scenario_mapping
        base = scenario_mapping(args.scenario) if args.scenario else None
        print(example_yaml(base, args.scenario), end="")
        return 0
    if args.scenario is None:
        raise InputError("scenario: give a preset (deepseek-v3, tiny) or a YAML file; --example prints one")
    overrides = {"model": args.model, "gpu": args.gpu, "microbatches": args.microbatches, "routing_skew": args.skew,
                 "routing_seed": args.seed,
                 "topology": args.topology, "ep": args.ep, "pp": args.pp, "dp": args.dp, "tp": args.tp, "cp": args.cp,
                 "expert_tp": args.expert_tp, "sequence_parallel": True if args.sequence_parallel else None,
                 "memory_policy": args.memory_policy, "zero_stage": args.zero_stage, "dp_sync": args.dp_sync,
                 "optimizer_sync": args.optimizer_sync,
                 "communication": args.communication, "network": args.network, "kernels": args.kernels,
                 "comm_sms": args.comm_sms, "faults": fault_overrides(args)}
    spec = load_scenario(args.scenario, **overrides)
    own = spec.schedule
    names = [name.strip() for text in args.schedule or [] for name in text.split(",")]
    asked = list(dict.fromkeys([n for n in names if n] or names))     # an empty name is refused by name
    schedules = asked or list(COMPARED_SCHEDULES)
    if not asked and own not in schedules:
        schedules.append(own)
    schedules, skipped = runnable_schedules(args.scenario, schedules, overrides)
    if not schedules:
        reasons = set(skipped.values())
        if len(reasons) == 1:               # the same for every schedule: the scenario's own problem
            raise InputError(reasons.pop())
        raise InputError("no schedule can run this scenario: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    notes = batch_notes(args.scenario, spec)
    from ..io import json_text, overwriting
    with overwriting(args.force):
        results = run_scenario(args.scenario, schedules, overrides, args.mode, args.scope, args.out, args.trace,
                               args.workers, skipped=skipped)
    if args.json:
        main = next((r for r in results if r.run.schedule == own), results[0])
        out = main.to_json()
        if len(results) > 1:
            out["comparison"] = [{k: v for k, v in r.to_json().items() if k != "ranks"} for r in results]
        if skipped:
            out["skipped"] = skipped
        out["notes"] = notes
        print(json_text(out))
    else:
        from ..training.reports.report import comparison_text
        print(comparison_text(results))
        for name, reason in skipped.items():
            print(f"not run: {name}: {reason}")
        for note in notes:
            print(f"note: {note}")
        if args.out:
            print(f"wrote CSV, figures and a results page (index.html) under {args.out}")
    return 0


def runnable_schedules(scenario: str, schedules: list[str], overrides: dict) -> tuple[list[str], dict[str, str]]:
    """(the ``schedules`` that can run ``scenario``, {schedule: why not} for the others): a schedule
    whose shape the run does not allow (DualPipe's even micro-batches, DualPipeV's 2P stages) is
    left out of a comparison, not allowed to end it. One schedule asked for alone fails as before."""
    from ..schedules import SCHEDULE_NAMES
    from ..training.scenario import Scenario
    if len(schedules) == 1:
        return schedules, {}
    ok, skipped = [], {}
    for name in schedules:
        try:
            Scenario(load_scenario(scenario, **{**overrides, "schedule": name}))
        except InputError as exc:
            if name not in SCHEDULE_NAMES and not name.endswith(".json"):
                raise                   # a name that is no schedule is a typo, not a shape: refused
            skipped[name] = str(exc)
        else:
            ok.append(name)
    return ok, skipped


def batch_notes(scenario: str, spec) -> list[str]:
    """What the command line changed in the scenario's global batch (``--dp`` or ``--microbatches``
    scale it: global batch = DP x M x micro-batch size sequences)."""
    base = load_scenario(scenario)
    was = base.dp * base.microbatches * base.microbatch_size
    now = spec.dp * spec.microbatches * spec.microbatch_size
    if now == was:
        return []
    return [f"the global batch is {now:,} sequences (DP{spec.dp} x M={spec.microbatches} x {spec.microbatch_size}), "
            f"the scenario's is {was:,}: give --microbatches {max(1, was // (spec.dp * spec.microbatch_size))} "
            "to keep it"]


def _pair(text: str, sep: str, what: str) -> tuple[str, float]:
    key, found, value = text.rpartition(sep)
    try:
        return key, float(value)
    except ValueError:
        found = ""
    if not found or not key:
        raise InputError(f"{what} must look like {'GPU:FACTOR' if sep == ':' else 'SELECTOR=FACTOR'}, got {text!r}")


def fault_overrides(args) -> dict | None:
    """The ``faults`` mapping (:mod:`sim.training.model.faults`) the fault flags give, or ``None`` for none."""
    faults: dict = {}
    if args.slow_gpu:
        from ..training.model.faults import FaultError, slow_gpu_key
        slow = [_pair(t, ":", "--slow-gpu") for t in args.slow_gpu]
        try:
            faults["slow_gpus"] = {slow_gpu_key(g): f for g, f in slow}
        except FaultError as exc:
            raise InputError(f"--slow-gpu: {exc}".replace("faults.slow_gpus ", "")) from None
    if args.slow_fraction is not None:
        faults["slow_fraction"] = args.slow_fraction
        faults["slow_factor"] = args.slow_factor
    if args.jitter is not None:
        faults["jitter_cv"] = args.jitter
    if args.send_grid is not None:
        if args.jitter is None:
            raise InputError("--send-grid applies to jittered runs only: give --jitter CV too")
        faults["send_grid_s"] = args.send_grid * 1e-6
    links = dict(_pair(t, "=", "--degrade-link") for t in args.degrade_link or [])
    links.update({t: 0.0 for t in args.fail_link or []})
    if links:
        faults["links"] = links
    if faults and args.fault_seed is not None:
        faults["seed"] = args.fault_seed
    return faults or None


def add_arguments(p) -> None:
    p.add_argument("scenario", nargs="?", help="scenario preset (deepseek-v3, tiny) or a YAML file of RunSpec fields "
                                               "(--example writes one to start from)")
    p.add_argument("--example", action="store_true",
                   help="print a scenario YAML with every field, its unit and default, and exit "
                        "(python -m sim run --example > my.yaml; with a scenario, its values: "
                        "python -m sim run tiny --example > my.yaml)")
    p.add_argument("--schedule", action="append",
                   help=f"run only these schedules: comma-separated or repeated (default: {', '.join(COMPARED_SCHEDULES)} "
                        "and the scenario's own); a .json file runs an order of one's own")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", help="write CSV and PNG into this folder")
    p.add_argument("--trace", help="write a Chrome/Perfetto trace (JSON) of the last run")
    p.add_argument("--mode", choices=MODES, default="auto", help="representative pipeline or every rank")
    p.add_argument("--scope", choices=("stage", "cluster"), default="stage",
                   help="measured communication: all-to-all contention measured per stage (default) or with every "
                        "stage at once")
    p.add_argument("--communication", choices=COMMUNICATION,
                   help="all-to-alls measured once per shape (the scenario's default, fast) or live on the step's "
                        "fabric among pipeline sends, data-parallel traffic and other stages' all-to-alls")
    p.add_argument("--network",
                   help="network backend: maxmin (flows share each link max-min fairly, the default) or analytical "
                        "(each transfer alone on its route, no contention: quicker, optimistic where traffic meets)")
    p.add_argument("--kernels", help="communication kernels: a preset (deepep, ideal) or a YAML file such as "
                                     "`python -m sim calibrate` writes")
    p.add_argument("--comm-sms", type=arg(integer=True, low=0, high=100_000),
                   help="SMs an all-to-all kernel holds (bounds its throughput, slows compute beside it; 0: a "
                        "kernel that holds none, no bound and no slowdown)")
    count = arg(integer=True, low=1, high=100_000_000)
    p.add_argument("--microbatches", type=count, help="override the scenario's micro-batches")
    p.add_argument("--pp", type=count, help="override pipeline ranks")
    p.add_argument("--ep", type=count, help="override the expert-parallel size (GPUs: whole replicas of TP x CP "
                                            "GPUs, folded over TP and DP)")
    p.add_argument("--dp", type=count, help="override data-parallel replicas")
    p.add_argument("--tp", type=count, help="override the tensor-parallel size (GPUs = TP x CP x PP x DP; an MoE model "
                                            "needs --sequence-parallel)")
    p.add_argument("--cp", type=count, help="override the context-parallel size (divides seq_len / 2)")
    p.add_argument("--sequence-parallel", action="store_true", help="with TP: Megatron's sequence parallelism")
    p.add_argument("--expert-tp", type=count, help="override the expert-tensor-parallel size (an MoE model's routed "
                                                   "experts split over that many GPUs; divides TP; default 1)")
    p.add_argument("--topology", help="override the topology (preset or YAML)")
    p.add_argument("--model", help="override the model: a preset, a Hugging Face config.json or a YAML file of "
                                   "ModelSpec fields")
    p.add_argument("--gpu", help="override the GPU: a preset (h800, h100, h200, a100, b200, gb200) or a YAML file of "
                                 "GPUSpec fields")
    p.add_argument("--skew", type=arg(low=0, high=100),
                   help="Zipf exponent of expert popularity (> 0 simulates every rank)")
    p.add_argument("--seed", type=arg(integer=True, low=0, high=2 ** 63 - 1), help="seed of the skewed routing")
    p.add_argument("--memory-policy", choices=MEMORY_POLICIES, help="override what layers store and recompute")
    p.add_argument("--zero-stage", type=int, choices=(0, 1, 2, 3), help="override the ZeRO stage")
    p.add_argument("--dp-sync", choices=DP_SYNC, help="data-parallel sync as stages finish (overlap) or at the end")
    p.add_argument("--optimizer-sync", choices=OPTIMIZER_SYNC,
                   help="global: every rank waits for all gradients and the norm all-reduce before its optimizer "
                        "step (clipping, overflow check); bypass: Zero Bubble's post-validation, no wait")
    g = p.add_argument_group("stragglers and faults (docs/model.md: Stragglers and faults; every rank simulated)")
    g.add_argument("--slow-gpu", action="append", metavar="GPU:FACTOR",
                   help="GPU whose compute runs FACTOR (>= 1) times longer: a global index (12:1.5) or its place, "
                        "pipeline rank and data-parallel replica (pp3.dp5:1.5; .tp1 or .cp1 after it for one GPU "
                        "of a TP x CP group); repeatable")
    g.add_argument("--slow-fraction", type=arg(low=0, high=1), help="fraction of GPUs drawn at random to slow down")
    g.add_argument("--slow-factor", type=arg(low=1, high=1000), default=1.2,
                   help="slowdown of the --slow-fraction GPUs (default 1.2)")
    g.add_argument("--jitter", type=arg(low=0, high=10), metavar="CV",
                   help="kernel-time jitter: coefficient of variation of every compute part (log-normal, mean 1)")
    g.add_argument("--send-grid", type=arg(low=0, high=MAX_SEND_GRID_S * 1e6), metavar="US",
                   help="under --jitter, pipeline sends start on this grid of microseconds, or on their own time "
                        "alone where that is shorter, landing as if sent when due (default 1000; "
                        "0: each at its own instant; coarser: faster; docs/model.md: Stragglers and faults)")
    g.add_argument("--degrade-link", action="append", metavar="SELECTOR=FACTOR",
                   help="keep FACTOR (0.001 to 1) of the selected links' bandwidth (A--B, node:NAME, nics:N, "
                        "uplinks:LEAF, plane:P)")
    g.add_argument("--fail-link", action="append", metavar="SELECTOR", help="fail the selected links; routes avoid them")
    g.add_argument("--fault-seed", type=arg(integer=True, low=0, high=2 ** 63 - 1),
                   help="seed of --slow-fraction and --jitter")
    p.add_argument("--workers", type=arg(integer=True, low=1, high=1_024), default=os.cpu_count() or 1,
                   help="processes that sample skewed routing and measure skewed all-to-alls (default: one per core)")
    p.add_argument("--force", action="store_true",
                   help="replace files under --out and --trace even if this tool did not write them")


COMMANDS = {"run": ("simulate one training step of a scenario", add_arguments, cmd_run)}
