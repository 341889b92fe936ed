"""sim.training.model.params: parameter counts against the published sizes of the models."""
import pytest

from sim.training.model.params import (
    ParamCount,
    attention_params,
    expert_params,
    layer_params,
    layer_tensors,
    rank_params,
    shared_params,
)
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


def test_a_gpt_layers_tensors_by_hand():
    """Megatron's GPT layer (GELU: a bias on every Linear, LayerNorm's weight and bias), in forward
    order: LayerNorm, QKV, its bias, the output projection, its bias, LayerNorm, fc1, its bias, fc2,
    its bias: 12 tensors, 13 h beyond the layer's 12 h^2 (h = 12,288)."""
    h = 12288
    tensors = layer_tensors(load_model("megatron-gpt-174.6b"), False, 1)
    assert [t.dense for t in tensors] == [h, h, 3 * h * h, 3 * h, h * h, h, h, h, 4 * h * h, 4 * h, 4 * h * h, h]
    assert all(t.expert == 0 for t in tensors)


@pytest.mark.parametrize("model,moe,ep,count,norms", [
    ("llama3-8b", False, 1, 6, 2 * 4096),                  # RMSNorm x 2, QKV, o, fused gate-up, down
    ("deepseek-v3", False, 1, 11, 7168 + 1536 + 512 + 7168),   # MLA: 4 norms, 5 projections; 2 Linears
    ("deepseek-v3", True, 64, 20, 7168 + 1536 + 512 + 7168),   # router, 4 experts x 2, shared 2
])
def test_layer_tensors_add_up_to_the_layer_and_its_norms(model, moe, ep, count, norms):
    """A SwiGLU layer's Linears (no biases) add up to layer_params; the rest is its norms' weights."""
    m = load_model(model)
    tensors = layer_tensors(m, moe, ep)
    total = sum(tensors, ParamCount(0.0, 0.0))
    want = layer_params(m, moe, ep)
    assert len(tensors) == count
    assert (total.dense - want.dense, total.expert) == (norms, pytest.approx(want.expert))
    assert sum(1 for t in tensors if t.expert) == (2 * m.routed_experts // ep if moe else 0)
