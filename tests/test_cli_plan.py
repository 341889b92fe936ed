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
                 "--seq-len", "4194304", "--pp", "4", "--ep", "4", "--cp", "1", "--tp", "1", "--node-limit", "1", "--gemm-precision", "bf16",
                 "--memory-policy", "none", "--serial", "--out", str(tmp_path / "p.csv")])
    out = capsys.readouterr().out
    assert code == 1 and "No candidate can run on 16 h800 GPUs" in out


def test_a_plan_prints_its_recipe_and_warns_of_idle_gpus(tmp_path, capsys, monkeypatch):
    """8 of h800-16's 16 GPUs, with run's defaults (BF16, no recomputation) and the topology's GPU;
    without --out it writes nothing where it runs."""
    monkeypatch.chdir(tmp_path)
    code = main(["plan", "--gpus", "8", "--model", "tiny-moe", "--topology", "h800-16", "--global-batch", "16",
                 "--seq-len", "256", "--pp", "2", "--ep", "4", "--node-limit", "1", "--schedules", "1f1b", "--serial"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("plan: tiny-moe on 8 h800 of h800-16; global batch 16 sequences x 256 tokens")
    assert "GEMMs bf16; memory policy none, ZeRO-1" in out
    assert "warning: the plan uses 8 of the 16 GPUs of topology 'h800-16'" in out
    assert list(tmp_path.iterdir()) == []


def test_a_plan_for_a_gpu_the_cluster_does_not_have_is_warned(tmp_path, capsys):
    """``plan --scenario tiny --topology h100-1024`` plans tiny's H800s on an H100 cluster: said once
    on stderr, naming both GPUs and the flag that picks the cluster's own."""
    code = main(["plan", "--gpus", "16", "--scenario", "tiny", "--topology", "h100-1024", "--pp", "4",
                 "--out", str(tmp_path / "plan.csv")])
    err = capsys.readouterr().err
    assert code in (0, 1)
    assert [line for line in err.splitlines() if line.startswith("warning: gpu")] == [
        "warning: gpu h800 is not the GPU of topology 'h100-1024' (h100): simulating h800's compute and memory "
        "on that cluster's network (--gpu h100 for its own)"]
