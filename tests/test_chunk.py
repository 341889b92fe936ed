"""sim.moe.chunk: the chunk model's closed forms, layer split, token bytes, measured profiles."""
import pytest

from sim.moe.chunk import ChunkModel, attention_params, split_layers
from sim.moe.specs import SpecError, load_gpu, load_model, load_scenario


def test_split_layers():
    assert split_layers(61, 16) == [4] * 13 + [3] * 3
    assert sum(split_layers(61, 32)) == 61
    with pytest.raises(SpecError, match="layers \\(4\\) cannot be split over 8 pipeline stages"):
        split_layers(4, 8)


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
