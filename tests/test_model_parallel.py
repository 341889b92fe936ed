"""sim.training.comm.model_parallel and the TP/CP parts of a step: collectives worked by hand on one NVLink
node, the CP ring's overlap, the compute a GPU keeps, and the refusals."""
import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st

from sim.network.collectives import nccl_ring_cost
from sim.training.comm.collective_shapes import kv_heads_per_gpu, model_parallel_shapes
from sim.training.comm.model_parallel import ModelParallelComm, blocks_wait
from sim.training.costs.chunk import ChunkModel
from sim.training.model.specs import RunSpec, SpecError, load_gpu, load_model
from sim.training.scenario import Scenario
from sim.training.step import MoEStep


def node_run(**changes) -> RunSpec:
    """Llama 3 8B (h 4096, 32 heads, 8 key/value heads of 128) on one H800 node (NVLink 160 GB/s
    per direction), one sequence of 4,096 tokens."""
    run = RunSpec(model="llama3-8b", gpu="h800", topology="h800-node", pp=1, dp=1, ep=1, tp=8, schedule="1f1b",
                  microbatches=1, seq_len=4096, nccl_protocol="none")   # the fabric alone: NCCL's latency in test_nccl
    return run.with_(**changes)


def link(sc: Scenario) -> tuple[float, float]:
    """(bytes/s of a GPU-to-GPU flow alone, its route's latency) on the scenario's step fabric."""
    return sc.step_fabric(simpy.Environment()).route_bandwidth(0, 1), sc.links.route(0, 1)[1]


@pytest.mark.parametrize("t", [2, 4, 8])
def test_a_tp_all_reduce_on_one_nvlink_node_by_hand(t):
    """Ring all-reduce of n = 4,096 tokens x 4,096 x 2 bytes over t GPUs: an NCCL launch, then
    2 (t - 1) steps of n / t bytes, each the route's latency plus n / t over 160 GB/s."""
    sc = Scenario(node_run(tp=t, dp=8 // t))
    bw, latency = link(sc)
    assert bw == 160e9
    n = 4096 * 4096 * 2
    expected = sc.kernels.nccl_launch_s + 2 * (t - 1) * (latency + n / t / bw)
    assert ModelParallelComm(sc).time("tp_all_reduce") == pytest.approx(expected, rel=1e-12)


def test_sequence_parallelism_moves_the_same_bytes_in_two_halves():
    """An all-gather and a reduce-scatter are (t - 1) steps each: together an all-reduce's bytes,
    with one more launch."""
    sc = Scenario(node_run(sequence_parallel=True))
    mp = ModelParallelComm(sc)
    bw, latency = link(sc)
    half = sc.kernels.nccl_launch_s + 7 * (latency + 4096 * 4096 * 2 / 8 / bw)
    assert mp.time("tp_all_gather") == pytest.approx(half) and mp.time("tp_reduce_scatter") == pytest.approx(half)
    assert {s.name for s in model_parallel_shapes(sc.model, sc.run)} == {"tp_all_gather", "tp_reduce_scatter"}
    shapes = model_parallel_shapes(sc.model, sc.run.with_(cp=2, dp=1, tp=4))
    assert {(s.name, s.axis, s.algorithm) for s in shapes} == {
        ("tp_all_gather", "tp", "ring"), ("tp_reduce_scatter", "tp", "ring"), ("cp_kv", "cp", "ring")}


def test_a_ring_attention_steps_bytes_and_what_the_attention_hides():
    """CP 4 x TP 2: each GPU holds 1,024 tokens and 8 / 2 = 4 key/value heads of 128, so it passes
    K = 1,024 x 2 x 4 x 128 x 2 bytes to its neighbour in each of 3 steps of s (the route's latency
    and K at link speed) after the launch L; block j lands at L + j s, and the forward waits for
    max(0, L + s - a, L + 3 (s - a)), a a quarter of the attention core; the backward for twice the
    bytes behind twice the core."""
    sc = Scenario(node_run(tp=2, cp=4))
    m = sc.model
    assert kv_heads_per_gpu(m, 2) == 4
    [shape] = [s for s in sc.collectives if s.axis == "cp"]
    assert shape.bytes_per_token == 2 * 4 * 128 * 2
    K = 1024 * shape.bytes_per_token
    bw, latency = link(sc)
    mp = ModelParallelComm(sc)
    ring = sc.kernels.nccl_launch_s + 3 * (latency + K / bw)
    assert mp.cp_ring_seconds() == pytest.approx(ring)
    core = sc.chunk.stage_layers[0][0].core_f
    assert core > 0
    L, s, a = sc.kernels.nccl_launch_s, latency + K / bw, core / 4
    assert mp.block_seconds("cp_kv:f") == pytest.approx(a) and mp.block_seconds("cp_kv:b") == pytest.approx(2 * a)
    assert mp.time("cp_kv:f") == pytest.approx(max(0.0, L + s - a, L + 3 * (s - a)))
    s_b = latency + 2 * K / bw
    assert mp.cp_ring_seconds(backward=True) == pytest.approx(L + 3 * s_b)
    assert mp.time("cp_kv:b") == pytest.approx(max(0.0, L + s_b - 2 * a, L + 3 * (s_b - 2 * a)))
    with pytest.raises(ValueError, match=r"^cp_kv:f: a CP ring's exposed time needs its blocks' arrivals"):
        mp.exposed("cp_kv:f", 1.0)
    assert mp.exposed("tp_all_reduce", 1.0) == 1.0                       # a TP collective: all of it
    assert kv_heads_per_gpu(m, 16) == 1.0                 # fewer heads than GPUs: a copy each
    one_layer = Scenario(node_run(tp=2, cp=2, pp=2, first_stage_layers=1, microbatches=2))   # stage 0: 1 layer
    assert ModelParallelComm(one_layer).time("cp_kv:f") >= 0
    # the TP groups of every CP coordinate run at once, each on GPUs of its own: no contention
    assert mp.time("tp_all_reduce") == pytest.approx(
        sc.kernels.nccl_launch_s + 2 * (latency + 1024 * 4096 * 2 / 2 / bw))


def test_the_attention_waits_for_each_block_of_the_ring_as_it_lands():
    """Blocks of 2 s of attention; the own block first. Blocks landing at 3, 5 and 7 s: block 1
    starts at 3 (1 s late), then 5 and 7 on time: 1 s. A latency of 4 s before steps of 1 s (5, 6,
    7): the first block's 3 s late and the rest wait for it: 3 s, where the whole ring less 3 blocks
    (7 - 6) would say 1 s. Blocks that land early cost nothing; the order they land in does not
    matter (each is a block of the same causal work)."""
    assert blocks_wait([3.0, 5.0, 7.0], 2.0) == 1.0
    assert blocks_wait([5.0, 6.0, 7.0], 2.0) == 3.0
    assert blocks_wait([0.5, 1.0, 1.5], 2.0) == 0.0 and blocks_wait([], 2.0) == 0.0
    assert blocks_wait([7.0, 3.0, 5.0], 2.0) == 1.0


@given(st.lists(st.floats(0, 100), max_size=8), st.floats(0.01, 50), st.floats(0, 10))
def test_a_later_block_never_shortens_the_wait(arrivals, block, later):
    """Property: the wait is at least the whole ring less the blocks after the first (the formula
    that lets later blocks' slack hide the first block's latency), at most the last arrival, and a
    block landing later never makes it shorter."""
    wait = blocks_wait(arrivals, block)
    if arrivals:
        assert max(0.0, max(arrivals) - (len(arrivals)) * block) <= wait + 1e-9 <= max(arrivals) + 1e-9
        assert blocks_wait([arrivals[0] + later] + arrivals[1:], block) >= wait
    else:
        assert wait == 0.0


@pytest.mark.parametrize("compute_model", ["flops", "kernels"])
def test_a_gpu_computes_one_tp_x_cp_share_of_every_flop(compute_model):
    """The chunk model at TP 4 x CP 2: the useful FLOPs counted for MFU are the whole micro-batch's,
    in either compute model. In the FLOPs model every compute part is 1/8 of the unsplit one (GEMMs
    and the attention core alike); the kernel model's parts are more than 1/8 (smaller GEMMs fill
    fewer waves, launches do not shrink) and less than the whole."""
    m, gpu = load_model("llama3-8b"), load_gpu("h800")
    one = ChunkModel(m, gpu, node_run(tp=1, dp=8, compute_model=compute_model), 1)
    split = ChunkModel(m, gpu, node_run(tp=4, cp=2, dp=1, compute_model=compute_model), 1)
    a, b = one.stage_layers[0][0], split.stage_layers[0][0]
    for part in ("attn_f", "attn_i", "attn_w", "mlp_f", "mlp_i", "mlp_w", "core_f"):
        if compute_model == "flops":
            assert getattr(b, part) == pytest.approx(getattr(a, part) / 8)
        else:
            assert getattr(a, part) / 8 < getattr(b, part) < getattr(a, part)
    assert b.flops == pytest.approx(a.flops, rel=1e-12) and split.model_flops_per_microbatch() == one.model_flops_per_microbatch()
    assert split.activation_bytes() == pytest.approx(one.activation_bytes() / 8)   # T/2 tokens, 1/4 each


def test_a_tp_step_exposes_its_collectives_and_reports_them():
    """One rank, one micro-batch at TP 8: per layer two all-reduces forward and two backward, each
    on the compute path, reported in tp_comm_s and inside the exposed communication."""
    sc = Scenario(node_run())
    res = MoEStep(sc).simulate()
    ar = ModelParallelComm(sc).time("tp_all_reduce")
    rank = res.ranks[0]
    assert rank.tp_comm_s == pytest.approx(4 * sc.model.layers * ar)
    assert rank.exposed_comm_s == pytest.approx(rank.tp_comm_s) and rank.cp_comm_s == 0
    assert res.to_json()["ranks"][0]["tp_comm_s"] == rank.tp_comm_s
    from sim.training.model.recipe import recipe_line
    assert "TP8 x PP1 x DP1" in recipe_line(res.recipe)
    full = MoEStep(Scenario(node_run(memory_policy="full"))).simulate()
    assert full.ranks[0].tp_comm_s == pytest.approx(6 * sc.model.layers * ar)     # the recomputed forward's too


def test_a_part_shapes_axis_comes_from_its_collective_shape():
    """The axis is the CollectiveShape's (expert TP's counted as TP), not read from the name: a shape
    renamed keeps its axis, and a shape this run does not measure has none."""
    import dataclasses
    sc = Scenario(node_run(tp=2, cp=2, sequence_parallel=True))
    mp = ModelParallelComm(sc)
    assert [mp.axis(s) for s in ("tp_all_gather", "cp_kv:f", "cp_kv:b", "dispatch", "gather:dense")] == \
        ["tp", "cp", "cp", "", ""]
    mp.shapes = {"ring_x": dataclasses.replace(mp.shapes["cp_kv"], name="ring_x"),
                 "ring_y": dataclasses.replace(mp.shapes["tp_all_gather"], name="ring_y", axis="etp")}
    assert (mp.axis("ring_x:b"), mp.axis("ring_y"), mp.axis("tp_all_gather")) == ("cp", "tp", "")


@pytest.mark.parametrize("changes,pattern", [
    (dict(cp=3, tp=2), r"RunSpec.cp \(3\) must split seq_len \(4096\) into 2 x cp equal chunks"),
    (dict(tp=0), r"RunSpec.tp must be"),
    (dict(sequence_parallel="yes"), r"RunSpec.sequence_parallel must be true or false, got 'yes'"),
])
def test_bad_tp_and_cp_fields_are_one_line(changes, pattern):
    with pytest.raises(SpecError, match=pattern) as info:
        node_run(**changes)
    assert "\n" not in str(info.value)


def test_moe_without_sequence_parallelism_is_refused_with_tp():
    with pytest.raises(SpecError, match=r"sequence_parallel must be true for an MoE model with tp \(2\)"):
        Scenario(node_run(model="tiny-moe", tp=2, dp=4))


def test_fb_units_run_tp_collectives_beside_the_other_chunks_compute():
    """DualPipeV on one node (PP 2, DP 2, TP 2): inside each F&B unit a chunk's TP all-reduce runs
    while the other chunk computes, so less of the TP time is exposed than under 1F1B, where every
    all-reduce blocks the compute stream."""
    run = node_run(tp=2, dp=2, pp=2, schedule="dualpipev", microbatches=4)
    res = MoEStep(Scenario(run)).simulate()
    fb = [e for e in res.part_trace if e.fb]
    tp_parts = [e for e in fb if e.name.startswith("TP-AR")]
    compute = [e for e in fb if e.stream == 0]
    assert tp_parts and any(c.start < t.end and t.start < c.end for t in tp_parts for c in compute
                            if c.op == t.op)
    plain = MoEStep(Scenario(run.with_(schedule="1f1b"))).simulate()
    for r, p in zip(res.ranks, plain.ranks):
        assert r.exposed_comm_s < r.tp_comm_s and p.exposed_comm_s == pytest.approx(p.tp_comm_s)


def test_fsdp_without_resharding_gathers_once_per_step_and_scatters_in_the_dp_sync():
    """ZeRO-3 on Llama 3 8B (PP2, DP4, 4 micro-batches): by default every forward and backward gathers
    each layer's weights and every backward scatters its gradients; with reshard_after_forward off
    (Llama 3's FSDP) only the first forward of each stage gathers (each layer's, a layer ahead on the
    data-parallel stream), the gradients go in the data-parallel sync, and a GPU holds its stage's
    whole weights."""
    run = RunSpec(model="llama3-8b", gpu="h100", topology="h100-1024", pp=2, dp=4, ep=1, schedule="1f1b",
                  microbatches=4, seq_len=2048, zero_stage=3, memory_policy="selective")

    def parts(res, name):
        return sum(1 for e in res.part_trace if e.name == name)
    each = MoEStep(Scenario(run)).simulate()
    once_sc = Scenario(run.with_(reshard_after_forward=False))
    once = MoEStep(once_sc).simulate()
    layers = once_sc.chunk.layers_per_stage[once_sc.layout.traced_rank]
    assert parts(each, "GATHER(F)") == parts(each, "GATHER(B)") == parts(each, "SCATTER(B)") == 4 * layers
    assert parts(once, "GATHER(F)") == layers and parts(once, "GATHER(B)") == parts(once, "SCATTER(B)") == 0
    assert {e.stream for e in each.part_trace if e.name in ("GATHER(F)", "GATHER(B)", "SCATTER(B)")} == {2}
    assert once.step_time_s < each.step_time_s
    weights = Scenario(run).memory[0].params_gb
    # whole BF16 weights (2 bytes a parameter), besides the GPU's shard of them (2 bytes over DP 4), against
    # 8-byte optimizer states sharded over DP 4
    assert once_sc.memory[0].params_gb == pytest.approx(once_sc.memory[0].optimizer_gb * 4 * (2 + 2 / 4) / 8)
    assert once_sc.memory[0].params_gb > weights


@pytest.mark.parametrize("ag,rs,end", [(0.5, 0.7, 5.0), (3.0, 3.0, 8.0)])
def test_an_overlapped_block_runs_its_gather_and_scatter_beside_its_gemm(ag, rs, end):
    """A (1 s), then a block AG | B (2 s) | RS, then C (1 s), SMs shared at 1.5x: AG and RS start with
    B when A ends (t = 1), B runs slowed to 3 s (its communication is launched when it starts), C
    waits for B and RS: max(1 + 3, 1 + ag + rs) + 1."""
    import numpy as np

    from sim.training.costs.streams import COMM, COMPUTE, Part, as_streams, compile_plan, compute_durations, run_op
    chain = [Part(COMPUTE, "A", 1.0), Part(COMM, "AG", shape="ag", overlap="next"), Part(COMPUTE, "B", 2.0),
             Part(COMM, "RS", shape="rs", overlap="prev"), Part(COMPUTE, "C", 1.0)]
    plan = compile_plan(*as_streams(chain))
    t = run_op(plan, np.zeros(1), compute_durations(plan, np.ones(1), 1.5), [ag, rs])
    assert float(t.end[0]) == pytest.approx(end)
    plain = [Part(p.stream, p.name, p.seconds, p.shape) for p in chain]          # the same, exposed
    plan = compile_plan(*as_streams(plain))
    t = run_op(plan, np.zeros(1), compute_durations(plan, np.ones(1), 1.5), [ag, rs])
    assert float(t.end[0]) == pytest.approx(1 + ag + 2 + rs + 1)


@given(head=st.floats(0.01, 5), rest=st.floats(0.01, 5), tail=st.floats(0.01, 5), ag=st.floats(0, 5),
       rs=st.floats(0, 5))
def test_a_tp_collective_hides_only_behind_the_gemm_it_is_paired_with(head, rest, tail, ag, rs):
    """A (1 s), then a block split as TP overlap pairs it: AG beside its input GEMM (head), the
    rest, RS beside its output GEMM (tail), then C (1 s), nothing slowed: 1 + max(ag, head) + rest +
    max(tail, rs) + 1; never less than the whole block with both beside it, never more than exposed."""
    import numpy as np

    from sim.training.costs.streams import COMM, COMPUTE, Part, as_streams, compile_plan, compute_durations, run_op

    def end(chain):
        plan = compile_plan(*as_streams(chain))
        return float(run_op(plan, np.zeros(1), compute_durations(plan, np.ones(1), 1.0), [ag, rs]).end[0])
    a, c = Part(COMPUTE, "A", 1.0), Part(COMPUTE, "C", 1.0)
    ag_part, rs_part = Part(COMM, "AG", shape="ag", overlap="next"), Part(COMM, "RS", shape="rs", overlap="prev")
    split = end([a, ag_part, Part(COMPUTE, "B", head), Part(COMPUTE, "B", rest), Part(COMPUTE, "B", tail), rs_part, c])
    assert split == pytest.approx(1 + max(ag, head) + rest + max(tail, rs) + 1, rel=1e-9)
    whole = end([a, ag_part, Part(COMPUTE, "B", head + rest + tail), rs_part, c])
    block = Part(COMPUTE, "B", head + rest + tail)
    exposed = end([a, Part(COMM, "AG", shape="ag"), block, Part(COMM, "RS", shape="rs"), c])
    assert whole - 1e-9 <= split <= exposed + 1e-9


def test_tp_comm_overlap_hides_the_tp_collectives_behind_their_gemms():
    """Llama 3 8B at TP 8 with SP on one node: overlapped, the step is shorter than exposed and no
    shorter than its compute slowed by 132 / 130 (2 of the H800's SMs held); it needs SP."""
    exposed = MoEStep(Scenario(node_run(sequence_parallel=True))).simulate()
    overlapped_sc = Scenario(node_run(sequence_parallel=True, tp_comm_overlap=True))
    assert overlapped_sc.sm_slowdown == pytest.approx(132 / 130)
    overlapped = MoEStep(overlapped_sc).simulate()
    rank = overlapped.ranks[0]
    assert overlapped.step_time_s < exposed.step_time_s
    assert rank.exposed_comm_s < exposed.ranks[0].exposed_comm_s
    assert overlapped.step_time_s >= exposed.ranks[0].compute_s
    layer = overlapped_sc.chunk.layer_cost(False)
    assert {name for name, _, _ in layer.tp_gemms} == {"attn_f", "attn_i", "attn_r", "mlp_f", "mlp_i", "mlp_r"}
    with pytest.raises(SpecError, match="tp_comm_overlap needs tp > 1 and sequence_parallel: true"):
        node_run(tp_comm_overlap=True)


def test_overlap_parts_with_no_compute_beside_them_run_in_chain_order():
    """An overlap="next" part followed by a communication part, or last in the chain, has no block:
    the chain runs one part after the other."""
    import numpy as np

    from sim.training.costs.streams import COMM, COMPUTE, Part, as_streams, compile_plan, compute_durations, run_op
    chain = [Part(COMPUTE, "A", 1.0), Part(COMM, "AG", shape="ag", overlap="next"), Part(COMM, "D", shape="d"),
             Part(COMPUTE, "C", 1.0), Part(COMM, "AG2", shape="ag", overlap="next")]
    plan = compile_plan(*as_streams(chain))
    t = run_op(plan, np.zeros(1), compute_durations(plan, np.ones(1), 1.5), [0.5, 0.25, 0.125])
    assert float(t.end[0]) == pytest.approx(1 + 0.5 + 0.25 + 1 + 0.125)


@pytest.mark.parametrize("changes", [dict(), dict(tp=2, cp=4)])
def test_live_tp_and_cp_collectives_alone_take_their_measured_time(changes):
    """Nothing else on the fabric: each TP ring and CP ring started live lasts what it was measured
    to last, so the step and its TP and CP seconds are the measured mode's."""
    run = node_run(**changes)
    measured, live = (MoEStep(Scenario(run.with_(communication=c))).simulate() for c in ("measured", "live"))
    assert live.step_time_s == pytest.approx(measured.step_time_s, rel=1e-9)
    for axis in ("tp_comm_s", "cp_comm_s"):
        assert getattr(live.ranks[0], axis) == pytest.approx(getattr(measured.ranks[0], axis), rel=1e-9)
    assert live.ranks[0].tp_comm_s > 0 and (live.ranks[0].cp_comm_s > 0) == ("cp" in changes)


def test_live_tp_rings_meet_the_data_parallel_sync():
    """Interleaved 1F1B on one node (PP 2 x 2 chunks, DP 2, TP 2): a rank's later stage finishes its
    gradients first, and their data-parallel all-reduce shares the lead GPU's NVLink with the TP
    all-reduces of the rank's other stage, so live TP seconds exceed the measured ones."""
    run = node_run(pp=2, dp=2, tp=2, schedule="interleaved-1f1b", chunks=2, microbatches=4)
    measured, live = (MoEStep(Scenario(run.with_(communication=c))).simulate() for c in ("measured", "live"))
    for m, lv in zip(measured.ranks, live.ranks):
        assert lv.tp_comm_s > 1.01 * m.tp_comm_s
    assert live.step_time_s > measured.step_time_s


def test_a_cp_ring_across_nodes_runs_at_the_nics_speed():
    """TP 8 x CP 2 on 8-GPU H100 nodes: each CP pair is GPU i of node 0 and GPU i of node 1, so the
    key/value ring crosses the network: one step of K = 16,384 tokens x 512 bytes over the 50 GB/s
    NIC and its route's latency, after the launch, the 8 pairs at once on their own rails; far
    above the launch and far below the same bytes on NVLink. As NCCL runs it: 16.8 MB over 2 nodes
    takes Simple, whose latency (8.4 us + one 14 us network step) stands in for the route's, and
    each GPU's pass over its own block (sim.network.nccl_rates, the deepep kernels' calibration)."""
    run = RunSpec(model="llama3-8b", gpu="h100", topology="h100-1024", pp=1, dp=1, ep=1, tp=8, cp=2,
                  sequence_parallel=True, schedule="1f1b", microbatches=1, seq_len=32768)
    sc = Scenario(run)
    mp = ModelParallelComm(sc)
    _, groups, _ = mp.rings("cp_kv", 0, range(1))
    assert groups == [[i, i + 8] for i in range(8)]
    fabric = sc.step_fabric(simpy.Environment())
    nic, nvlink = fabric.route_bandwidth(0, 8), fabric.route_bandwidth(0, 1)
    assert nic == 50e9 and nvlink > 4 * nic
    K = 16384 * 512
    cost, charged = nccl_ring_cost(fabric, "all_gather", [0, 8], 2 * K, "auto")
    assert cost.protocol == "Simple" and charged == sc.links.route(0, 8)[1]
    expected = (mp.launch_s + sc.links.route(0, 8)[1] + K / nic + (22.4e-6 - charged)
                + sc.kernels.nccl_rates.slice_s("all_gather", 2 * K, 2))
    assert mp.cp_ring_seconds() == pytest.approx(expected, rel=1e-9)
    assert mp.cp_ring_seconds() > 20 * mp.launch_s
