"""sim.network.loads: a collective's bytes per link, checked against the fabric carrying its messages."""
import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.checks import InputError
from sim.network import (
    Fabric,
    LinkLoad,
    MoERouting,
    Traffic,
    all_to_all,
    all_to_all_load,
    p2p_load,
    route_tokens,
    sum_loads,
)
from sim.network.loads import all_to_all_messages
from topologies import load_topology

TABLE = Fabric(simpy.Environment(), load_topology("h800-64")).links


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["hierarchical", "flat"]), st.sampled_from(["dispatch", "combine"]),
       st.sampled_from([8, 16, 32]), st.floats(0, 2), st.integers(0, 10))
def test_every_byte_of_an_all_to_all_is_on_the_links_its_load_names(algorithm, direction, ep, skew, seed):
    """Run the all-to-all on an empty fabric: each link carried exactly the load's bytes (chunks and
    forwarding change when bytes move, never how many cross a link)."""
    r = MoERouting(ep=ep, gpus_per_node=8, num_experts=64, topk=4, tokens_per_gpu=256, node_limit=None, skew=skew,
                   seed=seed)
    traffic, group = route_tokens(r), list(range(8, 8 + ep))
    env = simpy.Environment()
    fab = Fabric(env, TABLE)
    env.run(all_to_all(fab, group, traffic, 1000.0, algorithm, direction, chunks=3))
    load = all_to_all_load(TABLE, group, traffic, 1000.0, algorithm, direction)
    carried = np.flatnonzero(fab.link_bytes > 0)
    assert carried.tolist() == load.links.tolist()
    assert fab.link_bytes[carried] == pytest.approx(load.link_bytes, rel=1e-9)
    assert load.injected == pytest.approx(fab.bytes_sent.sum(), rel=1e-12)


def test_a_hierarchical_dispatch_worked_by_hand():
    """EP16 over nodes 0 and 1 (h800-64), one token from GPU 0 to an expert on GPU 9 only: the
    hierarchical dispatch sends it over IB to GPU 8 (same index on node 1), which forwards it over
    NVLink to GPU 9: two messages, the IB route's 4 links and the NVLink route's 2."""
    r = MoERouting(ep=16, gpus_per_node=8, num_experts=16, topk=1, tokens_per_gpu=1, node_limit=None)
    G = np.zeros((16, 16))
    G[0, 9] = 1
    N = np.zeros((16, 2))
    N[0, 1] = 1
    load = all_to_all_load(TABLE, list(range(16)), Traffic(r, G, N), 100.0)
    ib, _ = TABLE.route(0, 8)
    nv, _ = TABLE.route(8, 9)
    assert load.messages == 2 and load.injected == 200.0 and load.size == 100.0
    assert sorted(load.links.tolist()) == sorted(ib.tolist() + nv.tolist())
    assert (load.link_bytes == 100.0).all() and (load.weights == 1.0).all()


def test_sum_of_loads_adds_bytes_on_shared_links():
    a = p2p_load(TABLE, [(0, 8)], 10.0)
    b = p2p_load(TABLE, [(0, 8), (1, 9)], 30.0)
    both = sum_loads([a, b])
    assert both.messages == 3 and both.injected == 70.0
    shared = TABLE.route(0, 8)[0]
    assert both.link_bytes[np.isin(both.links, shared)] == pytest.approx(40.0)
    assert sum_loads([]).messages == 0 and p2p_load(TABLE, [(3, 3)], 5.0).messages == 0


def test_a_sum_keeps_the_longest_latency():
    """Bundled collectives start together: the sum waits for the longest route."""
    short, long = p2p_load(TABLE, [(0, 1)], 10.0), p2p_load(TABLE, [(0, 9)], 10.0)
    assert 0 < short.latency < long.latency == TABLE.route(0, 9)[1]
    assert sum_loads([short, long]).latency == sum_loads([long, short]).latency == long.latency


def test_what_carries_nothing_does_not_count():
    """Empty and same-GPU messages are no messages; one byte is (the mean message, the bundle's
    size, divides by the count)."""
    load = LinkLoad.of(TABLE, [(0, 8, 100.0), (0, 9, 0.0), (2, 2, 50.0), (1, 9, 1.0)])
    assert load.messages == 2 and load.injected == 101.0 and load.size == 50.5
    one_byte = TABLE.route(1, 9)[0]                     # its links carry 1 B (and 100 B where shared)
    assert set(one_byte.tolist()) <= set(load.links.tolist())
    assert load.link_bytes.sum() == 100.0 * TABLE.route(0, 8)[0].size + 1.0 * one_byte.size
    for empty in (sum_loads([]), sum_loads([LinkLoad.of(TABLE, [(3, 3, 5.0)])]), LinkLoad.of(TABLE, [(0, 1, 0.0)])):
        assert (empty.injected, empty.messages, empty.latency, empty.size) == (0.0, 0, 0.0, 0.0)
        assert empty.links.size == 0 and empty.links.dtype == np.int64 and empty.link_bytes.size == 0


@pytest.mark.parametrize("links,nbytes,injected,messages,latency,pattern", [
    ([0, 1], [5.0, 0.0], 5.0, 1, 0.0, r"^a link load's bytes must be finite and > 0 on every link it lists$"),
    ([0], [np.inf], 5.0, 1, 0.0, r"^a link load's bytes must be finite and > 0"),
    ([0], [5.0], -1.0, 1, 0.0, r"^LinkLoad\.injected \(bytes\) must be"),
    ([0], [5.0], 2e18, 1, 0.0, r"^LinkLoad\.injected \(bytes\) must be"),
    ([0], [5.0], 5.0, 1.5, 0.0, r"^LinkLoad\.messages must be"),
    ([0], [5.0], 5.0, -1, 0.0, r"^LinkLoad\.messages must be"),
    ([0], [5.0], 5.0, 1, -1e-6, r"^LinkLoad\.latency \(s\) must be"),
    ([0], [5.0], 5.0, 1, 1e6 + 1, r"^LinkLoad\.latency \(s\) must be"),
    ([0], [5.0], 0.0, 1, 0.0, r"^a link load with bytes on links needs injected bytes > 0 and messages > 0$"),
    ([0], [5.0], 5.0, 0, 0.0, r"^a link load with bytes on links needs injected bytes > 0 and messages > 0$"),
    ([3, 1, 3], [1.0, 2.0, 3.0], 6.0, 3, 0.0, r"^a link load lists a link twice: give each link's bytes once$"),
])
def test_each_bad_field_is_named(links, nbytes, injected, messages, latency, pattern):
    with pytest.raises(InputError, match=pattern):
        LinkLoad(np.array(links), np.array(nbytes), injected, messages, latency)


def test_a_load_sorts_its_links_with_their_bytes():
    """Links given out of order (and as floats, bytes as integers) come out sorted, each with its
    own bytes; weights are bytes / mean message (12 B injected by 2 messages: 6 B)."""
    load = LinkLoad(np.array([7.0, 2.0, 5.0]), np.array([3, 12, 6]), 12.0, 2, 1e-6)
    assert load.links.tolist() == [2, 5, 7] and load.links.dtype == np.int64
    assert load.link_bytes.tolist() == [12.0, 6.0, 3.0] and load.link_bytes.dtype == np.float64
    assert load.weights.tolist() == [2.0, 1.0, 0.5] and load.size == 6.0 and load.latency == 1e-6


def test_a_renamed_load_moves_each_link_s_bytes_to_its_new_name():
    """Links 2, 5, 7 renamed 9, 1, 4 (old 3 -> 8 names a link the load does not use): each new link
    carries its old link's bytes, sorted again; the messages, bytes and latency stay."""
    load = LinkLoad(np.array([2, 5, 7]), np.array([12.0, 6.0, 3.0]), 12.0, 2, 1e-6)
    moved = load.renamed(np.array([2, 5, 7, 3, 2]), np.array([9, 1, 4, 8, 9]))
    assert moved.links.tolist() == [1, 4, 9] and moved.link_bytes.tolist() == [6.0, 3.0, 12.0]
    assert (moved.injected, moved.messages, moved.latency, moved.weights.tolist()) == (12.0, 2, 1e-6, [1.0, 0.5, 2.0])
    assert LinkLoad.empty().renamed(np.array([1]), np.array([2])).links.size == 0
    assert load.renamed(np.array([2, 5, 7]), np.array([0, 3, 1])).links.tolist() == [0, 1, 3]   # link 0 is a name
    for old, new, first in (([2, 5], [9, 1], 7), ([2, 5], [0, 1], 7), ([], [], 2)):   # (after one renamed 0)
        with pytest.raises(InputError, match=rf"^a link load renamed: link {first} has no new name$"):
            load.renamed(np.array(old, dtype=np.int64), np.array(new, dtype=np.int64))


@pytest.mark.parametrize("algorithm", ["hierarchical", "flat"])
@pytest.mark.parametrize("direction", ["dispatch", "combine"])
def test_the_messages_worked_by_hand(algorithm, direction):
    """EP16 on two nodes; GPU 0 sends 1 token to GPU 3 (its own node) and 2 to GPU 9 (the other
    node); the other entries are 0 (and one token to itself, which is no message). Hierarchical:
    0->3 over NVLink, 0->8 over IB (same index on node 1), 8->9 forwarded; flat: 0->3 and 0->9.
    A combine sends the same messages the other way."""
    r = MoERouting(ep=16, gpus_per_node=8, num_experts=16, topk=1, tokens_per_gpu=4, node_limit=None)
    G = np.zeros((16, 16))
    G[0, 3], G[0, 9], G[0, 0] = 1, 2, 1
    N = np.zeros((16, 2))
    N[0, 0], N[0, 1] = 2, 2
    group = list(range(16, 32))                        # GPUs 16..31 of the cluster: nodes 2 and 3
    messages = all_to_all_messages(group, Traffic(r, G, N), 10.0, algorithm, direction)
    want = {"hierarchical": [(0, 3, 10.0), (0, 8, 20.0), (8, 9, 20.0)], "flat": [(0, 3, 10.0), (0, 9, 20.0)]}[algorithm]
    if direction == "combine":
        want = [(b, a, x) for a, b, x in want]
    assert sorted(messages) == sorted((group[a], group[b], x) for a, b, x in want)


def test_unknown_algorithm_or_direction_is_named():
    r = MoERouting(ep=8, gpus_per_node=8, num_experts=8, topk=1, tokens_per_gpu=1, node_limit=None)
    traffic = Traffic(r, np.zeros((8, 8)), np.zeros((8, 1)))
    with pytest.raises(ValueError, match=r"^algorithm must be one of hierarchical, flat, got 'ring'$"):
        all_to_all_messages(list(range(8)), traffic, 1.0, "ring")
    with pytest.raises(ValueError, match=r"^direction must be one of dispatch, combine, got 'up'$"):
        all_to_all_messages(list(range(8)), traffic, 1.0, "flat", "up")


def test_bad_loads_are_one_line_errors():
    with pytest.raises(InputError, match="LinkLoad.latency"):
        LinkLoad(np.array([0]), np.array([1.0]), 1.0, 1, latency=float("inf"))
    with pytest.raises(InputError, match="link ids >= 0"):
        LinkLoad(np.array([-1]), np.array([1.0]), 1.0, 1)
