"""sim.training.costs.parts: ops as parts in the order of the DeepSeek-V3 report's Figure 4, with recomputation, embedding and heads."""

from sim.training.costs.chunk import LayerCost, StageEnds
from sim.training.costs.parts import backward_parts, forward_parts, overlapped_parts, weight_parts
from sim.training.costs.streams import COMM, COMPUTE

MOE = LayerCost(1.0, 2.0, 1.0, 1.0, 1.0, 1.0, True, 0.9, 0.0)
NONE = StageEnds()


def test_fb_unit_part_order_is_figure_4():
    comp, comm = overlapped_parts([MOE], [MOE], NONE, NONE)
    assert [p.name for p in comp] == ["ATTN(F)", "MLP(B)", "MLP(W)", "MLP(F)", "ATTN(B)", "ATTN(W)"]
    assert [p.name for p in comm] == ["COMBINE(B)", "DISPATCH(F)", "DISPATCH(B)", "COMBINE(F)"]
    # each transfer waits for the compute part producing its data, each compute part for its transfer
    assert comm[1].after == [(COMPUTE, 0)]            # DISPATCH(F) after ATTN(F)
    assert comm[2].after == [(COMPUTE, 1)]            # DISPATCH(B) after MLP(B)
    assert comm[3].after == [(COMPUTE, 3)]            # COMBINE(F) after MLP(F)
    assert comp[1].after == [(COMM, 0)]               # MLP(B) after COMBINE(B)
    assert comp[3].after == [(COMM, 1)]               # MLP(F) after DISPATCH(F)
    assert comp[4].after == [(COMM, 2)]               # ATTN(B) after DISPATCH(B)


def test_next_layer_dependencies():
    comp, comm = overlapped_parts([MOE, MOE], [MOE, MOE], NONE, NONE)
    assert comp[6].name == "ATTN(F)" and comp[6].after == [(COMM, 3)]      # after COMBINE(F) of layer 0
    assert comm[4].name == "COMBINE(B)" and comm[4].after == [(COMPUTE, 4)]  # after ATTN(B) of layer 0


def test_recomputation_parts_wait_for_nothing_and_precede_their_input_gradient():
    layer = LayerCost(1.0, 2.0, 1.0, 1.0, 1.0, 1.0, True, 0.9, 0.0, attn_r=0.5, mlp_r=0.25)
    comp, comm = overlapped_parts([layer], [layer], NONE, NONE)
    names = [p.name for p in comp]
    assert names == ["ATTN(F)", "MLP(R)", "MLP(B)", "MLP(W)", "MLP(F)", "ATTN(R)", "ATTN(B)", "ATTN(W)"]
    assert comp[1].after == [] and comp[1].recompute and comp[1].routed_share == 0.9
    assert comp[5].after == [] and comp[5].recompute and comp[5].seconds == 0.5
    assert comp[2].after == [(COMM, 0)]                       # MLP(B) still after COMBINE(B)
    chain = [p.name for p in backward_parts([layer], NONE, with_w=False)]
    assert chain == ["COMBINE(B)", "MLP(R)", "MLP(B)", "DISPATCH(B)", "ATTN(R)", "ATTN(B)"]


def test_embedding_and_heads_at_the_ends():
    dense = LayerCost(1.0, 2.0, 1.0, 1.0, 1.0, 1.0, False, 0.0, 0.0)
    first, last = StageEnds(embed_f=0.1, embed_w=0.2), StageEnds(head_f=3.0, head_i=4.0, head_w=5.0)
    assert [p.name for p in forward_parts([dense], first)] == ["EMBED(F)", "ATTN(F)", "MLP(F)"]
    assert [p.name for p in forward_parts([dense], last)][-1] == "HEAD(F)"
    assert [p.name for p in backward_parts([dense], last, with_w=True)][:2] == ["HEAD(B)", "HEAD(W)"]
    assert [p.seconds for p in backward_parts([dense], last, with_w=False)][:1] == [4.0]
    assert [p.name for p in backward_parts([dense], first, with_w=True)][-1] == "EMBED(W)"
    assert "EMBED(W)" not in [p.name for p in backward_parts([dense], first, with_w=False)]  # I leaves it to W
    assert [p.name for p in weight_parts([dense], first)] == ["MLP(W)", "ATTN(W)", "EMBED(W)"]
    comp, _ = overlapped_parts([dense], [dense], first, last)
    assert [p.name for p in comp][:3] == ["EMBED(F)", "HEAD(B)", "HEAD(W)"]


def test_fb_unit_with_tp_and_cp_puts_each_collective_between_its_producer_and_consumer():
    """Sequence parallelism and CP on an MoE layer with shared experts: the forward's CP ring and
    all-gather before ATTN(F), its reduce-scatter after it and before DISPATCH(F), and so on; the
    communication stream in the order the chunks need them."""
    from sim.training.costs.parts import ModelParallelParts
    comp, comm = overlapped_parts([MOE], [MOE], NONE, NONE, mp=ModelParallelParts("sp", cp=True))
    assert [p.name for p in comp] == ["ATTN(F)", "MLP(B)", "MLP(W)", "MLP(F)", "ATTN(B)", "ATTN(W)"]
    assert [p.name for p in comm] == ["CP-KV(F)", "TP-AG(F)", "COMBINE(B)", "TP-AG(B)", "TP-RS(F)", "DISPATCH(F)",
                                      "TP-RS(B)", "DISPATCH(B)", "TP-AG(F)", "TP-AG(B)", "CP-KV(B)", "TP-RS(F)",
                                      "COMBINE(F)", "TP-RS(B)"]
    assert comp[0].after == [(COMM, 0), (COMM, 1)]                    # ATTN(F) after its CP ring and gather
    assert comm[4].after == [(COMPUTE, 0)] and comm[5].after == [(COMM, 4)]   # RS after ATTN(F), dispatch after RS
    assert comm[3].after == [(COMM, 2)] and comp[1].after == [(COMM, 2), (COMM, 3)]   # MLP(B): combine, gather
    assert comm[6].after == [(COMPUTE, 1)] and comm[7].after == [(COMM, 6)]
    assert comm[8].after == [(COMM, 5)] and comp[3].after == [(COMM, 5), (COMM, 8)]   # MLP(F)
    assert comm[9].after == comm[10].after == [(COMM, 7)] and comp[4].after == [(COMM, 7), (COMM, 9), (COMM, 10)]
    assert comm[11].after == [(COMPUTE, 3)] and comm[12].after == [(COMM, 11)] and comm[13].after == [(COMPUTE, 4)]
    assert all(p.overlap == "" for p in comm)
    plain, _ = overlapped_parts([MOE], [MOE], NONE, NONE)
    no_shared, comm2 = overlapped_parts([MOE], [MOE], NONE, NONE, mp=ModelParallelParts("sp", moe_mlp_tp=False))
    assert [p.name for p in comm2].count("TP-AG(F)") == 1 and len(no_shared) == len(plain)


def test_fb_unit_under_full_recomputation_issues_the_recomputed_collectives():
    from sim.training.costs.parts import ModelParallelParts
    layer = LayerCost(1.0, 2.0, 1.0, 1.0, 1.0, 1.0, False, 0.0, 0.0, attn_r=1.0, mlp_r=1.0)
    comp, comm = overlapped_parts([layer], [layer], NONE, NONE, mp=ModelParallelParts("ar", full_recompute=True))
    names = [p.name for p in comm]
    assert names.count("TP-AR(R)") == 2 and names.count("TP-AR(F)") == 2 and names.count("TP-AR(B)") == 2
    mlp_b = next(i for i, p in enumerate(comp) if p.name == "MLP(B)")
    redo = names.index("TP-AR(R)")
    assert comm[redo].after == [(COMPUTE, mlp_b - 1)] and (COMM, redo) in comp[mlp_b].after


def _tp_overlap(tp="sp", full=False):
    from sim.training.costs.parts import ModelParallelParts
    return ModelParallelParts(tp, False, full, True)


PAIRED = LayerCost(2.0, 3.0, 1.0, 4.0, 5.0, 1.0, False, 0.0, 0.0, attn_r=2.0, mlp_r=4.0,
                   tp_gemms=(("attn_f", 0.5, 0.25), ("attn_i", 0.75, 1.0), ("mlp_f", 1.0, 1.5), ("mlp_i", 2.0, 1.0),
                             ("attn_r", 0.5, 0.25), ("mlp_r", 1.0, 1.5)))


def test_tp_overlap_pairs_each_collective_with_its_gemm():
    """Under TP-communication overlap each block runs as its input GEMMs (the all-gather beside
    them), the rest, and its output GEMMs (the reduce-scatter beside them); the seconds add up to
    the block's; in the input gradient the output GEMMs' dgrads come first."""
    parts = forward_parts([PAIRED], NONE, mp=_tp_overlap())
    assert [(p.name, p.seconds, p.overlap) for p in parts] == [
        ("TP-AG(F)", 0.0, "next"), ("ATTN(F)", 0.5, ""), ("ATTN(F)", 1.25, ""), ("ATTN(F)", 0.25, ""),
        ("TP-RS(F)", 0.0, "prev"),
        ("TP-AG(F)", 0.0, "next"), ("MLP(F)", 1.0, ""), ("MLP(F)", 1.5, ""), ("MLP(F)", 1.5, ""),
        ("TP-RS(F)", 0.0, "prev")]
    back = backward_parts([PAIRED], NONE, with_w=False, mp=_tp_overlap())
    assert [p.seconds for p in back if p.name == "MLP(B)"] == [2.0, 2.0, 1.0]
    assert [p.seconds for p in back if p.name == "ATTN(B)"] == [0.75, 1.25, 1.0]
    redone = backward_parts([PAIRED], NONE, with_w=False, mp=_tp_overlap(full=True))
    assert [p.seconds for p in redone if p.name == "ATTN(R)"] == [0.5, 1.25, 0.25]
    assert all(p.recompute for p in redone if p.name == "ATTN(R)")


def test_without_overlap_or_known_gemms_a_block_is_one_part():
    """Exposed collectives (no overlap), the FLOPs model or a measured part (no paired GEMMs), or
    GEMMs longer than the part: the block stays whole."""
    exposed = forward_parts([PAIRED], NONE, mp=_tp_overlap()._replace(overlap=False))
    assert [p.name for p in exposed].count("ATTN(F)") == 1
    unknown = LayerCost(2.0, 3.0, 1.0, 4.0, 5.0, 1.0, False, 0.0, 0.0)
    assert [p.name for p in forward_parts([unknown], NONE, mp=_tp_overlap())].count("MLP(F)") == 1
    odd = LayerCost(2.0, 3.0, 1.0, 4.0, 5.0, 1.0, False, 0.0, 0.0, tp_gemms=(("attn_f", 1.5, 1.0),))
    assert [p.seconds for p in forward_parts([odd], NONE, mp=_tp_overlap()) if p.name == "ATTN(F)"] == [2.0]


def test_a_block_whose_gemms_are_all_of_it_has_no_middle_part():
    whole = LayerCost(2.0, 3.0, 1.0, 4.0, 5.0, 1.0, False, 0.0, 0.0, tp_gemms=(("attn_f", 1.5, 0.5),))
    assert [p.seconds for p in forward_parts([whole], NONE, mp=_tp_overlap()) if p.name == "ATTN(F)"] == [1.5, 0.5]


def test_a_routed_share_stays_with_the_work_it_scales():
    """An MoE MLP block with shared experts: the routed experts are in the middle part, whose routed
    share grows so that the routed seconds are kept."""
    moe = LayerCost(1.0, 1.0, 1.0, 4.0, 1.0, 1.0, True, 0.5, 0.0, tp_gemms=(("mlp_f", 0.5, 0.5),))
    mlp = [p for p in forward_parts([moe], NONE, mp=_tp_overlap()) if p.name == "MLP(F)"]
    assert [(p.seconds, p.routed_share) for p in mlp] == [(0.5, 0.0), (3.0, 2.0 / 3.0), (0.5, 0.0)]
