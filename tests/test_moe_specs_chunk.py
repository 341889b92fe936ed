"""Specs (presets, validation) and the chunk model's closed forms."""
import pytest

from sim.moe.chunk import ChunkModel, attention_params, split_layers
from sim.moe.specs import (SpecError, gpu_names, load_gpu, load_model, load_scenario, model_names,
                           scenario_names)
from sim.moe.scenario import Scenario


def test_presets_exist():
    assert {"deepseek-v3", "llama-70b-like", "mixtral-8x7b-like", "tiny-moe"} <= set(model_names())
    assert {"h800", "h100", "h200", "a100"} <= set(gpu_names())
    assert {"deepseek-v3", "tiny"} <= set(scenario_names())
    ds = load_model("deepseek-v3")
    assert (ds.layers, ds.hidden, ds.routed_experts, ds.topk, ds.expert_intermediate) == (61, 7168, 256, 8, 2048)
    assert load_gpu("h200").hbm_gb == 141
    run = load_scenario("deepseek-v3")
    assert (run.pp, run.ep, run.dp, run.microbatches, run.seq_len, run.comm_sms) == (16, 64, 128, 120, 4096, 20)


@pytest.mark.parametrize("overrides,pattern", [
    (dict(ep=48), "ep \\(48\\) must divide dp \\(128\\)"),
    (dict(dispatch_precision="fp4"), "dispatch_precision must be one of fp8, bf16"),
    (dict(gemm_efficiency=1.5), "gemm_efficiency must be in \\(0, 1\\]"),
    (dict(pp=0), "RunSpec.pp must be an integer > 0"),
])
def test_bad_run_fields(overrides, pattern):
    with pytest.raises(SpecError, match=pattern):
        Scenario(load_scenario("deepseek-v3", **overrides))


def test_unknown_presets_list_valid_ones():
    with pytest.raises(SpecError, match="valid models: deepseek-v3"):
        load_model("gpt-5")
    with pytest.raises(SpecError, match="valid GPUs: a100, h100, h200, h800"):
        load_gpu("b200")
    with pytest.raises(SpecError, match="not a preset"):
        load_scenario("nope")


def test_scenario_file_with_unknown_field(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("model: tiny-moe\ngpu: h800\ntopology: h800-16\npp: 4\nep: 4\ndp: 4\nschedule: 1f1b\n"
                 "microbatches: 8\nseq_len: 256\nbogus: 3\n")
    with pytest.raises(SpecError, match="unknown field\\(s\\) bogus"):
        load_scenario(str(p))


def test_split_layers():
    assert split_layers(61, 16) == [4] * 13 + [3] * 3
    assert sum(split_layers(61, 32)) == 61
    with pytest.raises(SpecError, match="layers \\(4\\) cannot be split over 8 pipeline stages"):
        split_layers(4, 8)


def test_step_refuses_bad_layouts():
    with pytest.raises(SpecError, match="cannot be split over 16"):
        Scenario(load_scenario("tiny", pp=8, dp=2, ep=2, microbatches=16, schedule="dualpipev"))
    with pytest.raises(SpecError, match="has 16"):
        Scenario(load_scenario("tiny", dp=8, ep=4))
    with pytest.raises(SpecError, match="must divide the 8 GPUs per node"):
        Scenario(load_scenario("tiny", ep=3, dp=3))


def test_gqa_attention_params_formula():
    m = load_model("llama-70b-like")
    h, H, kv, d = 8192, 64, 8, 128
    assert attention_params(m) == h * H * d + 2 * h * kv * d + H * d * h


def test_layer_costs_follow_zero_bubble_table():
    """W = forward GEMMs; I = forward GEMMs + 2x attention core; MLP I = W = F."""
    m, g, r = load_model("tiny-moe"), load_gpu("h800"), load_scenario("tiny")
    c = ChunkModel(m, g, r, 4)
    layer = c.stage_layers[1][0]
    core = layer.attn_f - layer.attn_w
    assert layer.attn_i == pytest.approx(layer.attn_w + 2 * core)
    assert layer.mlp_i == layer.mlp_w == layer.mlp_f
    T = 512
    proj = 2 * T * attention_params(m)
    assert layer.attn_w == pytest.approx(proj / (989e12 * 0.6))        # tiny runs GEMMs in BF16
    assert core == pytest.approx(T * 512 * 4 * (64 + 64) / (989e12 * 0.4))
    routed = 2 * T * 2 * 3 * 256 * 128
    other = 2 * T * (1 * 3 * 256 * 128 + 256 * 16)
    assert layer.mlp_f == pytest.approx((routed + other) / (989e12 * 0.6))
    assert layer.routed_share == pytest.approx(routed / (routed + other))
    assert c.stage_layers[0][0].moe is False and layer.moe is True


def test_token_bytes():
    c = ChunkModel(load_model("deepseek-v3"), load_gpu("h800"), load_scenario("deepseek-v3"), 16)
    assert c.token_bytes("fp8") == 7168 + 4 * 56
    assert c.token_bytes("bf16") == 2 * 7168
    assert c.activation_bytes() == 4096 * 7168 * 2


def test_measured_profile_replaces_flops(tmp_path):
    p = tmp_path / "prof.csv"
    p.write_text("layer,part,seconds\nmoe,mlp_f,0.002\nmoe,attn_f,0.001\nhead,head,0.0005\n")
    run = load_scenario("tiny", profile=str(p))
    c = ChunkModel(load_model("tiny-moe"), load_gpu("h800"), run, 4)
    moe = c.stage_layers[1][0]
    assert (moe.mlp_f, moe.attn_f) == (0.002, 0.001)
    assert moe.mlp_i != 0.002                      # parts not in the profile keep the FLOPs model
    assert c.head_cost == 0.0005
    bad = tmp_path / "bad.csv"
    bad.write_text("layer,part,seconds\nmoe,mlp_x,1\n")
    with pytest.raises(SpecError, match="line 2"):
        ChunkModel(load_model("tiny-moe"), load_gpu("h800"), load_scenario("tiny", profile=str(bad)), 4)
