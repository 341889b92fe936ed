"""The flow-level fabric: closed forms and invariants."""
import networkx as nx
import numpy as np
import pytest
import simpy
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim.network import Fabric, LinkLoad, link_stats, p2p_load
from topologies import load_topology


def gpu_chain(*caps_and_names):
    """A line graph of GPU nodes with the given edge capacities (bytes/s), latency 0."""
    g = nx.Graph()
    names = caps_and_names[0::2]
    for n in names:
        g.add_node(n, type="gpu")
    for i, cap in enumerate(caps_and_names[1::2]):
        g.add_edge(names[i], names[i + 1], bandwidth=cap, latency=0.0)
    g.graph["gpus"] = list(names)
    return g


def test_worked_example_one_transfer_by_hand():
    """docs/network.md: 100 MB from GPU 0 (node 0) to GPU 8 (node 1) on h800-16, plane 0.
    Route GPU->NIC (0.5 us) -> leaf (0.9 us) -> NIC (0.9 us) -> GPU (0.5 us): latency 2.8 us.
    Bottleneck 50 GB/s: 100e6 / 50e9 = 2 ms. Total 2.0028 ms."""
    env = simpy.Environment()
    fab = Fabric(env, load_topology("h800-16"))
    done = fab.transfer(0, 8, 100e6)
    env.run(done)
    assert env.now == pytest.approx(2.8e-6 + 2e-3, rel=1e-12)
    links, lat = fab.links.route(0, 8)
    assert [fab.links.link_name(i) for i in links] == [
        "n0/gpu0->n0/nic0", "n0/nic0->p0/leaf0", "p0/leaf0->n1/nic0", "n1/nic0->n1/gpu0"]
    assert lat == pytest.approx(2.8e-6)


def test_one_flow_is_latency_plus_size_over_bandwidth():
    env = simpy.Environment()
    fab = Fabric(env, load_topology("h800-node"))
    env.run(fab.transfer(0, 5, 16e6))
    assert env.now == pytest.approx(3.3e-6 + 16e6 / 160e9)


@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_k_equal_flows_share_a_link(k):
    env = simpy.Environment()
    fab = Fabric(env, load_topology("h800-node"))
    for _ in range(k):
        fab.transfer(0, 1, 1e9)
    env.run()
    assert env.now == pytest.approx(3.3e-6 + k * 1e9 / 160e9)


def test_textbook_max_min_on_two_links():
    """x -100- a -10- m -20- d -100- y: f1 a->d, f2 x->m, f3 m->y, 10 GB each, no latency.
    a->m is shared by f1 and f2 (5 GB/s each); f3 gets the 15 GB/s m->d has left and ends at
    10/15 s; f1 and f2 end at 2 s."""
    env = simpy.Environment()
    fab = Fabric(env, gpu_chain("x", 100e9, "a", 10e9, "m", 20e9, "d", 100e9, "y"))
    ends = {}
    for name, (s, t) in {"f1": (1, 3), "f2": (0, 2), "f3": (2, 4)}.items():
        fab.transfer(s, t, 10e9).callbacks.append(lambda ev, name=name: ends.__setitem__(name, env.now))
    env.run()
    assert ends == pytest.approx({"f1": 2.0, "f2": 2.0, "f3": 10 / 15})


def test_flow_speeds_up_when_another_ends():
    """Two flows on a 10 GB/s link, 10 GB and 20 GB: 5 GB/s each until t=2, then the second
    alone at 10 GB/s for its last 10 GB: ends at 3 s."""
    env = simpy.Environment()
    fab = Fabric(env, gpu_chain("a", 10e9, "b"))
    e1, e2 = fab.transfer(0, 1, 10e9), fab.transfer(0, 1, 20e9)
    env.run(e1)
    assert env.now == pytest.approx(2.0)
    env.run(e2)
    assert env.now == pytest.approx(3.0)


def test_same_gpu_and_zero_bytes():
    env = simpy.Environment()
    fab = Fabric(env, load_topology("h800-node"))
    env.run(fab.transfer(3, 3, 1e9))
    assert env.now == 0
    env.run(fab.transfer(0, 1, 0))
    assert env.now == pytest.approx(3.3e-6)
    slow = simpy.Environment()                                  # after its latency, one byte drains at 1 B/s
    g = gpu_chain("a", 1.0, "b")
    g.edges["a", "b"]["latency"] = 0.5
    slow.run(Fabric(slow, g).transfer(0, 1, 1.0))
    assert slow.now == pytest.approx(1.5, rel=1e-12)


def test_bad_transfer_arguments():
    fab = Fabric(simpy.Environment(), load_topology("h800-node"))
    with pytest.raises(ValueError, match="out of range"):
        fab.transfer(0, 99, 1)
    for src, dst in ((8, 0), (0, 8), (-1, 0)):                  # h800-node has GPUs 0..7
        with pytest.raises(ValueError, match=rf"^GPU index out of range: src={src}, dst={dst}; this fabric has "
                                             r"GPUs 0\.\.7$"):
            fab.transfer(src, dst, 1)
    env = simpy.Environment()
    for kwargs, message in ((dict(completion_window=-0.1), r"^completion_window must be a finite number in \[0, 1\)"),
                            (dict(gpu_rate=2e18), r"^gpu_rate \(bytes/s\) must be a finite number in \(0, ")):
        with pytest.raises(ValueError, match=message):
            Fabric(env, load_topology("h800-node"), **kwargs)
    for bad in (-5, float("nan"), float("inf"), True, "10"):
        with pytest.raises(ValueError, match=r"bytes must be a finite number in \[0, "):
            fab.transfer(0, 1, bad)


transfers = st.lists(st.tuples(st.integers(0, 15), st.integers(0, 15), st.floats(1e3, 1e8),
                               st.floats(0, 2e-3)), min_size=1, max_size=25)


@settings(max_examples=30, deadline=None)
@given(transfers)
def test_no_link_over_capacity_and_every_byte_arrives(items):
    env = simpy.Environment()
    fab = Fabric(env, load_topology("h800-16"))
    cap = fab.links.capacity
    over = []
    fab.observers.append(lambda now, rate: over.append(float((rate / cap).max())))
    finished = []

    def start(src, dst, size, delay):
        yield env.timeout(delay)
        t0 = env.now
        yield fab.transfer(src, dst, size)
        finished.append((src, dst, size, t0, env.now))

    for src, dst, size, delay in items:
        env.process(start(src, dst, size, delay))
    env.run()
    assert len(finished) == len(items)
    assert max(over, default=0) <= 1 + 1e-9
    expected = np.zeros(len(cap))
    for src, dst, size, t0, t1 in finished:
        if src != dst:
            links, lat = fab.links.route(src, dst)
            expected[links] += size
            assert t1 - t0 >= lat + size / cap[links].min() * (1 - 1e-9)  # never faster than alone
    assert np.allclose(fab.link_bytes, expected, rtol=1e-6, atol=1.0)
    df = link_stats(fab)
    assert (df["peak_util"] <= 1 + 1e-9).all() and (df["mean_util"] <= 1 + 1e-9).all()


def test_a_bundle_of_k_flows_on_one_route_takes_as_long_as_the_k_flows():
    """k flows of 1 GB from GPU 0 to GPU 1 (h800-node, 160 GB/s NVLink, 3.3 us) end at
    3.3 us + k GB / 160 GB/s; as one bundle (size 1 GB, k GB on each link of the route) the same."""
    k = 5
    env = simpy.Environment()
    fab = Fabric(env, load_topology("h800-node"))
    load = p2p_load(fab.links, [(0, 1)] * k, 1e9)
    assert load.size == 1e9 and load.latency == pytest.approx(3.3e-6)
    env.run(fab.transfer_bundle(load))
    assert env.now == pytest.approx(3.3e-6 + k * 1e9 / 160e9, rel=1e-12)
    assert fab.link_bytes[load.links] == pytest.approx(k * 1e9)


def test_a_bundle_shares_a_link_as_its_number_of_flows():
    """A bundle of 3 flows of 1 GB and one plain 1 GB flow on the same link (160 GB/s): 4
    flow-shares of 40 GB/s; all end together at 1 GB / 40 GB/s = 25 ms (latency 0 here)."""
    env = simpy.Environment()
    fab = Fabric(env, gpu_chain("a", 160e9, "b"))
    ends = []
    fab.transfer_bundle(p2p_load(fab.links, [(0, 1)] * 3, 1e9), on_done=lambda: ends.append(env.now))
    fab.transfer(0, 1, 1e9, on_done=lambda: ends.append(env.now))
    env.run()
    assert ends == pytest.approx([0.025, 0.025], rel=1e-12)


def test_a_bundles_min_seconds_is_its_speed_alone_and_frees_its_private_link():
    """A bundle of one 1 GB flow with min_seconds = 10 ms (no faster than 100 GB/s) and a plain
    0.6 GB flow on one 160 GB/s link: 80 GB/s each (the limit does not bind) until the flow ends at
    0.6 / 80 = 7.5 ms; the bundle then runs at its limit: 0.4 GB / 100 GB/s = 4 ms more, 11.5 ms.
    Alone, the next bundle (limit 20 ms) takes 20 ms, on the private link the first one freed."""
    env = simpy.Environment()
    fab = Fabric(env, gpu_chain("a", 160e9, "b"))
    load = p2p_load(fab.links, [(0, 1)], 1e9)
    ends = {}
    fab.transfer_bundle(load, min_seconds=0.01, on_done=lambda: ends.setdefault("b", env.now))
    fab.transfer(0, 1, 0.6e9, on_done=lambda: ends.setdefault("f", env.now))
    env.run()
    assert ends["b"] == pytest.approx(0.0115, rel=1e-12) and ends["f"] == pytest.approx(0.0075, rel=1e-12)
    private = fab.link_state.capacity.size
    env.run(fab.transfer_bundle(load, min_seconds=0.02))
    assert env.now == pytest.approx(0.0315, rel=1e-12) and fab.link_state.capacity.size == private
    assert fab.link_bytes.size == len(fab.links) and fab.link_bytes[load.links] == pytest.approx(2.6e9)


def test_a_bundle_with_no_link_takes_only_its_latency():
    env = simpy.Environment()
    fab = Fabric(env, gpu_chain("a", 1e9, "b"))
    ends = []
    fab.transfer_bundle(LinkLoad.empty(), latency=2e-6, on_done=lambda: ends.append(env.now))
    env.run(fab.transfer_bundle(LinkLoad.empty(), latency=0.0))
    assert ends == [] and env.now == 0.0                     # no latency: done at once
    env.run()
    assert ends == [2e-6] and fab.recomputations == 0


def test_concurrent_bundles_take_private_links_from_one_growth():
    """Twenty bundles at once, each with its own rate limit (a private link): the link arrays grow
    by at least 16 links (or half their size) twice, not once per bundle; each bundle ends at its own limit
    (1 GB / 10 GB/s alone on a 1 TB/s link: 100 ms)."""
    env = simpy.Environment()
    fab = Fabric(env, gpu_chain("a", 1e12, "b"))
    base = fab.link_state.capacity.size
    load = p2p_load(fab.links, [(0, 1)], 1e9)
    ends = []
    for _ in range(20):
        fab.transfer_bundle(load, min_seconds=0.1, on_done=lambda: ends.append(env.now))
    env.run()
    assert fab.link_state.capacity.size == base + 16 + max(16, (base + 16) // 2) == 34      # 2 links + 2 growths
    assert ends == pytest.approx([0.1] * 20, rel=1e-12)
    fab = Fabric(env, gpu_chain("a", 1e12, "b"))
    for _ in range(16):                                         # exactly one growth's worth: every link of it
        fab.transfer_bundle(load, min_seconds=0.1, on_done=lambda: None)
    assert fab.link_state.capacity.size == base + 16 == 18


@pytest.mark.parametrize("min_seconds,latency", [(1e9, 0.0), (-1e-9, 0.0), (0.0, 1e6), (0.0, -1e-9)])
def test_bundle_bounds_are_refused(min_seconds, latency):
    from sim.checks import InputError
    fab = Fabric(simpy.Environment(), gpu_chain("a", 1e9, "b"))
    with pytest.raises(InputError, match=r"bundle min_seconds must be in \[0, 1e9\) and latency in \[0, 1e6\)"):
        fab.transfer_bundle(LinkLoad(np.array([0]), np.array([1.0]), 1.0, 1), latency=latency, min_seconds=min_seconds)


def test_bad_bundles_are_one_line_errors():
    from sim.checks import InputError
    env = simpy.Environment()
    fab = Fabric(env, gpu_chain("a", 1e9, "b"))
    with pytest.raises(InputError, match="one byte count per link"):
        LinkLoad(np.array([0]), np.array([1.0, 2.0]), 1.0, 1)
    with pytest.raises(InputError, match="finite and > 0 on every link"):
        LinkLoad(np.array([0, 1]), np.array([-1.0, 5.0]), 1.0, 1)
    with pytest.raises(InputError, match="lists a link twice"):
        LinkLoad(np.array([1, 1]), np.array([1.0, 5.0]), 1.0, 1)
    with pytest.raises(InputError, match="needs injected bytes > 0 and messages > 0"):
        LinkLoad(np.array([0]), np.array([1.0]), 1.0, 0)
    with pytest.raises(InputError, match=r"^bundle link out of range: this fabric has links 0\.\.1$"):
        fab.transfer_bundle(LinkLoad(np.array([99]), np.array([1.0]), 1.0, 1))
    with pytest.raises(InputError, match="bundle min_seconds"):
        fab.transfer_bundle(LinkLoad(np.array([0]), np.array([1.0]), 1.0, 1), min_seconds=float("nan"))


ahead = st.lists(st.tuples(st.floats(0, 3e-3), st.integers(0, 15), st.integers(0, 15), st.floats(0, 5e7)),
                 min_size=1, max_size=20)


@settings(max_examples=40, deadline=None)
@given(ahead, st.sampled_from(["h800-16", "chain"]))
@example([(0.0, 0, 1, 34758516.5), (0.00045751778532254105, 0, 1, 0.0)], "chain")
def test_a_transfer_started_ahead_lands_where_a_waiting_process_would(transfers, where):
    """``transfer_at(at, ...)`` called at t = 0 ends every transfer at the same instant, to the
    last bit, as a process that waits until ``at`` and then calls ``transfer`` (with route
    latency, on h800-16, and without, on a chain of 16 GPUs). The example: a transfer of no bytes
    and no latency still costs a recomputation when it starts (as with ``transfer``), which
    moves the other flow's end by a rounding step."""
    graph = load_topology("h800-16") if where == "h800-16" else gpu_chain(*sum(
        ([f"g{i}", 50e9] for i in range(15)), []), "g15")
    ends = {}
    for ahead_of_time in (False, True):
        env = simpy.Environment()
        fab = Fabric(env, graph)
        out = ends[ahead_of_time] = [None] * len(transfers)

        def land(i):
            out[i] = env.now

        def start(i, at, src, dst, nbytes):
            yield env.timeout(at)
            fab.transfer(src, dst, nbytes, on_done=lambda: land(i))
        for i, (at, src, dst, nbytes) in enumerate(transfers):
            if ahead_of_time:
                fab.transfer_at(at, src, dst, nbytes, on_done=lambda i=i: land(i))
            else:
                env.process(start(i, at, src, dst, nbytes))
        env.run()
    assert ends[True] == ends[False] and None not in ends[True]


def test_a_transfer_started_ahead_keeps_its_instant_where_now_plus_delay_rounds_off():
    """At now = 0.000667... s a timeout of ``at - now`` lands one rounding step off at = 0.6582...
    s; ``transfer_at`` starts the transfer at ``start = now + (at - now)`` as such a timeout would,
    and its flow (latency 0.0123... s) arrives exactly at ``start + latency``, which a timeout of
    ``start + latency - now`` would also miss by a rounding step."""
    now, at, latency = 0.0006678314755502179, 0.6582100630847808, 0.012337994766623228
    start = now + (at - now)
    assert start != at and now + ((start + latency) - now) != start + latency   # the case this test is about
    env = simpy.Environment(initial_time=now)
    graph = gpu_chain("a", 1e9, "b")
    graph.edges["a", "b"]["latency"] = latency
    fab = Fabric(env, graph)
    ends = []
    fab.transfer_at(at, 0, 1, 0.0, on_done=lambda: ends.append(env.now))
    env.run()
    assert ends == [start + latency]


def test_a_transfer_started_ahead_at_now_or_to_itself():
    """``at`` not after now: it starts now, as :meth:`transfer` (to the same GPU: landed at once,
    before any event runs); to the same GPU later: it lands at ``at`` (here from now = 0.25 s);
    bad GPUs and sizes are the transfer's one-line errors."""
    env = simpy.Environment(initial_time=0.25)
    fab = Fabric(env, gpu_chain("a", 1e9, "b"))
    ends = []
    fab.transfer_at(0.25, 1, 1, 1e6, on_done=lambda: ends.append(("itself now", env.now)))
    assert ends == [("itself now", 0.25)]
    fab.transfer_at(0.25, 0, 1, 1e6, on_done=lambda: ends.append(("now", env.now)))
    fab.transfer_at(0.5, 1, 1, 1e6, on_done=lambda: ends.append(("itself", env.now)))
    env.run()
    assert ends[1:] == [("now", pytest.approx(0.251, rel=1e-12)), ("itself", 0.5)]
    with pytest.raises(ValueError, match=r"^GPU index out of range: src=0, dst=7"):
        fab.transfer_at(1.0, 0, 7, 1e6, on_done=lambda: None)
    with pytest.raises(ValueError, match=r"^bytes must be a finite number"):
        fab.transfer_at(1.0, 0, 1, -1.0, on_done=lambda: None)


route_sets = st.lists(st.tuples(st.floats(0, 2e-3), st.lists(st.tuples(st.integers(0, 15), st.integers(1, 15)),
                                                              min_size=1, max_size=12), st.floats(0, 5e7)),
                      min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(route_sets, st.sampled_from([None, 30e9]))
def test_a_route_set_starts_the_flows_its_pairs_would_start_one_by_one(sets, gpu_rate):
    """``transfer_set`` over a ``route_set`` (what a representative pipeline's sends use) ends
    every flow at the same instant, to the last bit, as ``transfer`` called for its pairs in order,
    with the same bytes on every link and per GPU and the same recomputations; with and without
    the GPUs' engines, of any size (no bytes: each pair's latency)."""
    graph = load_topology("h800-16")
    runs = {}
    for as_set in (False, True):
        env = simpy.Environment()
        fab = Fabric(env, graph, gpu_rate=gpu_rate)
        ends = {}

        def start(i, at, pairs, nbytes):
            yield env.timeout(at)
            srcs, dsts = [a for a, _ in pairs], [(a + b) % 16 for a, b in pairs]
            done = [lambda j=j: ends.__setitem__((i, j), env.now) for j in range(len(pairs))]
            if as_set:
                fab.transfer_set(fab.route_set(srcs, dsts), nbytes, done)
            else:
                for src, dst, on_done in zip(srcs, dsts, done):
                    fab.transfer(src, dst, nbytes, on_done=on_done)
        for i, (at, pairs, nbytes) in enumerate(sets):
            env.process(start(i, at, pairs, nbytes))
        env.run()
        runs[as_set] = (ends, fab.link_bytes.tolist(), fab.bytes_sent.tolist(), fab.bytes_received.tolist(),
                        fab.recomputations)
    assert runs[True] == runs[False]
    assert len(runs[True][0]) == sum(len(pairs) for _, pairs, _ in sets)


def test_bad_route_sets_are_one_line_errors():
    from sim.checks import InputError
    fab = Fabric(simpy.Environment(), load_topology("h800-node"))
    with pytest.raises(InputError, match=r"^a route set's pairs join two GPUs; pair 1 is GPU 3 to itself$"):
        fab.route_set([0, 3], [1, 3])
    with pytest.raises(InputError, match=r"^GPU index out of range: src=0, dst=8; this fabric has GPUs 0\.\.7$"):
        fab.route_set([0], [8])
    with pytest.raises(InputError, match=r"bytes must be a finite number in \[0, "):
        fab.transfer_set(fab.route_set([0], [1]), -1.0, [lambda: None])


def test_a_routes_bandwidth_is_its_least_capacity():
    """h800-16: GPU 0 -> GPU 8 crosses two NICs at 50 GB/s (the worked example), GPU 0 -> GPU 1
    NVLink at 160 GB/s; with GPU engines of 20 GB/s those bind; to itself: infinite; a GPU out of
    range is the transfer's one-line error."""
    graph = load_topology("h800-16")
    fab = Fabric(simpy.Environment(), graph)
    assert fab.route_bandwidth(0, 8) == 50e9 and fab.route_bandwidth(0, 1) == 160e9
    assert fab.route_bandwidth(3, 3) == float("inf")
    assert Fabric(simpy.Environment(), graph, gpu_rate=20e9).route_bandwidth(0, 8) == 20e9
    with pytest.raises(ValueError, match=r"^GPU index out of range: src=0, dst=16"):
        fab.route_bandwidth(0, 16)
