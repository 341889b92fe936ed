"""Golden figures of the DeepSeek-V3 scenario: the README's quick start and docs/model.md's DeepSeek-V3 tables, by value.

The MoE step is otherwise tested by relations (DualPipe holds more than 1F1B, skewed is slower)
on the tiny scenario; a wrong SM-sharing factor or optimizer states sharded over the wrong group
would move these figures and nothing else would notice. A deliberate model change regenerates the
file in the same commit (``UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py``) and says why in
the commit message.
"""
import json
import os
from pathlib import Path

import pytest

from sim.training.model.specs import load_scenario
from sim.training.step import simulate_step

GOLDEN = Path(__file__).parent / "data" / "golden_deepseek_v3.json"
# The figures with pure link time (the ``ideal`` kernels preset: no launch, notify or SM bound on the
# all-to-alls, so no HBM taken from the compute beside them either), to the last digit.
GOLDEN_IDEAL = Path(__file__).parent / "data" / "golden_deepseek_v3_ideal_kernels.json"
SCHEDULES = ("1f1b", "dualpipe")


def figures(schedule: str, kernels: str = "deepep") -> dict:
    res = simulate_step(load_scenario("deepseek-v3", schedule=schedule, kernels=kernels))
    return {"step_time_s": res.step_time_s, "tokens_per_s": res.tokens_per_s, "mfu": res.mfu,
            "comm_hidden_fraction": res.comm_hidden_fraction, "exposed_comm_s": res.exposed_comm_s,
            "mean_utilization": res.mean_utilization, "bubble_share": res.bubble_share,
            "a2a_dispatch_s": res.a2a_dispatch_s, "a2a_combine_s": res.a2a_combine_s,
            "ranks": [{"rank": r.rank, "peak_microbatches": r.memory.peak_microbatches,
                       "memory_rank": r.memory.rank, "compute_s": r.compute_s, "recompute_s": r.recompute_s, "exposed_comm_s": r.exposed_comm_s,
                       "bubble_s": r.bubble_s, "dp_sync_s": r.dp_sync_s, "optimizer_s": r.optimizer_s,
                       "params_gb": r.memory.params_gb, "grads_gb": r.memory.grads_gb,
                       "optimizer_gb": r.memory.optimizer_gb, "activations_gb": r.memory.activations_gb,
                       "memory_gb": r.memory.total_gb} for r in res.ranks]}


def split_memory() -> list[dict]:
    """ZB-H1 keeps each backward's weight-gradient inputs from I to its deferred W: memory only."""
    from sim.training.scenario import Scenario
    return [{"rank": m.rank, "activations_gb": m.activations_gb, "memory_gb": m.total_gb,
             "peak_microbatches": m.peak_microbatches}
            for m in Scenario(load_scenario("deepseek-v3", schedule="zb-h1")).memory]


@pytest.mark.parametrize("kernels, golden", [("deepep", GOLDEN), ("ideal", GOLDEN_IDEAL)], ids=["deepep", "ideal"])
def test_deepseek_v3_headline_figures_are_unchanged(kernels, golden):
    got = {s: figures(s, kernels) for s in SCHEDULES}
    got["zb-h1_memory"] = split_memory()
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(golden.read_text())
    for rank, (g, w) in enumerate(zip(got["zb-h1_memory"], want["zb-h1_memory"], strict=True)):
        for k in w:
            assert g[k] == pytest.approx(w[k], rel=1e-9), ("zb-h1", rank, k)
    for s in SCHEDULES:
        for key, value in want[s].items():
            if key == "ranks":
                for rank, (g, w) in enumerate(zip(got[s]["ranks"], value)):
                    for k in w:
                        assert g[k] == pytest.approx(w[k], rel=1e-9, abs=1e-12), (s, rank, k)
            else:
                assert got[s][key] == pytest.approx(value, rel=1e-9, abs=1e-12), (s, key)


def test_the_golden_file_holds_the_readme_figures():
    """The README's quick-start table: DualPipe 16.70 s, 3.77M tokens/s; 1F1B 26.95 s (pure link
    time, the ``ideal`` kernels, whose copies take no HBM from the compute beside them: 16.51 s and
    26.91 s); DualPipe's fullest rank 79.2 GB."""
    want = json.loads(GOLDEN.read_text())
    assert round(want["dualpipe"]["step_time_s"], 2) == 16.70
    assert round(want["dualpipe"]["tokens_per_s"] / 1e6, 2) == 3.77
    assert round(want["1f1b"]["step_time_s"], 2) == 26.95
    ideal = json.loads(GOLDEN_IDEAL.read_text())
    assert round(ideal["dualpipe"]["step_time_s"], 2) == 16.51 and round(ideal["1f1b"]["step_time_s"], 2) == 26.91
    assert round(max(r["memory_gb"] for r in want["dualpipe"]["ranks"]), 1) == 79.2
