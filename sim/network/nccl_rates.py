"""What NCCL's own cost model (:mod:`sim.network.nccl`) leaves out of a collective's time, in
terms a measured table calibrates (``python -m sim calibrate``, the kernels' ``nccl_copy_GBps``,
``nccl_reduce_GBps``, ``nvls_GBps`` and ``nvls_latency_us``).

* **Each GPU's pass over its own slice.** Every GPU of an ``n``-GPU collective of ``nbytes`` (the
  buffer, nccl-tests' size) owns a slice of ``nbytes / n``: an all-gather copies its input slice
  into its output (at ``copy_GBps``), a reduce-scatter reduces the slice it keeps into its output
  (at ``reduce_GBps``), and an all-reduce (ring, tree or NVLS) does both. The pass is charged
  before the transfers, not overlapped with them:

      slice = nbytes / n / copy + nbytes / n / reduce (all-reduce; one of the two otherwise)   (s)

  It is the term that makes a ring of few GPUs slower per byte on the wire than a ring of many
  (the slice is half the buffer over 2 GPUs, an eighth over 8), as XLA's measured H100
  collectives show (docs/network.md, "Against a measured table"). ``None``: no pass.
* **NVLS's own rate and latency.** An NVLS all-reduce's port bytes (:func:`nvls_port_bytes`) move
  at ``nvls_GBps`` at most (the switch's reduce and multicast, whatever the GPU's NCCL engine or
  NVLink allow beyond it), and its latency is charged as ``nvls_latency_us`` instead of NCCL's
  :data:`NVLS_LATENCY_US`. NCCL's choice of algorithm and protocol keeps NCCL's own estimate
  (:func:`~sim.network.nccl.ring_cost`): these terms change what a collective takes, not what
  NCCL picks. ``None``: NCCL's latency, the path's rate.

:func:`charged` turns NCCL's :class:`~sim.network.nccl.RingCost` into the one charged: the slice
pass added to its latency, NVLS's latency and rate applied.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..checks import InputError, number
from .nccl import KINDS, NVLS, NVLS_LATENCY_US, RingCost

MAX_GBPS = 1e6                 # GB/s: the most a rate may say (a unit slip beyond it)
MAX_LATENCY_US = 1e4           # microseconds: the same for NVLS's latency


@dataclass(frozen=True)
class NcclRates:
    """The calibrated terms (GB/s = 1e9 bytes/s per GPU; microseconds). Each ``None`` leaves NCCL's
    model as it is (see the module)."""

    copy_GBps: Optional[float] = None        # an all-gather's pass over its own slice
    reduce_GBps: Optional[float] = None      # a reduce-scatter's
    nvls_GBps: Optional[float] = None        # an NVLS all-reduce's port bytes per second
    nvls_latency_us: Optional[float] = None  # instead of NCCL's NVLS latency

    def __post_init__(self):
        for name in ("copy_GBps", "reduce_GBps", "nvls_GBps"):
            value = getattr(self, name)
            if value is not None:
                number(value, f"NcclRates.{name} (GB/s)", low=0, low_open=True, high=MAX_GBPS)
        if self.nvls_latency_us is not None:
            number(self.nvls_latency_us, "NcclRates.nvls_latency_us (microseconds)", low=0, high=MAX_LATENCY_US)

    @property
    def active(self) -> bool:
        """Whether any term is set (else the rates change nothing)."""
        return any(v is not None for v in (self.copy_GBps, self.reduce_GBps, self.nvls_GBps, self.nvls_latency_us))

    def slice_s(self, kind: str, nbytes: float, ranks: int) -> float:
        """Seconds of each GPU's pass over its ``nbytes / ranks`` slice in collective ``kind``
        (see the module); 0 for one GPU or an empty buffer."""
        if kind not in KINDS:
            raise InputError(f"collective kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if ranks < 2 or nbytes <= 0:
            return 0.0
        share = nbytes / ranks
        seconds = 0.0
        if kind in ("all_gather", "all_reduce") and self.copy_GBps is not None:
            seconds += share / (self.copy_GBps * 1e9)
        if kind in ("reduce_scatter", "all_reduce") and self.reduce_GBps is not None:
            seconds += share / (self.reduce_GBps * 1e9)
        return seconds


def charged(cost: RingCost, kind: str, nbytes: float, ranks: int, rates: NcclRates | None,
            path_GBps: float) -> RingCost:
    """NCCL's ``cost`` of collective ``kind`` of ``nbytes`` over ``ranks`` GPUs as charged under
    ``rates`` (``None``: unchanged): the slice pass added to its latency; for NVLS, the latency
    ``nvls_latency_us`` and the bandwidth factor ``min(1, nvls_GBps / path_GBps)`` (the port
    bytes then take ``1 / factor`` of the path's time: ``path_GBps``, GB/s, the rate the path
    would give them, its links' and the GPU's NCCL engine's least)."""
    if rates is None or not rates.active:
        return cost
    latency = cost.latency_s + rates.slice_s(kind, nbytes, ranks)
    factor = cost.bandwidth_factor
    if cost.algorithm == NVLS:
        if rates.nvls_latency_us is not None:
            latency += (rates.nvls_latency_us - NVLS_LATENCY_US) * 1e-6
        if rates.nvls_GBps is not None and path_GBps > 0:
            factor = min(1.0, rates.nvls_GBps / path_GBps)
    return RingCost(cost.protocol, latency, factor, cost.algorithm)


__all__ = ["MAX_GBPS", "MAX_LATENCY_US", "NcclRates", "charged"]
