"""sim.network.fairshare.scan: the filling by scans gives the heap of flows' rates and bottlenecks bit
for bit (cases worked by hand, the heap's freezing order within a round, random systems), gives
up after SCAN_ROUNDS rounds, and the fabric's refills fall back to the heap then."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_fairshare_step import ActiveFlows

from sim.network.fairshare import Index, Pairs, max_min_rates
from sim.network.fairshare.filling import fill_flows
from sim.network.fairshare.heap import group_by
from sim.network.fairshare.scan import SCAN_ROUNDS, fill_scan


def _by_scan(flow, link, w, cap, n):
    """(finished, rates, frozen_by) of :func:`fill_scan` on pairs grouped by flow."""
    by_flow_ptr, _ = group_by(flow, n)
    rates, frozen_by = np.full(n, np.inf), np.full(n, -7, dtype=np.int64)
    return fill_scan(Pairs(flow, link, w), by_flow_ptr, cap, rates, frozen_by), rates, frozen_by


def _by_heap(flow, link, w, cap, n):
    """(rates, frozen_by) of the heap of flows (:func:`sim.network.fairshare.filling.fill_flows`)."""
    index = Index(*group_by(link, cap.size), *group_by(flow, n))
    rates, frozen_by = np.full(n, np.inf), np.full(n, -7, dtype=np.int64)
    fill_flows(Pairs(flow, link, w), index, cap, np.arange(n), rates, frozen_by)
    return rates, frozen_by


def test_flows_tightest_last_freeze_one_round_per_level():
    """Flow i alone on link i (capacity 40 - i) and all on link 40 (300 B/s): flows 39..32 freeze
    at their own links (1..8 B/s, a round each), then link 40 splits the 264 B/s they leave among
    the other 32: 8.25 each (9 rounds, within SCAN_ROUNDS). Each flow's bottleneck is named."""
    n = 40
    flow = np.repeat(np.arange(n), 2)
    link = np.ravel([[i, n] for i in range(n)])
    cap = np.append(40.0 - np.arange(n), 300.0)
    done, rates, frozen_by = _by_scan(flow, link, np.ones(flow.size), cap, n)
    assert done and rates.tolist() == [8.25] * 32 + [8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    assert frozen_by.tolist() == [40] * 32 + list(range(32, 40))


def test_a_round_freezes_its_flows_in_the_heaps_order_by_share_then_flow():
    """Flows A (0) and B (1) each on a link of their own, A's 1 + 5e-13 B/s and B's 1 B/s: within
    1e-12 of each other, so one round freezes both at 1 B/s, B first (the lower share), as the heap
    pops them. Both cross link 2 (22.88 B/s) with weights 1.584 and 2.856, and C (2) has it
    alone after them: 22.88 - 2.856 - 1.584 over 5.44 - 2.856 - 1.584, in that order, is
    18.44000000000001 B/s; A's weight taken off first would give 18.440000000000005."""
    flow, link = np.array([0, 0, 1, 1, 2]), np.array([0, 2, 1, 2, 2])
    w, cap = np.array([1.0, 1.584, 1.0, 2.856, 1.0]), np.array([1.0 + 5e-13, 1.0, 22.88])
    users = 1.584 + 2.856 + 1.0
    heap_order = (22.88 - 2.856 - 1.584) / (users - 2.856 - 1.584)
    index_order = (22.88 - 1.584 - 2.856) / (users - 1.584 - 2.856)
    assert heap_order != index_order
    done, rates, frozen_by = _by_scan(flow, link, w, cap, 3)
    assert done and rates.tolist() == [1.0, 1.0, heap_order] and frozen_by.tolist() == [0, 1, 2]
    assert _by_heap(flow, link, w, cap, 3)[0].tolist() == rates.tolist()


def test_a_later_round_out_of_order_sorts_only_its_own_flows():
    """Flows 0-2 split link 0 (3 B/s) in the first round; flows 3 and 4 have links of their own of
    2 (1 + 5e-13) and 2 B/s: the second round freezes both at 2 B/s, 4 first. Sorting that round
    must not reach the first round's flows (still in the scratch after it)."""
    flow, link = np.array([0, 1, 2, 3, 4]), np.array([0, 0, 0, 1, 2])
    done, rates, frozen_by = _by_scan(flow, link, np.ones(5), np.array([3.0, 2.0 * (1 + 5e-13), 2.0]), 5)
    assert done and rates.tolist() == [1.0, 1.0, 1.0, 2.0, 2.0] and frozen_by.tolist() == [0, 0, 0, 1, 2]


def test_a_round_out_of_order_is_sorted_by_share_then_flow():
    """40 flows in a round, shares 2, 1, 2, 1, ...: the heap's order is the 20 flows of share 1 in
    increasing order, then the 20 of share 2 (a stable sort; quicksort would mix equal shares)."""
    from sim.network.fairshare.scan import in_heap_order
    newly, tight = np.arange(40), np.tile([2.0, 1.0], 20)
    in_heap_order(newly, 40, tight)
    assert newly.tolist() == list(range(1, 40, 2)) + list(range(0, 40, 2))


def test_a_flow_is_frozen_by_the_first_of_its_links_of_equal_share():
    """Flow 0 on links 0 and 1 of 5 B/s each: both fill at once; it is named frozen by link 0, the
    first in its pairs' order, as the heap of flows names it."""
    done, rates, frozen_by = _by_scan(np.array([0, 0]), np.array([0, 1]), np.ones(2), np.array([5.0, 5.0]), 1)
    assert done and rates.tolist() == [5.0] and frozen_by.tolist() == [0]
    assert _by_heap(np.array([0, 0]), np.array([0, 1]), np.ones(2), np.array([5.0, 5.0]), 1)[1].tolist() == [0]


def test_a_flow_looked_at_again_is_frozen_by_the_first_of_its_links_of_equal_share():
    """Flow 0 on links 0 (7 B/s, with flow 1: 3.5 each), 1 and 2 (5 B/s each); flow 1 also on link 3
    (2 B/s), which freezes it first. Looked at again, flow 0 has 5 B/s on each of its three links:
    it freezes at 5, named frozen by link 0, the first of them (as the heap names it)."""
    flow, link = np.array([0, 0, 0, 1, 1]), np.array([0, 1, 2, 0, 3])
    cap = np.array([7.0, 5.0, 5.0, 2.0])
    done, rates, frozen_by = _by_scan(flow, link, np.ones(5), cap, 2)
    assert done and rates.tolist() == [5.0, 2.0] and frozen_by.tolist() == [0, 3]
    assert _by_heap(flow, link, np.ones(5), cap, 2)[1].tolist() == [0, 3]


def test_exactly_scan_rounds_levels_are_filled():
    """Flow i alone on a link of i + 1 B/s, for i < SCAN_ROUNDS: as many distinct rates as rounds
    allowed, so the scan finishes (it gives up only with flows left after them)."""
    n = SCAN_ROUNDS
    done, rates, frozen_by = _by_scan(np.arange(n), np.arange(n), np.ones(n), np.arange(n) + 1.0, n)
    assert done and rates.tolist() == list(np.arange(n) + 1.0) and frozen_by.tolist() == list(range(n))


def test_a_link_of_no_capacity_freezes_its_flows_at_zero():
    """A failed link (0 B/s, as a failed NIC is modelled) carries flows 0 and 1: they freeze at
    0 B/s in the first round (a share of 0 is within the round's threshold); flow 2 has link 1."""
    done, rates, frozen_by = _by_scan(np.array([0, 1, 1, 2]), np.array([0, 0, 1, 1]), np.ones(4),
                                      np.array([0.0, 4.0]), 3)
    assert done and rates.tolist() == [0.0, 0.0, 4.0] and frozen_by.tolist() == [0, 0, 1]


def test_a_flow_whose_tightest_link_changed_is_looked_at_again():
    """Flow 0 on links 0 (10 B/s, with flows 1 and 2: 10 / 3 each) and 1 (6 B/s, with flow 3: 3
    each, its tightest); flow 3 also on link 2 (2 B/s), which freezes it first at 2 B/s. Link 1
    then leaves flow 0 4 B/s, more than link 0's share: looked at again, flow 0 freezes with flows
    1 and 2 at 10 / 3 in the second round, frozen by link 0. Had it kept its old share (3 B/s), it
    would have frozen alone at 3 B/s, named frozen by link 1, which is not full."""
    flow, link = np.array([0, 0, 1, 2, 3, 3]), np.array([0, 1, 0, 0, 1, 2])
    cap = np.array([10.0, 6.0, 2.0])
    done, rates, frozen_by = _by_scan(flow, link, np.ones(6), cap, 4)
    assert done and rates.tolist() == [10 / 3, 10 / 3, 10 / 3, 2.0]
    assert frozen_by.tolist() == [0, 0, 0, 2]


def test_more_levels_than_scan_rounds_give_up_and_the_refill_takes_the_heap():
    """Flow i on a link of its own of i + 1 B/s, and all on link 40 (2,000 B/s): 40 distinct
    rates, one round each, more than SCAN_ROUNDS: the scan gives up. The fabric's refill of them
    with a bundle over links 41..74 among them then fills with the heap of flows: the oracle's rates."""
    n = 40
    flow = np.repeat(np.arange(n), 2)
    link = np.ravel([[i, n] for i in range(n)])
    cap = np.append(np.arange(n) + 1.0, 2000.0)
    assert SCAN_ROUNDS < n
    done, rates, _ = _by_scan(flow, link, np.ones(flow.size), cap, n)
    assert not done
    caps = list(np.arange(n) + 1.0) + [2000.0] + [50.0] * 34
    active = ActiveFlows(caps, incremental=False)              # every flow refilled
    active.step(0, [([i, n], [1.0, 1.0]) for i in range(n)] + [(list(range(n + 1, n + 35)), [1.0] * 34)])
    active.check()
    assert active.t["rate"][:n + 1].tolist() == list(np.arange(n) + 1.0) + [50.0] and active.k["refilled"] == n + 1


wide_systems = st.tuples(
    st.lists(st.lists(st.integers(0, 59), min_size=33, max_size=45, unique=True), min_size=1, max_size=4),
    st.lists(st.lists(st.integers(0, 59), min_size=1, max_size=6, unique=True), max_size=40),
    st.integers(0, 2 ** 32 - 1), st.booleans())


@given(wide_systems)
def test_random_systems_fill_as_the_heap_bit_for_bit(system):
    """Bundles over 33-45 of 60 links among up to 40 narrow flows, pairs grouped by flow, random or
    integral capacities and weights (ties): the scan's rates and bottlenecks are the heap of
    flows', bit for bit, whenever it finishes (the oracle's up to rounding)."""
    wide, narrow, seed, integral = system
    rng = np.random.default_rng(seed)
    routes = wide + narrow
    rng.shuffle(routes)
    flow = np.repeat(np.arange(len(routes)), [len(r) for r in routes])
    link = np.concatenate([np.array(r, dtype=np.int64) for r in routes])
    cap = rng.uniform(1, 100, 60)
    w = rng.uniform(0.05, 20, flow.size)
    if integral:
        cap, w = np.round(cap), np.round(w) + 1
    n = len(routes)
    done, rates, frozen_by = _by_scan(flow, link, w, cap, n)
    if done:
        heap_rates, heap_frozen_by = _by_heap(flow, link, w, cap, n)
        assert rates.tolist() == heap_rates.tolist() and frozen_by.tolist() == heap_frozen_by.tolist()
    assert rates == pytest.approx(max_min_rates(flow, link, cap, n, w), rel=1e-9) or not done


def test_a_flow_over_no_link_is_unbounded():
    """Flow 1 crosses no link: it freezes at inf in a round of its own (frozen by no link, -1),
    after flows 0 and 2 split link 0's 6 B/s."""
    done, rates, frozen_by = _by_scan(np.array([0, 2]), np.array([0, 0]), np.ones(2), np.array([6.0]), 3)
    assert done and rates.tolist() == [3.0, np.inf, 3.0] and frozen_by.tolist() == [0, -1, 0]


def test_no_flows_fill_at_once():
    done, rates, _ = _by_scan(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0),
                              np.array([1.0]), 0)
    assert done and rates.size == 0
