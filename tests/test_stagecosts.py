"""sim.training.costs.stagecosts: the profile Zero Bubble's search reads from a scenario: each stage's F, I, W
from the chunk model, one send's time from the route, each op's memory balancing to zero."""
import networkx as nx
import pytest

from sim.training.costs.stagecosts import send_seconds, stage_costs, stage_times
from sim.training.model.layout import Layout, LayoutRequest
from sim.training.model.specs import load_scenario
from sim.training.scenario import Scenario


@pytest.fixture(scope="module")
def tiny():
    return Scenario(load_scenario("tiny", schedule="1f1b"))


def test_stage_times_are_the_chunk_models_parts(tiny):
    f, i, w = stage_times(tiny.chunk)
    for s in range(tiny.chunk.num_stages):
        layers, ends = tiny.chunk.stage_work(s)
        assert f[s] == pytest.approx(sum(c.forward for c in layers) + ends.embed_f + ends.head_f)
        assert w[s] == pytest.approx(sum(c.backward_w for c in layers) + ends.head_w + ends.embed_w)
        assert i[s] > 0 and w[s] > 0
    assert f[-1] > f[1]                    # the heads and the loss sit on the last stage


def test_one_send_by_hand():
    """Two GPUs through one switch: 1 GB over the slower 10 GB/s link plus both links' latency."""
    g = nx.Graph(gpus=["g0", "g1"], gpus_per_node=1)
    g.add_edge("g0", "sw", bandwidth=10e9, latency=1e-6)
    g.add_edge("sw", "g1", bandwidth=40e9, latency=2e-6)
    layout = Layout.check(LayoutRequest(2, 1, 1, 1, 2, "two", 0))
    assert send_seconds(g, layout, 1e9) == pytest.approx(0.1 + 3e-6)
    one = Layout.check(LayoutRequest(1, 2, 1, 1, 2, "two", 0))
    assert send_seconds(g, one, 1e9) == 0.0


def test_the_profile_balances_and_builds_the_searched_orders(tiny):
    c = stage_costs(tiny.model, tiny.run, tiny.chunk, tiny.graph, tiny.layout)
    assert len(c.f) == tiny.run.pp and c.comm > 0
    for s in range(tiny.run.pp):
        assert c.mem_f[s] > 0 and c.mem_f[s] + c.mem_i[s] + c.mem_w[s] == pytest.approx(0, abs=1e-6 * c.mem_f[s])
    for name in ("zb-1p", "zb-2p"):
        sc = tiny.with_schedule(name)
        assert sc.schedule.name == name and sc.schedule.num_stages == tiny.run.pp
