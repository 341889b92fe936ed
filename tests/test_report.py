"""sim.training.reports.report: the comparison text, the F&B unit picked from the trace, figures and files."""
import pandas as pd
import pytest

from sim.training.model.specs import load_scenario
from sim.training.reports.report import comparison_text, fb_unit_trace, plot_rank_breakdown, ranks_frame, write_outputs
from sim.training.scenario import Scenario
from sim.training.step import TIME_COLUMNS, simulate_schedules


@pytest.fixture(scope="module")
def results():
    return simulate_schedules(Scenario(load_scenario("tiny")), ["1f1b", "dualpipe"])


def test_comparison_text(results):
    text = comparison_text(results)
    assert text.splitlines()[0].startswith("simulated: tiny-moe on 16 h800 of h800-16 (PP4 x DP4, EP4)")
    assert "dualpipe: hides" in text and "1f1b: hides" not in text      # each is compared with 1f1b
    assert "dualpipe utilization per rank (%)" in text
    # DualPipe's compute beside its all-to-alls: what the kernels took and how much longer it ran;
    # tiny's FLOPs model and ideal kernels (no HBM share) stretch by the flat SMs / (SMs - comm_sms)
    held, sms, share = results[1].beside_comm
    assert (sms, share) == (132, 0.0) and held == results[1].run.comm_sms > 0
    flat = sms / (sms - held)
    line = next(t for t in text.splitlines() if t.startswith("beside a communication kernel"))
    assert line == (f"beside a communication kernel: compute on {sms - held} of {sms} SMs and 100% of the HBM "
                    f"bandwidth (its copies take 0%); those parts ran longer than alone: dualpipe {flat:.3f}-{flat:.3f}x")
    assert "beside a communication kernel" not in comparison_text(results[:1])      # 1F1B overlaps nothing


def test_the_wait_for_peers_is_said_per_schedule(results):
    """Representative mode says where the wait went; a slow GPU in full mode gives each schedule its
    median and most per GPU per step, and where the most was."""
    text = comparison_text(results)
    assert "waiting for peers at the all-to-alls: not separated in representative mode" in text
    slow = simulate_schedules(Scenario(load_scenario("tiny").with_(faults={"slow_gpus": {"pp1.dp0": 1.5}})),
                              ["1f1b"])
    r = slow[0]
    line = next(t for t in comparison_text(slow).splitlines() if "waiting for peers" in t)
    rank = max(r.ranks, key=lambda x: x.replica_peer_wait.max_s)
    assert rank.rank == 1 and rank.replica_peer_wait.max_replica != 0        # a peer of the slow GPU
    assert line.startswith(f"1f1b: waiting for peers at collectives (launch to the group's last launch) "
                           f"{r.peer_wait_s:.3g} s per GPU per step (")
    assert line.endswith(f"most {rank.replica_peer_wait.max_s:.3g} s (rank 1, replica "
                         f"{rank.replica_peer_wait.max_replica})")
    assert r.summary()["mean_peer_wait_s"] == r.peer_wait_s > 0


def test_fb_unit_is_one_overlapped_op_of_the_traced_rank(results):
    dual = results[1]
    unit = fb_unit_trace(dual)
    assert unit and len({e.seq for e in unit}) == 1 and unit[0].fb and unit[0].op.startswith("[")
    names = [e.name for e in unit if e.stream == 0]
    assert names[:3] == ["ATTN(F)", "MLP(B)", "MLP(W)"]
    assert fb_unit_trace(results[0]) == []                                # 1f1b has no F&B unit


def test_rank_breakdown_from_a_csv_frame(results, tmp_path):
    frame = pd.concat([ranks_frame(r) for r in results])
    frame.to_csv(tmp_path / "r.csv", index=False)
    png = plot_rank_breakdown(pd.read_csv(tmp_path / "r.csv"), tmp_path / "r.png", "t")
    assert png.stat().st_size > 10_000
    row = frame[(frame.schedule == "dualpipe") & (frame["rank"] == 0)].iloc[0]
    assert sum(row[c] for c in TIME_COLUMNS) == pytest.approx(results[1].step_time_s)


def test_write_outputs(results, tmp_path):
    write_outputs(results, "tiny", tmp_path, "tiny")
    summary = pd.read_csv(tmp_path / "tiny_summary.csv")
    assert summary["schedule"].tolist() == ["1f1b", "dualpipe"]
    assert summary["step_time_s"].tolist() == [r.step_time_s for r in results]
    for name in ("tiny_ranks.csv", "tiny_events_dualpipe.csv", "tiny_links.csv", "figures/tiny_ranks.png",
                 "figures/tiny_fb_unit_dualpipe.png"):
        assert (tmp_path / name).exists(), name
    assert not (tmp_path / "tiny_link_timeline.csv").exists()          # not recorded by these steps


def test_write_outputs_with_link_timelines(tmp_path):
    from sim.training.model.specs import load_scenario
    from sim.training.scenario import Scenario
    from sim.training.step import simulate_schedules
    results = simulate_schedules(Scenario(load_scenario("tiny")), ["1f1b", "dualpipe"], link_timeline=True)
    write_outputs(results, "tiny", tmp_path, "tiny")
    timeline = pd.read_csv(tmp_path / "tiny_link_timeline.csv")
    assert list(timeline.columns) == ["schedule", "time_s", "bin_s", "link", "kind", "utilization"]
    assert timeline["schedule"].unique().tolist() == ["1f1b", "dualpipe"]
    assert (tmp_path / "figures" / "tiny_link_timeline.png").stat().st_size > 10_000
