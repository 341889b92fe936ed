"""sim.training.model.faults: slow GPUs, kernel jitter, degraded and failed links, worked by hand."""
import pytest
import simpy

from sim.network import Fabric
from sim.training.model.faults import FaultError, FaultSpec, select_links
from sim.training.model.specs import SpecError, load_scenario
from sim.training.scenario import Scenario
from sim.training.step import MoEStep
from topologies import load_topology

NVLINK_HOP, GPU_NIC, NIC_LEAF = 1.65e-6, 0.5e-6, 0.9e-6      # h800-16 link latencies (s)


def one_stage(**faults):
    """The tiny model on one pipeline stage of 4 GPUs (one EP group), 1F1B, 4 micro-batches."""
    run = load_scenario("tiny", schedule="1f1b", pp=1, dp=4, ep=4, microbatches=4)
    return run.with_(faults=faults or None)


def test_a_slow_gpu_delays_the_step_by_its_extra_compute():
    """One stage, plain ops (no overlap, no pipeline sends): every all-to-all waits for the slowest
    GPU, so each compute segment between two of them lasts as long as on the slow GPU. GPU 2 at
    1.5x: the step grows by 0.5 x the compute (recomputation included) of a healthy GPU."""
    clean = MoEStep(Scenario(one_stage()), "full").simulate()
    slow = MoEStep(Scenario(one_stage(slow_gpus={2: 1.5}))).simulate()
    healthy = clean.ranks[0].compute_s + clean.ranks[0].recompute_s
    assert slow.mode == "full"
    assert slow.step_time_s - clean.step_time_s == pytest.approx(0.5 * healthy, rel=1e-9)
    spread = slow.ranks[0].replica_compute
    assert spread.max_replica == 2 and spread.max_s == pytest.approx(1.5 * spread.median_s, rel=1e-9)
    # The healthy GPUs wait for it at every all-to-all: their all-to-all time (barrier waits
    # included) is longer than the slow GPU's by its extra compute, but for what it computes after
    # the step's last all-to-all (the last backward's tail, which nobody waits for inside an op).
    waits = slow.ranks[0].replica_comm
    assert 0.9 * 0.5 * healthy < waits.max_s - waits.min_s < 0.5 * healthy
    # ... and that difference is their peer wait: the slow GPU waits for nobody.
    peer = slow.ranks[0].replica_peer_wait
    assert peer.min_s == 0.0 and peer.max_s == pytest.approx(waits.max_s - waits.min_s, rel=1e-9)
    assert clean.ranks[0].replica_peer_wait.max_s == 0.0 and clean.peer_wait_s == 0.0


def test_a_slow_gpu_delays_exactly_the_collectives_of_its_own_group():
    """One stage of 4 GPUs in two EP groups ({0, 1}, {2, 3}); GPU 2 at 1.5x. Its peer, GPU 3, waits
    at every all-to-all; GPUs 0 and 1 never wait and spend exactly the fault-free all-to-all time."""
    run = load_scenario("tiny", schedule="1f1b", pp=1, dp=4, ep=2, microbatches=4)
    clean = MoEStep(Scenario(run), "full").simulate()
    slow = MoEStep(Scenario(run.with_(faults={"slow_gpus": {2: 1.5}}))).simulate()
    peer = slow.ranks[0].replica_peer_wait
    assert peer.max_replica == 3 and peer.max_s > 0
    assert peer.median_s == 0.0              # of [w0, w1, w2, w3] with w3 > 0: w0 = w1 = w2 = 0
    comm = slow.ranks[0].replica_comm
    assert comm.min_s == pytest.approx(clean.ranks[0].replica_comm.max_s, rel=1e-12)   # {0, 1}: as without it
    assert comm.max_s == pytest.approx(comm.min_s + peer.max_s, rel=1e-12) and comm.max_replica == 3


def test_a_failed_link_reroutes_and_the_transfer_takes_the_new_path():
    """h800-16 without n1/nic0's uplink: GPU 8 reaches GPU 0 through its NVSwitch, another GPU's NIC
    and plane, and GPU 0's NVSwitch: 4 NVLink hops, 2 GPU-NIC and 2 NIC-leaf links, 9.4 us; 100 MB
    at the 50 GB/s of the NIC links: 2 ms."""
    faults = FaultSpec(links={"n1/nic0--p0/leaf0": 0})
    graph = faults.apply_to(load_topology("h800-16"))
    assert not graph.has_edge("n1/nic0", "p0/leaf0")
    env = simpy.Environment()
    fabric = Fabric(env, graph)
    route, latency = fabric.links.route(8, 0)
    names = [fabric.links.link_name(link) for link in route]
    assert "n1/nic0->p0/leaf0" not in names and names[0] == "n1/gpu0->n1/nvswitch"
    assert latency == pytest.approx(4 * NVLINK_HOP + 2 * GPU_NIC + 2 * NIC_LEAF, rel=1e-12)
    env.run(fabric.transfer(8, 0, 100e6))
    assert env.now == pytest.approx(latency + 100e6 / 50e9, rel=1e-12)


def test_a_degraded_link_keeps_its_share_of_bandwidth():
    graph = FaultSpec(links={"node:n1/nic0": 0.5}).apply_to(load_topology("h800-16"))
    env = simpy.Environment()
    fabric = Fabric(env, graph)
    env.run(fabric.transfer(8, 0, 100e6))
    assert env.now == pytest.approx(2 * GPU_NIC + 2 * NIC_LEAF + 100e6 / 25e9, rel=1e-12)


def test_zero_jitter_is_the_fault_free_step_and_a_seed_repeats():
    run = load_scenario("tiny", schedule="dualpipe")
    clean = MoEStep(Scenario(run), "full").simulate()
    zero = MoEStep(Scenario(run.with_(faults={"jitter_cv": 0.0})), "full").simulate()
    assert zero.step_time_s == clean.step_time_s
    a, b = (MoEStep(Scenario(run.with_(faults={"jitter_cv": 0.05, "seed": 7}))).simulate() for _ in range(2))
    c = MoEStep(Scenario(run.with_(faults={"jitter_cv": 0.05, "seed": 8}))).simulate()
    assert a.step_time_s == b.step_time_s and [r.to_json() for r in a.ranks] == [r.to_json() for r in b.ranks]
    assert c.step_time_s != a.step_time_s
    assert a.step_time_s > clean.step_time_s       # the synchronising points wait for the slowest draw


@pytest.mark.parametrize("schedule", ["1f1b", "dualpipe"])
def test_jitter_of_mean_one_keeps_the_typical_replicas_compute(schedule):
    """Each compute part lasts its time x a draw of mean 1 (cv 0.5), alone or sharing the SMs with
    a kernel: summed over the ranks, the median replica's compute stays within 4% of the fault-free
    one (1.2% here), where dividing by the draws would add about 25% (E[1/x] = 1 + cv^2) and
    dividing only the SM-sharing times about 7% in DualPipe."""
    run = load_scenario("tiny", schedule=schedule)
    clean = MoEStep(Scenario(run), "full").simulate()
    jittered = MoEStep(Scenario(run.with_(faults={"jitter_cv": 0.5, "seed": 1})), "full").simulate()
    ratio = sum(r.replica_compute.median_s for r in jittered.ranks) / \
        sum(r.replica_compute.median_s for r in clean.ranks)
    assert ratio == pytest.approx(1.0, abs=0.04)
    assert jittered.late_send_s == 0.0          # each replica's send leaves at the grid point after its op ends


def test_a_slow_gpu_under_jitter_lasts_its_slowdown_times_each_draw():
    """Both faults at once, for every compute part of an op: the replica's (full, shared-SM) time
    x its GPU's slowdown x that part's draw for that replica, and the healthy replicas' times x
    their draws only."""
    import numpy as np
    run = one_stage(slow_gpus={2: 1.5}, jitter_cv=0.05, seed=7)
    step = MoEStep(Scenario(run))
    sc = step.scenario
    [runner] = step.runners(sc.step_fabric(simpy.Environment()))
    op = sc.schedule.ranks[0][0]
    _, durations, _, stacked, _ = runner._plan(0, op)
    draws = run.faults.jitter(0, 0, runner.replicas, len(durations))
    slow = np.where(sc.layout.gpus_of(0, runner.replicas) == 2, 1.5, 1.0)
    faulty = runner._faulty(0, 0, durations, stacked)
    assert slow.tolist() == [1.0, 1.0, 1.5, 1.0] and len(faulty) == len(durations) > 1
    for (full, shared), (got_full, got_shared), x in zip(durations, faulty, draws):
        assert np.array_equal(got_full, full * (slow * x)) and np.array_equal(got_shared, shared * (slow * x))


def test_jitter_has_the_stated_mean_and_spread():
    import numpy as np
    draws = FaultSpec(jitter_cv=0.2, seed=3).jitter(0, 0, np.arange(2000), 50)
    assert draws.mean() == pytest.approx(1.0, abs=0.005)
    assert draws.std() / draws.mean() == pytest.approx(0.2, rel=0.02)


def test_a_random_fraction_of_slow_gpus_is_seeded():
    f = FaultSpec(slow_fraction=0.25, slow_factor=1.3, seed=4)
    a, b = f.compute_factors(64), f.compute_factors(64)
    assert (a == b).all() and (a == 1.3).sum() == 16 and set(a.tolist()) == {1.0, 1.3}


def test_selectors():
    g = load_topology("h800-16")
    assert select_links(g, "nics:1") and all("n1/nic" in u or "n1/nic" in v for u, v in select_links(g, "nics:1"))
    assert len(select_links(g, "node:n0/nic3")) == 2               # its GPU and its leaf
    assert all("spine" in u or "spine" in v for u, v in select_links(g, "uplinks:p0/leaf0"))
    assert all(u.startswith("p2/") or v.startswith("p2/") for u, v in select_links(g, "plane:2"))


@pytest.mark.parametrize("faults, needle", [
    ({"slow_gpus": {99: 1.2}}, "GPU 99 does not exist; this run has GPUs 0..15"),
    ({"slow_gpus": {3: 0.8}}, "slow_gpus factor of GPU 3 must be"),
    ({"slow_gpus": {3: float("inf")}}, "slow_gpus factor of GPU 3 must be a finite number"),
    ({"jitter_cv": -0.1}, "jitter_cv"),
    ({"links": {"n9/nic0--p0/leaf0": 0}}, "no link n9/nic0--p0/leaf0"),
    ({"links": {"bogus:1": 0}}, "unknown selector 'bogus:1'"),
    ({"links": {"nics:7": 0}}, "matches no link"),
    ({"links": {"node:n1/nic0": 1.5}}, "factor of 'node:n1/nic0' must be"),
    ({"links": {"node:n1/nic0": 1e-300}},      # a subnormal factor once ended a transfer at -inf (a traceback)
     r"factor of 'node:n1/nic0' must be 0 \(failed\) or in \[0.001, 1\] \(at most 1000x slower, as a slow GPU\), "
     r"got 1e-300$"),
    ({"links": {"nics:1": 0}}, "cuts GPU\\(s\\) n1/gpu0, n1/gpu1, n1/gpu2, n1/gpu3, and 4 more off"),
    ({"straggle": 1}, "unknown field\\(s\\) 'straggle'"),
    ({"jitter_cv": 0.05, "send_grid_s": -1e-6},
     r"^RunSpec.faults.send_grid_s \(seconds\) must be a finite number in \[0, 0.01\], got -1e-06$"),
    ({"jitter_cv": 0.05, "send_grid_s": float("nan")},
     r"^RunSpec.faults.send_grid_s \(seconds\) must be a finite number in \[0, 0.01\], got nan$"),
])
def test_bad_faults_are_one_line(faults, needle):
    with pytest.raises((FaultError, SpecError), match=needle):
        MoEStep(Scenario(load_scenario("tiny", faults=faults))).simulate()


def test_faults_refuse_a_representative_pipeline():
    with pytest.raises(SpecError, match="every rank simulated"):
        MoEStep(Scenario(load_scenario("tiny", faults={"jitter_cv": 0.1})), "representative")


def test_the_run_command_prints_what_the_faults_cost(capsys):
    from sim.cli import main
    assert main(["run", "tiny", "--schedule", "1f1b", "--slow-gpu", "5:1.5", "--fail-link", "node:n1/nic0",
                 "--jitter", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "faults: GPU 5 1.5x slower, kernel jitter cv 0.02, node:n1/nic0 failed" in out
    assert "1f1b: the faults cost +" in out and "compute per replica" in out
    assert main(["run", "tiny", "--slow-gpu", "five:1.5"]) == 2
    assert ("--slow-gpu: GPU must be a global GPU index or pp<rank>.dp<replica>[.tp<i>][.cp<i>] (e.g. pp3.dp5), "
            "got 'five'") in capsys.readouterr().err


def test_a_slow_gpu_is_addressed_by_its_place_in_the_layout():
    """``pp<R>.dp<D>`` names the same GPU as its global index ``(R dp + D) tp cp`` and gives the
    same step; tiny at PP2 x DP4: pp1.dp2 is GPU 6. A place outside the layout names the axis."""
    run = load_scenario("tiny", schedule="1f1b", pp=2, dp=4, ep=4)
    by_index = MoEStep(Scenario(run.with_(faults={"slow_gpus": {6: 1.5}}))).simulate()
    by_place = MoEStep(Scenario(run.with_(faults={"slow_gpus": {"pp1.dp2": 1.5}}))).simulate()
    other = MoEStep(Scenario(run.with_(faults={"slow_gpus": {"pp1.dp3": 1.5}}))).simulate()
    assert by_place.step_time_s == by_index.step_time_s
    assert by_place.ranks[1].replica_compute.max_replica == 2 and other.ranks[1].replica_compute.max_replica == 3
    assert FaultSpec(slow_gpus={"pp1.dp2": 1.5}).describe() == "GPU pp1.dp2 1.5x slower"
    with pytest.raises(FaultError, match=r"GPU 'pp2.dp0': pp 2 does not exist; this layout has pp 0..1"):
        Scenario(run.with_(faults={"slow_gpus": {"pp2.dp0": 1.5}})).compute_factors()
    with pytest.raises(FaultError, match=r"GPU must be a global GPU index or pp<rank>"):
        FaultSpec(slow_gpus={"rank1": 1.5})


def test_a_slow_member_of_a_tp_group_slows_its_group():
    """A TP group computes at the pace of its slowest GPU: tiny with TP 2 at PP2 x DP2, the second
    GPU of replica 1's group on rank 0 (pp0.dp1.tp1, GPU 3) slows that replica as its first GPU
    does (GPU 2); a slow GPU outside the layout's groups changes nothing."""
    run = load_scenario("tiny", schedule="1f1b", pp=2, dp=2, ep=2, tp=2, sequence_parallel=True)
    first = MoEStep(Scenario(run.with_(faults={"slow_gpus": {2: 1.5}}))).simulate()
    second = MoEStep(Scenario(run.with_(faults={"slow_gpus": {"pp0.dp1.tp1": 1.5}}))).simulate()
    clean = MoEStep(Scenario(run), "full").simulate()
    assert second.step_time_s == first.step_time_s > clean.step_time_s
    assert second.ranks[0].replica_compute.max_replica == 1


def test_the_run_command_takes_the_send_grid_of_jittered_runs(capsys):
    """``--send-grid US`` sets ``faults.send_grid_s`` (said in the faults line when not the default
    1 ms); without ``--jitter`` it is one line saying so, as is a grid out of range."""
    from sim.cli import main
    assert main(["run", "tiny", "--schedule", "1f1b", "--jitter", "0.02", "--send-grid", "500"]) == 0
    assert "faults: kernel jitter cv 0.02, sends on a 500 us grid (seed 0)" in capsys.readouterr().out
    assert main(["run", "tiny", "--schedule", "1f1b", "--jitter", "0.02", "--send-grid", "1000"]) == 0
    assert "faults: kernel jitter cv 0.02 (seed 0)" in capsys.readouterr().out
    assert main(["run", "tiny", "--schedule", "1f1b", "--jitter", "0.02", "--send-grid", "0"]) == 0
    assert "faults: kernel jitter cv 0.02, sends at their own instants (seed 0)" in capsys.readouterr().out
    assert main(["run", "tiny", "--schedule", "1f1b", "--send-grid", "1000"]) == 2
    assert capsys.readouterr().err.strip() == "error: --send-grid applies to jittered runs only: give --jitter CV too"
    with pytest.raises(SystemExit):                     # argparse's own one-line error
        main(["run", "tiny", "--jitter", "0.02", "--send-grid", "20000"])
    assert "--send-grid: must be a finite number in [0, 10,000], got 20000.0" in capsys.readouterr().err


def test_sends_on_the_grid_land_as_exact_send_times_would_where_they_meet_no_other():
    """tiny, 5% jitter: the default grid is tiny's sends' own time alone (262,144 bytes at 160 GB/s,
    1.6384 us; 1 ms asked for) and each send lands as if it had left when due. Under 1F1B, DualPipe
    and ZB-H1 that is the step of exact send times (grid 0), to rounding. Under DualPipeV sends
    meet other sends on NVLink more often (59 times in this step against DualPipe's 8) and the
    grid lets each meet the traffic of its grid point, not of its due time: the step moves, by
    less than one grid per pipeline send (2 x (PP - 1) x M sends, a loose bound), 0.4% here; a
    1 us grid moves it less."""
    def step(schedule, **grid):
        faults = {"jitter_cv": 0.05, "seed": 3, **grid}
        return MoEStep(Scenario(load_scenario("tiny", schedule=schedule, faults=faults))).simulate().step_time_s
    for schedule in ("1f1b", "dualpipe", "zb-h1"):
        assert step(schedule) == pytest.approx(step(schedule, send_grid_s=0.0), rel=1e-12, abs=0), schedule
    exact, default, fine = step("dualpipev", send_grid_s=0.0), step("dualpipev"), step("dualpipev", send_grid_s=1e-6)
    run = load_scenario("tiny")
    assert 0 < abs(default - exact) < 2 * (run.pp - 1) * run.microbatches * 262144 / 160e9
    assert abs(fine - exact) < abs(default - exact)
