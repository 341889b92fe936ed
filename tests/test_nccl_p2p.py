"""sim.network.nccl_p2p: NCCL 2.20.3's channels for one send, worked by hand."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.checks import InputError
from sim.network.nccl_p2p import channels_per_peer, next_pow2, nvlink_peer_channels, send_channels

A100, H100, H800 = 24, 36, 12          # NVLink channels a pair allows: twice 12, 18 and 6 links


def test_next_pow2():
    assert [next_pow2(v) for v in (0, 1, 2, 3, 4, 5, 24, 32, 33)] == [1, 1, 2, 4, 4, 8, 32, 32, 64]


def test_nvlink_channels_are_twice_the_links():
    assert (nvlink_peer_channels(300), nvlink_peer_channels(450), nvlink_peer_channels(160)) == (A100, H100, H800)
    assert nvlink_peer_channels(10) == 2 and nvlink_peer_channels(None) is None and nvlink_peer_channels(0) is None


def test_eight_ranks_of_one_node_send_on_four_channels():
    """p2pnChannels = nextPow2(min(24, 32)) = 32; per peer nextPow2(min(24, 24)) = 32; halved while
    x 8 ranks > 32: 16, 8, 4. 28.3 MB over 4 is 7.1 MB a channel, under 32 x 512 KiB: 4 channels
    (the Zero Bubble paper's 1.5B GPT, 8 stages on one A100 node)."""
    assert channels_per_peer(8, 1, 24, A100) == 32
    assert send_channels(28.3e6, 8, 1, 24, A100) == 4
    assert send_channels(1.0, 8, 1, 24, A100) == 4 and send_channels(0.0, 8, 1, 24, A100) == 4


def test_a_send_over_64_mib_doubles_its_channels_up_to_the_peers():
    """4 channels carry at most 4 x 16 MiB; 200 MB needs 16 (12.5 MB each); 2 GB stays at 32."""
    assert send_channels(64 * 2 ** 20, 8, 1, 24, A100) == 4
    assert send_channels(64 * 2 ** 20 + 4, 8, 1, 24, A100) == 8
    assert send_channels(200e6, 8, 1, 24, A100) == 16
    assert send_channels(2e9, 8, 1, 24, A100) == 32


def test_a_group_over_nodes_sends_on_two_channels_between_any_two():
    """A remote peer allows 2 (two per NIC), so every pair gets nextPow2(2) = 2; 2 x 16 ranks <= 32:
    no halving; chunks of 128 KiB at most never grow them past the peers' 2."""
    assert channels_per_peer(16, 2, 24, A100) == 2
    assert send_channels(10.5e6, 16, 2, 24, A100) == 2
    assert send_channels(10.5e6, 8, 8, 24, H100) == 2          # one GPU a node: no local peer
    assert send_channels(10.5e6, 128, 128, 24, H100) == 1       # 2 x 128 > 4 x 24: one channel a NIC


def test_two_ranks_of_one_node_get_sixteen():
    assert send_channels(28.3e6, 2, 1, 24, A100) == 16
    assert send_channels(28.3e6, 2, 1, 32, H800) == 16          # 12 NVLink channels round up to 16


def test_pcie_peers_allow_two():
    assert channels_per_peer(8, 1, 24, None) == 2 and send_channels(28.3e6, 8, 1, 24, None) == 2


def test_one_rank_sends_on_the_communicators_channels():
    """No peer in its node and no other node: only the communicator's channels count."""
    assert channels_per_peer(1, 1, 24, A100) == 32 and channels_per_peer(1, 1, 24, None) == 32


def test_a_net_peer_allows_one_channel_past_four_times_the_channels():
    """Two a NIC while 2 x ranks <= 4 x 24: 48 ranks keep 2, 49 get 1."""
    assert channels_per_peer(48, 48, 24, A100) == 2 and channels_per_peer(49, 49, 24, A100) == 1


def test_thirty_two_ranks_of_one_node_halve_to_one_channel():
    """32 x 32 > 32 down to 1 x 32: one channel, up to 16 MiB."""
    assert send_channels(1e6, 32, 1, 24, A100) == 1 and send_channels(17 * 2 ** 20, 32, 1, 24, A100) == 2


def test_the_largest_share_of_a_channel_by_transport():
    """One channel (32 ranks) carries at most 128 KiB across nodes, 32 x 128 KiB over PCIe in a node,
    32 x 512 KiB over NVLink in a node: past that a send doubles its channels (to the peers' 2)."""
    assert send_channels(100e3, 32, 2, 24, A100) == 1 and send_channels(300e3, 32, 2, 24, A100) == 2
    assert send_channels(4e6, 32, 1, 24, None) == 1 and send_channels(5e6, 32, 1, 24, None) == 2
    assert send_channels(5e6, 32, 1, 24, A100) == 1


@given(st.floats(0, 1e10), st.integers(1, 64), st.integers(1, 64), st.integers(1, 64),
       st.one_of(st.none(), st.integers(2, 40)))
def test_channels_are_a_power_of_two_within_the_peers(nbytes, ranks, nodes, coll, nvlink):
    nodes = min(nodes, ranks)
    c = send_channels(nbytes, ranks, nodes, coll, nvlink)
    per_peer = channels_per_peer(ranks, nodes, coll, nvlink)
    assert c & (c - 1) == 0 and 1 <= c <= per_peer <= 32
    assert send_channels(nbytes * 2, ranks, nodes, coll, nvlink) >= c          # more bytes, never fewer


@pytest.mark.parametrize("args, field", [((-1.0, 8, 1, 24), "bytes"), ((1.0, 0, 1, 24), "ranks"),
                                         ((1.0, 2.5, 1, 24), "ranks"), ((1.0, 8, 9, 24), "nodes"),
                                         ((1.0, 8, 0, 24), "nodes"), ((1.0, 8, 1.5, 24), "nodes"),
                                         ((1.0, 8, 1, 0), "collective channels"),
                                         ((1.0, 8, 1, 2.5), "collective channels")])
def test_bad_arguments_are_one_line_naming_the_field(args, field):
    with pytest.raises(InputError, match=f"^{field} "):
        send_channels(*args, A100)
