"""sim.cli.pipeline: python -m sim schedule | simulate | compare: JSON contracts, text output, clean errors."""
import json

import pandas as pd
import pytest

from sim.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_schedule_json_contract(capsys):
    code, out, _ = run(capsys, "schedule", "dualpipev", "--pp", "4", "--microbatches", "8", "--json")
    assert code == 0
    js = json.loads(out)
    assert list(js) == ["schedule", "pp", "num_stages", "microbatches", "placement", "ranks"]
    assert js["schedule"] == "dualpipev" and js["pp"] == 4 and js["num_stages"] == 8 and js["microbatches"] == 8
    assert sorted(js["ranks"]) == ["0", "1", "2", "3"]
    kinds = {op["kind"] for ops in js["ranks"].values() for op in ops}
    assert kinds == {"F", "I", "W", "B", "FB"}
    fb = next(op for op in js["ranks"]["0"] if op["kind"] == "FB")
    assert set(fb) == {"kind", "f", "b"} and set(fb["f"]) == {"mb", "stage"}


def test_schedule_grid(capsys):
    code, out, _ = run(capsys, "schedule", "dualpipe", "--pp", "4", "--microbatches", "8")
    assert code == 0
    row0 = next(line for line in out.splitlines() if line.startswith("rank  0"))
    # F0 F1 F2 F4' I4' W4' F5' then [F3 & B5'] as three slots
    assert row0.split("|")[1].split()[:10] == ["F0", "F1", "F2", "F4'", "I4'", "W4'", "F5'", "F3", "B5'", "B5'"]


def test_simulate_json_contract(capsys):
    code, out, _ = run(capsys, "simulate", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8",
                       "--cost", "F=1,I=1,W=1", "--json")
    assert code == 0
    js = json.loads(out)
    assert set(js) == {"makespan", "bubble_fraction", "ranks"}
    assert js["makespan"] == 33.0
    assert js["ranks"][0] == {"rank": 0, "busy": 24.0, "idle": 9.0, "utilization": 24 / 33, "peak_activations": 4}


def test_simulate_csv_and_plot(tmp_path, capsys):
    csv, png = tmp_path / "ev.csv", tmp_path / "t.png"
    code, out, _ = run(capsys, "simulate", "--schedule", "zb-h1", "--pp", "4", "--microbatches", "8",
                       "--csv", str(csv), "--plot", str(png))
    assert code == 0 and "bubble fraction" in out
    df = pd.read_csv(csv)
    assert {"rank", "kind", "mb", "stage", "start", "end"} <= set(df.columns)
    assert len(df) == 4 * 8 * 3
    assert png.stat().st_size > 10_000


def test_compare_lists_every_schedule(capsys):
    code, out, _ = run(capsys, "compare", "--pp", "8", "--microbatches", "16")
    assert code == 0
    for name in ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "dualpipe", "dualpipev", "chimera"):
        assert name in out
    code, out, _ = run(capsys, "compare", "--pp", "8", "--microbatches", "16", "--json")
    rows = {r["schedule"]: r for r in json.loads(out)}
    assert rows["dualpipe"]["parameter_copies"] == 2
    assert rows["1f1b"]["bubble_fraction"] == pytest.approx(21 / 69, abs=1e-4)


@pytest.mark.parametrize("argv,pattern", [
    (["schedule", "dualpipe", "--pp", "5", "--microbatches", "10"], "even P"),
    (["schedule", "nope", "--pp", "4", "--microbatches", "8"], "valid schedules"),
    (["simulate", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--cost", "F=0"], r"cost F must be a finite number in (0, "),
    (["simulate", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--cost", "X=1"], "NAME one of F, I, W"),
    (["simulate", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--cost", "F=abc"], "not a number"),
])
def test_errors_are_one_clean_line(capsys, argv, pattern):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert err.startswith("error: ") and pattern in err and "Traceback" not in err


