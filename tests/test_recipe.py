"""sim.training.model.recipe: what a run simulated, from its spec; the warnings beside it."""
import pytest

from sim.training.model.recipe import MFU_BOUND, recipe, recipe_line, recipe_warnings
from sim.training.model.specs import load_scenario


def test_the_recipe_is_computed_from_the_spec():
    """DeepSeek-V3 with --dp 1024 on 16,384 GPUs: GPUs = 16 x 1,024, the global batch is
    DP x M x micro-batch size = 1,024 x 120 x 1 sequences, times 4,096 tokens."""
    run = load_scenario("deepseek-v3", dp=1024)
    r = recipe(run, topology_gpus=16384)
    assert (r["gpus"], r["pp"], r["dp"], r["ep"]) == (16384, 16, 1024, 64)
    assert (r["global_batch_seqs"], r["global_batch_tokens"]) == (122880, 122880 * 4096)
    assert (r["gemm_precision"], r["memory_policy"], r["zero_stage"], r["kernels"]) == \
        ("fp8", "deepseek-v3", 1, "deepep")
    line = recipe_line(r)
    assert line.startswith("simulated: deepseek-v3 on 16,384 h800 of h800-2048 (PP16 x DP1024, EP64)")
    assert "global batch 122,880 sequences x 4,096 tokens = 503M tokens (M=120" in line
    assert recipe_warnings(r) == []


def test_kept_stage_outputs_are_named_only_when_set():
    """torch.distributed.pipelining's kept outputs (``stage_outputs_kept``) change the memory, so
    the recipe says so; off (the default) it adds no field and no words."""
    off = recipe(load_scenario("tiny"))
    on = recipe(load_scenario("tiny").with_(stage_outputs_kept=True))
    assert "stage_outputs_kept" not in off and on["stage_outputs_kept"] is True
    assert "ZeRO-1, stage outputs kept to the step's end; " in recipe_line(on)
    assert "stage outputs" not in recipe_line(off)


def test_deepspeeds_per_tensor_zero3_is_named_only_when_set():
    """A per-tensor ZeRO-3 (DeepSpeed's of 2021) changes the step, so the recipe names it beside the
    ZeRO stage; one collective a layer (the default) adds no field and no words."""
    off = recipe(load_scenario("tiny", zero_stage=3))
    on = recipe(load_scenario("tiny", zero_stage=3, zero3_collectives="per-tensor"))
    assert "zero3_collectives" not in off and on["zero3_collectives"] == "per-tensor"
    assert "ZeRO-3 per tensor, each gather blocking; " in recipe_line(on)
    assert "ZeRO-3; " in recipe_line(off)


def test_micro_batch_size_enters_the_global_batch():
    r = recipe(load_scenario("tiny", microbatch_size=3))
    assert r["global_batch_seqs"] == 4 * 8 * 3 and r["global_batch_tokens"] == 4 * 8 * 3 * 512


def test_idle_gpus_and_a_high_mfu_are_warned_with_both_counts():
    r = recipe(load_scenario("tiny", pp=2, dp=4, ep=4), topology_gpus=16)
    idle, = recipe_warnings(r)
    assert "the layout uses 8 of the 16 GPUs of topology 'h800-16'" in idle
    assert recipe_warnings(r, mfu=MFU_BOUND) == [idle]                        # at the bound: no warning
    high = recipe_warnings(r, mfu=0.91, gemm_efficiency=0.6)[1]
    assert high.startswith("MFU 0.91 is above 0.7") and "GEMMs at 0.6 of the bf16 peak" in high


@pytest.mark.parametrize("precision, peak_tflops", [("bf16", 989), ("fp8", 1979)])
def test_mfu_is_counted_against_the_peak_of_the_precision_that_runs(precision, peak_tflops):
    """MFU = model FLOPs of the step / (GPUs x the peak of the GEMMs' precision x step time):
    H800's dense BF16 989 TFLOPS, FP8 1,979 (FP8 GEMMs are not counted against the BF16 peak)."""
    from sim.training.scenario import Scenario
    from sim.training.step import simulate_step
    run = load_scenario("tiny", schedule="1f1b", gemm_precision=precision)
    res = simulate_step(run)
    flops = Scenario(run).chunk.model_flops_per_microbatch() * run.microbatches * run.dp
    assert res.mfu == pytest.approx(flops / (run.gpus * peak_tflops * 1e12 * res.step_time_s), rel=1e-3)
    assert res.to_json()["recipe"]["gemm_precision"] == precision
    assert {"pp", "ep", "dp"} <= set(res.to_json())
    summary = res.summary()
    assert summary["global_batch_tokens"] == 4 * 8 * 512 and summary["gemm_precision"] == precision


def test_the_recipe_line_and_warnings_read_whole():
    r = recipe(load_scenario("tiny", pp=2, dp=4, ep=4), topology_gpus=16, compute="kernels sm90, flash3")
    assert recipe_line(r) == (
        "simulated: tiny-moe on 8 h800 of h800-16 (PP2 x DP4, EP4); global batch 32 sequences x 512 tokens = "
        "0.0164M tokens (M=8 micro-batches of 1 per replica); GEMMs bf16, all-to-all wire fp8/bf16; memory policy "
        "none, ZeRO-1; compute: kernels sm90, flash3; communication kernels ideal on 20 SMs, communication measured; "
        "routing balanced (every expert its expected share)")
    skewed = recipe(load_scenario("tiny", routing_skew=1.2, routing_seed=7, comm_sms=24))
    assert recipe_line(skewed).endswith("communication kernels ideal on 24 SMs, communication measured; routing skewed "
                                        "1.2 (Zipf-like expert popularity, seed 7)")
    assert "compute:" not in recipe_line(recipe(load_scenario("tiny")))
    assert recipe_warnings(r, mfu=0.75) == [
        "the layout uses 8 of the 16 GPUs of topology 'h800-16' (PP2 x DP4); the rest stay idle and carry no traffic",
        "MFU 0.75 is above 0.7: it assumes no kernel launch gaps or per-token work beyond the FLOPs model; "
        "published runs reach 0.2-0.6"]
    assert recipe_warnings(r, mfu=0.75, gemm_efficiency=0.5)[1] == (
        "MFU 0.75 is above 0.7: it assumes GEMMs at 0.5 of the bf16 peak, no kernel launch gaps or per-token work "
        "beyond the FLOPs model; published runs reach 0.2-0.6")
    assert recipe_warnings(recipe(load_scenario("tiny"), topology_gpus=16)) == []


def test_the_batch_in_millions_of_tokens_rounds_from_1e6():
    r = {**recipe(load_scenario("tiny")), "global_batch_tokens": 1_235_000}
    assert "= 1.24M tokens (M=8" in recipe_line(r)
