"""sim.training.step: overlap out of the streams, modes, determinism, shared measurements, worker processes."""
import pytest

from sim.training.model.specs import SpecError, load_scenario
from sim.training.scenario import Scenario
from sim.training.step import TIME_COLUMNS, MoEStep, simulate_step


@pytest.fixture(scope="module")
def tiny_runs():
    return {s: simulate_step(load_scenario("tiny", schedule=s)) for s in ("1f1b", "dualpipe")}


def test_overlap_comes_out_of_the_streams(tiny_runs):
    one, dual = tiny_runs["1f1b"], tiny_runs["dualpipe"]
    assert one.comm_hidden_fraction == pytest.approx(0.0, abs=1e-9)   # 1F1B never overlaps
    assert dual.comm_hidden_fraction > 0.05                           # DualPipe's FB units hide some
    for res in tiny_runs.values():
        for r in res.ranks:        # the columns add up to the step time
            assert sum(getattr(r, c) for c in TIME_COLUMNS) == pytest.approx(res.step_time_s, rel=1e-12)
            assert min(getattr(r, c) for c in TIME_COLUMNS) >= 0


def test_combined_1f1b_hides_the_all_to_alls_that_interleaved_1f1b_exposes():
    """The same interleaved order, its steady-state pairs run as overlapped units (Megatron-Core's
    expert-parallel overlap): some all-to-all time hidden, less exposed, the same work."""
    interleaved = simulate_step(load_scenario("tiny", schedule="interleaved-1f1b", chunks=2))
    combined = simulate_step(load_scenario("tiny", schedule="combined-1f1b", chunks=2))
    assert interleaved.comm_hidden_fraction == pytest.approx(0.0, abs=1e-9)
    assert combined.comm_hidden_fraction > 0.05
    assert combined.exposed_comm_s < interleaved.exposed_comm_s
    for r in combined.ranks:
        assert sum(getattr(r, c) for c in TIME_COLUMNS) == pytest.approx(combined.step_time_s, rel=1e-12)


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


def test_schedules_share_one_set_of_all_to_all_measurements(monkeypatch):
    from sim.training.step import simulate_schedules
    runs = [load_scenario("tiny", schedule=s, routing_skew=1.0) for s in ("1f1b", "dualpipe")]
    alone = [simulate_step(r) for r in runs]
    import sim.training.comm.alltoall as comm_module
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


def test_worker_processes_give_the_same_step(monkeypatch):
    """Skewed routing sampled and all-to-alls measured in 2 spawned processes: same numbers; the
    processes that sampled the routing measure too (they are started once)."""
    from sim.training.comm import alltoall as comm
    from sim.training.step import simulate_schedules
    monkeypatch.setattr(comm, "PARALLEL_MIN_TOKENS", 0)      # the tiny run would otherwise stay here
    monkeypatch.setattr(comm, "PARALLEL_MIN_FLOWS", 0)
    started, real_pool = [], comm._pool
    monkeypatch.setattr(comm, "_pool", lambda workers, *a: started.append(workers) or real_pool(workers, *a))
    run = load_scenario("tiny", routing_skew=1.2, routing_seed=4)
    one, two = (simulate_schedules(Scenario(run), [run.schedule], workers=w)[0].to_json() for w in (1, 2))
    one.pop("wall_s"), two.pop("wall_s")
    assert one == two
    assert started.count(2) == 1
    with pytest.raises(SpecError, match="workers must be a positive integer"):
        MoEStep(Scenario(run), workers=0)


def test_the_step_records_each_op_on_its_own_rank(tiny_runs):
    """The engine records (events CSV, timeline, trace) hold every op of the schedule once, on the
    rank the schedule gives it, in that rank's order, one after another in time."""
    for name, res in tiny_runs.items():
        sched = res.engine.schedule
        for rank, ops in sorted(sched.ranks.items()):
            mine = [r for r in res.engine.records if r.rank == rank]
            assert [(r.kind, r.mb, r.stage) for r in mine if r.kind != "FB"] == \
                [(op.kind, op.mb, op.stage) for op in ops if op.kind != "FB"], (name, rank)
            assert len(mine) == len(ops)
            assert all(a.end <= b.start + 1e-15 for a, b in zip(mine, mine[1:]))
        assert len(res.engine.records) == sum(len(ops) for ops in sched.ranks.values())


def test_the_part_trace_names_each_op_of_the_traced_rank(tiny_runs):
    """Every part in the trace belongs to the op at its position (seq) in the traced rank's list,
    named as the op prints, flagged when it is an overlapped F&B unit; every op has parts."""
    from sim.engine import FBOp
    for name, res in tiny_runs.items():
        ops = res.engine.schedule.ranks[res.traced_rank]
        assert res.part_trace and {e.seq for e in res.part_trace} == set(range(len(ops))), name
        for e in res.part_trace:
            assert e.op == str(ops[e.seq]) and e.fb == isinstance(ops[e.seq], FBOp), (name, e)


def test_bound_names_the_largest_loss_and_what_the_communication_is(tiny_runs):
    """tiny (EP 4, no TP): its exposed communication is all-to-all; the same losses with EP 1 or with
    TP are "exposed communication" (ZeRO-3's gathers, TP's collectives); a run that loses (almost)
    nothing to any of them is bound by compute, not by the first name in the list."""
    from dataclasses import replace
    res = tiny_runs["1f1b"]
    lossless = replace(res, ranks=[replace(r, bubble_s=0.0, exposed_comm_s=0.0, exposed_pp_s=0.0, dp_sync_s=0.0)
                                   for r in res.ranks])
    assert lossless.bound == "compute"
    tiny = 0.9e-3 * res.step_time_s        # under 0.1% of the step: still bound by compute
    assert replace(res, ranks=[replace(r, bubble_s=tiny, exposed_comm_s=0.0, exposed_pp_s=0.0, dp_sync_s=0.0)
                               for r in res.ranks]).bound == "compute"
    comm = replace(res, ranks=[replace(r, bubble_s=0.1, exposed_comm_s=0.2, exposed_pp_s=0.0, dp_sync_s=0.0)
                               for r in res.ranks])
    assert comm.bound == "exposed all-to-all"
    assert replace(comm, run=replace(res.run, ep=1)).bound == "exposed communication"
    assert replace(comm, run=replace(res.run, tp=2)).bound == "exposed communication"
    bubble = replace(res, ranks=[replace(r, bubble_s=0.3, exposed_comm_s=0.2) for r in res.ranks])
    assert bubble.bound == "bubble"


def test_blocking_pipeline_sends_hold_each_rank_for_its_sends():
    """Megatron's exchange without overlap_p2p_comm: every rank waits for its activations and
    gradients to land, so the step is longer by at least one send, never shorter; compute unchanged."""
    free = simulate_step(load_scenario("tiny", schedule="1f1b", pipeline_sends="async"))
    held = simulate_step(load_scenario("tiny", schedule="1f1b", pipeline_sends="blocking"))
    assert held.step_time_s > free.step_time_s
    assert [r.compute_s for r in held.ranks] == [r.compute_s for r in free.ranks]
    assert free.step_time_s == simulate_step(load_scenario("tiny", schedule="1f1b")).step_time_s   # the default
