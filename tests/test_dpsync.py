"""sim.training.dpsync: the data-parallel gradient synchronisation and optimizer step, worked by hand."""
import pytest

from sim.training.dpsync import optimizer_seconds, stage_param_counts
from sim.training.model.params import ParamCount
from sim.training.model.specs import load_scenario
from sim.training.scenario import Scenario
from sim.training.step import simulate_step

NV, LAT = 160e9, 3.3e-6          # NVLink bytes/s per direction and GPU -> NVSwitch -> GPU latency
LAUNCH = 10.02e-6                # an NCCL kernel's launch (kernels preset deepep, fitted to XLA's H100 table); its
#                                  NCCL engine, 422.9 GB/s, is above NVLink's 160


@pytest.fixture
def unbound_sends(tmp_path):
    """deepep's kernels with 80 GB/s an SM: a pipeline send's 2 channels inside a node then move
    160 GB/s, NVLink's own (sim.training.comm.sends), so the last backward's send lands before the
    sync's first ring step, as in the closed forms below, instead of draining beside it at 21 GB/s."""
    import yaml

    from sim.training.model.specs import load_presets
    path = tmp_path / "kernels.yaml"
    path.write_text(yaml.safe_dump({**{k: v for k, v in load_presets("kernels")["deepep"].items()
                                       if k != "description"}, "sm_GBps": 80.0}))
    return str(path)


def ring(n, nbytes):
    """A ring reduce-scatter or all-gather of nbytes per GPU inside one NVLink node."""
    return (n - 1) / n * nbytes / NV + (n - 1) * LAT


@pytest.mark.parametrize("zero", [0, 1, 3])
def test_last_rank_sync_by_hand(zero, unbound_sends):
    """Tiny scenario (PP4 x DP4 on two 8-GPU nodes, EP4 = DP: experts are not replicated): rank 3's
    data-parallel group is 4 GPUs of one node, so its gradients (4 bytes per dense parameter) go
    round a 4-GPU NVLink ring; ZeRO-1 then runs the optimizer on a quarter and all-gathers the BF16
    weights; ZeRO-0 all-reduces and updates everything; ZeRO-3 scattered its layers' gradients
    inside the ops and has no all-gather at the end. Each collective first pays an NCCL launch. The
    fabric alone (``nccl_protocol: none``); NCCL's latency on top: tests/test_nccl.py."""
    run = load_scenario("tiny", schedule="1f1b", zero_stage=zero, kernels=unbound_sends, nccl_protocol="none")
    sc = Scenario(run)
    res = simulate_step(sc)
    (count,) = stage_param_counts(sc)[3].values()
    dense = count.dense
    rs = ring(4, 4 * dense)
    head = sc.model.vocab * sc.model.hidden       # ZeRO-3 scatters the layers inside the ops: only the head is left
    expected = {0: 2 * rs + 2 * LAUNCH, 1: rs + ring(4, 2 * dense) + 2 * LAUNCH, 3: ring(4, 4 * head) + LAUNCH}[zero]
    r = res.ranks[3]
    assert r.dp_sync_s == pytest.approx(expected, rel=1e-9)
    per_param = 4 + 2 * 8 + 2
    shard = count.total if zero == 0 else dense / 4 + count.expert
    assert r.optimizer_s == pytest.approx(shard * per_param / (3.35e12 * 0.7), rel=1e-9)
    assert optimizer_seconds(sc, count) == pytest.approx(r.optimizer_s, rel=1e-12)


def test_fsdp_without_resharding_scatters_the_whole_stage_in_the_dp_sync(unbound_sends):
    """ZeRO-3 with reshard_after_forward off (Llama 3's FSDP): no layer scattered its gradients inside
    the ops, so rank 3's data-parallel sync is the reduce-scatter of its whole stage (4 bytes per
    dense parameter round the 4-GPU NVLink ring, after one launch), not the head's alone, and no
    all-gather follows the optimizer (the weights are gathered in the next step's first forward)."""
    run = load_scenario("tiny", schedule="1f1b", zero_stage=3, kernels=unbound_sends, reshard_after_forward=False,
                        nccl_protocol="none")
    sc = Scenario(run)
    res = simulate_step(sc)
    (count,) = stage_param_counts(sc)[3].values()
    assert res.ranks[3].dp_sync_s == pytest.approx(ring(4, 4 * count.dense) + LAUNCH, rel=1e-9)
    head = sc.model.vocab * sc.model.hidden
    resharded = simulate_step(Scenario(run.with_(reshard_after_forward=True)))
    assert resharded.ranks[3].dp_sync_s == pytest.approx(ring(4, 4 * head) + LAUNCH, rel=1e-9)
    assert count.dense > 2 * head


def test_overlap_starts_a_stage_when_its_last_backward_ends_and_end_waits_for_every_rank():
    over = simulate_step(load_scenario("tiny", schedule="1f1b"))
    end = simulate_step(load_scenario("tiny", schedule="1f1b", dp_sync="end"))
    assert end.step_time_s >= over.step_time_s
    assert len({r.sync_start_s for r in end.ranks}) == 1                 # everyone starts at the end
    assert end.ranks[0].sync_start_s == pytest.approx(end.pipeline_end_s)
    assert over.ranks[3].sync_start_s < over.ranks[0].sync_start_s      # in 1F1B rank 3 finishes first


def test_shared_tensors_are_synchronised_once_per_rank():
    """DualPipe's rank 0 holds stage 0 (embedding) and stage P-1 (head, and the MTP's embedding):
    the embedding's gradients are counted with stage 0 only."""
    sc = Scenario(load_scenario("deepseek-v3"))
    counts = stage_param_counts(sc)[0]
    m = sc.model
    vh = m.vocab * m.hidden
    from sim.training.model.params import stage_params
    own0, _ = stage_params(m, sc.chunk.layers_per_stage, 0, 64)
    own15, _ = stage_params(m, sc.chunk.layers_per_stage, 15, 64)
    assert counts[0].total == pytest.approx(own0.total + vh)            # + embedding
    assert counts[15].total == pytest.approx(own15.total + vh)          # + head (embedding already counted)


def test_optimizer_step_is_memory_bound_by_formula():
    sc = Scenario(load_scenario("deepseek-v3"))
    count = ParamCount(1.28e9, 2e8)
    shard = 1.28e9 / 128 + 2e8 / 2
    assert optimizer_seconds(sc, count) == pytest.approx(shard * (4 + 16 + 2) / (3.35e12 * 0.7))


def test_zero3_gathers_and_scatters_each_layer_inside_the_ops():
    from sim.training.dpsync import LayerCollectives
    sc = Scenario(load_scenario("tiny", schedule="1f1b", zero_stage=3))
    res = simulate_step(sc)
    names = {e.name for e in res.part_trace}
    assert {"GATHER(F)", "GATHER(B)", "SCATTER(B)"} <= names
    gather = LayerCollectives(sc).time("gather:moe")
    spans = [e.end - e.start for e in res.part_trace if e.name == "GATHER(F)"]
    assert gather > 0 and spans == pytest.approx([gather] * len(spans))   # a plain op: nothing else in flight
    # memory: sharded weights plus the gathered weights of two layers (the running one, the prefetched one)
    from sim.training.model.memory import model_state_bytes
    from sim.training.model.params import layer_params, rank_params
    count = rank_params(sc.model, sc.chunk.layers_per_stage, {2}, sc.run.ep)
    w, g, o = model_state_bytes(count, 4, 1, 3, 2.0, 4.0, 8.0)
    w += 2 * 2.0 * max(layer_params(sc.model, moe, 4).total for moe in (False, True))
    m = sc.memory[2]
    assert (m.params_gb, m.grads_gb, m.optimizer_gb) == pytest.approx((w / 1e9, g / 1e9, o / 1e9))


@pytest.mark.parametrize("schedule", ["zb-h1", "dualpipe"])
def test_zero3_gathers_and_scatters_once_per_layer_in_every_op(schedule):
    """ZeRO-3: every forward pass of a layer gathers its weights once, every backward pass gathers
    them once, and the op that computes a layer's weight gradients (B with W, W, or an F&B unit's
    backward) scatters them once: counted per op of the traced rank, for split-W ops (zb-h1) and
    overlapped F&B units (dualpipe)."""
    from collections import Counter

    from sim.engine import FBOp
    sc = Scenario(load_scenario("tiny", schedule=schedule, zero_stage=3))
    res = simulate_step(sc)
    ops = res.engine.schedule.ranks[res.traced_rank]
    per_op = {seq: Counter() for seq in range(len(ops))}
    for e in res.part_trace:
        per_op[e.seq][e.name] += 1
    kinds = Counter()
    for seq, op in enumerate(ops):
        parts = [op.f, op.b] if isinstance(op, FBOp) else [op]
        want = Counter()
        for p in parts:
            kinds[p.kind] += 1
            layers = len(sc.chunk.stage_work(p.stage)[0])
            assert layers > 0
            if p.kind == "F":
                want["GATHER(F)"] += layers
            if p.kind != "F" and p.kind != "W":
                want["GATHER(B)"] += layers
            if p.kind in ("B", "W"):
                want["SCATTER(B)"] += layers
        got = Counter({k: v for k, v in per_op[seq].items() if k.startswith(("GATHER", "SCATTER"))})
        assert got == want, (schedule, str(op))
    assert kinds["W" if schedule == "zb-h1" else "B"] > 0
    if schedule == "dualpipe":
        assert any(isinstance(op, FBOp) for op in ops)


@pytest.mark.parametrize("gather", [False, True])
@pytest.mark.parametrize("protocol", ["none", "auto"])
def test_a_ranks_collective_alone_is_the_analytical_networks_run(gather, protocol):
    """The closed form the planner's screen uses (collective_alone_s) against GradientSync running
    the same collective of rank 3 on a fresh analytical network: its launch, then its groups' rings
    alone; the by-hand ring of the test above with NCCL's protocol off."""
    import simpy

    from sim.training.dpsync import GradientSync, collective_alone_s
    sc = Scenario(load_scenario("tiny", schedule="1f1b", zero_stage=1, kernels="deepep", nccl_protocol=protocol,
                                network="analytical"))
    (count,) = stage_param_counts(sc)[3].values()
    env = simpy.Environment()
    done = []
    GradientSync(sc, sc.step_fabric(env), reports=1).collective(3, count, 4.0, gather, lambda: done.append(env.now))
    env.run()
    alone = collective_alone_s(sc, 3, count, 4.0, gather)
    assert alone == pytest.approx(done[0], rel=1e-12)
    if protocol == "none":
        assert alone == pytest.approx(LAUNCH + ring(4, 4 * count.dense), rel=1e-9)
    assert collective_alone_s(sc, 3, ParamCount(0.0, 0.0), 4.0, gather) == 0.0


def test_the_norm_all_reduce_is_a_launch_and_a_trees_hops():
    """16 GPUs: 2 ceil(log2 16) = 8 hops of the latency between GPU 0 and GPU 15, after a launch;
    the sync's property is the same figure."""
    import simpy

    from sim.training.dpsync import GradientSync, norm_allreduce_s
    sc = Scenario(load_scenario("tiny", kernels="deepep"))
    expected = LAUNCH + 8 * sc.links.route(0, 15)[1]
    assert norm_allreduce_s(sc) == pytest.approx(expected, rel=1e-12)
    assert GradientSync(sc, sc.step_fabric(simpy.Environment()), reports=1).norm_allreduce_s == norm_allreduce_s(sc)


def test_fp8_param_gather_gathers_fp8_weights_and_the_optimizer_writes_them():
    """Under ``fp8_param_gather`` the distributed optimizer writes and all-gathers 1-byte FP8 weights
    (FP8 GEMMs); MXFP8's go through the BF16 gradient buffer, 2 bytes; off, ``weight_bytes``."""
    sc = Scenario(load_scenario("deepseek-v3", fp8_param_gather=True, grad_bytes=2.0))
    assert (sc.run.gemm_precision, sc.run.gathered_weight_bytes) == ("fp8", 1.0)
    assert sc.run.with_(gemm_precision="mxfp8").gathered_weight_bytes == 2.0
    assert sc.run.with_(fp8_param_gather=False).gathered_weight_bytes == sc.run.weight_bytes == 2.0
    count = ParamCount(1.28e9, 2e8)
    shard = 1.28e9 / 128 + 2e8 / 2
    assert optimizer_seconds(sc, count) == pytest.approx(shard * (2 + 16 + 1) / (3.35e12 * 0.7))


def test_bf16_gradients_and_fp8_weights_halve_the_data_parallel_collectives():
    """The gradient reduce-scatter moves ``grad_bytes`` a parameter and the weight all-gather
    ``gathered_weight_bytes``: halving both halves every collective's payload, so each of the
    step's reduce-scatters and all-gathers is shorter (bandwidth-bound, not halved: a ring's
    latency stays)."""
    from sim.training.dpsync import LayerCollectives
    fp32 = LayerCollectives(Scenario(load_scenario("tiny", schedule="1f1b", zero_stage=3)))
    bf16 = LayerCollectives(Scenario(load_scenario("tiny", schedule="1f1b", zero_stage=3, grad_bytes=2.0)))
    assert 0 < bf16.time("scatter:moe") < fp32.time("scatter:moe")
    assert bf16.time("gather:moe") == pytest.approx(fp32.time("gather:moe"))


def test_a_per_tensor_zero3_layer_is_its_tensors_collectives_and_copies_by_hand():
    """``zero3_collectives: per-tensor`` (DeepSpeed's ZeRO-3 of 2021): a dense layer of tiny-moe
    (SwiGLU: norm, QKV, o, norm, fc1, fc2; no biases) is gathered one tensor at a time over rank 0's 4
    data-parallel GPUs inside a node, each an NCCL launch and a ring (protocol off), then PyTorch's
    copies out of the list of 4 partitions: 4 launches of 3 us and the tensor read and written at
    the H800's 3.35 TB/s x 0.7. The experts' group is one GPU (EP 4 over DP 4): no copies there."""
    from sim.training.dpsync import LayerCollectives, list_copies_s
    from sim.training.model.params import layer_tensors
    sc = Scenario(load_scenario("tiny", schedule="1f1b", zero_stage=3, zero3_collectives="per-tensor",
                                kernels="deepep", nccl_protocol="none", network="analytical"))
    hbm = 3.35e12 * 0.7
    tensors = layer_tensors(sc.model, False, 4)
    assert len(tensors) == 6
    want = sum(LAUNCH + ring(4, 2.0 * t.dense) + 4 * 3e-6 + 2 * 2.0 * t.dense / hbm for t in tensors)
    per_tensor = LayerCollectives(sc)
    assert per_tensor.time("gather:dense") == pytest.approx(want, rel=1e-9)
    assert list_copies_s(sc, ParamCount(1e6, 0.0), 4.0) == pytest.approx(4 * 3e-6 + 2 * 4e6 / hbm)
    assert list_copies_s(sc, ParamCount(0.0, 1e6), 4.0) == 0.0
    per_layer = LayerCollectives(Scenario(sc.run.with_(zero3_collectives="per-layer")))
    for shape in ("gather:dense", "scatter:dense", "gather:moe", "scatter:moe"):
        assert per_tensor.time(shape) > per_layer.time(shape) > 0     # a launch, a ring's latency and copies each


def test_a_per_tensor_zero3_step_waits_for_every_gather():
    """Blocking gathers: the traced rank's forwards and backwards run no compute beside a GATHER,
    where one collective a layer runs its gathers a layer ahead, beside the compute; the step is
    longer."""
    def beside(res) -> int:
        gathers = [e for e in res.part_trace if e.name.startswith("GATHER")]
        compute = [e for e in res.part_trace if e.name.startswith(("ATTN", "MLP", "EMBED", "HEAD"))]
        assert gathers and compute
        return sum(c.start < g.end - 1e-12 and g.start < c.end - 1e-12 for g in gathers for c in compute)

    per_layer = Scenario(load_scenario("tiny", schedule="1f1b", zero_stage=3))
    per_tensor = Scenario(per_layer.run.with_(zero3_collectives="per-tensor"))
    blocking, ahead = simulate_step(per_tensor), simulate_step(per_layer)
    assert beside(blocking) == 0 < beside(ahead)
    assert blocking.step_time_s > ahead.step_time_s


def test_deepspeed_regathers_what_its_reuse_distance_released():
    """GPT 174.6B's layer (modules of 24,576, 453M, 151M, 24,576, 604M and 604M parameters): between
    a module's recomputed forward and its backward run every later module twice, and DeepSpeed
    releases a module whose next use is more than 1e9 parameters away (stage3_max_reuse_distance's
    default): every tensor but fc2's weight and bias (fc1: 2 x 604M = 1.21e9 > 1e9). tiny-moe's
    layers are far under it: nothing. A fully recomputed layer's backward then gathers twice."""
    from sim.training.dpsync import LayerCollectives, regathered_tensors
    from sim.training.model.params import layer_tensors
    from validation.predict import scenario_of
    from validation.suite import load_runs
    run = next(r for r in load_runs() if r.id == "mt-t2-zero3-174.6b-384")
    big = scenario_of(run)
    assert big.run.zero3_collectives == "per-tensor" and big.run.memory_policy == "full"
    assert regathered_tensors(big, False) == layer_tensors(big.model, False, 1)[:10]
    tiny = Scenario(load_scenario("tiny", schedule="1f1b", zero_stage=3, zero3_collectives="per-tensor",
                                  memory_policy="full"))
    assert regathered_tensors(tiny, False) == [] == regathered_tensors(tiny, True)
    assert LayerCollectives(tiny).time("regather:dense") == 0.0
    names = {e.name for e in simulate_step(tiny).part_trace}
    assert {"GATHER(F)", "GATHER(B)", "REGATHER(B)", "SCATTER(B)"} <= names
    lc = LayerCollectives(big)
    assert 0 < lc.time("regather:dense") < lc.time("gather:dense")
