"""Speed benchmark: wall time and peak memory (max RSS) of each case, each in its own process.

    python -m experiments.benchmark [--only schedules|network|moe] [--out results/benchmark.csv]

Cases
- schedules: generate + validate + simulate (zero communication) every schedule at P=16, M=256
  and P=64, M=1024 (target: DualPipe at P=64, M=1024 under 5 s on 2 cores).
- moe: the full DeepSeek-V3 step (PP16, EP64, 120 micro-batches, dualpipe) with one
  representative pipeline (target < 5 s) and with every one of the 2,048 ranks simulated, balanced
  (target < 60 s and 4 GB) and skewed (Zipf 1.0: 32 distinct traffic matrices to sample and
  measure, which is most of its time), in one process and in two worker processes.
- network: one EP64 hierarchical all-to-all (DeepSeek-V3 dispatch: 4096 tokens per GPU, top-8
  of 256 experts, node limit 4, FP8) on 8 nodes (target < 0.2 s), and 1, 8 and all 32 EP64 groups
  of the 2,048-GPU cluster at once (target < 10 s and 2 GB), to show how cost grows with GPUs.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import time

import pandas as pd

from sim.io import write_csv_atomic


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

    from sim.network import Fabric, MoERouting, all_to_all, route_tokens
    from sim.perf import gc_paused
    from topologies import load_topology
    t0 = time.perf_counter()
    graph = load_topology(topology)
    with gc_paused():
        env = simpy.Environment()
        fabric = Fabric(env, graph)
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


def _moe_case(mode: str, skew: float = 0.0, workers: int = 1) -> dict:
    """Times the three phases of a step: set-up (specs, schedule, routing; skewed routing samples
    every token), all-to-all measurement on the fabric (per shape, and per stage under skew) and
    the simulation itself."""
    from sim.moe.scenario import Scenario
    from sim.moe.specs import load_scenario
    from sim.moe.step import MoEStep
    t0 = time.perf_counter()
    step = MoEStep(Scenario(load_scenario("deepseek-v3", routing_skew=skew)), mode=mode, workers=workers)
    t1 = time.perf_counter()
    step.comm.measure_all()
    t2 = time.perf_counter()
    res = step.simulate()
    t3 = time.perf_counter()
    return {"case": f"DeepSeek-V3 step, dualpipe, {res.mode} mode, skew {skew}, {workers} worker(s)",
            "P": 16, "M": 120,
            "gpus": 2048 if res.mode == "full" else 16, "sim_time_us": res.step_time_s * 1e6,
            "generate_s": t1 - t0, "measure_s": t2 - t1, "simulate_s": t3 - t2, "wall_s": t3 - t0}


CASES = {"moe": [(_moe_case, ("representative",)), (_moe_case, ("full",)), (_moe_case, ("full", 1.0)),
                 (_moe_case, ("full", 1.0, 2))],
         "schedules": [], "network": [
    (_all_to_all_case, ("h800-64", 1)),
    (_all_to_all_case, ("h800-2048", 1)),
    (_all_to_all_case, ("h800-2048", 8)),
    (_all_to_all_case, ("h800-2048", 32)),
    (_all_to_all_case, ("h800-2048", 32, "flat")),
]}
for _P, _M in [(16, 256), (64, 1024)]:
    for _name in ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "dualpipe", "dualpipev", "chimera"):
        CASES["schedules"].append((_schedule_case, (_name, _P, _M)))


def _worker(fn, args, queue):
    row = fn(*args)
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put(row)


def run_case(fn, args) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_worker, args=(fn, args, queue))
    proc.start()
    row = queue.get()
    proc.join()
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(CASES), action="append", help="run only these groups")
    parser.add_argument("--out", default="results/benchmark.csv")
    args = parser.parse_args(argv)
    rows = []
    for group in args.only or sorted(CASES):
        for fn, fargs in CASES[group]:
            row = run_case(fn, fargs)
            row["group"] = group
            rows.append(row)
            print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    write_csv_atomic(pd.DataFrame(rows), args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
