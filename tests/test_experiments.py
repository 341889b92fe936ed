"""Experiment scripts, plots from CSV, traces and the planner, end to end on small inputs."""
import json

import pandas as pd

from experiments import bubble_vs_microbatches, lesson_exercises, plots
from sim.cli import main
from sim.sweep import grid, run_sweep


def test_bubble_sweep_then_plots(tmp_path):
    pts = grid(pp=(4,), microbatches=(8, 16), schedule=("1f1b", "dualpipe", "zb-h1"))
    df = run_sweep(bubble_vs_microbatches.point, pts, tmp_path / "bubble_vs_microbatches.csv", workers=2,
                   progress=False)
    assert (df["status"] == "ok").all()
    assert df.loc[(df.schedule == "1f1b") & (df.microbatches == 8), "bubble_fraction"].item() == \
        (4 - 1) / (8 + 4 - 1)
    plots.main(["--results", str(tmp_path)])
    assert (tmp_path / "figures" / "bubble_vs_microbatches.png").stat().st_size > 10_000


def test_lesson_table_p4_m8(tmp_path):
    rows = []
    lesson_exercises.exercise_2(rows, tmp_path)
    table = pd.read_csv(tmp_path / "lesson_dualpipe_p4_m8_table.csv")
    rank0 = table[table["rank"] == 0].sort_values("slot")["label"].tolist()
    assert rank0[:8] == ["F0", "F1", "F2", "F4'", "I4'", "W4'", "F5'", "F3"]
    assert set(table["direction"]) == {"up", "down"}
    assert dict((q, v) for _, q, v, _, _ in rows)["makespan"] == 26


def test_chrome_trace_of_simulate(tmp_path):
    path = tmp_path / "t.json"
    assert main(["simulate", "--schedule", "dualpipe", "--pp", "4", "--microbatches", "8", "--trace", str(path)]) == 0
    events = json.loads(path.read_text())["traceEvents"]
    ops = [e for e in events if e["ph"] == "X"]
    from sim.schedules import make_schedule
    assert len(ops) == make_schedule("dualpipe", 4, 8).num_ops() and {e["pid"] for e in ops} == {0, 1, 2, 3}
    assert any(e["name"] == "process_name" for e in events)


def test_planner_ranks_candidates(tmp_path, capsys):
    code = main(["plan", "--gpus", "16", "--model", "tiny-moe", "--topology", "h800-16", "--global-batch", "32",
                 "--seq-len", "256", "--pp", "2,4", "--ep", "4", "--node-limit", "1", "--gemm-precision", "bf16",
                 "--schedules", "1f1b,dualpipe", "--serial", "--json", "--out", str(tmp_path / "plan.csv")])
    js = json.loads(capsys.readouterr().out)
    assert code == 0
    times = [c["step_time_s"] for c in js["candidates"]]
    assert times == sorted(times) and js["recommendation"]["step_time_s"] == times[0]


def test_planner_says_when_nothing_fits(tmp_path, capsys):
    code = main(["plan", "--gpus", "16", "--model", "tiny-moe", "--topology", "h800-16", "--global-batch", "32",
                 "--seq-len", "256", "--pp", "4", "--ep", "4", "--node-limit", "1", "--gemm-precision", "bf16",
                 "--activation-factor", "1e9", "--serial", "--out", str(tmp_path / "p.csv")])
    out = capsys.readouterr().out
    assert code == 1 and "No candidate fits" in out
