"""sim.moe.memory: HBM per rank by formula."""
import pytest

from sim.moe.scenario import Scenario
from sim.moe.specs import load_scenario
from sim.moe.step import simulate_step


def test_memory_accounting_and_warning():
    step = Scenario(load_scenario("tiny", schedule="dualpipe"))
    one = Scenario(load_scenario("tiny", schedule="1f1b"))
    # DualPipe holds two stages per rank: twice the parameters of a 1F1B rank holding the same stage
    assert step.memory[0].params_gb > 1.5 * one.memory[0].params_gb
    assert step.memory[0].grads_gb == pytest.approx(2 * step.memory[0].params_gb)
    res = simulate_step(load_scenario("tiny", activation_factor=5e6))
    assert res.warnings and "does not fit" in res.warnings[0]


def test_optimizer_states_shard_dense_over_dp_and_experts_over_dp_over_ep():
    from sim.moe.memory import stage_params
    sc = Scenario(load_scenario("tiny", schedule="1f1b", optimizer_bytes=8.0))
    run, m = sc.run, sc.memory[1]
    dense, expert = stage_params(sc.model, run, sc.chunk, 1)
    assert m.optimizer_gb * 1e9 == pytest.approx(8.0 * (dense / run.dp + expert / (run.dp // run.ep)))
    assert m.params_gb * 1e9 == pytest.approx((dense + expert) * run.weight_bytes)
