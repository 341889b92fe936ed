"""experiments/: sweep scripts, plots from CSV and the lesson table, end to end on small inputs."""
from pathlib import Path

import pandas as pd
import pytest

from experiments import bubble_vs_microbatches, lesson_exercises, plots
from sim.sweep import grid, run_sweep
from sim.training.model.specs import load_scenario


def test_bubble_sweep_then_plots(tmp_path):
    pts = grid(pp=(4,), microbatches=(8, 16), schedule=("1f1b", "dualpipe", "zb-h1", "combined-1f1b"))
    df = run_sweep(bubble_vs_microbatches.point, pts, tmp_path / "bubble_vs_microbatches.csv", workers=2,
                   progress=False)
    assert (df["status"] == "ok").all()
    assert df.loc[(df.schedule == "1f1b") & (df.microbatches == 8), "bubble_fraction"].item() == \
        (4 - 1) / (8 + 4 - 1)
    plots.main(["--results", str(tmp_path)])
    assert (tmp_path / "figures" / "bubble_vs_microbatches.png").stat().st_size > 10_000


def test_plots_only_and_skip_pick_figures_by_their_csv(tmp_path, capsys):
    pd.DataFrame({"schedule": ["1f1b", "1f1b"], "pp": [4, 4], "microbatches": [8, 16], "bubble_fraction": [0.3, 0.2],
                  "status": ["ok", "ok"]}).to_csv(tmp_path / "bubble_vs_microbatches.csv", index=False)
    png = tmp_path / "figures" / "bubble_vs_microbatches.png"
    assert plots.main(["--results", str(tmp_path), "--only", "validation"]) == 0
    assert not png.exists() and "skip validation.csv: not there" in capsys.readouterr().out
    assert plots.main(["--results", str(tmp_path), "--skip", "bubble_vs_microbatches"]) == 0
    out = capsys.readouterr().out
    assert not png.exists() and "skip jobs.csv: not there" in out and "bubble" not in out
    assert plots.main(["--results", str(tmp_path), "--only", "bubble_vs_microbatches"]) == 0
    assert png.exists()
    with pytest.raises(SystemExit) as bad:
        plots.main(["--results", str(tmp_path), "--only", "bubbles"])
    assert bad.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bubbles" in err[0] and "bubble_vs_microbatches" in err[0]


def test_lesson_table_p4_m8(tmp_path):
    rows = []
    lesson_exercises.exercise_2(rows, tmp_path)
    table = pd.read_csv(tmp_path / "lesson_dualpipe_p4_m8_table.csv")
    rank0 = table[table["rank"] == 0].sort_values("slot")["label"].tolist()
    assert rank0[:8] == ["F0", "F1", "F2", "F4'", "I4'", "W4'", "F5'", "F3"]
    assert set(table["direction"]) == {"up", "down"}
    assert dict((q, v) for _, q, v, _, _ in rows)["makespan"] == 26




def test_topology_sweep_grid_and_figure(tmp_path):
    """Every variant runs both communication modes, and the figure draws one bar per schedule and
    mode from such a CSV (values made up here: the figure only reads them)."""
    import pandas as pd

    from experiments import plots, sweep_topology
    pts = sweep_topology.points()
    assert {p["communication"] for p in pts} == {"measured", "live"}
    assert len(pts) == len(sweep_topology.VARIANTS) * len(sweep_topology.SCHEDULES) * 2
    rows = [{**p, "step_time_s": 10.0 + i, "status": "ok"} for i, p in enumerate(pts)]
    pd.DataFrame(rows).to_csv(tmp_path / "sweep_topology.csv", index=False)
    plots.sweep_topology(pd.read_csv(tmp_path / "sweep_topology.csv"), tmp_path)
    assert (tmp_path / "sweep_topology.png").stat().st_size > 10_000


def test_fault_sweep_grid_points_and_figure(tmp_path):
    """Every fault of the grid is a valid FaultSpec, and the figure draws from such a CSV (made-up
    step times: the figure only reads them)."""
    import pandas as pd

    from experiments import plots, sweep_faults
    from sim.training.model.faults import FaultSpec
    pts = sweep_faults.points()
    assert len(pts) == len(sweep_faults.SCHEDULES) * (1 + sum(map(len, sweep_faults.FAULTS.values())))
    for p in pts:
        spec = FaultSpec.of(sweep_faults.faults_of(p["fault"], p["fault_size"]))
        assert (spec is None) == (p["fault"] == "none")
    rows = [{**p, "step_time_s": 10.0 + i, "status": "ok"} for i, p in enumerate(pts)]
    pd.DataFrame(rows).to_csv(tmp_path / "sweep_faults.csv", index=False)
    plots.sweep_faults(pd.read_csv(tmp_path / "sweep_faults.csv"), tmp_path)
    assert (tmp_path / "sweep_faults.png").stat().st_size > 10_000
    partial = pd.DataFrame(rows[:6])                  # a sweep still running: no link-fault rows yet
    plots.sweep_faults(partial, tmp_path)


def test_comm_sms_sweep_figure(tmp_path):
    import pandas as pd

    from experiments import plots, sweep_comm_sms
    pts = sweep_comm_sms.points()
    rows = [{**p, "step_time_s": 10.0 + i, "a2a_dispatch_ms": 2.0, "a2a_combine_ms": 4.0, "status": "ok"}
            for i, p in enumerate(pts)]
    pd.DataFrame(rows).to_csv(tmp_path / "sweep_comm_sms.csv", index=False)
    plots.sweep_comm_sms(pd.read_csv(tmp_path / "sweep_comm_sms.csv"), tmp_path)
    assert (tmp_path / "sweep_comm_sms.png").stat().st_size > 10_000


def test_the_benchmark_figure_from_a_run_of_some_groups_only(tmp_path, recwarn):
    """A benchmark CSV from ``--only moe`` has no all-to-all or schedule rows: the figure is still
    drawn, each empty panel saying so, without matplotlib's warning about an empty legend."""
    from tools.benchmark import plot_scaling
    csv = tmp_path / "benchmark.csv"
    pd.DataFrame([{"case": "DeepSeek-V3 step, dualpipe, full mode", "gpus": 2048, "wall_s": 7.0, "group": "moe"}]
                 ).to_csv(csv, index=False)
    out = plot_scaling(csv, tmp_path / "scaling.png")
    assert out.stat().st_size > 10_000
    assert not [w for w in recwarn if "legend" in str(w.message)]
    # --only cli: not even a gpus column (it stopped with a KeyError until 2026-12-01)
    pd.DataFrame([{"case": "python -m sim schedule dualpipe (process)", "P": 8, "M": 16, "wall_s": 0.3,
                   "group": "cli"}]).to_csv(csv, index=False)
    assert plot_scaling(csv, tmp_path / "scaling.png").stat().st_size > 10_000


def test_the_scale_benchmark_clusters_and_figure(tmp_path):
    """Each scale cluster is a fat tree of its GPUs whose radix holds its nodes (r^2/2 hosts a
    plane); the figure draws time and memory against GPUs from the CSV, and is left out when the CSV
    has no scale row; the process-tree sampler sees a child's memory."""
    import sys

    import yaml

    from tools.benchmark import SCALES, plot_scale, scale_topology, tree_peak
    for gpus, nodes, radix in SCALES:
        assert nodes * 8 == gpus and radix * radix // 2 >= nodes
    spec = yaml.safe_load(scale_topology(tmp_path, 2048, 64).read_text())
    assert spec["nodes"] * spec["gpus_per_node"] == 16_384 and spec["switch_radix"] == 64
    csv = tmp_path / "benchmark.csv"
    rows = [{"case": f"DeepSeek-V3 step, dualpipe, {m} mode, {g:,} GPUs", "gpus": g, "wall_s": w, "peak_tree_mb": mb,
             "group": "scale"} for m, g, w, mb in (("representative", 2048, 3, 300), ("representative", 32768, 40, 1700),
                                                 ("full", 2048, 4, 320), ("full", 32768, 90, 2000))]
    pd.DataFrame(rows).to_csv(csv, index=False)
    assert plot_scale(csv, tmp_path / "scale.png").stat().st_size > 10_000
    pd.DataFrame([{"case": "python -m sim schedule dualpipe (process)", "wall_s": 0.3}]).to_csv(csv, index=False)
    assert plot_scale(csv, tmp_path / "none.png") is None
    status, wall, peak_mb = tree_peak([sys.executable, "-c", "import time; x = bytearray(200 << 20); time.sleep(1)"])
    assert status == 0 and wall >= 1 and peak_mb > 200


def test_the_benchmark_refuses_bad_paths_in_one_line(tmp_path, capsys):
    """Checked before any case runs (a run takes minutes): an output under a file, and --plot of a
    CSV that is not there (both were tracebacks until 2026-12-01)."""
    from tools.benchmark import main
    (tmp_path / "file").write_text("x")
    assert main(["--only", "cli", "--out", str(tmp_path / "file" / "b.csv")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert main(["--plot", "--out", str(tmp_path / "none.csv")]) == 2
    assert "none.csv: no benchmark CSV there" in capsys.readouterr().err


def test_sweeps_take_a_users_scenario_and_change_only_their_own_axis(tmp_path, capsys):
    """sweep_ep --scenario: every point carries the scenario; EP is the one axis that moves (PP,
    DP and micro-batches stay the scenario's), so an EP that does not divide a stage's GPUs or the
    routed experts is skipped with one note naming the rule, not run in another layout; the
    figure draws what does not fit HBM hollow."""
    from experiments import plots, sweep_ep
    out = tmp_path / "sweep"
    assert sweep_ep.sweep_main("sweep_ep", sweep_ep.point, lambda: grid(ep=(4, 8, 3), schedule=("1f1b", "dualpipe")),
                               "doc", ["--out", str(out), "--serial", "--no-progress", "--scenario", "tiny"],
                               scenario="deepseek-v3", skip=sweep_ep.skip) == 0
    err = capsys.readouterr().err
    assert "note: skipped 2 points: EP 8 does not divide the 4 GPUs of a stage (TP x CP x DP) of tiny" in err
    assert "note: skipped 2 points: EP 3 does not divide the 4 GPUs" in err
    df = pd.read_csv(out / "sweep_ep.csv")
    assert list(df["scenario"]) == ["tiny", "tiny"] and list(df["status"]) == ["ok", "ok"]
    assert (df.loc[0, "pp"], df.loc[0, "dp"], df.loc[0, "microbatches"]) == (4, 4, 8)
    assert sweep_ep.skip(load_scenario("tiny", dp=12), {"ep": 3, "scenario": "t"}) == (
        "EP 3 does not divide the 16 routed experts of t")
    plots.sweep_ep(df, tmp_path)
    assert (tmp_path / "sweep_ep.png").stat().st_size > 10_000


@pytest.mark.parametrize("form", ["module", "file"])
def test_the_scripts_run_from_any_folder(tmp_path, form):
    """``python -m experiments.sweep_ep`` and ``python /path/to/experiments/sweep_ep.py`` work from a
    folder outside the checkout (the package is installed with the simulator)."""
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parents[1] / "experiments" / "sweep_ep.py"
    argv = ["-m", "experiments.sweep_ep"] if form == "module" else [str(script)]
    done = subprocess.run([sys.executable, *argv, "--help"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "EP size 8 to 256" in done.stdout, done.stderr


def test_an_unknown_sweep_scenario_is_one_line_before_any_point(tmp_path, capsys):
    from experiments import sweep_ep
    rc = sweep_ep.sweep_main("sweep_ep", sweep_ep.point, sweep_ep.points, "doc",
                             ["--out", str(tmp_path), "--serial", "--scenario", "nope.yaml"], scenario="deepseek-v3")
    assert rc == 2 and "unknown scenario 'nope.yaml'" in capsys.readouterr().err
    assert not (tmp_path / "sweep_ep.csv").exists()


def test_the_bubble_caption_holds_every_schedules_bubble_falls_as_m_grows():
    """The results page says of bubble_vs_microbatches.png: every schedule's bubble falls as M grows."""
    from experiments import bubble_vs_microbatches as sweep
    from experiments.results_page import SECTIONS
    captions = {name: text for _, _, figures, _ in SECTIONS for name, text in figures}
    assert "every schedule's bubble falls as M grows" in captions["bubble_vs_microbatches.png"]
    for p in (8, 16):
        for schedule in sorted({pt["schedule"] for pt in sweep.points()}):
            bubbles = []
            for m in sweep.MICROBATCHES:
                try:
                    bubbles.append(sweep.point({"pp": p, "microbatches": m, "schedule": schedule})["bubble_fraction"])
                except Exception:          # noqa: BLE001 - a shape the schedule refuses is no point of the figure
                    continue
            assert all(b <= a + 1e-12 for a, b in zip(bubbles, bubbles[1:])), (schedule, p, bubbles)


def test_the_benchmarks_calibration_input_is_where_it_reads_it():
    """The calibrate case reads DeepEP's table from the research scripts' profiles (it looked next
    to tools/benchmark.py after the move from experiments/, and failed there)."""
    from tools.benchmark import DEEPEP_PROFILE
    assert DEEPEP_PROFILE.is_file() and DEEPEP_PROFILE.parent.name == "profiles"


def test_a_failing_benchmark_case_is_none_not_a_hang():
    """A case that raises in its process (here int('x')) leaves no row: run_case says so (None)
    instead of waiting forever for one (the calibrate case's missing file hung the whole run)."""
    from tools.benchmark import run_case
    assert run_case(int, ("x",)) is None


def test_the_tp_sweep_keeps_gpus_and_batch_and_draws(tmp_path):
    """sweep_tp: DP = GPUs / (TP x PP) and micro-batches = the batch / DP; a layout that does not
    divide the GPUs is an error row naming it; the figure is drawn from the CSV."""
    from experiments import plots, sweep_tp
    from sim.sweep import grid
    out = tmp_path / "out"
    assert sweep_tp.sweep_main("sweep_tp", sweep_tp.point, lambda: grid(tp=(2, 4), pp=(8, 32)), "doc",
                               argv=["--out", str(out), "--serial", "--no-progress"], scenario="llama3-70b") == 0
    df = pd.read_csv(out / "sweep_tp.csv")
    ok = df[df["status"] == "ok"]
    assert set(zip(ok["tp"], ok["pp"])) == {(2, 8), (4, 8)}
    assert (ok["dp"] * ok["tp"] * ok["pp"] == 64).all() and (ok["dp"] * ok["microbatches"] == 128).all()
    assert (ok.set_index("tp")["mean_tp_comm_s"][4] > ok.set_index("tp")["mean_tp_comm_s"][2])
    refused = df[df["pp"] == 32].set_index("tp")["error"]
    assert "TP 4 x CP 1 x PP 32 does not divide the scenario's 64 GPUs" in refused[4]
    assert "cannot be split over 160 pipeline stages" in refused[2]         # DP 1: 80 layers, 32 x 5 chunks
    plots.sweep_tp(df, tmp_path)
    assert (tmp_path / "sweep_tp.png").stat().st_size > 10_000


def test_the_tp_sweep_runs_an_moe_scenario_with_sequence_parallelism():
    """Megatron-Core needs sequence parallelism for an MoE model with TP: the sweep turns it on there."""
    from experiments import sweep_tp
    from sim.training.model.specs import load_scenario
    base = load_scenario("tiny")
    assert not base.sequence_parallel
    assert sweep_tp.layout(base, 2, 2)["sequence_parallel"] and not sweep_tp.layout(base, 1, 2)["sequence_parallel"]
    row = sweep_tp.point({"scenario": "tiny", "tp": 2, "pp": 2})
    assert row["mean_tp_comm_s"] > 0


def test_two_jobs_sharing_a_cluster_resume_draw_and_reach_the_page(tmp_path, capsys):
    """experiments/jobs_sharing.py on tiny jobs and the thin spine: a row per placement and job,
    the shared links, a second run keeps both placements, other settings run again; the figure
    and the results page's jobs section read the CSVs."""
    from experiments import jobs_sharing, plots, results_page
    args = ["--scenario", "tiny", "--topology", str(Path(__file__).parent / "data" / "thin-8x8.yaml"),
            "--arrive", "0.0003", "--out", str(tmp_path)]
    assert jobs_sharing.main(args) == 0
    rows = pd.read_csv(tmp_path / "jobs.csv")
    assert list(zip(rows.policy, rows.job)) == [("packed", "A"), ("packed", "B"), ("interleaved", "A"),
                                                ("interleaved", "B")]
    assert (rows.steps_shared == 2).all() and list(rows.arrive_s) == [0.0, 0.0003, 0.0, 0.0003]
    inter = rows[rows.policy == "interleaved"]
    assert (inter.slowdown_pct > 0).all()                     # the thin spine, shared
    links = pd.read_csv(tmp_path / "jobs_shared_links.csv")
    assert set(links.policy) == {"interleaved"} and {"bytes_A", "bytes_B", "mean_util"} <= set(links.columns)
    capsys.readouterr()
    assert jobs_sharing.main(args) == 0
    assert capsys.readouterr().out.count("kept from") == 2
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "jobs.csv"), rows)
    assert jobs_sharing.main([*args, "--steps", "1"]) == 0
    assert "kept from" not in capsys.readouterr().out
    assert (pd.read_csv(tmp_path / "jobs.csv").steps_shared == 1).all()
    plots.main(["--results", str(tmp_path)])
    assert (tmp_path / "figures" / "jobs.png").is_file()
    results_page.main(["--results", str(tmp_path)])
    page = (tmp_path / "index.html").read_text()
    assert '<section id="jobs">' in page and "jobs.png" in page and "jobs_shared_links.csv" in page


def test_the_jobs_study_reads_its_default_files_from_the_checkout_whatever_the_folder(tmp_path, monkeypatch):
    """Its scenario and topology are paths inside the checkout, not relative to where it is run
    (from another folder a relative topology path was a missing file)."""
    from experiments import jobs_sharing
    from sim.training.model.specs import load_scenario
    monkeypatch.chdir(tmp_path)
    for path in (jobs_sharing.SCENARIO, jobs_sharing.TOPOLOGY):
        assert Path(path).is_absolute() and Path(path).is_file()
    assert load_scenario(jobs_sharing.SCENARIO, topology=jobs_sharing.TOPOLOGY).gpus == 1024


def test_the_docs_scratch_folder_holds_the_files_commands_name_from_the_root():
    import shutil

    from tools.docs_commands import scratch
    folder = scratch()
    try:
        assert (folder / "topologies" / "variants" / "h800-2048-one-plane-oversub4.yaml").is_file()
        assert (folder / "examples" / "jobs" / "deepseek-v3-1024.yaml").is_file()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
