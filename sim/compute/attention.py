"""Fused attention (FlashAttention-style) time by shape, fitted to the kernels' published throughput.

A fused attention kernel never writes the scores to HBM: its time is its matmul FLOPs at a rate that
grows with the sequence length (longer rows of scores per tile of queries amortise the softmax and
the pipeline's start) and with the head size (more matmul per score):

    rate(s, d) = R x s / (s + s0) x d / (d + d0),     time = FLOPs / rate(s, d)

with FLOPs as FlashAttention counts them: forward ``4 s^2 d heads`` per sequence (half under the
causal mask), backward 2.5 times the forward (it recomputes the scores); the kernel model adds a
call's launch as it does for every kernel. ``R``, ``s0`` and ``d0`` are fitted per kernel, direction and mask to published tables (:mod:`sim.compute.fit`);
where a table has no causal backward, its rate is the non-causal backward's scaled as the forward's
is by the mask (:meth:`AttentionModel.seconds`). A head whose query/key and value widths differ
(MLA: 192 and 128) counts their mean as ``d``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import number


@dataclass(frozen=True)
class AttentionFit:
    """One kernel, direction and mask: ``rate_tflops`` (``R``), ``s0`` (tokens), ``d0`` (head
    dims), ``fixed_us``, fitted on ``rows`` rows of ``source`` (rms and worst |log error| in %)."""

    rate_tflops: float
    s0: float
    d0: float
    fixed_us: float = 0.0
    source: str = ""
    rows: int = 0
    rms_pct: float = 0.0
    max_pct: float = 0.0

    def __post_init__(self):
        number(self.rate_tflops, "AttentionFit.rate_tflops", low=0, low_open=True, high=1e6)
        for name in ("s0", "d0", "fixed_us"):
            number(getattr(self, name), f"AttentionFit.{name}", low=0, high=1e9)

    def rate(self, seq_len, head_dim):
        """FLOP/s at ``seq_len`` and ``head_dim`` (scalars or arrays)."""
        s, d = np.asarray(seq_len, dtype=float), np.asarray(head_dim, dtype=float)
        return self.rate_tflops * 1e12 * s / (s + self.s0) * d / (d + self.d0)

    def seconds(self, flops, seq_len, head_dim):
        t = self.fixed_us * 1e-6 + np.asarray(flops, dtype=float) / self.rate(seq_len, head_dim)
        return float(t) if np.ndim(t) == 0 else t


@dataclass(frozen=True)
class AttentionModel:
    """A GPU family's fused attention: fits by ``(direction, causal)`` (``"fwd"``/``"bwd"``, 0/1),
    the kernel's name, and ``scale`` (a family without a table of its own runs another's fits at
    ``scale`` times their rate: the ratio of the two GPUs' peaks, or a published peak fraction)."""

    fits: dict
    kernel: str
    scale: float = 1.0
    source: str = ""

    def rate(self, direction: str, causal: bool, seq_len: float, head_dim: float) -> float:
        key = (direction, int(causal))
        if key in self.fits:
            return float(self.fits[key].rate(seq_len, head_dim)) * self.scale
        fwd_ratio = self.fits[("fwd", 1)].rate(seq_len, head_dim) / self.fits[("fwd", 0)].rate(seq_len, head_dim)
        return float(self.fits[(direction, 0)].rate(seq_len, head_dim) * fwd_ratio) * self.scale

    def seconds(self, direction: str, causal: bool, flops: float, seq_len: float, head_dim: float) -> float:
        """Seconds of one kernel call of ``flops`` (FlashAttention's count) at ``seq_len``, ``head_dim``."""
        fit = self.fits.get((direction, int(causal))) or self.fits[(direction, 0)]
        return fit.fixed_us * 1e-6 + flops / self.rate(direction, causal, seq_len, head_dim)


__all__ = ["AttentionFit", "AttentionModel"]
