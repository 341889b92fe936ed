"""sim.network.fairshare.tallies: a link's bytes and busy time, brought up to date only when asked, worked by
hand."""
import numpy as np

from sim.network.fairshare import Links, tallies


def test_a_link_is_credited_its_rate_while_it_has_flows_and_nothing_while_idle():
    """Link 0 carries 5 B/s with one flow on it; link 1 has no flow. Credited at 6 s: link 0 has
    carried 30 B and been busy 6 s, link 1 nothing (but its clock moves on). Its rate then drops to
    2 B/s: at 10 s it has 30 + 2 x 4 = 38 B over 10 s. Crediting twice at one instant adds nothing."""
    link_rate, link_users = np.array([5.0, 0.0]), np.array([1, 0])
    link_bytes, link_busy, since = np.zeros(2), np.zeros(2), np.zeros(2)
    links = Links(np.ones(2), link_rate, link_users, np.zeros(2), np.zeros(2, dtype=np.int64), np.zeros(2), link_bytes,
                  link_busy, since)
    tallies.credit_all(links, 6.0)
    assert link_bytes.tolist() == [30.0, 0.0] and link_busy.tolist() == [6.0, 0.0] and since.tolist() == [6.0, 6.0]
    link_rate[0] = 2.0
    tallies.credit(links, 0, 10.0)
    tallies.credit(links, 0, 10.0)
    assert link_bytes[0] == 38.0 and link_busy[0] == 10.0 and since.tolist() == [10.0, 6.0]
