"""NCCL's collectives as the simulator runs them, nccl-tests style: all-reduce, all-gather and
reduce-scatter from 8 B to 8 GiB (doubling, as ``nccl-tests -b 8 -e 8G -f 2``) over 2 to 1,024 GPUs
(one node up to 8, then whole 8-GPU nodes) on the H100, H800 and A100 cluster presets, each
collective alone on the fabric with the ``deepep`` kernels' NCCL model (hierarchical rings, NCCL's
protocols and latencies: docs/network.md, "NCCL's collectives as NCCL runs them").

Where the declared calibration table ``experiments/profiles/xla-nccl-h100.csv`` (XLA's measured
collectives on one 8-GPU H100 SXM node, 1 KiB to 2 GiB) has the same collective, GPU count and size
on the H100 preset, the row carries the measured time and the model's error; the script prints, per
collective and GPU count, how many of those sizes land within 10%. The table is calibration data,
never scored: the ``deepep`` kernels' NCCL terms are fitted to it (``python -m sim calibrate``,
docs/network.md), and this script shows how close that fit comes, size by size.

Writes ``results/nccl_curves.csv`` (a sweep: resumes; ``--serial`` runs it in this process): topology,
gpu, kind, gpus, nodes, bytes (nccl-tests' size: all-gather the output, reduce-scatter the input,
all-reduce the buffer), then seconds, algbw_gbps (bytes / seconds / 1e9), busbw_gbps (nccl-tests'
bus bandwidth: algbw x 2(n-1)/n for an all-reduce, x (n-1)/n for the others), measured_s and
error_pct (simulated / measured - 1, empty where the table has no such row); status, error, wall_s,
sim_code. ``python -m experiments.plots`` draws ``figures/nccl_curves.png`` from it. About a
minute on 2 cores.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import pandas as pd

PROFILE = Path(__file__).resolve().parent / "profiles" / "xla-nccl-h100.csv"
TOPOLOGIES = ("dgx-h100-superpod", "h800-2048", "dgx-a100-superpod")
KINDS = ("all_reduce", "all_gather", "reduce_scatter")
GPU_COUNTS = (2, 4, 8, 16, 64, 256, 1024)
SIZES = tuple(8 * 2 ** i for i in range(31))          # 8 B .. 8 GiB
GPUS_PER_NODE = 8
WITHIN_PCT = 10.0


def bus_factor(kind: str, gpus: int) -> float:
    """nccl-tests' bus bandwidth / algorithm bandwidth: 2(n-1)/n for an all-reduce, (n-1)/n for an
    all-gather or reduce-scatter (the fraction of the buffer each GPU's link carries)."""
    share = (gpus - 1) / gpus
    return 2 * share if kind == "all_reduce" else share


def points(topologies=TOPOLOGIES, kinds=KINDS, gpu_counts=GPU_COUNTS, sizes=SIZES) -> list[dict]:
    """The sweep's grid: every topology x collective x GPU count x size (nodes: 1 up to 8 GPUs,
    else gpus / 8)."""
    return [{"topology": t, "kind": k, "gpus": n, "nodes": max(1, n // GPUS_PER_NODE), "bytes": b}
            for t in topologies for k in kinds for n in gpu_counts for b in sizes]


@functools.lru_cache(maxsize=None)
def _collectives(topology: str):
    """The topology's GPU and the simulator of a profile's collectives on it (once per process)."""
    from sim.training.comm.calibrate import Collectives
    from sim.training.comm.kernels import load_kernels
    from sim.training.model.specs import load_model, load_scenario, topology_gpu
    from sim.training.scenario import named_topology
    run = load_scenario("deepseek-v3", topology=topology)
    topo = named_topology(topology)
    gpu = topology_gpu(topo.graph, topology) or ""
    return gpu, Collectives(topo.links, run, load_model(run.model)), load_kernels("deepep")


@functools.lru_cache(maxsize=None)
def measured_table(path: str = str(PROFILE)) -> dict[tuple[str, int, int], float]:
    """{(kind, gpus, bytes): measured seconds} of the calibration table's one-node rows."""
    df = pd.read_csv(path, comment="#")
    df = df[df["nodes"] == 1]
    return {(str(r.kind), int(r.gpus), int(r.bytes)): float(r.seconds) for r in df.itertuples()}


def point(p: dict) -> dict:
    """One collective alone on the topology: its seconds, bandwidths and (H100, one node) the
    calibration table's time and the model's error."""
    from sim.training.comm.calibrate import Measurement
    gpu, sim, kernels = _collectives(p["topology"])
    gpus, nbytes = int(p["gpus"]), int(p["bytes"])
    seconds = sim.seconds(Measurement(0, p["kind"], gpus, int(p["nodes"]), 0.0, float(nbytes), 0, 1.0), kernels)
    algbw = nbytes / seconds / 1e9
    row = {"gpu": gpu, "seconds": seconds, "algbw_gbps": algbw, "busbw_gbps": algbw * bus_factor(p["kind"], gpus),
           "measured_s": None, "error_pct": None}
    measured = measured_table().get((p["kind"], gpus, nbytes)) if gpu == "h100" and int(p["nodes"]) == 1 else None
    if measured is not None:
        row["measured_s"], row["error_pct"] = measured, 100 * (seconds / measured - 1)
    return row


def comparison(df: pd.DataFrame) -> pd.DataFrame:
    """Per collective and GPU count, the rows with a measured time: how many, the median and the
    largest |error| (%), how many within :data:`WITHIN_PCT`, and the median signed error of the
    sizes of 1 MiB and more (where bandwidth, not latency, decides); then a row for all of them."""
    have = df[pd.to_numeric(df.get("error_pct"), errors="coerce").notna()].copy()
    if have.empty:
        return pd.DataFrame(columns=["kind", "gpus", "rows", "median_abs_error_pct", "worst_abs_error_pct",
                                     "within_10pct", "median_error_1MiB_up_pct"])
    have["error_pct"] = have["error_pct"].astype(float)
    have["abs"] = have["error_pct"].abs()

    def line(kind, gpus, g: pd.DataFrame) -> dict:
        big = g[g["bytes"].astype(float) >= 2 ** 20]["error_pct"]
        return {"kind": kind, "gpus": gpus, "rows": len(g), "median_abs_error_pct": g["abs"].median(),
                "worst_abs_error_pct": g["abs"].max(), "within_10pct": int((g["abs"] <= WITHIN_PCT).sum()),
                "median_error_1MiB_up_pct": big.median() if len(big) else float("nan")}
    rows = [line(k, int(n), g) for (k, n), g in have.groupby(["kind", "gpus"], sort=True)]
    rows.append(line("all", "all", have))
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    from experiments.common import sweep_parser
    from sim.cli import guarded
    from sim.sweep import run_sweep

    def call() -> int:
        args = sweep_parser(__doc__).parse_args(argv)
        out = Path(args.out) / "nccl_curves.csv"
        df = run_sweep(point, points(), out, scheduler="serial" if args.serial else args.scheduler,
                       workers=args.workers, progress=not args.no_progress, desc="nccl_curves",
                       point_timeout_s=args.point_timeout, force=args.force)
        failed = int((df["status"] != "ok").sum()) if "status" in df else 0
        table = comparison(df[df["status"] == "ok"])
        print("simulated / measured - 1 against XLA's H100 table (experiments/profiles/xla-nccl-h100.csv), "
              "one node, 1 KiB to 2 GiB:")
        print(table.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
        print(f"wrote {out}: {len(df)} rows, {failed} failed")
        return 0
    return guarded(call)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
