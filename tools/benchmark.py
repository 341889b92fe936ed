"""Speed benchmark: wall time and peak memory (max RSS) of each case, each in its own process.

    python -m tools.benchmark [--only schedules|network|skewed|moe|model-parallel|calibrate|cli|jobs|scale] [--out results/benchmark.csv]
    python -m tools.benchmark --plot          # the scaling figures, from the CSV only

Cases
- schedules: generate + validate + simulate (zero communication) every schedule at P=16, M=256
  and P=64, M=1024 (target: DualPipe at P=64, M=1024 under 5 s on 2 cores).
- moe: the full DeepSeek-V3 step (PP16, EP64, 120 micro-batches, dualpipe) with one
  representative pipeline (target < 5 s) and with every one of the 2,048 ranks simulated, balanced
  (target < 60 s and 4 GB) and skewed (Zipf 1.0: 32 distinct traffic matrices to sample and
  measure, which is most of its time), in one process and in two worker processes; and with live
  communication (every all-to-all on the step's fabric), representative (target < 10 s) and every
  rank (target < 60 s and 4 GB).
- network: one EP64 hierarchical all-to-all (DeepSeek-V3 dispatch: 4096 tokens per GPU, top-8
  of 256 experts, node limit 4, FP8) on 8 nodes (target < 0.2 s), and 1, 8 and all 32 EP64 groups
  of the 2,048-GPU cluster at once (target < 10 s and 2 GB), to show how cost grows with GPUs.
- skewed: the same all-to-all under skewed routing (Zipf 1.0): one group of EP64, EP128, EP256
  (target < 20 s), and 1, 4 and all 16 EP128 groups at once (target < 60 s): routing sampling and
  the fabric, how cost grows with GPUs when flows end at many different times.
- model parallel: Llama 3 405B on 16,384 H100 as Table 4 of the Llama 3 paper runs it (TP8 with
  sequence parallelism, PP16, interleaved, FSDP over DP128; the validation suite's row
  llama3-t4-16384-cp1) in representative mode, set-up and TP and ZeRO-3 collectives included
  (target < 120 s).
- scale: ``python -m sim run deepseek-v3`` with DualPipe on DeepSeek's 8-plane fat tree grown to
  2,048, 16,384, 32,768, 65,536 and 131,072 GPUs (DP 128 to 8,192), representative and every rank,
  as a whole process: wall time and the peak memory of all its processes together (targets at
  131,072 GPUs: representative under 5 minutes and 8 GB, every rank under 30 minutes and 20 GB;
  32,768 representative under 4 GB). Not in the default run (``--only scale``): about an hour.
- cli: ``python -m sim schedule dualpipe --pp 8 --microbatches 16`` as a whole process, start-up
  included (target < 0.5 s).

``--plot`` draws ``results/figures/benchmark_scaling.png`` from the CSV: all-to-all wall time
against GPUs (uniform and skewed) and schedule wall time against ops.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

import pandas as pd

from experiments.common import script_main
from sim.checks import InputError
from sim.io import check_output, write_csv_atomic

# DeepEP's published table, the calibrate case's input (a file of the research scripts).
DEEPEP_PROFILE = Path(__file__).resolve().parents[1] / "experiments" / "profiles" / "deepep-h800.csv"


def _schedule_case(name: str, P: int, M: int) -> dict:
    from sim.engine import ZeroCommRunner, run_schedule
    from sim.schedules import make_schedule, validate
    t0 = time.perf_counter()
    s = make_schedule(name, P, M, 2 if name == "interleaved-1f1b" else None)
    t1 = time.perf_counter()
    validate(s)
    t2 = time.perf_counter()
    run_schedule(s, ZeroCommRunner(s.num_stages))
    t3 = time.perf_counter()
    return {"case": f"schedule {name}", "P": P, "M": M, "ops": s.num_ops(), "generate_s": t1 - t0,
            "validate_s": t2 - t1, "simulate_s": t3 - t2, "wall_s": t3 - t0}


def _all_to_all_case(topology: str, groups: int, algorithm: str = "hierarchical") -> dict:
    import simpy

    from sim.network import MoERouting, all_to_all, build_network, route_tokens
    from sim.perf import gc_paused
    from topologies import load_topology
    t0 = time.perf_counter()
    graph = load_topology(topology)
    with gc_paused():
        env = simpy.Environment()
        fabric = build_network(env, graph)
        routing = MoERouting(ep=64, gpus_per_node=8, num_experts=256, topk=8, tokens_per_gpu=4096, node_limit=4)
        traffic = route_tokens(routing)
        t1 = time.perf_counter()
        for k in range(groups):
            all_to_all(fabric, list(range(64 * k, 64 * (k + 1))), traffic, 7168 + 224, algorithm)
        env.run()
    t2 = time.perf_counter()
    return {"case": f"all-to-all EP64 x{groups} {algorithm} on {topology}", "P": None, "M": None,
            "gpus": 64 * groups, "flows_recomputed": fabric.recomputations, "sim_time_us": env.now * 1e6,
            "generate_s": t1 - t0, "simulate_s": t2 - t1, "wall_s": t2 - t0}


def _skewed_case(ep: int, groups: int) -> dict:
    """One skewed (Zipf 1.0) hierarchical dispatch of ``groups`` EP groups of ``ep`` at once, as
    ``python -m sim collective`` runs it (completion window 1e-3): routing sampled once, every group
    with that traffic."""
    import simpy

    from sim.network import MoERouting, all_to_all, build_network, route_tokens
    from sim.perf import gc_paused
    from topologies import load_topology
    t0 = time.perf_counter()
    graph = load_topology("h800-2048")
    routing = MoERouting(ep=ep, gpus_per_node=8, num_experts=256, topk=8, tokens_per_gpu=4096, node_limit=4,
                         skew=1.0, seed=0)
    traffic = route_tokens(routing)
    t1 = time.perf_counter()
    with gc_paused():
        env = simpy.Environment()
        fabric = build_network(env, graph, completion_window=1e-3)
        for k in range(groups):
            all_to_all(fabric, list(range(ep * k, ep * (k + 1))), traffic, 7168 + 224)
        env.run()
    t2 = time.perf_counter()
    return {"case": f"skewed all-to-all EP{ep} x{groups} on h800-2048", "P": None, "M": None, "gpus": ep * groups,
            "flows_recomputed": fabric.recomputations, "sim_time_us": env.now * 1e6, "generate_s": t1 - t0,
            "simulate_s": t2 - t1, "wall_s": t2 - t0}


def _cli_case() -> dict:
    """The schedule command as a whole process: start-up (imports) included."""
    import subprocess
    import sys
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sim", "schedule", "dualpipe", "--pp", "8", "--microbatches", "16"],
                   check=True, capture_output=True)
    return {"case": "python -m sim schedule dualpipe --pp 8 --microbatches 16 (process)", "P": 8, "M": 16,
            "wall_s": time.perf_counter() - t0}


def _calibrate_case() -> dict:
    """``python -m sim calibrate`` on DeepEP's published table (8 rows, up to 64 GPUs), in-process."""
    from sim.training.comm.calibrate import Collectives, fit, read_profile
    from sim.training.comm.kernels import load_kernels
    from sim.training.model.specs import load_model, load_scenario
    from sim.training.scenario import named_topology
    t0 = time.perf_counter()
    run = load_scenario("deepseek-v3", topology="h800-64")
    sim = Collectives(named_topology("h800-64").links, run, load_model(run.model))
    rows = read_profile(DEEPEP_PROFILE, sim)
    fit(rows, sim, load_kernels("deepep"))
    return {"case": "calibrate: fit 3 kernel parameters to DeepEP's table (8 rows)", "gpus": 64,
            "wall_s": time.perf_counter() - t0}


def _moe_case(mode: str, skew: float = 0.0, workers: int = 1, communication: str = "measured",
              faults: dict | None = None, network: str = "maxmin") -> dict:
    """Times the three phases of a step: set-up (specs, schedule, routing; skewed routing samples
    every token), all-to-all measurement on the fabric (per shape, and per stage under skew) and
    the simulation itself."""
    from sim.training.model.specs import load_scenario
    from sim.training.scenario import Scenario
    from sim.training.step import MoEStep
    t0 = time.perf_counter()
    run = load_scenario("deepseek-v3", routing_skew=skew, communication=communication, faults=faults,
                        network=network)
    step = MoEStep(Scenario(run), mode=mode, workers=workers)
    t1 = time.perf_counter()
    step.comm.measure_all()
    t2 = time.perf_counter()
    res = step.simulate()
    t3 = time.perf_counter()
    return {"case": f"DeepSeek-V3 step, dualpipe, {res.mode} mode, {communication} communication, skew {skew}, "
                    f"{workers} worker(s)" + (f", faults: {run.faults.describe()}" if faults else "")
                    + (f", {network} network" if network != "maxmin" else ""),
            "P": 16, "M": 120,
            "gpus": 2048 if res.mode == "full" else 16, "sim_time_us": res.step_time_s * 1e6,
            "generate_s": t1 - t0, "measure_s": t2 - t1, "simulate_s": t3 - t2, "wall_s": t3 - t0}


def _jobs_case(placement: str) -> dict:
    """Two DeepSeek-V3 jobs of 1,024 GPUs on h800-2048 (examples/jobs/deepseek-v3-1024.yaml, live
    all-to-alls), each alone and both together, as ``python -m sim jobs`` runs them."""
    from sim.jobs import StepJob, run_jobs
    from sim.training.model.specs import load_scenario
    t0 = time.perf_counter()
    run = load_scenario(str(Path(__file__).resolve().parent.parent / "examples" / "jobs" / "deepseek-v3-1024.yaml"),
                        communication="live")
    result = run_jobs([StepJob("A", run), StepJob("B", run)], placement)
    return {"case": f"two DeepSeek-V3 jobs of 1,024 GPUs on h800-2048, {placement}: each alone and both together",
            "gpus": 2048, "sim_time_us": float(result.jobs.shared_s.max()) * 1e6, "wall_s": time.perf_counter() - t0}


def _llama3_case() -> dict:
    """The validation row llama3-t4-16384-cp1 assembled and simulated, as ``make validate`` does it."""
    from sim.training.step import MoEStep
    from validation.predict import scenario_of
    from validation.suite import load_runs
    t0 = time.perf_counter()
    run = next(r for r in load_runs() if r.id == "llama3-t4-16384-cp1")
    step = MoEStep(scenario_of(run), mode="representative")
    t1 = time.perf_counter()
    res = step.simulate()
    t2 = time.perf_counter()
    return {"case": "Llama 3 405B step on 16,384 H100 (TP8+SP x PP16 x DP128, FSDP), representative mode",
            "P": 16, "M": run.microbatches, "gpus": run.gpus, "sim_time_us": res.step_time_s * 1e6,
            "generate_s": t1 - t0, "simulate_s": t2 - t1, "wall_s": t2 - t0}


# DeepSeek's 8-plane two-layer fat tree grown to (GPUs, nodes, switch radix): a plane of a two-layer
# fat tree of radix r holds r^2/2 hosts, so the radix is the smallest even one that holds the nodes.
SCALES = ((2_048, 256, 64), (16_384, 2_048, 64), (32_768, 4_096, 92), (65_536, 8_192, 128),
          (131_072, 16_384, 184))


def scale_topology(folder: Path, nodes: int, radix: int) -> Path:
    """The topology file of :data:`SCALES`' cluster of ``nodes`` nodes: h800-2048's figures, more
    nodes and a larger switch radix."""
    path = folder / f"h800-{nodes * 8}.yaml"
    path.write_text(f"name: h800-{nodes * 8}\nkind: fat_tree\ngpu: h800\nnodes: {nodes}\ngpus_per_node: 8\n"
                    f"nvlink_bandwidth_GBps: 160\nnic_bandwidth_GBps: 50\nswitch_radix: {radix}\n"
                    "oversubscription: 1\nrail_optimized: true\nplanes: 8\n")
    return path


def tree_peak(cmd: list[str], poll_s: float = 0.2) -> tuple[int, float, float]:
    """Run ``cmd``; (exit status, wall seconds, the peak of the summed RSS of it and its child
    processes in MB, sampled every ``poll_s``)."""
    import subprocess

    import psutil
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    top, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        total = 0
        try:
            for p in [top, *top.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        peak = max(peak, total)
        time.sleep(poll_s)
    return proc.returncode, time.perf_counter() - t0, peak / 2**20


def _scale_case(gpus: int, mode: str) -> dict:
    """``python -m sim run deepseek-v3`` with DualPipe on :data:`SCALES`' cluster of ``gpus`` GPUs
    (PP16, EP64, DP = GPUs / 16) in ``mode``, as a whole process: wall time and the peak memory of
    all its processes together (the all-to-all measurement's workers included). Every rank of
    131,072 GPUs is 22.9 million parts, above ``run``'s guard of 20 million: the benchmark raises it."""
    import tempfile
    _, nodes, radix = next(s for s in SCALES if s[0] == gpus)
    with tempfile.TemporaryDirectory() as folder:
        topology = scale_topology(Path(folder), nodes, radix)
        status, wall, peak = tree_peak([sys.executable, "-m", "sim", "run", "deepseek-v3", "--schedule", "dualpipe",
                                        "--topology", str(topology), "--dp", str(gpus // 16), "--mode", mode,
                                        "--max-parts", "30000000"])
    if status:
        raise RuntimeError(f"the {gpus}-GPU {mode} run exited with {status}")
    return {"case": f"DeepSeek-V3 step, dualpipe, {mode} mode, {gpus:,} GPUs (8-plane fat tree of radix {radix}), "
                    "whole process", "P": 16, "M": 120, "gpus": gpus, "wall_s": wall, "peak_tree_mb": peak}


CASES = {"model-parallel": [(_llama3_case, ())],
         "moe": [(_moe_case, ("representative",)), (_moe_case, ("full",)), (_moe_case, ("full", 1.0)),
                 (_moe_case, ("full", 1.0, 2)), (_moe_case, ("representative", 0.0, 1, "live")),
                 (_moe_case, ("full", 0.0, 1, "live")),
                 (_moe_case, ("representative", 0.0, 1, "live", None, "analytical")),
                 (_moe_case, ("full", 0.0, 1, "measured", {"jitter_cv": 0.05, "links": {"node:n1/nic0": 0.0}})),
                 (_moe_case, ("full", 0.0, 1, "measured", {"jitter_cv": 0.05, "links": {"node:n1/nic0": 0.0},
                                                           "send_grid_s": 0.0}))],
         "calibrate": [(_calibrate_case, ())],
         "jobs": [(_jobs_case, ("packed",)), (_jobs_case, ("interleaved",))],
         "skewed": [(_skewed_case, (64, 1)), (_skewed_case, (128, 1)), (_skewed_case, (256, 1)),
                    (_skewed_case, (128, 4)), (_skewed_case, (128, 16))],
         "cli": [(_cli_case, ())],
         "schedules": [], "network": [
    (_all_to_all_case, ("h800-64", 1)),
    (_all_to_all_case, ("h800-2048", 1)),
    (_all_to_all_case, ("h800-2048", 8)),
    (_all_to_all_case, ("h800-2048", 32)),
    (_all_to_all_case, ("h800-2048", 32, "flat")),
]}
CASES["scale"] = [(_scale_case, (gpus, mode)) for mode in ("representative", "full") for gpus, _, _ in SCALES]
for _P, _M in [(16, 256), (64, 1024)]:
    for _name in ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "dualpipe", "dualpipev", "chimera"):
        CASES["schedules"].append((_schedule_case, (_name, _P, _M)))


def _worker(fn, args, queue):
    row = fn(*args)
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put(row)


def run_case(fn, args) -> dict | None:
    """One case in a process of its own: its row, or None when the process ended without one (the
    case raised: its traceback is on stderr). The queue is polled while the process lives, so a
    case that fails cannot hang the run."""
    import queue as queues
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_worker, args=(fn, args, queue))
    proc.start()
    while True:
        try:
            row = queue.get(timeout=1.0)
            break
        except queues.Empty:
            if not proc.is_alive():
                try:
                    row = queue.get(timeout=1.0)        # put just before it ended
                except queues.Empty:
                    row = None
                break
    proc.join()
    return row


def plot_scaling(csv: str | Path, out: str | Path) -> Path:
    """All-to-all wall time against GPUs (uniform, skewed) and schedule wall time against ops, from
    the benchmark CSV only."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sim.plots import FIGURE_WIDTH_IN, save_figure
    df = pd.read_csv(csv)
    fig, (a, b) = plt.subplots(1, 2, figsize=(FIGURE_WIDTH_IN, 4))
    on_cluster = df["case"].str.endswith("on h800-2048")
    curves = (("uniform, EP64 groups at once", df["case"].str.startswith("all-to-all EP64 x") &
               df["case"].str.contains("hierarchical")),
              ("skewed, EP128 groups at once", df["case"].str.startswith("skewed all-to-all EP128 x")),
              ("skewed, one group (EP 64, 128, 256)", df["case"].str.startswith("skewed all-to-all EP") &
               df["case"].str.contains(" x1 ")))
    for label, rows in curves:
        g = df[rows & on_cluster]
        if len(g):                         # (a CSV of other groups only may have no gpus column)
            g = g.sort_values("gpus")
            a.plot(g["gpus"], g["wall_s"], marker="o", label=label)
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel("GPUs in the all-to-all")
    a.set_ylabel("wall time (s)")
    a.set_title("all-to-all measurement on the fabric (h800-2048)")
    schedules = df[df["case"].str.startswith("schedule ")]
    for P, g in (schedules.groupby("P") if len(schedules) else ()):
        b.scatter(g["ops"], g["wall_s"], label=f"P={int(P)}")
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("ops in the schedule")
    b.set_ylabel("generate + validate + simulate (s)")
    b.set_title("schedules: every schedule at (P, M)")
    for ax in (a, b):                      # a run with --only may leave a panel without a curve
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not in this run", transform=ax.transAxes, ha="center", color="gray")
    return save_figure(fig, out)


def plot_scale(csv: str | Path, out: str | Path) -> Path | None:
    """Wall time and peak memory (all processes) of the scale group's DeepSeek-V3 steps against GPUs,
    representative and every rank, from the benchmark CSV only; None when it has no scale row."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sim.plots import FIGURE_WIDTH_IN, save_figure
    df = pd.read_csv(csv)
    if "peak_tree_mb" not in df:
        return None
    df = df[df["peak_tree_mb"].notna()]
    fig, (a, b) = plt.subplots(1, 2, figsize=(FIGURE_WIDTH_IN, 3.6))
    for mode in ("representative", "full"):
        g = df[df["case"].str.contains(f", {mode} mode,")].sort_values("gpus")
        label = "every rank" if mode == "full" else mode
        a.plot(g["gpus"], g["wall_s"], marker="o", label=label)
        b.plot(g["gpus"], g["peak_tree_mb"] / 1024, marker="o", label=label)
    for ax, ylabel in ((a, "wall time (s)"), (b, "peak memory, all processes (GB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("GPUs")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    a.set_title("DeepSeek-V3 step, DualPipe: time")
    b.set_title("DeepSeek-V3 step, DualPipe: memory")
    return save_figure(fig, out)


def add_arguments(parser) -> None:
    parser.add_argument("--only", choices=sorted(CASES), action="append", help="run only these groups")
    parser.add_argument("--out", default="results/benchmark.csv")
    parser.add_argument("--plot", action="store_true", help="only draw the scaling figure from --out")


def run(args) -> int:
    """The cases asked for (their CSV and figure paths checked first: a run takes minutes), or only
    the figure from an existing CSV."""
    figure = Path(args.out).parent / "figures" / "benchmark_scaling.png"
    if args.plot:
        if not Path(args.out).is_file():
            raise InputError(f"{args.out}: no benchmark CSV there; run python -m tools.benchmark first, "
                             "or give its --out")
        scale = plot_scale(args.out, check_output(figure.with_name("benchmark_scale.png")))
        print(f"wrote {plot_scaling(args.out, check_output(figure))}" + (f" and {scale}" if scale else ""))
        return 0
    check_output(args.out)
    check_output(figure)
    rows = []
    if args.only and Path(args.out).exists():          # keep the other groups' rows
        rows = [r for r in pd.read_csv(args.out).to_dict("records") if r.get("group") not in args.only]
    failed = []
    for group in args.only or sorted(set(CASES) - {"scale"}):      # scale: only when asked (about an hour)
        for fn, fargs in CASES[group]:
            row = run_case(fn, fargs)
            if row is None:
                failed.append(f"{fn.__name__}{fargs}")
                print(f"benchmark case {fn.__name__}{fargs} failed (its traceback is above); going on", file=sys.stderr)
                continue
            row["group"] = group
            rows.append(row)
            print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    write_csv_atomic(pd.DataFrame(rows), args.out)
    scale = plot_scale(args.out, figure.with_name("benchmark_scale.png"))
    print(f"wrote {args.out} and {plot_scaling(args.out, figure)}" + (f" and {scale}" if scale else ""))
    if failed:
        print(f"{len(failed)} case(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    return script_main(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
