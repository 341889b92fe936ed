"""sim.compute.ops and sim.compute.kernels: the operator list of a layer adds up to the FLOPs formula
to the last FLOP, memory-bound kernels cost their bytes at the HBM rate plus a launch (by hand),
FP8 and unfused kernels add what they should, and the chunk model's parts are sums of the kernels."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.compute import KernelFamilyError, KernelModel, LayerShape, layer_ops
from sim.compute.device import GpuFigures
from sim.compute.ops import Op, head_ops
from sim.training.costs.chunk import ChunkModel, attention_core_flops
from sim.training.model.params import attention_params, dense_mlp_params, expert_params
from sim.training.model.specs import RunSpec, SpecError, load_gpu, load_model


def run_of(model: str, gpu: str = "h100", **changes) -> RunSpec:
    base = RunSpec(model=model, gpu=gpu, topology="h800-16", pp=1, ep=1, dp=1, schedule="1f1b", microbatches=1,
                   seq_len=2048)
    return base.with_(**changes)


def formula_flops(model, run: RunSpec, moe: bool) -> float:
    """The FLOPs model's useful FLOPs of one layer for a micro-batch: 3 (projections + MLP) + 3 core."""
    T = run.tokens_per_microbatch
    proj = 2 * T * attention_params(model)
    if moe:
        mlp = 2 * T * (model.topk * expert_params(model) + model.shared_experts * expert_params(model)
                       + model.hidden * model.routed_experts)
    else:
        mlp = 2 * T * dense_mlp_params(model)
    return 3 * (proj + mlp) + 3 * attention_core_flops(model, T, run.seq_len)


@pytest.mark.parametrize("model,changes,moe", [
    ("zb-gpt-1.5b", {}, False),                                              # GPT: GELU, learned positions
    ("zb-gpt-1.5b", {"attention_kernel": "unfused"}, False),                 # the scores in HBM
    ("llama3-8b", {"tp": 4, "cp": 2, "sequence_parallel": True}, False),     # GQA, split over 8 GPUs
    ("deepseek-v3", {"ep": 8, "dp": 8, "gemm_precision": "fp8"}, True),      # MLA, routed and shared experts
    ("qwen3-30b-a3b", {"ep": 8, "dp": 8, "tp": 2, "sequence_parallel": True, "expert_tp": 2}, True),
])
def test_the_operator_list_adds_up_to_the_flops_formula(model, changes, moe):
    """Every GEMM's and the attention core's useful FLOPs (forward, input and weight gradient), on one
    GPU, times TP x CP: the FLOPs formula's, to the last FLOP (FlashAttention's backward executes 2.5
    times the forward, of which 2 are useful; the unfused core computes the whole s x s, of which the
    causal half is useful)."""
    m = load_model(model)
    run = run_of(model, **changes)
    chunk = ChunkModel(m, load_gpu(run.gpu), run, 1)
    ops = layer_ops(chunk.layer_shape(moe))
    useful = sum(op.useful for op in ops) * run.tp * run.cp
    assert useful == pytest.approx(formula_flops(m, run, moe), rel=1e-12)
    assert chunk.layer_cost(moe).flops == pytest.approx(useful, rel=1e-12)
    assert {op.phase for op in ops} == {"f", "i", "w"} and {op.block for op in ops} == {"attn", "mlp"}


def test_a_memory_bound_kernel_is_its_bytes_at_the_hbm_rate_plus_a_launch():
    """Llama 3 8B, 2,048 tokens: the input norm reads and writes 2,048 x 4,096 BF16 elements,
    33.6 MB, at 70% of the H100's 3.35 TB/s, plus 3 us; its backward moves 1.5 times that."""
    chunk = ChunkModel(load_model("llama3-8b"), load_gpu("h100"), run_of("llama3-8b"), 1)
    costs = {c.op.name: c for c in chunk.kernel_costs(False) if c.op.block == "attn"}
    nbytes = 2 * 2048 * 4096 * 2
    assert costs["norm"].op.bytes == nbytes
    assert costs["norm"].seconds == pytest.approx(3e-6 + nbytes / (3.35e12 * 0.7), rel=1e-12)
    assert costs["norm.grad"].seconds == pytest.approx(3e-6 + 1.5 * nbytes / (3.35e12 * 0.7), rel=1e-12)
    assert costs["norm"].bound == "hbm"
    assert costs["norm"].seconds == 3.0 * 1e-6 + nbytes / (3.35 * 1e12 * 0.7)                 # to the last bit
    launch = ChunkModel(load_model("llama3-8b"), load_gpu("h100"), run_of("llama3-8b", kernel_launch_us=10.0), 1)
    assert {c.op.name: c for c in launch.kernel_costs(False)}["norm"].seconds == pytest.approx(
        10e-6 + nbytes / (3.35e12 * 0.7), rel=1e-12)


def test_a_weight_gradient_adds_into_the_main_gradient_by_hand():
    """Megatron's gradient-accumulation fusion: a weight-gradient GEMM reads the main gradient and
    writes the sum back, ``2 x grad_bytes`` an output element (8 for FP32, 4 for BF16); off, autograd
    writes a BF16 gradient once (2). Qwen3-30B-A3B at EP 8, 2,048 tokens: each GPU's 16 experts get
    1,024 token copies each (2,048 x 8 x 8 / 128); their first GEMM's weight gradient, 16 x (2,048 x
    1,536) outputs over k = 1,024, moves 16 (1,024 x 2,048 + 1,024 x 1,536) BF16 inputs and 16 x 2,048
    x 1,536 x 8 output bytes, 520 MB, at 70% of 3.35 TB/s: 222 us plus the GEMM's fixed time, HBM-bound
    (its 103 GFLOP take less). The forward and input-gradient GEMMs keep 2 bytes."""
    from sim.compute.gemm import gemm_seconds
    model, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    run = run_of("qwen3-30b-a3b", ep=8, dp=8)
    assert (run.wgrad_out_bytes, run.with_(grad_bytes=2.0).wgrad_out_bytes) == (8.0, 4.0)
    assert run.with_(gradient_accumulation_fusion=False).wgrad_out_bytes == 2.0
    costs = {c.op.name: c for c in ChunkModel(model, gpu, run, 1).kernel_costs(True)}
    wgrad = costs["experts1.wgrad"]
    assert wgrad.op.shape == (16.0, 2048, 1536.0, 1024.0) and wgrad.op.out_bytes == 8.0
    assert {costs[n].op.out_bytes for n in ("experts1", "experts1.dgrad", "qkv", "qkv.dgrad")} == {2.0}
    assert {c.op.out_bytes for c in costs.values() if c.op.kind == "gemm" and c.op.phase == "w"} == {8.0}
    nbytes = 16 * (1024 * 2048 + 1024 * 1536) * 2.0 + 16 * 2048 * 1536 * 8.0
    fit = ChunkModel(model, gpu, run, 1).kernels.gemm_fit("bf16")
    assert wgrad.seconds == pytest.approx(fit.fixed_us * 1e-6 + nbytes / (3.35e12 * 0.7), rel=1e-12)
    assert wgrad.bound == "hbm"
    kw = dict(sms=132, gpu_sms=132, in_bytes=2.0, hbm_bytes_per_s=3.35e12 * 0.7)
    assert wgrad.seconds == gemm_seconds(fit, 2048, 1536.0, 1024.0, 16.0, out_bytes=8.0, **kw)
    bf16 = {c.op.name: c for c in ChunkModel(model, gpu, run.with_(gradient_accumulation_fusion=False),
                                                 1).kernel_costs(True)}["experts1.wgrad"]
    assert bf16.seconds == gemm_seconds(fit, 2048, 1536.0, 1024.0, 16.0, out_bytes=2.0, **kw) < wgrad.seconds
    # a long-k GEMM stays compute-bound whatever its output moves: the dense model's QKV at 2,048 tokens
    dense = ChunkModel(load_model("llama3-8b"), gpu, run_of("llama3-8b"), 1)
    qkv = {c.op.name: c for c in dense.kernel_costs(False)}["qkv.wgrad"]
    assert qkv.op.out_bytes == 8.0 and qkv.bound == "compute"
    # the weight gradient runs at the GEMM's precision, the head's moves what the run says, in the head's block
    fp8 = {c.op.name: c.op for c in ChunkModel(model, gpu, run.with_(gemm_precision="fp8"), 1).kernel_costs(True)}
    assert fp8["experts1.wgrad"].precision == fp8["experts1"].precision == "fp8"
    head = {o.name: o for o in head_ops(128, 128, 32, 1000, 2, wgrad_out_bytes=8.0)}["head.wgrad"]
    assert (head.out_bytes, head.block, head.phase) == (8.0, "head", "w")
    assert {o.name: o for o in head_ops(128, 128, 32, 1000, 2)}["head.wgrad"].out_bytes == 2.0
    with pytest.raises(SpecError, match="gradient_accumulation_fusion must be true or false, got 'yes'"):
        run.with_(gradient_accumulation_fusion="yes")


def test_a_gradient_written_then_added_costs_an_add_kernel_by_hand():
    """Without the fusion (Megatron-LM of 2021, PyTorch's FSDP2 accumulating unsharded) the GEMM writes a
    BF16 gradient and a kernel of its own adds it into the main gradient: 2 + 2 x grad_bytes bytes an
    element (10 at FP32), in M - 1 of M micro-batches. Llama 3 8B at 16 micro-batches: the QKV weight,
    6,144 x 4,096 elements, adds 10 x 15/16 bytes each, 236 MB, at 70% of 3.35 TB/s plus one 3 us launch;
    the routed experts of Qwen3-30B-A3B at EP 8 (16 weights a GEMM on a GPU) launch 16 adds. None with the
    fusion, with one micro-batch, or under ZeRO-3 whose gradients are reduce-scattered each micro-batch."""
    run = run_of("llama3-8b", microbatches=16, gradient_accumulation_fusion=False)
    assert run.wgrad_out_bytes == 2.0 and run.wgrad_add_bytes == 10.0 * 15 / 16
    assert run.with_(grad_bytes=2.0).wgrad_add_bytes == 6.0 * 15 / 16
    assert run.with_(gradient_accumulation_fusion=True).wgrad_add_bytes == 0.0
    assert run.with_(microbatches=1).wgrad_add_bytes == 0.0
    assert run.with_(zero_stage=3).wgrad_add_bytes == 0.0
    assert run.with_(zero_stage=3, fsdp_grads="unsharded").wgrad_add_bytes == run.wgrad_add_bytes
    costs = {c.op.name: c for c in ChunkModel(load_model("llama3-8b"), load_gpu("h100"), run, 1).kernel_costs(False)}
    add = costs["qkv.grad_add"]
    nbytes = 4096 * 6144 * 10.0 * 15 / 16
    assert (add.op.block, add.op.phase, add.op.kind, add.op.kernels, add.op.bytes) == ("attn", "w", "memory", 1, nbytes)
    assert add.op.shape == (4096 * 6144,)
    assert add.seconds == pytest.approx(3e-6 + nbytes / (3.35e12 * 0.7), rel=1e-12) and add.bound == "hbm"
    adds = [n for n, c in costs.items() if n.endswith(".grad_add")]
    assert sorted(adds) == sorted(f"{n}.grad_add" for n, c in costs.items() if c.op.kind == "gemm" and
                                  c.op.phase == "f")
    fused = ChunkModel(load_model("llama3-8b"), load_gpu("h100"), run.with_(gradient_accumulation_fusion=True), 1)
    assert not [c for c in fused.kernel_costs(False) if c.op.name.endswith(".grad_add")]
    moe = run_of("qwen3-30b-a3b", ep=8, dp=8, microbatches=4, gradient_accumulation_fusion=False)
    experts = {c.op.name: c for c in ChunkModel(load_model("qwen3-30b-a3b"), load_gpu("h100"), moe,
                                                1).kernel_costs(True)}["experts1.grad_add"]
    assert experts.op.kernels == 16 and experts.op.bytes == 16 * 2048 * 1536 * 10.0 * 3 / 4 and experts.op.routed
    head = {o.name: o for o in head_ops(128, 128, 32, 1000, 2, wgrad_add_bytes=10.0)}
    assert head["head.grad_add"].bytes == 32 * 500 * 10.0 and "head.grad_add" not in {o.name for o in head_ops(
        128, 128, 32, 1000, 2)}


def test_the_parts_are_sums_of_their_kernels():
    chunk = ChunkModel(load_model("qwen3-30b-a3b"), load_gpu("h100"), run_of("qwen3-30b-a3b", ep=8, dp=8), 1)
    costs = chunk.kernel_costs(True)
    layer = chunk.layer_cost(True)
    for block in ("attn", "mlp"):
        for phase in "fiw":
            total = sum(c.seconds for c in costs if c.op.block == block and c.op.phase == phase)
            assert getattr(layer, f"{block}_{phase}") == pytest.approx(total, rel=1e-12)
    routed = sum(c.seconds for c in costs if c.op.name.startswith("experts"))
    mlp = layer.mlp_f + layer.mlp_i + layer.mlp_w
    assert layer.routed_share == pytest.approx(routed / mlp, rel=1e-12) and 0 < layer.routed_share < 1
    assert layer.core_f == sum(c.seconds for c in costs if c.op.name == "attn_core")


def test_fp8_casts_and_unfused_kernels_add_work():
    m, g = load_model("llama3-8b"), load_gpu("h100")
    bf16 = ChunkModel(m, g, run_of("llama3-8b"), 1).kernel_costs(False)
    fp8 = ChunkModel(m, g, run_of("llama3-8b", gemm_precision="fp8"), 1).kernel_costs(False)
    names = {c.op.name for c in fp8}
    assert "out_proj.cast" in names and "qkv.cast" not in names          # the norm's output is cast in the norm
    assert {"qkv.dgrad_cast", "qkv.x_transpose"} <= names and not any("cast" in c.op.name for c in bf16)
    unfused = ChunkModel(m, g, run_of("llama3-8b", fusion="unfused"), 1).kernel_costs(False)
    fused_mem = sum(c.op.bytes for c in bf16 if c.op.kind == "memory")
    assert sum(c.op.bytes for c in unfused if c.op.kind == "memory") > fused_mem
    assert sum(c.op.kernels for c in unfused) > sum(c.op.kernels for c in bf16)


def test_the_unfused_core_writes_its_scores():
    """Megatron's unfused core on A100 at 1,024 tokens (the Zero Bubble GPT 6.2B's 3 sequences): the
    soft-max reads and writes 3 x 32 heads x 1,024^2 BF16 scores; dropout adds its one-byte mask."""
    m, g = load_model("zb-gpt-6.2b"), load_gpu("a100")
    run = run_of("zb-gpt-6.2b", gpu="a100", seq_len=1024, microbatch_size=3, attention_kernel="unfused")
    costs = {c.op.name: c for c in ChunkModel(m, g, run, 1).kernel_costs(False)}
    scores = 3 * 32 * 1024 * 1024
    assert costs["attn_softmax"].op.bytes == scores * 4 and costs["attn_dropout"].op.bytes == scores * 5
    assert costs["attn_scores"].op.shape == (96, 1024, 1024, 128)
    flash = ChunkModel(m, g, run.with_(attention_kernel="flash"), 1).layer_cost(False)
    assert ChunkModel(m, g, run, 1).layer_cost(False).attn_f > flash.attn_f


def test_recomputation_reruns_the_policys_forward_kernels():
    m, g = load_model("deepseek-v3"), load_gpu("h800")
    base = run_of("deepseek-v3", gpu="h800", ep=8, dp=8, gemm_precision="fp8")
    costs = {(c.op.block, c.op.name): c.seconds for c in ChunkModel(m, g, base, 1).kernel_costs(True)}
    layers = {p: ChunkModel(m, g, base.with_(memory_policy=p), 1).layer_cost(True)
              for p in ("none", "selective", "full", "deepseek-v3")}
    assert (layers["none"].attn_r, layers["none"].mlp_r) == (0.0, 0.0)
    assert layers["selective"].attn_r == costs[("attn", "attn_core")] and layers["selective"].mlp_r == 0.0
    assert layers["full"].attn_r == layers["full"].attn_f and layers["full"].mlp_r == layers["full"].mlp_f
    attn = sum(costs[("attn", n)] for n in ("norm", "q_norm", "kv_norm", "q_up", "kv_up", "rope"))
    mlp = sum(costs[("mlp", n)] for n in ("norm", "experts.swiglu", "shared.swiglu"))
    assert layers["deepseek-v3"].attn_r == pytest.approx(attn) and layers["deepseek-v3"].mlp_r == pytest.approx(mlp)
    assert layers["full"].flops == layers["none"].flops                      # recomputation is not useful work


def test_flat_overrides_cost_their_class_at_the_peak_share():
    chunk = ChunkModel(load_model("llama3-8b"), load_gpu("h100"), run_of("llama3-8b", gemm_efficiency=0.5,
                                                                          attention_efficiency=0.25), 1)
    costs = {c.op.name: c for c in chunk.kernel_costs(False)}
    assert costs["qkv"].seconds == costs["qkv"].op.flops / (989 * 1e12 * 0.5)             # to the last bit
    assert costs["attn_core.bwd"].seconds == costs["attn_core.bwd"].op.useful / (989 * 1e12 * 0.25)
    assert costs["qkv"].bound == "compute" and costs["attn_core.bwd"].bound == "compute"
    assert "flat efficiencies (GEMMs 0.5, attention 0.25)" in chunk.compute_label


def test_families_by_gpu_and_the_generic_fallback():
    assert KernelModel(load_gpu("h800").figures()).family.name == "sm90"
    assert KernelModel(load_gpu("a100").figures()).family.name == "sm80"
    own = GpuFigures("my-gpu", 100, {"bf16": 494.5, "fp8": 989.0, "mxfp8": 0.0}, 2.0)
    generic = KernelModel(own)
    assert generic.generic and generic.family.name == "sm90" and "generic" in generic.label
    h100 = KernelModel(load_gpu("h100").figures())
    assert generic.family.gemm["bf16"].rate_tflops == pytest.approx(h100.family.gemm["bf16"].rate_tflops / 2)
    with pytest.raises(KernelFamilyError, match="kernel_family 'sm99' is not a fitted family"):
        KernelModel(own._replace(family="sm99"))
    with pytest.raises(KernelFamilyError, match="has no fitted mxfp8 GEMMs"):
        KernelModel(load_gpu("h100").figures()).gemm_fit("mxfp8")


def test_a_family_gpu_at_a_lower_peak_runs_its_fits_at_the_ratio_of_the_peaks():
    """An H100 NVL (835 TFLOPS BF16) naming ``sm90``, fitted at the SXM's 989: a compute-bound GEMM's
    time past its fixed part and the attention core's rate, by hand, at 835 / 989 of the SXM's; a
    member at the family's own peak is the family unscaled."""
    h100 = KernelModel(load_gpu("h100").figures())
    nvl = KernelModel(GpuFigures("h100-nvl", 132, {"bf16": 835.0, "fp8": 1670.0}, 3.35, family="sm90"))
    same = KernelModel(GpuFigures("h100-mine", 132, {"bf16": 989.0, "fp8": 1979.0}, 3.35, family="sm90"))
    assert h100.peak_factor == same.peak_factor == 1.0 and nvl.peak_factor == 835.0 / 989.0
    assert not nvl.generic and "sm90 (at 0.844 of its rates: h100-nvl's BF16 peak)" in nvl.label
    assert same.label == h100.label
    for precision in ("bf16", "fp8"):
        assert nvl.gemm_fit(precision).rate_tflops == h100.gemm_fit(precision).rate_tflops * (835.0 / 989.0)
        assert nvl.gemm_fit(precision).fixed_us == h100.gemm_fit(precision).fixed_us
    gemm = Op("fc1", "mlp", "f", "gemm", 2.0 * 16384 ** 3, 2.0 * 16384 ** 3, shape=(1, 16384, 16384, 16384))
    fixed = h100.gemm_fit("bf16").fixed_us * 1e-6
    [slow], [fast], [alike] = nvl.costs([gemm]), h100.costs([gemm]), same.costs([gemm])
    assert slow.bound == fast.bound == "compute" and alike.seconds == fast.seconds
    assert (slow.seconds - fixed) / (fast.seconds - fixed) == pytest.approx(989.0 / 835.0, rel=1e-12)
    assert nvl.attention.rate("fwd", True, 8192, 128) == pytest.approx(
        h100.attention.rate("fwd", True, 8192, 128) * 835.0 / 989.0, rel=1e-12)


def test_a_second_attention_kernel_at_a_share_of_the_peak_follows_the_gpus_peak(tmp_path):
    """A family's second attention kernel (``also``) fitted as a share of the peak (``per_peak``) runs
    at that share of each GPU's own BF16 peak: 1 / 989 of it is the fit itself on an H100, 835 / 989
    of it on a GPU of 835 TFLOPS."""
    import copy

    import yaml

    from sim.compute.kernels import load_families
    fams = copy.deepcopy(load_families())
    fams["sm90"]["attention"]["also"]["flash2"]["per_peak"] = 1.0 / 989.0
    path = tmp_path / "fams.yaml"
    path.write_text(yaml.safe_dump({"sm90": fams["sm90"]}))
    shipped = KernelModel(load_gpu("h100").figures(), attention_kernel="flash2").attention
    h100 = KernelModel(load_gpu("h100").figures(), families=str(path), attention_kernel="flash2").attention
    nvl = KernelModel(GpuFigures("h100-nvl", 132, {"bf16": 835.0}, 3.35, family="sm90"), families=str(path),
                      attention_kernel="flash2").attention
    assert h100.rate("bwd", False, 4096, 128) == pytest.approx(shipped.rate("bwd", False, 4096, 128), rel=1e-12)
    assert nvl.rate("bwd", False, 4096, 128) == pytest.approx(shipped.rate("bwd", False, 4096, 128) * 835 / 989,
                                                              rel=1e-12)


def test_the_flops_model_is_still_there():
    """``compute_model: flops``: GEMMs at 0.6 of the peak, no kernels, the recipe says so."""
    chunk = ChunkModel(load_model("llama3-8b"), load_gpu("h100"), run_of("llama3-8b", compute_model="flops"), 1)
    layer = chunk.layer_cost(False)
    T = 2048
    assert layer.attn_w == pytest.approx(2 * T * attention_params(load_model("llama3-8b")) / (989e12 * 0.6))
    assert chunk.kernels is None and chunk.compute_label.startswith("FLOPs model (GEMMs at 0.6")


def test_layer_shape_validation_by_the_spec():
    from sim.training.model.specs import SpecError
    for bad, msg in ((dict(fusion="half"), "RunSpec.fusion must be one of fused, unfused"),
                     (dict(attention_kernel="sdpa"), "RunSpec.attention_kernel must be one of flash, flash2, unfused"),
                     (dict(compute_model="roofline"), "RunSpec.compute_model must be one of kernels, flops"),
                     (dict(kernel_launch_us=-1), "kernel_launch_us")):
        with pytest.raises(SpecError, match=msg):
            run_of("llama3-8b", **bad)
    assert LayerShape(1, 1, 1, 1, 1.0, 1).norm_tokens == 1.0


def test_flash2_is_flashattention_2_where_the_family_fitted_it():
    """On Hopper ``attention_kernel: flash2`` runs the core at FlashAttention-2's fitted rate (the
    FlashAttention-3 paper's FA2 bars), slower than the family's own FlashAttention-3, with the same
    kernels and the same GEMMs; on A100 it is the family's own kernel; on Blackwell, which fitted
    none, it is refused in one line naming what is allowed."""
    fa3 = ChunkModel(load_model("llama3-8b"), load_gpu("h100"), run_of("llama3-8b", seq_len=8192), 1)
    fa2 = ChunkModel(load_model("llama3-8b"), load_gpu("h100"),
                     run_of("llama3-8b", seq_len=8192, attention_kernel="flash2"), 1)
    c3 = {c.op.name: c for c in fa3.kernel_costs(False)}
    c2 = {c.op.name: c for c in fa2.kernel_costs(False)}
    assert set(c2) == set(c3) and c2["qkv"].seconds == c3["qkv"].seconds
    h100 = KernelModel(load_gpu("h100").figures(), attention_kernel="flash2")
    op = c2["attn_core"].op
    _, s, d, causal = op.shape
    expected = h100.launch_s + op.flops / h100.family.also["flash2"].rate("fwd", bool(causal), s, d)
    assert c2["attn_core"].seconds == pytest.approx(expected, rel=1e-12)
    assert 1.2 < c2["attn_core"].seconds / c3["attn_core"].seconds < 2.5      # FA3 is 1.5-2x FA2 at 8K
    assert c2["attn_core.bwd"].seconds > c3["attn_core.bwd"].seconds
    assert "flash2" in h100.label and "flash3" in KernelModel(load_gpu("h100").figures()).label
    a100 = load_gpu("a100").figures()
    assert KernelModel(a100, attention_kernel="flash2").attention == KernelModel(a100).attention
    with pytest.raises(KernelFamilyError, match=r"attention_kernel 'flash2': kernel family sm100 has no fitted "
                                                r"flash2 attention \(allowed: flash, unfused\)"):
        KernelModel(load_gpu("b200").figures(), attention_kernel="flash2")


def test_a_kernels_cost_on_fewer_sms_its_extra_launches_and_its_bound():
    """Each class on part of the GPU (the ``sms`` a communication kernel leaves it): a GEMM at
    :func:`gemm_seconds` on those SMs, slower than on all 132; the attention core's work scaled by
    132 / 66; ``costs`` passes the SMs on. A GEMM standing for 3 launches pays 2 more. Bounds: a
    memory op whose bytes take exactly its launch is HBM-bound (1 us launch, 5e5 bytes at 1 TB/s
    x 0.5), one byte fewer launch-bound; a tiny attention call is launch-bound."""
    from sim.compute import Op
    from sim.compute.gemm import gemm_seconds
    h100 = load_gpu("h100").figures()
    k = KernelModel(h100)
    gemm = Op("g", "mlp", "f", "gemm", flops=2.0 * 4096 ** 3, shape=(1, 4096, 4096, 4096))
    fit = k.gemm_fit("bf16")
    kw = dict(gpu_sms=132, in_bytes=2.0, out_bytes=2.0, hbm_bytes_per_s=h100.hbm_tbps * 1e12 * 0.7)
    assert k.cost(gemm, sms=66).seconds == pytest.approx(gemm_seconds(fit, 4096, 4096, 4096, sms=66, **kw), rel=1e-12)
    assert k.cost(gemm, sms=66).seconds > k.cost(gemm).seconds and k.cost(gemm).bound == "compute"
    assert k.costs([gemm], sms=66) == [k.cost(gemm, sms=66)]
    three = gemm._replace(kernels=3)
    assert k.cost(three).seconds == pytest.approx(k.cost(gemm).seconds + 2 * 3e-6, rel=1e-12)
    chunk = ChunkModel(load_model("llama3-8b"), load_gpu("h100"), run_of("llama3-8b", seq_len=8192), 1)
    core = next(c.op for c in chunk.kernel_costs(False) if c.op.name == "attn_core")
    full, half = k.cost(core), k.cost(core, sms=66)
    assert half.seconds - k.launch_s == pytest.approx((full.seconds - k.launch_s) * 2, rel=1e-12)
    assert full.bound == "compute" and k.cost(core._replace(flops=1.0)).bound == "launch"
    assert k.cost(core._replace(kernels=3)).seconds == pytest.approx(full.seconds + 2 * 3e-6, rel=1e-12)
    exact = KernelModel(h100._replace(hbm_tbps=1.0), hbm_efficiency=0.5, launch_us=1.0)
    mem = Op("m", "mlp", "f", "memory", bytes=5e5, shape=(1,))
    assert exact.cost(mem).seconds == 2e-6 and exact.cost(mem).bound == "hbm"
    assert exact.cost(mem._replace(bytes=5e5 - 1)).bound == "launch"


def test_kernel_families_said_in_one_line_and_read_again_when_changed(tmp_path):
    """A missing or malformed families file and a precision the family did not fit are one line
    naming what is allowed; a file changed since it was read is read again; the attention's and
    the GEMMs' sources are the fit's."""
    import yaml

    from sim.compute import load_families
    with pytest.raises(KernelFamilyError, match=r"kernel families .*nowhere.yaml: no such file"):
        load_families(tmp_path / "nowhere.yaml")
    shipped = load_families()
    path = tmp_path / "fams.yaml"
    path.write_text(yaml.safe_dump({"sm90": shipped["sm90"]}))
    assert set(load_families(path)) == {"sm90"}
    import os
    path.write_text(yaml.safe_dump({"sm90": shipped["sm90"], "sm80": shipped["sm80"]}))
    os.utime(path, ns=(1, 10 ** 18))                   # a new stamp, whatever the clock's resolution
    assert set(load_families(path)) == {"sm90", "sm80"}
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({"sm90": {**shipped["sm90"], "attention": {"kernel": "flash3"}}}))
    with pytest.raises(KernelFamilyError, match=r"^kernel family sm90: malformed entry \('fits'\)$"):
        KernelModel(load_gpu("h100").figures(), families=str(broken))
    own = GpuFigures("my-gpu", 100, {"bf16": 494.5, "fp8": 989.0, "mxfp8": 0.0}, 2.0, family="sm99")
    with pytest.raises(KernelFamilyError, match=r"kernel_family 'sm99' is not a fitted family \(allowed: gb200, "
                                                r"sm100, sm80, sm90, sm90-deepseek-2024\)"):
        KernelModel(own)
    with pytest.raises(KernelFamilyError, match=r"has no fitted mxfp8 GEMMs \(fitted: bf16, fp8\)"):
        KernelModel(load_gpu("h100").figures()).gemm_fit("mxfp8")
    a100 = KernelModel(load_gpu("a100").figures())
    assert a100.attention.source.startswith("FlashAttention-2 (Dao 2023")
    assert KernelModel(load_gpu("h100").figures(), attention_kernel="flash2").attention.source == \
        "attention_flash_h100.csv"
    assert a100.family.source == "bf16: gemm_vidur_a100.csv, gemm_mamf.csv"
    h100 = KernelModel(load_gpu("h100").figures()).family.source
    assert h100 == ("bf16: gemm_xla_sm90_bf16.csv, gemm_vidur_h100.csv, gemm_mamf.csv; "
                    "fp8: gemm_deepgemm_h800_fp8.csv, gemm_mamf.csv")


def test_unfused_kernels_follow_their_kind_in_the_experts_and_the_head():
    """Eager PyTorch's pieces (ops.UNFUSED): the routed experts' SwiGLU runs as SwiGLU's 3 kernels
    moving 5/3 its fused bytes, the loss as cross-entropy's 4 kernels moving twice (hand-worked:
    128 tokens, top-2 of 8 experts of width 64, hidden 32, vocabulary 1,000 over TP 2)."""
    from sim.compute.ops import head_ops, mlp_ops
    shape = dict(hidden=32, heads=4, kv_heads=4, head_dim=8, tokens=128, seq_len=128, moe=True, routed_experts=8,
                 expert_intermediate=64, topk=2)
    fused = {o.name: o for o in mlp_ops(LayerShape(**shape))}
    eager = {o.name: o for o in mlp_ops(LayerShape(**shape, fusion="unfused"))}
    rows = 128 * 2                                            # tokens x top-k on this GPU (EP 1)
    assert fused["experts.swiglu"].bytes == (2 * rows * 64 + rows * 64) * 2 and fused["experts.swiglu"].kernels == 1
    assert (eager["experts.swiglu"].kernels, eager["experts.swiglu"].bytes) == (3, fused["experts.swiglu"].bytes * 5 / 3)
    head = {o.name: o for o in head_ops(128, 128, 32, 1000, 2, "unfused")}
    assert (head["cross_entropy"].kernels, head["cross_entropy"].bytes) == (4, 128 * 8 * 1000 / 2 * 2.0)
    assert {o.name: o for o in head_ops(128, 128, 32, 1000, 2)}["cross_entropy"].kernels == 1


def test_a_layers_pieces_by_hand_fused_and_eager():
    """A 32-wide layer of 128 tokens, MLP width 64, 4 heads of 8 (hand-worked): each memory-bound
    piece's bytes, and under eager PyTorch its kernels and bytes as ops.UNFUSED says for its kind
    (norm 4 and x2, GELU 2 and x1.5, SwiGLU 3 and x5/3); FP8's input casts fused into the norm
    and the activation; the kernels' names; the fused core's shape (tokens, seq_len, head_dim,
    causal 1); the unfused core's attention dropout moving 4 x 128^2 scores x 2.5 x 2 bytes both ways."""
    from sim.compute.ops import attention_ops, embedding_ops, head_ops, mlp_ops
    base = dict(hidden=32, heads=4, kv_heads=4, head_dim=8, tokens=128, seq_len=128, dense_intermediate=64)
    for activation, piece, read, kernels, factor in (("gelu", "fc.gelu", 1, 2, 1.5), ("swiglu", "fc.swiglu", 2, 3, 5 / 3)):
        fused = {o.name: o for o in mlp_ops(LayerShape(**base, mlp_activation=activation))}
        eager = {o.name: o for o in mlp_ops(LayerShape(**base, mlp_activation=activation, fusion="unfused"))}
        assert fused[piece].bytes == (read * 128 * 64 + 128 * 64) * 2 and fused[piece].kernels == 1
        assert (eager[piece].kernels, eager[piece].bytes) == (kernels, fused[piece].bytes * factor), activation
        assert fused["norm"].bytes == 2 * 128 * 32 * 2 and (eager["norm"].kernels, eager["norm"].bytes) == \
            (4, fused["norm"].bytes * 2.0)
    for activation in ("gelu", "swiglu"):
        names = [o.name for o in mlp_ops(LayerShape(**base, precision="fp8", mlp_activation=activation))]
        assert not any(n in names for n in ("fc1.cast", "fc2.cast")) and {"fc1.dgrad_cast", "fc1.x_transpose"} <= \
            set(names), activation
    assert [o.name for o in head_ops(128, 128, 32, 1000, 2)] == [
        "final_norm", "head", "cross_entropy", "cross_entropy.grad", "head.dgrad", "final_norm.grad", "head.wgrad"]
    assert {o.name: o.kernels for o in head_ops(128, 128, 32, 1000, 2, "unfused")}["final_norm"] == 4
    assert [o.name for o in embedding_ops(128, 32)] == ["embedding", "embedding.wgrad"]
    core = [o for o in attention_ops(LayerShape(**base)) if o.kind == "attention"]
    assert [o.shape for o in core] == [(128, 128, 8, 1)] * 2
    unfused = {o.name: o for o in attention_ops(LayerShape(**base, attention_kernel="unfused", dropout=True))}
    assert unfused["attn_dropout"].bytes == unfused["attn_dropout.grad"].bytes == 4 * 128 * 128 * 2.5 * 2


def test_beside_a_communication_kernel_memory_bound_work_gets_the_hbm_it_leaves():
    """``hbm_share`` h of HBM taken by a communication kernel's copies: a memory op moves its
    bytes at (1 - h) of the rate (5e5 bytes at 1 TB/s x 0.5 x 0.75 = 1.333 us, plus its 1 us
    launch); a GEMM's memory-bound floor likewise, its compute not; the attention core not at all.
    Flat efficiencies run on fewer SMs proportionally slower. A share outside [0, 1) is refused."""
    from sim.compute import Op
    from sim.compute.gemm import gemm_seconds
    h100 = load_gpu("h100").figures()
    exact = KernelModel(h100._replace(hbm_tbps=1.0), hbm_efficiency=0.5, launch_us=1.0)
    mem = Op("m", "mlp", "f", "memory", bytes=5e5, shape=(1,))
    assert exact.cost(mem, hbm_share=0.25).seconds == pytest.approx(1e-6 + 5e5 / (0.5e12 * 0.75), rel=1e-12)
    assert exact.cost(mem, hbm_share=0.0) == exact.cost(mem)
    assert exact.costs([mem], 66, 0.25) == [exact.cost(mem, 66, 0.25)]
    k = KernelModel(h100)
    thin = Op("g", "mlp", "f", "gemm", flops=2.0 * 16 * 4096 * 4096, shape=(1, 16, 4096, 4096))   # HBM-bound
    kw = dict(gpu_sms=132, in_bytes=2.0, out_bytes=2.0, hbm_bytes_per_s=h100.hbm_tbps * 1e12 * 0.7 * 0.5)
    assert k.cost(thin, hbm_share=0.5).seconds == pytest.approx(gemm_seconds(k.gemm_fit("bf16"), 16, 4096, 4096,
                                                                             sms=132, **kw), rel=1e-12)
    fixed = k.gemm_fit("bf16").fixed_us * 1e-6              # all but the fit's fixed time takes twice as long
    assert k.cost(thin, hbm_share=0.5).seconds - fixed == pytest.approx(2 * (k.cost(thin).seconds - fixed), rel=1e-12)
    square = Op("g", "mlp", "f", "gemm", flops=2.0 * 8192 ** 3, shape=(1, 8192, 8192, 8192))    # compute-bound
    assert k.cost(square, hbm_share=0.5).seconds == k.cost(square).seconds
    chunk = ChunkModel(load_model("llama3-8b"), load_gpu("h100"), run_of("llama3-8b", seq_len=8192), 1)
    core = next(c.op for c in chunk.kernel_costs(False) if c.op.name == "attn_core")
    assert k.cost(core, hbm_share=0.5) == k.cost(core)
    flat = KernelModel(h100, gemm_efficiency=0.5, attention_efficiency=0.4)
    assert flat.cost(square, sms=66).seconds == pytest.approx(2 * flat.cost(square).seconds, rel=1e-12)
    assert flat.cost(core, sms=66).seconds == pytest.approx(2 * flat.cost(core).seconds, rel=1e-12)
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="hbm_share"):
            k.cost(mem, hbm_share=bad)


def test_each_part_knows_how_much_longer_it_runs_beside_a_communication_kernel():
    """With ``beside_comm`` (20 SMs, 18% of HBM) each layer part's ratio is its kernels costed on
    112 SMs at 82% of the HBM rate over the same kernels alone, recomputation included; every
    ratio at least 1 (fewer SMs and less HBM never make a kernel faster); none without a
    communication kernel, in the FLOPs model, or for a measured part."""
    model, gpu = load_model("qwen3-30b-a3b"), load_gpu("h100")
    run = run_of("qwen3-30b-a3b", ep=8, dp=8, memory_policy="selective")
    chunk = ChunkModel(model, gpu, run, 1, beside_comm=(20, 0.18))
    alone = chunk.kernel_costs(True)
    beside = chunk.kernels.costs([c.op for c in alone], 112, 0.18)
    layer = chunk.layer_cost(True)
    for block in ("attn", "mlp"):
        for phase in "fiw":
            a = sum(c.seconds for c in alone if (c.op.block, c.op.phase) == (block, phase))
            b = sum(c.seconds for c in beside if (c.op.block, c.op.phase) == (block, phase))
            assert layer.beside_ratio(f"{block}_{phase}") == pytest.approx(b / a, rel=1e-12)
    ratios = dict(layer.beside)
    assert set(ratios) == {"attn_f", "attn_i", "attn_w", "mlp_f", "mlp_i", "mlp_w", "attn_r"}   # no MLP rerun
    assert all(r >= 1.0 for r in ratios.values()) and max(ratios.values()) > 1.1
    assert ChunkModel(model, gpu, run, 1).layer_cost(True).beside == ()
    flops = ChunkModel(model, gpu, run.with_(compute_model="flops"), 1, beside_comm=(20, 0.18))
    assert flops.layer_cost(True).beside == ()
    assert layer.beside_ratio("mlp_r") == 0.0
    # a layer with an extra GEMM (an MTP module's projection) is costed at its own shape
    mtp = chunk.layer_cost(True, extra_gemm=2.0 * model.hidden ** 2)
    shape = chunk.layer_shape(True, 2.0 * model.hidden ** 2)
    alone = chunk.kernels.costs(layer_ops(shape))
    beside = chunk.kernels.costs(layer_ops(shape), 112, 0.18)
    f = [(a.seconds, b.seconds) for a, b in zip(alone, beside) if (a.op.block, a.op.phase) == ("attn", "f")]
    assert mtp.beside_ratio("attn_f") == pytest.approx(sum(b for _, b in f) / sum(a for a, _ in f), rel=1e-12)
    assert mtp.beside_ratio("attn_f") != layer.beside_ratio("attn_f")
    # a fully recomputed layer reruns its whole forward, at the forward's ratio
    full = ChunkModel(model, gpu, run.with_(memory_policy="full"), 1, beside_comm=(20, 0.18)).layer_cost(True)
    assert full.beside_ratio("attn_r") == full.beside_ratio("attn_f") and full.beside_ratio("mlp_r") == \
        full.beside_ratio("mlp_f")
    # SMs alone (kernels whose copies take no HBM) or HBM alone each give ratios of their own
    sms_only = ChunkModel(model, gpu, run, 1, beside_comm=(20, 0.0)).layer_cost(True)
    hbm_only = ChunkModel(model, gpu, run, 1, beside_comm=(0, 0.25)).layer_cost(True)
    assert all(r >= 1.0 for _, r in sms_only.beside) and all(r >= 1.0 for _, r in hbm_only.beside)
    assert all(sms_only.beside_ratio(p) > 1.0 for p in ("attn_f", "attn_i", "attn_w", "mlp_f", "mlp_i"))
    assert hbm_only.beside_ratio("mlp_f") > 1.0
    # the experts' weight gradients, added into the FP32 main gradient (8 bytes an element), are bound by
    # HBM at 1,024 tokens an expert: fewer SMs leave them as they are, less HBM slows them
    assert sms_only.beside_ratio("mlp_w") == 1.0 and hbm_only.beside_ratio("mlp_w") > 1.0


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 100), st.integers(0, 30), st.floats(0.0, 0.8), st.floats(0.0, 0.1),
       st.sampled_from(["qwen3-30b-a3b", "llama3-8b"]))
def test_more_taken_by_a_communication_kernel_never_makes_a_part_faster(sms, more_sms, share, more_share, name):
    """Property: every part beside a communication kernel takes at least as long as alone, and
    holding more SMs or taking more HBM never shortens it (fewer SMs: no fewer waves; less HBM: a
    slower memory floor)."""
    model, gpu = load_model(name), load_gpu("h100")
    run = run_of(name, ep=8, dp=8) if model.is_moe else run_of(name)
    moe = model.is_moe
    few = ChunkModel(model, gpu, run, 1, beside_comm=(sms, share)).layer_cost(moe)
    most = ChunkModel(model, gpu, run, 1, beside_comm=(min(sms + more_sms, 131), share + more_share)).layer_cost(moe)
    for part, ratio in few.beside:
        assert ratio >= 1.0 - 1e-12 and most.beside_ratio(part) >= ratio - 1e-12
