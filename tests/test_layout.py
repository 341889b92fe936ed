"""sim.training.model.layout: which GPU holds what, by formula; every layout rule refused with its reason."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.training.model.layout import GROUP_AXES, Coordinates, Layout, LayoutRequest
from sim.training.model.specs import SpecError

DS = Layout.check(LayoutRequest(16, 128, 64, 8, 2048, "h800-2048", 256))   # DeepSeek-V3: PP16, DP128, EP64


def test_deepseek_layout_by_formula():
    assert DS.gpus == 2048 and DS.groups_per_rank == 2 and DS.traced_rank == 8
    assert DS.gpu(0, 0) == 0 and DS.gpu(3, 5) == 3 * 128 + 5 and DS.gpu(15, 127) == 2047
    assert DS.gpus_of(2, np.array([0, 64])).tolist() == [256, 320]
    assert DS.ep_group(1, 1) == list(range(128 + 64, 128 + 128))          # whole nodes 24..31
    assert DS.group_of_replica(63) == 0 and DS.group_of_replica(64) == 1
    assert DS.group_replicas(1) == list(range(64, 128))


def test_parameter_shard_groups():
    """Dense parameters are copied on every replica of the rank (128 GPUs); an expert's copies
    only on the same position of each EP group: 2,048 / (16 x 64) = 2 GPUs."""
    assert DS.dense_dp_group(2) == list(range(256, 384))
    assert DS.expert_dp_group(2, 5) == [256 + 5, 256 + 64 + 5]
    assert len(DS.expert_dp_group(0, 0)) == 2048 // (16 * 64)


@pytest.mark.parametrize("args,pattern", [
    ((16, 128, 48, 8, 2048, "t", 256), "ep \\(48\\) must divide dp \\(128\\)"),
    ((16, 256, 64, 8, 2048, "t", 256), "4096 GPUs, but topology 't' has 2048"),
    ((4, 12, 12, 8, 64, "t", 48), "multiple of gpus_per_node=8 \\(or at most 8\\): an EP group spans whole nodes$"),
    ((4, 6, 3, 8, 64, "t", 48), "must divide the 8 GPUs per node"),
    ((4, 8, 8, 8, 64, "t", 12), "ep must divide num_experts"),
])
def test_refusals(args, pattern):
    with pytest.raises(SpecError, match=pattern):
        Layout.check(LayoutRequest(*args))


def test_dense_model_has_no_expert_rule():
    assert Layout.check(LayoutRequest(4, 4, 4, 8, 16, "t", 0)).ep == 4


# --- tensor and context parallelism (Megatron-Core's tp-cp-ep-dp-pp order) -------------------------
def test_megatron_order_by_formula():
    """GPU(t, c, d, r) = t + tp (c + cp (d + dp r)): TP fastest, then CP, DP, PP."""
    lay = Layout.check(LayoutRequest(2, 4, 1, 8, 64, "t", 0, tp=4, cp=2))
    assert lay.gpus == 64 and lay.model_parallel == 8
    assert lay.gpu(1, 3) == (1 * 4 + 3) * 8 == lay.gpu_at(Coordinates(0, 0, 3, 1))
    assert lay.tp_group(0, 1) == [8, 9, 10, 11] and lay.tp_group(0, 1, cp=1) == [12, 13, 14, 15]
    assert lay.cp_group(0, 1, tp=2) == [10, 14]
    assert lay.dense_dp_group(1) == [32, 40, 48, 56]           # leads of the rank's replicas
    assert lay.coordinates(45) == Coordinates(1, 1, 1, 1)


@settings(max_examples=60, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), cp=st.sampled_from([1, 2, 3]), pp=st.integers(1, 4),
       groups=st.integers(1, 3), replicas=st.sampled_from([1, 2]), etp_share=st.sampled_from([1, 2, 4, 8]))
def test_every_gpu_has_one_coordinate_and_groups_partition_the_gpus(tp, cp, pp, groups, replicas, etp_share):
    etp = etp_share if tp % etp_share == 0 else 1
    dp, ep = groups * replicas, replicas * tp * cp // etp   # an EP group and its expert-TP partners: whole replicas
    lay = Layout(pp, dp, ep, 8, tp, cp, etp)
    assert lay.ep_replicas == replicas and lay.groups_per_rank == groups
    coords = [lay.coordinates(g) for g in range(lay.gpus)]
    assert len(set(coords)) == lay.gpus and all(lay.gpu_at(c) == g for g, c in enumerate(coords))
    sizes = {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp, "etp": etp}
    for axis in GROUP_AXES:
        groups_ = lay.groups(axis)
        members = sorted(g for group in groups_ for g in group)
        assert members == list(range(lay.gpus)) and {len(g) for g in groups_} == {sizes[axis]}
    for r in range(pp):
        for d in range(dp):
            assert lay.coordinates(lay.gpu(r, d)) == Coordinates(0, 0, d, r)
            assert lay.tp_group(r, d) in lay.groups("tp") and lay.cp_group(r, d) in lay.groups("cp")
    for r in range(pp):
        for g in range(groups):          # a group's sub-groups: its replicas' GPUs, each once
            subs = lay.ep_subgroups(r, g)
            assert sorted(x for sub in subs for x in sub) == sorted(
                lay.gpu(r, d) + t + tp * c for d in lay.group_replicas(g) for t in range(tp) for c in range(cp))
            assert subs[0][0] == lay.gpu(r, g * replicas) and lay.ep_group(r, g) == subs[0]
    assert sorted(lay.groups("ep")) == sorted(sub for r in range(pp) for g in range(groups)
                                             for sub in lay.ep_subgroups(r, g))
    assert sorted(lay.groups("etp")) == sorted(lay.etp_group(r, d, i) for r in range(pp) for d in range(dp)
                                              for i in range(tp * cp // etp))
    for r in range(pp):          # the experts' DP groups: one lead per EP group, at each replica position
        leads = sorted(x for p in range(replicas) for x in lay.expert_dp_group(r, p))
        assert leads == [lay.gpu(r, d) for d in range(dp)]
        assert all(len(lay.expert_dp_group(r, p)) == groups for p in range(replicas))


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(tp=3, heads=12), r"tp \(3\) must divide the 8 GPUs of a node of 't' \(a TP group inside one NVLink "
                           r"domain\): allowed 1, 2, 4, 8, or set tp_across_nodes: true"),
    (dict(tp=8, heads=12), r"tp \(8\) must divide the model's 12 attention heads: allowed 1, 2, 3, 4, 6, 12"),
    (dict(tp=4, heads=8, kv_heads=6), r"tp \(4\) and the model's 6 key/value heads must divide one another \(each "
                                      r"TP GPU holds whole key/value heads, or a head is copied to several\)$"),
    (dict(tp=2, routed_experts=8), r"sequence_parallel must be true for an MoE model with tp \(2\) above 1 "
                                   r"\(Megatron-Core requires sequence parallelism with MoE and tensor parallelism\)"),
    (dict(tp=8, cp=2), r"tp x cp x pp x dp = 8 x 2 x 1 x 8 = 128 GPUs, but topology 't' has 64"),
])
def test_tp_and_cp_refusals(kwargs, pattern):
    with pytest.raises(SpecError, match=pattern) as info:
        Layout.check(LayoutRequest(1, 8, 1, 8, 64, "t", **kwargs))
    assert "\n" not in str(info.value)


def test_tp_across_nodes_is_allowed_when_asked():
    lay = Layout.check(LayoutRequest(1, 2, 1, 4, 16, "t", 0, tp=8, heads=8, tp_across_nodes=True))
    assert lay.tp_spans_nodes and lay.tp_group(0, 1) == list(range(8, 16))
    assert not Layout.check(LayoutRequest(1, 2, 1, 8, 16, "t", 0, tp=8)).tp_spans_nodes


def test_a_dense_layout_needs_no_expert_count_and_a_gpu_outside_it_is_named():
    lay = Layout.check(LayoutRequest(1, 2, 1, 8, 16, "t", tp=8))                # routed experts default to none
    assert lay.tp == 8 and lay.gpus == 16
    with pytest.raises(ValueError, match="GPU 16 is not in this layout of 16 GPUs"):
        lay.coordinates(16)


@pytest.mark.parametrize("dp,ep,tp,cp,pattern", [
    (8, 3, 2, 1, r"ep \(3\) must be a multiple of tp x cp \(2 x 1 = 2\) for an MoE model: an EP group is made of "
                 r"whole replicas' GPUs \(expert tensor parallelism 1, Megatron-Core's parallel folding\)"),
    (8, 2, 4, 1, r"ep \(2\) must be a multiple of tp x cp \(4 x 1 = 4\) for an MoE model"),
    (6, 8, 2, 1, r"ep \(8\) must divide tp x cp x dp \(12\) in whole replicas: an EP group is made of 8 GPUs = "
                 r"4 data-parallel replicas of 2 GPUs of one stage, and dp \(6\) must be a multiple of 4"),
])
def test_expert_parallel_refusals(dp, ep, tp, cp, pattern):
    with pytest.raises(SpecError, match=pattern) as info:
        Layout.check(LayoutRequest(1, dp, ep, 8, 64, "t", 8, tp=tp, cp=cp, sequence_parallel=True))
    assert "\n" not in str(info.value)


def test_moe_folds_expert_parallelism_over_tp():
    """Qwen3-235B on H100 (NVIDIA's recipe): TP 2 x PP 8 x DP 16, EP 32 = every GPU of a stage."""
    lay = Layout.check(LayoutRequest(8, 16, 32, 8, 256, "t", 128, tp=2, heads=64, kv_heads=4, sequence_parallel=True))
    assert lay.ep_replicas == 16 and lay.groups_per_rank == 1
    assert lay.ep_group(3, 0) == list(range(96, 128))                     # rank 3: GPUs 96..127
    assert lay.expert_dp_group(3, 5) == [lay.gpu(3, 5)] == [106]          # experts held once
    small = Layout.check(LayoutRequest(1, 8, 4, 8, 64, "t", 8, tp=2, sequence_parallel=True))   # EP 4 = 2 replicas
    assert small.groups_per_rank == 4 and small.ep_group(0, 1) == [4, 5, 6, 7]
    assert small.expert_dp_group(0, 1) == [2, 6, 10, 14]


def test_expert_tp_splits_each_expert_over_consecutive_gpus_and_strides_the_ep_group():
    """Mixtral-like: TP 2, expert TP 2, EP 8 on 16 GPUs a stage (DP 8): each EP group is one GPU
    of each TP pair (every second GPU), the two groups side by side; experts are split over pairs."""
    lay = Layout.check(LayoutRequest(1, 8, 8, 8, 16, "t", 8, tp=2, heads=8, sequence_parallel=True, expert_tp=2))
    assert lay.ep_replicas == 8 and lay.groups_per_rank == 1 and lay.ep_gpus_per_node == 4
    assert lay.ep_subgroups(0, 0) == [list(range(0, 16, 2)), list(range(1, 16, 2))]
    assert lay.etp_group(0, 3) == [6, 7]


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(tp=2, expert_tp=2, ep=3, dp=8, routed_experts=12), r"ep x expert_tp \(3 x 2 = 6\) must be a multiple of tp x cp"
                                                            r" \(2 x 2 = 4\): an EP group's GPUs and their expert-TP "
                                                            r"partners are whole replicas$"),
    (dict(tp=4, expert_tp=2, ep=1, dp=8, routed_experts=12), r"ep x expert_tp \(1 x 2 = 2\) must be a multiple of tp x cp"),
    (dict(tp=2, expert_tp=2, ep=8, dp=6, routed_experts=16), r"ep \(8\) must divide tp x cp x dp \(24\) in whole "
                                                            r"replicas: an EP group and its expert-TP partners are 16 GPUs"
                                                            r" = 4 data-parallel replicas of 4 GPUs of one stage, and dp "
                                                            r"\(6\) must be a multiple of 4$"),
    (dict(tp=2, expert_tp=2, ep=6, dp=6, routed_experts=12), r"^ep \(6\) must be a multiple of gpus_per_node=4 \(or at "
                                                            r"most 4\): an EP group spans whole nodes \(EP groups of "
                                                            r"expert_tp 2: 4 of a node's GPUs in each\)$"),
    (dict(tp=1, expert_tp=2, ep=1, dp=8, routed_experts=0), r"expert_tp \(2\) splits an MoE model's routed experts: "
                                                           r"a dense model leaves it 1"),
])
def test_expert_tp_refusals(kwargs, pattern):
    kwargs = dict(kwargs)                        # the parameter's own dict stays as it is for a rerun
    ep, dp = kwargs.pop("ep"), kwargs.pop("dp")
    experts = kwargs.pop("routed_experts")
    with pytest.raises(SpecError, match=pattern):
        Layout.check(LayoutRequest(1, dp, ep, 8, 64, "t", experts, cp=2, sequence_parallel=True, **kwargs))


def test_grouped_query_heads_copied_over_tp_and_a_bad_axis():
    lay = Layout.check(LayoutRequest(1, 8, 1, 8, 64, "t", tp=4, heads=8, kv_heads=2))   # 2 kv heads, each on 2 GPUs
    assert lay.tp == 4
    with pytest.raises(ValueError, match=r"^axis must be one of tp, cp, ep, dp, pp, etp, got 'xx'$"):
        lay.groups("xx")


def test_an_ep_group_of_one_gpu_a_node_under_expert_tp():
    """Nodes of 2 GPUs, TP 2 = expert TP 2: each EP group takes one GPU of each node, so any EP size
    fits whole nodes (3 here)."""
    lay = Layout.check(LayoutRequest(1, 3, 3, 2, 6, "t", 6, tp=2, heads=2, sequence_parallel=True, expert_tp=2))
    assert lay.ep_gpus_per_node == 1 and lay.ep_subgroups(0, 0) == [[0, 2, 4], [1, 3, 5]]


def test_an_expert_count_an_ep_group_cannot_split_is_named_with_its_expert_tp():
    with pytest.raises(SpecError, match=r"^ep must divide num_experts: ep=3, num_experts=7 \(each GPU holds num_experts "
                                        r"/ ep routed experts\) \(EP groups of expert_tp 2: 1 of a node's GPUs in each\)$"):
        Layout.check(LayoutRequest(1, 3, 3, 2, 6, "t", 7, tp=2, heads=2, sequence_parallel=True, expert_tp=2))
