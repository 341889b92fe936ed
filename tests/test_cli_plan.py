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
                 "--seq-len", "2097152", "--pp", "4", "--ep", "4", "--cp", "1", "--tp", "1", "--node-limit", "1", "--gemm-precision", "bf16",
                 "--memory-policy", "none", "--serial", "--out", str(tmp_path / "p.csv")])
    out = capsys.readouterr().out
    assert code == 1 and "No candidate can run on 16 h800 GPUs" in out


def test_a_plan_prints_its_recipe_and_warns_of_idle_gpus(tmp_path, capsys, monkeypatch):
    """8 of h800-16's 16 GPUs, the recipe searched and the topology's GPU; without --out it
    writes nothing where it runs."""
    monkeypatch.chdir(tmp_path)
    code = main(["plan", "--gpus", "8", "--model", "tiny-moe", "--topology", "h800-16", "--global-batch", "16",
                 "--seq-len", "256", "--pp", "2", "--ep", "4", "--node-limit", "1", "--schedules", "1f1b", "--serial"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("plan: tiny-moe on 8 h800 of h800-16; global batch 16 sequences x 256 tokens")
    assert ("micro-batch size searched; GEMMs searched; recomputation searched; ZeRO stage searched; expert TP "
            "searched; TP-communication overlap searched") in out
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


def test_a_plan_searches_the_recipe_and_prints_a_command_that_reproduces_its_pick(tmp_path, capsys):
    """The recipe searched (micro-batch size, precision, recomputation, ZeRO): each row names its
    recipe, the pick's recipe is printed, and its `run` command (inline, then of the file
    --write-scenario wrote) simulates the same step."""
    args = ["plan", "--gpus", "16", "--model", "tiny-moe", "--topology", "h800-16", "--global-batch", "32",
            "--seq-len", "256", "--pp", "2", "--ep", "4", "--node-limit", "1", "--schedules", "1f1b,zb-h1", "--serial",
            "--tp", "1", "--head-cuts", "0", "--out", str(tmp_path / "plan.csv")]
    assert main(args + ["--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    rows = js["candidates"]
    assert {r["gemm_precision"] for r in rows} <= {"bf16", "fp8"} and {r["microbatch_size"] for r in rows} <= {1, 2}
    assert len({(r["gemm_precision"], r["microbatch_size"], r["schedule"]) for r in rows}) > 2
    search = js["search"]
    assert search["simulated"] <= search["candidates"] and search["layouts"] == 2     # PP 2 x two schedules
    best = js["recommendation"]
    command = js["run_command"]
    assert command.startswith("python -m sim run '{model: tiny-moe, gpu: h800, topology: h800-16")
    import shlex
    scenario = shlex.split(command)[4]
    assert main(["run", scenario, "--json"]) == 0
    ran = json.loads(capsys.readouterr().out)
    assert ran["schedule"] == best["schedule"] and ran["step_time_s"] == best["step_time_s"]

    path = tmp_path / "pick.yaml"
    assert main(args + ["--write-scenario", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"Run it: python -m sim run {path}" in out and "Recipe: micro-batch" in out and "Search: screened" in out
    # beside its ranking, how often the model kept the measured order of published runs like it (an MoE
    # plan on Hopper: the Megatron-MoE ModelZoo's Qwen3-235B layouts on H100), and the JSON says the same
    from sim.training.trust import ranking_agreement
    agreement = ranking_agreement("Hopper", True)
    assert f"Ranking: {agreement.line()}." in out and "(MoE on Hopper)" in out
    assert js["ranking_agreement"] == agreement.to_json()
    assert main(["run", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == best["step_time_s"]


def test_nothing_fits_with_any_recipe_names_the_nearest(tmp_path, capsys):
    """DeepSeek-V3's 671B parameters on 16 GPUs: no recipe fits (ZeRO-3 still keeps 1/16 of them
    and their optimizer states on each)."""
    code = main(["plan", "--gpus", "16", "--model", "deepseek-v3", "--topology", "h800-16", "--pp", "4", "--ep", "4",
                 "--tp", "1", "--schedules", "1f1b", "--head-cuts", "0", "--serial", "--out", str(tmp_path / "p.csv")])
    out = capsys.readouterr().out
    assert code == 1 and "with any recipe tried" in out and "every recipe was tried" in out
    nearest = next(line for line in out.splitlines() if line.startswith("Nearest: "))
    assert "with recomputation full" in nearest and "GB more than the 85.52 GB HBM" in nearest


def test_a_screened_plan_picks_what_simulating_every_candidate_picks(tmp_path, capsys):
    """The default screen (the analytical network's lower bound) against ``--screen none`` on a
    small plan: the same pick at the same step, fewer candidates simulated, the screens kept in
    a CSV beside --out."""
    args = ["plan", "--gpus", "16", "--model", "tiny-moe", "--topology", "h800-16", "--global-batch", "32",
            "--seq-len", "256", "--pp", "2,4", "--ep", "4", "--node-limit", "1", "--schedules", "1f1b,zb-h1,dualpipe",
            "--serial", "--json"]
    assert main(args + ["--out", str(tmp_path / "a.csv")]) == 0
    screened = json.loads(capsys.readouterr().out)
    assert main(args + ["--out", str(tmp_path / "b.csv"), "--screen", "none"]) == 0
    full = json.loads(capsys.readouterr().out)
    fields = ("schedule", "tp", "pp", "ep", "microbatch_size", "gemm_precision", "memory_policy", "zero_stage",
              "step_time_s")
    assert [screened["recommendation"][f] for f in fields] == [full["recommendation"][f] for f in fields]
    assert screened["search"]["screened"] >= full["search"]["simulated"] > screened["search"]["simulated"]
    assert full["search"]["screened"] == 0
    assert (tmp_path / "a-screen.csv").is_file() and not (tmp_path / "b-screen.csv").exists()


def test_a_plan_under_skewed_routing_says_it_has_no_screen(tmp_path, capsys):
    """The screen bounds a step only when every replica runs alike: with a scenario's routing skew
    the plan says so and simulates its candidates."""
    scenario = tmp_path / "skewed.yaml"
    scenario.write_text("model: tiny-moe\ngpu: h800\ntopology: h800-16\npp: 2\nep: 4\ndp: 8\nschedule: 1f1b\n"
                        "microbatches: 4\nseq_len: 256\nnode_limit: 1\nrouting_skew: 0.5\n")
    code = main(["plan", "--gpus", "16", "--scenario", str(scenario), "--pp", "2", "--ep", "4", "--schedules", "1f1b",
                 "--gemm-precision", "bf16", "--tp", "1", "--serial", "--out", str(tmp_path / "p.csv")])
    out = capsys.readouterr().out
    assert code == 0
    assert "warning: no screen: the analytical network's bound does not hold under routing skew 0.5" in out
    assert "Search: simulated" in out and not (tmp_path / "p-screen.csv").exists()
