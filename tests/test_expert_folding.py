"""An MoE model with tensor or context parallelism: EP folded over the TP, CP and DP GPUs
(Megatron-Core's parallel folding, expert TP 1): the all-to-alls among every GPU of the EP group,
each GPU's tokens its sequence shard, whole experts per GPU, and the TP parts an MoE layer has;
expert TP above 1: strided EP groups side by side, the gather and reduce-scatter around the
experts, split experts and the gathered copies kept."""
import pytest

from sim.training.comm.alltoall import CommModel
from sim.training.costs.chunk import LayerCost, StageEnds
from sim.training.costs.parts import ModelParallelParts, backward_parts, forward_parts
from sim.training.model.memory import sharding_groups
from sim.training.model.params import rank_params
from sim.training.model.specs import RunSpec, SpecError, load_model
from sim.training.scenario import Scenario
from sim.training.step import MoEStep

BF16_BYTES = 2.0


def moe_run(**changes) -> RunSpec:
    """tiny-moe (16 routed experts, top 2, one shared expert) on one H800 node."""
    run = RunSpec(model="tiny-moe", gpu="h800", topology="h800-node", pp=1, dp=4, ep=8, tp=2, sequence_parallel=True,
                  schedule="1f1b", microbatches=2, seq_len=2048, compute_model="flops",
                  nccl_protocol="none")      # the fabric alone (NCCL's latency: tests/test_nccl.py)
    return run.with_(**changes)


def comm_of(run: RunSpec) -> CommModel:
    sc = Scenario(run)
    return CommModel(sc.run, sc.model, sc.links, sc.layout, sc.collectives)


def test_a_folded_all_to_all_is_the_same_as_tp1_with_each_gpus_sequence_shard():
    """TP 2 x DP 4, EP 8: every GPU of the node dispatches its half of a 2,048-token sequence to the
    experts of all 8 GPUs, the same traffic as TP 1 x DP 8 with 1,024-token sequences."""
    folded, plain = comm_of(moe_run()), comm_of(moe_run(tp=1, dp=8, seq_len=1024, sequence_parallel=False))
    assert folded.tokens_per_gpu == 1024 == plain.tokens_per_gpu
    assert folded.layout.ep_group(0, 0) == list(range(8)) == plain.layout.ep_group(0, 0)
    for shape in ("dispatch", "combine"):
        assert folded.time(shape, 0, 0) == pytest.approx(plain.time(shape, 0, 0), rel=1e-12)
        assert folded.time(shape, 0, 0) > 0


def test_skewed_load_of_a_replica_is_its_busiest_gpu():
    comm = comm_of(moe_run(routing_skew=1.0))
    received = comm.traffic(0, 0).gpu_tokens.sum(axis=0)
    expected = received.reshape(4, 2).max(axis=1) / received.mean()
    assert [comm.load_factor(0, d) for d in range(4)] == pytest.approx(list(expected))
    assert max(expected) > 1


def test_experts_are_whole_on_each_gpu_and_synced_over_their_copies():
    model = load_model("tiny-moe")
    count = rank_params(model, [8], {0}, ep=8)
    assert count.split(2).expert == count.expert and count.split(2).dense == count.dense / 2
    assert sharding_groups(moe_run(dp=8, ep=8)) == (8, 2)          # 16 GPUs, each expert on 2 of them
    assert sharding_groups(moe_run(tp=1, dp=8, ep=8, sequence_parallel=False)) == (8, 1)


def _moe_layer() -> LayerCost:
    return LayerCost(1.0, 2.0, 1.0, 3.0, 3.0, 3.0, moe=True, routed_share=0.9, flops=1.0)


@pytest.mark.parametrize("shared,mlp_parts", [(True, 2), (False, 0)])
def test_an_moe_layers_mlp_has_tp_parts_only_for_its_shared_experts(shared, mlp_parts):
    mp = ModelParallelParts("sp", moe_mlp_tp=shared)
    names = [p.name for p in forward_parts([_moe_layer()], StageEnds(), mp=mp)]
    between = names[names.index("DISPATCH(F)") + 1:names.index("COMBINE(F)")]
    assert between.count("MLP(F)") == 1 and len(between) == 1 + mlp_parts
    assert names[:3] == ["TP-AG(F)", "ATTN(F)", "TP-RS(F)"]
    back = [p.name for p in backward_parts([_moe_layer()], StageEnds(), with_w=True, mp=mp)]
    assert sum(n.startswith("TP-") for n in back) == 2 + mlp_parts


def test_a_folded_step_runs_with_tp_collectives_and_all_to_alls():
    sc = Scenario(moe_run())
    assert sc.layout.ep_replicas == 4 and sc.model_parallel_parts.moe_mlp_tp
    res = MoEStep(sc).simulate()
    rank = res.ranks[0]
    assert rank.tp_comm_s > 0 and rank.comm_s > rank.tp_comm_s        # the all-to-alls besides
    plain = MoEStep(Scenario(moe_run(tp=1, dp=8, sequence_parallel=False))).simulate()
    assert plain.ranks[0].tp_comm_s == 0
    assert rank.compute_s == pytest.approx(plain.ranks[0].compute_s / 2, rel=0.02)   # half of each FLOP


def test_a_folded_layout_that_splits_a_replica_is_refused():
    with pytest.raises(SpecError, match=r"RunSpec.ep \(3\) must be a multiple of tp x cp"):
        Scenario(moe_run(ep=3, dp=4))


# -- expert tensor parallelism (expert_tp > 1) -------------------------------------------------------

def test_expert_tp_all_to_alls_are_strided_groups_side_by_side():
    """TP 2, expert TP 2, EP 4 on one NVLink node: two EP groups of every second GPU, each GPU with
    its 1,024-token shard, run at once; on a node's switch each GPU has links of its own, so they
    take what TP 1 x DP 8 with EP 4 (two groups of 4 consecutive GPUs) and 1,024-token sequences
    takes."""
    etp = comm_of(moe_run(expert_tp=2, ep=4))
    assert etp.layout.ep_subgroups(0, 0) == [[0, 2, 4, 6], [1, 3, 5, 7]] and etp.layout.groups_per_rank == 1
    plain = comm_of(moe_run(tp=1, dp=8, ep=4, seq_len=1024, sequence_parallel=False))
    for shape in ("dispatch", "combine"):
        assert etp.time(shape, 0, 0) == pytest.approx(plain.time(shape, 0, 0), rel=1e-12)
    from sim.network import all_to_all_load
    both = etp.load("dispatch", 0, 0)                  # the bundle carries both sub-groups' bytes
    one = all_to_all_load(etp.links, [0, 2, 4, 6], etp.traffic(0, 0), etp.token_bytes["dispatch"], "hierarchical",
                          "dispatch")
    assert both.link_bytes.sum() == pytest.approx(2 * one.link_bytes.sum()) and one.messages * 2 == both.messages > 0


def test_expert_tp_gathers_the_dispatched_copies_by_hand():
    """An expert-TP all-gather over 2 GPUs of an NVLink node: a GPU's topk x T / tp = 2 x 1,024
    copies of 256 FP8 values (plus 2 scales of 4 bytes) gathered to twice that, a ring of one step of
    half the bytes after an NCCL launch."""
    from sim.training.comm.model_parallel import ModelParallelComm
    sc = Scenario(moe_run(expert_tp=2, ep=4))
    comm = ModelParallelComm(sc)
    fabric = sc.step_fabric(__import__("simpy").Environment())
    bw, latency = fabric.route_bandwidth(0, 1), sc.links.route(0, 1)[1]
    n = 2 * (2 * 1024) * (256 + 8)
    assert comm.time("etp_all_gather") == pytest.approx(sc.kernels.nccl_launch_s + latency + n / 2 / bw, rel=1e-12)
    assert comm.time("etp_reduce_scatter") > comm.time("etp_all_gather")      # BF16 combine: more bytes


def test_expert_tp_splits_experts_and_keeps_the_gathered_copies():
    from sim.training.model.activations import BF16, ActivationRecipe, bytes_per_token, mlp_tensors, weight_grad_bytes
    model = load_model("tiny-moe")
    none = ActivationRecipe.named("none")
    count = rank_params(model, [8], {0}, ep=4)
    assert count.split(2, 2).expert == count.expert / 2
    assert sharding_groups(moe_run(expert_tp=2, ep=4, dp=8)) == (8, 2)         # 16 GPUs / (EP 4 x ETP 2)
    one, two = (bytes_per_token(mlp_tensors(model, True, none, 2.0, e)) for e in (1, 2))
    assert two - one == pytest.approx(model.hidden * 2.0 * BF16)             # a second copy of each pair
    assert bytes_per_token(mlp_tensors(model, True, none, 2.0)) == one       # expert TP 1 unless given
    w1, w2 = (weight_grad_bytes(model, True, none, 2.0, expert_tp=e) for e in (1, 2))
    assert w2 - w1 == pytest.approx(2 * model.hidden * 2.0 * BF16)          # up's input, down's output
    assert weight_grad_bytes(model, True, none, 2.0) == w1
    from sim.training.model.activations import linear_shapes
    assert linear_shapes(model, True, 2.0) == linear_shapes(model, True, 2.0, 1) != linear_shapes(model, True, 2.0, 2)


def test_a_stage_keeps_the_gathered_copies_of_each_moe_layer():
    """tiny-moe, one stage of 8 layers (7 MoE), TP 2 with sequence parallelism: expert TP 2 keeps
    one more h-wide BF16 copy of each of a token's topk = 2 pairs per MoE layer, on T / tp tokens."""
    from sim.training.model.memory import stage_activation_bytes
    model = load_model("tiny-moe")
    (held1, _), = stage_activation_bytes(model, moe_run(ep=8), [8])
    (held2, _), = stage_activation_bytes(model, moe_run(expert_tp=2, ep=4), [8])
    assert held2 - held1 == pytest.approx(7 * 2 * model.hidden * BF16_BYTES * 2048 / 2)


def test_expert_tp_parts_surround_the_routed_experts():
    mp = ModelParallelParts("sp", moe_mlp_tp=True, etp=True)
    names = [p.name for p in forward_parts([_moe_layer()], StageEnds(), mp=mp)]
    assert names[names.index("DISPATCH(F)"):] == ["DISPATCH(F)", "ETP-AG(F)", "TP-AG(F)", "MLP(F)", "TP-RS(F)",
                                                  "ETP-RS(F)", "COMBINE(F)"]
    back = [p.name for p in backward_parts([_moe_layer()], StageEnds(), with_w=False, mp=mp)]
    assert back[:6] == ["COMBINE(B)", "ETP-AG(B)", "TP-AG(B)", "MLP(B)", "TP-RS(B)", "ETP-RS(B)"]
    from sim.training.costs.parts import overlapped_parts
    comp, comm = overlapped_parts([_moe_layer()], [_moe_layer()], StageEnds(), StageEnds(), mp=mp)
    names = [p.name for p in comm]
    mlp_f = next(i for i, p in enumerate(comp) if p.name == "MLP(F)")
    gather, scatter = names.index("ETP-AG(F)"), names.index("ETP-RS(F)")
    assert comm[gather].after == [(1, names.index("DISPATCH(F)"))] and (1, gather) in comp[mlp_f].after
    assert comm[scatter].after == comm[names.index("TP-RS(F)", gather)].after == [(0, mlp_f)]   # both drain MLP(F)
    assert comm[names.index("COMBINE(F)")].after == [(1, scatter)]


def test_an_expert_tp_step_counts_its_rings_with_tp():
    folded = MoEStep(Scenario(moe_run(ep=8))).simulate()
    split = MoEStep(Scenario(moe_run(expert_tp=2, ep=4))).simulate()
    assert split.ranks[0].tp_comm_s > folded.ranks[0].tp_comm_s > 0


@pytest.mark.parametrize("changes,pattern", [
    (dict(expert_tp=4), r"RunSpec.expert_tp \(4\) must divide tp \(2\): allowed 1, 2"),
    (dict(model="llama3-8b", expert_tp=2, ep=1), r"RunSpec.expert_tp \(2\) splits an MoE model's routed experts"),
])
def test_bad_expert_tp_is_one_line(changes, pattern):
    with pytest.raises(SpecError, match=pattern) as info:
        Scenario(moe_run(**changes))
    assert "\n" not in str(info.value)


def test_expert_tp_rings_live_alone_take_their_measured_time():
    """TP 4 with expert TP 2 (two expert-TP pairs a replica), EP 4, on one node: live, each ETP ring
    of the replica's two pairs runs on the fabric and, alone there, lasts its measured time."""
    run = moe_run(tp=4, dp=2, expert_tp=2, ep=4)
    measured, live = (MoEStep(Scenario(run.with_(communication=c))).simulate() for c in ("measured", "live"))
    assert live.step_time_s == pytest.approx(measured.step_time_s, rel=1e-9)
    assert live.ranks[0].tp_comm_s == pytest.approx(measured.ranks[0].tp_comm_s, rel=1e-9)
    half = MoEStep(Scenario(run.with_(communication="live", expert_tp=1, ep=8))).simulate()
    assert live.ranks[0].tp_comm_s > half.ranks[0].tp_comm_s          # the ETP rings are there


def test_expert_tp_rings_of_every_pair_are_measured_by_hand():
    """TP 4, expert TP 2: a replica's two pairs (0, 1) and (2, 3) gather at once, each on links of
    its own, so the all-gather takes one pair's time: an NCCL launch, then one step of half of
    2 x 2 x (T / 4) copies of 264 bytes."""
    from sim.training.comm.model_parallel import ModelParallelComm
    sc = Scenario(moe_run(tp=4, dp=2, expert_tp=2, ep=4))
    assert sc.layout.etp_group(0, 1, 1) == [6, 7]
    fabric = sc.step_fabric(__import__("simpy").Environment())
    bw, latency = fabric.route_bandwidth(0, 1), sc.links.route(0, 1)[1]
    n = 2 * 2 * (2048 // 4) * 264
    assert ModelParallelComm(sc).time("etp_all_gather") == pytest.approx(sc.kernels.nccl_launch_s + latency + n / 2 / bw,
                                                                       rel=1e-12)


def test_live_rings_are_the_replicas_own_groups():
    """The rings a live TP, CP or expert-TP part starts for replica 1 of rank 1 (TP 4 = 2 expert-TP
    pairs; 16 GPUs, PP 2 x DP 2): its own GPUs 12-15."""
    from sim.network import ring_all_gather, ring_reduce_scatter
    from sim.training.comm.model_parallel import ModelParallelComm
    sc = Scenario(moe_run(topology="h800-16", tp=4, dp=2, pp=2, expert_tp=2, ep=4))
    comm = ModelParallelComm(sc)
    ring, groups, nbytes = comm.rings("etp_all_gather", 1, [1])
    assert ring.func is ring_all_gather and groups == [[12, 13], [14, 15]] and nbytes == 2 * 2 * (2048 // 4) * 264
    ring, groups, nbytes = comm.rings("tp_reduce_scatter", 1, [1])
    assert ring.func is ring_reduce_scatter and groups == [[12, 13, 14, 15]] and nbytes == 2048 * 256 * 2
