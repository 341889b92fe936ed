"""sim.training.model.params: parameter counts against the published sizes of the models."""
import pytest

from sim.training.model.params import attention_params, expert_params, layer_params, rank_params, shared_params
from sim.training.model.specs import load_model


def test_gqa_attention_params_formula():
    m = load_model("llama-70b-like")
    h, H, kv, d = 8192, 64, 8, 128
    assert attention_params(m) == h * H * d + 2 * h * kv * d + H * d * h


def test_deepseek_v3_has_671b_parameters_and_37b_activated():
    """The DeepSeek-V3 report (section 4.2): 671B parameters in total, 37B activated per token (the
    main model, MTP module apart)."""
    m = load_model("deepseek-v3")
    layers = [layer_params(m, i >= m.dense_layers, ep=1).total for i in range(m.layers)]
    total = sum(layers) + 2 * m.vocab * m.hidden                   # + embedding and output head
    assert total / 1e9 == pytest.approx(671, rel=0.01)
    routed_idle = m.moe_layers * (m.routed_experts - m.topk) * expert_params(m)
    activated = total - routed_idle - m.vocab * m.hidden            # the embedding is a lookup
    assert activated / 1e9 == pytest.approx(37, abs=1.0)


def test_llama_70b_has_70b_parameters():
    m = load_model("llama-70b-like")
    total = m.layers * layer_params(m, False, 1).total + 2 * m.vocab * m.hidden
    assert total / 1e9 == pytest.approx(70.6, rel=0.01)


def test_a_rank_holds_its_share_of_the_routed_experts():
    m = load_model("deepseek-v3")
    one = rank_params(m, [4] * 13 + [3] * 3, {1}, ep=64)
    assert one.expert == pytest.approx(4 * 256 / 64 * expert_params(m))


def test_the_shared_tensors_a_rank_holds_by_hand():
    """Llama 3 8B over 4 stages: the first stage's rank holds the embedding (128,256 x 4,096), the
    last's the head, a V schedule's rank 0 both, a middle rank neither; DeepSeek-V3's last stage
    needs the embedding too (its MTP module shares it). rank_params counts each once beside the layers."""
    m, V = load_model("llama3-8b"), 128256 * 4096
    split = [8, 8, 8, 8]
    assert [shared_params(m, split, stages).total for stages in ({0}, {1}, {3}, {0, 3})] == [V, 0, V, 2 * V]
    layers = sum(layer_params(m, False, 1).total for _ in range(8))
    assert rank_params(m, split, {0, 3}, 1).total == pytest.approx(2 * layers + 2 * V)
    ds = load_model("deepseek-v3")
    assert shared_params(ds, [31, 30], {1}).total == 2 * ds.vocab * ds.hidden
