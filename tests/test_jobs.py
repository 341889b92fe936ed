"""Several jobs on one cluster: one job is the step itself, disjoint jobs run as alone, a thin
spine slows both, and the jobs command."""
import json
from pathlib import Path

import pytest

from sim.checks import InputError
from sim.cli import main
from sim.jobs import StepJob, run_jobs
from sim.moe.scenario import Scenario
from sim.moe.specs import load_scenario
from sim.moe.step import MoEStep

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
    assert (out / "jobs.csv").is_file() and (out / "jobs_shared_links.csv").is_file()
    assert main(["jobs", "tiny", "tiny", "--topology", "h800-64", "--gpus", "16-31", "--gpus", "0-15"]) == 0
    text = capsys.readouterr().out
    assert "nodes 2-3" in text and "nodes 0-1" in text and "met on no link" in text
    assert main(["jobs", "tiny", "--gpus", "0-15", "--gpus", "0-15"]) == 2
    assert "--gpus: give one list per job (1), got 2" in capsys.readouterr().err
