"""Topology variants of the 2,048-H800 cluster x schedule x communication mode for the DeepSeek-V3
step: NVLink and IB bandwidth, leaf oversubscription, rail-optimized cabling or not, 8 planes or 1,
and their combinations (EP groups that straddle leaves, all-to-alls on oversubscribed spines).

Communication ``measured``: the fast path, all-to-all times measured once per shape with the EP
groups of a stage on an empty fabric (each distinct stage on its own); ``live``: every all-to-all
on the step's fabric among other stages' all-to-alls, the pipeline sends and the data-parallel
gradient rings (sim.training.comm.live), the mode that sees the network.
Each variant's graph is built from its fields in the worker (no files are written). ``--scenario``
varies another scenario's own fat-tree topology the same way.

Writes ``results/sweep_topology.csv``: variant, schedule, communication (config), then nvlink_GBps,
nic_GBps, oversubscription, rail_optimized, planes, step_time_s (s), exposed_comm_s (s per rank),
exposed_pp_s (s per rank), a2a_dispatch_ms, a2a_combine_ms (ms per layer, measured: with the
stage's groups or the cluster; live: a group alone), a2a_slowdown (live / alone), compute_comm_ratio,
mean_utilization; status, error, wall_s (s), sim_code."""
from __future__ import annotations

from experiments.common import sweep_main
from sim.sweep import grid

BASE = {"kind": "fat_tree", "gpu": "h800", "nodes": 256, "gpus_per_node": 8, "nvlink_bandwidth_GBps": 160,
        "nic_bandwidth_GBps": 50, "switch_radix": 64, "oversubscription": 1, "rail_optimized": True, "planes": 8}
VARIANTS = {
    "base": {},
    "nvlink-80": {"nvlink_bandwidth_GBps": 80},
    "nvlink-320": {"nvlink_bandwidth_GBps": 320},
    "ib-25": {"nic_bandwidth_GBps": 25},
    "ib-100": {"nic_bandwidth_GBps": 100},
    "oversub-2": {"oversubscription": 2},
    "oversub-4": {"oversubscription": 4},
    "not-rail-optimized": {"rail_optimized": False},
    "one-plane": {"planes": 1},
    "one-plane-oversub-4": {"planes": 1, "oversubscription": 4},
    "one-plane-not-rail": {"planes": 1, "rail_optimized": False},
    "one-plane-oversub-4-not-rail": {"planes": 1, "oversubscription": 4, "rail_optimized": False},
}
SCHEDULES = ("1f1b", "dualpipe")
COMMUNICATION = ("measured", "live")


def variant_spec(name: str, base: dict | None = None) -> dict:
    """The topology fields of variant ``name`` of ``base`` (a ``kind: fat_tree`` mapping, as in a
    YAML file; default the 2,048-H800 cluster)."""
    base = BASE if base is None else base
    return {**base, **VARIANTS[name], "name": f"{base.get('name', 'h800-2048')}-{name}"}


def scenario_base(scenario: str) -> dict:
    """The fat-tree fields of ``scenario``'s topology, the base its variants change."""
    from sim.checks import InputError
    from sim.training.model.specs import load_scenario
    from topologies import read_spec
    spec = read_spec(load_scenario(scenario).topology)
    if spec.get("kind") != "fat_tree":
        raise InputError(f"--scenario {scenario!r}: its topology {spec.get('name')!r} is a {spec.get('kind')}; "
                         "the topology sweep varies a fat_tree's fields")
    return {k: v for k, v in spec.items() if k != "description"}


def point(p: dict) -> dict:
    from sim.training.model.specs import load_scenario
    from sim.training.scenario import Scenario
    from sim.training.step import simulate_step
    from topologies import build_from_spec
    scenario = p.get("scenario", "deepseek-v3")
    spec = variant_spec(p["variant"], None if scenario == "deepseek-v3" else scenario_base(scenario))
    run = load_scenario(scenario, topology=spec["name"], schedule=p["schedule"], communication=p["communication"])
    res = simulate_step(Scenario(run, graph=build_from_spec(dict(spec))))
    summary = res.summary()
    return {"nvlink_GBps": spec["nvlink_bandwidth_GBps"], "nic_GBps": spec["nic_bandwidth_GBps"],
            "oversubscription": spec["oversubscription"], "rail_optimized": spec["rail_optimized"],
            "planes": spec["planes"], **{k: summary[k] for k in (
                "step_time_s", "exposed_comm_s", "a2a_dispatch_ms", "a2a_combine_ms", "a2a_slowdown",
                "compute_comm_ratio", "mean_utilization")}, "exposed_pp_s": summary["mean_exposed_pp_s"]}


def points() -> list[dict]:
    return grid(variant=tuple(VARIANTS), schedule=SCHEDULES, communication=COMMUNICATION)


if __name__ == "__main__":
    raise SystemExit(sweep_main("sweep_topology", point, points, __doc__, scenario="deepseek-v3"))
