"""How fast a pipeline send may go between two GPUs of one node: NCCL's channels for it, each an SM
that copies its share over NVLink.

A stage hands its activations to the next with NCCL's send and receive on the pipeline group's
communicator (:mod:`sim.network.nccl_p2p`: the channels NCCL 2.20.3 splits one send over, from
the group's ranks and nodes, its collective channels, ``nccl_sms``, and the send's bytes). Inside
a node each channel's SM copies its bytes over NVLink, so the send moves at most

    channels x sm_GBps                                                         (GB/s, each way)

(:mod:`sim.training.comm.kernels`: 10.5 GB/s an SM by default): 4 channels, 42 GB/s, for eight
pipeline ranks in one NVSwitch node, whose 28 MB of activations (the Zero Bubble paper's 1.5B GPT,
6 sequences of 1,024 tokens) then take 0.67 ms against 0.09 ms at the A100's NVLink bandwidth (the
paper's Table 9 profiled 0.60-0.76 ms for them); 2 channels, 21 GB/s, between two GPUs of one node
when the group spans several nodes. Between nodes the NIC reads the bytes from the GPU (GPUDirect
RDMA) and its link bounds the send; no SM bound is applied there. Kernels that leave ``sm_GBps``
unbounded (``ideal``) bound no send.
"""
from __future__ import annotations

from ...network import LinkTable
from ...network.nccl_p2p import nvlink_peer_channels, send_channels
from ..model.layout import Layout
from .kernels import KernelSpec


def node_nvlink_GBps(links: LinkTable, gpus_per_node: int) -> float | None:
    """GB/s each way between the first two GPUs of the first node when every link between them is
    NVLink (the least of their capacities), else None (PCIe, or one GPU a node)."""
    if gpus_per_node < 2 or len(links.gpus) < 2:
        return None
    route, _ = links.route(0, 1)
    if not len(route) or any(links.kind[i] != "nvlink" for i in route):
        return None
    return float(links.capacity[route].min()) / 1e9


def pipeline_channels(layout: Layout, links: LinkTable, kernels: KernelSpec, nbytes: float) -> int:
    """NCCL's channels for one pipeline send of ``nbytes`` in the pipeline group of replica 0."""
    gpn = layout.gpus_per_node
    nodes = len({layout.gpu(r, 0) // gpn for r in range(layout.pp)})
    return send_channels(nbytes, layout.pp, nodes, kernels.nccl_sms,
                         nvlink_peer_channels(node_nvlink_GBps(links, gpn)))


def pipeline_send_rate(layout: Layout, links: LinkTable, kernels: KernelSpec, nbytes: float) -> float | None:
    """Bytes/s at most of a pipeline send of ``nbytes`` between two GPUs of one node (see the
    module); None: unbounded (one stage, or kernels without an SM bound)."""
    if layout.pp < 2 or kernels.sm_GBps is None:
        return None
    return pipeline_channels(layout, links, kernels, nbytes) * kernels.sm_GBps * 1e9


def same_node(a: int, b: int, gpus_per_node: int) -> bool:
    """Whether GPUs ``a`` and ``b`` (global, node-major) are in one node."""
    return a // gpus_per_node == b // gpus_per_node


def send_bound(a: int, b: int, gpus_per_node: int, send_rate: float | None) -> float | None:
    """The bound (bytes/s) a pipeline send from GPU ``a`` to GPU ``b`` takes: ``send_rate``
    (:func:`pipeline_send_rate`) where the two share a node, else None (the NIC bounds it)."""
    return send_rate if send_rate is not None and same_node(a, b, gpus_per_node) else None


__all__ = ["node_nvlink_GBps", "pipeline_channels", "pipeline_send_rate", "same_node", "send_bound"]
