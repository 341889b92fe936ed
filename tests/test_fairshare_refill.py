"""sim.network.fairshare.refill: which flows a refill recomputes (the refill set) and that the others keep
their rates, on cases worked by hand and on random arrivals and departures (flows driven as the
fabric drives them, :class:`test_fairshare_step.ActiveFlows`)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fairshare_step import ActiveFlows


def test_a_departure_refills_only_the_flows_its_links_froze():
    """Link 0 (10 B/s) carries a, b and c; link 1 (6 B/s) carries c, d and e. Link 1 freezes c, d
    and e at 2 B/s, then link 0 a and b at (10 - 2) / 2 = 4. When a ends, only b, which link 0
    froze, changes: to 10 - 2 = 8. c, d and e share links with it but link 1 froze them: they keep
    their rates and are not refilled (their connected component is all four flows)."""
    active = ActiveFlows([10.0, 6.0])
    active.step(0, [([0], [1.0]), ([0], [1.0]), ([0, 1], [1.0, 1.0]), ([1], [1.0]), ([1], [1.0])])
    assert active.t["rate"][:5].tolist() == [4.0, 4.0, 2.0, 2.0, 2.0]
    active.step(1, [])
    active.check()
    assert active.t["rate"][:4].tolist() == [8.0, 2.0, 2.0, 2.0] and active.k["refilled"] == 1


def test_a_flow_outside_the_set_faster_on_a_members_bottleneck_joins_it():
    """Link 0 (10 B/s) carries g and h, each also on a 4 B/s link of its own (1, 2), which freeze
    them at 4; four flows share link 3 (100 B/s) apart. A new flow x on link 0 alone slows g and h,
    yet link 0 froze neither: the set {x} gets the 2 B/s they leave, and g and h, faster on x's
    bottleneck, join it; filled again, all three get 10 / 3 B/s. Three flows refilled, not seven."""
    active = ActiveFlows([10.0, 4.0, 4.0, 100.0])
    active.step(0, [([0, 1], [1.0, 1.0]), ([0, 2], [1.0, 1.0])] + [([3], [1.0])] * 4)
    assert active.t["rate"][:6].tolist() == [4.0, 4.0, 25.0, 25.0, 25.0, 25.0]
    active.step(0, [([0], [1.0])])
    active.check()
    assert active.t["rate"][:7] == pytest.approx([10 / 3, 10 / 3, 25, 25, 25, 25, 10 / 3], rel=1e-12)
    assert active.k["refilled"] == 3




def test_a_faster_flow_joins_the_set_through_any_of_its_links():
    """The same as above with x over a spare link first (4, 100 B/s, then 0): x's bottleneck, link
    0, is the set's second link, not its first; g and h still join through it: three refilled."""
    active = ActiveFlows([10.0, 4.0, 4.0, 100.0, 100.0])
    active.step(0, [([0, 1], [1.0, 1.0]), ([0, 2], [1.0, 1.0])] + [([3], [1.0])] * 4)
    active.step(0, [([4, 0], [1.0, 1.0])])
    active.check()
    assert active.t["rate"][:7] == pytest.approx([10 / 3, 10 / 3, 25, 25, 25, 25, 10 / 3], rel=1e-12)
    assert active.k["refilled"] == 3

routes = st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True)
events = st.lists(st.tuples(st.integers(0, 3), st.lists(routes, max_size=3)), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([4.0, 5.0, 8.0, 10.0, 20.0]), min_size=8, max_size=8), events)
def test_flows_outside_the_refill_set_keep_their_rates_bit_for_bit(capacity, events):
    """After random arrivals and departures, no more earlier flows change rate (to the last bit)
    than the refill recomputed, and the rates equal a whole refill's after every event (to 1e-9,
    rounding; the oracle's too, ``ActiveFlows.check``)."""
    active, whole = ActiveFlows(capacity), ActiveFlows(capacity, incremental=False)
    for ends, arrivals in events:
        kept = max(active.n - ends, 0)
        before = active.t["rate"][ends:ends + kept].copy()
        for run in (active, whole):
            run.step(ends, [(links, [1.0] * len(links)) for links in arrivals])
        active.check()
        changed = int(np.sum(active.t["rate"][:kept] != before))
        assert changed <= active.k.get("refilled", 0)
        assert active.t["rate"][:active.n] == pytest.approx(whole.t["rate"][:whole.n], rel=1e-9)


def test_a_set_that_keeps_growing_gives_way_to_a_whole_refill():
    """A new flow x over links 0-3 (10 B/s each), each also carrying a flow g_i held by a link of its
    own at 6, 7, 8 and 9 B/s (six more flows share link 8 apart). Filled alone, x gets the 1 B/s
    link 3 leaves, and g_3 is faster there; with g_3, x takes link 2's 2 B/s and g_2 joins; and so on,
    one link a filling. After MAX_FILLINGS fillings every flow is refilled: x and every g_i at 5."""
    from sim.network.fairshare.refill import MAX_FILLINGS
    assert MAX_FILLINGS == 3
    active = ActiveFlows([10.0] * 4 + [6.0, 7.0, 8.0, 9.0, 100.0])
    active.step(0, [([i, 4 + i], [1.0, 1.0]) for i in range(4)] + [([8], [1.0])] * 6)
    assert active.t["rate"][:4].tolist() == [6.0, 7.0, 8.0, 9.0]
    active.step(0, [([0, 1, 2, 3], [1.0] * 4)])
    active.check()
    assert active.t["rate"][[0, 1, 2, 3, 10]].tolist() == [5.0] * 5 and active.k["refilled"] == 11


def test_a_bundle_with_a_faster_flow_on_its_bottleneck_refills_every_flow():
    """A flow W over links 0-33 (wider than WIDE_FLOW, 10 B/s each) arrives beside g, on link 0 and
    a 6 B/s link of its own (40) that froze it at 6; four flows share link 41 apart. Filled alone,
    W gets the 4 B/s g leaves on link 0, and g is faster there: a bundle would take its links'
    faster flows in one filling at a time, so every flow is refilled at once (7, not the 2 of a
    second filling): W and g split link 0, 5 each."""
    from sim.network.fairshare import WIDE_FLOW
    active = ActiveFlows([10.0] * 40 + [6.0, 100.0])
    active.step(0, [([0, 40], [1.0, 1.0])] + [([41], [1.0])] * 4)
    assert active.t["rate"][:5].tolist() == [6.0, 25.0, 25.0, 25.0, 25.0]
    active.step(0, [(list(range(34)), [1.0] * 34)])
    active.check()
    assert 34 > WIDE_FLOW and active.t["rate"][[0, 5]].tolist() == [5.0, 5.0] and active.k["refilled"] == 6


def test_the_set_before_any_filling_counts_each_link_once():
    """first_members: two new flows cross link 2 (it froze 3 flows) and link 7 (none), and flows
    left links 5 (it froze 1) and 2 again: the set holds at least 2 + 3 + 1 flows, and the links
    counted are marked."""
    from sim.network.fairshare import Instant, Pairs, Scratch
    from sim.network.fairshare.refill import first_members
    bott_count = np.zeros(10, dtype=np.int64)
    bott_count[[2, 5]] = [3, 1]
    pair_link = np.array([9, 9, 2, 7, 2])            # pairs 2..4 are the new flows'
    gen = np.zeros(10, dtype=np.int64)
    pairs = Pairs(np.array([0, 1, 2, 2, 3]), pair_link, np.ones(5))
    scratch = Scratch(gen, np.zeros(10, dtype=np.int64), np.array([5, 2, 0]))
    count = first_members(pairs, bott_count, scratch, Instant(4, 2, 5, 2, 0.0, 1, True), 2, -4)
    assert count == 6 and np.flatnonzero(gen == -4).tolist() == [2, 5, 7]


def test_a_flow_outside_the_set_as_fast_as_a_member_does_not_join_it():
    """Link 0 (8 B/s) carries g, frozen at 4 by a link of its own (1), and k, frozen at 2 by its
    own (2); four flows share link 4 apart. A new flow x on link 0 (and a wide link 3) gets what
    they leave, 2 B/s, as fast as k: only g, faster, joins the set; filled again, x and g split
    the 6 B/s k leaves, 3 each. Two flows refilled: k, no faster than x (within 1e-12), stays out."""
    active = ActiveFlows([8.0, 4.0, 2.0, 100.0, 100.0])
    active.step(0, [([0, 1], [1.0, 1.0]), ([0, 2], [1.0, 1.0])] + [([4], [1.0])] * 4)
    assert active.t["rate"][:2].tolist() == [4.0, 2.0]
    active.step(0, [([0, 3], [1.0, 1.0])])
    active.check()
    assert active.t["rate"][[0, 1, 6]].tolist() == [3.0, 2.0, 3.0] and active.k["refilled"] == 2


def test_a_set_holding_a_flow_over_many_links_is_filled_by_scans():
    """A flow W over links 0-33 (wider than WIDE_FLOW) shares link 0 (4 B/s) with a, which leaves;
    four flows share link 40 apart. Link 0 froze W: the set is W alone, filled by scans
    (scan.fill_scan, the heap of flows' rounds): W now has link 0 to itself, 4 B/s."""
    from sim.network.fairshare import WIDE_FLOW
    active = ActiveFlows([4.0] + [10.0] * 40 + [100.0])
    active.step(0, [([0], [1.0]), (list(range(34)), [1.0] * 34)] + [([41], [1.0])] * 4)
    assert 34 > WIDE_FLOW and active.t["rate"][:2].tolist() == [2.0, 2.0]
    active.step(1, [])
    active.check()
    assert active.t["rate"][:5].tolist() == [4.0, 25.0, 25.0, 25.0, 25.0] and active.k["refilled"] == 1


def test_flows_are_grouped_by_the_link_that_froze_them_in_increasing_order():
    """group_by_bottleneck on flows 0..5 frozen by links 7, 2, 7, 9, 2, 7 (counts kept per link, as the
    fabric keeps them): link 7's group is 0, 2, 5, link 2's 1, 4, link 9's 3; each link that froze
    a flow is marked, the others are not."""
    from sim.network.fairshare import Scratch
    from sim.network.fairshare.refill import group_by_bottleneck
    bottleneck = np.array([7, 2, 7, 9, 2, 7])
    counts = np.bincount(bottleneck, minlength=12)
    gen, local = np.zeros(12, dtype=np.int64), np.zeros(12, dtype=np.int64)
    start, frozen = group_by_bottleneck(bottleneck, counts, Scratch(gen, local, local), 6, -5)
    groups = {l: frozen[start[local[l]]:start[local[l]] + counts[l]].tolist() for l in (7, 2, 9)}
    assert groups == {7: [0, 2, 5], 2: [1, 4], 9: [3]}
    assert np.flatnonzero(gen == -5).tolist() == [2, 7, 9]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=40))
def test_grouping_by_bottleneck_is_a_stable_sort(bottlenecks):
    """Any bottleneck links: the groups, read in the order their links first come up, are the
    flows sorted by link in that order, each group in increasing flow order (a stable sort)."""
    from sim.network.fairshare import Scratch
    from sim.network.fairshare.refill import group_by_bottleneck
    bottleneck = np.array(bottlenecks, dtype=np.int64)
    counts = np.bincount(bottleneck, minlength=10)
    gen, local = np.full(10, 3, dtype=np.int64), np.zeros(10, dtype=np.int64)
    start, frozen = group_by_bottleneck(bottleneck, counts, Scratch(gen, local, local), bottleneck.size, -1)
    firsts = list(dict.fromkeys(bottlenecks))
    assert frozen.tolist() == [g for l in firsts for g in np.flatnonzero(bottleneck == l)]
    assert [local[l] for l in firsts] == list(range(len(firsts)))
    assert start[:len(firsts)].tolist() == np.cumsum([0] + [counts[l] for l in firsts])[:-1].tolist()


def test_flow_starts_point_each_flow_at_its_first_pair():
    """Pairs of flows 0, 0, 2, 2, 2 among four flows: flow 1 and flow 3 have none (they start where
    the next flow does, or at the end)."""
    from sim.network.fairshare.refill import flow_starts
    assert flow_starts(4, 5, np.array([0, 0, 2, 2, 2])).tolist() == [0, 2, 2, 5, 5]
    assert flow_starts(2, 0, np.zeros(0, dtype=np.int64)).tolist() == [0, 0, 0]
