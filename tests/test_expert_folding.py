"""An MoE model with tensor or context parallelism: EP folded over the TP, CP and DP GPUs
(Megatron-Core's parallel folding, expert TP 1): the all-to-alls among every GPU of the EP group,
each GPU's tokens its sequence shard, whole experts per GPU, and the TP parts an MoE layer has."""
import pytest

from sim.moe.chunk import LayerCost, StageEnds
from sim.moe.comm import CommModel
from sim.moe.memory import sharding_groups
from sim.moe.params import rank_params
from sim.moe.parts import ModelParallelParts, backward_parts, forward_parts
from sim.moe.scenario import Scenario
from sim.moe.specs import RunSpec, SpecError, load_model
from sim.moe.step import MoEStep


def moe_run(**changes) -> RunSpec:
    """tiny-moe (16 routed experts, top 2, one shared expert) on one H800 node."""
    run = RunSpec(model="tiny-moe", gpu="h800", topology="h800-node", pp=1, dp=4, ep=8, tp=2, sequence_parallel=True,
                  schedule="1f1b", microbatches=2, seq_len=2048)
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
