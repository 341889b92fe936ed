"""sim.training.scenario: a run assembled once, with every layout rule checked there."""
import pytest

from sim.training.model.specs import SpecError, load_scenario
from sim.training.scenario import Scenario
from topologies import load_topology


def test_step_refuses_bad_layouts():
    with pytest.raises(SpecError, match="cannot be split over 16"):
        Scenario(load_scenario("tiny", pp=8, dp=2, ep=2, microbatches=16, schedule="dualpipev"))
    with pytest.raises(SpecError, match="has 16"):
        Scenario(load_scenario("tiny", dp=8, ep=4))
    with pytest.raises(SpecError, match="must divide the 8 GPUs per node"):
        Scenario(load_scenario("tiny", ep=3, dp=3))


def test_scenario_assembles_once_and_shares_its_topology():
    sc = Scenario(load_scenario("tiny"))
    assert sc.layout.gpus == 16 and sc.schedule.name == "dualpipe" and sc.chunk.num_stages == 4
    assert sc.sm_slowdown == pytest.approx(132 / 112)
    assert sc.token_bytes() == {"dispatch": 256 + 4 * 2, "combine": 2 * 256}
    other = sc.with_schedule("1f1b")
    assert other.run.schedule == "1f1b" and other.graph is sc.graph
    assert other.links is sc.links                           # built once, shared
    assert Scenario(sc.run, links=sc.links).links is sc.links
    assert Scenario(sc.run).topology is sc.topology          # a named topology is shared in a process


def test_memory_needs_no_link_table(monkeypatch):
    import sim.training.scenario as scenario_module

    def refuse(*_):
        raise AssertionError("the memory model built a link table")
    monkeypatch.setattr(scenario_module, "LinkTable", refuse)
    sc = Scenario(load_scenario("deepseek-v3"), graph=load_topology("h800-2048"))
    assert len(sc.memory) == 16 and "links" not in vars(sc.topology)


def test_what_a_communication_kernel_takes_from_the_compute_beside_it():
    """DeepSeek-V3's all-to-all kernels hold 20 SMs and move at most 20 x 10.5 GB/s each way:
    2 x 210 GB/s of HBM traffic, 17.9% of the H800's 3.35 TB/s x 0.7 that memory-bound kernels
    get; the ``ideal`` kernels (no SM bound) take SMs but no HBM; no SMs, nothing. Its chunk model
    carries them into every layer part's ratio."""
    sc = Scenario(load_scenario("deepseek-v3"))
    assert sc.beside_comm == (20, pytest.approx(2 * 20 * 10.5e9 / (3.35e12 * 0.7), rel=1e-12))
    assert sc.chunk.beside_comm == sc.beside_comm
    assert {k for k, _ in sc.chunk.layer_cost(True).beside} >= {"attn_f", "mlp_f", "mlp_i", "attn_i"}
    ratios = dict(sc.chunk.layer_cost(False).beside) | {f"moe {k}": v for k, v in sc.chunk.layer_cost(True).beside}
    low, high = min(ratios, key=ratios.get), max(ratios, key=ratios.get)    # docs/model.md quotes them
    assert (round(ratios[low], 3), round(ratios[high], 3)) == (1.168, 1.213) and (low, high) == ("attn_f", "mlp_r")
    assert Scenario(load_scenario("deepseek-v3", kernels="ideal")).beside_comm == (20, 0.0)
    assert Scenario(load_scenario("deepseek-v3", comm_sms=0)).beside_comm == (0, 0.0)
    assert Scenario(load_scenario("deepseek-v3", comm_sms=0)).chunk.layer_cost(True).beside == ()


def test_sm_slowdown_without_communication_sms():
    assert Scenario(load_scenario("tiny", comm_sms=0)).sm_slowdown == 1.0
