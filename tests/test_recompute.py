"""sim.training.model.recompute and the memory it leads to: Megatron-Core's recompute knobs, each module's
memory saved and time added by hand for a GPT and an MoE layer, fused attention's saved bytes,
the fixed terms, properties (memory monotone in micro-batch size and sequence length, never below
the parameters' share), and bad input in one line."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.training.costs.chunk import ChunkModel
from sim.training.model.activations import BF16, FP8, FP32, ActivationRecipe, bytes_per_token, layer_tensors
from sim.training.model.memory import CUDA_CONTEXT_GB, FRAGMENTATION, NCCL_GB
from sim.training.model.recompute import Recompute, recompute_of
from sim.training.model.specs import ModelSpec, RunSpec, SpecError, load_gpu, load_model
from sim.training.scenario import Scenario


def gpt(h=1024, a=16):
    return ModelSpec(name="gpt", layers=4, hidden=h, heads=a, head_dim=h // a, dense_layers=4,
                     dense_intermediate=4 * h, mlp_activation="gelu", dropout=True)


def recipe(modules=(), full=False, attention="flash", fp8=False):
    rc = Recompute("full" if full else ("selective" if modules else None), tuple(modules))
    return ActivationRecipe.of(rc, full, attention, fp8, False)


def test_fused_attention_keeps_the_log_sum_exp_not_the_scores_by_hand():
    """A GPT layer (h 1024, 16 heads, dropout): unfused keeps 34 + 5as/h bytes per token and h; fused
    keeps the 34 (q, k, v, the attention output, the dropout mask...) and a FP32 log-sum-exp per head
    (4a), whatever the sequence."""
    m, s = gpt(), 4096
    h, a = 1024, 16
    unfused = bytes_per_token(layer_tensors(m, False, recipe(attention="unfused"), s, 0))
    fused = bytes_per_token(layer_tensors(m, False, recipe(), s, 0))
    assert unfused == pytest.approx(h * (34 + 5 * a * s / h))
    assert fused == pytest.approx(34 * h + 4 * a)
    assert bytes_per_token(layer_tensors(m, False, recipe(), 2 * s, 0)) == fused      # no s x s term


@pytest.mark.parametrize("module,freed", [
    ("core_attn", 4 * 16),                                  # the log-sum-exp (fused attention)
    ("layernorm", 2 * 1024 * BF16),                         # the two norms' outputs (the QKV and MLP inputs)
    ("mlp", 2 * 4096 * BF16),                               # the GELU's input and the down-projection's input
])
def test_each_module_frees_its_tensors_in_a_gpt_layer(module, freed):
    m = gpt()
    base = bytes_per_token(layer_tensors(m, False, recipe(), 2048, 0))
    assert base - bytes_per_token(layer_tensors(m, False, recipe((module,)), 2048, 0)) == pytest.approx(freed)


def test_moe_modules_free_by_hand():
    """tiny-moe (h 256, 16 experts of 128, top 2, one shared expert): moe_act frees the routed
    SwiGLU outputs (2 x 128 BF16 per token), shared_experts the shared expert's SwiGLU input and
    output (3 x 128 BF16), moe everything inside the block but its input: router scores (16 FP32),
    top-2 weights (FP32) and indices (int64), the two dispatched copies (2 x 256 BF16), their SwiGLU
    inputs and outputs (2 x 3 x 128 BF16) and the shared expert's."""
    m = load_model("tiny-moe")
    base = bytes_per_token(layer_tensors(m, True, recipe(), 512, 2.0))
    freed = {mod: base - bytes_per_token(layer_tensors(m, True, recipe((mod,)), 512, 2.0))
             for mod in ("moe_act", "shared_experts", "moe")}
    assert freed["moe_act"] == pytest.approx(2 * 128 * BF16)
    assert freed["shared_experts"] == pytest.approx(3 * 128 * BF16)
    assert freed["moe"] == pytest.approx(16 * FP32 + 2 * FP32 + 2 * 8 + 2 * 256 * BF16 + 2 * 3 * 128 * BF16
                                         + 3 * 128 * BF16)


def test_transformer_engines_fp8_caches_keep_linear_inputs_in_fp8():
    """FP8 GEMMs (outside DeepSeek's recipe): the QKV, output-projection, MLP-up and MLP-down inputs
    in FP8 with 1x128 scales instead of BF16; what elementwise kernels need stays BF16."""
    m = gpt()
    bf16 = bytes_per_token(layer_tensors(m, False, recipe(), 2048, 0))
    fp8 = bytes_per_token(layer_tensors(m, False, recipe(fp8=True), 2048, 0))
    linear_inputs = 1024 + 1024 + 1024 + 4096
    assert bf16 - fp8 == pytest.approx(linear_inputs * (BF16 - FP8))


def run_of(**changes) -> RunSpec:
    return RunSpec(**{**dict(model="llama3-8b", gpu="h100", topology="h100-1024", pp=4, dp=2, ep=1, schedule="1f1b",
                             microbatches=8, seq_len=4096), **changes})


def test_recompute_modules_add_the_kernels_they_rerun():
    """layernorm reruns the two norms; mlp the up-projection and the activation; core_attn the
    attention core; full recomputation the whole forward of the layers it covers (block: the first
    recompute_num_layers of each stage)."""
    m, g = load_model("llama3-8b"), load_gpu("h100")
    chunk = ChunkModel(m, g, run_of(), 4)
    costs = {(c.op.block, c.op.name): c.seconds for c in chunk.kernel_costs(False)}
    layer = {mods: ChunkModel(m, g, run_of(recompute_modules=mods), 4).layer_cost(False)
             for mods in (("layernorm",), ("mlp",), ("core_attn",))}
    assert layer[("layernorm",)].attn_r == costs[("attn", "norm")] and layer[("layernorm",)].mlp_r == costs[("mlp", "norm")]
    assert layer[("mlp",)].mlp_r == pytest.approx(costs[("mlp", "fc1")] + costs[("mlp", "fc.swiglu")])
    assert layer[("core_attn",)].attn_r == costs[("attn", "attn_core")]
    block = ChunkModel(m, g, run_of(recompute_granularity="full", recompute_method="block", recompute_num_layers=2), 4)
    rs = [c.attn_r + c.mlp_r for c in block.stage_layers[0]]
    assert rs[:2] == [block.stage_layers[0][0].forward] * 2 and rs[2:] == [0.0] * (len(rs) - 2)


def test_full_recomputation_stores_one_input_per_group_and_a_working_set():
    """Uniform full recomputation in groups of 4 keeps one layer input per group of a stage's 8
    layers (2 instead of 8) and adds the group's rematerialised activations as a working set."""
    one = Scenario(run_of(recompute_granularity="full")).memory
    four = Scenario(run_of(recompute_granularity="full", recompute_num_layers=4)).memory
    assert four[0].activations_gb < one[0].activations_gb
    working = {name: gb for name, gb in four[0].fixed}["recompute working set"]
    assert working == pytest.approx(4 * {name: gb for name, gb in one[0].fixed}["recompute working set"])
    assert "recompute working set" not in {name for name, _ in Scenario(run_of()).memory[0].fixed}


def test_the_fixed_terms_by_hand():
    """Llama 3 8B at PP4 x DP2 on H100: the CUDA context; NCCL for the DP group and the two pipeline
    neighbours; the last rank's BF16 logits of one micro-batch (4,096 x 128,256 x 2 bytes);
    fragmentation, 2% of all the rest."""
    mem = Scenario(run_of()).memory
    last = dict(mem[-1].fixed)
    assert last["CUDA context"] == CUDA_CONTEXT_GB and last["NCCL"] == pytest.approx(3 * NCCL_GB)
    assert last["logits"] == pytest.approx(4096 * 128256 * 2 / 1e9)
    rest = mem[-1].total_gb - last["fragmentation"]
    assert last["fragmentation"] == pytest.approx(FRAGMENTATION * rest)
    assert "logits" not in dict(mem[0].fixed)
    flat = Scenario(run_of(memory_reserve_gb=4.0)).memory
    assert flat[0].fixed == () and flat[0].reserve_gb == 4.0


@settings(max_examples=25, deadline=None)
@given(mbs=st.integers(1, 4), seq=st.sampled_from([1024, 2048, 4096, 8192]),
       policy=st.sampled_from(["none", "selective", "full"]), attention=st.sampled_from(["flash", "unfused"]))
def test_memory_grows_with_the_batch_and_the_sequence_and_never_falls_below_the_parameters(mbs, seq, policy,
                                                                                          attention):
    base = run_of(memory_policy=policy, attention_kernel=attention, microbatch_size=mbs, seq_len=seq)
    mem = Scenario(base).memory
    more_mbs = Scenario(base.with_(microbatch_size=mbs + 1)).memory
    more_seq = Scenario(base.with_(seq_len=2 * seq)).memory
    for a, b, c in zip(mem, more_mbs, more_seq):
        assert b.total_gb >= a.total_gb and c.total_gb >= a.total_gb
        assert a.total_gb >= a.params_gb + a.grads_gb + a.optimizer_gb


@pytest.mark.parametrize("changes,message", [
    (dict(recompute_modules=("core_attn", "attention")), r"recompute_modules: unknown module\(s\) \['attention'\]"),
    (dict(recompute_granularity="partial"), "recompute_granularity must be one of selective, full"),
    (dict(recompute_method="uniform"), "apply to recompute_granularity full"),
    (dict(recompute_granularity="full", recompute_method="stride"), "recompute_method must be one of uniform, block"),
    (dict(recompute_granularity="full", recompute_modules=("mlp",)), "applies to recompute_granularity selective"),
    (dict(recompute_granularity="full", recompute_num_layers=0), "recompute_num_layers must be an integer"),
])
def test_bad_recompute_settings_are_one_line(changes, message):
    with pytest.raises(SpecError, match=message):
        run_of(**changes)


def test_recompute_num_layers_above_a_stage_is_refused():
    with pytest.raises(SpecError, match=r"recompute_num_layers \(9\) is above the 8 layers of the smallest stage"):
        Scenario(run_of(recompute_granularity="full", recompute_method="block", recompute_num_layers=9))


def test_named_policies_are_recipes_of_the_knobs():
    assert recompute_of(run_of(memory_policy="selective")) == Recompute("selective", ("core_attn",))
    assert recompute_of(run_of(memory_policy="full")).granularity == "full"
    assert recompute_of(run_of(memory_policy="deepseek-v3")).modules == ("layernorm", "mla_up_proj", "moe_act")
    own = recompute_of(run_of(memory_policy="full", recompute_modules=("mlp",)))     # explicit knobs win
    assert own == Recompute("selective", ("mlp",)) and own.label == "selective recomputation of mlp"


def test_stored_inputs_per_group_round_up_and_block_stores_one_per_recomputed_layer():
    """Uniform full recomputation of 7 layers in groups of 3 keeps 3 inputs (ceil(7 / 3)), a whole
    number; block of 2 keeps the 2 recomputed layers' inputs; none keeps none."""
    uniform = Recompute("full", method="uniform", num_layers=3)
    assert uniform.stored_inputs(7) == 3 and isinstance(uniform.stored_inputs(7), int)
    assert uniform.stored_inputs(6) == 2
    assert Recompute("full", method="block", num_layers=2).stored_inputs(7) == 2
    assert Recompute(None).stored_inputs(7) == 0
