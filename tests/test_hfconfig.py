"""sim.training.model.hfconfig: models read from Hugging Face config.json files, their published sizes, and every
refusal in one line naming the file and the field."""
import dataclasses
import json

import pytest

from sim.training.model.hfconfig import MODEL_TYPES, ModelConfigError, model_name
from sim.training.model.params import attention_params, dense_mlp_params, expert_params, layer_params
from sim.training.model.specs import load_config_model, load_model, model_from_config

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


COMMON = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, vocab_size=1000, intermediate_size=512)
MLA = dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=64, kv_lora_rank=32,
           qk_nope_head_dim=64, v_head_dim=64, qk_rope_head_dim=16)


def fields_of(m) -> dict:
    return {k: v for k, v in dataclasses.asdict(m).items()}


def test_every_field_of_a_minimal_deepseek_config():
    """Fields left out take the defaults DeepSeek's code gives them: no q compression, no shared
    expert, no dense layer, no MTP module; the name and the source are the caller's."""
    m = model_from_config({"model_type": "deepseek_v3", **COMMON, **MLA}, "v3-min", "here.json")
    got = fields_of(m)
    assert (got["name"], got["source"], got["attention"], got["head_dim"], got["rope_dim"], got["kv_lora_rank"],
            got["q_lora_rank"], got["routed_experts"], got["shared_experts"], got["topk"],
            got["expert_intermediate"], got["dense_layers"], got["mtp_modules"], got["heads"], got["vocab"]) == (
        "v3-min", "here.json", "mla", 64, 16, 32, 0, 8, 0, 2, 64, 0, 0, 4, 1000)
    full = model_from_config({"model_type": "deepseek_v3", **COMMON, **MLA, "q_lora_rank": 0, "n_shared_experts": 0,
                              "first_k_dense_replace": 0, "num_nextn_predict_layers": 0, "moe_layer_freq": 1}, "z")
    assert (full.q_lora_rank, full.shared_experts, full.dense_layers, full.mtp_modules) == (0, 0, 0, 0)
    both = model_from_config({"model_type": "deepseek_v3", **COMMON, **MLA, "first_k_dense_replace": 2,
                              "n_shared_experts": 1, "num_nextn_predict_layers": 1, "q_lora_rank": 48}, "x")
    assert (both.dense_layers, both.dense_intermediate, both.shared_experts, both.mtp_modules, both.q_lora_rank) == (
        2, 512, 1, 1, 48)


@pytest.mark.parametrize("field", ["q_lora_rank", "n_shared_experts", "first_k_dense_replace",
                                   "num_nextn_predict_layers"])
def test_deepseek_counts_may_be_zero_but_not_negative(field):
    with pytest.raises(ModelConfigError, match=rf"^c.json: {field} must be an integer in \[0, 10,000,000\], got -1$"):
        model_from_config({"model_type": "deepseek_v3", **COMMON, **MLA, field: -1}, "x", "c.json")


def test_deepseek_refusals_read_whole():
    with pytest.raises(ModelConfigError) as info:
        model_from_config({"model_type": "deepseek_v2", **COMMON, **MLA, "moe_layer_freq": 2}, "x", "c.json")
    assert str(info.value) == ("c.json: moe_layer_freq 2 cannot be costed: the chunk model has dense layers only "
                               "before the MoE layers; allowed: 1")
    with pytest.raises(ModelConfigError) as info:
        model_from_config({"model_type": "deepseek_v2", **COMMON, **MLA, "v_head_dim": 32}, "x", "c.json")
    assert str(info.value) == ("c.json: qk_nope_head_dim 64 differs from v_head_dim 32; the chunk model costs one "
                               "head size for keys and values")


def test_every_field_of_a_gpt2_config():
    m = model_from_config({"model_type": "gpt2", "n_embd": 256, "n_layer": 3, "n_head": 8, "vocab_size": 500,
                           "resid_pdrop": 0.0, "attn_pdrop": 0.0, "embd_pdrop": 0.0}, "g", "g.json")
    assert (m.name, m.source, m.layers, m.hidden, m.heads, m.head_dim, m.vocab, m.dense_layers,
            m.dense_intermediate, m.mlp_activation, m.dropout) == ("g", "g.json", 3, 256, 8, 32, 500, 3, 1024,
                                                                   "gelu", False)
    assert isinstance(m.head_dim, int)
    for k in ("resid_pdrop", "attn_pdrop", "embd_pdrop"):
        assert model_from_config({"model_type": "gpt2", "n_embd": 256, "n_layer": 3, "n_head": 8, "vocab_size": 500,
                                  k: 0.1}, "g").dropout
    assert model_from_config({"model_type": "gpt2", "n_embd": 256, "n_layer": 3, "n_head": 8, "vocab_size": 500,
                              "n_inner": 300}, "g").dense_intermediate == 300
    with pytest.raises(ModelConfigError, match=r"^g.json: resid_pdrop must be a finite number in \[0, 1\], got 1.5$"):
        model_from_config({"model_type": "gpt2", "n_embd": 256, "n_layer": 3, "n_head": 8, "vocab_size": 500,
                           "resid_pdrop": 1.5}, "g", "g.json")
    with pytest.raises(ModelConfigError) as info:
        model_from_config({"model_type": "gpt2", "n_embd": 250, "n_layer": 3, "n_head": 8, "vocab_size": 500},
                          "g", "g.json")
    assert str(info.value) == "g.json: n_embd 250 is not a multiple of n_head 8"
    with pytest.raises(ModelConfigError) as info:
        model_from_config({"model_type": "gpt2", "n_embd": 256, "n_layer": 3, "n_head": 8, "vocab_size": 500,
                           "n_inner": 2 ** 40}, "g", "g.json")
    assert str(info.value).startswith("g.json: n_inner must be an integer in [1, 10,000,000]")


def test_every_field_of_qwen_moe_configs():
    base = {"model_type": "qwen3_moe", **COMMON, "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 64}
    m = model_from_config(base, "q", "q.json")
    assert (m.name, m.source, m.routed_experts, m.topk, m.expert_intermediate, m.dense_layers, m.shared_experts,
            m.kv_heads, m.head_dim, m.attention) == ("q", "q.json", 8, 2, 64, 0, 0, 4, 64, "gqa")
    assert isinstance(m.head_dim, int)
    dense = model_from_config({**base, "mlp_only_layers": [0, 1]}, "q")
    assert (dense.dense_layers, dense.dense_intermediate) == (2, 512)
    no_shared = model_from_config({**base, "model_type": "qwen2_moe"}, "q")
    assert no_shared.shared_experts == 0
    with pytest.raises(ModelConfigError, match=r"shared_expert_intermediate_size must be an integer in \[0, "):
        model_from_config({**base, "model_type": "qwen2_moe", "shared_expert_intermediate_size": -64}, "q")
    with pytest.raises(ModelConfigError) as info:
        model_from_config({**base, "mlp_only_layers": [0, 1, 2, 3]}, "q", "q.json")
    assert str(info.value) == "q.json: mlp_only_layers covers every layer; use a dense model_type"
    assert model_from_config({**base, "mlp_only_layers": [0, 1, 2]}, "q").dense_layers == 3   # one MoE layer left
    with pytest.raises(ModelConfigError) as info:
        model_from_config({**base, "decoder_sparse_step": 2}, "q", "q.json")
    assert str(info.value) == ("q.json: decoder_sparse_step 2 (an MoE layer every few layers) cannot be costed: the "
                               "chunk model has dense layers only before the MoE layers; allowed: 1")
    with pytest.raises(ModelConfigError) as info:
        model_from_config({**base, "mlp_only_layers": [2]}, "q", "q.json")
    assert str(info.value) == ("q.json: mlp_only_layers [2] cannot be costed: the chunk model has dense layers only "
                               "before the MoE layers (allowed: [0, 1, ..., k-1])")
    with pytest.raises(ModelConfigError) as info:
        model_from_config({**base, "num_experts_per_tok": 9}, "q", "q.json")
    assert str(info.value).startswith("q.json: ") and "topk (9) exceeds routed_experts (8)" in str(info.value)


def test_sliding_windows_are_counted_per_layer_type():
    cfg = {"model_type": "mistral", **COMMON, "sliding_window": 64,
           "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]}
    assert model_from_config(cfg, "m").not_costed == (
        "sliding-window attention (window 64) on 3 of 4 layers, costed as full causal attention",)
    no_types = {"model_type": "mistral", **COMMON, "sliding_window": 64}
    assert model_from_config(no_types, "m").not_costed == (
        "sliding-window attention (window 64) on 4 of 4 layers, costed as full causal attention",)
    assert model_from_config({**no_types, "use_sliding_window": False}, "m").not_costed == ()
    assert model_from_config({**no_types, "sliding_window": None}, "m").not_costed == ()
    only_full = {**cfg, "layer_types": ["full_attention"] * 4}
    assert model_from_config(only_full, "m").not_costed == ()
    mixed = {"model_type": "llama", **COMMON, "layer_types": ["linear_attention", "full_attention",
                                                               "full_attention", "full_attention"]}
    assert model_from_config(mixed, "m").not_costed == ("linear_attention on 1 of 4 layers, costed as full causal "
                                                        "attention",)


def test_a_config_json_is_named_by_its_folder_unless_named(tmp_path):
    folder = tmp_path / "My-Model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", **COMMON}))
    assert load_config_model(folder / "config.json").name == "My-Model"
    assert load_config_model(folder / "config.json", "mine").name == "mine"
    assert load_config_model(folder / "config.json").source == str(folder / "config.json")
    with pytest.raises(ModelConfigError) as info:
        load_config_model(folder)                       # a folder, not a file
    assert str(info.value) == f"{folder}: cannot read it: Is a directory"
    with pytest.raises(ModelConfigError) as info:
        model_from_config({"model_type": "llama", **COMMON, "vocab_size": 0}, "x")
    assert str(info.value) == "config.json: vocab_size must be an integer in [1, 10,000,000], got 0"


def test_refusals_of_kinds_and_shared_experts_read_whole():
    with pytest.raises(ModelConfigError) as info:
        model_from_config({"model_type": "mamba", **COMMON}, "x", "c.json")
    assert str(info.value) == ("c.json: model_type 'mamba' is not one the chunk model can cost; supported: "
                               "llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, "
                               "gpt_oss, gpt2")
    with pytest.raises(ModelConfigError) as info:
        model_from_config({"model_type": "qwen2_moe", **COMMON, "num_experts": 8, "num_experts_per_tok": 2,
                           "moe_intermediate_size": 64, "shared_expert_intermediate_size": 100}, "x", "c.json")
    assert str(info.value) == ("c.json: shared_expert_intermediate_size 100 is not a whole multiple of "
                               "moe_intermediate_size 64: the chunk model costs shared experts of the routed "
                               "experts' size")


def test_a_gpt2_config_without_dropout_fields_has_none():
    m = model_from_config({"model_type": "gpt2", "n_embd": 256, "n_layer": 3, "n_head": 8, "vocab_size": 500}, "g")
    assert m.dropout is False


def test_the_reader_says_what_it_read_assumed_and_ignored(tmp_path, capsys):
    """A user's config.json is announced in one note: the fields read, the defaults assumed (with
    why) and the fields ignored; a shipped preset is not."""
    from sim.cli import main
    from sim.training.model.hfconfig import read_fields
    config = {"model_type": "llama", **COMMON, "rope_theta": 500000.0, "torch_dtype": "bfloat16"}
    reading = read_fields(config, "config.json")
    assert reading.read == ("model_type", "num_attention_heads", "hidden_size", "num_hidden_layers", "vocab_size",
                            "intermediate_size")
    assert reading.assumed == {"num_key_value_heads": "4 (the attention heads: no grouped-query attention)",
                               "head_dim": "64 (hidden_size / num_attention_heads)"}
    assert reading.ignored == ("rope_theta", "torch_dtype")
    assert reading.summary("c.json") == (
        "c.json: read 6 fields (model_type, num_attention_heads, hidden_size, num_hidden_layers, vocab_size, "
        "intermediate_size); assumed num_key_value_heads = 4 (the attention heads: no grouped-query attention), "
        "head_dim = 64 (hidden_size / num_attention_heads); ignored 2 (rope_theta, torch_dtype)")
    gqa = read_fields({**config, "num_key_value_heads": 2, "head_dim": 32}, "x")
    assert gqa.assumed == {} and "num_key_value_heads" in gqa.read and "head_dim" in gqa.read
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["run", "tiny", "--model", str(path), "--json"]) == 0
    err = capsys.readouterr().err
    assert f"note: {path}: read 6 fields" in err and "ignored 2 (rope_theta, torch_dtype)" in err
    assert main(["run", "tiny", "--model", "qwen3-30b-a3b", "--json"]) == 0
    assert "note:" not in capsys.readouterr().err
