"""sim.trace: Chrome / Perfetto trace export."""
import json

import pytest

from sim.cli import main


def test_chrome_trace_of_simulate(tmp_path):
    path = tmp_path / "t.json"
    assert main(["simulate", "--schedule", "dualpipe", "--pp", "4", "--microbatches", "8", "--trace", str(path)]) == 0
    events = json.loads(path.read_text())["traceEvents"]
    ops = [e for e in events if e["ph"] == "X"]
    from sim.schedules import make_schedule
    assert len(ops) == make_schedule("dualpipe", 4, 8).num_ops() and {e["pid"] for e in ops} == {0, 1, 2, 3}
    assert any(e["name"] == "process_name" for e in events)


def test_chrome_trace_of_a_moe_step_has_the_traced_ranks_streams(tmp_path):
    from sim.trace import write_chrome_trace
    from sim.training.model.specs import load_scenario
    from sim.training.step import simulate_step
    res = simulate_step(load_scenario("tiny", schedule="dualpipe"))
    events = json.loads(write_chrome_trace(res, tmp_path / "s.json").read_text())["traceEvents"]
    parts = [e for e in events if e["ph"] == "X" and e["tid"] in (1, 2)]
    assert {e["pid"] for e in parts} == {res.traced_rank} == {2}
    assert len(parts) == len(res.part_trace)
    assert {e["cat"] for e in parts} == {"compute", "comm"}
    assert any(e["ph"] == "C" for e in events)          # link counters of the measured all-to-alls
    beside = [e for e in parts if "beside_comm" in e["args"]]   # DualPipe's compute beside its all-to-alls
    assert beside and all(e["cat"] == "compute" and e["args"]["beside_comm"] > 1.0 for e in beside)
    stretched = {(p.name, p.start): p.stretch for p in res.part_trace if p.stretch != 1.0}
    assert len(stretched) == len(beside) and all(p.stretch >= 1.0 for p in res.part_trace)


def test_a_moe_steps_trace_gives_each_all_to_all_its_wait_for_peers(tmp_path):
    """tiny (one EP group of 4 replicas per rank) with GPU pp2.dp1 1.5x slower: the traced rank's
    first replica (rank 2, replica 0) waits for it at its all-to-alls, and the waits its trace
    gives them add up to the rank's peer wait (replicas 0, 2 and 3 wait alike: the median)."""
    from sim.trace import write_chrome_trace
    from sim.training.model.specs import load_scenario
    from sim.training.step import simulate_step
    res = simulate_step(load_scenario("tiny", schedule="1f1b").with_(faults={"slow_gpus": {"pp2.dp1": 1.5}}))
    events = json.loads(write_chrome_trace(res, tmp_path / "s.json").read_text())["traceEvents"]
    waits = [e["args"]["peer_wait_us"] for e in events if e["ph"] == "X" and "peer_wait_us" in e["args"]]
    assert waits and all(w > 0 for w in waits)
    assert all(e["cat"] == "comm" for e in events if e["ph"] == "X" and "peer_wait_us" in e["args"])
    peer = res.ranks[res.traced_rank].replica_peer_wait
    assert peer.median_s == peer.max_s and peer.min_s == 0.0
    assert sum(waits) * 1e-6 == pytest.approx(peer.median_s, abs=1e-9 * len(waits))   # rounded to ns


def test_a_step_with_its_link_timeline_traces_the_busiest_links_over_time(tmp_path):
    """Recorded, the step fabric's busiest links become counter tracks with one value per time bin,
    and every byte the timeline holds is a byte the fabric carried."""
    from sim.trace import write_chrome_trace
    from sim.training.model.specs import load_scenario
    from sim.training.scenario import Scenario
    from sim.training.step import MoEStep
    res = MoEStep(Scenario(load_scenario("tiny", schedule="dualpipe", communication="live"))).simulate(link_timeline=True)
    tl = res.link_timeline
    assert set(tl.columns) == {"time_s", "bin_s", "link", "kind", "utilization"} and tl["link"].nunique() == 16
    assert tl["utilization"].between(0, 1 + 1e-9).all() and tl["utilization"].max() > 0.2
    assert tl["time_s"].max() < res.step_time_s
    events = json.loads(write_chrome_trace(res, tmp_path / "s.json").read_text())["traceEvents"]
    counters = [e for e in events if e["ph"] == "C"]
    assert len({e["name"] for e in counters}) == 8 and len({e["ts"] for e in counters}) > 20


@pytest.mark.parametrize("communication, says", [("measured", "all-to-alls measured apart, not on this fabric"),
                                                  ("live", "busiest links of the step (all traffic)")])
def test_the_link_track_says_whether_the_all_to_alls_are_on_it(tmp_path, communication, says):
    """Measured mode keeps the all-to-alls off the step's fabric: its link counters would show an idle
    network beside exposed all-to-all, so the track's name says what it holds."""
    from sim.trace import write_chrome_trace
    from sim.training.model.specs import load_scenario
    from sim.training.scenario import Scenario
    from sim.training.step import MoEStep
    res = MoEStep(Scenario(load_scenario("tiny", schedule="1f1b", communication=communication))).simulate(
        link_timeline=True)
    events = json.loads(write_chrome_trace(res, tmp_path / "s.json").read_text())["traceEvents"]
    label = next(e["args"]["name"] for e in events if e["ph"] == "M" and e.get("pid") == -1)
    assert says in label
