"""The MoE step: streams and overlap, modes, memory, results, command line."""
import json

import pytest

from sim.cli import main
from sim.moe.chunk import LayerCost
from sim.moe.runner import COMM, COMPUTE, overlapped_parts
from sim.moe.scenario import Scenario
from sim.moe.specs import SpecError, load_scenario
from sim.moe.step import MoEStep, simulate_step

MOE = LayerCost(1.0, 2.0, 1.0, 1.0, 1.0, 1.0, True, 0.9, 0.0)


def test_fb_unit_part_order_is_figure_4():
    comp, comm = overlapped_parts([MOE], [MOE], 0.0, 0.0)
    assert [p.name for p in comp] == ["ATTN(F)", "MLP(B)", "MLP(W)", "MLP(F)", "ATTN(B)", "ATTN(W)"]
    assert [p.name for p in comm] == ["COMBINE(B)", "DISPATCH(F)", "DISPATCH(B)", "COMBINE(F)"]
    # each transfer waits for the compute part producing its data, each compute part for its transfer
    assert comm[1].after == [(COMPUTE, 0)]            # DISPATCH(F) after ATTN(F)
    assert comm[2].after == [(COMPUTE, 1)]            # DISPATCH(B) after MLP(B)
    assert comm[3].after == [(COMPUTE, 3)]            # COMBINE(F) after MLP(F)
    assert comp[1].after == [(COMM, 0)]               # MLP(B) after COMBINE(B)
    assert comp[3].after == [(COMM, 1)]               # MLP(F) after DISPATCH(F)
    assert comp[4].after == [(COMM, 2)]               # ATTN(B) after DISPATCH(B)


def test_next_layer_dependencies():
    comp, comm = overlapped_parts([MOE, MOE], [MOE, MOE], 0.0, 0.0)
    assert comp[6].name == "ATTN(F)" and comp[6].after == [(COMM, 3)]      # after COMBINE(F) of layer 0
    assert comm[4].name == "COMBINE(B)" and comm[4].after == [(COMPUTE, 4)]  # after ATTN(B) of layer 0


@pytest.fixture(scope="module")
def tiny_runs():
    return {s: simulate_step(load_scenario("tiny", schedule=s)) for s in ("1f1b", "dualpipe")}


def test_overlap_comes_out_of_the_streams(tiny_runs):
    one, dual = tiny_runs["1f1b"], tiny_runs["dualpipe"]
    assert one.comm_hidden_fraction == pytest.approx(0.0, abs=1e-9)   # 1F1B never overlaps
    assert dual.comm_hidden_fraction > 0.05                           # DualPipe's FB units hide some
    for res in tiny_runs.values():
        for r in res.ranks:
            assert r.compute_s + r.exposed_comm_s + r.bubble_s == pytest.approx(res.step_time_s)


def test_representative_and_full_agree_on_balanced_routing():
    run = load_scenario("tiny")
    rep = simulate_step(run, mode="representative")
    full = simulate_step(run, mode="full")
    assert rep.mode == "representative" and full.mode == "full"
    assert full.step_time_s == pytest.approx(rep.step_time_s, rel=1e-9)
    assert [r.compute_s for r in full.ranks] == pytest.approx([r.compute_s for r in rep.ranks])
    assert [r.exposed_comm_s for r in full.ranks] == pytest.approx([r.exposed_comm_s for r in rep.ranks])


def test_skewed_routing_makes_stragglers():
    balanced = simulate_step(load_scenario("tiny"))
    skewed = simulate_step(load_scenario("tiny", routing_skew=1.5, routing_seed=1))
    assert skewed.mode == "full"
    assert skewed.step_time_s > balanced.step_time_s


def test_deterministic():
    a = simulate_step(load_scenario("tiny", routing_skew=1.0)).to_json()
    b = simulate_step(load_scenario("tiny", routing_skew=1.0)).to_json()
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b


def test_memory_accounting_and_warning():
    step = Scenario(load_scenario("tiny", schedule="dualpipe"))
    one = Scenario(load_scenario("tiny", schedule="1f1b"))
    # DualPipe holds two stages per rank: twice the parameters of a 1F1B rank holding the same stage
    assert step.memory[0].params_gb > 1.5 * one.memory[0].params_gb
    assert step.memory[0].grads_gb == pytest.approx(2 * step.memory[0].params_gb)
    res = simulate_step(load_scenario("tiny", activation_factor=5e6))
    assert res.warnings and "does not fit" in res.warnings[0]


def test_run_json_contract(capsys):
    code = main(["run", "tiny", "--schedule", "dualpipe", "--json"])
    js = json.loads(capsys.readouterr().out)
    assert code == 0
    for key in ("step_time_s", "tokens_per_s", "mfu", "compute_comm_ratio", "exposed_comm_s", "ranks"):
        assert key in js
    assert set(js["ranks"][0]) >= {"rank", "compute_s", "exposed_comm_s", "bubble_s", "utilization"}


def test_run_all_schedules_writes_files(tmp_path, capsys):
    code = main(["run", "tiny", "--out", str(tmp_path), "--trace", str(tmp_path / "t.json")])
    out = capsys.readouterr().out
    assert code == 0 and "dualpipe" in out and "1f1b" in out and "hides" in out
    assert (tmp_path / "tiny_summary.csv").exists() and (tmp_path / "tiny_ranks.csv").exists()
    assert (tmp_path / "figures" / "tiny_fb_unit_dualpipe.png").stat().st_size > 5000
    trace = json.loads((tmp_path / "t.json").read_text())
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])


@pytest.mark.parametrize("argv,pattern", [
    (["run", "nope"], "unknown scenario 'nope'"),
    (["run", "tiny", "--ep", "3", "--dp", "3"], "must divide the 8 GPUs per node"),
    (["run", "tiny", "--schedule", "dualpipe", "--pp", "3", "--dp", "4"], "even P"),
])
def test_run_errors(capsys, argv, pattern):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and pattern in err


@pytest.mark.parametrize("schedule", ["dualpipe", "1f1b"])
def test_lockstep_full_mode_equals_one_process_per_replica(schedule):
    """Skewed routing, every rank simulated: the lockstep runner gives what one SimPy process per
    replica, one event per part and one barrier per all-to-all give (SM sharing off, see reference)."""
    from reference_moe import reference_full_step
    run = load_scenario("tiny", schedule=schedule, routing_skew=1.5, routing_seed=2, comm_sms=0)
    step = MoEStep(Scenario(run), mode="full")
    res = step.simulate()
    ref_time, ref = reference_full_step(MoEStep(Scenario(run), mode="full"))
    assert res.step_time_s == pytest.approx(ref_time, rel=1e-12)
    for r in res.ranks:
        worst = max((v for (rank, _), v in ref.items() if rank == r.rank), key=lambda v: v[2])
        assert r.compute_s == pytest.approx(worst[0], rel=1e-12)
        assert r.comm_s == pytest.approx(worst[1], rel=1e-12)
    assert len({round(v[0], 9) for (rank, _), v in ref.items() if rank == 0}) > 1   # replicas do differ


def test_schedules_share_one_set_of_all_to_all_measurements(monkeypatch):
    from sim.moe.step import simulate_schedules
    runs = [load_scenario("tiny", schedule=s, routing_skew=1.0) for s in ("1f1b", "dualpipe")]
    alone = [simulate_step(r) for r in runs]
    import sim.moe.comm as comm_module
    measured = []
    real = comm_module.measure_all_to_alls
    monkeypatch.setattr(comm_module, "measure_all_to_alls", lambda *a: measured.append(a) or real(*a))
    shared = simulate_schedules(Scenario(runs[0]), [r.schedule for r in runs])
    assert len(measured) == 2 * runs[0].pp              # per shape and stage (skewed), once for both
    for a, b in zip(alone, shared):
        assert a.step_time_s == b.step_time_s and a.to_json()["ranks"] == b.to_json()["ranks"]
    step = MoEStep(Scenario(runs[0]))
    with pytest.raises(ValueError, match="another run"):
        MoEStep(Scenario(load_scenario("tiny", routing_skew=0.5)), comm=step.comm)


def test_worker_processes_give_the_same_step():
    """Skewed routing sampled and all-to-alls measured in 2 spawned processes: same numbers."""
    from sim.moe.step import simulate_schedules
    run = load_scenario("tiny", routing_skew=1.2, routing_seed=4)
    one, two = (simulate_schedules(Scenario(run), [run.schedule], workers=w)[0].to_json() for w in (1, 2))
    one.pop("wall_s"), two.pop("wall_s")
    assert one == two
    with pytest.raises(SpecError, match="workers must be a positive integer"):
        MoEStep(Scenario(run), workers=0)
