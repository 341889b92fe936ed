"""sim.cli.plan: python -m sim plan end to end on a small cluster."""
import json

from sim.cli import main


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
                 "--seq-len", "131072", "--pp", "4", "--ep", "4", "--node-limit", "1", "--gemm-precision", "bf16",
                 "--memory-policy", "none", "--serial", "--out", str(tmp_path / "p.csv")])
    out = capsys.readouterr().out
    assert code == 1 and "No candidate can run on 16 h800 GPUs" in out
