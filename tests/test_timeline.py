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
    fab = Fabric(simpy.Environment(), chain())
    for bad in ({"bin_s": 0}, {"bin_s": float("nan")}, {"max_bins": 1}):
        with pytest.raises(ValueError, match="bin_s must be > 0"):
            LinkTimeline(fab, **bad)
    assert LinkTimeline(fab, max_bins=2).bytes.shape == (2, len(fab.links))
    default = LinkTimeline(fab)                                     # 256 bins of 1 ms
    assert default.bin_s == 1e-3 and default.bytes.shape == (256, len(fab.links))


def run_chain(transfers, bin_s=1.0, max_bins=4, bandwidth=100.0, until=None):
    """A timeline of ``transfers`` [(start s, bytes)] from a to b over one link of ``bandwidth`` B/s."""
    g = chain()
    g.edges["a", "b"]["bandwidth"] = bandwidth
    env = simpy.Environment()
    fab = Fabric(env, g)
    tl = LinkTimeline(fab, bin_s=bin_s, max_bins=max_bins)
    for start, nbytes in transfers:
        env.timeout(start).callbacks.append(lambda _e, n=nbytes: fab.transfer(0, 1, n))
    env.run(until)
    return env, fab, tl


def test_rates_that_change_within_a_bin_add_up_in_it():
    """50 B at t = 0 and 50 B more at t = 0.25 s share the 100 B/s link: 0-0.25 s at 100 B/s
    (25 B), then two flows at 50 B/s each until the first ends at 0.75 s, then the second alone
    until 1.0 s. Bin 0 holds all 100 B: 100%."""
    _, _, tl = run_chain([(0.0, 50.0), (0.25, 50.0)])
    tl.finish()
    assert tl.utilization()["utilization"].tolist() == pytest.approx([1.0])


def test_traffic_up_to_the_last_bin_fills_it_without_merging():
    """400 B at 100 B/s end exactly at 4 bins x 1 s: all four bins full, none merged."""
    _, _, tl = run_chain([(0.0, 400.0)])
    tl.finish()
    assert tl.bin_s == 1.0 and tl.utilization()["utilization"].tolist() == pytest.approx([1.0] * 4)


def test_bins_merged_after_traffic_keep_their_bytes_odd_count_too():
    """300 B in 0-3 s lands in bins 0-2; 200 B more in 6-8 s outgrows 4 (or 5) bins of 1 s, so bins
    merge pairwise (an odd count's last alone) into bins of 2 s: 200, 100, 0, 200; every byte is
    still there."""
    for max_bins, width, want in ((4, 2.0, [200, 100, 0, 200]), (5, 2.0, [200, 100, 0, 200, 0])):
        _, _, tl = run_chain([(0.0, 300.0), (6.0, 200.0)], max_bins=max_bins)
        tl.finish()
        assert tl.bin_s == width and tl.bytes[:, 0].sum() + tl.bytes[:, 1].sum() == pytest.approx(500.0)
        assert tl.bytes.sum(axis=1).tolist() == pytest.approx(want)
    # 50 B already in bin 4 (4.5-5 s) when 100 B at 9-10 s makes 5 bins of 1 s merge: it stays.
    _, _, tl = run_chain([(0.0, 300.0), (4.5, 50.0), (9.0, 100.0)], max_bins=5)
    tl.finish()
    assert tl.bin_s == 2.0 and tl.bytes.sum(axis=1).tolist() == pytest.approx([200, 100, 50, 0, 100])


def test_an_idle_tail_does_not_merge_bins():
    """Traffic in 0-1 s, then nothing until 10 s: the bins need not cover the idle tail."""
    env, _, tl = run_chain([(0.0, 100.0)])
    env.run(until=10.0)
    tl.finish()
    assert tl.bin_s == 1.0 and tl.utilization()["utilization"].tolist() == pytest.approx([1.0])


def test_finish_credits_up_to_the_time_given_and_can_be_called_again():
    """1000 B at 100 B/s: stopped at 2 s, finish(3.0) credits 3 s of the rate (300 B); running on
    to 4 s and finishing again adds only 3-4 s."""
    env, _, tl = run_chain([(0.0, 1000.0)], max_bins=16, until=2.0)
    tl.finish(3.0)
    assert tl.bytes.sum() == pytest.approx(300.0)
    env.run(until=4.0)
    tl.finish()
    assert tl.bytes.sum() == pytest.approx(400.0)


def test_slow_links_and_half_bytes_count():
    """A link of 0.5 B/s carrying 1 B (2 s at full rate) and one that carried only 0.5 B are
    listed with their bins."""
    _, _, tl = run_chain([(0.0, 1.0)], bandwidth=0.5)
    tl.finish()
    assert tl.utilization()["utilization"].tolist() == pytest.approx([1.0, 1.0])
    _, _, tl = run_chain([(0.0, 0.5)], bandwidth=100.0, bin_s=0.01)
    tl.finish()
    assert tl.utilization()["utilization"].tolist() == pytest.approx([0.5])


def test_default_lists_the_sixteen_busiest_links_indexed_from_zero():
    """18 GPUs on one switch: GPU 0 sends GPU i (1..17) i bytes. Default: the 16 busiest links
    (GPU 0's uplink first, then the downlinks to 17, 16, ...), rows indexed 0..n-1; given links
    without traffic, no rows, and the table keeps its columns."""
    g = nx.Graph()
    g.add_node("sw", type="switch")
    for i in range(18):
        g.add_node(f"g{i}", type="gpu")
        g.add_edge(f"g{i}", "sw", bandwidth=100.0, latency=0.0)
    g.graph["gpus"] = [f"g{i}" for i in range(18)]
    env = simpy.Environment()
    fab = Fabric(env, g)
    tl = LinkTimeline(fab, bin_s=1.0, max_bins=4)
    idle = LinkTimeline(fab, bin_s=1.0, max_bins=4)
    fab.observers.remove(idle._observe)
    for i in range(1, 18):
        fab.transfer(0, i, float(i))
    env.run()
    tl.finish()
    df = tl.utilization()
    links = df["link"].unique().tolist()
    assert len(links) == 16 and links[0] == fab.links.link_name(int(fab.links.route(0, 1)[0][0]))
    assert links[1:3] == [fab.links.link_name(int(fab.links.route(0, i)[0][-1])) for i in (17, 16)]
    assert df.index.tolist() == list(range(len(df)))
    empty = idle.utilization(links=np.array([0]))
    assert empty.empty and empty.columns.tolist() == ["time_s", "bin_s", "link", "kind", "utilization"]
    assert idle.utilization().columns.tolist() == ["time_s", "bin_s", "link", "kind", "utilization"]


def test_engines_that_bind_stay_out_of_the_timeline():
    """A fabric with ``gpu_rate`` below the link's bandwidth adds an outgoing and an incoming engine
    per GPU after the topology's links, and a transfer crosses them: the engines carry a rate.
    The timeline holds the topology's links only, so the engines must not reach it (they did: an
    IndexError on every H100 cluster, whose 450 GB/s NVLink is faster than the comm kernels' rate,
    while 160 GB/s H800 NVLink never let the engines bind). 100 B at the 40 B/s engine: 2.5 s."""
    env = simpy.Environment()
    fab = Fabric(env, chain(), gpu_rate=40.0)
    tl = LinkTimeline(fab, bin_s=1.0, max_bins=4)
    seen = []
    fab.observers.append(lambda now, rates: seen.append(rates.size))
    fab.transfer(0, 1, 100.0)
    env.run()
    tl.finish()
    assert env.now == pytest.approx(2.5)
    assert set(seen) == {len(fab.links)}
    assert tl.bytes.sum() == pytest.approx(100.0)
    assert tl.utilization()["utilization"].tolist() == pytest.approx([0.4, 0.4, 0.2])
