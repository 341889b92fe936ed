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


def test_a_scenario_file_reads_exponent_numbers_and_a_long_step_ends(tmp_path, capsys):
    """``seq_len: 1e7`` is a number (YAML 1.2; PyYAML alone reads it as text and the field refused
    it), and the step it makes, about 7,800 s in tiny's FLOPs model, ends: its pipeline sends' last bytes, due sooner than
    the float clock can tick at that hour, once re-armed a timer at the same instant forever."""
    import time

    from sim.checks import yaml_load
    from sim.limits import deadline
    from sim.moe.specs import PRESETS
    tiny = yaml_load((PRESETS / "scenarios.yaml").read_text())["tiny"]
    text = "".join(f"{k}: {v}\n" for k, v in tiny.items() if k != "seq_len") + "seq_len: 1e7\n"
    (tmp_path / "long.yaml").write_text(text)
    start = time.perf_counter()
    with deadline(60):                      # the hang as an error, not a stuck suite
        code = main(["run", str(tmp_path / "long.yaml"), "--schedule", "dualpipe", "--json"])
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
