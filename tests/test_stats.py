"""sim.network.stats: per-link bytes, busy time and utilization of one transfer worked by hand."""
import pytest
import simpy

from sim.network import Fabric, busiest_links, link_stats
from topologies import load_topology


def test_one_transfer_by_hand():
    """100 MB GPU 0 -> GPU 8 on h800-16 crosses 4 links at 50 GB/s: each carries 1e8 bytes,
    is busy 2 ms, peak 100%; mean utilization over the 2.0028 ms window is 2 / 2.0028."""
    env = simpy.Environment()
    fab = Fabric(env, load_topology("h800-16"))
    env.run(fab.transfer(0, 8, 1e8))
    df = link_stats(fab)
    assert len(df) == 4 and df["bytes"].tolist() == pytest.approx([1e8] * 4)
    assert df["busy_s"].tolist() == pytest.approx([2e-3] * 4)
    assert df["peak_util"].tolist() == pytest.approx([1.0] * 4)
    assert df["mean_util"].tolist() == pytest.approx([2e-3 / 2.0028e-3] * 4)
    assert set(df["kind"]) == {"pcie", "ib"} and df["bandwidth_GBps"].tolist() == [50.0] * 4
    top = busiest_links(fab, 2)
    assert len(top) == 2 and top[0]["bytes"] == pytest.approx(1e8)
    assert len(link_stats(fab, only_used=False)) == len(fab.links)


def test_mean_utilization_over_a_given_window():
    """The same 100 MB transfer seen over a 4 ms window: 1e8 B / (50 GB/s x 4 ms) = 0.5."""
    env = simpy.Environment()
    fab = Fabric(env, load_topology("h800-16"))
    env.run(fab.transfer(0, 8, 1e8))
    assert busiest_links(fab, 1, window_s=4e-3)[0]["mean_util"] == pytest.approx(0.5)
    assert link_stats(fab, window_s=4e-3)["mean_util"].tolist() == pytest.approx([0.5] * 4)


def test_columns_order_and_edge_cases():
    """Two transfers of different sizes on separate planes (8 links): the documented columns,
    heaviest links first (then by name), names that match src and dst, five busiest by default; a half-byte
    transfer still shows on its links; a fabric that never ran has zero utilisation, not 0/0."""
    env = simpy.Environment()
    fab = Fabric(env, load_topology("h800-16"))
    env.run(env.all_of([fab.transfer(0, 8, 1e8), fab.transfer(1, 9, 5e7)]))
    df = link_stats(fab)
    assert list(df.columns) == ["link", "src", "dst", "kind", "bandwidth_GBps", "bytes", "busy_s", "peak_util",
                                "mean_util"]
    assert df["bytes"].tolist() == pytest.approx([1e8] * 4 + [5e7] * 4)
    assert df["link"].tolist()[:4] == sorted(df["link"].tolist()[:4])       # equal bytes: by name
    assert (df["link"] == df["src"] + "->" + df["dst"]).all() and df["src"].iloc[0] != df["dst"].iloc[0]
    assert len(busiest_links(fab)) == 5
    env = simpy.Environment()
    tiny = Fabric(env, load_topology("h800-16"))
    env.run(tiny.transfer(0, 8, 0.5))
    assert link_stats(tiny)["bytes"].tolist() == pytest.approx([0.5] * 4)
    idle = Fabric(simpy.Environment(), load_topology("h800-16"))
    assert (link_stats(idle, only_used=False)["mean_util"] == 0.0).all()
