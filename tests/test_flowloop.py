"""The fabric's event loop (sim.network.flowloop): batched recomputations, the completion timer,
the clock's resolution and the completion window; the fabric against an independent event loop."""
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fabric import gpu_chain

from sim.network import Fabric
from topologies import load_topology


def test_the_fabric_counts_the_flows_its_recomputations_refill():
    """Two transfers GPU 0 -> GPU 8 (100 and 200 MB) share their route: the first recomputation fills
    both (2 flows); when the first ends at 4.0028 ms the second, which the shared link froze, is the
    only one refilled (it then has the link to itself and ends at 2.8 us + 6 ms)."""
    env = simpy.Environment()
    fab = Fabric(env, load_topology("h800-16"))
    first, second = fab.transfer(0, 8, 100e6), fab.transfer(0, 8, 200e6)
    env.run(first)
    assert env.now == pytest.approx(2.8e-6 + 4e-3, rel=1e-12)
    env.run(second)
    assert env.now == pytest.approx(2.8e-6 + 6e-3, rel=1e-12)
    assert fab.refilled_flows == 3 and fab.unchanged_solves == 0


def test_a_flow_due_sooner_than_the_clock_can_tick_finishes_now():
    """At t = 2**20 s the float clock moves in steps of 2**-32 s (about 2.3e-10 s): 1 mB at 80 GB/s
    is due in 1.25e-14 s, a timer that would fire at the same instant forever (a long step's last
    bytes after rounding hung this way). It finishes at the instant it started, after one
    recomputation or two (the deadline turns a hang into an error)."""
    from sim.limits import deadline
    env = simpy.Environment()
    fab = Fabric(env, gpu_chain("a", 80e9, "b"))
    start = 2.0 ** 20
    env.run(until=start)
    with deadline(10):
        env.run(fab.transfer(0, 1, 1e-3))
    assert env.now == start
    assert fab.recomputations <= 2


def test_a_flow_due_in_a_few_clock_ticks_takes_its_time():
    """The rule above is no wider than the clock's resolution: at t = 2**20 s (a tick of about
    2.3e-10 s), 80 and 160 bytes at 80 GB/s on two links end 1e-9 s and 2e-9 s later; when the
    first ends, the second, due in about four ticks, does not end with it."""
    env = simpy.Environment()
    fab = Fabric(env, gpu_chain("a", 80e9, "b", 80e9, "c"))
    start = 2.0 ** 20
    env.run(until=start)
    first, second = fab.transfer(0, 1, 80.0), fab.transfer(1, 2, 160.0)
    env.run(first)
    assert env.now == pytest.approx(start + 1e-9, abs=2 ** -31)
    env.run(second)
    assert env.now == pytest.approx(start + 2e-9, abs=2 ** -31)


def test_completion_window_bounds_the_error():
    """Skewed all-to-all: with a window w every flow ends at most w x (busy time) early, and the
    collective's time moves by no more than that; it saves rate recomputations."""
    from sim.network import MoERouting, all_to_all, route_tokens
    r = MoERouting(ep=16, gpus_per_node=8, num_experts=64, topk=6, tokens_per_gpu=400, node_limit=2, skew=1.2, seed=5)
    tr = route_tokens(r)
    out = {}
    for w in (0.0, 1e-3):
        env = simpy.Environment()
        fab = Fabric(env, load_topology("h800-16"), completion_window=w)
        env.run(all_to_all(fab, list(range(16)), tr, 7168.0, "hierarchical"))
        out[w] = (env.now, fab.recomputations, fab.link_bytes.sum())
    exact, windowed = out[0.0], out[1e-3]
    assert abs(windowed[0] - exact[0]) <= 1e-3 * exact[0]
    assert windowed[1] < exact[1]
    assert windowed[2] == pytest.approx(exact[2])      # every byte still crosses its links


random_transfers = st.lists(st.tuples(st.sampled_from([0.0, 0.0, 1e-6, 2e-5, 1e-4]), st.integers(0, 15),
                                      st.integers(0, 15), st.floats(0, 5e7)), min_size=1, max_size=25)


@settings(max_examples=40, deadline=None)
@given(random_transfers)
def test_fabric_equals_an_independent_event_loop(transfers):
    """Random transfers on h800-16, started at random instants: the fabric (incremental or not)
    ends each where a plain event loop with the numpy max-min oracle does."""
    from reference_fabric import reference_completions
    graph = load_topology("h800-16")
    expected = None
    for incremental in (True, False):
        env = simpy.Environment()
        fab = Fabric(env, graph, incremental=incremental)
        ends = [None] * len(transfers)

        def start(i, t0, src, dst, nbytes):
            yield env.timeout(t0)
            yield fab.transfer(src, dst, nbytes)
            ends[i] = env.now
        for i, t in enumerate(transfers):
            env.process(start(i, *t))
        env.run()
        if expected is None:
            expected = reference_completions(fab.links, transfers)
        assert ends == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_transfers_started_at_one_instant_share_one_recomputation():
    """Five transfers started at t = 0 without latency (each asks for a batch) and ending together:
    one recomputation when they start, one when they end."""
    env = simpy.Environment()
    fab = Fabric(env, gpu_chain("a", 1e9, "b"))
    for _ in range(5):
        fab.transfer(0, 1, 1e6, on_done=lambda: None)
    env.run()
    assert env.now == pytest.approx(5e-3, rel=1e-12) and fab.recomputations == 2


def test_an_arrival_that_leaves_the_next_completion_in_place_arms_no_new_timer():
    """a -1 GB/s- b -1 GB/s- c. 1 GB a->b from t = 0 (ends at 1 s); 1 GB b->c from t = 0.25 s
    (ends at 1.25 s): its arrival leaves the next completion at 1 s, so the fabric keeps its
    timer: two timers in all (one per completion) instead of a third that would fire stale."""
    class Counting(simpy.Environment):
        timers = 0

        def timeout(self, delay, value=None):
            Counting.timers += 1
            return super().timeout(delay, value)
    env = Counting()
    fab = Fabric(env, gpu_chain("a", 1e9, "b", 1e9, "c"))
    ends = []
    fab.transfer(0, 1, 1e9, on_done=lambda: ends.append(env.now))
    start_second = simpy.Timeout(env, 0.25)                     # made directly: not counted
    start_second.callbacks.append(lambda _e: fab.transfer(1, 2, 1e9, on_done=lambda: ends.append(env.now)))
    env.run()
    assert ends == [1.0, 1.25] and Counting.timers == 2 and fab.recomputations == 4


def test_an_arrival_or_completion_alone_at_its_instant_recomputes_without_a_batch_event():
    """One 1 MB transfer over a 1 GB/s link of 1 us latency: the SimPy events are its arrival and
    its completion timer; each recomputes at once (nothing else is due then) instead of scheduling
    a batch event for the same instant. Two recomputations, the same end (1 us + 1 ms)."""
    env = simpy.Environment()
    graph = gpu_chain("a", 1e9, "b")
    graph.edges["a", "b"]["latency"] = 1e-6
    fab = Fabric(env, graph)
    ends = []
    fab.transfer(0, 1, 1e6, on_done=lambda: ends.append(env.now))
    steps = 0
    while env.peek() < float("inf"):
        env.step()
        steps += 1
    assert ends == [pytest.approx(1e-6 + 1e-3, rel=1e-12)]
    assert fab.recomputations == 2 and steps == 2          # the arrival and the timer


def test_a_clock_at_infinity_is_an_error_not_a_hang():
    """A compute part of infinite seconds (an input the checks once let through) put the clock at
    inf, where every completion timer lands at inf again: the run spun forever. The fabric now
    stops with an error instead."""
    env = simpy.Environment(initial_time=float("inf"))
    fab = Fabric(env, gpu_chain("a", 1e9, "b"))
    fab.transfer(0, 1, 1e6)
    with pytest.raises(RuntimeError, match="^fabric: the next flow completion is at inf s \\(now inf s\\); "
                                           "a time or a rate is not finite$"):
        env.run()


def test_a_completion_looks_for_finished_flows_once(monkeypatch):
    """1 MB and 2 MB over two 1 GB/s links: each completion timer drains the flows and removes those
    due (``fairshare.drop_finished``), and the recomputation that follows at the same instant, with
    nothing drained or re-rated since, does not look again: two looks in all, one per completion."""
    from sim.network import flowloop
    calls = []
    drop = flowloop.drop_finished

    def counting(flows, pairs, links, at, *args):
        calls.append(at[0])                  # the Instant, as a plain tuple: its n
        return drop(flows, pairs, links, at, *args)
    monkeypatch.setattr(flowloop, "drop_finished", counting)
    env = simpy.Environment()
    fab = Fabric(env, gpu_chain("a", 1e9, "b", 1e9, "c"))
    ends = []
    fab.transfer(0, 1, 1e6, on_done=lambda: ends.append(env.now))
    fab.transfer(1, 2, 2e6, on_done=lambda: ends.append(env.now))
    env.run()
    assert ends == pytest.approx([1e-3, 2e-3], rel=1e-12) and calls == [2, 1]
