"""sim.planner: candidates by layout and memory (no fabric built), and one candidate simulated."""
import pytest

from sim.planner import PLAN_METRICS, PlanRequest, candidates, evaluate

TINY = dict(gpus=16, model="tiny-moe", topology="h800-16", global_batch=32, seq_len=256, pps=(2, 4, 3), eps=(4, 3),
            schedules=("1f1b", "dualpipe"), gemm_precision="bf16", node_limit=1)


def test_candidates_checks_memory_without_a_link_table(monkeypatch):
    import sim.moe.scenario as scenario_module

    def refuse(*_):
        raise AssertionError("the planner built a link table for a memory check")
    monkeypatch.setattr(scenario_module, "LinkTable", refuse)
    ok, refused = candidates(PlanRequest(**TINY))
    assert {(p["pp"], p["ep"], p["schedule"]) for p in ok} == {(2, 4, "1f1b"), (2, 4, "dualpipe"), (4, 4, "1f1b"),
                                                              (4, 4, "dualpipe")}
    reasons = " ".join(r["reason"] for r in refused)
    assert "RunSpec.ep (3) must divide dp (8)" in reasons                  # EP3
    assert all(p["dp"] * p["pp"] == 16 and p["microbatches"] == 32 // p["dp"] for p in ok)


def test_more_gpus_than_the_topology_has_is_one_line_before_any_candidate():
    """Not "no candidate fits" for a reason that hides this one (a batch that DP does not divide)."""
    from sim.checks import InputError
    with pytest.raises(InputError, match="gpus 100,000,000 is more than the 16 GPUs of topology 'h800-16'"):
        candidates(PlanRequest(**{**TINY, "gpus": 100_000_000}))


def test_memory_refusals_say_by_how_much():
    ok, refused = candidates(PlanRequest(**{**TINY, "pps": (4,), "eps": (4,), "memory_policy": "none", "seq_len": 131072}))
    assert ok == [] and all("GB HBM" in r["reason"] and r["memory_gb"] > 80 for r in refused)


def test_evaluate_one_candidate():
    ok, _ = candidates(PlanRequest(**{**TINY, "pps": (4,), "eps": (4,), "schedules": ("dualpipe",)}))
    row = evaluate(ok[0])
    assert set(row) == set(PLAN_METRICS)
    assert 0 < row["bubble_share"] < 1 and row["step_time_s"] > 0
    assert row["tokens_per_s"] == pytest.approx(32 * 256 / row["step_time_s"])
