"""sim.training.model.activations: what a layer keeps, tensor by tensor, worked by hand for
DeepSeek-V3's MLA attention and its dense and MoE MLPs (hidden 7,168; 128 heads of 128 with a
64-wide rotary part; query latent 1,536, key-value latent 512; dense FFN 18,432, experts 2,048,
256 routed, top-8, one shared) under each caching recipe."""
import pytest

from sim.training.model.activations import (
    BF16,
    E5M6,
    FP8,
    FP32,
    IDS,
    ActivationRecipe,
    attention_tensors,
    head_tensors,
    linear_shapes,
    mlp_tensors,
    mtp_extra_tensors,
    weight_grad_bytes,
)
from sim.training.model.specs import load_model

DSV3 = load_model("deepseek-v3")
PLAIN = ActivationRecipe()                         # no recomputation, fused attention, BF16 caches
TE_FP8 = ActivationRecipe(fp8=True)                # Transformer Engine's FP8 caches
DEEPSEEK = ActivationRecipe(deepseek=True)         # DeepSeek-V3's caches


def listed(tensors):
    return [(t.name, t.elements, t.bytes_per_element, t.split) for t in tensors]


def test_mla_attention_keeps_every_latent_and_the_up_projections_in_bf16():
    assert listed(attention_tensors(DSV3, PLAIN, 4096)) == [
        ("attn.norm_input", 7168, BF16, "sp"),
        ("attn.down_input", 7168, BF16, "sp"),          # the norm's output, input of both down-projections
        ("attn.q_latent", 1536, BF16, "sp"),
        ("attn.q_up_input", 1536, BF16, "sp"),
        ("attn.kv_latent", 512, BF16, "sp"),
        ("attn.k_rope", 64, BF16, "sp"),
        ("attn.kv_up_input", 512, BF16, "sp"),
        ("attn.q", 128 * (128 + 64), BF16, "tp"),       # 24,576: each head's 128 + 64 rotary
        ("attn.k", 128 * (128 + 64), BF16, "tp"),
        ("attn.v", 128 * 128, BF16, "tp"),
        ("attn.logsumexp", 128, FP32, "tp"),            # fused: one per head, no s x s scores
        ("attn.out_proj_input", 128 * 128, BF16, "tp"),
    ]


def test_mla_attention_under_fp8_caches_keeps_the_linear_inputs_in_fp8():
    got = {name: (el, b) for name, el, b, _ in listed(attention_tensors(DSV3, TE_FP8, 4096))}
    for name in ("attn.down_input", "attn.q_up_input", "attn.kv_up_input", "attn.out_proj_input"):
        assert got[name][1] == FP8
    for name in ("attn.norm_input", "attn.q_latent", "attn.kv_latent", "attn.k_rope", "attn.q", "attn.k", "attn.v"):
        assert got[name][1] == BF16
    assert got["attn.kv_up_input"] == (512, FP8)


def test_mla_attention_under_deepseeks_caches_recomputes_the_up_projections():
    """The DeepSeek-V3 report (3.2.3, 3.3): the Linear inputs FP8 (the down-projections' and up-
    projections' inputs recomputed from the cached latents here: not kept), the up-projections'
    outputs recomputed, the attention output cached in E5M6."""
    assert listed(attention_tensors(DSV3, DEEPSEEK, 4096)) == [
        ("attn.norm_input", 7168, BF16, "sp"),
        ("attn.q_latent", 1536, BF16, "sp"),
        ("attn.kv_latent", 512, BF16, "sp"),
        ("attn.k_rope", 64, BF16, "sp"),
        ("attn.logsumexp", 128, FP32, "tp"),
        ("attn.out_proj_input", 128 * 128, E5M6, "tp"),
    ]


def test_unfused_attention_keeps_the_scores_per_head_and_token():
    got = {name: (el, b) for name, el, b, _ in listed(attention_tensors(DSV3, PLAIN._replace(flash=False), 4096))}
    assert got["attn.softmax"] == (128 * 4096, BF16)
    assert "attn.logsumexp" not in got
    assert "attn.softmax_dropout_mask" not in got                  # DeepSeek-V3 has no dropout


def test_a_dense_swiglu_mlp_by_recipe():
    assert listed(mlp_tensors(DSV3, False, PLAIN, 0)) == [
        ("mlp.norm_input", 7168, BF16, "sp"),
        ("mlp.input", 7168, BF16, "sp"),
        ("mlp.swiglu_input", 2 * 18432, BF16, "tp"),
        ("mlp.down_input", 18432, BF16, "tp"),
    ]
    assert listed(mlp_tensors(DSV3, False, DEEPSEEK, 0)) == [
        ("mlp.norm_input", 7168, BF16, "sp"),
        ("mlp.swiglu_input", 2 * 18432, FP8, "tp"),     # SwiGLU input cached in FP8, its output recomputed
    ]
    assert listed(mlp_tensors(DSV3, False, TE_FP8, 0))[1:] == [
        ("mlp.input", 7168, FP8, "sp"),
        ("mlp.swiglu_input", 2 * 18432, BF16, "tp"),    # what the elementwise kernel needs stays BF16
        ("mlp.down_input", 18432, FP8, "tp"),
    ]


@pytest.mark.parametrize("expert_tp", [1, 2])
def test_an_moe_mlp_under_deepseeks_caches(expert_tp):
    """8 routed (token, expert) pairs a token; under expert TP the GPU holds its group's dispatched
    copies (expert_tp times its own) and the same bytes of intermediate activations."""
    assert listed(mlp_tensors(DSV3, True, DEEPSEEK, 8, expert_tp)) == [
        ("mlp.norm_input", 7168, BF16, "sp"),
        ("router.scores", 256, FP32, "sp"),
        ("router.topk_weights", 8, FP32, "sp"),
        ("router.topk_indices", 8, IDS, "sp"),
        ("shared.swiglu_input", 2 * 2048, FP8, "tp"),
        ("routed.input", 7168 * 8 * expert_tp, FP8, "sp"),
        ("routed.swiglu_input", 2 * 2048 * 8, FP8, "tp"),
    ]


def test_an_moe_mlp_in_bf16_keeps_the_swiglu_outputs():
    got = listed(mlp_tensors(DSV3, True, PLAIN, 8))
    assert ("mlp.input", 7168, BF16, "sp") in got
    assert ("shared.down_input", 2048, BF16, "tp") in got
    assert ("routed.down_input", 2048 * 8, BF16, "tp") in got
    assert ("routed.input", 7168 * 8, BF16, "sp") in got


def test_full_recomputation_keeps_only_the_layer_input():
    full = ActivationRecipe(full=True)
    assert listed(attention_tensors(DSV3, full, 4096)) == [("attn.norm_input", 7168, BF16, "sp")]
    assert mlp_tensors(DSV3, True, full, 8) == []


def test_the_head_keeps_its_norm_input_and_the_logits_softmax_under_every_recipe():
    """The head stays in BF16 (its input is the norm's output, recomputed under DeepSeek's caches);
    the cross-entropy keeps the softmax of 129,280 logits in FP32, split over TP."""
    for recipe in (PLAIN, TE_FP8, ActivationRecipe(full=True)):
        assert listed(head_tensors(DSV3, recipe)) == [("head.norm_input", 7168, BF16, "sp"),
                                                      ("head.input", 7168, BF16, "sp"),
                                                      ("head.softmax", 129280, FP32, "tp")]
    assert listed(head_tensors(DSV3, DEEPSEEK)) == [("head.norm_input", 7168, BF16, "sp"),
                                                    ("head.softmax", 129280, FP32, "tp")]


def test_an_mtp_modules_norms_and_projection_input():
    assert listed(mtp_extra_tensors(DSV3, PLAIN)) == [("mtp.norm_inputs", 2 * 7168, BF16, "sp"),
                                                      ("mtp.proj_input", 2 * 7168, BF16, "sp")]
    assert listed(mtp_extra_tensors(DSV3, TE_FP8))[1] == ("mtp.proj_input", 2 * 7168, FP8, "sp")
    assert listed(mtp_extra_tensors(DSV3, DEEPSEEK)) == [("mtp.norm_inputs", 2 * 7168, BF16, "sp")]


def test_an_moe_layers_linears_by_hand():
    """(name, input, output elements per token, input is the attention output) of a DeepSeek-V3
    MoE layer, 8 routed pairs a token."""
    assert linear_shapes(DSV3, True, 8) == [
        ("q_kv_down", 7168, 1536 + 512 + 64, False),     # query latent, key-value latent, shared rotary key
        ("q_up", 1536, 128 * (128 + 64), False),
        ("kv_up", 512, 128 * 2 * 128, False),
        ("out_proj", 128 * 128, 7168, True),
        ("router_and_shared_up", 7168, 256 + 2 * 2048, False),
        ("shared_down", 2048, 7168, False),
        ("routed_up", 7168 * 8, 2 * 2048 * 8, False),
        ("routed_down", 2048 * 8, 7168 * 8, False),
    ]
    assert linear_shapes(DSV3, True, 8, expert_tp=2)[-2:] == [("routed_up", 7168 * 8 * 2, 2 * 2048 * 8, False),
                                                             ("routed_down", 2048 * 8, 7168 * 8 * 2, False)]


def test_a_deferred_weight_gradient_keeps_each_linears_input_and_output_gradient():
    """Per token, the sums of the Linears above: inputs 92,160 + 16,384 (the attention output) and
    outputs 168,256 elements."""
    assert weight_grad_bytes(DSV3, True, PLAIN, 8) == pytest.approx((92160 + 16384 + 168256) * BF16)
    assert weight_grad_bytes(DSV3, True, DEEPSEEK, 8) == pytest.approx(92160 * FP8 + 16384 * E5M6 + 168256 * FP8)
    # TP 2: a column-parallel Linear keeps its whole input and half its output gradient, a row-parallel
    # one (out_proj, shared_down, routed_down) half its input and its whole output gradient ...
    assert weight_grad_bytes(DSV3, True, PLAIN, 8, tp=2) == pytest.approx(211104 * BF16)
    # ... and with sequence parallelism the h-wide sides are split too: exactly half of one GPU's
    assert weight_grad_bytes(DSV3, True, PLAIN, 8, tp=2, sequence_parallel=True) == pytest.approx(138400 * BF16)


def test_two_shared_experts_widen_the_shared_linears():
    import dataclasses
    m = dataclasses.replace(DSV3, shared_experts=2)
    rows = {name: (i, o) for name, i, o, _ in linear_shapes(m, True, 8)}
    assert rows["router_and_shared_up"] == (7168, 256 + 2 * 2048 * 2)
    assert rows["shared_down"] == (2048 * 2, 7168 * 2)
    got = listed(mlp_tensors(m, True, PLAIN, 8))
    assert ("shared.swiglu_input", 2 * 2048 * 2, BF16, "tp") in got and ("shared.down_input", 2048 * 2, BF16, "tp") in got


def test_the_gradients_a_layers_backward_holds_by_hand():
    """Llama 3 8B (h 4,096, SwiGLU of 14,336): the output's and the residual's gradients and the MLP's
    three intermediate ones, BF16: (2 x 4,096 + 3 x 14,336) x 2 = 102,400 bytes a token; under TP 2
    with sequence parallelism both halve, without it only the intermediate ones. DeepSeek-V3's MoE
    layer (h 7,168, experts of 2,048, top-8 and one shared): (2 x 7,168 + 3 x 2,048 x 9) x 2."""
    from dataclasses import replace

    from sim.training.model.activations import backward_gradient_tensors, bytes_per_token
    m = load_model("llama3-8b")
    grads = backward_gradient_tensors(m, False, 0.0)
    assert bytes_per_token(grads) == 102_400
    assert bytes_per_token(grads, 2, True) == 51_200
    assert bytes_per_token(grads, 2, False) == (2 * 4_096 + 3 * 14_336 / 2) * 2
    gelu = replace(m, mlp_activation="gelu")
    assert bytes_per_token(backward_gradient_tensors(gelu, False, 0.0)) == (2 * 4_096 + 2 * 14_336) * 2
    ds = load_model("deepseek-v3")
    assert bytes_per_token(backward_gradient_tensors(ds, True, 8.0)) == (2 * 7_168 + 3 * 2_048 * 9) * 2
