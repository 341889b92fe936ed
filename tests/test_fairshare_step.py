"""sim.network.fairshare.step: the fabric's kernels on flows worked by hand, and the fast path of
its solve (rates left as they are) against the numpy max-min oracle on random arrivals and
departures. The tests keep the arrays in dicts by their old names; the records are views of them."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.network.fairshare import (
    WIDE_FLOW,
    Flows,
    Instant,
    Links,
    Pairs,
    Scratch,
    advance,
    drop_finished,
    max_min_rates,
)
from sim.network.fairshare import credit_all as credit_links
from sim.network.fairshare import solve as solve_kernel


def table():
    """Three flows: 0 on links 0, 1; 1 on link 1; 2 on link 2 (pairs in flow order)."""
    return dict(size=np.array([100.0, 50.0, 30.0]), remaining=np.array([100.0, 50.0, 30.0]),
                rate=np.zeros(3), flow_id=np.array([7, 8, 9]), bottleneck=np.zeros(3, dtype=np.int64),
                pair_flow=np.array([0, 0, 1, 2]), pair_link=np.array([0, 1, 1, 2]), pair_weight=np.ones(4))


def link_state(n_links):
    """The per-link arrays the fabric keeps: rates, peak utilisation, scratch, bottleneck bookkeeping,
    tallies (bytes, busy seconds, and the time they run to)."""
    return dict(link_rate=np.zeros(n_links), peak=np.zeros(n_links), gen=np.zeros(n_links, dtype=np.int64),
                link_bytes=np.zeros(n_links), link_busy=np.zeros(n_links), since=np.zeros(n_links),
                local=np.zeros(n_links, dtype=np.int64), link_users=np.zeros(n_links, dtype=np.int64),
                link_max=np.zeros(n_links), bott_count=np.zeros(n_links, dtype=np.int64))


def flows_of(t):
    return Flows(t["size"], t["remaining"], t["rate"], t["flow_id"], t["bottleneck"])


def pairs_of(t):
    return Pairs(t["pair_flow"], t["pair_link"], t["pair_weight"])


def links_of(k, capacity=None):
    """The link record over a link state's arrays (``capacity`` 1 B/s each when not needed)."""
    capacity = np.ones(k["link_rate"].size) if capacity is None else np.asarray(capacity, dtype=float)
    return Links(capacity, k["link_rate"], k["link_users"], k["link_max"], k["bott_count"], k["peak"],
                 k["link_bytes"], k["link_busy"], k["since"])


def solve(t, k, capacity, n, kept, n_pairs, dirty=np.zeros(1, dtype=np.int64), n_dirty=0, tick=1, incremental=True,
          now=0.0):
    """step.solve on a table and a link state: (seconds to the next completion, rates unchanged);
    ``k["refilled"]`` gets the number of flows it refilled."""
    nearest, k["refilled"] = solve_kernel(flows_of(t), pairs_of(t), links_of(k, capacity),
                                          Scratch(k["gen"], k["local"], dirty),
                                          Instant(n, kept, n_pairs, n_dirty, now, tick, incremental))
    return nearest, k["refilled"] == 0


def drop(t, k, n, n_pairs, now=0.0, window=0.0):
    """step.drop_finished at ``now``: (flows left, pairs left, done ids, links they left)."""
    done, dirty = np.empty(n, dtype=np.int64), np.empty(n_pairs, dtype=np.int64)
    n, n_pairs, n_done, n_dirty = drop_finished(flows_of(t), pairs_of(t), links_of(k), Instant(n, n, n_pairs, 0, now, 0, True),
                                                window, done, dirty)
    return n, n_pairs, done[:n_done], dirty[:n_dirty]


def credit_all(k, now):
    credit_links(links_of(k), now)


def test_solve_then_advance_then_drop():
    t, k = table(), link_state(3)
    capacity = np.array([10.0, 10.0, 5.0])
    # all three are new: link 1 is shared by flows 0 and 1 (5 each), flow 2 alone on link 2 (5)
    nearest, unchanged = solve(t, k, capacity, 3, 0, 4)
    assert t["rate"].tolist() == [5.0, 5.0, 5.0] and not unchanged      # the first flows: a refill
    assert k["link_rate"].tolist() == [5.0, 10.0, 5.0] and k["peak"].tolist() == [0.5, 1.0, 1.0]
    assert t["bottleneck"].tolist() == [1, 1, 2] and k["bott_count"].tolist() == [0, 2, 1]
    assert k["link_users"].tolist() == [1, 2, 1] and k["link_max"].tolist() == [5.0, 5.0, 5.0]
    assert nearest == pytest.approx(30.0 / 5.0)                      # flow 2 first
    advance(flows_of(t), 3, 6.0)
    assert t["remaining"].tolist() == [70.0, 20.0, 0.0]
    n, pairs, done, dirty = drop(t, k, 3, 4, now=6.0)
    assert (n, pairs, done.tolist(), dirty.tolist()) == (2, 3, [9], [2])
    # flow 2 leaves link 2: its tally comes up to 6 s first (5 B/s x 6 s); links 0 and 1 wait for a change
    assert k["link_bytes"].tolist() == [0.0, 0.0, 30.0] and k["link_busy"].tolist() == [0.0, 0.0, 6.0]
    credit_all(k, 6.0)
    assert k["link_bytes"].tolist() == [30.0, 60.0, 30.0] and k["link_busy"].tolist() == [6.0, 6.0, 6.0]
    credit_all(k, 8.0)                                               # link 2 is idle now: no bytes, not busy
    assert k["link_bytes"].tolist() == [40.0, 80.0, 30.0] and k["link_busy"].tolist() == [8.0, 8.0, 6.0]
    assert k["link_rate"][2] == 0.0 and k["link_users"][2] == 0 and k["bott_count"][2] == 0   # flow 2 left link 2
    assert t["pair_flow"][:3].tolist() == [0, 0, 1] and t["flow_id"][:2].tolist() == [7, 8]
    # flow 2 ended on link 2, which froze no other flow: flows 0 and 1 keep their rates, unrefilled
    nearest, unchanged = solve(t, k, capacity, 2, 2, 3, dirty, dirty.size, tick=2, now=8.0)
    assert unchanged and t["rate"][:2].tolist() == [5.0, 5.0] and nearest == pytest.approx(20.0 / 5.0)


def test_a_departure_speeds_up_its_neighbours():
    t, k = table(), link_state(3)
    capacity = np.array([10.0, 10.0, 5.0])
    solve(t, k, capacity, 3, 0, 4)
    t["remaining"][1] = 0.0                                          # flow 1 is done
    n, pairs, done, dirty = drop(t, k, 3, 4, now=1.0)
    _, unchanged = solve(t, k, capacity, n, n, pairs, dirty, dirty.size, tick=2, now=1.0)
    assert not unchanged                                             # link 1 froze flow 0 too
    assert t["rate"][:2].tolist() == [10.0, 5.0]                     # flow 0 now alone on links 0 and 1
    assert k["link_rate"].tolist() == [10.0, 10.0, 5.0]
    assert t["bottleneck"][:2].tolist() == [0, 2] and k["bott_count"].tolist() == [1, 0, 1]
    assert k["link_bytes"].tolist() == [5.0, 10.0, 0.0]   # links 0 and 1 changed rate at 1 s; link 2 did not


def test_a_weighted_pair_counts_as_that_many_flows():
    """Flow 0 weighs 3 on link 1 (a bundle of three flows there): on link 1 (10 B/s) the weights are
    3 + 1, so the share is 10 / 4 = 2.5; flow 0 carries 3 x 2.5 = 7.5 B/s there, flow 1 2.5."""
    t, k = table(), link_state(3)
    t["pair_weight"] = np.array([1.0, 3.0, 1.0, 1.0])
    capacity = np.array([10.0, 10.0, 5.0])
    solve(t, k, capacity, 3, 0, 4)
    assert t["rate"].tolist() == [2.5, 2.5, 5.0]
    assert k["link_rate"].tolist() == [2.5, 10.0, 5.0]
    credit_all(k, 2.0)
    assert k["link_bytes"].tolist() == [5.0, 20.0, 10.0]        # link 1: (3 x 2.5 + 2.5) x 2 s


def test_a_flow_within_a_billionth_of_its_size_is_done_and_its_last_bytes_are_credited():
    """A 1e12-byte flow left with 0.5 bytes (float rounding of its drain: 5e-13 of its size, under
    the slack of 1e-9 x size + 1e-6 bytes) is done at once; its last 0.5 bytes go to its link (weight
    2: 1.0 byte). A 1-byte flow with 0.5 bytes left is not done (0.5 > 1e-9 + 1e-6)."""
    t = dict(size=np.array([1e12, 1.0]), remaining=np.array([0.5, 0.5]), rate=np.array([1e9, 1.0]),
             flow_id=np.array([4, 5]), bottleneck=np.array([0, 1]), pair_flow=np.array([0, 1]),
             pair_link=np.array([0, 1]), pair_weight=np.array([2.0, 1.0]))
    k = link_state(2)
    k["link_rate"][:] = [2e9, 1.0]
    k["link_users"][:] = k["bott_count"][:] = [1, 1]
    k["link_bytes"][:] = [10.0, 0.0]
    n, pairs, done, dirty = drop(t, k, 2, 2)
    assert (n, pairs, done.tolist(), dirty.tolist()) == (1, 1, [4], [0])
    assert k["link_bytes"].tolist() == [11.0, 0.0] and k["link_rate"].tolist() == [0.0, 1.0]
    assert k["link_users"].tolist() == [0, 1] and k["bott_count"].tolist() == [0, 1]
    assert t["flow_id"][0] == 5 and t["remaining"][0] == 0.5 and t["pair_link"][0] == 1 and t["bottleneck"][0] == 1


def test_a_flow_exactly_at_the_slack_is_done_and_nothing_done_leaves_no_link():
    """The slack is inclusive: a flow left with exactly ``rate x window + 1e-9 x size + 1e-6`` bytes
    (the same float expression) is done. A drop that finds no flow due removes nothing and names no
    link left."""
    size, rate, window = 1e3, 3.0, 0.25
    t = dict(size=np.array([size, size]), remaining=np.array([rate * window + 1e-9 * size + 1e-6, 5.0]),
             rate=np.array([rate, rate]), flow_id=np.array([4, 5]), bottleneck=np.array([0, 1]),
             pair_flow=np.array([0, 1]), pair_link=np.array([0, 1]), pair_weight=np.ones(2))
    k = link_state(2)
    k["link_rate"][:] = [3.0, 3.0]
    k["link_users"][:] = k["bott_count"][:] = [1, 1]
    assert drop(t, k, 2, 2, window=window)[:2] == (1, 1)
    n, pairs, done, dirty = drop(t, k, 1, 1, window=window)
    assert (n, pairs, done.tolist(), dirty.tolist()) == (1, 1, [], [])


def test_a_link_left_by_its_last_flow_carries_exactly_nothing():
    """Two flows of 0.1 and 0.2 B/s on link 0 load it with 0.30000000000000004; when the first ends
    0.20000000000000004 is left, and when the second ends the link carries 0, not the 2.8e-17 of
    rounding that subtracting its rate would leave."""
    t = dict(size=np.full(2, 1e3), remaining=np.array([0.0, 1e3]), rate=np.array([0.1, 0.2]),
             flow_id=np.array([0, 1]), bottleneck=np.array([1, 1]), pair_flow=np.array([0, 1]),
             pair_link=np.array([0, 0]), pair_weight=np.ones(2))
    k = link_state(2)
    k["link_rate"][0] = 0.1 + 0.2
    k["link_users"][0], k["bott_count"][1] = 2, 2
    drop(t, k, 2, 2)
    assert k["link_rate"][0] == 0.1 + 0.2 - 0.1 and k["link_users"][0] == 1 and 0.1 + 0.2 - 0.1 - 0.2 != 0.0
    t["remaining"][0] = 0.0
    assert drop(t, k, 1, 1)[:2] == (0, 0)
    assert k["link_rate"][0] == 0.0 and k["link_users"][0] == 0 and k["bott_count"][1] == 0


def test_flows_over_no_link_are_dropped_and_the_later_flows_renumbered():
    """Done flows 0 (no pairs) and 2 (link 1) among kept flows 1 (links 0, 2) and 3 (link 2): the
    kept flows become 0 and 1 and their pairs follow them, though flow 0 left no pair behind."""
    t = dict(size=np.full(4, 10.0), remaining=np.array([0.0, 5.0, 0.0, 5.0]), rate=np.ones(4),
             flow_id=np.array([10, 11, 12, 13]), bottleneck=np.array([3, 0, 1, 2]),
             pair_flow=np.array([1, 1, 2, 3]), pair_link=np.array([0, 2, 1, 2]), pair_weight=np.array([1.0, 2.0, 1.0, 3.0]))
    k = link_state(4)
    k["link_rate"][:] = [1.0, 1.0, 5.0, 0.0]
    k["link_users"][:] = [1, 1, 2, 0]
    k["bott_count"][:] = [1, 1, 1, 1]
    n, pairs, done, dirty = drop(t, k, 4, 4)
    assert (n, pairs, done.tolist(), dirty.tolist()) == (2, 3, [10, 12], [1])
    assert t["pair_flow"][:3].tolist() == [0, 0, 1] and t["pair_link"][:3].tolist() == [0, 2, 2]
    assert t["pair_weight"][:3].tolist() == [1.0, 2.0, 3.0] and t["flow_id"][:2].tolist() == [11, 13]
    assert t["bottleneck"][:2].tolist() == [0, 2] and k["bott_count"].tolist() == [1, 0, 1, 0]
    assert k["link_users"].tolist() == [1, 0, 2, 0] and k["link_rate"][1] == 0.0


def test_an_arrival_on_spare_capacity_keeps_the_other_rates():
    """Flow A on links 0 (10 B/s) and 1 (4 B/s) runs at 4, frozen by link 1. Flow B arrives on link 0:
    the spare 6 B/s is its rate, link 0 its bottleneck (A, at 4, is not faster): A is untouched.
    Water-filling gives the same: both rise to 4, link 1 freezes A, B goes on to 6."""
    t = dict(size=np.full(2, 1e3), remaining=np.full(2, 1e3), rate=np.zeros(2), flow_id=np.array([0, 1]),
             bottleneck=np.zeros(2, dtype=np.int64), pair_flow=np.array([0, 0, 1]), pair_link=np.array([0, 1, 0]),
             pair_weight=np.ones(3))
    k, capacity = link_state(2), np.array([10.0, 4.0])
    solve(t, k, capacity, 1, 0, 2)
    nearest, unchanged = solve(t, k, capacity, 2, 1, 3, tick=2)
    assert unchanged and t["rate"].tolist() == [4.0, 6.0] and t["bottleneck"].tolist() == [1, 0]
    assert k["link_rate"].tolist() == [10.0, 4.0] and k["peak"].tolist() == [1.0, 1.0]
    assert k["link_users"].tolist() == [2, 1] and k["bott_count"].tolist() == [1, 1] and k["link_max"][0] == 6.0
    assert nearest == pytest.approx(1e3 / 6.0)


def one_flow_per_route(routes, weights=None):
    """Flows 0..len(routes)-1 of 1e3 bytes, flow i over the links ``routes[i]`` (weights 1 unless given)."""
    flows = [i for i, links in enumerate(routes) for _ in links]
    w = np.ones(len(flows)) if weights is None else np.array([x for ws in weights for x in ws], dtype=float)
    n = len(routes)
    return dict(size=np.full(n, 1e3), remaining=np.full(n, 1e3), rate=np.zeros(n), flow_id=np.arange(n),
                bottleneck=np.zeros(n, dtype=np.int64), pair_flow=np.array(flows, dtype=np.int64),
                pair_link=np.array([l for links in routes for l in links], dtype=np.int64), pair_weight=w)


def test_the_fast_path_names_the_first_of_equally_tight_links_and_takes_slow_rates():
    """A flow over links 0 and 1 of 0.5 B/s each, alone: the fast path gives it 0.5 B/s (a rate below
    1 is a rate), its bottleneck the first of the two equally tight links, link 0; its links' peaks
    are raised to full."""
    t, k = one_flow_per_route([[0, 1]]), link_state(2)
    _, unchanged = solve(t, k, np.array([0.5, 0.5]), 1, 0, 2)
    assert unchanged and t["rate"][0] == 0.5 and t["bottleneck"][0] == 0 and k["bott_count"].tolist() == [1, 0]
    assert k["peak"].tolist() == [1.0, 1.0]


def test_an_arrival_on_a_full_link_that_froze_no_flow_refills():
    """Link 0 (9 B/s) carries A (frozen at 4 by link 1) and B (frozen at 5 by link 2): full, though it
    froze neither (B's tightest links tie, and the first on its route, link 2, is named). C arrives on
    link 0: its spare is 0, not a rate; the refill shares link 0 three ways, 3 B/s each."""
    t, k = one_flow_per_route([[0, 1], [2, 0], [0]]), link_state(3)
    capacity = np.array([9.0, 4.0, 5.0])
    solve(t, k, capacity, 2, 0, 4)
    assert t["rate"][:2].tolist() == [4.0, 5.0] and k["bott_count"].tolist() == [0, 1, 1]
    _, unchanged = solve(t, k, capacity, 3, 2, 5, tick=2)
    assert not unchanged and t["rate"].tolist() == [3.0, 3.0, 3.0]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")     # without numba: inf - inf in the filling's scratch
def test_an_arrival_on_a_link_of_no_limit_refills():
    """A link of infinite capacity gives an arriving flow no finite spare: the refill, not the fast
    path, rates it (at infinity, frozen by that link)."""
    t, k = one_flow_per_route([[0]]), link_state(2)
    _, unchanged = solve(t, k, np.array([np.inf, 1.0]), 1, 0, 1)
    assert not unchanged and t["rate"][0] == np.inf and k["bott_count"].tolist() == [1, 0]


def test_the_fast_path_ignores_the_fastest_flow_of_a_link_left_empty_and_accepts_a_tie():
    """A (10 B/s on link 0) ends: link 0 keeps 10 as its fastest rate, but no flow is on it, so B,
    arriving with weight 2 (5 B/s), takes the fast path. Then C arrives on link 2 (10 B/s) and link 3
    (5 B/s) beside D on link 2 frozen at 5 by link 4: C's 5 B/s ties D's, which is not faster: the
    fast path again. A drop that ends no flow leaves the rates as they are; solving no flow gives
    (infinity, 0 refilled)."""
    t, k = one_flow_per_route([[0]]), link_state(5)
    capacity = np.array([10.0, 10.0, 10.0, 5.0, 5.0])
    solve(t, k, capacity, 1, 0, 1)
    t["remaining"][0] = 0.0
    _, _, _, dirty = drop(t, k, 1, 1)
    assert k["link_users"][0] == 0 and k["link_max"][0] == 10.0
    t2 = one_flow_per_route([[0]], weights=[[2.0]])
    for key in t:
        t[key][:t2[key].size] = t2[key]
    _, unchanged = solve(t, k, capacity, 1, 0, 1, dirty, dirty.size, tick=2)
    assert unchanged and t["rate"][0] == 5.0
    t, k = one_flow_per_route([[2, 4], [2, 3]]), link_state(5)
    solve(t, k, capacity, 1, 0, 2)
    _, unchanged = solve(t, k, capacity, 2, 1, 4, tick=2)
    assert unchanged and t["rate"].tolist() == [5.0, 5.0] and t["bottleneck"].tolist() == [4, 2]
    nearest, _ = solve(t, k, capacity, 0, 0, 0)
    assert nearest == np.inf and k["refilled"] == 0


@pytest.mark.parametrize("caps, want", [([10.0, 8.0], [5.0, 5.0]), ([10.0, 20.0], [5.0, 5.0])],
                         ids=["faster-flow-on-the-spare-link", "link-full-by-its-own-flow"])
def test_an_arrival_that_slows_another_flow_refills(caps, want):
    """Flow G on links 0 (10 B/s) and 1; flow F arrives on link 0. Link 1 at 8 B/s: G runs at 8,
    frozen by link 1, and link 0's spare is 2 B/s, but G is faster than that: the two share link 0 at 5
    each. Link 1 at 20 B/s: G fills link 0 alone (its bottleneck): F must share it. Both refill."""
    t = dict(size=np.full(2, 1e3), remaining=np.full(2, 1e3), rate=np.zeros(2), flow_id=np.array([0, 1]),
             bottleneck=np.zeros(2, dtype=np.int64), pair_flow=np.array([0, 0, 1]), pair_link=np.array([0, 1, 0]),
             pair_weight=np.ones(3))
    k, capacity = link_state(2), np.array(caps)
    solve(t, k, capacity, 1, 0, 2)
    _, unchanged = solve(t, k, capacity, 2, 1, 3, tick=2)
    assert not unchanged and t["rate"].tolist() == want
    assert k["link_users"].tolist() == [2, 1] and k["bott_count"].tolist() == [2, 0]


def test_a_link_left_empty_forgets_its_fastest_flow():
    """Flow A alone on link 0 (10 B/s) runs at 10 and ends; flow B (links 0 and 1, 4 B/s) then runs
    at 4 by the fast path, and link 0's fastest flow is B's 4, not A's old 10. So flow C, arriving
    on link 0 with its spare 6 B/s, keeps the fast path too (B, at 4, is not faster)."""
    t = dict(size=np.full(3, 1e3), remaining=np.full(3, 1e3), rate=np.zeros(3), flow_id=np.array([0, 1, 2]),
             bottleneck=np.zeros(3, dtype=np.int64), pair_flow=np.array([0, 1, 1, 2]),
             pair_link=np.array([0, 0, 1, 0]), pair_weight=np.ones(4))
    k, capacity = link_state(2), np.array([10.0, 4.0])
    solve(t, k, capacity, 1, 0, 1)
    t["remaining"][0] = 0.0
    n, pairs, _, dirty = drop(t, k, 1, 1)
    assert (n, pairs) == (0, 0) and k["link_users"][0] == 0 and k["link_max"][0] == 10.0
    t["pair_flow"][:3], t["pair_link"][:3] = [0, 0, 1], [0, 1, 0]       # B, then C, compacted to 0 and 1
    t["remaining"][:2] = 1e3
    _, unchanged = solve(t, k, capacity, 1, 0, 2, dirty, dirty.size, tick=2)
    assert unchanged and t["rate"][0] == 4.0 and k["link_max"][0] == 4.0
    _, unchanged = solve(t, k, capacity, 2, 1, 3, tick=3)
    assert unchanged and t["rate"][:2].tolist() == [4.0, 6.0] and k["link_max"][0] == 6.0


class ActiveFlows:
    """Flows in the fabric's layout, driven by arrivals and departures through drop_finished and
    solve, as the fabric drives them (sizes 1 GB: no flow is due but those ended on purpose)."""

    def __init__(self, capacity, incremental=True):
        self.capacity, self.incremental = np.asarray(capacity, dtype=float), incremental
        size = 64
        self.t = dict(size=np.zeros(size), remaining=np.zeros(size), rate=np.zeros(size),
                      flow_id=np.zeros(size, dtype=np.int64), bottleneck=np.zeros(size, dtype=np.int64),
                      pair_flow=np.zeros(4 * size, dtype=np.int64), pair_link=np.zeros(4 * size, dtype=np.int64),
                      pair_weight=np.ones(4 * size))
        self.L = self.capacity.size
        self.k = link_state(self.L)
        self.n = self.n_pairs = self.tick = self.next_id = self.unchanged = 0
        self.now, self.want_bytes, self.want_busy = 0.0, np.zeros(self.L), np.zeros(self.L)

    def step(self, ends: int, arrivals: list) -> None:
        """One second later: end the ``ends`` oldest flows, start ``arrivals`` ([(links, weights)]),
        solve. Keeps what each link should have carried (``want_bytes``) and been busy."""
        t, n, P = self.t, self.n, self.n_pairs
        links, flows = t["pair_link"][:P], t["pair_flow"][:P]
        self.want_bytes += np.bincount(links, weights=t["rate"][flows] * t["pair_weight"][:P], minlength=self.L)
        self.want_busy += np.bincount(links, minlength=self.L) > 0
        self.now += 1.0
        advance(flows_of(t), n, 1.0)
        t["remaining"][:min(ends, n)] = 0.0
        dirty, n_dirty = np.zeros(1, dtype=np.int64), 0
        if ends and n:
            n, P, _, dirty = drop(t, self.k, n, P, now=self.now)
            n_dirty = dirty.size
        kept = n
        for links, weights in arrivals:
            t["size"][n] = t["remaining"][n] = 1e9
            t["flow_id"][n] = self.next_id
            self.next_id += 1
            t["pair_flow"][P:P + len(links)] = n
            t["pair_link"][P:P + len(links)] = links
            t["pair_weight"][P:P + len(links)] = weights
            n, P = n + 1, P + len(links)
        self.n, self.n_pairs, self.tick = n, P, self.tick + 1
        if n:
            _, unchanged = solve(t, self.k, self.capacity, n, kept, P, dirty, n_dirty, self.tick, self.incremental,
                                 self.now)
            self.unchanged += unchanged

    def check(self) -> None:
        """Rates equal the numpy oracle's for the flows now; the bookkeeping matches the flows; each
        link's tallies, brought up to now, are what its flows put on it second by second."""
        t, k, n, P, L = self.t, self.k, self.n, self.n_pairs, self.L
        credit_all(k, self.now)
        assert k["link_bytes"] == pytest.approx(self.want_bytes, rel=1e-9, abs=1e-9)
        assert (k["link_busy"] == self.want_busy).all()
        flows, links, weights = t["pair_flow"][:P], t["pair_link"][:P], t["pair_weight"][:P]
        rate = t["rate"][:n]
        want = max_min_rates(flows, links, self.capacity, n, weights)
        assert rate == pytest.approx(want, rel=1e-9)
        load = np.bincount(links, weights=rate[flows] * weights, minlength=L)
        assert k["link_rate"] == pytest.approx(load, rel=1e-9, abs=1e-9)
        assert (load <= self.capacity * (1 + 1e-9)).all()
        assert (k["link_users"] == np.bincount(links, minlength=L)).all()
        assert (k["bott_count"] == np.bincount(t["bottleneck"][:n], minlength=L)).all()
        fastest = np.zeros(L)
        np.maximum.at(fastest, links, rate[flows])
        in_use = k["link_users"] > 0
        assert (k["link_max"][in_use] >= fastest[in_use] * (1 - 1e-12)).all()
        for f in range(n):                     # a bottleneck: full, and no flow on it is faster
            b = t["bottleneck"][f]
            assert b in links[flows == f]
            assert load[b] == pytest.approx(self.capacity[b], rel=1e-9)
            assert rate[f] >= fastest[b] * (1 - 1e-9)


routes = st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True)
arrival = st.tuples(routes, st.sampled_from([1.0, 1.0, 2.0, 3.0]))
events = st.lists(st.tuples(st.integers(0, 3), st.lists(arrival, max_size=3)), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([4.0, 5.0, 8.0, 10.0, 20.0]), min_size=6, max_size=6), events)
def test_rates_after_any_arrivals_and_departures_equal_the_oracle(capacity, events):
    """Random arrivals (weighted pairs, ties of capacities) and departures: after each, rates from
    the fast path or the refill equal the numpy oracle's, and every flow has a bottleneck."""
    active = ActiveFlows(capacity)
    for ends, arrivals in events:
        active.step(ends, [(links, [w] * len(links)) for links, w in arrivals])
        active.check()


def test_the_fast_path_is_taken_and_right_on_a_long_random_run():
    """A seeded run of 400 events: many keep every earlier rate (and are checked like the rest);
    without ``incremental`` none does, and the rates are the same."""
    rng = np.random.default_rng(7)
    capacity = rng.choice([4.0, 5.0, 8.0, 10.0, 20.0, 40.0], 12)
    runs = [ActiveFlows(capacity), ActiveFlows(capacity, incremental=False)]
    for _ in range(400):
        ends = int(rng.integers(0, 3))
        arrivals = [(rng.choice(12, int(rng.integers(1, 4)), replace=False), [1.0])
                    for _ in range(int(rng.integers(0, 3)))]
        arrivals = [(links, np.full(links.size, float(rng.choice([1, 2])))) for links, _ in arrivals]
        for active in runs:
            active.step(ends, arrivals)
            active.check()
        fast, full = runs
        assert fast.t["rate"][:fast.n] == pytest.approx(full.t["rate"][:full.n], rel=1e-9)
    assert runs[0].unchanged > 50 and runs[1].unchanged == 0


def test_a_flow_over_many_links_is_refilled_by_the_heap_of_flows():
    """A flow over 34 links (wider than WIDE_FLOW: a bundle, weight 2 on each) among narrow flows:
    the refill takes the scans or the heap of flows (filling.fill); rates and bottlenecks are the oracle's
    as flows arrive across it and as it ends."""
    rng = np.random.default_rng(3)
    capacity = rng.choice([4.0, 5.0, 8.0, 10.0], 40)
    active = ActiveFlows(capacity)
    assert 34 > WIDE_FLOW
    active.step(0, [(np.arange(34), np.full(34, 2.0)), (np.array([0, 35]), np.ones(2)), (np.array([5]), np.ones(1))])
    active.check()
    for _ in range(6):
        active.step(0, [(rng.choice(40, 2, replace=False), np.ones(2))])
        active.check()
    active.step(1, [])                                     # the wide flow ends: its neighbours refill
    active.check()
