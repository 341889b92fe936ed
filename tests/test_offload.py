"""Activation offloading (``RunSpec.activation_offload``): the memory it frees and the copy time it
exposes, by hand; bad input in one line."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.training.costs.chunk import ChunkModel
from sim.training.model.memory import layer_held_per_token, offloaded_layer_bytes
from sim.training.model.specs import RunSpec, SpecError, load_gpu, load_model
from sim.training.scenario import Scenario

M, G = load_model("llama3-8b"), load_gpu("h100")


def run_of(**changes) -> RunSpec:
    return RunSpec(**{**dict(model="llama3-8b", gpu="h100", topology="h100-1024", pp=4, dp=2, ep=1, schedule="1f1b",
                             microbatches=8, seq_len=4096, microbatch_size=2), **changes})


def test_offloading_frees_its_share_of_the_layers_activations():
    """A middle stage (8 layers, no head or embedding) under 1F1B holds 4 micro-batches at its peak
    on rank 1 (P - 1 = 3 ahead of it plus its own): offloading 40% leaves 60% of each."""
    full, part = Scenario(run_of()).memory[1], Scenario(run_of(activation_offload=0.4)).memory[1]
    per_layer = layer_held_per_token(M, run_of(), False, False) * 8192
    assert full.activations_gb == pytest.approx(full.peak_microbatches * 8 * per_layer / 1e9)
    assert part.activations_gb == pytest.approx(0.6 * full.activations_gb)
    assert offloaded_layer_bytes(M, run_of(activation_offload=0.4), False, False) == pytest.approx(0.4 * per_layer)


def test_a_copy_longer_than_the_layers_compute_is_exposed_by_hand():
    """The H100's PCIe Gen5 moves 64 GB/s each way: a layer's offloaded bytes over it, less the
    layer's forward (or backward) it overlaps, is added to that pass; a short copy adds nothing."""
    base = ChunkModel(M, G, run_of(), 4).layer_cost(False)
    for share in (0.05, 1.0):
        cost = ChunkModel(M, G, run_of(activation_offload=share), 4).layer_cost(False)
        copy = offloaded_layer_bytes(M, run_of(activation_offload=share), False, False) / 64e9
        backward = base.backward_i + base.attn_r + base.mlp_r
        assert cost.forward == pytest.approx(max(base.forward, copy))
        assert cost.backward_i + cost.attn_r + cost.mlp_r == pytest.approx(max(backward, copy))
    assert ChunkModel(M, G, run_of(activation_offload=0.05), 4).layer_cost(False).forward == base.forward


def test_an_moe_layer_offloads_what_it_keeps_and_its_exposed_copy_is_not_stretched():
    """An MoE layer copies its own saved bytes (its experts' token copies included), more than a
    dense layer of the model would; beside a communication kernel only the layer's kernels are
    stretched, not the copy's exposed seconds: ratio = (kernels beside + exposed) / (kernels alone + exposed)."""
    m = load_model("qwen3-30b-a3b")
    run = RunSpec(model="qwen3-30b-a3b", gpu="h100", topology="h100-1024", pp=4, dp=8, ep=8, schedule="1f1b",
                  microbatches=8, seq_len=4096, activation_offload=1.0)
    assert offloaded_layer_bytes(m, run, True, False) > offloaded_layer_bytes(m, run, False, False)
    plain = ChunkModel(m, G, run.with_(activation_offload=0.0), 4, beside_comm=(20, 0.2)).layer_cost(True)
    cost = ChunkModel(m, G, run, 4, beside_comm=(20, 0.2)).layer_cost(True)
    copy = offloaded_layer_bytes(m, run, True, False) / 64e9
    exposed = copy - plain.forward
    assert exposed > 0 and cost.forward == pytest.approx(copy)
    assert cost.mlp_f == pytest.approx(plain.mlp_f + exposed)
    assert cost.beside_ratio("mlp_f") == pytest.approx(
        (plain.beside_ratio("mlp_f") * plain.mlp_f + exposed) / (plain.mlp_f + exposed), rel=1e-12)
    assert cost.beside_ratio("attn_f") == plain.beside_ratio("attn_f")


@pytest.mark.parametrize("changes,message", [
    (dict(activation_offload=1.5), r"RunSpec.activation_offload \(the share of each layer's saved activations kept "
                                   r"in host memory\) must be a finite number in \[0, 1\], got 1.5"),
    (dict(activation_offload=-0.1), r"must be a finite number in \[0, 1\], got -0.1"),
])
def test_an_offload_share_outside_0_1_is_one_line(changes, message):
    with pytest.raises(SpecError, match=message):
        run_of(**changes)


def test_a_gpu_without_a_host_link_cannot_offload():
    with pytest.raises(SpecError, match="GPU b200 has no host_GBps"):
        Scenario(run_of(gpu="b200", topology="dgx-b200", activation_offload=0.5)).chunk


@settings(max_examples=15, deadline=None)
@given(share=st.floats(0, 0.9), more=st.floats(0.01, 0.1))
def test_more_offloading_never_holds_more_memory_nor_runs_faster(share, more):
    a, b = run_of(activation_offload=share), run_of(activation_offload=share + more)
    for x, y in zip(Scenario(a).memory, Scenario(b).memory):
        assert y.total_gb <= x.total_gb
    fa, fb = (ChunkModel(M, G, r, 4).layer_cost(False) for r in (a, b))
    assert fb.forward >= fa.forward and fb.backward_i >= fa.backward_i


def test_the_figures_docs_model_quotes():
    """docs/model.md: Llama 3 8B at 16K tokens a micro-batch keeps 2.3 GB a layer; offloading all
    of it takes 36 ms each way over an H100's PCIe, against a forward of about 13 ms."""
    run = run_of(seq_len=8192, activation_offload=1.0)
    nbytes = offloaded_layer_bytes(M, run, False, False)
    assert nbytes / 1e9 == pytest.approx(2.3, abs=0.05) and nbytes / 64e9 == pytest.approx(0.036, abs=0.0005)
    assert ChunkModel(M, G, run_of(seq_len=8192), 4).layer_cost(False).forward == pytest.approx(0.013, abs=0.0015)
