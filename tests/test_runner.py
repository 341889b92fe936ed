"""sim.training.runner: ops as parts in Figure 4's order, and the lockstep runner against one process per replica."""
import numpy as np
import pytest
import simpy

from sim.network import Fabric
from sim.training.model.specs import load_scenario
from sim.training.scenario import Scenario
from sim.training.step import MoEStep


def probe(run=None):
    """(step, env, fabric, the first group's runner) of the tiny scenario (or ``run``), every rank
    simulated, on a fresh fabric: for sends driven by hand."""
    step = MoEStep(Scenario(run or load_scenario("tiny")), "full")
    env = simpy.Environment()
    fabric = Fabric(env, step.scenario.links)
    return step, env, fabric, step.runners(fabric)[0]


def alone_from_rank_0_to_1(step, runner, fabric) -> np.ndarray:
    """Seconds each replica's send from rank 0 to rank 1 of tiny takes alone: its route's latency
    plus 262,144 bytes over NVLink (160 GB/s)."""
    src, dst = step.scenario.layout.gpus_of(0, runner.replicas), step.scenario.layout.gpus_of(1, runner.replicas)
    return np.array([fabric.links.route(int(a), int(b))[1] for a, b in zip(src, dst)]) + 262144 / 160e9


@pytest.mark.parametrize("schedule", ["dualpipe", "1f1b"])
def test_lockstep_full_mode_equals_one_process_per_replica(schedule):
    """Skewed routing, every rank simulated: the lockstep runner gives what one SimPy process per
    replica, one event per part and one barrier per all-to-all give (SM sharing off, see reference)."""
    from reference_moe import reference_full_step
    run = load_scenario("tiny", schedule=schedule, routing_skew=1.5, routing_seed=2, comm_sms=0)
    step = MoEStep(Scenario(run), mode="full")
    res = step.simulate()
    ref_time, ref = reference_full_step(MoEStep(Scenario(run), mode="full"))
    assert res.pipeline_end_s == pytest.approx(ref_time, rel=1e-12)
    assert res.step_time_s > res.pipeline_end_s            # the data-parallel sync and optimizer follow
    for r in res.ranks:
        worst = max((v for (rank, _), v in ref.items() if rank == r.rank), key=lambda v: v[2])
        assert r.compute_s == pytest.approx(worst[0], rel=1e-12)
        assert r.comm_s == pytest.approx(worst[1], rel=1e-12)
    assert len({round(v[0], 9) for (rank, _), v in ref.items() if rank == 0}) > 1   # replicas do differ


def test_a_send_started_after_its_time_records_how_late_and_lands_each_replica():
    """The lockstep lag by hand: the group's first replica finished the producer at 1 us, the
    others at 3 us and 30 us; the send only starts at 5 us (the group was held up), so the first
    two replicas' sends leave at once and the largest lag, 5 - (1 + launch) us, is recorded; the
    others leave at 30 us + launch. Each replica's input lands when its own transfer ends."""
    step, env, fabric, runner = probe()
    launch = runner.send_launch_s
    key = ("probe",)
    assert len(runner.replicas) >= 2 and runner.late_s == 0.0
    runner.arrivals[key] = np.array([1e-6, 3e-6] + [30e-6] * (len(runner.replicas) - 2))
    env.run(until=5e-6)
    env.run(runner._send(env, 0, 1, key))
    assert runner.late_s == pytest.approx(5e-6 - (1e-6 + launch), rel=1e-12)
    src, dst = step.scenario.layout.gpus_of(0, runner.replicas), step.scenario.layout.gpus_of(1, runner.replicas)
    latency = fabric.links.route(int(src[0]), int(dst[0]))[1]
    landed = runner.arrivals[key]
    assert 5e-6 + latency < landed[0] <= landed[1] < 30e-6 + launch < landed[2:].min()


def test_jittered_sends_leave_on_the_grid_each_replica_at_its_own_time():
    """Under kernel jitter every pipeline send starts at its producer's end plus the launch, rounded
    up to the grid: ``faults.send_grid_s`` (default 1 ms), or a send's own time alone on the
    fastest replica's route where that is shorter. tiny's sends (262,144 bytes at 160 GB/s) take
    1.6384 us alone: on the default grid replicas that finished at 1, 3, 12 and 25 us send at 1, 2,
    8 and 16 of those (1.6384, 3.2768, 13.1072, 26.2144 us), all in one process started at 0 (none
    late). With the routes taken at 1 GB/s (262 us alone) the grid asked for binds: 10 us gives 10,
    10, 20 and 30 us, 20 us gives 20, 20, 20 and 40 us. On a grid of 0, or without jitter, each
    at its own end."""
    from sim.training.model.faults import SEND_GRID_S
    own, ends = 262144 / 160e9, [1e-6, 3e-6, 12e-6, 25e-6]
    for cv, grid, slow, want in ((0.05, {}, False, [own, 2 * own, 8 * own, 16 * own]),
                                 (0.0, {}, False, ends),
                                 (0.05, {"send_grid_s": 10e-6}, True, [10e-6, 10e-6, 20e-6, 30e-6]),
                                 (0.05, {"send_grid_s": 20e-6}, True, [20e-6, 20e-6, 20e-6, 40e-6]),
                                 (0.05, {"send_grid_s": 0.0}, True, ends),
                                 (0.0, {"send_grid_s": 20e-6}, True, ends)):
        _, env, fabric, runner = probe(load_scenario("tiny").with_(faults={"jitter_cv": cv, "seed": 1, **grid}))
        assert runner.send_launch_s == 0.0 and len(runner.replicas) == 4 and SEND_GRID_S == 1e-3
        assert runner.chunk.activation_bytes() == 262144
        started = []
        transfer, transfer_at = fabric.transfer, fabric.transfer_at

        def record(src, dst, nbytes, on_done=None, max_rate=None, _transfer=transfer):
            started.append(env.now)
            return _transfer(src, dst, nbytes, on_done=on_done, max_rate=max_rate)

        def record_at(at, src, dst, nbytes, on_done, max_rate=None, _transfer_at=transfer_at):   # starts at ``at``
            started.append(at)
            return _transfer_at(at, src, dst, nbytes, on_done, max_rate)

        fabric.transfer, fabric.transfer_at = record, record_at
        if slow:
            fabric.route_bandwidth = lambda src, dst: 1e9
        runner.arrivals[("probe",)] = np.array(ends)
        env.run(runner._send(env, 0, 1, ("probe",)))
        assert started == pytest.approx(want, rel=1e-12, abs=0), (cv, grid)
        assert runner.late_s == 0.0


def test_a_send_put_on_the_grid_lands_as_if_it_had_left_when_due():
    """A send held until the next grid point lands, for its receiver, that much before its last
    byte does: as if it had left when due. Four replicas' sends on links of their own, each alone,
    due at 1, 3, 12 and 25 us: on a 20 us grid (routes taken at 1 GB/s for the grid only) they
    land at their due time plus latency plus 262,144 bytes over 160 GB/s, as with exact times
    (grid 0), to rounding; the flows themselves end up to a grid later."""
    landed = {}
    for grid in (0.0, 20e-6):
        step, env, fabric, runner = probe(load_scenario("tiny").with_(faults={"jitter_cv": 0.05, "seed": 1,
                                                                             "send_grid_s": grid}))
        fabric.route_bandwidth = lambda src, dst: 1e9
        ends = np.array([1e-6, 3e-6, 12e-6, 25e-6])
        runner.arrivals[("probe",)] = ends
        env.run(runner._send(env, 0, 1, ("probe",)))
        landed[grid] = runner.arrivals[("probe",)]
        last = env.now
    alone = alone_from_rank_0_to_1(step, runner, fabric)
    assert landed[0.0] == pytest.approx(ends + alone, rel=1e-12)
    assert landed[20e-6] == pytest.approx(ends + alone, rel=1e-9)
    assert last == pytest.approx(40e-6 + alone[3], rel=1e-12)          # the last flow left at 40 us


def test_a_send_whose_grid_point_has_passed_leaves_now_and_lands_when_its_flow_does():
    """A 3 us grid (routes taken at 1 GB/s for the grid only), the clock at 4 us when the group's
    send starts (it was held up): the send due at 1 us (grid point 3 us) is late by 1 us, leaves
    now and lands when its flow does; the one due at 3.5 us leaves at its grid point, 6 us, and
    lands as if it had left when it could, now (not at 3.5 us); those due at 31 us leave at 33 us
    and land as if they had left at 31 us."""
    step, env, fabric, runner = probe(load_scenario("tiny").with_(faults={"jitter_cv": 0.05, "seed": 1,
                                                                         "send_grid_s": 3e-6}))
    fabric.route_bandwidth = lambda src, dst: 1e9
    env.run(until=4e-6)
    runner.arrivals[("probe",)] = np.array([1e-6, 3.5e-6, 31e-6, 31e-6])
    env.run(runner._send(env, 0, 1, ("probe",)))
    alone = alone_from_rank_0_to_1(step, runner, fabric)
    assert runner.late_s == pytest.approx(1e-6, rel=1e-9)
    assert runner.arrivals[("probe",)] == pytest.approx(np.array([4e-6, 4e-6, 31e-6, 31e-6]) + alone, rel=1e-9)
    assert env.now == pytest.approx(33e-6 + alone[3], rel=1e-12)


def test_sends_due_together_start_in_replica_order():
    """DeepSeek-V3's groups of 64 replicas: sends due at the same instant start in replica order
    (a stable sort), so the fabric sees its flows in the same order on every machine; here half the
    replicas end at 1 us and half at 2 us, alternately, where an unstable sort reorders ties."""
    _, env, fabric, runner = probe(load_scenario("deepseek-v3"))
    n = len(runner.replicas)
    assert n > 16                                       # numpy sorts 16 or fewer stably in any case
    order = []
    transfer_at = fabric.transfer_at
    fabric.transfer_at = lambda at, src, dst, nbytes, on_done, max_rate=None: (
        order.append(src), transfer_at(at, src, dst, nbytes, on_done, max_rate))
    runner.arrivals[("probe",)] = np.tile([2e-6, 1e-6], n // 2)
    env.run(runner._send(env, 0, 1, ("probe",)))
    src = runner.layout.gpus_of(0, runner.replicas).tolist()
    assert order == src[1::2] + src[0::2]


def test_the_send_grid_is_per_pair_of_ranks():
    """tiny under jitter: ranks 0 and 1 share a node (NVLink, 160 GB/s), ranks 1 and 2 do not (a
    NIC, 50 GB/s): 262,144-byte sends get grids of 1.6384 us and 5.24288 us (their own times
    alone; 1 ms asked for), so sends due at 3 us leave rank 1 at 3.2768 us for rank 0 and at
    5.24288 us for rank 2."""
    step, env, fabric, runner = probe(load_scenario("tiny").with_(faults={"jitter_cv": 0.05}))
    gpus = step.scenario.layout.gpus_of
    grids = [runner._grid(a, b, gpus(a, runner.replicas), gpus(b, runner.replicas), 262144.0) for a, b in
             ((0, 1), (1, 2), (0, 1))]
    assert grids == pytest.approx([262144 / 160e9, 262144 / 50e9, 262144 / 160e9], rel=1e-12)
    runner._grids.clear()
    started = []
    transfer_at = fabric.transfer_at
    fabric.transfer_at = lambda at, *args: (started.append(at), transfer_at(at, *args))
    for dst in (0, 2):
        runner.arrivals[("probe", dst)] = np.full(len(runner.replicas), 3e-6)
        runner._send(env, 1, dst, ("probe", dst))
    env.run()
    assert started == pytest.approx([2 * 262144 / 160e9] * 4 + [262144 / 50e9] * 4, rel=1e-12)


def test_a_send_a_rounding_error_behind_the_clock_is_not_late():
    """A producer end 1e-13 s behind the clock (float rounding of summed op times) is not a late
    send: ``late_s`` only records lags beyond 1e-12 s."""
    _, env, _, runner = probe()
    env.run(until=5e-6)
    runner.arrivals[("probe",)] = np.full(len(runner.replicas), 5e-6 - 1e-13)
    env.run(runner._send(env, 0, 1, ("probe",)))
    assert runner.late_s == 0.0
    now = env.now
    runner.arrivals[("probe2",)] = np.full(len(runner.replicas), now - 1e-11)
    env.run(runner._send(env, 0, 1, ("probe2",)))
    assert runner.late_s == pytest.approx(1e-11, rel=1e-3)


def test_sends_that_leave_together_land_each_at_its_own_time():
    """Every replica's send leaves at once (all producers ended at 5 us, the clock's time), but
    replica 1's route has its first link at half bandwidth (a degraded-link fault): its input lands
    later than replica 0's, and each replica keeps its own landing time (0 and 1 do not share
    the later one)."""
    step, _, fabric, runner = probe()
    layout = step.scenario.layout
    src, dst = layout.gpus_of(0, runner.replicas).tolist(), layout.gpus_of(1, runner.replicas).tolist()
    u, v = fabric.links.link_name(int(fabric.links.route(src[1], dst[1])[0][0])).split("->")
    _, env, fabric, runner = probe(load_scenario("tiny").with_(faults={"links": {f"{u}--{v}": 0.5}}))
    env.run(until=5e-6)
    runner.arrivals[("probe",)] = np.full(len(runner.replicas), 5e-6)
    env.run(runner._send(env, 0, 1, ("probe",)))
    landed = runner.arrivals[("probe",)]
    links, latency = fabric.links.route(src[0], dst[0])
    alone = 5e-6 + latency + runner.chunk.activation_bytes() / fabric.links.capacity[links].min()
    assert landed[0] == pytest.approx(alone, rel=1e-9) and landed[1] > landed[0] * (1 + 1e-6)


def test_megatron_interleaved_exchanges_on_the_fabric():
    """Interleaved 1F1B with blocking sends on the tiny cluster: a steady-state forward's activation
    leaves after the backward it is paired with (the next stage's forward starts after that
    backward's end plus a send), and the forward waits for that backward's incoming gradient."""
    run = load_scenario("tiny", schedule="interleaved-1f1b", chunks=2, pipeline_sends="blocking")
    step = MoEStep(Scenario(run))
    res = step.simulate()
    sched, S = step.scenario.schedule, step.scenario.schedule.num_stages
    at = {(r.kind, r.mb, r.stage): r for r in res.engine.records}
    pairs = 0
    for rank, ops in sched.ranks.items():
        for j in sched.joined[rank]:
            f, b = ops[j - 1], ops[j]
            if f.stage < S - 1:
                assert at[("F", f.mb, f.stage + 1)].start > at[("B", b.mb, b.stage)].end
                pairs += 1
            if b.stage < S - 1:
                assert at[("F", f.mb, f.stage)].start > at[("B", b.mb, b.stage + 1)].end
    assert pairs > 0


@pytest.mark.parametrize("schedule, extra", [("interleaved-1f1b", {"chunks": 2, "pipeline_sends": "blocking"}),
                                             ("dualpipe", {}), ("zb-h1", {"pipeline_sends": "blocking"})])
def test_one_replica_runs_on_floats_as_on_vectors(monkeypatch, schedule, extra):
    """A representative pipeline (one replica, measured communication) runs each op on Python
    floats: the step, each rank's figures, every op's start and end and the traced parts are what
    the vector path (every replica's clock a numpy vector) gives, to the last bit."""
    from sim.training.runner import GroupRunner

    def step():
        return MoEStep(Scenario(load_scenario("tiny", schedule=schedule, **extra)), "representative").simulate()
    fast = step()
    def on_vectors(self, env, rank, op):
        self._one = False                       # its totals too
        return self._run_group(env, rank, op)
    monkeypatch.setattr(GroupRunner, "run", on_vectors)
    slow = step()
    assert fast.step_time_s == slow.step_time_s and fast.pipeline_end_s == slow.pipeline_end_s
    assert fast.ranks == slow.ranks
    assert fast.engine.records == slow.engine.records and len(fast.engine.records) > 0
    assert fast.part_trace == slow.part_trace and len(fast.part_trace) > 0


def test_a_representative_live_send_leaves_when_due_or_at_once_when_late():
    """Live communication in representative mode (one send stands for every replica's): a send due
    at 3 us (tiny: no launch) leaves then and lands ``d`` later, no sooner than its bytes alone over
    NVLink; one 1e-13 s behind the clock (rounding) is not late; one due at 1 us when the clock is
    past it leaves at once, is late by the gap, and takes the same ``d``. The sends block: the
    sender's clock moves to each landing."""
    step = MoEStep(Scenario(load_scenario("tiny", communication="live", pipeline_sends="blocking")), "representative")
    env = simpy.Environment()
    runner = step.runners(Fabric(env, step.scenario.links))[0]
    assert runner.live.representative and runner.send_launch_s == 0.0
    runner.arrivals[("p",)] = np.array([3e-6])
    env.run(env.process(runner._send(env, 0, 1, ("p",))))
    d = runner.arrivals[("p",)][0] - 3e-6
    assert d >= 262144 / 160e9 and env.now == runner.arrivals[("p",)][0] and runner.late_s == 0.0
    assert runner.clock[0].tolist() == [env.now] and runner.clock[1].tolist() == [0.0]   # blocking: the sender waited
    runner.arrivals[("r",)] = np.array([env.now - 1e-13])     # float rounding behind the clock: not late
    env.run(env.process(runner._send(env, 0, 1, ("r",))))
    assert runner.late_s == 0.0
    now = env.now
    runner.arrivals[("q",)] = np.array([1e-6])
    env.run(env.process(runner._send(env, 0, 1, ("q",))))
    assert runner.late_s == pytest.approx(now - 1e-6, rel=1e-12)
    assert runner.arrivals[("q",)][0] == pytest.approx(now + d, rel=1e-12)
