"""sim.training.model.memory and sim.training.model.activations: HBM per rank against published figures (ZeRO's Table 1,
Korthikanti et al.'s per-layer activation formulas) and a DeepSeek-V3 layer worked by hand."""
import pytest

from sim.schedules import parse_op
from sim.training.model.activations import (
    BF16,
    E5M6,
    FP8,
    FP32,
    ActivationRecipe,
    bytes_per_token,
    layer_tensors,
    weight_grad_bytes,
)
from sim.training.model.memory import activation_peak, model_state_bytes
from sim.training.model.params import ParamCount, rank_params
from sim.training.model.specs import ModelSpec, SpecError, load_model, load_scenario
from sim.training.scenario import Scenario
from sim.training.step import simulate_step


@pytest.mark.parametrize("zero,published_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.88)])
def test_zero_paper_table_1(zero, published_gb):
    """Rajbhandari et al. (SC'20), Figure 1 / Table 1: 7.5B parameters, mixed-precision Adam
    (2 + 2 + 12 bytes per parameter), 64 data-parallel GPUs."""
    w, g, o = model_state_bytes(ParamCount(7.5e9, 0.0), 64, 64, zero, 2.0, 2.0, 12.0)
    assert (w + g + o) / 1e9 == pytest.approx(published_gb, abs=0.05)


def test_expert_states_shard_over_the_gpus_that_hold_the_same_experts():
    """DeepSeek-V3 ZeRO-1: dense states over DP 128, expert states over 2,048 / (16 x 64) = 2 GPUs."""
    count = ParamCount(1e9, 4e8)
    w, g, o = model_state_bytes(count, 128, 2, 1, 2.0, 4.0, 8.0)
    assert (w, g) == (2.8e9, 5.6e9)
    assert o == pytest.approx(8.0 * (1e9 / 128 + 4e8 / 2))
    w3, g3, o3 = model_state_bytes(count, 128, 2, 3, 2.0, 4.0, 8.0)
    assert w3 == pytest.approx(2.0 * (1e9 / 128 + 4e8 / 2)) and g3 == pytest.approx(4.0 * (1e9 / 128 + 4e8 / 2))


def R(policy: str, attention: str = "unfused") -> ActivationRecipe:
    """A memory policy's recipe; unfused attention (Korthikanti et al.'s accounting) unless said."""
    return ActivationRecipe.named(policy, attention)


def gpt(h, a, dropout=True):
    """A GPT layer as Korthikanti et al. count it: MHA, a 4h GELU MLP, dropout."""
    return ModelSpec(name="gpt", layers=1, hidden=h, heads=a, head_dim=h // a, dense_layers=1,
                     dense_intermediate=4 * h, mlp_activation="gelu", dropout=dropout)


@pytest.mark.parametrize("h,a,s", [(12288, 96, 2048), (4096, 32, 4096), (1024, 16, 512)])
def test_korthikanti_per_layer_activations(h, a, s):
    """Bytes per layer with b = 1 (so per token x s): sbh(34 + 5as/h) with no recomputation,
    34 sbh with selective recomputation of the attention core, 2 sbh with full recomputation."""
    m = gpt(h, a)
    per_token = {p: bytes_per_token(layer_tensors(m, False, R(p), s, 0)) for p in ("none", "selective", "full")}
    assert per_token["none"] * s == pytest.approx(s * h * (34 + 5 * a * s / h))
    assert per_token["selective"] * s == pytest.approx(34 * s * h)
    assert per_token["full"] * s == pytest.approx(2 * s * h)


def test_deepseek_v3_moe_layer_by_hand():
    """One DeepSeek-V3 MoE layer under the deepseek-v3 policy, per token (h 7168, 128 heads of 128,
    query latent 1536, KV latent 512, RoPE 64, 256 experts, top-8, one shared expert, I_e 2048)."""
    m = load_model("deepseek-v3")
    fp8_row = lambda n: n * (1 + 4 / 128)                       # FP8 with one FP32 scale per 128
    attention = (7168 * 2            # layer input (RMSNorm input), BF16
                 + 1536 * 2          # query latent (input of its RMSNorm), BF16
                 + 512 * 2 + 64 * 2  # KV latent and the RoPE key, BF16
                 + 128 * 4           # attention log-sum-exp, FP32
                 + 128 * 128 * 1.5)  # input of the output projection, E5M6
    mlp = (7168 * 2                  # MLP RMSNorm input, BF16
           + 256 * 4 + 8 * 4 + 8 * 8  # router scores (FP32), top-8 weights (FP32) and indices (int64)
           + fp8_row(2 * 2048)       # shared expert SwiGLU inputs, FP8
           + 8 * fp8_row(7168)       # the 8 dispatched copies, FP8
           + 8 * fp8_row(2 * 2048))  # routed SwiGLU inputs, FP8
    got = bytes_per_token(layer_tensors(m, True, R("deepseek-v3", "flash"), 4096, 8.0))
    assert got == pytest.approx(attention + mlp) and got == pytest.approx(156256.0)
    assert (BF16, FP32, E5M6, FP8) == (2.0, 4.0, 1.5, 1 + 4 / 128)


def test_deferred_weight_gradient_keeps_linear_inputs_and_output_gradients():
    """GPT layer, BF16: inputs h (qkv) + h (out) + h (up) + 4h (down), outputs 3h + h + 4h + h:
    (7h + 9h) x 2 bytes = 32 h per token."""
    h = 1024
    assert weight_grad_bytes(gpt(h, 16), False, R("none"), 0) == 32 * h


def test_activation_walk_by_hand():
    """Stage bytes (kept to the backward, kept from I to W) = (10, 4): F F -> 20, I -> 14, F -> 24
    (the peak, 2 forwards held), W -> 20, B -> 10, I -> 4, W -> 0."""
    ops = [parse_op(t) for t in "F0@0 F1@0 I0@0 F2@0 W0@0 B1@0 I2@0 W2@0".split()]
    assert activation_peak(ops, [(10.0, 4.0)]) == (24.0, 2)
    # a W before the peak: F -> 10, I -> 4, W -> 0 (it frees what I kept, no forward), F F -> 20 (2 held)
    assert activation_peak([parse_op(t) for t in "F0@0 I0@0 W0@0 F1@0 F2@0".split()], [(10.0, 4.0)]) == (20.0, 2)


def test_an_overlapped_unit_frees_a_layer_as_it_adds_one():
    """Megatron-Core's combined 1F1B without a pipeline, 4 layers of 12 bytes (3 a layer): F0 -> 12;
    [F1&B0] pairs forward layer k with backward layer 3 - k, so it peaks at 12 + 3 = 15 (the pair's
    forward layer before its backward layer frees) and ends at 12; B1 -> 0. Counting the unit's
    forward whole first, as a one-layer stage, peaks at 24."""
    ops = [parse_op(t) for t in ("F0@0", "[F1@0&B0@0]", "B1@0")]
    assert activation_peak(ops, [(12.0, 5.0)], [4]) == (15.0, 2)       # a full backward frees all 12, not W's 5
    assert activation_peak(ops, [(12.0, 5.0)]) == (24.0, 2)


def test_a_ranks_memory_walks_its_overlapped_units_layer_by_layer():
    """The rank's memory hands the walk its stages' layer counts: DualPipe on the tiny scenario (2
    layers a stage), ranks 0 and 3 peak inside an F&B unit at 36.66 MB, where a stage counted as one
    layer would peak at 40.43 MB."""
    from sim.training.model.memory import stage_activation_bytes
    sc = Scenario(load_scenario("tiny", schedule="dualpipe"))
    stage_bytes, layers = stage_activation_bytes(sc.model, sc.run, sc.chunk.layers_per_stage), sc.chunk.layers_per_stage
    for mem in sc.memory:
        ops = sc.schedule.ranks[mem.rank]
        assert mem.activations_gb * 1e9 == pytest.approx(activation_peak(ops, stage_bytes, layers)[0])
    first = sc.schedule.ranks[0]
    assert activation_peak(first, stage_bytes, layers)[0] < activation_peak(first, stage_bytes)[0]


def test_an_overlapped_unit_of_unequal_stages_by_hand():
    """Stage 0: 2 layers, 10 bytes (5 a layer); stage 1: 4 layers, 8 bytes (2 a layer); 20 held
    before the unit. A forward of stage 0 beside a backward of stage 1: 2 pairs, peak 20 + 5 + (2 -
    1)(5 - 2) = 28, then the backward's 2 unpaired layers: 20 + 10 - 8 = 22 after. A forward of
    stage 1 beside a backward of stage 0: peak 20 + 2 + max(0, (2 - 1)(2 - 5)) = 22 (pair 0: +2 -5,
    pair 1: +2 -5, then the forward's 2 unpaired layers +4: 18 after)."""
    stage_bytes, layers = [(10.0, 3.0), (8.0, 1.0)], [2, 4]        # (kept to B, kept for W): a unit's B frees the first
    before = [parse_op("F0@0"), parse_op("F1@0")]
    assert activation_peak(before + [parse_op("[F2@0&B0@1]")], stage_bytes, layers) == (28.0, 3)
    assert activation_peak(before + [parse_op("[F2@1&B0@0]"), parse_op("F3@0")], stage_bytes, layers) == (28.0, 3)
    assert activation_peak(before + [parse_op("[F2@1&B0@0]")], stage_bytes, layers) == (22.0, 3)


def test_an_overlapped_unit_beside_a_one_layer_stage():
    """A stage of one layer (or none: the embedding's) pairs once. Forward of stage 0 (2 layers of 5)
    beside the backward of stage 1 (one layer, 8 bytes), 20 held: one pair, 20 + 5 = 25, then the
    forward's second layer: 20 + 10 - 8 = 22. A one-layer forward (stage 1) beside any backward adds
    its whole 8 first: 28. A stage of 0 layers counts as one."""
    stage_bytes = [(10.0, 3.0), (8.0, 1.0)]
    before = [parse_op("F0@0"), parse_op("F1@0")]
    assert activation_peak(before + [parse_op("[F2@0&B0@1]")], stage_bytes, [2, 1]) == (25.0, 3)
    assert activation_peak(before + [parse_op("[F2@1&B0@0]")], stage_bytes, [2, 1]) == (28.0, 3)
    assert activation_peak(before + [parse_op("[F2@1&B0@0]")], stage_bytes, [2, 0]) == (28.0, 3)


def test_an_overlapped_unit_at_a_tie_keeps_the_first_peak():
    """Three forwards of 8 bytes reach 24 (3 held); freed, then a forward of 12 and a one-layer unit
    [F&B] of 12 reach 24 again (2 held): the first time the peak was reached is the one reported."""
    ops = [parse_op(t) for t in ("F0@1", "F1@1", "F2@1", "B0@1", "B1@1", "B2@1", "F3@0", "[F4@0&B3@0]")]
    assert activation_peak(ops, [(12.0, 12.0), (8.0, 8.0)], [1, 1]) == (24.0, 3)


def test_dualpipe_rank_holds_the_shared_embedding_and_head_once():
    """DeepSeek-V3 (one MTP module): the last stage needs the head and, for the MTP module, the
    embedding; DualPipe's rank 0 holds stage 0 (the embedding) too, so each once."""
    m = load_model("deepseek-v3")
    layers = [4] * 13 + [3] * 3
    both = rank_params(m, layers, {0, 15}, 64).total
    apart = rank_params(m, layers, {0}, 64).total + rank_params(m, layers, {15}, 64).total
    assert apart - both == pytest.approx(m.vocab * m.hidden)          # the embedding counted once, not twice


def test_deepseek_v3_layout_fits_with_headroom():
    """The layout DeepSeek trained (PP16, EP64, DualPipe, 120 micro-batches, ZeRO-1) under its own
    memory recipe: every rank within the H800's 80 GB (85.52 GB as the driver reports it)."""
    memory = Scenario(load_scenario("deepseek-v3")).memory
    assert all(m.fits and m.headroom_gb > 0 for m in memory)
    for m in memory:                  # the fixed terms, each named, add up to the reserve
        names = [name for name, _ in m.fixed]
        assert names[:3] == ["CUDA context", "NCCL", "all-to-all buffers"] and names[-1] == "fragmentation"
        assert ("logits" in names) == (m.rank in (0, 15))     # DualPipe: the last stage on ranks 0 and 15
        assert m.reserve_gb == pytest.approx(sum(gb for _, gb in m.fixed))
    none = Scenario(load_scenario("deepseek-v3", memory_policy="none")).memory
    assert not any(m.fits for m in none)                               # storing everything does not fit


def test_memory_accounting_and_warning():
    step = Scenario(load_scenario("tiny", schedule="dualpipe"))
    one = Scenario(load_scenario("tiny", schedule="1f1b"))
    # DualPipe holds two stages per rank: about twice the parameters of a 1F1B rank holding one
    assert step.memory[1].params_gb > 1.5 * one.memory[1].params_gb
    assert step.memory[0].grads_gb == pytest.approx(2 * step.memory[0].params_gb)
    res = simulate_step(load_scenario("tiny", seq_len=65536, attention_kernel="unfused"))   # the scores stored
    assert res.warnings and "does not fit" in res.warnings[0] and "(params" in res.warnings[0]
    assert not simulate_step(load_scenario("tiny", seq_len=65536)).warnings       # fused attention keeps none


def test_reserve_must_leave_room():
    with pytest.raises(SpecError, match="memory_reserve_gb \\(90\\) must be below the 85.52 GB of HBM of h800"):
        Scenario(load_scenario("tiny", memory_reserve_gb=90)).memory
    with pytest.raises(SpecError, match="memory_reserve_gb \\(85.52\\) must be below the 85.52 GB"):
        Scenario(load_scenario("tiny", memory_reserve_gb=85.52)).memory


@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_deepseek_v3_model_states_are_sharded_over_the_right_groups(zero_stage):
    """DP128, EP64: dense parameters are replicated over the 128 GPUs of a stage, each expert over
    dp / ep = 2 of them; ZeRO-1 shards optimizer states over those groups, ZeRO-2 also gradients,
    ZeRO-3 also weights (plus two gathered layers, and the embedding and head a rank holds, FSDP2's
    root unit gathered for the step: the first stage's embedding, the last stage's head and, for its
    MTP module, the embedding). Pinned by hand for every rank of DualPipe."""
    from sim.training.model.memory import stages_held
    from sim.training.model.params import layer_params
    sc = Scenario(load_scenario("deepseek-v3", zero_stage=zero_stage))
    run = sc.run
    assert (run.dp, run.ep) == (128, 64)
    for mem, (rank, stages) in zip(sc.memory, sorted(stages_held(sc.schedule).items())):
        count = rank_params(sc.model, sc.chunk.layers_per_stage, stages, 64)
        shard = (count.dense / 128 + count.expert / 2)
        full = count.dense + count.expert
        w = run.weight_bytes * (shard if zero_stage >= 3 else full)
        if zero_stage == 3:
            w += 2 * run.weight_bytes * max(layer_params(sc.model, moe, 64).total for moe in (False, True))
            last = len(sc.chunk.layers_per_stage) - 1
            root = ({"embedding"} if 0 in stages else set()) | ({"head", "embedding"} if last in stages else set())
            w += run.weight_bytes * len(root) * sc.model.vocab * sc.model.hidden
        assert mem.params_gb == pytest.approx(w / 1e9, rel=1e-12)
        assert mem.grads_gb == pytest.approx(run.grad_bytes * (shard if zero_stage >= 2 else full) / 1e9, rel=1e-12)
        assert mem.optimizer_gb == pytest.approx(run.optimizer_bytes * (shard if zero_stage >= 1 else full) / 1e9,
                                                 rel=1e-12)


def test_sm_sharing_stretch_is_sms_over_the_sms_left():
    """A compute part overlapping a communication kernel runs SMs / (SMs - comm_sms) longer."""
    assert Scenario(load_scenario("deepseek-v3")).sm_slowdown == 132 / (132 - 20)
    assert Scenario(load_scenario("deepseek-v3", comm_sms=0)).sm_slowdown == 1.0
    assert Scenario(load_scenario("deepseek-v3", comm_sms=66)).sm_slowdown == 2.0


def test_a_reserve_equal_to_hbm_is_refused():
    with pytest.raises(SpecError, match=r"memory_reserve_gb \(85.52\) must be below the 85.52 GB"):
        Scenario(load_scenario("tiny", memory_reserve_gb=85.52)).memory


def test_activation_peak_after_a_full_backward_and_at_a_tie():
    """Stage bytes (10, 10): an I keeps all it held. F F F -> 30 (3 held); B -> 20 (2 held): a full
    backward releases one forward; F F -> 40, the peak, 4 held; I -> 40 again with 3 held: the
    first time the peak was reached is the one reported."""
    ops = [parse_op(t) for t in "F0@0 F1@0 F2@0 B0@0 F3@0 F4@0 I1@0".split()]
    assert activation_peak(ops, [(10.0, 10.0)]) == (40.0, 4)


def test_each_stage_starts_at_the_layers_the_stages_before_it_hold():
    """Five one-layer stages of a model whose first two layers are dense: stage 1 holds a dense
    layer, stages 2 and 3 a MoE layer each (layer indices 2 and 3, not 1 again)."""
    import dataclasses

    from sim.training.model.memory import stage_activation_bytes
    run = load_scenario("deepseek-v3")
    m = dataclasses.replace(load_model(run.model), dense_layers=2)
    out = stage_activation_bytes(m, run, [1, 1, 1, 1, 1])
    assert out[1] != out[2] and out[2] == out[3]


@pytest.mark.parametrize("t", [2, 4, 8])
@pytest.mark.parametrize("h,a,s", [(12288, 96, 2048), (4096, 32, 4096)])
def test_korthikanti_per_layer_activations_under_tensor_and_sequence_parallelism(h, a, s, t):
    """Korthikanti et al. 2022, Table 2: with TP over t GPUs sbh(10 + 24/t + 5as/ht); with sequence
    parallelism too sbh(34 + 5as/h)/t; with selective recomputation and both, 34sbh/t."""
    m = gpt(h, a)
    tensors = layer_tensors(m, False, R("none"), s, 0)
    assert bytes_per_token(tensors, t) * s == pytest.approx(s * h * (10 + 24 / t + 5 * a * s / (h * t)))
    assert bytes_per_token(tensors, t, True) * s == pytest.approx(s * h * (34 + 5 * a * s / h) / t)
    selective = layer_tensors(m, False, R("selective"), s, 0)
    assert bytes_per_token(selective, t, True) * s == pytest.approx(34 * s * h / t)
    assert bytes_per_token(layer_tensors(m, False, R("full"), s, 0), t) * s == pytest.approx(2 * s * h)


def test_a_deferred_weight_gradient_under_tensor_parallelism_by_hand():
    """A GPT layer's W keeps each Linear's input and output gradient (BF16): column-parallel (qkv 3h,
    MLP up 4h) inputs h wide, outputs split; row-parallel (attention out h, MLP down 4h) inputs split,
    outputs h wide. Without SP: 2h + 2h wide + (3h + h + 4h + 4h) / t split, times 2 bytes."""
    m, t = gpt(4096, 32), 4
    h = 4096
    assert weight_grad_bytes(m, False, R("none"), 0, t) == pytest.approx(2 * (4 * h + 12 * h / t))
    assert weight_grad_bytes(m, False, R("none"), 0, t, True) == pytest.approx(2 * 16 * h / t)
    assert weight_grad_bytes(m, False, R("none"), 0) == pytest.approx(2 * 16 * h)


def test_tensor_and_context_parallelism_divide_a_gpus_model_states_and_activations():
    """Llama 3 8B at TP 2, CP 2: a GPU holds 1/2 of the parameters; ZeRO-1 shards optimizer states
    over DP x CP; activations: T / 2 tokens at their TP share (under sequence parallelism exactly
    1/4 of the layers' bytes, the token ids and the head's input aside)."""
    from sim.training.model.memory import stage_activation_bytes
    from sim.training.model.specs import RunSpec
    base = RunSpec(model="llama3-8b", gpu="h100", topology="h100-1024", pp=2, dp=2, ep=1, schedule="1f1b",
                   microbatches=4, seq_len=4096, memory_policy="selective")
    split = base.with_(tp=2, cp=2, sequence_parallel=True)
    one, two = Scenario(base), Scenario(split)
    assert two.memory[0].params_gb == pytest.approx(one.memory[0].params_gb / 2)
    assert two.memory[0].optimizer_gb == pytest.approx(one.memory[0].optimizer_gb / 4)
    m = load_model("llama3-8b")
    (held, _), _ = stage_activation_bytes(m, base, [16, 16])
    (held_split, _), _ = stage_activation_bytes(m, split, [16, 16])
    assert held_split == pytest.approx(held / 4, rel=1e-3) and held_split > held / 4


def test_the_heads_deferred_weight_gradient_and_a_row_parallel_linear_of_another_width():
    """The head's W keeps its input (h, BF16) and the logits' gradient (V, BF16): 1/t of the logits
    under TP, of the input too with SP. A layer whose attention is wider than its hidden size
    (32 heads of 128 on h = 2,048) keeps the out-projection's input (a d) split and its output (h)
    wide: 2 x (qkv input h + MLP up input h + out_proj output h + MLP down output h) wide, the rest
    split."""
    from sim.training.model.activations import head_weight_grad_bytes
    m = ModelSpec(name="wide", layers=1, hidden=2048, heads=32, head_dim=128, dense_layers=1,
                  dense_intermediate=8192, mlp_activation="gelu", vocab=32000)
    assert head_weight_grad_bytes(m) == 2 * 2048 + 2 * 32000
    assert head_weight_grad_bytes(m, 4) == 2 * 2048 + 2 * 32000 / 4
    assert head_weight_grad_bytes(m, 4, True) == (2 * 2048 + 2 * 32000) / 4
    h, ad, inter, t = 2048, 4096, 8192, 4
    split = 3 * ad + ad + inter + inter                      # qkv out, out_proj in, MLP up out, down in
    assert weight_grad_bytes(m, False, R("none"), 0, t) == pytest.approx(2 * (4 * h + split / t))


def test_mla_keeps_its_up_projections_outputs_unless_deepseek_v3_recomputes_them():
    m = load_model("deepseek-v3")
    names = {t.name: t for t in layer_tensors(m, True, R("none"), 4096, 8)}
    assert names["attn.v"].elements == 128 * 128 and names["attn.v"].bytes_per_element == BF16
    assert "attn.v" not in {t.name for t in layer_tensors(m, True, R("deepseek-v3", "flash"), 4096, 8)}


def test_expert_tp_reaches_a_stages_deferred_weight_gradients():
    """Under expert TP 2 a middle stage's W keeps, per layer, the Linears' bytes with the routed
    experts' gathered copies (weight_grad_bytes at expert_tp 2, worked by hand in
    test_activations.py), T tokens of them: more than at expert TP 1."""
    from sim.training.model.activations import ActivationRecipe, weight_grad_bytes
    from sim.training.model.memory import stage_activation_bytes
    base = load_scenario("deepseek-v3").with_(tp=2, dp=64, sequence_parallel=True)
    m = load_model(base.model)
    recipe = ActivationRecipe.named("deepseek-v3", fp8=True)
    for etp in (1, 2):
        run = base.with_(expert_tp=etp)
        (_, wkeep) = stage_activation_bytes(m, run, [3, 4, 4])[1]
        per_layer = weight_grad_bytes(m, True, recipe, float(m.topk), 2, True, etp)
        assert wkeep == pytest.approx(4 * per_layer * run.tokens_per_microbatch)
    assert weight_grad_bytes(m, True, recipe, 8.0, 2, True, 2) > weight_grad_bytes(m, True, recipe, 8.0, 2, True, 1)


def test_the_communicators_a_gpu_joins_by_hand():
    """tiny (MoE) at TP 1, PP 4, DP 4: the dense DP group, the experts' DP group (4 / EP when above 1),
    the EP group, two pipeline neighbours; TP and CP groups only when they are above 1."""
    from sim.training.model.memory import communicators
    m, run = load_model("tiny-moe"), load_scenario("tiny")
    assert communicators(m, run.with_(ep=4)) == 1 + 0 + 1 + 2          # expert DP 4 / 4 = 1: no group
    assert communicators(m, run.with_(ep=2)) == 1 + 1 + 1 + 2          # EP 2 is a group too
    assert communicators(m, run.with_(ep=1)) == 1 + 1 + 0 + 2
    assert communicators(load_model("llama3-8b"), run.with_(model="llama3-8b", ep=1)) == 1 + 2


@pytest.mark.parametrize("gemm, linear", [("fp8", "fp8"), ("bf16", "bf16")])
def test_a_full_recomputations_working_set_is_one_layer_as_its_gemms_cache_it(gemm, linear):
    """Llama 3 8B, full recomputation, one micro-batch of 4,096 tokens: the layer rematerialised for
    its backward keeps what it would without recomputation, its Linear inputs in FP8 (Transformer
    Engine's caches) under FP8 GEMMs, BF16 otherwise."""
    from sim.training.model.activations import ActivationRecipe, bytes_per_token, layer_tensors
    from sim.training.model.memory import working_set
    from sim.training.model.specs import RunSpec
    run = RunSpec(model="llama3-8b", gpu="h100", topology="h100-1024", pp=2, dp=2, ep=1, schedule="1f1b",
                  microbatches=4, seq_len=4096, memory_policy="full", gemm_precision=gemm)
    m = load_model("llama3-8b")
    per_token = bytes_per_token(layer_tensors(m, False, ActivationRecipe(fp8=linear == "fp8"), 4096, 0.0))
    assert working_set(m, run, [16, 16], {0}) == pytest.approx(per_token * 4096)


def test_the_fixed_terms_of_a_last_stage_gpu_by_hand():
    """DeepSeek-V3 at TP 2 with sequence parallelism and expert TP 2, 4,096 tokens a micro-batch:
    DeepEP's send and receive buffers hold the GPU's 2,048-token shard's 8 copies of 7,168 BF16 per
    expert-TP GPU (2 x 2048 x 8 x 7168 x 2 x 2 bytes), the loss's BF16 logits 4096 x 129,280 / 2,
    a 3 GB working set as given, and fragmentation its fraction of everything."""
    from sim.training.model.memory import CUDA_CONTEXT_GB, FRAGMENTATION, NCCL_GB, communicators, fixed_terms
    run = load_scenario("deepseek-v3").with_(tp=2, dp=64, sequence_parallel=True, expert_tp=2)
    m = load_model(run.model)
    terms = dict(fixed_terms(m, run, 50.0, last_stage=True, working_bytes=3e9))
    assert terms["CUDA context"] == CUDA_CONTEXT_GB
    assert terms["NCCL"] == pytest.approx(NCCL_GB * communicators(m, run))
    assert terms["all-to-all buffers"] == pytest.approx(2 * 2048 * 8 * 7168 * 2 * 2 / 1e9)
    assert terms["logits"] == pytest.approx(4096 * 129280 / 2 * 2 / 1e9)
    assert terms["recompute working set"] == pytest.approx(3.0)
    others = sum(gb for name, gb in terms.items() if name != "fragmentation")
    assert terms["fragmentation"] == pytest.approx(FRAGMENTATION * (50.0 + others))
    assert "logits" not in dict(fixed_terms(m, run, 50.0))


@pytest.mark.parametrize("tp, params", [(1, 218_103_808), (8, 218_103_808 // 8)])
def test_zero3s_reduce_scatter_of_one_layer_by_hand(tp, params):
    """FSDP2 around a layer's backward: Llama 3 8B's layer (4096^2 x 2 + 4096 x 1024 x 2 attention,
    3 x 4096 x 14,336 MLP = 218,103,808 parameters, split over TP) in BF16 unsharded gradients and
    the FP32 reduce-scatter input: 6 bytes each; none below ZeRO-3; one fixed term of a ZeRO-3 GPU."""
    from sim.training.model.memory import fixed_terms, reduce_scatter_bytes
    from sim.training.model.specs import RunSpec
    run = RunSpec(model="llama3-8b", gpu="h100", topology="h100-1024", pp=1, tp=tp, dp=8 // tp, ep=1,
                  schedule="1f1b", microbatches=1, seq_len=4096, zero_stage=3, sequence_parallel=tp > 1)
    m = load_model("llama3-8b")
    assert reduce_scatter_bytes(m, run) == pytest.approx(params * 6)
    assert dict(fixed_terms(m, run, 10.0))["ZeRO-3 reduce-scatter"] == pytest.approx(params * 6 / 1e9)
    assert reduce_scatter_bytes(m, run.with_(zero_stage=1)) == 0.0
    assert "ZeRO-3 reduce-scatter" not in dict(fixed_terms(m, run.with_(zero_stage=1), 10.0))


def test_what_pytorchs_counters_see_of_a_rank_by_hand():
    """A rank of 10 + 20 + 30 + 5 GB and fixed terms 0.8 (CUDA context) + 0.4 (NCCL) + 1.5
    (fragmentation) + 2 (logits): 69.7 GB of HBM; torch's reserved counter sees 68.5 (not the
    context nor NCCL's own buffers), its allocated counter 67.0 (nor the allocator's reserve)."""
    from sim.training.model.memory import RankMemory
    fixed = (("CUDA context", 0.8), ("NCCL", 0.4), ("logits", 2.0), ("fragmentation", 1.5))
    m = RankMemory(0, 10.0, 20.0, 30.0, 5.0, sum(gb for _, gb in fixed), 80.0, 1, 0.0, fixed)
    assert m.total_gb == pytest.approx(69.7)
    assert m.pytorch_counter_gb("reserved") == pytest.approx(68.5)
    assert m.pytorch_counter_gb("allocated") == pytest.approx(67.0)
    with pytest.raises(SpecError, match="one of reserved, allocated, got 'active'"):
        m.pytorch_counter_gb("active")
    flat = RankMemory(0, 10.0, 20.0, 30.0, 5.0, 4.0, 80.0, 1)          # memory_reserve_gb: one flat reserve
    assert flat.pytorch_counter_gb("allocated") == flat.total_gb == pytest.approx(69.0)


def test_the_walk_counts_the_forwards_an_input_gradient_releases():
    """Stage bytes (1, 3): a deferred W keeps more than the forward did, so each I raises the walk:
    F F -> 2 (2 held), I -> 4 (1 held), I -> 6, the peak, with no forward held."""
    ops = [parse_op(t) for t in "F0@0 F1@0 I0@0 I1@0 W0@0 W1@0".split()]
    assert activation_peak(ops, [(1.0, 3.0)]) == (6.0, 0)


def test_fp8_and_mxfp8_keep_the_same_linear_inputs_and_deferred_w():
    """Transformer Engine's FP8 caches are the same bytes under FP8 and MXFP8; a deferred W keeps
    each Linear's input and output gradient in FP8 (the stage's second figure)."""
    from sim.training.model.activations import ActivationRecipe, weight_grad_bytes
    from sim.training.model.memory import layer_held_per_token, stage_activation_bytes
    m = load_model("llama3-8b")
    base = load_scenario("deepseek-v3").with_(model="llama3-8b", pp=4, dp=2, ep=1, schedule="zb-h1", gpu="b200",
                                              topology="dgx-b200", memory_policy="none",
                                              gemm_precision="bf16")
    fp8, mx = base.with_(gemm_precision="fp8"), base.with_(gemm_precision="mxfp8")
    assert layer_held_per_token(m, mx, False, False) == layer_held_per_token(m, fp8, False, False)
    assert layer_held_per_token(m, fp8, False, False) < layer_held_per_token(m, base, False, False)
    T = base.tokens_per_microbatch
    w = stage_activation_bytes(m, fp8, [8, 8, 8, 8])[1][1]
    assert w == pytest.approx(8 * weight_grad_bytes(m, False, ActivationRecipe(fp8=True), float(m.topk)) * T)


def test_a_full_recomputations_working_set_is_the_larger_of_an_moe_and_a_dense_layer():
    """DeepSeek-V3 (3 dense layers, then MoE) under full recomputation: the working set is its MoE
    layer's activations (each token's 8 routed copies), larger than a dense layer's."""
    from sim.training.model.activations import ActivationRecipe, bytes_per_token, layer_tensors
    from sim.training.model.memory import working_set
    run = load_scenario("deepseek-v3").with_(memory_policy="full")
    m = load_model(run.model)
    T = run.tokens_per_microbatch
    recipe = ActivationRecipe(fp8=True)                      # its FP8 GEMMs: Transformer Engine's caches
    moe, dense = (bytes_per_token(layer_tensors(m, kind, recipe, run.seq_len, 8.0)) for kind in (True, False))
    assert moe > dense
    assert working_set(m, run, [4] * 16, {0}) == pytest.approx(moe * T)


def test_an_mtp_module_keeps_its_layers_tensors_at_the_runs_expert_tp():
    """DeepSeek-V3's MTP module on the last stage holds one MoE layer's tensors as the stage's own
    layers do, expert TP included: its share of the stage's bytes is that layer's plus its extras."""
    from sim.training.model.activations import bytes_per_token, layer_tensors, mtp_extra_tensors
    from sim.training.model.memory import run_recipe, stage_activation_bytes
    from sim.training.model.recompute import recompute_of
    run = load_scenario("deepseek-v3").with_(tp=2, dp=64, sequence_parallel=True, expert_tp=2)
    m = load_model(run.model)
    import dataclasses
    without = dataclasses.replace(m, mtp_modules=0)
    layers = [4] * 15 + [1]
    T = run.tokens_per_microbatch // run.cp
    mtp = run_recipe(run, recompute_of(run), False)
    one = bytes_per_token(layer_tensors(m, True, mtp, run.seq_len, float(m.topk), 2), 2, True) + \
        bytes_per_token(mtp_extra_tensors(m, mtp), 2, True)
    head = stage_activation_bytes(m, run, layers)[-1][0] - stage_activation_bytes(without, run, layers)[-1][0]
    assert head == pytest.approx(T * (one + bytes_per_token(head_tensors_of(m, mtp, run), 2, True)))


def head_tensors_of(m, recipe, run):
    from sim.training.model.activations import head_tensors
    return head_tensors(m, recipe, run.loss_kernel, run.vocab_parallel_loss)


def test_fp8_weight_copies_are_counted_in_gb():
    """Transformer Engine's FP8 copies under FP8 GEMMs (not DeepSeek's recipe): 2 bytes a
    parameter of the rank, in GB like every other field."""
    from sim.training.model.params import rank_params
    from sim.training.model.specs import RunSpec
    run = RunSpec(model="llama3-8b", gpu="h100", topology="h100-1024", pp=2, dp=2, ep=1, schedule="1f1b",
                  microbatches=4, seq_len=4096, gemm_precision="fp8")
    sc = Scenario(run)
    count = rank_params(load_model("llama3-8b"), sc.chunk.layers_per_stage, {0}, 1).on_gpu(run)
    assert sc.memory[0].fp8_weights_gb == pytest.approx(2 * count.total / 1e9)


def test_fp8_param_gather_keeps_the_weights_only_in_fp8_and_bf16_gradients_halve():
    """Megatron's ``fp8_param_gather`` (NVIDIA's FP8 recipes): Transformer Engine's FP8 copies, 2 bytes
    a parameter, are the only weights (no BF16 copy); ``grad_bytes`` 2 (``grad_reduce_in_fp32``
    off) holds the gradients in BF16. ZeRO-1: weights and gradients whole on the GPU."""
    from sim.training.model.specs import RunSpec
    run = RunSpec(model="llama3-8b", gpu="h100", topology="h100-1024", pp=2, dp=2, ep=1, schedule="1f1b",
                  microbatches=4, seq_len=4096, gemm_precision="fp8")
    base = Scenario(run).memory[0]
    lean = Scenario(run.with_(fp8_param_gather=True, grad_bytes=2.0)).memory[0]
    count = rank_params(load_model("llama3-8b"), Scenario(run).chunk.layers_per_stage, {0}, 1).on_gpu(run)
    assert (base.params_gb, base.grads_gb, base.fp8_weights_gb) == pytest.approx(
        (2 * count.total / 1e9, 4 * count.total / 1e9, 2 * count.total / 1e9))
    assert (lean.params_gb, lean.grads_gb, lean.fp8_weights_gb) == pytest.approx(
        (0.0, 2 * count.total / 1e9, 2 * count.total / 1e9))
    assert (lean.optimizer_gb, lean.activations_gb) == pytest.approx((base.optimizer_gb, base.activations_gb))
    assert base.total_gb - lean.total_gb > 4 * count.total / 1e9     # and the fragmentation on top of them


@pytest.mark.parametrize("fields, allowed", [
    ({"gemm_precision": "bf16"}, "gemm_precision bf16, zero_stage 1"),
    ({"gemm_precision": "fp8", "zero_stage": 3}, "gemm_precision fp8, zero_stage 3"),
])
def test_fp8_param_gather_needs_fp8_gemms_without_fsdp(fields, allowed):
    with pytest.raises(SpecError, match="RunSpec.fp8_param_gather .weights kept only in FP8. needs gemm_precision "
                                        f"fp8 or mxfp8 and zero_stage 0-2, got {allowed}"):
        load_scenario("tiny", fp8_param_gather=True, **fields)
    with pytest.raises(SpecError, match="RunSpec.fp8_param_gather must be true or false, got 'yes'"):
        load_scenario("tiny", fp8_param_gather="yes", gemm_precision="fp8")


def test_every_rank_holds_one_layers_backward_gradients_for_one_microbatch():
    """The fixed term ``backward gradients``: the tokens of one micro-batch on a GPU (CP splits them)
    times the larger layer kind's gradients per token (DeepSeek-V3's MoE layers': 139,264 bytes),
    on every rank, counted before the fragmentation."""
    from sim.training.model.memory import backward_gradient_bytes
    sc = Scenario(load_scenario("deepseek-v3"))
    per_token = (2 * 7_168 + 3 * 2_048 * 9) * 2
    assert backward_gradient_bytes(sc.model, sc.run) == 4_096 * per_token
    for m in sc.memory:
        assert dict(m.fixed)["backward gradients"] == pytest.approx(4_096 * per_token / 1e9)
    tiny = load_scenario("tiny", seq_len=4096)
    model = Scenario(tiny).model
    assert backward_gradient_bytes(model, tiny.with_(cp=2)) == pytest.approx(backward_gradient_bytes(model, tiny) / 2)
