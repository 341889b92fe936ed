"""sim.moe.hfconfig: models read from Hugging Face config.json files, their published sizes, and every
refusal in one line naming the file and the field."""
import dataclasses
import json

import pytest

from sim.moe.hfconfig import MODEL_TYPES, ModelConfigError, load_config_model, model_from_config, model_name
from sim.moe.params import attention_params, dense_mlp_params, expert_params, layer_params
from sim.moe.specs import load_model

DATA = __import__("pathlib").Path(__file__).parent / "data"


def sizes(m):
    """(total, activated) parameters in billions: every layer, the embedding and the output head; the
    activated count takes each MoE layer's shared and top-k routed experts (the embedding counted as
    most model cards count it)."""
    total = sum(layer_params(m, i >= m.dense_layers, ep=1).total for i in range(m.layers)) + 2 * m.vocab * m.hidden
    moe_active = attention_params(m) + (m.shared_experts + m.topk) * expert_params(m) + m.hidden * m.routed_experts
    dense = attention_params(m) + (dense_mlp_params(m) if m.dense_layers else 0)
    active = m.dense_layers * dense + m.moe_layers * moe_active + 2 * m.vocab * m.hidden
    return total / 1e9, active / 1e9


@pytest.mark.parametrize("name,total,active", [
    ("qwen3-30b-a3b", 30.5, 3.3),        # Qwen3 model card: 30.5B total, 3.3B activated
    ("qwen3-235b-a22b", 235, 22),        # 235B total, 22B activated
    ("gpt-oss-120b", 116.8, 5.7),        # OpenAI model card: 116.8B total (5.1B active without the embedding and head)
    ("mixtral-8x22b", 141, 39),          # Mistral: 141B total, 39B active
    ("deepseek-v2", 236, 21),            # DeepSeek-V2 paper: 236B total, 21B activated
    ("llama3.1-405b", 405, 405),
])
def test_presets_read_from_config_json_have_their_published_sizes(name, total, active):
    m = load_model(name)
    assert m.source.endswith(f"{name}.json")
    t, a = sizes(m)
    assert t == pytest.approx(total, rel=0.02)
    assert a == pytest.approx(active, rel=0.05)


def test_the_deepseek_v3_config_reads_to_the_hand_written_preset():
    from_json = load_config_model(DATA / "deepseek-v3-config.json")
    preset = load_model("deepseek-v3")
    assert dataclasses.replace(from_json, name=preset.name, source=preset.source) == preset


def test_gpt_models_of_the_papers():
    """Zero Bubble Table 3 (GPT 1.5B: 22 layers, 24 heads, hidden 2304) and Megatron-LM Table 1: the
    parameter count of equation 2, P = 12 l h^2 (1 + 13/12h + (V + s)/12lh), less the position
    embeddings (V s h) the chunk model does not count."""
    zb = load_model("zb-gpt-1.5b")
    assert (zb.layers, zb.heads, zb.hidden, zb.mlp_activation, zb.dropout) == (22, 24, 2304, "gelu", True)
    assert zb.dense_intermediate == 4 * 2304
    for name, billions in (("megatron-gpt-1.7b", 1.7), ("megatron-gpt-145.6b", 145.6), ("megatron-gpt-1008b", 1008)):
        m = load_model(name)
        l, h, V = m.layers, m.hidden, m.vocab
        ours = sum(layer_params(m, False, 1).total for _ in range(l)) + V * h
        paper = 12 * l * h * h * (1 + 13 / (12 * h) + (V + 2048) / (12 * l * h)) - 2048 * h
        assert ours == pytest.approx(paper, rel=0.002)
        assert ours / 1e9 == pytest.approx(billions, rel=0.04)          # the table rounds (1.65B -> 1.7)


def test_what_the_chunk_model_does_not_cost_is_named():
    oss = load_model("gpt-oss-120b")
    assert oss.not_costed == (
        "sliding-window attention (window 128) on 18 of 36 layers, costed as full causal attention",
        "attention sinks (one learned logit per head; not costed)")
    assert load_model("qwen3-30b-a3b").not_costed == ()
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
           "vocab_size": 100, "intermediate_size": 128,
           "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"]}
    assert model_from_config(cfg, "x").not_costed == (
        "linear_attention on 2 of 4 layers, costed as full causal attention",)


def test_qwen2_moe_shared_experts_are_counted_in_expert_units(tmp_path):
    cfg = {"model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16,
           "vocab_size": 151936, "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
           "shared_expert_intermediate_size": 5632}
    m = model_from_config(cfg, "qwen1.5-moe")
    assert (m.shared_experts, m.expert_intermediate, m.dense_layers, m.kv_heads, m.head_dim) == (4, 1408, 0, 16, 128)
    cfg["shared_expert_intermediate_size"] = 5000
    with pytest.raises(ModelConfigError, match="shared_expert_intermediate_size 5000 is not a whole multiple of "
                                               "moe_intermediate_size 1408"):
        model_from_config(cfg, "q")


def test_model_names_come_from_the_folder_of_a_config_json(tmp_path):
    assert model_name(tmp_path / "Qwen3-30B-A3B" / "config.json") == "Qwen3-30B-A3B"
    assert model_name(tmp_path / "mine.json") == "mine"


BASE = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "vocab_size": 32000, "intermediate_size": 11008}


@pytest.mark.parametrize("change,pattern", [
    ({"intermediate_size": None},
     "field 'intermediate_size' is missing; the chunk model needs it for model_type 'llama'"),
    ({"hidden_size": 0}, r"hidden_size must be an integer in \[1, 10,000,000\], got 0"),
    ({"num_hidden_layers": -2}, r"num_hidden_layers must be an integer in \[1, 10,000,000\], got -2"),
    ({"vocab_size": 3.5}, r"vocab_size must be an integer"),
    ({"model_type": "mamba"}, "model_type 'mamba' is not one the chunk model can cost; supported: llama"),
    ({"model_type": None}, "model_type None is not one the chunk model can cost"),
    ({"hidden_size": 4000, "num_attention_heads": 48}, "no head_dim, and hidden_size 4000 is not a multiple of "
                                                        "num_attention_heads 48"),
    ({"layer_types": ["full_attention"]}, r"layer_types must list one entry per layer \(32\)"),
    ({"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
      "decoder_sparse_step": 2}, "decoder_sparse_step 2 .* cannot be costed"),
    ({"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
      "mlp_only_layers": [3]}, r"mlp_only_layers \[3\] cannot be costed"),
    ({"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 9, "moe_intermediate_size": 64},
     r"topk \(9\) exceeds routed_experts \(8\)"),
    ({"model_type": "deepseek_v3", "qk_nope_head_dim": 128, "v_head_dim": 64}, "qk_nope_head_dim 128 differs from "
                                                                               "v_head_dim 64"),
])
def test_bad_configs_are_one_line_naming_the_field(tmp_path, change, pattern):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in {**BASE, **change}.items() if v is not None or k == "model_type"}))
    with pytest.raises(ModelConfigError, match=pattern) as info:
        load_config_model(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_file_that_is_not_json_or_not_an_object(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama",\n')
    with pytest.raises(ModelConfigError, match="not valid JSON at line 2, column 1"):
        load_config_model(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ModelConfigError, match="expected a JSON object of model fields, got list"):
        load_config_model(bad)
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(ModelConfigError, match="not a text file"):
        load_config_model(bad)
    with pytest.raises(ModelConfigError, match="cannot read it"):
        load_config_model(tmp_path / "missing.json")


def test_every_supported_type_reads():
    common = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, vocab_size=1000, intermediate_size=512)
    extra = {"mixtral": dict(num_local_experts=8, num_experts_per_tok=2),
             "gpt_oss": dict(num_local_experts=8, num_experts_per_tok=2),
             "qwen2_moe": dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64),
             "qwen3_moe": dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64),
             "deepseek_v2": dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=64, kv_lora_rank=32,
                                 qk_nope_head_dim=64, v_head_dim=64, qk_rope_head_dim=16, first_k_dense_replace=1),
             "gpt2": dict(n_embd=256, n_layer=4, n_head=4)}
    extra["deepseek_v3"] = extra["deepseek_v2"]
    for kind in MODEL_TYPES:
        m = model_from_config({"model_type": kind, **common, **extra.get(kind, {})}, kind)
        assert m.layers == 4 and m.hidden == 256
        assert m.is_moe == (kind not in ("llama", "mistral", "qwen2", "qwen3", "gpt2"))
    v3 = model_from_config({"model_type": "deepseek_v3", **common, **extra["deepseek_v2"]}, "v3")
    assert (v3.attention, v3.q_lora_rank, v3.dense_layers, v3.mtp_modules) == ("mla", 0, 1, 0)
