"""sim.cli.run: python -m sim run: the JSON contract, files written, clean errors."""
import json

import pytest

from sim.cli import main


def test_run_json_contract(capsys):
    code = main(["run", "tiny", "--schedule", "dualpipe", "--json"])
    js = json.loads(capsys.readouterr().out)
    assert code == 0
    for key in ("step_time_s", "tokens_per_s", "mfu", "compute_comm_ratio", "exposed_comm_s", "ranks"):
        assert key in js
    assert set(js["ranks"][0]) >= {"rank", "compute_s", "exposed_comm_s", "bubble_s", "utilization"}
    # the communication kernels by name, as in the summary CSV; a layer's compute kernels as rows beside them
    assert js["kernels"] == "ideal" and js["recipe"]["kernels"] == "ideal"
    assert js["layer_kernels"] == []                      # tiny runs the FLOPs model: no kernels
    assert js["beside_comm"] == {"comm_sms": 20, "gpu_sms": 132, "hbm_share": 0.0}   # ideal kernels: no HBM share
    from sim.training.model.specs import load_scenario
    from sim.training.step import simulate_step
    rows = simulate_step(load_scenario("tiny", compute_model="kernels")).to_json()["layer_kernels"]
    assert rows and {"layer", "kernel", "us"} <= set(rows[0])


def test_run_all_schedules_writes_files(tmp_path, capsys):
    code = main(["run", "tiny", "--out", str(tmp_path), "--trace", str(tmp_path / "t.json")])
    out = capsys.readouterr().out
    assert code == 0 and "dualpipe" in out and "1f1b" in out and "hides" in out
    assert (tmp_path / "tiny_summary.csv").exists() and (tmp_path / "tiny_ranks.csv").exists()
    assert (tmp_path / "figures" / "tiny_fb_unit_dualpipe.png").stat().st_size > 5000
    trace = json.loads((tmp_path / "t.json").read_text())
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])


@pytest.mark.parametrize("argv,pattern", [
    (["run", "nope"], "unknown scenario 'nope'"),
    (["run", "tiny", "--ep", "3", "--dp", "3"], "must divide the 8 GPUs per node"),
    (["run", "tiny", "--schedule", "dualpipe", "--pp", "3", "--dp", "4"], "even P"),
    (["run", "tiny", "--schedule", ""], "unknown schedule ''; valid schedules: gpipe"),   # not "every schedule"
])
def test_run_errors(capsys, argv, pattern):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and pattern in err


def _tiny_with_seq_len(tmp_path, text):
    from sim.checks import yaml_load
    from sim.training.model.specs import PRESETS
    tiny = yaml_load((PRESETS / "scenarios.yaml").read_text())["tiny"]
    (tmp_path / "long.yaml").write_text("".join(f"{k}: {v}\n" for k, v in tiny.items() if k != "seq_len")
                                        + f"seq_len: {text}\n")
    return str(tmp_path / "long.yaml")


def test_a_sequence_past_the_stated_limit_is_refused_in_one_line(tmp_path, capsys):
    """``seq_len: 1e7`` (a typo for 1e4, say) is refused with the limit and its reason, not run to a
    step of hours; at the limit it is accepted."""
    from sim.training.model.specs import MAX_SEQ_LEN
    assert main(["run", _tiny_with_seq_len(tmp_path, "1e7"), "--json"]) == 2
    err = capsys.readouterr().err
    assert "seq_len must be at most 2,097,152 tokens" in err and "10,000,000" in err and "Traceback" not in err
    assert main(["run", _tiny_with_seq_len(tmp_path, MAX_SEQ_LEN), "--json"]) == 0


def test_a_scenario_file_reads_exponent_numbers_and_a_long_step_ends(tmp_path, capsys, monkeypatch):
    """``seq_len: 1e7`` is a number (YAML 1.2; PyYAML alone reads it as text and the field refused
    it), and the step it makes (with the sequence limit lifted), about 7,800 s in tiny's FLOPs model, ends:
    its pipeline sends' last bytes, due sooner than the float clock can tick at that hour, once re-armed
    a timer at the same instant forever."""
    import time

    import sim.training.model.specs
    from sim.limits import deadline
    monkeypatch.setattr(sim.training.model.specs, "MAX_SEQ_LEN", 10 ** 8)
    path = _tiny_with_seq_len(tmp_path, "1e7")
    start = time.perf_counter()
    with deadline(60):                      # the hang as an error, not a stuck suite
        code = main(["run", path, "--schedule", "dualpipe", "--json"])
    js = json.loads(capsys.readouterr().out)
    assert code == 0 and 7000 < js["step_time_s"] < 9000
    assert time.perf_counter() - start < 30


def test_several_steps_show_a_progress_bar_when_asked(capsys):
    """Under faults the run simulates each schedule twice (with and without them): a bar counts the
    steps when stderr is a terminal (forced here), and nothing is printed when it is not (the
    default under pytest, as in pipes)."""
    from sim.cli.run import run_scenario
    run_scenario("tiny", ["1f1b", "dualpipe"], {"faults": {"jitter_cv": 0.05}}, progress=True)
    err = capsys.readouterr().err
    assert "steps: 100%" in err and "4/4" in err and "dualpipe done" in err
    run_scenario("tiny", ["1f1b", "dualpipe"])
    assert capsys.readouterr().err == ""
    run_scenario("tiny", ["1f1b"], progress=True)                   # one step: no bar
    assert capsys.readouterr().err == ""


def test_an_moe_model_without_expert_parallelism_runs(tmp_path, capsys):
    """EP 1 has no all-to-all: the computation-to-communication ratio is unbounded (null in the
    JSON, left out of the text and the page), not a division by zero."""
    args = ["run", "tiny", "--model", "qwen3-30b-a3b", "--pp", "1", "--ep", "1", "--dp", "1"]
    assert main(args + ["--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["compute_comm_ratio"] is None and js["step_time_s"] > 0
    assert main(args + ["--out", str(tmp_path / "r")]) == 0
    assert "computation : communication" not in capsys.readouterr().out
    assert (tmp_path / "r" / "index.html").is_file()
