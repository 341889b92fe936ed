"""What PyTorch-native trainers (torchtitan) keep and rerun, by hand: the per-op selective
checkpointing policy (``memory_policy: selective-op``), the cross-entropy as eager or compiled
PyTorch computes it (``loss_kernel``), and FSDP's gradients under pipeline parallelism."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.compute.ops import UNFUSED, head_ops
from sim.training.costs.chunk import ChunkModel
from sim.training.model.activations import ActivationRecipe, bytes_per_token, head_tensors, layer_tensors
from sim.training.model.memory import working_set
from sim.training.model.recompute import Recompute, kernel_shares_rerun
from sim.training.model.specs import RunSpec, SpecError, load_gpu, load_model
from sim.training.scenario import Scenario

H, A, D, KV, FFN, V = 4096, 32, 128, 8, 14336, 128256       # Llama 3 8B


def run_of(**changes) -> RunSpec:
    return RunSpec(**{**dict(model="llama3-8b", gpu="h100", topology="h100-1024", pp=4, dp=2, ep=1, schedule="1f1b",
                             microbatches=8, seq_len=4096, memory_policy="selective-op"), **changes})


def op_recipe(fusion: str = "fused") -> ActivationRecipe:
    return ActivationRecipe.of(Recompute("op"), False, "flash2", False, False, fusion)


@pytest.mark.parametrize("fusion,expected", [
    # the layer input, q (wq), v (wv), the log-sum-exp, the attention output, the gate (w1) ...
    ("fused", 2 * H + 2 * A * D + 2 * KV * D + 4 * A + 2 * A * D + 2 * FFN),
    ("unfused", 2 * H + 2 * A * D + 2 * KV * D + 4 * A + 2 * A * D + 2 * FFN + 2 * H),   # ... and w2's output
])
def test_the_per_op_policy_keeps_the_core_and_every_other_gemms_output_by_hand(fusion, expected):
    """A Llama 3 8B layer: 55,424 bytes a token compiled, 63,616 eager (w2's output too), whatever
    the GEMMs' precision (they are GEMM outputs, BF16)."""
    m = load_model("llama3-8b")
    assert bytes_per_token(layer_tensors(m, False, op_recipe(fusion), 8192, 0)) == expected
    fp8 = ActivationRecipe.of(Recompute("op"), False, "flash2", True, False, fusion)
    assert bytes_per_token(layer_tensors(m, False, fp8, 8192, 0)) == expected
    assert expected in (55424, 63616)
    selective = ActivationRecipe.named("selective", "flash2")      # Megatron's: everything but the core's
    assert bytes_per_token(layer_tensors(m, False, selective, 8192, 0)) == 139264


def test_the_per_op_policy_rematerialises_the_rest_of_one_layer():
    """Its working set is one layer's activations with nothing recomputed less what it kept, one
    micro-batch of 4,096 tokens."""
    m, run = load_model("llama3-8b"), run_of()
    nothing = bytes_per_token(layer_tensors(m, False, ActivationRecipe(flash=True), 4096, 0))
    kept = bytes_per_token(layer_tensors(m, False, op_recipe(), 4096, 0))
    assert working_set(m, run, [8, 8, 8, 8], {0}) == pytest.approx((nothing - kept) * 4096)
    assert dict(Scenario(run).memory[0].fixed)["recompute working set"] == pytest.approx((nothing - kept) * 4096 / 1e9)


def test_the_per_op_policy_reruns_wk_wo_w3_and_the_memory_bound_kernels():
    """Kernel model: the attention reruns its norm, RoPE, wo, the residual add and wk's share of the
    fused QKV GEMM (8 of 48 heads' columns); the MLP its norm, SwiGLU, residual add and half the
    fused w1-w3 GEMM. FLOPs model: wk and wo's GEMM, a third of the MLP's."""
    m, g = load_model("llama3-8b"), load_gpu("h100")
    chunk = ChunkModel(m, g, run_of(), 4)
    costs = {(c.op.block, c.op.name): c.seconds for c in chunk.kernel_costs(False)}
    layer = chunk.layer_cost(False)
    assert kernel_shares_rerun(Recompute("op"), "attn", m)["qkv"] == pytest.approx(8 / 48)
    attn = sum(costs[("attn", k)] for k in ("norm", "rope", "out_proj", "residual")) + costs[("attn", "qkv")] / 6
    mlp = sum(costs[("mlp", k)] for k in ("norm", "fc.swiglu", "residual")) + costs[("mlp", "fc1")] / 2
    assert layer.attn_r == pytest.approx(attn) and layer.mlp_r == pytest.approx(mlp)
    flops = ChunkModel(m, g, run_of(compute_model="flops"), 4).layer_cost(False)
    assert flops.mlp_r == pytest.approx(flops.mlp_f / 3)
    wk_wo = 2 * 4096 * H * D * (KV + A) / (0.6 * g.peak_flops("bf16"))
    assert flops.attn_r == pytest.approx(wk_wo)


@pytest.mark.parametrize("changes,model", [
    (dict(model="mixtral-8x7b-like", ep=2), "MoE"), (dict(tp=2, dp=1), "at tp 2"),
    (dict(attention_kernel="unfused"), "attention_kernel unfused")])
def test_the_per_op_policy_outside_what_it_models_is_one_line(changes, model):
    with pytest.raises(SpecError, match=f"selective-op.*{model}") as err:
        Scenario(run_of(**changes)).memory
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("loss,kept,beside", [("fused", 4, 2), ("eager", 4, 8), ("compiled", 2, 2)])
def test_the_loss_keeps_and_holds_by_hand(loss, kept, beside):
    """Per logit of the last stage's micro-batch: a fused loss keeps the FP32 softmax and holds the
    BF16 logits beside it; eager PyTorch keeps the FP32 log-softmax and, in its backward, holds its
    FP32 gradient and the input's (8 bytes); compiled keeps the BF16 logits and writes a BF16 gradient."""
    m = load_model("llama3-8b")
    stored = {t.name: t.bytes_per_token for t in head_tensors(m, ActivationRecipe(), loss)}
    assert stored.get("head.softmax", stored.get("head.logits")) == kept * V
    fixed = dict(Scenario(run_of(loss_kernel=loss, memory_policy="none")).memory[-1].fixed)
    assert fixed["logits"] == pytest.approx(4096 * V * beside / 1e9)


def test_an_eager_loss_under_tp_holds_the_vocabulary_parallel_backwards_tensors():
    """Under TP 2 (loss parallel) each GPU holds half the vocabulary; the eager backward holds three
    FP32 tensors of it beside the saved log-softmax (12 bytes a logit), a fused one its BF16 logits."""
    base = run_of(memory_policy="full", tp=2, dp=1, sequence_parallel=True)
    eager = dict(Scenario(base.with_(loss_kernel="eager")).memory[-1].fixed)["logits"]
    fused = dict(Scenario(base).memory[-1].fixed)["logits"]
    assert eager == pytest.approx(4096 * V / 2 * 12 / 1e9) and fused == pytest.approx(4096 * V / 2 * 2 / 1e9)


def test_the_loss_kernels_cost():
    """An eager loss runs as unfused kernels (its cast, log-softmax, loss) even in a compiled model;
    a compiled one reads the BF16 logits (2 bytes) and writes their gradient (2 + 2)."""
    def loss_ops(kernel, fusion="fused"):
        return {op.name: op for op in head_ops(1000, 1000, H, V, 1, fusion, kernel) if "cross" in op.name}
    fused, eager, compiled = loss_ops("fused"), loss_ops("eager"), loss_ops("compiled")
    kernels, factor = UNFUSED["cross_entropy"]
    assert eager["cross_entropy"].bytes == fused["cross_entropy"].bytes * factor == 1000 * V * 8 * factor
    assert eager["cross_entropy"].kernels == kernels and fused["cross_entropy"].kernels == 1
    assert compiled["cross_entropy"].bytes == 1000 * V * 2 and compiled["cross_entropy.grad"].bytes == 1000 * V * 4
    assert loss_ops("eager", "unfused")["cross_entropy"].bytes == eager["cross_entropy"].bytes
    assert loss_ops("eager-bf16")["cross_entropy"].bytes == eager["cross_entropy"].bytes / 2    # BF16 logits


def test_bad_loss_kernel_is_one_line():
    message = "RunSpec.loss_kernel must be one of fused, eager, eager-bf16, compiled, got 'xla'"
    with pytest.raises(SpecError, match=message):
        run_of(loss_kernel="xla")


def test_fsdp_under_pipelining_keeps_its_gradients_unsharded_through_the_step():
    """ZeRO-3 with fsdp_grads unsharded (as torch's pipeline stages run FSDP2) accumulates the
    stage's whole gradients in FP32 until the one reduce-scatter; sharded, a GPU holds its 1/dp
    share; the weights and optimizer states do not change. BF16 gradients accumulate in FP32 too
    (FSDP2's reduce precision)."""
    base = run_of(zero_stage=3, dp=8, weight_bytes=4.0, grad_bytes=4.0, memory_policy="full",
                  reshard_after_forward=False)
    whole = Scenario(base.with_(fsdp_grads="unsharded")).memory[0]
    sharded = Scenario(base).memory[0]
    assert whole.grads_gb == pytest.approx(8 * sharded.grads_gb)
    assert (whole.params_gb, whole.optimizer_gb) == pytest.approx((sharded.params_gb, sharded.optimizer_gb))
    bf16 = Scenario(base.with_(fsdp_grads="unsharded", grad_bytes=2.0)).memory[0]
    assert bf16.grads_gb == pytest.approx(whole.grads_gb)
    with pytest.raises(SpecError, match="RunSpec.fsdp_grads unsharded is for zero_stage 3 .FSDP., got zero_stage 1"):
        run_of(fsdp_grads="unsharded")


@settings(max_examples=15, deadline=None)
@given(mbs=st.integers(1, 3), seq=st.sampled_from([1024, 4096, 8192]), loss=st.sampled_from(["fused", "eager",
                                                                                                 "compiled"]),
       fusion=st.sampled_from(["fused", "unfused"]))
def test_per_op_memory_grows_with_the_batch_and_the_sequence(mbs, seq, loss, fusion):
    base = run_of(microbatch_size=mbs, seq_len=seq, loss_kernel=loss, fusion=fusion)
    mem, more = Scenario(base).memory, Scenario(base.with_(microbatch_size=mbs + 1)).memory
    longer = Scenario(base.with_(seq_len=2 * seq)).memory
    for a, b, c in zip(mem, more, longer):
        assert b.total_gb > a.total_gb and c.total_gb > a.total_gb
        assert a.total_gb >= a.params_gb + a.grads_gb + a.optimizer_gb


def test_an_eager_bf16_loss_on_logits_gathered_whole():
    """KempnerForge's loss: cross_entropy on the BF16 logits, gathered whole on each TP GPU: it keeps
    the BF16 log-softmax of the whole vocabulary (not a TP shard) and holds two BF16 tensors of it."""
    m = load_model("llama3-8b")
    kept = {t.name: t for t in head_tensors(m, ActivationRecipe(), "eager-bf16", vocab_parallel=False)}
    assert kept["head.logits"].bytes_per_token == 2 * V and kept["head.logits"].share(tp=2) == 1.0
    base = run_of(memory_policy="full", tp=2, dp=1, sequence_parallel=True, loss_kernel="eager-bf16")
    gathered = dict(Scenario(base.with_(vocab_parallel_loss=False)).memory[-1].fixed)["logits"]
    sharded = dict(Scenario(base).memory[-1].fixed)["logits"]
    assert gathered == pytest.approx(4096 * V * 4 / 1e9) and sharded == pytest.approx(gathered / 2)
    with pytest.raises(SpecError, match="RunSpec.vocab_parallel_loss must be true or false, got 'no'"):
        run_of(vocab_parallel_loss="no")


def test_kempnerforges_bf16_recipe_by_hand():
    """Its 7B (Llama 3 8B: 32 layers of 218.1M parameters and two 525M embeddings, norms not
    counted) with FSDP 2 and 4 accumulation steps: BF16 weights sharded (plus two gathered layers),
    FP32 gradients accumulated whole (4 x 8.03B = 32.1 GB), BF16 AdamW states sharded (4 x 8.03B / 2);
    the embedding and the head gathered whole for the step (FSDP2's root unit: 2 x 525M x 2 bytes)."""
    from validation.memory import load_memory_runs, predict_memory
    row = predict_memory(next(r for r in load_memory_runs() if r.id == "kf-02-7b-fsdp2"))
    layer = 4096 * (4096 * 2 + 1024 * 2) + 3 * 4096 * 14336
    params = 32 * layer + 2 * 128256 * 4096
    assert row["grads_gb"] == pytest.approx(4 * params / 1e9)
    assert row["optimizer_gb"] == pytest.approx(4 * params / 2 / 1e9)
    assert row["params_gb"] == pytest.approx((2 * params / 2 + 2 * 2 * layer + 2 * 2 * 128256 * 4096) / 1e9)


def test_a_train_loop_that_keeps_its_logits_holds_them_through_the_backward():
    """KempnerForge's loop never deletes `logits`: its BF16 logits (2 bytes each) stay beside the
    loss's own buffers on the last stage; torchtitan deletes `pred` first (the default)."""
    base = run_of(memory_policy="full", loss_kernel="eager-bf16")
    kept = dict(Scenario(base.with_(logits_kept=True)).memory[-1].fixed)["logits"]
    freed = dict(Scenario(base).memory[-1].fixed)["logits"]
    assert kept - freed == pytest.approx(4096 * V * 2 / 1e9)
    with pytest.raises(SpecError, match="RunSpec.logits_kept must be true or false, got 1"):
        run_of(logits_kept=1)


def test_pipeline_stages_that_keep_their_outputs_by_hand():
    """torch.distributed.pipelining as of 2024 (``stage_outputs_kept``): a stage's output is one
    micro-batch's hidden state, 4,096 tokens x 4,096 x 2 bytes = 33.55 MB (half a GPU's at TP 2 with
    sequence parallelism, whole without it), the last stage's its BF16 logits, 4,096 x 128,256 x 2 = 1.05 GB (half on
    each GPU of a vocabulary-parallel loss, whole where the logits are gathered); nothing when off."""
    from sim.training.model.memory import stage_output_bytes
    m = load_model("llama3-8b")
    hidden, logits = 4096 * H * 2, 4096 * V * 2
    assert stage_output_bytes(m, run_of(stage_outputs_kept=True), 4) == [hidden] * 3 + [logits]
    tp2 = run_of(stage_outputs_kept=True, tp=2, dp=1, sequence_parallel=True)
    assert stage_output_bytes(m, tp2, 4) == [hidden / 2] * 3 + [logits / 2]
    assert stage_output_bytes(m, tp2.with_(vocab_parallel_loss=False), 4)[-1] == logits
    assert stage_output_bytes(m, tp2.with_(sequence_parallel=False), 4)[0] == hidden   # whole on each TP GPU
    assert stage_output_bytes(m, run_of(), 4) == [0.0] * 4


def test_kept_outputs_move_the_first_ranks_peak_to_its_last_forward():
    """1F1B over 4 stages, 8 micro-batches: rank 0 holds 4 micro-batches' activations after its
    first steady-state forward and again after each later one, and by its last forward it has kept
    all 8 outputs: its activation peak grows by exactly 8 x 33.55 MB."""
    off, on = (Scenario(run_of(stage_outputs_kept=kept)).memory[0] for kept in (False, True))
    assert (on.activations_gb - off.activations_gb) * 1e9 == pytest.approx(8 * 4096 * H * 2)
    assert on.peak_microbatches == off.peak_microbatches == 4


def test_the_last_stage_peaks_when_the_step_merges_its_logits():
    """The last stage keeps its 8 micro-batches' logits (8 x 1.05 GB) and the step's end
    concatenates them into one more copy: 16 x 1.05 = 16.8 GB, beside which only what outlives the
    passes stays (the CUDA context, NCCL, fragmentation); 16 micro-batches double it."""
    for microbatches in (8, 16):
        last = Scenario(run_of(stage_outputs_kept=True, memory_policy="full", microbatches=microbatches)).memory[-1]
        assert last.activations_gb * 1e9 == pytest.approx(2 * microbatches * 4096 * V * 2)
        assert [name for name, _ in last.fixed] == ["CUDA context", "NCCL", "fragmentation"]
        assert last.peak_microbatches == 0
        state = last.params_gb + last.grads_gb + last.optimizer_gb + last.fp8_weights_gb
        cuda, nccl = dict(last.fixed)["CUDA context"], dict(last.fixed)["NCCL"]
        assert dict(last.fixed)["fragmentation"] == pytest.approx(0.02 * (state + last.activations_gb + cuda + nccl))
    # An eager loss's transient (12 bytes a logit) beside the walk's peak outweighs the step's end
    # (16.8 GB against 12.4 GB of activations): the walk stays the peak, with every fixed term.
    walk = Scenario(run_of(stage_outputs_kept=True, loss_kernel="eager")).memory[-1]
    assert walk.peak_microbatches == 1 and "logits" in dict(walk.fixed)
    assert walk.activations_gb * 1e9 < 16 * 4096 * V * 2
    # A flat reserve counts the step's end too.
    flat = Scenario(run_of(stage_outputs_kept=True, memory_policy="full", memory_reserve_gb=5.0)).memory[-1]
    assert flat.activations_gb * 1e9 == pytest.approx(16 * 4096 * V * 2) and flat.reserve_gb == 5.0
    assert flat.peak_microbatches == 0 and flat.fixed == ()
    with pytest.raises(SpecError, match="RunSpec.stage_outputs_kept must be true or false, got 1"):
        run_of(stage_outputs_kept=1)


def test_kept_outputs_at_the_steps_end_by_hand():
    """One output kept per forward, whatever the backward is split into, and the last stage's merged
    once more: 4 ranks, 8 micro-batches, 1 byte an output, 10 on the last stage. ZB-H1 (I and W ops):
    ranks 0-2 keep 8, rank 3 8 x 10 + 8 x 10 = 160; ZBV's rank 0 runs stages 0 and 7: 8 + 80 + 80 =
    168; DualPipe's rank 0 stage 0 of one direction and stage 3 of the other, 4 micro-batches each:
    4 + 40 + 40 = 84. With no activations the walk's peak is the kept outputs alone, forwards inside
    DualPipe's overlapped units too: 4 + 40 = 44 on its rank 0."""
    from sim.schedules import make_schedule
    from sim.training.model.memory import activation_peak, kept_outputs_peak

    def at_end(name, walk=False):
        schedule = make_schedule(name, 4, 8)
        kept = [1.0] * (schedule.num_stages - 1) + [10.0]
        nothing = [(0.0, 0.0)] * schedule.num_stages
        return [activation_peak(ops, nothing, None, kept)[0] if walk else kept_outputs_peak(ops, kept)
                for _, ops in sorted(schedule.ranks.items())]
    assert at_end("zb-h1") == [8, 8, 8, 160]
    assert at_end("zbv") == [168, 16, 16, 16]
    assert at_end("dualpipe") == [84, 8, 8, 84]
    assert at_end("dualpipe", walk=True) == [44, 8, 8, 44]
    assert at_end("zbv", walk=True) == [88, 16, 16, 16]


@settings(max_examples=15, deadline=None)
@given(pp=st.sampled_from([2, 4]), microbatches=st.integers(4, 12), policy=st.sampled_from(["full", "selective-op"]),
       schedule=st.sampled_from(["1f1b", "gpipe"]))
def test_kept_outputs_never_lower_a_ranks_peak(pp, microbatches, policy, schedule):
    """Keeping outputs only adds bytes: no rank's total falls, and the last rank's is at least its
    kept logits twice over (the merge) beside the weights, gradients and optimizer states."""
    base = run_of(pp=pp, microbatches=microbatches, memory_policy=policy, schedule=schedule)
    off, on = Scenario(base).memory, Scenario(base.with_(stage_outputs_kept=True)).memory
    assert all(b.total_gb >= a.total_gb - 1e-9 for a, b in zip(off, on))
    last = on[-1]
    state = last.params_gb + last.grads_gb + last.optimizer_gb
    assert last.total_gb - state >= 2 * microbatches * 4096 * V * 2 / 1e9
