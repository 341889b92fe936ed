"""GEMM time by shape: a roofline with wave quantization over the SMs, fitted to measured tables.

A GEMM of ``groups`` x (``m`` x ``n`` x ``k``) (``groups`` > 1: a grouped or batched GEMM, such as
the routed experts of an MoE layer, each group its own ``m`` rows) on ``S`` SMs:

* compute: the output is cut into tiles of ``Tm x Tn`` (the library picks the best of
  :data:`TILES`), each tile's ``k`` loop optionally split ``s`` ways (split-K, :data:`SPLITS`); the
  ``units = groups ceil(m/Tm) ceil(n/Tn) s`` run in ``ceil(units / S)`` waves, each wave taking
  ``2 Tm Tn (k/s + k0) / (R / S_gpu)`` seconds (``R``: the GPU's tensor rate at this precision,
  ``k0``: the pipeline's fill and drain per tile in ``k`` elements); a split adds its FP32 partial
  sums' traffic, ``8 groups m n s`` bytes at the HBM rate;
* memory: ``groups (m k + k n) in_bytes + groups m n out_bytes`` at the HBM rate;
* ``time = fixed + max(compute, memory)``.

So a GEMM runs at ``R`` only when its tiles fill whole waves of the SMs and ``k`` is long; a
4,096 x 2,048 x 768 expert GEMM loses to quantization and the ``k`` pipeline what a 16K x 16K one
does not, and one with few rows is bound by reading its weights. The time is non-decreasing in
``m``, ``n``, ``k`` and ``groups`` (every candidate is, and a minimum and a maximum of such are),
and never below the roofline ``max(FLOPs / peak, bytes / HBM peak)`` while ``R`` is at most the
peak (:class:`GemmFit` checks it) and the HBM rate at most its peak.

``R``, ``k0`` and ``fixed`` come from a least-squares fit of log time to a GPU family's measured
tables (:mod:`sim.compute.fit`, ``python -m sim calibrate --kernels``), which the fit's record
names with its error.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..checks import InputError, number

TILES = ((64, 128), (128, 64), (128, 128), (128, 256), (256, 128))   # output tiles a GEMM library picks from
SPLITS = (1, 2, 4, 8, 16)                                           # split-K ways
SPLIT_PARTIAL_BYTES = 8.0        # an FP32 partial sum per output element and split, written and read back


@dataclass(frozen=True)
class GemmFit:
    """A GPU family's GEMM parameters at one precision (see the module): ``rate_tflops`` (``R``, the
    whole GPU), ``k0`` (elements), ``fixed_us`` (microseconds per kernel), fitted on ``rows`` rows of
    ``source`` with ``rms_pct`` / ``max_pct`` the fit's rms and worst |log error| in percent."""

    rate_tflops: float
    k0: float
    fixed_us: float
    source: str = ""
    rows: int = 0
    rms_pct: float = 0.0
    max_pct: float = 0.0

    def __post_init__(self):
        number(self.rate_tflops, "GemmFit.rate_tflops", low=0, low_open=True, high=1e6)
        number(self.k0, "GemmFit.k0", low=0, high=1e6)
        number(self.fixed_us, "GemmFit.fixed_us", low=0, high=1e6)

    def checked_against(self, peak_tflops: float, what: str) -> "GemmFit":
        """Itself, refused when faster than ``peak_tflops`` (it would beat the roofline)."""
        if self.rate_tflops > peak_tflops * (1 + 1e-9):
            raise InputError(f"{what}: rate_tflops {self.rate_tflops:g} is above the dense peak of {peak_tflops:g} "
                             "TFLOPS (allowed: at most the peak)")
        return self


def gemm_seconds(fit: GemmFit, m, n, k, groups=1, *, sms: int, gpu_sms: int, in_bytes: float, out_bytes: float,
                 hbm_bytes_per_s: float):
    """Seconds of ``groups`` GEMMs of ``m x n x k`` (scalars or numpy arrays) on ``sms`` of the
    GPU's ``gpu_sms`` SMs (see the module); ``in_bytes`` / ``out_bytes``: bytes per element of the
    operands and of the output; ``hbm_bytes_per_s``: the memory-bound rate."""
    m, n, k, g = (np.asarray(v, dtype=float) for v in (m, n, k, groups))
    per_sm = fit.rate_tflops * 1e12 / gpu_sms                 # FLOP/s of one SM
    compute = np.inf                                          # the best candidate so far
    for tm, tn in TILES:
        tiles = g * np.ceil(m / tm) * np.ceil(n / tn)
        for s in SPLITS:
            waves = np.ceil(tiles * s / sms)
            t = waves * 2.0 * tm * tn * (k / s + fit.k0) / per_sm
            if s > 1:
                t = t + g * m * n * s * SPLIT_PARTIAL_BYTES / hbm_bytes_per_s
            compute = np.minimum(compute, t)
    memory = g * ((m * k + k * n) * in_bytes + m * n * out_bytes) / hbm_bytes_per_s
    seconds = fit.fixed_us * 1e-6 + np.maximum(compute, memory)
    return float(seconds) if seconds.ndim == 0 else seconds


def gemm_bound(fit: GemmFit, m, n, k, groups=1, **kw) -> str:
    """What bounds one GEMM: ``compute``, ``hbm`` (reading and writing its operands) or ``launch``
    (the fixed time is most of it)."""
    total = gemm_seconds(fit, m, n, k, groups, **kw)
    if fit.fixed_us * 1e-6 > total / 2:
        return "launch"
    g = float(groups)
    memory = g * ((m * k + k * n) * kw["in_bytes"] + m * n * kw["out_bytes"]) / kw["hbm_bytes_per_s"]
    return "hbm" if memory >= total - fit.fixed_us * 1e-6 - 1e-15 else "compute"


@lru_cache(maxsize=1 << 16)
def gemm_cost(fit: GemmFit, m: float, n: float, k: float, groups: float, sms: int, gpu_sms: int, in_bytes: float,
              out_bytes: float, hbm_bytes_per_s: float) -> tuple[float, str]:
    """(:func:`gemm_seconds`, :func:`gemm_bound`) of one scalar GEMM, remembered: a plan costs the
    same few hundred shapes for thousands of candidates."""
    kw = dict(sms=sms, gpu_sms=gpu_sms, in_bytes=in_bytes, out_bytes=out_bytes, hbm_bytes_per_s=hbm_bytes_per_s)
    return gemm_seconds(fit, m, n, k, groups, **kw), gemm_bound(fit, m, n, k, groups, **kw)


__all__ = ["GemmFit", "SPLITS", "TILES", "gemm_bound", "gemm_cost", "gemm_seconds"]
