"""The analytical network backend: alone it is the max-min fabric to the last bit; beside other
traffic it is never slower; its link statistics by hand; one interface for both."""
import networkx as nx
import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.checks import InputError
from sim.network import (
    NETWORK_BACKENDS,
    AnalyticalNetwork,
    Fabric,
    LinkTimeline,
    Network,
    build_network,
    link_stats,
    p2p_load,
    ring_all_reduce,
)
from topologies import load_topology


def line(*caps):
    """GPUs g0 - g1 - ... joined by links of ``caps`` bytes/s, 1 us latency each."""
    g = nx.Graph()
    names = [f"g{i}" for i in range(len(caps) + 1)]
    for n in names:
        g.add_node(n, type="gpu")
    for i, cap in enumerate(caps):
        g.add_edge(names[i], names[i + 1], bandwidth=cap, latency=1e-6)
    g.graph["gpus"] = names
    return g


def ends(backend, graph, transfers, gpu_rate=None):
    """End time of each (start, src, dst, bytes) on a fresh network of ``backend``."""
    env = simpy.Environment()
    net = build_network(env, graph, backend, gpu_rate=gpu_rate)
    out = [None] * len(transfers)
    for i, (start, src, dst, nbytes) in enumerate(transfers):
        net.transfer_at(start, src, dst, nbytes, lambda i=i: out.__setitem__(i, env.now))
    env.run()
    return out, net


CALLS = ("env", "links", "observers", "recomputations", "num_gpus", "transfer", "transfer_at", "route_set",
         "transfer_set", "transfer_bundle", "route_bandwidth", "sync", "link_bytes", "link_busy_s", "link_peak_util",
         "bytes_sent", "bytes_received")


@pytest.mark.parametrize("backend", NETWORK_BACKENDS)
def test_both_backends_are_networks(backend):
    """Every call and attribute of the Network protocol is there, on both backends."""
    assert all(name in vars(Network) or name in Network.__annotations__ for name in CALLS)
    net = build_network(simpy.Environment(), line(1e9), backend)
    assert all(hasattr(net, name) for name in CALLS)


@pytest.mark.parametrize("gpu_rate", [None, 20e9])
def test_a_transfer_alone_takes_what_the_fabric_gives_it_to_the_last_bit(gpu_rate):
    """One transfer at a time (each ends before the next starts) on h800-16: the same end times."""
    graph = load_topology("h800-16")
    transfers = [(0.01 * i, src, dst, nbytes) for i, (src, dst, nbytes) in
                 enumerate([(0, 8, 100e6), (3, 5, 7e6), (15, 2, 1.5e5), (9, 9, 1e6), (4, 12, 0.0)])]
    assert ends("analytical", graph, transfers, gpu_rate)[0] == ends("maxmin", graph, transfers, gpu_rate)[0]


def test_the_worked_transfer_by_hand():
    """docs/network.md's transfer: 100 MB from GPU 0 to GPU 8 of h800-16, latency 2.8 us, 50 GB/s."""
    (end,), _ = ends("analytical", load_topology("h800-16"), [(0.0, 0, 8, 100e6)])
    assert end == pytest.approx(2.8e-6 + 100e6 / 50e9, rel=1e-12)


def test_two_transfers_on_one_link_do_not_slow_each_other():
    """g0 -10 GB/s- g1: two 10 GB transfers at once. Max-min: 2 s each (+1 us); analytical: 1 s, and
    the link carried twice its bandwidth."""
    transfers = [(0.0, 0, 1, 10e9), (0.0, 0, 1, 10e9)]
    fast, net = ends("analytical", line(10e9), transfers)
    slow, _ = ends("maxmin", line(10e9), transfers)
    assert fast == [pytest.approx(1e-6 + 1.0)] * 2 and slow == [pytest.approx(1e-6 + 2.0)] * 2
    stats = link_stats(net)
    assert stats.loc[0, "bytes"] == pytest.approx(20e9) and stats.loc[0, "peak_util"] == pytest.approx(2.0)
    assert stats.loc[0, "busy_s"] == pytest.approx(1.0)


def test_link_statistics_by_hand():
    """g0 -10 GB/s- g1 -5 GB/s- g2: 10 GB g0->g1 from 0 (ends 1 s + 1 us), 5 GB g1->g2 from 0.5 s
    (1 s at 5 GB/s), 10 GB g0->g2 from 3 s (2 s at 5 GB/s, latency 2 us): link g0->g1 busy 1 + 2 s,
    peak 1 (its own transfers) then 0.5; link g1->g2 busy 1 + 2 s, 15 GB."""
    transfers = [(0.0, 0, 1, 10e9), (0.5, 1, 2, 5e9), (3.0, 0, 2, 10e9)]
    got, net = ends("analytical", line(10e9, 5e9), transfers)
    assert got == [pytest.approx(1 + 1e-6), pytest.approx(1.5 + 1e-6), pytest.approx(5 + 2e-6)]
    stats = link_stats(net).set_index("link")
    assert stats.loc["g0->g1", "bytes"] == pytest.approx(20e9)
    assert stats.loc["g1->g2", "bytes"] == pytest.approx(15e9)
    assert stats.loc["g0->g1", "busy_s"] == pytest.approx(3.0)
    assert stats.loc["g1->g2", "busy_s"] == pytest.approx(3.0)
    assert stats.loc["g0->g1", "peak_util"] == pytest.approx(1.0)
    assert stats.loc["g1->g2", "peak_util"] == pytest.approx(1.0)


def test_statistics_read_mid_run_count_only_what_has_drained():
    """Half-way through a 1 s transfer at 10 GB/s, the link has carried 5 GB and been busy 0.5 s."""
    env = simpy.Environment()
    net = AnalyticalNetwork(env, line(10e9))
    net.transfer(0, 1, 10e9)
    env.run(until=1e-6 + 0.5)
    assert net.link_bytes[0] == pytest.approx(5e9) and net.link_busy_s[0] == pytest.approx(0.5)
    env.run()
    assert net.link_bytes[0] == pytest.approx(10e9) and net.link_busy_s[0] == pytest.approx(1.0)


def test_overlapping_transfers_count_their_busy_time_once():
    """[0, 2] and [1, 3] s at half the link each: busy 3 s, peak 1 (both at once)."""
    transfers = [(0.0, 0, 1, 10e9), (1.0, 0, 1, 10e9)]
    _, net = ends("analytical", line(5e9), transfers)
    assert net.link_busy_s[0] == pytest.approx(3.0)
    assert net.link_peak_util[0] == pytest.approx(2.0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e-3), st.integers(0, 15), st.integers(0, 15), st.floats(0, 1e8)),
                min_size=1, max_size=12))
def test_analytical_is_never_slower_than_max_min(transfers):
    """Every transfer ends no later than on the max-min fabric (whose rates never exceed a route's
    least bandwidth), and both carry the same bytes on the same links."""
    graph = load_topology("h800-16")
    fast, a = ends("analytical", graph, transfers)
    slow, m = ends("maxmin", graph, transfers)
    assert all(f <= s * (1 + 1e-9) for f, s in zip(fast, slow))
    np.testing.assert_allclose(a.link_bytes, m.link_bytes, rtol=1e-9, atol=1e-3)
    np.testing.assert_array_equal(a.bytes_sent, m.bytes_sent)


@pytest.mark.parametrize("min_seconds", [0.0, 1e-3, 3e-3])
def test_a_bundle_alone_takes_what_the_fabric_gives_it(min_seconds):
    """Four flows 0->8 and one 1->9 as one bundle (2 ms on the busier route), no faster than
    ``min_seconds``: the same time on both backends."""
    graph = load_topology("h800-16")
    times = {}
    for backend in NETWORK_BACKENDS:
        env = simpy.Environment()
        net = build_network(env, graph, backend)
        load = p2p_load(net.links, [(0, 8)] * 4 + [(1, 9)], 25e6)
        env.run(net.transfer_bundle(load, min_seconds=min_seconds))
        times[backend] = env.now
    assert times["analytical"] == pytest.approx(times["maxmin"], rel=1e-12)
    assert times["maxmin"] == pytest.approx(max(min_seconds, 2e-3) + 2.8e-6, rel=1e-9)


def test_a_ring_alone_is_the_same_on_both_backends():
    """A ring all-reduce over one node's 8 GPUs: each step's sends use links of their own."""
    graph = load_topology("h800-node")
    times = {}
    for backend in NETWORK_BACKENDS:
        env = simpy.Environment()
        env.run(ring_all_reduce(build_network(env, graph, backend), list(range(8)), 64e6))
        times[backend] = env.now
    assert times["analytical"] == pytest.approx(times["maxmin"], rel=1e-12)


def test_a_timeline_sees_what_the_links_carried():
    env = simpy.Environment()
    net = AnalyticalNetwork(env, line(10e9, 5e9))
    timeline = LinkTimeline(net, bin_s=0.25, max_bins=64)
    net.transfer(0, 1, 10e9)
    net.transfer_at(0.5, 1, 2, 5e9, lambda: None)
    env.run()
    timeline.finish()
    np.testing.assert_allclose(timeline.bytes.sum(axis=0), net.link_bytes, rtol=1e-9)


def test_route_sets_and_route_bandwidth():
    env = simpy.Environment()
    net = AnalyticalNetwork(env, load_topology("h800-16"), gpu_rate=30e9)
    assert net.route_bandwidth(0, 8) == 30e9 and net.route_bandwidth(3, 3) == np.inf
    done = []
    net.transfer_set(net.route_set([0, 1], [8, 9]), 30e6, [lambda: done.append(env.now)] * 2)
    env.run()
    assert done == [pytest.approx(2.8e-6 + 1e-3)] * 2
    with pytest.raises(InputError, match="pair 0 is GPU 2 to itself"):
        net.route_set([2], [2])


def test_bad_input_is_one_line():
    env = simpy.Environment()
    with pytest.raises(InputError, match=r"^network backend must be one of maxmin, analytical, got 'ns3'$"):
        build_network(env, line(1e9), "ns3")
    net = AnalyticalNetwork(env, line(1e9))
    with pytest.raises(InputError, match=r"^GPU index out of range: src=0, dst=5; this fabric has GPUs 0\.\.1$"):
        net.transfer(0, 5, 1.0)
    with pytest.raises(InputError, match="bytes"):
        net.transfer(0, 1, -1.0)
    with pytest.raises(InputError, match="gpu_rate"):
        AnalyticalNetwork(env, line(1e9), gpu_rate=0)


def test_the_fabric_is_the_default_backend():
    assert type(build_network(simpy.Environment(), line(1e9))) is Fabric


def test_statistics_cover_every_link_and_a_bundle_carries_its_load():
    """A bundle's bytes land on its links as its load says; statistics have one entry per link, idle
    ones included; a bundle naming the link just past the last is refused."""
    from sim.network import LinkLoad
    env = simpy.Environment()
    net = AnalyticalNetwork(env, line(10e9, 5e9))
    load = p2p_load(net.links, [(0, 1), (0, 1)], 4e9)
    env.run(net.transfer_bundle(load))
    assert env.now == pytest.approx(1e-6 + 8e9 / 10e9)
    assert net.link_bytes[load.links].tolist() == pytest.approx(load.link_bytes.tolist())
    assert len(net.link_busy_s) == len(net.link_peak_util) == len(net.links) == 4
    with pytest.raises(InputError, match=r"^bundle link out of range: this fabric has links 0..3$"):
        net.transfer_bundle(LinkLoad(np.array([4]), np.array([1.0]), 1.0, 1))


def test_a_timeline_sees_a_transfer_that_starts_at_once():
    """No latency: the transfer drains from now, and the observers see it."""
    g = line(10e9)
    for u, v in g.edges:
        g.edges[u, v]["latency"] = 0.0
    env = simpy.Environment()
    net = AnalyticalNetwork(env, g)
    timeline = LinkTimeline(net, bin_s=0.25, max_bins=16)
    net.transfer(0, 1, 10e9)
    env.run()
    timeline.finish()
    assert env.now == 1.0 and timeline.bytes.sum() == pytest.approx(10e9)


@pytest.mark.parametrize("backend", NETWORK_BACKENDS)
def test_a_transfers_own_bound_by_hand(backend):
    """1 GB over a 100 GB/s link (1 us): 10 ms alone; bound to 25 GB/s, 40 ms; a bound above the
    link's changes nothing; started ahead, the same from its start. On max-min a bound transfer
    leaves the rest of the link to another: a 1 GB transfer beside it at 75 GB/s ends at 13.3 ms."""
    env = simpy.Environment()
    net = build_network(env, line(100e9), backend)
    env.run(net.transfer(0, 1, 1e9, max_rate=25e9))
    assert env.now == pytest.approx(1e-6 + 0.04, rel=1e-12)
    t0 = env.now
    env.run(net.transfer(0, 1, 1e9, max_rate=200e9))
    assert env.now - t0 == pytest.approx(1e-6 + 0.01, rel=1e-9)
    out = []
    net.transfer_at(env.now + 0.5, 0, 1, 1e9, lambda: out.append(env.now), max_rate=50e9)
    t1 = env.now
    env.run()
    assert out[0] - t1 == pytest.approx(0.5 + 1e-6 + 0.02, rel=1e-9)
    net.transfer_at(env.now, 0, 1, 1e9, lambda: out.append(env.now), max_rate=25e9)    # due now: started now
    t1 = env.now
    env.run()
    assert out[1] - t1 == pytest.approx(1e-6 + 0.04, rel=1e-9)
    if backend == "maxmin":
        t2, got = env.now, {}
        net.transfer(0, 1, 1e9, lambda: got.setdefault("bound", env.now), max_rate=25e9)
        net.transfer(0, 1, 1e9, lambda: got.setdefault("free", env.now))
        env.run()
        assert got["free"] - t2 == pytest.approx(1e-6 + 1 / 75, rel=1e-9)
        assert got["bound"] - t2 == pytest.approx(1e-6 + 0.04, rel=1e-9)


@pytest.mark.parametrize("backend", NETWORK_BACKENDS)
@pytest.mark.parametrize("rate", [0, -1.0, float("nan"), "fast", float("inf"), 2e18])
def test_a_bad_bound_is_one_line(backend, rate):
    with pytest.raises(InputError, match=r"^max_rate \(bytes/s\) "):
        build_network(simpy.Environment(), line(1e9), backend).transfer(0, 1, 1e6, max_rate=rate)


@pytest.mark.parametrize("backend", NETWORK_BACKENDS)
def test_any_positive_bound_holds(backend):
    """Half a byte a second: one byte takes 2 s after the link's 1 us."""
    env = simpy.Environment()
    env.run(build_network(env, line(1e9), backend).transfer(0, 1, 1.0, max_rate=0.5))
    assert env.now == pytest.approx(2 + 1e-6, rel=1e-12)
