"""NCCL's point-to-point sends: how many channels (one CTA, one SM each) a send runs on, and so
how fast a send between two GPUs of one node can go when each channel's SM copies its bytes.

Pipeline stages exchange activations with NCCL's send and receive, batched over the pipeline
group's communicator (``torch.distributed.batch_isend_irecv``: Megatron-LM's default, PyTorch's
pipelining, DualPipe). NCCL 2.20.3 (github.com/NVIDIA/nccl, ``src/graph/paths.cc``,
``ncclTopoComputeP2pChannels``; ``src/enqueue.cc``, ``scheduleP2pTasksToPlan`` and
``calcP2pChunkSize``) splits one send over channels so, for a communicator of ``n`` ranks over
``N`` nodes with ``C`` collective channels:

* ``p2pnChannels`` = nextPow2(min(C, 32));
* per peer: a GPU of the same node over NVLink allows ``2 max(1, floor(bw / nvlBw))`` channels,
  NCCL's ``bw`` being its NVLinks times ``nvlBw``, so twice the links (counted here as the pair's
  NVLink bandwidth each way over NVLink 3 and 4's 25 GB/s a link: :data:`NVLINK_LINK_GBPS`), 2 for
  one over PCIe, and 2 for a GPU of another node (two a NIC while the communicator has at most
  twice ``min(C, 32)`` ranks, else 1); ``p2pnChannelsPerPeer`` = nextPow2 of the least of
  these over every pair of the communicator and ``p2pnChannels`` (so one remote peer limits every
  pair to 2);
* a send starts from ``p2pnChannelsPerPeer`` halved while it times ``n`` exceeds ``p2pnChannels``,
  and doubles its channels (up to ``p2pnChannelsPerPeer``) while each channel's share exceeds the
  most a channel carries: ``32 x 512 KiB`` on one NVLink node (``32 x 128 KiB`` over PCIe),
  ``128 KiB`` across nodes (NCCL's ``calcP2pChunkSize``; its least chunk never changes the count).

Eight ranks of one NVSwitch node (``C`` = 24 or 32) send on 4 channels up to 64 MiB; a pipeline
group over several nodes sends on 2 between any two of its GPUs. Within a node the channels' SMs
copy the bytes over NVLink themselves, so such a send moves at most ``channels x sm_GBps``
(:mod:`sim.training.comm.kernels`); across nodes the NIC reads them (GPUDirect RDMA) and bounds them.
"""
from __future__ import annotations

from ..checks import number

MAX_CHANNELS = 32                     # MAXCHANNELS (src/include/device.h)
NET_CHANNELS_PER_PEER = 2             # NCCL_NCHANNELS_PER_NET_PEER auto: two per NIC
PCI_CHANNELS_PER_PEER = 2
NVLINK_LINK_GBPS = 25.0               # one NVLink 3 or 4 link, each way (A100: 12 links, H100: 18)
NVL_CHUNK_BYTES = 1 << 19             # NCCL_P2P_NVL_CHUNKSIZE: one node, all NVLink
NET_CHUNK_BYTES = 1 << 17             # NCCL_P2P_NET_CHUNKSIZE: over nodes (and PCIe's, the same)


def next_pow2(v: int) -> int:
    """The least power of two at least ``v`` (1 for ``v`` <= 1)."""
    p = 1
    while p < v:
        p <<= 1
    return p


def channels_per_peer(ranks: int, nodes: int, coll_channels: int, nvlink_peer_channels: int | None) -> int:
    """``p2pnChannelsPerPeer`` of a communicator of ``ranks`` over ``nodes`` with ``coll_channels``
    collective channels; ``nvlink_peer_channels``: what two of its GPUs in one node allow
    (``2 max(1, floor(bw / nvlBw))``; None: they talk over PCIe)."""
    p2p = min(coll_channels, MAX_CHANNELS)
    least = p2p
    if ranks > nodes:                   # some node holds two of its ranks
        least = min(least, PCI_CHANNELS_PER_PEER if nvlink_peer_channels is None else nvlink_peer_channels)
    if nodes > 1:                       # two a NIC, halved (to one) past 4 x p2pnChannels operations
        least = min(least, 1 if NET_CHANNELS_PER_PEER * ranks > 4 * p2p else NET_CHANNELS_PER_PEER)
    return next_pow2(least)


def send_channels(nbytes: float, ranks: int, nodes: int, coll_channels: int,
                  nvlink_peer_channels: int | None) -> int:
    """Channels NCCL runs one send of ``nbytes`` on, in a communicator of ``ranks`` over ``nodes``
    (see the module; 8 ranks of one NVSwitch node, 28 MB: 4)."""
    number(nbytes, "bytes", low=0)
    number(ranks, "ranks", integer=True, low=1)
    number(nodes, "nodes", integer=True, low=1, high=ranks)
    number(coll_channels, "collective channels", integer=True, low=1)
    per_peer = channels_per_peer(ranks, nodes, coll_channels, nvlink_peer_channels)
    p2p = next_pow2(min(coll_channels, MAX_CHANNELS))
    channels = per_peer
    while channels * ranks > p2p and channels > 1:
        channels //= 2
    step = NET_CHUNK_BYTES if nodes > 1 or nvlink_peer_channels is None else NVL_CHUNK_BYTES
    largest = step if nodes > 1 else 32 * step          # the most one channel carries of a send
    while nbytes / channels > largest and 2 * channels <= per_peer:
        channels *= 2
    return channels


def nvlink_peer_channels(nvlink_GBps: float | None) -> int | None:
    """Twice the NVLinks of two GPUs joined by ``nvlink_GBps`` each way (NCCL's ``2 max(1,
    floor(bw / nvlBw))``; 24 for an A100's 300 GB/s, 36 for an H100's 450); None: no NVLink."""
    if not nvlink_GBps:
        return None
    return 2 * max(1, round(nvlink_GBps / NVLINK_LINK_GBPS))


__all__ = ["MAX_CHANNELS", "NET_CHANNELS_PER_PEER", "NET_CHUNK_BYTES", "NVLINK_LINK_GBPS", "NVL_CHUNK_BYTES",
           "PCI_CHANNELS_PER_PEER", "channels_per_peer", "next_pow2", "nvlink_peer_channels", "send_channels"]
