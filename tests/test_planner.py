"""sim.planner: candidates by layout and memory (no fabric built), and one candidate simulated."""
import pytest

from sim.checks import InputError
from sim.planner import PLAN_METRICS, PlanRequest, candidates, evaluate, run_spec

TINY = dict(gpus=16, model="tiny-moe", topology="h800-16", global_batch=32, seq_len=256, pps=(2, 4, 3), eps=(4, 3),
            schedules=("1f1b", "dualpipe"), gemm_precision="bf16", node_limit=1, tps=(1,))


def test_candidates_checks_memory_without_a_link_table(monkeypatch):
    import sim.training.scenario as scenario_module

    def refuse(*_):
        raise AssertionError("the planner built a link table for a memory check")
    monkeypatch.setattr(scenario_module, "LinkTable", refuse)
    ok, refused = candidates(PlanRequest(**TINY))
    assert {(p["pp"], p["ep"], p["schedule"]) for p in ok} == {(2, 4, "1f1b"), (2, 4, "dualpipe"), (4, 4, "1f1b"),
                                                              (4, 4, "dualpipe")}
    reasons = " ".join(r["reason"] for r in refused)
    assert "RunSpec.ep (3) must divide dp (8)" in reasons                  # EP3
    assert all(p["dp"] * p["pp"] == 16 and p["microbatches"] == 32 // (p["dp"] * p["microbatch_size"]) for p in ok)
    assert {p["microbatch_size"] for p in ok} == {1, 2}                   # searched: 1 and 2


def test_more_gpus_than_the_topology_has_is_one_line_before_any_candidate():
    """Not "no candidate fits" for a reason that hides this one (a batch that DP does not divide)."""
    from sim.checks import InputError
    with pytest.raises(InputError, match="gpus 100,000,000 is more than the 16 GPUs of topology 'h800-16'"):
        candidates(PlanRequest(**{**TINY, "gpus": 100_000_000}))


def test_memory_refusals_say_by_how_much():
    ok, refused = candidates(PlanRequest(**{**TINY, "pps": (4,), "eps": (4,), "memory_policy": "none", "seq_len": 2097152,
                                                   "cps": (1,)}))
    memory = [r for r in refused if "memory_gb" in r]
    assert ok == [] and memory and all("GB HBM" in r["reason"] and r["memory_gb"] > 80 for r in memory)
    assert {r["memory_policy"] for r in memory} == {"none"}                # fixed: the ladder is that one rung


def test_evaluate_one_candidate():
    ok, _ = candidates(PlanRequest(**{**TINY, "pps": (4,), "eps": (4,), "schedules": ("dualpipe",)}))
    row = evaluate(ok[0])
    assert set(row) == set(PLAN_METRICS)
    assert 0 < row["bubble_share"] < 1 and row["step_time_s"] > 0
    assert row["tokens_per_s"] == pytest.approx(32 * 256 / row["step_time_s"])


def test_microbatches_are_the_global_batch_over_dp_times_the_microbatch_size():
    """M = global batch / (DP x micro-batch size): 64 sequences in micro-batches of 2 on DP 8 (PP 2)
    is M = 4, on DP 4 (PP 4) M = 8; a global batch that DP x size does not divide is refused."""
    ok, refused = candidates(PlanRequest(**{**TINY, "global_batch": 64, "microbatch_size": 2, "pps": (2, 4),
                                            "eps": (4,), "schedules": ("1f1b",)}))
    assert {(p["pp"], p["dp"], p["microbatches"], p["microbatch_size"]) for p in ok} == {(2, 8, 4, 2), (4, 4, 8, 2)}
    ok, refused = candidates(PlanRequest(**{**TINY, "global_batch": 24, "microbatch_size": 2, "pps": (2,),
                                            "eps": (4,), "schedules": ("1f1b",)}))
    assert ok == [] and "not divisible by DP 8" in refused[0]["reason"]


def test_defaults_are_runs_and_a_scenario_brings_its_recipe():
    """Without a scenario the plan searches the recipe and uses the topology's own GPU;
    --scenario deepseek-v3 brings FP8, its memory policy and its batch (its recipe fixed)."""
    from sim.plan_recipes import RECIPE_FIELDS
    from sim.planner import DEFAULT_GLOBAL_BATCH, gpu_of, plan_request
    from topologies import load_topology
    plain = plan_request(gpus=16, model="tiny-moe", topology="h800-16")
    assert (plain.gemm_precision, plain.memory_policy, plain.global_batch, plain.gpu) == \
        (None, None, DEFAULT_GLOBAL_BATCH, None)
    assert plain.searched == RECIPE_FIELDS
    assert plan_request(gpus=16, model="tiny-moe", topology="h800-16", zero_stage=1).searched == \
        tuple(f for f in RECIPE_FIELDS if f != "zero_stage")
    assert gpu_of(plain, load_topology("h800-16")) == "h800"
    ds = plan_request("deepseek-v3", gpus=2048, memory_policy="full")
    assert (ds.model, ds.gemm_precision, ds.memory_policy, ds.global_batch, ds.node_limit) == \
        ("deepseek-v3", "fp8", "full", 15360, 4)
    assert ds.searched == ()
    with pytest.raises(InputError, match="model is required"):
        plan_request(gpus=16, topology="h800-16")


def test_a_scenario_point_keeps_the_scenarios_other_fields():
    from sim.planner import run_spec
    ok, _ = candidates(PlanRequest(**{**TINY, "pps": (4,), "eps": (4,), "schedules": ("1f1b",), "scenario": "tiny"}))
    spec = run_spec(ok[0])
    assert spec.kernels == "ideal" and spec.pp == 4 and spec.microbatches == 32 // 4


def test_a_dense_model_is_planned_over_tp_and_long_sequences_over_cp():
    """Llama 3 8B on 64 H100: TP 1, 2, 4, 8 with sequence parallelism, under every schedule (F&B
    units run a chunk's TP collectives beside the other's compute); CP joins for sequences over 8K."""
    req = PlanRequest(gpus=64, model="llama3-8b", topology="h100-1024", pps=(2,), schedules=("1f1b", "dualpipev"),
                      head_cuts=(0,), memory_policy="selective")
    ok, _ = candidates(req)
    assert {(p["tp"], p["cp"]) for p in ok} == {(1, 1), (2, 1), (4, 1), (8, 1)}
    assert all(p["sequence_parallel"] == (p["tp"] > 1) and p["dp"] * p["tp"] * p["pp"] == 64 for p in ok)
    assert {(p["tp"], p["schedule"]) for p in ok} >= {(8, "dualpipev"), (8, "1f1b")}
    assert req.context_sizes == (1,) and PlanRequest(**{**req.__dict__, "seq_len": 16384}).context_sizes == (1, 2, 4, 8)
    point = next(p for p in ok if p["tp"] == 4)
    assert run_spec(point).tp == 4 and run_spec(point).sequence_parallel
    assert evaluate(point)["step_time_s"] > 0


def test_an_moe_model_is_planned_at_tp_1_and_2_with_ep_folded_over_tp():
    req = PlanRequest(**{**TINY, "pps": (4,), "eps": (4, 3), "schedules": ("1f1b",), "tps": ()})
    assert req.tensor_sizes(moe=True) == (1, 2) and req.tensor_sizes(moe=False) == (1, 2, 4, 8)
    ok, refused = candidates(req)
    assert {(p["tp"], p["ep"], p["dp"]) for p in ok} == {(1, 4, 4), (2, 4, 2)}
    assert all(p["sequence_parallel"] == (p["tp"] > 1) for p in ok)
    assert any(r["tp"] == 2 and r["ep"] == 3 and "must be a multiple of tp x cp" in r["reason"] for r in refused)
    assert evaluate(next(p for p in ok if p["tp"] == 2))["step_time_s"] > 0


def test_a_plan_runs_combined_1f1b_with_two_chunks_over_a_pipeline_and_one_without():
    """Megatron-Core's expert-parallel overlap as a candidate schedule: v = 2 model chunks per rank
    where there is a pipeline (Megatron runs it only inside its interleaved pipeline), none on one
    rank."""
    from sim.planner import virtual_stages
    assert (virtual_stages("combined-1f1b", 1), virtual_stages("combined-1f1b", 4)) == (None, 2)
    assert (virtual_stages("interleaved-1f1b", 4), virtual_stages("1f1b", 4)) == (2, None)
    ok, _ = candidates(PlanRequest(**{**TINY, "pps": (1, 4), "eps": (4,), "schedules": ("combined-1f1b",)}))
    assert {(p["pp"], run_spec(p).chunks) for p in ok} == {(1, None), (4, 2)}
    row = evaluate(next(p for p in ok if p["pp"] == 4))
    assert row["step_time_s"] > 0
