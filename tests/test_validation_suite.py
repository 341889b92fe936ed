"""validation/: the suite's data (every row checked), its figures worked by hand, and one clear line
for each kind of bad row."""
import csv
import io
from dataclasses import replace
from pathlib import Path

import pytest

from sim.training.comm.kernels import load_kernels
from validation.predict import (
    calibrated_kernels,
    predict,
    profiled_stage_layers,
    run_spec,
    speed_error,
    step_figure,
    write_compute_profile,
)
from validation.suite import METRICS, ROLES, RUNS, Run, ValidationDataError, load_runs, load_sources


@pytest.fixture(scope="module")
def runs():
    return {r.id: r for r in load_runs()}


def test_the_suite_has_forty_scored_runs_from_five_sources(runs):
    scored = [r for r in runs.values() if r.role == "scored"]
    assert len(scored) >= 40
    assert len({r.source for r in scored}) >= 5
    assert {r.role for r in runs.values()} <= set(ROLES)
    assert set(load_sources()) >= {r.source for r in runs.values()}


def test_every_row_says_where_it_comes_from_and_the_calibration_set_is_not_scored(runs):
    for r in runs.values():
        assert r.where and r.metric in METRICS and r.measured > 0
    calibration = [r for r in runs.values() if r.role == "calibration"]
    assert {r.source for r in calibration} == {"deepep"} and all("normal" in r.where for r in calibration)
    # Rows with tensor or context parallelism are scored: every Megatron-LM 2021 row with TP,
    # NVIDIA's dense rows and its Qwen3-235B rows with EP folded over TP; what is left is listed
    # with its reason.
    scored_tp = {r.id for r in runs.values() if (r.tp > 1 or r.cp > 1) and r.role == "scored"}
    assert {i for i in runs if i.startswith("mt-t1-") and runs[i].tp > 1} <= scored_tp and len(scored_tp) >= 24
    assert {"nv-26.02-h100-qwen3-235b-a22b-fp8-256", "nv-25.11-h100-qwen3-235b-a22b-fp8-cs-256"} <= scored_tp
    assert all(runs[i].sequence_parallel for i in scored_tp if runs[i].model.startswith("qwen3"))
    assert all("not modelled" in r.note or "missing" in r.note for r in runs.values()
               if r.role in ("needs-tp", "needs-cp"))


def test_transcribed_values_spot_checked(runs):
    """A few cells read again from the papers' tables."""
    assert runs["zb-t4-1.5b-m24-zb-2p"].measured == 14.5            # Zero Bubble, Table 4
    assert runs["zb-t4-28.3b-m256-1f1b"].measured == 0.88
    assert runs["mt-t1-1.7b"].measured == 137                       # Megatron-LM, Table 1
    assert runs["mt-t2-zero3-174.6b-1536"].measured == 44           # Table 2
    assert runs["deepep-ll-combine-ep64"].measured == 314           # DeepEP README, low-latency
    assert runs["dsv3-report-2048"].measured == 180_000
    r = runs["nv-25.11-h100-qwen3-30b-a3b-fp8-cs-16"]
    assert (r.measured, r.pp, r.vp, r.ep, r.dp, r.microbatches) == (5275, 2, 24, 8, 8, 32)
    t = runs["tt-t5-interleaved"]                                   # torchtitan, Table 5
    assert (t.measured, t.tp, t.pp, t.vp, t.dp, t.microbatches, t.tp_comm_overlap) == (128, 8, 8, 2, 8, 8, 1)
    assert runs["tt-t1-fsdp"].measured == 5762 and runs["tt-t1-fsdp"].fusion == "unfused"      # Table 1, eager
    assert runs["tt-t6-cp8"].measured == 16 and runs["tt-t6-cp8"].microbatches == 8           # Table 6


def test_figures_worked_by_hand(runs):
    zb = runs["zb-t4-1.5b-m24-1f1b"]                 # 24 micro-batches of 6 sequences on 8 GPUs
    assert step_figure(zb, 2.0) == pytest.approx(144 / 2.0 / 8)
    nv = runs["nv-25.11-h100-qwen3-30b-a3b-fp8-cs-16"]
    assert step_figure(nv, 10.0) == pytest.approx(512 * 4096 / 10 / 16)
    ds = runs["dsv3-report-2048"]                    # 19.9 s a step is about 180K GPU hours per trillion tokens
    assert step_figure(ds, 19.9) == pytest.approx(2048 * 19.9 / 3600 * 1e12 / (15360 * 4096))
    assert step_figure(ds, 19.9) == pytest.approx(180_000, rel=0.01)
    mt = runs["mt-t1-1.7b"]                          # Megatron's equation 3
    B, s, l, h, V = 512, 2048, 24, 2304, 51200
    assert step_figure(mt, 3.0) == pytest.approx(96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
                                                  / 3.0 / 32 / 1e12)
    mz = runs["mz-h100-qwen3-235b-tp2-ep32-pp8-vpp4"]   # seconds a step, as the ModelZoo table states it
    assert step_figure(mz, 15.8) == 15.8 and speed_error(mz, 15.8) == pytest.approx(19.7 / 15.8 - 1)


def test_the_modelzoo_rows_as_their_table_states_them(runs):
    """Megatron-MoE ModelZoo, Qwen3 H100 table: 256 GPUs, global batch 2,048 of 4,096 tokens; each
    layout's micro-batches per pipeline = 2,048 / (DP x micro-batch): 128, 128, 4, 512, 256."""
    ids = ["mz-h100-qwen3-235b-tp2-ep32-pp8-vpp4", "mz-h100-qwen3-235b-tp2-ep32-pp8-vpp4-a2a-overlap",
           "mz-h100-qwen3-235b-tp2-ep8-fsdp", "mz-h100-qwen3-235b-tp2-ep8-pp32-vpp3",
           "mz-h100-qwen3-235b-tp4-ep8-pp8-vpp4"]
    rows = [runs[i] for i in ids]
    assert [r.measured for r in rows] == [19.7, 17.6, 17.6, 24.2, 29.0]
    assert [r.microbatches for r in rows] == [128, 128, 4, 512, 256]
    assert all(r.tp * r.cp * r.pp * r.dp == r.gpus == 256 and r.embedding_stage and r.loss_stage for r in rows)
    assert [r.sim_schedule for r in rows] == ["interleaved-1f1b", "combined-1f1b", "1f1b", "interleaved-1f1b",
                                              "interleaved-1f1b"]
    assert rows[2].zero == 3 and rows[2].recompute == "full" and rows[4].recompute == "none"


def test_a_torchtitan_row_runs_as_the_page_states(runs):
    """Eager FSDP as unfused kernels on Grand Teton's 96 GB H100 (a GPU file of validation/);
    AsyncTP as TP-communication overlap; FSDP under PP keeps its weights gathered."""
    eager = run_spec(runs["tt-t1-fsdp"])
    assert eager.fusion == "unfused" and eager.zero_stage == 3 and eager.reshard_after_forward
    assert Path(eager.gpu).is_file() and Path(eager.gpu).name == "h100-hbm2e-96.yaml"
    assert run_spec(runs["tt-t1-fsdp-compile"]).fusion == "fused"
    asynctp = run_spec(runs["tt-t4-2d-asynctp"])
    assert asynctp.tp_comm_overlap and asynctp.sequence_parallel and not run_spec(runs["tt-t4-2d"]).tp_comm_overlap
    pp = run_spec(runs["tt-t5-interleaved"])
    assert (pp.schedule, pp.chunks, pp.reshard_after_forward, pp.gemm_precision) == ("interleaved-1f1b", 2, False, "fp8")


def test_torchtitan_pipelines_run_as_its_code_builds_them(runs):
    """torchtitan 9dec370 (the commit Tables 5 and 6 name) sets as many micro-batches as pipeline
    ranks when none are given, and splits the 126 layers by its generate_split_points: the first
    stage the even share, the middle ones one more where the remainder allows, the last the rest."""
    from sim.training.costs.chunk import stage_layer_counts
    for rid, stages, split in (("tt-t5-1f1b", 8, [15] + [16] * 6 + [15]),
                               ("tt-t5-interleaved", 16, [7] + [8] * 14 + [7])):
        r = runs[rid]
        assert (r.microbatch_size, r.microbatches) == (4, 8)          # local batch 32 as 8 micro-batches
        assert stage_layer_counts(126, stages, None, r.first_stage_layers, r.last_stage_layers) == split
    assert (runs["tt-t6-cp1"].microbatch_size, runs["tt-t6-cp1"].microbatches) == (1, 8)   # local batch 8


def test_pipeline_sends_follow_each_runtime(runs):
    """Megatron-LM's own schedules wait for their sends (the Zero Bubble paper's 1F1B baselines,
    Megatron-LM 2021, Megatron-Bridge's 1F1B without virtual stages); Zero Bubble's runtime,
    Megatron-Bridge's interleaved 1F1B (overlap_p2p_comm) and PyTorch's pipelining send asynchronously."""
    sends = {rid: run_spec(runs[rid]).pipeline_sends for rid in (
        "zb-t4-1.5b-m24-1f1b", "zb-t4-1.5b-m24-interleaved-1f1b", "zb-t4-1.5b-m24-zb-1p", "mt-t1-39.1b",
        "tt-t5-interleaved")}
    assert sends == {"zb-t4-1.5b-m24-1f1b": "blocking", "zb-t4-1.5b-m24-interleaved-1f1b": "blocking",
                     "zb-t4-1.5b-m24-zb-1p": "async", "mt-t1-39.1b": "blocking", "tt-t5-interleaved": "async"}
    bridge = [r for r in runs.values() if r.source == "nvidia-megatron-bridge" and r.pp > 1 and r.simulated]
    assert bridge and all((r.pipeline_sends == "blocking") == (r.vp is None) for r in bridge)
    megatron = [r for r in runs.values() if r.pp > 1 and (r.source == "megatron-2021" or (
        r.source == "zero-bubble" and r.sim_schedule in ("1f1b", "interleaved-1f1b")))]
    assert len(megatron) == 45 and all(r.pipeline_sends == "blocking" for r in megatron)
    blocking = {r.id for r in runs.values() if r.pipeline_sends == "blocking"}
    assert blocking == {r.id for r in megatron} | {r.id for r in bridge if r.vp is None}          # and no other row


def test_deepspeeds_zero3_of_2021_runs_per_tensor(runs):
    """Megatron-LM 2021's ZeRO-3 rows ran the DeepSpeed library of spring 2021 (one collective per
    parameter tensor); no other row sets it, and the other ZeRO-3 rows (FSDP) keep one a layer."""
    steps = [r for r in runs.values() if not r.is_kernel and r.sim_schedule]
    per_tensor = {r.id for r in steps if run_spec(r).zero3_collectives == "per-tensor"}
    assert per_tensor == {r.id for r in runs.values() if r.id.startswith("mt-t2-zero3-")} and len(per_tensor) == 6
    others = [r for r in steps if r.zero == 3 and r.id not in per_tensor]
    assert others and all(run_spec(r).zero3_collectives == "per-layer" for r in others)


def test_speed_error_is_positive_when_the_simulator_is_optimistic(runs):
    assert speed_error(runs["zb-t4-1.5b-m24-1f1b"], 11.8 * 1.1) == pytest.approx(0.1)     # a throughput
    assert speed_error(runs["deepep-ll-dispatch-ep8"], 70.0) == pytest.approx(77 / 70 - 1)  # a time


def test_the_zero_bubble_profile_becomes_per_layer_times(runs, tmp_path):
    """Table 9's T_F, T_B, T_W are per stage of a ZB-2p run, whose middle stages hold (L + 2) / p
    layers (the first and last one fewer): 1.5B: 24 / 8 = 3."""
    assert [profiled_stage_layers(p) for p in ("zb-1.5b-m24", "zb-6.2b-m24", "zb-14.6b-m48", "zb-28.3b-m96")] == \
        [3, 4, 3, 2]
    path = write_compute_profile(runs["zb-t4-1.5b-m24-interleaved-1f1b"], tmp_path)
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert {r["part"]: float(r["seconds"]) for r in rows} == pytest.approx(
        {"f": 18.522e-3 / 3, "i": 18.086e-3 / 3, "w": 9.337e-3 / 3})


def test_a_profile_fed_step_spends_the_profiled_time(runs, tmp_path):
    """With T_F, T_B, T_W fed in, a middle rank of 1F1B is busy M (T_F + T_B + T_W) per step."""
    from sim.training.scenario import Scenario
    from sim.training.step import MoEStep
    run = runs["zb-t4-6.2b-m24-1f1b"]
    result = MoEStep(Scenario(run_spec(run, str(write_compute_profile(run, tmp_path))))).simulate()
    busy = result.ranks[3].compute_s + result.ranks[3].recompute_s
    assert busy == pytest.approx(24 * (29.718 + 29.444 + 19.927) * 1e-3, rel=1e-9)


def test_deepseek_v3_is_fed_deepseeks_profiled_unit(runs, tmp_path):
    """The DeepSeek-V3 row's profile: the MoE layers' parts of DeepSeek's published F&B unit, at their
    measured time beside communication; fed them, the step is 19.62 s against the 19.9 s measured (first
    principles, on the FP8 GEMMs DeepSeek-V3 trained with: 17.85 s)."""
    run = runs["dsv3-report-2048"]
    rows = list(csv.DictReader(io.StringIO(write_compute_profile(run, tmp_path).read_text())))
    assert {r["part"]: float(r["seconds"]) for r in rows}["attn_i"] == pytest.approx(9.34075e-3)
    assert {r["beside"] for r in rows} == {"1.0"}
    fed = predict(run, "profile_fed", tmp_path)
    assert fed["step_time_s"] == pytest.approx(19.62, abs=0.005)
    assert 100 * speed_error(run, fed["predicted"]) == pytest.approx(1.4, abs=0.05)
    assert predict(run, "first_principles", tmp_path)["step_time_s"] == pytest.approx(17.85, abs=0.005)


def test_auto_recomputation_is_the_least_that_fits(runs):
    """A source that does not say what it recomputed: the first of selective and full under which every
    rank fits HBM (the run did fit). GPT-OSS-120B on 64 H100 (25.11): 124 GB selective, 59 GB full."""
    from validation.predict import scenario_of
    assert scenario_of(runs["nv-25.11-h100-gpt-oss-120b-bf16-64"]).run.memory_policy == "full"
    assert scenario_of(runs["nv-26.02-h100-gpt-oss-120b-bf16-64"]).run.memory_policy == "selective"
    assert scenario_of(runs["zb-t4-1.5b-m24-1f1b"]).run.memory_policy == "none"          # stated: kept


def test_nvidias_rows_run_as_their_recipes_set_them(runs):
    """Megatron-Bridge's performance scripts at each container's release: Qwen3 recomputes nothing,
    DeepSeek-V3 MLA's up-projections (selective), the Llamas nothing with TP overlap, the 405B and
    Qwen3-235B with the embedding and the loss in the pipeline split; GPT-OSS-120B's recipe is unclear
    (modules listed, granularity left at None): auto. Every recipe reduces its gradients in BF16
    (``grad_reduce_in_fp32`` off) and the FP8 ones keep their weights in FP8 only (``fp8_param_gather``)."""
    from sim.training.model.recompute import recompute_of
    from validation.predict import scenario_of
    llama = run_spec(runs["nv-26.02-h100-llama3.1-405b-fp8-1024"])
    assert (llama.memory_policy, llama.tp_comm_overlap, llama.embedding_stage, llama.loss_stage) == ("none", 1, 1, 1)
    seventy = run_spec(runs["nv-25.11-h100-llama3-70b-fp8-cs-64"])
    assert (seventy.memory_policy, seventy.tp_comm_overlap, seventy.embedding_stage) == ("none", 1, 0)
    qwen = run_spec(runs["nv-26.02-h100-qwen3-235b-a22b-fp8-256"])
    assert (qwen.memory_policy, qwen.embedding_stage, qwen.loss_stage, qwen.tp_comm_overlap) == ("none", 1, 1, 0)
    assert runs["nv-26.02-b200-qwen3-30b-a3b-mxfp8-8"].recompute == "none"
    assert runs["nv-26.02-h100-gpt-oss-120b-bf16-64"].recompute == "auto"
    dsv3 = runs["nv-26.02-b200-deepseek-v3-mxfp8-256"]
    spec = run_spec(dsv3)
    assert (spec.recompute_granularity, spec.recompute_modules) == ("selective", ("mla_up_proj",))
    assert recompute_of(spec).modules == ("mla_up_proj",)
    assert all(r.grad_reduce_in_fp32 == 0 and r.fp8_param_gather == (r.precision in ("fp8", "mxfp8"))
               for r in runs.values() if r.source == "nvidia-megatron-bridge" and r.role == "scored")
    assert (llama.grad_bytes, llama.fp8_param_gather, llama.gathered_weight_bytes) == (2.0, True, 1.0)
    oss = run_spec(runs["nv-26.02-h100-gpt-oss-120b-bf16-64"])                  # BF16: weights kept in BF16
    assert (oss.grad_bytes, oss.fp8_param_gather) == (2.0, False)
    zb = run_spec(runs["zb-t4-6.2b-m24-zb-2p"])                                  # the others as before
    assert (zb.grad_bytes, zb.fp8_param_gather) == (4.0, False)
    as_recipe = max(m.total_gb for m in scenario_of(dsv3).memory)
    core_attn = max(m.total_gb for m in scenario_of(replace(dsv3, recompute_modules=None)).memory)
    assert as_recipe < core_attn           # MLA's up-projections' outputs are not stored; the core's are


def test_predictions_of_one_run_of_each_kind(runs, tmp_path):
    zb = predict(runs["zb-t4-6.2b-m24-zb-2p"], "first_principles", tmp_path)
    assert zb["predicted"] > 0 and zb["max_memory_gb"] > 0
    assert predict(runs["zb-t4-6.2b-m24-zb-2p"], "profile_fed", tmp_path)["predicted"] > 0
    assert predict(runs["mt-t1-1.7b"], "profile_fed", tmp_path) == {}          # nothing published to feed in
    kernel = predict(runs["deepep-ll-dispatch-ep16"], "first_principles", tmp_path)
    assert 20 < kernel["predicted"] < 1000                                     # microseconds


def test_calibrated_kernels_come_from_the_calibration_rows_only():
    k = calibrated_kernels()
    assert k.calibrated_from.startswith("validation/runs.csv")   # then the shipped NCCL calibration kept:
    assert k.calibrated_from.endswith(" + experiments/profiles/xla-nccl-h100.csv (nccl_launch_us, nccl_GBps, "
                                      "nccl_copy_GBps, nccl_reduce_GBps, nvls_GBps, nvls_latency_us)")
    assert set(k.fitted) - set(load_kernels("deepep").fitted) == {"notify_us", "nvlink_efficiency", "ib_efficiency"}


HEADER = ",".join(f.name for f in Run.__dataclass_fields__.values())


def _write(tmp_path, **change):
    row = {"id": "x", "source": "zero-bubble", "where": "Table 4", "role": "scored", "model": "zb-gpt-1.5b",
           "seq_len": "1024", "microbatch_size": "6", "global_batch": "144", "gpus": "8", "gpu": "a100",
           "topology": "zb-a100-roce", "tp": "1", "cp": "1", "pp": "8", "dp": "1", "ep": "1", "zero": "1",
           "schedule": "1F1B", "sim_schedule": "1f1b", "metric": "samples_per_s_per_gpu", "measured": "11.8"}
    row.update(change)
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as fh:
        fh.write("# a comment\n")
        w = csv.DictWriter(fh, list(row))
        w.writeheader()
        w.writerow(row)
    return path


@pytest.mark.parametrize("change,pattern", [
    ({"pp": "4"}, r"validation run x \(runs.csv line 3\): the layout does not multiply to the GPU count: "
                  r"tp x cp x pp x dp = 1 x 1 x 4 x 1 = 4, but gpus = 8"),
    ({"role": "maybe"}, "role must be one of scored, calibration"),
    ({"source": "a blog"}, "source must be one of zero-bubble"),
    ({"metric": "vibes"}, "metric must be one of samples_per_s_per_gpu"),
    ({"measured": "-3"}, r"measured must be a finite number > 0, got -3"),
    ({"measured": "fast"}, "measured must be a number, got 'fast'"),
    ({"gpus": "eight"}, "gpus must be a whole number, got 'eight'"),
    ({"ep": "3"}, r"ep \(3\) must divide tp x cp x dp"),
    ({"sequence_parallel": "2"}, r"sequence_parallel must be an integer in \[0, 1\], got 2"),
    ({"global_batch": "145"}, r"global_batch \(145\) must be a multiple of dp x microbatch_size"),
    ({"model": ""}, "column 'model' is empty"),
    ({"profile": "zb-99b"}, "profile 'zb-99b' is not one of"),
    ({"colour": "red"}, "unknown column 'colour'"),
    ({"recompute": "most"},
     "recompute must be one of none, selective, full, deepseek-v3, selective-op, auto, got 'most'"),
    ({"precision": "fp4"}, "precision must be one of bf16, fp8, mxfp8, got 'fp4'"),
    ({"fusion": "compiled"}, "fusion must be one of fused, unfused, got 'compiled'"),
    ({"tp_comm_overlap": "1"}, "tp_comm_overlap 1 needs sequence_parallel 1"),
    ({"tp_comm_overlap": "yes"}, "tp_comm_overlap must be a whole number, got 'yes'"),
    ({"pipeline_sends": "eager"}, "pipeline_sends must be one of async, blocking, got 'eager'"),
    ({"recompute": "full", "recompute_modules": "mlp"},
     "recompute_modules \\('mlp'\\) needs recompute selective, got recompute 'full'"),
    ({"recompute": "selective", "recompute_modules": "mlp;gates"},
     "recompute_modules must be one of core_attn, layernorm, mla_up_proj, mlp, moe_act, moe, shared_experts, "
     "got 'gates'"),
    ({"fp8_param_gather": "1"}, "fp8_param_gather 1 needs precision fp8 or mxfp8 and zero 0-2, got precision bf16, "
                                "zero 1"),
    ({"grad_reduce_in_fp32": "2"}, r"grad_reduce_in_fp32 must be an integer in \[0, 1\], got 2"),
    ({"zero3_collectives": "bucketed"}, "zero3_collectives must be one of per-layer, per-tensor, got 'bucketed'"),
    ({"zero3_collectives": "per-tensor"}, "zero3_collectives per-tensor needs zero 3, got zero 1"),
])
def test_a_bad_row_is_one_line_naming_the_row_and_field(tmp_path, change, pattern):
    with pytest.raises(ValidationDataError, match=pattern) as info:
        load_runs(_write(tmp_path, **change))
    assert "\n" not in str(info.value)


def test_a_repeated_id_is_refused(tmp_path):
    path = _write(tmp_path)
    path.write_text(path.read_text() + path.read_text().splitlines()[-1] + "\n")
    with pytest.raises(ValidationDataError, match="the id is used twice"):
        load_runs(path)


def test_the_suite_file_starts_with_its_honesty_rules():
    head = Path(RUNS).read_text().splitlines()[:5]
    assert any("no parameter of the simulator is fitted to any row" in line for line in head)


def test_a_rows_gpu_on_another_gpus_cluster_is_not_warned(runs):
    """Trainy's H200 rows run on the RoCE cluster's network (an H100 topology), as stated: the suite
    says nothing of it, where `run` would warn."""
    import warnings

    from validation.memory import load_memory_runs, predict_memory
    from validation.predict import scenario_of
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scenario_of(runs["trainy-32"])
        predict_memory(next(r for r in load_memory_runs() if r.id == "trainy-32"))
    assert not [w for w in caught if "is not the GPU of topology" in str(w.message)]


@pytest.mark.parametrize("row_id, measure", [("kf-02-7b-fsdp2", "allocated"), ("tt-t1-fsdp", "reserved")])
def test_a_memory_row_is_predicted_as_its_pytorch_counter_counts(row_id, measure):
    """KempnerForge reports torch's peak allocated memory, torchtitan its peak reserved: the
    prediction is the fullest rank less the CUDA context and NCCL's buffers (never in PyTorch's
    allocator), and for allocated memory less the allocator's reserve (fragmentation) too."""
    from sim.training.scenario import Scenario
    from validation.memory import load_memory_runs, memory_spec, predict_memory
    from validation.suite import row_gpu_as_stated
    row = next(r for r in load_memory_runs() if r.id == row_id)
    assert row.measure == measure
    with row_gpu_as_stated():
        top = max(Scenario(memory_spec(row)).memory, key=lambda m: m.total_gb)
    fixed = dict(top.fixed)
    left_out = fixed["CUDA context"] + fixed["NCCL"] + (fixed["fragmentation"] if measure == "allocated" else 0.0)
    got = predict_memory(row)
    assert got["predicted_gb"] == pytest.approx(top.total_gb - left_out)
    assert got["error_pct"] == pytest.approx(100 * (got["predicted_gb"] / row.measured_gb - 1))
