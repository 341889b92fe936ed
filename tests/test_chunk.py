"""sim.training.costs.chunk: the chunk model's closed forms, layer split, token bytes, measured profiles."""
import pytest

from sim.training.costs.chunk import ChunkModel, attention_params, split_layers
from sim.training.model.specs import SpecError, load_gpu, load_model, load_scenario


def test_split_layers():
    assert split_layers(61, 16) == [4] * 13 + [3] * 3
    assert sum(split_layers(61, 32)) == 61
    with pytest.raises(SpecError, match="layers \\(4\\) cannot be split over 8 pipeline stages"):
        split_layers(4, 8)


def test_layer_costs_follow_zero_bubble_table():
    """W = forward GEMMs; I = forward GEMMs + 2x attention core; MLP I = W = F."""
    m, g, r = load_model("tiny-moe"), load_gpu("h800"), load_scenario("tiny")
    c = ChunkModel(m, g, r, 4)
    layer = c.stage_layers[1][0]
    core = layer.attn_f - layer.attn_w
    assert layer.attn_i == pytest.approx(layer.attn_w + 2 * core)
    assert layer.mlp_i == layer.mlp_w == layer.mlp_f
    T = 512
    proj = 2 * T * attention_params(m)
    assert layer.attn_w == pytest.approx(proj / (989e12 * 0.6))        # tiny runs GEMMs in BF16
    assert core == pytest.approx(T * 512 * 4 * (64 + 64) / (989e12 * 0.4))
    routed = 2 * T * 2 * 3 * 256 * 128
    other = 2 * T * (1 * 3 * 256 * 128 + 256 * 16)
    assert layer.mlp_f == pytest.approx((routed + other) / (989e12 * 0.6))
    assert layer.routed_share == pytest.approx(routed / (routed + other))
    assert c.stage_layers[0][0].moe is False and layer.moe is True


def test_token_bytes():
    c = ChunkModel(load_model("deepseek-v3"), load_gpu("h800"), load_scenario("deepseek-v3"), 16)
    assert c.token_bytes("fp8") == 7168 + 4 * 56
    assert c.token_bytes("bf16") == 2 * 7168
    assert c.activation_bytes() == 4096 * 7168 * 2 and isinstance(c.activation_bytes(), float)


def test_measured_profile_replaces_flops(tmp_path):
    p = tmp_path / "prof.csv"
    p.write_text("layer,part,seconds\nmoe,mlp_f,0.002\nmoe,attn_f,0.001\nhead,head,0.0005\n")
    run = load_scenario("tiny", profile=str(p))
    c = ChunkModel(load_model("tiny-moe"), load_gpu("h800"), run, 4)
    moe = c.stage_layers[1][0]
    assert (moe.mlp_f, moe.attn_f) == (0.002, 0.001)
    assert moe.mlp_i != 0.002                      # parts not in the profile keep the FLOPs model
    assert c.head_cost == 0.0005
    bad = tmp_path / "bad.csv"
    bad.write_text("layer,part,seconds\nmoe,mlp_x,1\n")
    with pytest.raises(SpecError, match="line 2"):
        ChunkModel(load_model("tiny-moe"), load_gpu("h800"), load_scenario("tiny", profile=str(bad)), 4)


def test_recomputation_by_policy():
    """The FLOPs model's seconds recomputed before each input gradient: selective reruns the
    attention core, full the whole layer forward, deepseek-v3 the MLA up-projections and the scores
    (FlashAttention-style)."""
    from sim.training.costs.chunk import attention_core_flops, mla_up_projection_params, scores_share
    m, g = load_model("deepseek-v3"), load_gpu("h800")
    layer = {p: ChunkModel(m, g, load_scenario("deepseek-v3", memory_policy=p, compute_model="flops"), 16)
             .stage_layers[1][0] for p in ("none", "selective", "full", "deepseek-v3")}
    core = attention_core_flops(m, 4096, 4096) / (989e12 * 0.4)
    assert (layer["none"].attn_r, layer["none"].mlp_r) == (0.0, 0.0)
    assert layer["selective"].attn_r == pytest.approx(core) and layer["selective"].mlp_r == 0.0
    assert layer["full"].attn_r == layer["full"].attn_f and layer["full"].mlp_r == layer["full"].mlp_f
    up = 2 * 4096 * (1536 * 128 * 192 + 512 * 128 * 256) / (1979e12 * 0.6)
    assert mla_up_projection_params(m) == 1536 * 128 * 192 + 512 * 128 * 256
    assert scores_share(m) == 192 / 320
    assert layer["deepseek-v3"].attn_r == pytest.approx(up + 0.6 * core) and layer["deepseek-v3"].mlp_r == 0.0
    # recomputation is not useful work
    assert layer["full"].flops == layer["none"].flops


def test_head_in_bf16_with_its_loss_and_the_embedding():
    """The FLOPs model, DeepSeek-V3's last stage: 2 heads (main + MTP), each 2ThV FLOPs per pass at
    the BF16 peak, plus the loss (8 V bytes per token forward, 6 V backward) at the HBM bandwidth x 0.7."""
    c = ChunkModel(load_model("deepseek-v3"), load_gpu("h800"), load_scenario("deepseek-v3", compute_model="flops"), 16)
    gemm = 2 * 4096 * 7168 * 129280 / (989e12 * 0.6)
    hbm = 3.35e12 * 0.7
    last = c.stage_work(15)[1]
    assert last.head_f == pytest.approx(2 * (gemm + 4096 * 8 * 129280 / hbm))
    assert last.head_i == pytest.approx(2 * (gemm + 4096 * 6 * 129280 / hbm))
    assert last.head_w == pytest.approx(2 * gemm)
    first = c.stage_work(0)[1]
    assert first.embed_f == pytest.approx(4096 * 2 * 7168 / hbm) and first.head_f == 0.0
    assert c.stage_work(5)[1] == type(first)()


@pytest.mark.parametrize("kwargs,expected", [
    (dict(), [4] * 13 + [3] * 3),
    (dict(last=2), [4] * 14 + [3] + [2]),
    (dict(first=3, last=2), [3] + [4] * 14 + [2]),
    (dict(explicit=tuple([4] * 15 + [1])), [4] * 15 + [1]),
])
def test_stage_layer_counts(kwargs, expected):
    from sim.training.costs.chunk import stage_layer_counts
    assert stage_layer_counts(61, 16, **kwargs) == expected
    assert sum(expected) == 61


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(explicit=(4, 4)), "has 2 entries"),
    (dict(explicit=tuple([4] * 16)), "sums to 64, but the model has 61"),
    (dict(first=30, last=30), "every stage needs at least one layer"),
])
def test_bad_stage_layer_counts(kwargs, pattern):
    from sim.training.costs.chunk import stage_layer_counts
    with pytest.raises(SpecError, match=pattern):
        stage_layer_counts(61, 16, **kwargs)


def test_read_profile_names_what_is_wrong(tmp_path):
    """Each bad profile gives a SpecError naming the file, the line and the field, and dense rows
    are accepted."""
    from sim.training.costs.chunk import read_profile

    def profile(text):
        p = tmp_path / "prof.csv"
        p.write_text(text)
        return str(p)

    assert read_profile(profile("layer,part,seconds\ndense,attn_f,0.5\nmoe,mlp_w,1e6\n")) == {
        "dense": {"attn_f": 0.5}, "moe": {"mlp_w": 1e6}}
    with pytest.raises(SpecError, match="nothere.csv' does not exist"):
        read_profile(str(tmp_path / "nothere.csv"))
    with pytest.raises(SpecError, match=r"profile '.*' is not a regular file"):
        read_profile(str(tmp_path))
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00layer")
    with pytest.raises(SpecError, match=r"binary.csv: not a text CSV \(it is not UTF-8\); expected columns layer, "
                                        r"part, seconds$"):
        read_profile(str(binary))
    huge = tmp_path / "huge.csv"
    huge.write_text("layer,part,seconds\nmoe,mlp_f," + "1" * 200_000 + "\n")          # over csv's field limit
    with pytest.raises(SpecError, match=r"huge.csv: not a readable CSV \(field larger than field limit .*\); expected "
                                        r"columns layer, part, seconds$"):
        read_profile(str(huge))
    for text in ("", "layer,part\nmoe,mlp_f\n"):
        with pytest.raises(SpecError, match=r"prof.csv: needs columns layer, part, seconds; got"):
            read_profile(profile(text))
    with pytest.raises(SpecError, match=r"line 3: layer must be dense, moe or head and part one of attn_f, "
                                        r"attn_i, attn_w, mlp_f, mlp_i, mlp_w, attn_r, mlp_r, f, i, w, head; got "
                                        r"layer='dense', part='mlp_x'"):
        read_profile(profile("layer,part,seconds\nmoe,mlp_f,1\ndense,mlp_x,1\n"))
    with pytest.raises(SpecError, match=r"prof.csv line 2: seconds 'abc' is not a number"):
        read_profile(profile("layer,part,seconds\nmoe,mlp_f,abc\n"))
    for bad in ("-1", "1000000.5", "inf"):
        with pytest.raises(SpecError, match=r"prof.csv line 2: seconds must be a finite number in \[0, 1,000,000\]"):
            read_profile(profile(f"layer,part,seconds\nmoe,mlp_f,{bad}\n"))


def test_a_profile_that_cannot_be_read_is_one_line(tmp_path, monkeypatch):
    from pathlib import Path

    from sim.training.costs.chunk import read_profile
    path = tmp_path / "locked.csv"
    path.write_text("layer,part,seconds\n")

    def refuse(self, encoding=None):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(Path, "read_text", refuse)
    with pytest.raises(SpecError, match=r"^profile .*locked.csv: cannot read it: Permission denied$"):
        read_profile(str(path))


def test_a_profile_says_which_parts_were_measured_beside_communication(tmp_path):
    """The optional ``beside`` column: a whole layer's ``f`` gives its ratio to both its parts, an empty
    cell none; a measured part without one takes the run's whole-GPU ratio (0.0 here), one with 1 its
    measured time beside a communication kernel too. A bad ratio is one line."""
    from sim.training.costs.chunk import ChunkModel, read_profile_beside
    from sim.training.model.specs import load_gpu, load_model, load_scenario
    path = tmp_path / "prof.csv"
    path.write_text("layer,part,seconds,beside\nmoe,f,0.004,1\nmoe,mlp_i,0.003,\nmoe,attn_w,0.001,1.25\n")
    assert read_profile_beside(str(path)) == {"moe": {"attn_f": 1.0, "mlp_f": 1.0, "attn_w": 1.25}}
    run = load_scenario("deepseek-v3", profile=str(path))
    layer = ChunkModel(load_model(run.model), load_gpu(run.gpu), run, run.pp, (20, 0.1)).layer_cost(moe=True)
    assert (layer.beside_ratio("attn_f"), layer.beside_ratio("attn_w"), layer.beside_ratio("mlp_i")) == (1.0, 1.25, 0.0)
    assert layer.beside_ratio("attn_i") > 1.0                 # not measured: costed on the SMs left
    for bad, message in (("abc", "beside 'abc' is not a number"),
                         ("0.5", r"beside must be a finite number in \[1, 10\]")):
        path.write_text(f"layer,part,seconds,beside\nmoe,mlp_f,0.004,{bad}\n")
        with pytest.raises(SpecError, match=f"prof.csv line 2: {message}"):
            read_profile_beside(str(path))


def test_attention_closed_forms_without_mla():
    """Standard attention: the scores take half the core's FLOPs (d_qk = d_v = head_dim, no rope
    part) and there are no MLA up-projections; MLA without a query compression has only the
    key/value up-projection."""
    import dataclasses

    from sim.training.costs.chunk import attention_core_flops, mla_up_projection_params, scores_share
    m = load_model("deepseek-v3")
    gqa = dataclasses.replace(m, attention="gqa")
    assert scores_share(gqa) == 0.5 and mla_up_projection_params(gqa) == 0.0
    assert attention_core_flops(gqa, 10, 100) == 10 * 100 * 128 * (128 + 128)
    assert attention_core_flops(m, 10, 100) == 10 * 100 * 128 * (192 + 128)
    assert mla_up_projection_params(dataclasses.replace(m, q_lora_rank=0)) == 512 * 128 * 2 * 128


def test_dense_layers_are_the_first_of_the_model_whatever_stage_they_fall_in():
    """Layer i is dense when i < dense_layers, counted over the whole model: with 6 dense layers of
    16 on 4 stages of 4, the stages hold 4, 2, 0 and 0 dense layers (a stage's first layer index is
    the sum of the earlier stages' counts)."""
    from dataclasses import replace
    m = load_model("tiny-moe")
    m = replace(m, layers=16, dense_layers=6, mtp_modules=0)
    c = ChunkModel(m, load_gpu("h800"), load_scenario("tiny"), 4)
    assert c.layers_per_stage == [4, 4, 4, 4]
    assert [sum(not layer.moe for layer in layers) for layers in c.stage_layers] == [4, 2, 0, 0]


def test_first_or_last_stage_counts_need_two_stages_and_name_the_rule():
    """first/last stage layer counts need at least two stages; the message names the rule whole."""
    from sim.training.costs.chunk import stage_layer_counts
    rule = r"every stage needs at least one layer and every layer a stage$"
    with pytest.raises(SpecError, match=r"first_stage_layers=61, last_stage_layers=None leave 0 of 61 layers for "
                                        r"the other 0 of 1 stages: " + rule):
        stage_layer_counts(61, 1, first=61)
    with pytest.raises(SpecError, match=rule):
        stage_layer_counts(61, 16, first=30, last=30)


def test_one_stage_holds_the_embedding_and_the_whole_head():
    """With a single stage, the first stage is the last: it keeps the head's forward, input- and
    weight-gradient times beside the embedding's."""
    m, g, r = load_model("tiny-moe"), load_gpu("h800"), load_scenario("tiny")
    one = ChunkModel(m, g, r, 1).stage_work(0)[1]
    last = ChunkModel(m, g, r, 2).stage_work(1)[1]
    assert (one.head_f, one.head_i, one.head_w) == (last.head_f, last.head_i, last.head_w)
    assert last.head_w > 0 and one.embed_f > 0 and one.embed_w > 0


def test_a_whole_layer_profile_splits_as_the_flops_model_splits(tmp_path):
    """A profile's f, i, w (a whole layer's forward, input and weight gradient) replace the FLOPs
    model's attention and MLP parts in its proportions: the sums are the profile's, the shares the
    model's."""
    from sim.training.costs.chunk import ChunkModel
    from sim.training.model.specs import RunSpec, load_gpu, load_model
    run = RunSpec(model="zb-gpt-1.5b", gpu="a100", topology="zb-a100-roce", pp=8, ep=1, dp=1, schedule="1f1b",
                  microbatches=8, seq_len=1024, microbatch_size=6)
    m, g = load_model(run.model), load_gpu(run.gpu)
    flops = ChunkModel(m, g, run, 8).stage_layers[1][0]
    p = tmp_path / "p.csv"
    p.write_text("layer,part,seconds\ndense,f,0.006\ndense,i,0.005\ndense,w,0.003\n")
    fed = ChunkModel(m, g, run.with_(profile=str(p)), 8).stage_layers[1][0]
    assert (fed.forward, fed.backward_i, fed.backward_w) == pytest.approx((0.006, 0.005, 0.003))
    assert fed.attn_f / fed.forward == pytest.approx(flops.attn_f / flops.forward)
    assert fed.mlp_w / fed.backward_w == pytest.approx(flops.mlp_w / flops.backward_w)


def test_tp_overlap_pairs_each_collective_with_the_gemms_of_its_linear_layer(tmp_path):
    """The GEMMs TP overlap runs beside its collectives, read from a layer's kernels: the gather
    feeds QKV (FC1), the scatter drains the output projection (FC2); in the input gradient the
    output GEMM's dgrad comes first. An MoE layer without shared experts pairs no MLP GEMM."""
    from sim.training.costs.chunk import tp_paired_gemms
    from sim.training.model.specs import RunSpec
    from sim.training.scenario import Scenario
    run = RunSpec(model="llama3-8b", gpu="h100", topology="h100-1024", pp=1, dp=1, ep=1, tp=8, schedule="1f1b",
                  microbatches=1, seq_len=4096, sequence_parallel=True, tp_comm_overlap=True)
    chunk = Scenario(run).chunk
    costs = chunk.kernel_costs(False)
    of = {c.op.name + "/" + c.op.phase: c.seconds for c in costs}
    pairs = {name: (head, tail) for name, head, tail in tp_paired_gemms(costs)}
    assert pairs["attn_f"] == (of["qkv/f"], of["out_proj/f"]) == pairs["attn_r"]
    assert pairs["attn_i"] == (of["out_proj.dgrad/i"], of["qkv.dgrad/i"])
    assert pairs["mlp_f"] == (of["fc1/f"], of["fc2/f"])
    assert pairs["mlp_i"] == (of["fc2.dgrad/i"], of["fc1.dgrad/i"])
    assert chunk.layer_cost(False).tp_gemm_pair("mlp_f") == pairs["mlp_f"]
    moe = [c for c in costs if c.op.block == "attn"]               # an MLP block without fc1/fc2 or shared1/2
    assert {name for name, _, _ in tp_paired_gemms(moe)} == {"attn_f", "attn_r", "attn_i"}
    no_qkv_fc2 = [c for c in costs if c.op.name not in ("qkv", "fc2")]  # forwards missing a paired GEMM
    assert {name for name, _, _ in tp_paired_gemms(no_qkv_fc2)} == {"attn_i", "mlp_i"}
    measured = tmp_path / "prof.csv"                               # a measured part: its GEMMs unknown
    measured.write_text("layer,part,seconds\ndense,attn_f,0.001\n")
    fed = Scenario(run.with_(profile=str(measured))).chunk.layer_cost(False)
    assert fed.tp_gemm_pair("attn_f") is None and fed.tp_gemm_pair("attn_i") == pairs["attn_i"]


def test_an_moe_layers_tp_overlap_pairs_its_shared_experts_gemms():
    """DeepSeek-V3 at TP 2 with SP: an MoE layer's MLP collectives run beside its shared expert's
    GEMMs (not a dense layer's FC1 and FC2)."""
    from sim.training.costs.chunk import tp_paired_gemms
    from sim.training.model.specs import RunSpec
    from sim.training.scenario import Scenario
    run = RunSpec(model="deepseek-v3", gpu="h800", topology="h800-2048", pp=16, dp=8, ep=8, tp=2, schedule="1f1b",
                  microbatches=16, seq_len=4096, sequence_parallel=True, tp_comm_overlap=True)
    chunk = Scenario(run).chunk
    moe, dense = chunk.layer_cost(True), chunk.layer_cost(False)
    shared = {c.op.name + "/" + c.op.phase: c.seconds for c in chunk.kernel_costs(True)}
    assert moe.tp_gemm_pair("mlp_f") == (shared["shared1/f"], shared["shared2/f"])
    assert moe.tp_gemm_pair("mlp_f") != dense.tp_gemm_pair("mlp_f")
    assert {name for name, _, _ in tp_paired_gemms(chunk.kernel_costs(True))} == {name for name, _, _ in moe.tp_gemms}


def test_ring_exchange_runs_each_gemm_it_feeds_or_drains_as_tp_chunks_of_its_rows():
    """TP overlap's ring exchange: the forward's QKV, output projection, FC1 and FC2 and the backward's
    output-GEMM dgrads cost tp GEMMs of m / tp rows (worked by hand with a cost of m^0.5 + 1 ms); the
    input GEMMs' dgrads, the wgrads, attention and memory-bound kernels keep their cost; at TP 1
    nothing changes. In a scenario the chunks together cost at least the whole GEMM."""
    from sim.compute import Op, OpCost
    from sim.training.costs.chunk import ring_chunked, ring_exchanged
    from sim.training.model.specs import RunSpec
    from sim.training.scenario import Scenario

    def gemm(name, phase, block="attn", m=4096.0):
        return Op(name, block, phase, "gemm", flops=2 * m * 8 * 8, useful=2 * m * 8 * 8, shape=(1, m, 8, 8))
    ops = [gemm("qkv", "f"), gemm("out_proj", "f"), gemm("fc1", "f", "mlp"), gemm("fc2", "f", "mlp"),
           gemm("out_proj.dgrad", "i"), gemm("fc2.dgrad", "i", "mlp"), gemm("qkv.dgrad", "i"),
           gemm("fc1.dgrad", "i", "mlp"), gemm("qkv.wgrad", "w"), gemm("shared1", "f", "mlp"),
           Op("attn_core", "attn", "f", "attention", shape=(4096, 4096, 128, 1)),
           Op("norm", "attn", "f", "memory", bytes=1e6, shape=(1e6,)),
           gemm("head", "f", "head"), gemm("head.dgrad", "i", "head")]    # outside a layer: no TP overlap
    assert [ring_exchanged(o) for o in ops] == [True] * 6 + [False] * 3 + [True] + [False] * 4

    def cost(op):                           # a GEMM's time from its rows and its FLOPs (a flat efficiency's)
        if op.kind != "gemm":
            return OpCost(op, 0.002, "hbm")
        seconds = (op.shape[1] ** 0.5 + 1) * 1e-3 + op.flops * 1e-9
        return OpCost(op, seconds, "compute" if op.shape[1] > 256 else "launch")
    whole = [cost(o) for o in ops]
    flops = 2 * 4096 * 8 * 8
    for tp, rows, bound in ((8, 512, "compute"), (2, 2048, "compute"), (16, 256, "launch")):
        chunked = ring_chunked(whole, tp, cost)
        by_hand = tp * ((rows ** 0.5 + 1) * 1e-3 + flops / tp * 1e-9)   # tp chunks of m / tp rows and FLOPs
        for w, c in zip(whole, chunked):
            assert c.op == w.op
            assert c.seconds == pytest.approx(by_hand if ring_exchanged(w.op) else w.seconds, rel=1e-12)
            assert c.bound == (bound if ring_exchanged(w.op) else w.bound)
    assert ring_chunked(whole, 1, cost) == whole

    run = RunSpec(model="llama3-8b", gpu="h100", topology="h100-1024", pp=1, dp=1, ep=1, tp=8, schedule="1f1b",
                  microbatches=1, seq_len=4096, sequence_parallel=True)
    plain = {c.op.name + "/" + c.op.phase: c.seconds for c in Scenario(run).chunk.kernel_costs(False)}
    ring = {c.op.name + "/" + c.op.phase: c.seconds
            for c in Scenario(run.with_(tp_comm_overlap=True)).chunk.kernel_costs(False)}
    for name in ("qkv/f", "out_proj/f", "fc1/f", "fc2/f", "out_proj.dgrad/i", "fc2.dgrad/i"):
        assert ring[name] >= plain[name] * (1 - 1e-12)
    assert ring["qkv/f"] > plain["qkv/f"]
    for name in ("qkv.dgrad/i", "fc1.dgrad/i", "qkv.wgrad/w", "attn_core/f"):
        assert ring[name] == plain[name]
    overlapped = Scenario(run.with_(tp_comm_overlap=True)).chunk           # beside a communication kernel
    km, beside = overlapped.kernels, overlapped.kernel_costs(False, 0.0, 100, 0.3)
    for c in beside:
        g, m, n, k = c.op.shape if c.op.kind == "gemm" else (0, 0, 0, 0)
        alone = (8 * km.cost(c.op._replace(shape=(g, m / 8, n, k), flops=c.op.flops / 8), 100, 0.3).seconds
                 if ring_exchanged(c.op) else km.cost(c.op, 100, 0.3).seconds)
        assert c.seconds == pytest.approx(alone, rel=1e-12)
    assert overlapped.kernel_costs(False) == overlapped.kernel_costs(False, 0.0, None, 0.0)
    fewer_sms = overlapped.kernel_costs(False, 0.0, 100)                   # SMs taken, no HBM: its own costs
    assert sum(c.seconds for c in fewer_sms) > sum(c.seconds for c in overlapped.kernel_costs(False))
    with_extra = overlapped.kernel_costs(False, 1e8)                       # an extra GEMM (an MTP projection)
    assert sum(c.seconds for c in with_extra) > sum(c.seconds for c in overlapped.kernel_costs(False))
