"""sim.network.fairshare's oracle, heaps and fillings: textbook cases, invariants, and the compiled
fillings against the numpy oracle (the fabric's incremental solving is checked against full
recomputation in test_fabric)."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.network.fairshare import max_min_rates


def rates_for(routes, caps):
    flow = np.concatenate([[i] * len(r) for i, r in enumerate(routes)]).astype(int)
    link = np.concatenate([r for r in routes]).astype(int)
    return max_min_rates(flow, link, np.array(caps, float), len(routes))


def test_k_equal_flows_share_one_link():
    assert rates_for([[0]] * 4, [100.0]) == pytest.approx([25.0] * 4)


def test_textbook_two_links():
    """Links A (10) and B (20); flow 0 uses A and B, flow 1 uses A, flow 2 uses B.
    A is the bottleneck: flows 0 and 1 get 5; flow 2 takes what B has left, 15."""
    assert rates_for([[0, 1], [0], [1]], [10.0, 20.0]) == pytest.approx([5.0, 5.0, 15.0])


def test_bertsekas_gallager_example():
    """Links 0..2 of capacity 1; flow 0 uses all three, flows 1, 2, 3 one each, plus flow 4 on
    link 0: link 0 (3 flows) is the bottleneck at 1/3; flows 2 and 3 split the rest: 2/3."""
    r = rates_for([[0, 1, 2], [0], [1], [2], [0]], [1.0, 1.0, 1.0])
    assert r == pytest.approx([1 / 3, 1 / 3, 2 / 3, 2 / 3, 1 / 3])


@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True), min_size=1, max_size=12),
       st.lists(st.floats(1, 100), min_size=6, max_size=6))
def test_feasible_and_every_flow_has_a_bottleneck(routes, caps):
    rates = rates_for(routes, caps)
    load = np.zeros(6)
    for r, x in zip(routes, rates):
        load[r] += x
    assert (load <= np.array(caps) * (1 + 1e-9)).all()          # no link over capacity
    for r, x in zip(routes, rates):                              # max-min optimality
        assert any(load[l] >= caps[l] * (1 - 1e-9) and
                   all(y <= x * (1 + 1e-9) for rr, y in zip(routes, rates) if l in rr) for l in r)


instances = st.tuples(
    st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=5, unique=True), min_size=1, max_size=60),
    st.lists(st.floats(1, 100), min_size=31, max_size=31),
    st.booleans())


def arrays(routes, caps, integral):
    flow = np.concatenate([[i] * len(r) for i, r in enumerate(routes)]).astype(np.int64)
    link = np.concatenate([r for r in routes]).astype(np.int64)
    capacity = np.round(np.array(caps)) if integral else np.array(caps)   # integral: many equal shares (ties)
    return flow, link, capacity


@given(instances)
def test_compiled_rates_equal_the_numpy_oracle(instance):
    from sim.network.fairshare import rates
    flow, link, cap = arrays(*instance)
    n = int(flow.max()) + 1
    assert rates(flow, link, cap, n) == pytest.approx(max_min_rates(flow, link, cap, n), rel=1e-9)


def test_a_weighted_pair_counts_as_that_many_flows_textbook():
    """Link 0 (12 B/s): flow 0 weighs 2 there, flow 1 weighs 1: the share is 12 / 3 = 4, flow 0
    loads the link with 8 B/s and flow 1 with 4, as three equal flows would."""
    flow, link, w = np.array([0, 1]), np.array([0, 0]), np.array([2.0, 1.0])
    assert max_min_rates(flow, link, np.array([12.0]), 2, w).tolist() == [4.0, 4.0]


def test_a_flow_of_zero_weight_loads_nothing_and_is_unbounded_in_the_oracle():
    """Flow 1 weighs 0 on link 1, which no other flow uses (it puts nothing there): bounded by no
    link, it gets inf, as a flow over no link does; flow 0 has link 0's 12 B/s."""
    flow, link, w = np.array([0, 1]), np.array([0, 1]), np.array([1.0, 0.0])
    assert max_min_rates(flow, link, np.array([12.0, 5.0]), 2, w).tolist() == [12.0, np.inf]


@given(instances, st.lists(st.floats(0.05, 20), min_size=300, max_size=300))
def test_weighted_compiled_rates_equal_the_numpy_oracle_and_fit_the_links(instance, weights):
    from sim.network.fairshare import rates
    flow, link, cap = arrays(*instance)
    w = np.array(weights[:flow.size])
    n = int(flow.max()) + 1
    oracle = max_min_rates(flow, link, cap, n, w)
    assert rates(flow, link, cap, n, w) == pytest.approx(oracle, rel=1e-9)
    load = np.bincount(link, weights=w * oracle[flow], minlength=cap.size)
    assert (load <= cap * (1 + 1e-9)).all()


@given(st.lists(st.lists(st.integers(0, 59), min_size=33, max_size=45, unique=True), min_size=1, max_size=4),
       st.lists(st.lists(st.integers(0, 59), min_size=1, max_size=6, unique=True), max_size=25),
       st.integers(0, 2 ** 32 - 1), st.booleans())
def test_wide_flows_fill_by_a_heap_of_flows_equal_to_the_oracle(wide, narrow, seed, integral):
    """Bundles cross many links: a flow over more than WIDE_FLOW links switches the compiled fill to
    the scans (then the heap of flows); the rates equal the numpy oracle's (integral capacities and weights: ties)."""
    from sim.network.fairshare import WIDE_FLOW, rates
    rng = np.random.default_rng(seed)
    routes = [r for pair in zip(wide + narrow, narrow + wide) for r in pair][:len(wide) + len(narrow)]
    flow, link, cap = arrays(routes, list(rng.uniform(1, 100, 60)), integral)
    w = rng.uniform(0.05, 20, flow.size)
    w = np.round(w) + 1 if integral else w
    n = int(flow.max()) + 1
    assert rates(flow, link, cap, n, w) == pytest.approx(max_min_rates(flow, link, cap, n, w), rel=1e-9)
    assert WIDE_FLOW < 45



def _heap_of_flows(flow, link, cap, n, w):
    """Rates of the heap-of-flows filling itself (whatever the flows' widths)."""
    from sim.network.fairshare import Index, Pairs
    from sim.network.fairshare.filling import fill_flows
    from sim.network.fairshare.heap import group_by
    index = Index(*group_by(link, cap.size), *group_by(flow, n))
    rates, frozen_by = np.full(n, np.inf), np.empty(n, dtype=np.int64)
    fill_flows(Pairs(flow, link, w), index, cap, np.arange(n), rates, frozen_by)
    return rates


def test_the_heap_of_flows_starts_ordered_when_the_flows_come_tightest_last():
    """Flow i alone on link i (capacity 40 - i) and all on link 40 (capacity 300): in flow order the
    shares fall, so every inner node of the heap must be sifted before the first round (the
    tightest flow is the last). Flows 39..32 freeze at their own links (1..8, 36 in all), then
    link 40 splits the 264 they leave among the other 32: 8.25 each."""
    n = 40
    flow = np.repeat(np.arange(n), 2).astype(np.int64)
    link = np.ravel([[i, n] for i in range(n)]).astype(np.int64)
    cap = np.append(40.0 - np.arange(n), 300.0)
    w = np.ones(flow.size)
    expected = [8.25] * 32 + [8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    assert max_min_rates(flow, link, cap, n, w).tolist() == expected
    assert _heap_of_flows(flow, link, cap, n, w).tolist() == expected



def test_a_flow_over_no_link_beside_a_bundle_is_unbounded():
    """Flow 0 crosses no link (``rates`` gives it inf), flow 1 is a bundle over links 0..39 (the
    scans fill it), flow 2 shares link 5 with it: they split link 5's 10 B/s."""
    from sim.network.fairshare import rates
    flow = np.array([1] * 40 + [2], dtype=np.int64)
    link = np.array(list(range(40)) + [5], dtype=np.int64)
    cap = np.full(40, 100.0)
    cap[5] = 10.0
    assert rates(flow, link, cap, 3).tolist() == max_min_rates(flow, link, cap, 3).tolist() == [np.inf, 5.0, 5.0]

@given(instances, st.lists(st.floats(0.05, 20), min_size=300, max_size=300))
def test_the_heap_of_flows_equals_the_numpy_oracle_whatever_the_widths(instance, weights):
    """The heap of flows on narrow flows too (the fabric takes it only for wide ones): up to 60
    flows of up to 5 links, with ties, against the numpy oracle."""
    flow, link, cap = arrays(*instance)
    w = np.array(weights[:flow.size])
    n = int(flow.max()) + 1
    assert _heap_of_flows(flow, link, cap, n, w) == pytest.approx(max_min_rates(flow, link, cap, n, w), rel=1e-9)

@given(st.lists(st.integers(0, 6), min_size=1, max_size=40), st.lists(st.integers(0, 39), max_size=30),
       st.lists(st.tuples(st.integers(0, 39), st.integers(0, 6)), max_size=30))
def test_indexed_heap_orders_links_by_share_then_link(keys, removed, changes):
    """The fill's heap, after removals and key changes (up and down), yields its links in
    (key, link) order: the order of (share, link) tuples, equal keys by the lower link."""
    from sim.network.fairshare.heap import heap_down, heap_remove, heap_up, heapify
    key = np.array(keys, dtype=float)
    n = key.size
    heap, pos = np.arange(n), np.arange(n)
    heapify(heap, pos, key, n)
    size, alive = n, set(range(n))
    for link in removed:
        if link in alive:
            size = heap_remove(heap, pos, key, link, size)
            alive.discard(link)
            assert pos[link] == -1
    for link, value in changes:
        if link in alive:
            lower = value < key[link]
            key[link] = value
            (heap_up(heap, pos, key, pos[link]) if lower else heap_down(heap, pos, key, pos[link], size))
    order = []
    while size:
        order.append(int(heap[0]))
        size = heap_remove(heap, pos, key, int(heap[0]), size)
    assert order == sorted(alive, key=lambda link: (key[link], link))


def test_without_numba_rates_are_the_numpy_version(monkeypatch):
    """Where numba is missing, ``rates`` is :func:`max_min_rates` on the same arguments: the
    textbook case of two links (flow 0 on both, flows 1 and 2 on one each) with weights."""
    from sim.network.fairshare import filling
    flows, links = np.array([0, 0, 1, 2]), np.array([0, 1, 0, 1])
    capacity, weights = np.array([1.0, 2.0]), np.array([1.0, 1.0, 1.0, 2.0])
    monkeypatch.setattr(filling, "COMPILED", False)
    monkeypatch.setattr(filling, "fill", None)                  # not reached: the oracle answers
    got = filling.rates(flows, links, capacity, 3, weights)
    assert got.tolist() == max_min_rates(flows, links, capacity, 3, weights).tolist() == [0.5, 0.5, 0.75]


def test_inner_loop_helpers_are_compiled_without_reference_counting():
    """The helpers the kernels call per link, pair or heap move run without numba's reference
    counting (``jit.LEAF``): counting every array argument around each call made a loop of
    ``credit`` calls up to 28x slower than the same code inline (numba/numba#2345)."""
    from sim.network import jit, links, traffic
    from sim.network.fairshare import filling, heap, refill, step, tallies
    if not filling.COMPILED or not hasattr(tallies.credit, "targetoptions"):
        pytest.skip("numba is not installed or compiles nothing (NUMBA_DISABLE_JIT)")
    helpers = [heap.heap_less, heap.heap_up, heap.heap_down, heap.heap_remove, heap.heapify, tallies.credit,
               refill.settle, refill.take_frozen, refill.first_members, step.first_pair, step.move_pairs,
               step.copy_up, traffic._keep_smallest, links._rank, links._walk]
    assert jit.LEAF == {"cache": True, "_nrt": False}
    assert [h.targetoptions.get("_nrt") for h in helpers] == [False] * len(helpers)


def test_a_removal_that_must_move_up_keeps_the_heap_in_order():
    """Keys by place: 0 at the root; 10 (place 1) over 11 and 12; 1 (place 2) over 2 and 3. Taking
    out place 3's item moves the last (key 3) there, below 10: it must go up to place 1 (its parent
    is place 1, not the root). The heap then yields 0, 1, 2, 3, 10, 12."""
    from sim.network.fairshare.heap import heap_remove
    key = np.array([0.0, 10.0, 1.0, 11.0, 12.0, 2.0, 3.0])
    heap, pos = np.arange(7), np.arange(7)
    size = heap_remove(heap, pos, key, 3, 7)
    assert heap[:size].tolist() == [0, 6, 2, 1, 4, 5] and pos[3] == -1
    order = []
    while size:
        order.append(int(heap[0]))
        size = heap_remove(heap, pos, key, int(heap[0]), size)
    assert key[order].tolist() == [0.0, 1.0, 2.0, 3.0, 10.0, 12.0]


def test_the_oracle_warns_of_nothing_when_a_link_is_left_without_flows():
    """Flows 0 and 1 share link 0 (2 B/s) and freeze at 1 each; flow 1 also crosses link 1 (10 B/s),
    left then with 9 B/s and no flow; flow 2 (link 2, 100 B/s) goes on. The next round divides
    link 1's 9 B/s by its 0 flows: inf, silently (no RuntimeWarning)."""
    import warnings
    flow, link = np.array([0, 1, 1, 2]), np.array([0, 0, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert max_min_rates(flow, link, np.array([2.0, 10.0, 100.0]), 3).tolist() == [1.0, 1.0, 100.0]
