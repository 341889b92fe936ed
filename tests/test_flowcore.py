"""sim.network.flowcore: the fabric's kernels on flows worked by hand."""
import numpy as np
import pytest

from sim.network import flowcore


def table():
    """Three flows: 0 on links 0, 1; 1 on link 1; 2 on link 2 (pairs in flow order)."""
    return dict(size=np.array([100.0, 50.0, 30.0]), remaining=np.array([100.0, 50.0, 30.0]),
                rate=np.zeros(3), flow_id=np.array([7, 8, 9]),
                pair_flow=np.array([0, 0, 1, 2]), pair_link=np.array([0, 1, 1, 2]), pair_weight=np.ones(4))


def test_solve_then_advance_then_drop():
    t = table()
    capacity = np.array([10.0, 10.0, 5.0])
    link_rate, peak = np.zeros(3), np.zeros(3)
    gen, local = np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64)
    dirty = np.zeros(4, dtype=np.int64)
    # all three are new: link 1 is shared by flows 0 and 1 (5 each), flow 2 alone on link 2 (5)
    nearest = flowcore.solve(3, 0, 4, t["pair_flow"], t["pair_link"], t["pair_weight"], capacity, t["rate"], t["remaining"], dirty, 0,
                             link_rate, peak, True, gen, local, 1)
    assert t["rate"].tolist() == [5.0, 5.0, 5.0]
    assert link_rate.tolist() == [5.0, 10.0, 5.0] and peak.tolist() == [0.5, 1.0, 1.0]
    assert nearest == pytest.approx(30.0 / 5.0)                      # flow 2 first
    link_bytes, busy, stamp = np.zeros(3), np.zeros(3), np.zeros(3, dtype=np.int64)
    flowcore.advance(6.0, 3, t["rate"], t["remaining"], 4, t["pair_flow"], t["pair_link"], t["pair_weight"], link_bytes, busy, stamp, 1)
    assert t["remaining"].tolist() == [70.0, 20.0, 0.0]
    assert link_bytes.tolist() == [30.0, 60.0, 30.0] and busy.tolist() == [6.0, 6.0, 6.0]
    done, out = np.empty(3, dtype=np.int64), np.empty(4, dtype=np.int64)
    n, pairs, n_done, n_dirty = flowcore.drop_finished(3, 4, t["size"], t["remaining"], t["rate"], t["flow_id"], 0.0,
                                                       t["pair_flow"], t["pair_link"], t["pair_weight"], link_bytes, link_rate, done,
                                                       out)
    assert (n, pairs, n_done, n_dirty) == (2, 3, 1, 1)
    assert done[0] == 9 and out[0] == 2 and link_rate[2] == 0.0       # flow 2's rate leaves link 2
    assert t["pair_flow"][:3].tolist() == [0, 0, 1] and t["flow_id"][:2].tolist() == [7, 8]
    # flow 2 ended on link 2, which nobody else uses: flows 0 and 1 keep their rates
    nearest = flowcore.solve(2, 2, 3, t["pair_flow"], t["pair_link"], t["pair_weight"], capacity, t["rate"], t["remaining"], out, 1,
                             link_rate, peak, True, gen, local, 2)
    assert t["rate"][:2].tolist() == [5.0, 5.0] and nearest == pytest.approx(20.0 / 5.0)


def test_a_departure_speeds_up_its_neighbours():
    t = table()
    capacity = np.array([10.0, 10.0, 5.0])
    link_rate, peak = np.zeros(3), np.zeros(3)
    gen, local = np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64)
    flowcore.solve(3, 0, 4, t["pair_flow"], t["pair_link"], t["pair_weight"], capacity, t["rate"], t["remaining"], np.zeros(1, dtype=np.int64),
                   0, link_rate, peak, True, gen, local, 1)
    t["remaining"][1] = 0.0                                          # flow 1 is done
    done, out = np.empty(3, dtype=np.int64), np.empty(4, dtype=np.int64)
    n, pairs, n_done, n_dirty = flowcore.drop_finished(3, 4, t["size"], t["remaining"], t["rate"], t["flow_id"], 0.0,
                                                       t["pair_flow"], t["pair_link"], t["pair_weight"], np.zeros(3), link_rate, done,
                                                       out)
    flowcore.solve(n, n, pairs, t["pair_flow"], t["pair_link"], t["pair_weight"], capacity, t["rate"], t["remaining"], out, n_dirty,
                   link_rate, peak, True, gen, local, 2)
    assert t["rate"][:2].tolist() == [10.0, 5.0]                     # flow 0 now alone on links 0 and 1
    assert link_rate.tolist() == [10.0, 10.0, 5.0]


def test_a_weighted_pair_counts_as_that_many_flows():
    """Flow 0 weighs 3 on link 1 (a bundle of three flows there): on link 1 (10 B/s) the weights are
    3 + 1, so the share is 10 / 4 = 2.5; flow 0 carries 3 x 2.5 = 7.5 B/s there, flow 1 2.5."""
    t = table()
    t["pair_weight"] = np.array([1.0, 3.0, 1.0, 1.0])
    capacity = np.array([10.0, 10.0, 5.0])
    link_rate, peak = np.zeros(3), np.zeros(3)
    gen, local = np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64)
    flowcore.solve(3, 0, 4, t["pair_flow"], t["pair_link"], t["pair_weight"], capacity, t["rate"], t["remaining"],
                   np.zeros(1, dtype=np.int64), 0, link_rate, peak, True, gen, local, 1)
    assert t["rate"].tolist() == [2.5, 2.5, 5.0]
    assert link_rate.tolist() == [2.5, 10.0, 5.0]
    link_bytes, busy, stamp = np.zeros(3), np.zeros(3), np.zeros(3, dtype=np.int64)
    flowcore.advance(2.0, 3, t["rate"], t["remaining"], 4, t["pair_flow"], t["pair_link"], t["pair_weight"],
                     link_bytes, busy, stamp, 1)
    assert link_bytes.tolist() == [5.0, 20.0, 10.0]             # link 1: (3 x 2.5 + 2.5) x 2 s


def test_a_flow_within_a_billionth_of_its_size_is_done_and_its_last_bytes_are_credited():
    """A 1e12-byte flow left with 0.5 bytes (float rounding of its drain: 5e-13 of its size, under
    the slack of 1e-9 x size + 1e-6 bytes) is done at once; its last 0.5 bytes go to its link (weight
    2: 1.0 byte). A 1-byte flow with 0.5 bytes left is not done (0.5 > 1e-9 + 1e-6)."""
    size = np.array([1e12, 1.0])
    remaining = np.array([0.5, 0.5])
    rate, flow_id = np.array([1e9, 1.0]), np.array([4, 5])
    pair_flow, pair_link, pair_weight = np.array([0, 1]), np.array([0, 1]), np.array([2.0, 1.0])
    link_bytes, link_rate = np.array([10.0, 0.0]), np.array([2e9, 1.0])
    done, dirty = np.empty(2, dtype=np.int64), np.empty(2, dtype=np.int64)
    n, pairs, n_done, n_dirty = flowcore.drop_finished(2, 2, size, remaining, rate, flow_id, 0.0, pair_flow, pair_link,
                                                       pair_weight, link_bytes, link_rate, done, dirty)
    assert (n, pairs, n_done, n_dirty) == (1, 1, 1, 1) and done[0] == 4 and dirty[0] == 0
    assert link_bytes.tolist() == [11.0, 0.0] and link_rate.tolist() == [0.0, 1.0]
    assert flow_id[0] == 5 and remaining[0] == 0.5 and pair_link[0] == 1
