"""sim.network.maxmin: textbook cases, invariants, and the compiled and incremental versions against the numpy oracle."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.network.maxmin import max_min_rates


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
    from sim.network.maxmin import rates
    flow, link, cap = arrays(*instance)
    n = int(flow.max()) + 1
    assert rates(flow, link, cap, n) == pytest.approx(max_min_rates(flow, link, cap, n), rel=1e-9)


@given(instances, st.data())
def test_recomputing_the_touched_components_gives_the_full_allocation(instance, data):
    """Forget the rates of a few flows (as if they had just started, or a neighbour had ended), let
    update_rates recompute the flows connected to them (or all, past the limit): the max-min
    allocation of every flow, as a full recomputation gives it."""
    from sim.network.maxmin import update_rates
    flow, link, cap = arrays(*instance)
    n = int(flow.max()) + 1
    full = max_min_rates(flow, link, cap, n)
    seeds = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4)), dtype=np.int64)
    rates = full.copy()
    rates[seeds] = 0.0
    update_rates(flow, link, cap, rates, seeds, data.draw(st.integers(1, n)))
    assert rates == pytest.approx(full, rel=1e-9)


def test_touched_flows_are_the_seeds_components():
    from sim.network.maxmin import touched_flows
    # components {0, 1} (link 0), {2} (link 1), {3, 4} (links 2, 3)
    flow = np.array([0, 1, 2, 3, 3, 4])
    link = np.array([0, 0, 1, 2, 3, 3])
    assert touched_flows(np.array([1]), flow, link, 5, 4).tolist() == [True, True, False, False, False]
    assert touched_flows(np.array([4, 2]), flow, link, 5, 4).tolist() == [False, False, True, True, True]
