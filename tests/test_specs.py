"""sim.training.model.specs: presets, field validation, scenario files."""
import pytest

from sim.training.model.specs import (
    SpecError,
    gpu_names,
    load_gpu,
    load_model,
    load_scenario,
    model_names,
    scenario_names,
)
from sim.training.scenario import Scenario


def test_presets_exist():
    assert {"deepseek-v3", "llama-70b-like", "mixtral-8x7b-like", "tiny-moe"} <= set(model_names())
    assert {"h800", "h100", "h200", "a100"} <= set(gpu_names())
    assert {"deepseek-v3", "tiny"} <= set(scenario_names())
    ds = load_model("deepseek-v3")
    assert (ds.layers, ds.hidden, ds.routed_experts, ds.topk, ds.expert_intermediate) == (61, 7168, 256, 8, 2048)
    assert load_gpu("h200").hbm_gb == 150.75                    # 143,771 MiB as nvidia-smi reports it, in 1e9 bytes
    run = load_scenario("deepseek-v3")
    assert (run.pp, run.ep, run.dp, run.microbatches, run.seq_len, run.comm_sms) == (16, 64, 128, 120, 4096, 20)


@pytest.mark.parametrize("overrides,pattern", [
    (dict(ep=48), "ep \\(48\\) must divide dp \\(128\\)"),
    (dict(dispatch_precision="fp4"), "dispatch_precision must be one of fp8, bf16"),
    (dict(gemm_efficiency=1.5), "gemm_efficiency must be a finite number in \\[0.001, 1\\], got 1.5"),
    (dict(attention_efficiency=5e-324), "attention_efficiency must be a finite number in \\[0.001, 1\\], got 5e-324"),
    (dict(weight_bytes=1e300), "RunSpec.weight_bytes \\(bytes per parameter\\) must be a finite number in \\(0, 64\\]"),
    (dict(microbatch_size=10 ** 8), "microbatch_size x seq_len \\(tokens per micro-batch\\) must be at most "
                                    "1,000,000,000, got 100,000,000 x 4,096"),
    (dict(pp=0), "RunSpec.pp must be an integer in \\(0, 100,000,000\\], got 0"),
    (dict(routing_skew=float("nan")), "routing_skew must be a finite number in \\[0, 100\\], got nan"),
    (dict(routing_skew=float("inf")), "routing_skew must be a finite number"),
    (dict(pp=True), "RunSpec.pp must be an integer"),
    (dict(seq_len=4096.5), "RunSpec.seq_len must be an integer"),
    (dict(model=3), "RunSpec.model must be a preset name, a file path or a mapping of fields"),
    (dict(pipeline_sends="sync"), "RunSpec.pipeline_sends must be one of async, blocking"),
    (dict(zero3_collectives="bucketed"), "RunSpec.zero3_collectives must be one of per-layer, per-tensor, got "
                                         "'bucketed'"),
    (dict(zero3_collectives="per-tensor"), "RunSpec.zero3_collectives per-tensor is for zero_stage 3, got "
                                           "zero_stage 1"),
])
def test_bad_run_fields(overrides, pattern):
    with pytest.raises(SpecError, match=pattern):
        Scenario(load_scenario("deepseek-v3", **overrides))


def test_unknown_presets_list_valid_ones():
    with pytest.raises(SpecError, match=r"unknown model 'gpt-5': not a preset \(deepseek-v2, deepseek-v3, "):
        load_model("gpt-5")
    with pytest.raises(SpecError, match=r"unknown GPU 'b300': not a preset \(a100, b200, gb200, h100, h200, h800\)"):
        load_gpu("b300")
    with pytest.raises(SpecError, match="not a preset"):
        load_scenario("nope")


def test_scenario_file_with_unknown_field(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("model: tiny-moe\ngpu: h800\ntopology: h800-16\npp: 4\nep: 4\ndp: 4\nschedule: 1f1b\n"
                 "microbatches: 8\nseq_len: 256\nbogus: 3\n")
    with pytest.raises(SpecError, match="unknown field\\(s\\) 'bogus'"):
        load_scenario(str(p))


@pytest.mark.parametrize("overrides,pattern", [
    (dict(memory_policy="fp4-everything"), "memory_policy must be one of none, selective, full, deepseek-v3"),
    (dict(zero_stage=4), "zero_stage \\(ZeRO stage\\) must be an integer in \\[0, 3\\], got 4"),
    (dict(zero_stage=1.5), "zero_stage \\(ZeRO stage\\) must be an integer"),
    (dict(stage_layers=[4, 0, 4]), "stage_layers entries must be an integer >= 1, got 0"),
    (dict(stage_layers="4,4"), "stage_layers must be a list"),
    (dict(stage_layers=[8, 8], last_stage_layers=2), "cannot be combined"),
    (dict(last_stage_layers=0), "last_stage_layers must be an integer >= 1"),
    (dict(memory_reserve_gb=float("nan")), "memory_reserve_gb must be a finite number >= 0, got nan"),
    (dict(grad_bytes=-2), "grad_bytes \\(bytes per parameter\\) must be a finite number in \\(0, 64\\], got -2"),
    (dict(dp_sync="never"), "dp_sync must be one of overlap, end"),
])
def test_bad_memory_and_layout_fields(overrides, pattern):
    with pytest.raises(SpecError, match=pattern):
        load_scenario("tiny", **overrides)


def test_split_that_does_not_fit_the_schedule_is_refused():
    from sim.training.scenario import Scenario
    with pytest.raises(SpecError, match="stage_layers has 3 entries"):
        Scenario(load_scenario("tiny", stage_layers=[3, 3, 2]))
    with pytest.raises(SpecError, match="sums to 9, but the model has 8"):
        Scenario(load_scenario("tiny", stage_layers=[3, 2, 2, 2]))


def test_yaml_numbers_with_an_exponent_are_numbers():
    """YAML 1.2 reads ``1e9`` as a float; PyYAML (YAML 1.1) alone reads it as text. Text stays text,
    integers stay integers, and SafeLoader itself is left as it was."""
    import yaml

    from sim.checks import yaml_load
    doc = yaml_load("a: 1e9\nb: -2E+3\nc: 5e-1\nd: 1.5\ne: 10\nf: .inf\ng: 1e9x\nh: e9\n")
    assert doc == {"a": 1e9, "b": -2000.0, "c": 0.5, "d": 1.5, "e": 10, "f": float("inf"), "g": "1e9x", "h": "e9"}
    assert isinstance(doc["e"], int)
    assert yaml.safe_load("a: 1e9") == {"a": "1e9"}


def test_a_scenario_file_missing_fields_names_them(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("topology: h800-16\npp: 4\n")
    with pytest.raises(SpecError, match="missing field\\(s\\) model, gpu, ep, dp, schedule, microbatches, "
                                        "seq_len \\(required: model, gpu, topology, pp, ep"):
        load_scenario(str(p))


def test_every_gpu_preset_names_its_source_and_blackwell_runs_mxfp8():
    from sim.training.model.specs import gpu_names
    for name in gpu_names():
        g = load_gpu(name)
        assert g.source and g.bf16_tflops > 0 and g.nvlink_GBps > 0
    b200, h100 = load_gpu("b200"), load_gpu("h100")
    assert b200.peak_flops("mxfp8") == b200.peak_flops("fp8") == 4500e12 and b200.fp4_tflops == 9000
    with pytest.raises(SpecError, match="GPU h100 has no block-scaled \\(MXFP8\\) tensor cores"):
        h100.peak_flops("mxfp8")
    with pytest.raises(SpecError, match="GPU a100 has no FP8 tensor cores"):
        load_gpu("a100").peak_flops("mxfp8")


def test_models_and_gpus_from_files(tmp_path):
    gpu = tmp_path / "mygpu.yaml"
    gpu.write_text("sms: 100\nbf16_tflops: 500\nfp8_tflops: null\nhbm_gb: 96\nhbm_tbps: 3\n")
    assert load_gpu(str(gpu)).name == "mygpu" and load_gpu(str(gpu)).hbm_gb == 96
    gpu.write_text("sms: 100\nfp8_tflops: null\nhbm_gb: 96\nhbm_tbps: 3\n")
    with pytest.raises(SpecError, match="missing field\\(s\\) bf16_tflops"):
        load_gpu(str(gpu))
    model = tmp_path / "m.yaml"
    model.write_text("layers: 4\nhidden: 256\nheads: 4\nhead_dim: 64\ndense_layers: 4\ndense_intermediate: 512\n")
    assert load_model(str(model)).layers == 4


def test_paths_in_a_scenario_resolve_from_its_folder(tmp_path):
    folder = tmp_path / "plans"
    folder.mkdir()
    (folder / "model.yaml").write_text("layers: 4\nhidden: 256\nheads: 4\nhead_dim: 64\ndense_layers: 4\n"
                                       "dense_intermediate: 512\n")
    (folder / "run.yaml").write_text("model: model.yaml\ngpu: h100\ntopology: h800-16\npp: 2\nep: 1\ndp: 8\n"
                                     "schedule: 1f1b\nmicrobatches: 4\nseq_len: 128\n")
    run = load_scenario(str(folder / "run.yaml"))
    assert run.model == str(folder / "model.yaml")
    assert Scenario(run).model.layers == 4


def test_hbm_capacity_is_the_devices_total_as_the_driver_reports_it():
    """nvidia-smi's totals (MiB) in the simulator's GB of 1e9 bytes: 81,559 MiB for an H100 SXM and the
    H800 (its 80 GB part), 81,920 for the A100 80 GB, 143,771 for the H200, 183,359 for the B200."""
    mib = {"h100": 81_559, "h800": 81_559, "a100": 81_920, "h200": 143_771, "b200": 183_359}
    for name, total in mib.items():
        assert load_gpu(name).hbm_gb == pytest.approx(total * 2 ** 20 / 1e9, abs=0.005)
    assert load_gpu("gb200").hbm_gb == pytest.approx(186 * 2 ** 30 / 1e9, abs=0.005)   # datasheet GB read as GiB
