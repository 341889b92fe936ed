"""sim.training.model.example and a user's own run: a template of every field, models and GPUs given inline or
as files next to the scenario, the layout and batch printed as simulated."""
import json
from dataclasses import fields

import yaml
from test_outputs import cli

from sim.training.model.example import example_yaml
from sim.training.model.specs import RunSpec, load_gpu, load_model, load_scenario


def test_the_template_names_every_field_and_loads_as_a_scenario(tmp_path):
    text = example_yaml()
    mapping = yaml.safe_load(text)
    assert set(mapping) == {f.name for f in fields(RunSpec)}
    assert all(f"{f.name}:" in text for f in fields(RunSpec))
    assert "(required)" in text and "(default 0.7)" in text        # each line says its default
    path = tmp_path / "my.yaml"
    path.write_text(text)
    run = load_scenario(str(path))
    assert str(run.model) == "my-qwen3-30b-a3b" and load_model(run.model).routed_experts == 128


def test_run_example_prints_the_template():
    rc, out, _ = cli(["run", "--example"])
    assert rc == 0 and out == example_yaml()


def test_a_users_model_and_cluster_files_resolve_next_to_the_scenario(tmp_path, monkeypatch):
    """A Qwen3-30B-A3B-like model and a 32-node H100 cluster as the user's own YAML files, named by
    relative paths inside the scenario: run from another folder, it runs with the recipe printed."""
    folder = tmp_path / "mine"
    folder.mkdir()
    model = {"layers": 48, "hidden": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128, "routed_experts": 128,
             "expert_intermediate": 768, "topk": 8, "vocab": 151936}
    (folder / "qwen3-like.yaml").write_text(yaml.safe_dump(model))
    cluster = {"kind": "fat_tree", "gpu": "h100", "nodes": 32, "gpus_per_node": 8, "nvlink_bandwidth_GBps": 450,
               "nic_bandwidth_GBps": 50, "switch_radix": 64, "oversubscription": 1, "rail_optimized": True,
               "planes": 1}
    (folder / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    scenario = {"model": "qwen3-like.yaml", "gpu": "h100", "topology": "cluster.yaml", "pp": 8, "ep": 8, "dp": 32,
                "schedule": "1f1b", "microbatches": 16, "seq_len": 4096, "memory_policy": "selective"}
    (folder / "run.yaml").write_text(yaml.safe_dump(scenario))
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(["run", "mine/run.yaml", "--schedule", "1f1b", "--json"])
    assert rc == 0, err
    js = json.loads(out)
    assert js["recipe"]["model"] == "qwen3-like" and js["recipe"]["topology"] == "cluster"
    assert (js["pp"], js["dp"], js["ep"], js["recipe"]["gpus"], js["recipe"]["topology_gpus"]) == (8, 32, 8, 256, 256)
    assert js["recipe"]["global_batch_seqs"] == 32 * 16


def test_model_and_gpu_inline_in_a_scenario_and_on_the_command_line(tmp_path):
    gpu = {"name": "my-gpu", "sms": 132, "bf16_tflops": 900, "fp8_tflops": 1800, "hbm_gb": 96, "hbm_tbps": 4}
    assert load_gpu(gpu).hbm_gb == 96 and load_gpu(json.dumps(gpu)).name == "my-gpu"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"model": "tiny-moe", "gpu": gpu, "topology": "h800-16", "pp": 4, "ep": 4, "dp": 4,
                                    "schedule": "1f1b", "microbatches": 8, "seq_len": 512}))
    rc, out, err = cli(["run", str(path), "--schedule", "1f1b"])
    assert rc == 0, err
    assert out.splitlines()[0].startswith("simulated: tiny-moe on 16 my-gpu of h800-16")
    rc, out, err = cli(["run", "tiny", "--schedule", "1f1b", "--gpu", "{name: x, sms: 100, bf16_tflops: 500, "
                        "hbm_gb: 40, hbm_tbps: 2}", "--json"])
    assert rc == 0 and json.loads(out)["recipe"]["gpu"] == "x"
    rc, _, err = cli(["run", "tiny", "--model", "{layers: [", "--schedule", "1f1b"])
    assert rc == 2 and "an inline model must be a YAML mapping of fields" in err and err.count("\n") == 1


def test_a_comparison_survives_schedules_that_cannot_run():
    """M=6 at P=4: DualPipe (even M >= 2P) and DualPipeV (M >= 2P) cannot run; 1F1B and ZB-H1 do,
    and the two are listed with their reasons; --dp's change of the global batch is said."""
    rc, out, err = cli(["run", "tiny", "--microbatches", "6"])
    assert rc == 0, err
    assert "not run: dualpipe: dualpipe needs an even M >= 2P, got M=6 with P=4" in out
    assert "not run: dualpipev:" in out and "zb-h1 " in out
    assert "note: the global batch is 24 sequences (DP4 x M=6 x 1), the scenario's is 32" in out


def test_schedules_as_a_list_comma_separated_or_repeated():
    rc, out, _ = cli(["run", "tiny", "--schedule", "1f1b,zb-h1", "--schedule", "dualpipe", "--json"])
    js = json.loads(out)
    assert rc == 0 and [c["schedule"] for c in js["comparison"]] == ["1f1b", "zb-h1", "dualpipe"]


def test_a_topology_naming_an_unknown_gpu_is_refused(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"kind": "hgx_node", "gpu": "h900", "gpus_per_node": 8,
                                    "nvlink_bandwidth_GBps": 450}))
    rc, _, err = cli(["collective", "all-reduce", "--topology", str(path), "--bytes", "1e6"])
    assert rc == 2 and "gpu must be a GPU preset" in err and "got 'h900'; did you mean 'h800'?" in err
    assert err.count("\n") == 1


def test_unknown_names_suggest_the_closest():
    rc, _, err = cli(["run", "deepseek-v4"])
    assert rc == 2 and "did you mean 'deepseek-v3'?" in err


def test_a_profile_of_random_text_or_bytes_is_one_line(tmp_path):
    """A compute profile that is not a CSV of layer, part, seconds: random text names the columns
    it lacks; random bytes say the file is not text; neither ends in a traceback."""
    import os
    text, raw = tmp_path / "text.csv", tmp_path / "raw.csv"
    text.write_text("q8Zr/3kP+aa9x0LmN2\nzz,,\x01\n")
    raw.write_bytes(os.urandom(64) + b"\xff\xfe\x00")
    for path, says in ((text, "needs columns layer, part, seconds; got ['q8Zr/3kP+aa9x0LmN2']"),
                       (raw, "not a text CSV (it is not UTF-8)")):
        scenario = tmp_path / f"{path.stem}.yaml"
        scenario.write_text(yaml.safe_dump({"model": "tiny-moe", "gpu": "h800", "topology": "h800-16", "pp": 4,
                                            "ep": 4, "dp": 4, "schedule": "1f1b", "microbatches": 8,
                                            "seq_len": 512, "profile": path.name}))
        rc, _, err = cli(["run", str(scenario)])
        assert rc == 2 and says in err and err.count("\n") == 1, err


def test_a_typo_in_a_schedule_list_or_a_scenario_error_is_said_as_it_is():
    """A name that is no schedule is refused, with the closest name, even inside a list; a problem
    every schedule shares (an unknown topology) is the scenario's and is said without a prefix."""
    rc, _, err = cli(["run", "tiny", "--schedule", "1f1b,dualpipee"])
    assert rc == 2 and err.startswith("error: unknown schedule 'dualpipee'") and "did you mean 'dualpipe'?" in err
    rc, _, err = cli(["run", "tiny", "--topology", "h800-1"])
    assert rc == 2 and err.startswith("error: unknown topology 'h800-1'") and "did you mean 'h800-16'?" in err


def test_run_with_a_scenario_and_example_prints_that_scenarios_values(tmp_path):
    """``run tiny --example`` starts from tiny (its values, every other field at its default), and the
    file it prints runs as tiny does."""
    rc, out, _ = cli(["run", "tiny", "--example"])
    assert rc == 0 and out != example_yaml()
    mapping = yaml.safe_load(out)
    assert set(mapping) == {f.name for f in fields(RunSpec)}
    assert mapping["model"] == "tiny-moe" and mapping["topology"] == "h800-16" and mapping["compute_model"] == "flops"
    assert mapping["pp"] == 4 and mapping["microbatches"] == 8 and mapping["zero_stage"] == 1     # a default
    path = tmp_path / "mine.yaml"
    path.write_text(out)
    assert load_scenario(str(path)) == load_scenario("tiny")
    rc, file_out, _ = cli(["run", str(path), "--schedule", "dualpipe"])
    rc_tiny, tiny_out, _ = cli(["run", "tiny", "--schedule", "dualpipe"])
    assert rc == rc_tiny == 0 and file_out.splitlines()[4:] == tiny_out.splitlines()[4:]


def test_a_scenario_gpu_other_than_the_clusters_is_warned(capsys):
    """``run tiny --topology <an H100 cluster>`` simulates tiny's H800s: said on stderr, once; with
    ``--gpu h100`` nothing is said."""
    rc, _, err = cli(["run", "tiny", "--topology", "h100-1024", "--schedule", "1f1b,dualpipe"])
    assert rc == 0
    lines = [l for l in err.splitlines() if l.startswith("warning: gpu")]
    assert lines == ["warning: gpu h800 is not the GPU of topology 'h100-1024' (h100): simulating h800's compute "
                     "and memory on that cluster's network (--gpu h100 for its own)"]
    rc, _, err = cli(["run", "tiny", "--topology", "h100-1024", "--gpu", "h100", "--schedule", "1f1b"])
    assert rc == 0 and "warning: gpu" not in err
