"""sim.network.timeline: per-link utilization per time bin, worked by hand."""
import networkx as nx
import numpy as np
import pytest
import simpy

from sim.network import Fabric, LinkTimeline


def chain():
    g = nx.Graph()
    for n in ("a", "b"):
        g.add_node(n, type="gpu")
    g.add_edge("a", "b", bandwidth=100.0, latency=0.0)
    g.graph["gpus"] = ["a", "b"]
    return g


def test_a_transfer_fills_the_bins_it_spans():
    """250 B over a 100 B/s link from t = 0.5 s: busy 0.5-3.0 s. Bins of 1 s: 50%, 100%, 100%,
    then idle (the fabric tells the timeline when the link empties). Then a second transfer at
    t = 4.5 s of 50 B: bin 4 at 50%."""
    env = simpy.Environment()
    fab = Fabric(env, chain())
    tl = LinkTimeline(fab, bin_s=1.0, max_bins=8)
    env.timeout(0.5).callbacks.append(lambda _e: fab.transfer(0, 1, 250.0))
    env.timeout(4.5).callbacks.append(lambda _e: fab.transfer(0, 1, 50.0))
    env.run()
    tl.finish()
    df = tl.utilization()
    link = fab.links.route(0, 1)[0][0]
    assert df["link"].unique().tolist() == [fab.links.link_name(int(link))]
    assert df["utilization"].tolist() == pytest.approx([0.5, 1.0, 1.0, 0.0, 0.5])
    assert tl.bytes.sum() == pytest.approx(300.0)


def test_a_long_run_merges_bins_and_keeps_every_byte():
    """Bins double in width when the run outgrows them: 4 bins of 1 s cannot hold 10 s, so they
    become 4 of 4 s; every byte stays counted and utilization is per the wider bins."""
    env = simpy.Environment()
    fab = Fabric(env, chain())
    tl = LinkTimeline(fab, bin_s=1.0, max_bins=4)
    fab.transfer(0, 1, 1000.0)                     # 0-10 s at full speed
    env.run()
    tl.finish()
    assert tl.bin_s == 4.0 and tl.bytes.sum() == pytest.approx(1000.0)
    assert tl.utilization()["utilization"].tolist() == pytest.approx([1.0, 1.0, 0.5])
    assert np.isclose(tl.bytes[:, :].sum(axis=1), [400, 400, 200, 0]).all()


def test_bad_bins_are_refused():
    with pytest.raises(ValueError, match="bin_s must be > 0"):
        LinkTimeline(Fabric(simpy.Environment(), chain()), bin_s=0)
