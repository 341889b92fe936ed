"""sim.plan_screen: the analytical network's step timed without SimPy, a lower bound on the step."""
import pytest

from sim.plan_screen import last_rank, screen_blocker, screen_step_s, tail_s
from sim.planner import PlanRequest, candidates, evaluate, run_spec, screen
from sim.training.dpsync import norm_allreduce_s, optimizer_seconds, stage_param_counts
from sim.training.model.faults import FaultSpec
from sim.training.model.params import ParamCount
from sim.training.model.specs import RunSpec, load_scenario
from sim.training.scenario import Scenario
from sim.training.step import simulate_step


def test_every_candidate_of_a_small_plan_takes_at_least_its_screen():
    """Each schedule, TP, PP, recomputation, precision and ZeRO stage of a small MoE plan on two
    nodes: the screen is below the simulated step, and above the compute bound it refines."""
    ok, _ = candidates(PlanRequest(gpus=16, model="tiny-moe", topology="h800-16", global_batch=32, seq_len=256,
                                   pps=(2, 4), eps=(4,), tps=(1, 2), node_limit=1,
                                   schedules=("1f1b", "zb-h1", "dualpipe", "dualpipev", "interleaved-1f1b")))
    seen, tighter = set(), 0
    for p in ok:
        key = (p["schedule"], p["tp"], p["pp"], p["memory_policy"], p["gemm_precision"], p["zero_stage"])
        if key in seen:
            continue
        seen.add(key)
        bound = screen(p)["screen_s"]
        assert float(p["bound_s"]) <= bound <= evaluate(p)["step_time_s"], p
        tighter += bound > float(p["bound_s"]) * 1.01
    assert len({k[0] for k in seen}) == 5 and len(seen) >= 15 and tighter == len(seen)


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1", "dualpipe"])
def test_with_nothing_to_share_the_screen_is_the_step(schedule):
    """A dense model over two pipeline ranks of one node, one replica: no transfer ever meets
    another (a send at a time on its own NVLink, no data-parallel group), so the max-min step and
    the screen time the same ops, sends and optimizer step."""
    run = RunSpec(model="megatron-gpt-1.7b", gpu="h800", topology="h800-node", pp=2, ep=1, dp=1, schedule=schedule,
                  microbatches=4, seq_len=1024)
    assert screen_step_s(run) == pytest.approx(simulate_step(run).step_time_s, rel=1e-9)


def test_the_screen_is_below_the_analytical_networks_own_step():
    """The analytical network's full step adds every stage's data-parallel synchronisation and the
    pipeline's waits at its blocking exchanges, which the screen leaves out or takes alone."""
    run = RunSpec(model="tiny-moe", gpu="h800", topology="h800-16", pp=2, ep=4, dp=8, schedule="interleaved-1f1b",
                  microbatches=8, seq_len=256, chunks=2, node_limit=1, pipeline_sends="blocking")
    assert 0 < screen_step_s(run) <= simulate_step(run.with_(network="analytical")).step_time_s


def test_skewed_routing_and_faults_have_no_screen():
    base = run_spec({"model": "tiny-moe", "gpu": "h800", "topology": "h800-16", "pp": 2, "ep": 4, "dp": 8,
                     "schedule": "1f1b", "microbatches": 8, "seq_len": 256, "microbatch_size": 1,
                     "gemm_precision": "bf16", "node_limit": 1, "memory_policy": "none", "zero_stage": 1,
                     "last_stage_layers": 0})
    assert screen_blocker(base) == ""
    skewed = base.with_(routing_skew=0.5)
    assert screen_blocker(skewed).startswith("routing skew 0.5")
    jitter = base.with_(faults=FaultSpec(jitter_cv=0.1))
    assert screen_blocker(jitter).startswith("faults")
    with pytest.raises(ValueError, match="the screen does not bound a step with routing skew"):
        screen_step_s(skewed)


NV, LAT, LAUNCH = 160e9, 3.3e-6, 10.02e-6    # NVLink per direction, GPU -> NVSwitch -> GPU, an NCCL launch (deepep)


def ring(n, nbytes):
    """A ring reduce-scatter or all-gather of nbytes per GPU inside one NVLink node, alone."""
    return (n - 1) / n * nbytes / NV + (n - 1) * LAT


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_the_tail_by_hand(zero):
    """Tiny scenario (PP4 x DP4, rank 3's data-parallel group 4 GPUs of one node), 1F1B: rank 3's
    last op completes its stage, whose gradients (4 bytes a parameter) go round a 4-GPU ring after
    a launch (twice under ZeRO-0: reduce-scatter then all-gather; under ZeRO-3 only the head's, the
    layers' were scattered inside the ops); then the norm all-reduce, and the optimizer steps, rank
    3's followed by its BF16 all-gather under ZeRO-1 and 2 (as tests/test_dpsync.py's step)."""
    sc = Scenario(load_scenario("tiny", schedule="1f1b", zero_stage=zero, kernels="deepep", nccl_protocol="none"))
    counts = stage_param_counts(sc)
    (count,) = counts[3].values()
    optimizer = [optimizer_seconds(sc, sum(c.values(), ParamCount(0.0, 0.0))) for c in counts.values()]
    norm = norm_allreduce_s(sc)
    head = sc.model.vocab * sc.model.hidden
    reduce = {0: 2 * (LAUNCH + ring(4, 4 * count.dense)), 3: LAUNCH + ring(4, 4 * head)}.get(
        zero, LAUNCH + ring(4, 4 * count.dense))
    gather = LAUNCH + ring(4, 2 * count.dense) if zero in (1, 2) else 0.0
    assert tail_s(sc, 3) == pytest.approx(reduce + norm + max(optimizer[3] + gather, max(optimizer)), rel=1e-9)
    bypass = Scenario(sc.run.with_(optimizer_sync="bypass"))
    assert tail_s(bypass, 3) == pytest.approx(reduce + optimizer[3] + gather, rel=1e-9)


def test_the_last_rank_is_the_one_that_ends_last():
    assert last_rank({0: 5.0, 1: 3.0, 2: 4.0}) == 0
    assert last_rank({0: 1.0, 1: 2.0, 2: 2.0}) == 1


def test_an_order_that_deadlocks_is_named(monkeypatch):
    import sim.plan_screen as screen_module
    monkeypatch.setattr(screen_module, "rank_ends", lambda *a: None)
    run = RunSpec(model="megatron-gpt-1.7b", gpu="h800", topology="h800-node", pp=2, ep=1, dp=1, schedule="1f1b",
                  microbatches=4, seq_len=1024)
    with pytest.raises(RuntimeError, match="schedule '1f1b' deadlocks in the screen's timing"):
        screen_module.screen_step_s(run)
