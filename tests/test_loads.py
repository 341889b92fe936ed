"""sim.network.loads: a collective's bytes per link, checked against the fabric carrying its messages."""
import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.checks import InputError
from sim.network import Fabric, LinkLoad, MoERouting, all_to_all, all_to_all_load, p2p_load, route_tokens, sum_loads
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
    from sim.network import Traffic
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


def test_bad_loads_are_one_line_errors():
    with pytest.raises(InputError, match="LinkLoad.latency"):
        LinkLoad(np.array([0]), np.array([1.0]), 1.0, 1, latency=float("inf"))
    with pytest.raises(InputError, match="link ids >= 0"):
        LinkLoad(np.array([-1]), np.array([1.0]), 1.0, 1)
