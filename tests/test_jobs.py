"""Several jobs on one cluster: one job is the step itself, disjoint jobs run as alone, a thin
spine slows both, and the jobs command."""
import json
from pathlib import Path

import numpy as np
import pytest

from sim.checks import InputError
from sim.cli import main
from sim.jobs import StepJob, run_jobs
from sim.training.model.specs import load_scenario
from sim.training.scenario import Scenario
from sim.training.step import MoEStep

THIN = str(Path(__file__).parent / "data" / "thin-8x8.yaml")     # 8 nodes, 3 a leaf, 3:1 spine


def tiny(**changes):
    return load_scenario("tiny", communication="live", **changes)


def test_one_job_on_the_whole_cluster_is_the_step_itself():
    """The step as a job on a fresh cluster of all its GPUs, in order: the same result as
    simulate(), to the last digit."""
    run = load_scenario("tiny")
    result = run_jobs([StepJob("A", run)])
    alone = MoEStep(Scenario(run)).simulate()
    row = result.jobs.iloc[0]
    assert row.alone_s == row.shared_s == alone.step_time_s
    assert row.exposed_comm_alone_s == alone.exposed_comm_s and result.links.empty


def test_two_jobs_on_disjoint_leaves_run_exactly_as_alone():
    """Two tiny jobs packed on h800-64 (rail-optimised, non-blocking): their traffic shares no
    link, so each runs as it runs alone."""
    result = run_jobs([StepJob("A", tiny(topology="h800-64")), StepJob("B", tiny(topology="h800-64"))], "packed")
    assert (result.jobs.alone_s == result.jobs.shared_s).all() and (result.jobs.slowdown_pct == 0).all()
    assert result.links.empty
    assert list(result.jobs.placement) == ["nodes 0-1", "nodes 2-3"]


def test_two_jobs_across_a_thin_spine_slow_each_other():
    """Interleaved on a 3:1 fat tree (nodes 0 and 4 for A, 1 and 5 for B, each pair across two
    leaves): both jobs' pipeline sends and data-parallel rings cross the same uplinks, and both
    are slower than alone; each shared link carries bytes of both."""
    result = run_jobs([StepJob("A", tiny(topology=THIN)), StepJob("B", tiny(topology=THIN))], "interleaved")
    assert (result.jobs.shared_s > result.jobs.alone_s).all() and (result.jobs.slowdown_pct > 1).all()
    assert len(result.links) > 0 and (result.links.bytes_A > 0).all() and (result.links.bytes_B > 0).all()
    assert (result.links.bytes == result.links.bytes_A + result.links.bytes_B).all()
    assert result.links.bytes.is_monotonic_decreasing


def test_the_analytical_network_lets_no_job_slow_another():
    """The same thin spine on the analytical backend (no contention): shared is alone."""
    jobs = [StepJob(n, tiny(topology=THIN, network="analytical")) for n in "AB"]
    result = run_jobs(jobs, "interleaved")
    assert (result.jobs.alone_s == result.jobs.shared_s).all() and result.backend == "analytical"


def test_jobs_bad_input_is_one_line():
    with pytest.raises(InputError, match=r"^the jobs need 32 GPUs together \(A 16, B 16\); the cluster has 16$"):
        run_jobs([StepJob("A", tiny()), StepJob("B", tiny())])
    with pytest.raises(InputError, match="job 'B': topology 'h800-64', but job 'A' has 'h800-16'"):
        run_jobs([StepJob("A", tiny()), StepJob("B", tiny(topology="h800-64"))])
    with pytest.raises(InputError, match="job 'B': network 'analytical', but job 'A' has 'maxmin'"):
        run_jobs([StepJob("A", tiny(topology="h800-64")), StepJob("B", tiny(topology="h800-64", network="analytical"))])
    with pytest.raises(InputError, match="job names must differ"):
        run_jobs([StepJob("A", tiny(topology="h800-64")), StepJob("A", tiny(topology="h800-64"))])
    with pytest.raises(InputError, match="job 'A' needs 16 GPUs, its list names 8"):
        run_jobs([StepJob("A", tiny())], {"A": list(range(8))})


def test_the_jobs_command(tmp_path, capsys):
    out = tmp_path / "jobs"
    assert main(["jobs", "tiny", "tiny", "--topology", THIN, "--placement", "interleaved", "--json",
                 "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [j["job"] for j in printed["jobs"]] == ["A", "B"] and printed["placement"] == "interleaved"
    assert all(j["slowdown_pct"] > 1 for j in printed["jobs"]) and printed["shared_link_count"] > 0
    assert (out / "jobs.csv").is_file() and (out / "jobs_shared_links.csv").is_file() and (out / "jobs.png").is_file()
    assert main(["jobs", "tiny", "tiny", "--topology", "h800-64", "--gpus", "16-31", "--gpus", "0-15"]) == 0
    text = capsys.readouterr().out
    assert "nodes 2-3" in text and "nodes 0-1" in text and "met on no link" in text
    assert main(["jobs", "tiny", "--gpus", "0-15", "--gpus", "0-15"]) == 2
    assert "--gpus: give one per job (1), got 2" in capsys.readouterr().err


def test_a_jobs_file_names_its_jobs_their_gpus_and_the_cluster(tmp_path, capsys):
    """A jobs file: scenarios relative to it, names, explicit GPUs; the command reads it whole."""
    (tmp_path / "thin.yaml").write_text(Path(THIN).read_text())
    spec = tmp_path / "jobs.yaml"
    spec.write_text("topology: thin.yaml\njobs:\n  - scenario: tiny\n    name: left\n    gpus: 0-15\n"
                    "  - scenario: tiny\n    name: right\n    gpus: 32-39,40-47\n")
    from sim.jobs import load_jobs_file
    jobs, placement, _ = load_jobs_file(str(spec))
    assert [j.name for j in jobs] == ["left", "right"] and placement == {"left": list(range(16)),
                                                                      "right": list(range(32, 48))}
    assert jobs[0].run.topology == str(tmp_path / "thin.yaml") and jobs[0].run.communication == "live"
    trace = tmp_path / "jobs.json"
    assert main(["jobs", str(spec), "--json", "--trace", str(trace)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [(j["job"], j["scenario"], j["placement"]) for j in printed["jobs"]] == [
        ("left", "tiny", "nodes 0-1"), ("right", "tiny", "nodes 4-5")]
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert {"left: rank 0", "right: rank 3"} <= names
    pids = {e["pid"] for e in events if e.get("ph") == "X"}
    assert pids and all(1000 <= p < 3000 for p in pids) and {p // 1000 for p in pids} == {1, 2}


@pytest.mark.parametrize("text,pattern", [
    ("jobs: []\n", "a non-empty list under 'jobs:'"),
    ("jobz:\n  - scenario: tiny\n", "a non-empty list under 'jobs:'"),
    ("jobs:\n  - scenario: tiny\nplacment: packed\n", "unknown key 'placment'; a jobs file takes topology, placement"),
    ("jobs:\n  - scenaro: tiny\n", r"jobs\[0\]: each job is a mapping with a 'scenario'"),
    ("jobs:\n  - scenario: tiny\n    gpu: 0-15\n", r"jobs\[0\]: unknown key 'gpu'; a job takes scenario, name, gpus"),
    ("jobs:\n  - scenario: tiny\n    gpus: 0-15\n  - scenario: tiny\n", "give gpus for every job or for none"),
    ("jobs:\n  - scenario: tiny\n    gpus: a-b\n", r"jobs\[0\]: gpus: cannot read 'a-b'"),
])
def test_a_bad_jobs_file_is_one_line(tmp_path, text, pattern):
    from sim.jobs import load_jobs_file
    spec = tmp_path / "jobs.yaml"
    spec.write_text(text)
    with pytest.raises(InputError, match=pattern):
        load_jobs_file(str(spec))


def test_a_job_that_fails_keeps_the_others_results(monkeypatch):
    """Job B's run raises: its row says why, job A's figures are there."""
    jobs = [StepJob("A", tiny(topology="h800-64")), StepJob("B", tiny(topology="h800-64"))]
    original = StepJob.start

    def start(self, cluster, allocation, link_timeline=False, length=None, arrive_s=0.0):
        if self.name == "B":
            raise RuntimeError("a broken job")
        return original(self, cluster, allocation, link_timeline, length, arrive_s)
    monkeypatch.setattr(StepJob, "start", start)
    result = run_jobs(jobs)
    a, b = result.jobs.iloc[0], result.jobs.iloc[1]
    assert a.alone_s > 0 and a.shared_s == a.alone_s and a.error == ""
    assert b.error == "alone: RuntimeError: a broken job" and np.isnan(b.alone_s)


def test_the_example_jobs_file_reads_as_two_half_clusters():
    """examples/jobs/two-deepseek-v3.yaml (docs/model.md): two DeepSeek-V3 jobs of 1,024 GPUs on
    h800-2048, interleaved, live all-to-alls; placed, they take the even and the odd nodes."""
    from sim.jobs import load_jobs_file, place
    example = Path(__file__).parent.parent / "examples" / "jobs" / "two-deepseek-v3.yaml"
    jobs, placement, _ = load_jobs_file(str(example))
    assert placement == "interleaved" and [j.gpus_needed for j in jobs] == [1024, 1024]
    assert all(j.run.topology == "h800-2048" and j.run.communication == "live" for j in jobs)
    allocations = place(jobs, placement)
    assert allocations["A"].nodes == tuple(range(0, 256, 2)) and allocations["B"].nodes == tuple(range(1, 256, 2))


def test_the_text_the_timeline_and_the_mode_reach_the_jobs():
    """jobs_text shows the shared links in GB per job; link_timeline is recorded by the first job
    of the shared run only; each job runs in its own mode."""
    from sim.jobs import jobs_text
    jobs = [StepJob("A", tiny(topology=THIN), "full"), StepJob("B", tiny(topology=THIN))]
    result = run_jobs(jobs, "interleaved", link_timeline=True)
    text = jobs_text(result, top=2)
    assert "GB_A" in text and "GB_B" in text and result.links.iloc[0]["link"] in text
    assert result.results["A"][0].link_timeline is not None and result.results["B"][0].link_timeline is None
    assert result.results["A"][0].mode == "full" and result.results["B"][0].mode == "representative"
    plain = run_jobs([StepJob("A", tiny(topology=THIN)), StepJob("B", tiny(topology=THIN))], "interleaved")
    assert plain.results["A"][0].link_timeline is None


def test_a_job_whose_kernels_scale_the_links_otherwise_is_refused():
    """A cluster whose link table the job's communication kernels would not give (NVLink at half
    speed here): one line, before anything runs."""
    from sim.cluster import Cluster
    from sim.training.scenario import Scenario
    sc = Scenario(tiny())
    cluster = Cluster(sc.links.scaled({"nvlink": 0.5}), 8)
    job = StepJob("A", tiny())
    with pytest.raises(InputError, match=r"^job 'A': its communication kernels \(ideal\) scale the links' "
                                         r"bandwidths otherwise than the cluster's; give every job the same kernels$"):
        job.start(cluster, cluster.allocate("A", 16))


def test_steps_back_to_back_each_start_when_the_last_ended():
    """Three steps of one job alone: each starts when the last ended and takes the one-step time
    (nothing else on the network: the steps repeat, up to the rounding of the later clock)."""
    from sim.jobs import JobLength
    one = run_jobs([StepJob("A", tiny())]).results["A"]
    three = run_jobs([StepJob("A", tiny())], length=JobLength(3))
    steps = three.results["A"]
    assert len(one) == 1 and len(steps) == 3 and steps[0].start_s == 0.0
    assert steps[0].step_time_s == one[0].step_time_s
    for before, after in zip(steps, steps[1:]):
        assert after.start_s == pytest.approx(before.start_s + before.step_time_s, rel=1e-12)
        assert after.step_time_s == pytest.approx(one[0].step_time_s, rel=1e-9)
        assert after.ranks[0].sync_end_s == pytest.approx(one[0].ranks[0].sync_end_s, rel=1e-9)
        assert after.engine.makespan == pytest.approx(one[0].engine.makespan, rel=1e-9)
    row = three.jobs.iloc[0]
    assert (row.steps_alone, row.steps_shared) == (3, 3)
    assert row.end_s == pytest.approx(steps[-1].start_s + steps[-1].step_time_s)
    assert row.alone_s == pytest.approx(one[0].step_time_s, rel=1e-9)


def test_a_job_arriving_after_the_other_ended_runs_as_alone():
    """On the thin spine two jobs at once slow each other; B arriving once A's step has ended runs
    as it runs alone (only its own traffic left), and its steps are placed at its arrival."""
    jobs = [StepJob("A", tiny(topology=THIN)), StepJob("B", tiny(topology=THIN))]
    together = run_jobs(jobs, "interleaved").jobs
    assert (together.slowdown_pct > 0).all()
    later = StepJob("B", tiny(topology=THIN), arrive_s=0.01)
    result = run_jobs([StepJob("A", tiny(topology=THIN)), later], "interleaved")
    a, b = result.jobs.iloc[0], result.jobs.iloc[1]
    assert a.shared_s == a.alone_s and b.shared_s == pytest.approx(b.alone_s, rel=1e-9)
    assert result.results["B"][0].start_s == 0.01 and b.arrive_s == 0.01
    assert b.end_s == pytest.approx(0.01 + b.alone_s)
    assert "from its arrival (arrive_s)" in __import__("sim.jobs", fromlist=["jobs_text"]).jobs_text(result)


def test_a_window_runs_steps_until_one_ends_past_it():
    """window_s: every step but each job's last ended before the window closed, the last after it;
    beside each other the jobs fit fewer steps than alone."""
    from sim.jobs import JobLength
    window = 0.004
    result = run_jobs([StepJob("A", tiny(topology=THIN)), StepJob("B", tiny(topology=THIN))], "interleaved",
                      length=JobLength(window_s=window))
    for name, steps in result.results.items():
        ends = [s.start_s + s.step_time_s for s in steps]
        assert all(e < window for e in ends[:-1]) and ends[-1] >= window, name
    rows = result.jobs.set_index("job")
    assert (rows.steps_shared == [len(result.results[n]) for n in rows.index]).all()
    assert (rows.steps_alone >= rows.steps_shared).all() and (rows.steps_shared > 1).all()
    assert "steps back to back until 0.004 s per job" in __import__("sim.jobs", fromlist=["x"]).jobs_text(result)


@pytest.mark.parametrize("steps,window,pattern", [
    (0, None, r"^--steps/--window: steps must be an integer in \[1, 10,000\], got 0$"),
    (1.5, None, r"^--steps/--window: steps must be an integer"),
    (None, 0.0, r"^--steps/--window: window_s must be a finite number > 0, got 0.0$"),
    (2, 1.0, r"^--steps/--window: give steps or window_s, not both \(got steps 2, window_s 1.0\)$"),
])
def test_a_bad_length_is_one_line(steps, window, pattern):
    from sim.jobs import job_length
    with pytest.raises(InputError, match=pattern):
        job_length(steps, window, "--steps/--window")


def test_a_bad_arrival_is_one_line(capsys):
    with pytest.raises(InputError, match=r"^job 'A': arrive_s must be a finite number >= 0, got -1$"):
        StepJob("A", tiny(), arrive_s=-1)
    assert main(["jobs", "tiny", "tiny", "--topology", THIN, "--arrive", "0"]) == 2
    assert "--arrive: give one per job (2), got 1" in capsys.readouterr().err


def test_steps_and_arrivals_from_a_jobs_file_and_the_command(tmp_path, capsys):
    """A jobs file's steps and arrive_s reach the run; --steps on the command line replaces them;
    --arrive with a jobs file is refused; the trace holds every step at its own time, each
    process named once."""
    (tmp_path / "thin.yaml").write_text(Path(THIN).read_text())
    spec = tmp_path / "jobs.yaml"
    spec.write_text("topology: thin.yaml\nplacement: interleaved\nsteps: 2\njobs:\n  - scenario: tiny\n"
                    "  - scenario: tiny\n    arrive_s: 0.0005\n")
    from sim.jobs import JobLength, load_jobs_file
    jobs, placement, length = load_jobs_file(str(spec))
    assert length == JobLength(2) and [j.arrive_s for j in jobs] == [0.0, 0.0005] and placement == "interleaved"
    assert load_jobs_file(str(spec), JobLength(window_s=1.0))[2] == JobLength(window_s=1.0)
    trace = tmp_path / "jobs.json"
    assert main(["jobs", str(spec), "--json", "--trace", str(trace)]) == 0
    rows = json.loads(capsys.readouterr().out)["jobs"]
    assert [(r["steps_shared"], r["arrive_s"]) for r in rows] == [(2, 0.0), (2, 0.0005)]
    events = json.loads(trace.read_text())["traceEvents"]
    named = [(e["pid"], e.get("tid")) for e in events if e["name"] in ("process_name", "thread_name")]
    assert len(named) == len(set(named))
    b_ops = sorted(e["ts"] for e in events if e.get("ph") == "X" and e["pid"] // 1000 == 2)
    assert b_ops[0] >= 500.0                            # B's first op after its arrival, 0.5 ms
    a_first = [e for e in events if e.get("ph") == "X" and e["pid"] == 1000 and e["name"] == "F0@0"]
    assert len(a_first) == 2 and a_first[1]["ts"] > a_first[0]["ts"]     # A's two steps, one after the other
    assert main(["jobs", str(spec), "--steps", "1", "--json"]) == 0
    assert [r["steps_shared"] for r in json.loads(capsys.readouterr().out)["jobs"]] == [1, 1]
    assert main(["jobs", str(spec), "--arrive", "0", "--arrive", "1"]) == 2
    assert "--arrive: a jobs file gives each job's arrive_s itself" in capsys.readouterr().err


def test_each_step_draws_its_own_kernel_jitter():
    """Under jitter a job's first step is the one-step run's, to the last digit; its later steps
    draw anew (their times differ), the same on every run."""
    from sim.jobs import JobLength
    run = load_scenario("tiny", faults={"jitter_cv": 0.2, "seed": 3})
    one = MoEStep(Scenario(run)).simulate()
    steps = run_jobs([StepJob("A", run)], length=JobLength(3)).results["A"]
    again = run_jobs([StepJob("A", run)], length=JobLength(3)).results["A"]
    assert steps[0].step_time_s == one.step_time_s
    times = [s.step_time_s for s in steps]
    assert times == [s.step_time_s for s in again]
    for a, b in ((0, 1), (0, 2), (1, 2)):                 # apart by more than the later clock's rounding
        assert abs(times[a] - times[b]) > 1e-6 * times[a]


def test_a_window_stops_at_the_step_limit():
    """A window far longer than the steps stops each job at MAX_STEPS (a typo's 1e9 s would run
    for ever); steps given stop where asked."""
    from sim.jobs import MAX_STEPS, JobLength
    long = JobLength(window_s=1e9)
    assert long.more(MAX_STEPS - 1, 5.0) and not long.more(MAX_STEPS, 5.0) and not long.more(3, 1e9)
    assert JobLength(3).more(2, 1e12) and not JobLength(3).more(3, 0.0)


def test_the_figure_puts_each_jobs_alone_and_shared_bars_side_by_side():
    """jobs.png: per job a bar of its mean step alone left of centre and one beside the others
    right of it, their heights the row's seconds, the slowdown written above."""
    import pandas as pd

    from sim.jobs import jobs_figure
    rows = pd.DataFrame({"job": ["A", "B"], "gpus": [16, 16], "placement": ["nodes 0-1", "nodes 2-3"],
                         "alone_s": [1.0, 2.0], "shared_s": [1.5, 2.0], "slowdown_pct": [50.0, -1e-13]})
    fig = jobs_figure(rows, "two jobs")
    ax = fig.axes[0]
    alone, shared = ax.containers
    assert [(round(b.get_x() + b.get_width() / 2, 9), b.get_height()) for b in alone] == [(-0.2, 1.0), (0.8, 2.0)]
    assert [(round(b.get_x() + b.get_width() / 2, 9), b.get_height()) for b in shared] == [(0.2, 1.5), (1.2, 2.0)]
    assert [t.get_text() for t in ax.texts] == ["+50.0%", "+0.0%"] and ax.get_title() == "two jobs"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["alone", "with the other jobs"]


def test_jobs_with_other_kernels_are_refused_in_one_line():
    from sim.jobs import cluster_for
    jobs = [StepJob("A", load_scenario("tiny")), StepJob("B", load_scenario("tiny", kernels="deepep"))]
    with pytest.raises(InputError) as info:
        cluster_for(jobs)
    assert str(info.value) == "job 'B': kernels 'deepep', but job 'A' has 'ideal'; jobs on one cluster share its kernels"


def test_a_shared_run_that_fails_as_a_whole_keeps_every_jobs_alone_figures(monkeypatch):
    """The shared run raising (not one job's step): each job's row says so, its alone figures stay."""
    import sim.jobs as jobs_module
    made = []
    real = jobs_module.cluster_for

    def counting(jobs):
        fresh = real(jobs)

        def make():
            cluster = fresh()
            made.append(cluster)
            if len(made) == 4:                          # placement, alone A, alone B, then the shared one
                def broken():
                    raise RuntimeError("the network broke")
                cluster.run = broken
            return cluster
        return make
    monkeypatch.setattr(jobs_module, "cluster_for", counting)
    result = run_jobs([StepJob("A", tiny(topology="h800-64")), StepJob("B", tiny(topology="h800-64"))])
    assert list(result.jobs.error) == ["shared run: RuntimeError: the network broke"] * 2
    assert (result.jobs.alone_s > 0).all() and result.jobs.shared_s.isna().all()
    assert "one step per job" in jobs_module.jobs_text(result)


def test_the_cluster_bounds_each_gpus_nccl_kernels_as_the_step_does(tmp_path):
    """Kernels whose NCCL kernels move 10.5 GB/s a GPU (1 SM): a job's pipeline sends are held to it
    on the cluster as on the step's own fabric, so the job alone is the step, to the last digit."""
    slow = tmp_path / "slow-nccl.yaml"
    slow.write_text("launch_us: 4.0\nnotify_us: 10.0\nnotify_round_trips: 2\nsm_GBps: 10.5\nnccl_launch_us: 4.0\n"
                    "nccl_sms: 1\n")
    run = load_scenario("tiny", kernels=str(slow))
    row = run_jobs([StepJob("A", run)]).jobs.iloc[0]
    fast = run_jobs([StepJob("A", load_scenario("tiny", kernels="deepep"))]).jobs.iloc[0]
    assert row.alone_s == MoEStep(Scenario(run)).simulate().step_time_s > fast.alone_s


def test_the_jobs_table_its_text_and_the_shared_links_utilisation():
    """The row's columns in order; the text prints 4 significant digits; a shared link's mean
    utilisation is its bytes over its bandwidth times the shared run (the last step's end)."""
    from sim.jobs import JobLength, jobs_text
    result = run_jobs([StepJob("A", tiny(topology=THIN)), StepJob("B", tiny(topology=THIN))], "interleaved",
                      length=JobLength(2))
    assert list(result.jobs.columns) == ["job", "scenario", "gpus", "placement", "node_runs", "schedule", "arrive_s",
                                         "steps_alone", "steps_shared", "alone_s", "shared_s", "slowdown_pct",
                                         "exposed_comm_alone_s", "exposed_comm_shared_s", "end_s"]
    text = jobs_text(result)
    a = result.jobs.iloc[0]
    assert f" {a.alone_s:.4g} " in text and repr(float(a.alone_s)) not in text
    assert "2 steps back to back per job" in text and JobLength(1).label() == "one step"
    end = result.jobs.end_s.max()
    links = result.links
    assert len(links) and np.allclose(links.mean_util, links.bytes / (links.bandwidth_GBps * 1e9 * end), rtol=1e-12)
    assert (links.mean_util < 1).all()
