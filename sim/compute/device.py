"""What the kernel model reads of a GPU: its SMs, dense peaks, HBM bandwidth and kernel family.

:class:`GpuFigures` is a plain record so that the compute model does not depend on where GPU specs
come from (``sim.training.model.specs.GPUSpec.figures()`` builds one from a preset or a user's YAML).
"""
from __future__ import annotations

from typing import NamedTuple

DEFAULT_HBM_EFFICIENCY = 0.7     # memory-bound kernels reach 70% of HBM bandwidth: our assumption (docs/model.md)


class GpuFigures(NamedTuple):
    """``peak_tflops``: dense peak per GEMM precision (``bf16``, ``fp8``, ``mxfp8``; 0 where the
    GPU has no such tensor cores); ``hbm_tbps``: HBM bandwidth (TB/s); ``family``: the kernel
    family whose fitted parameters it runs (``sim/compute/presets/kernels.yaml``; ``""``: look it
    up by ``name``)."""

    name: str
    sms: int
    peak_tflops: dict
    hbm_tbps: float
    family: str = ""

    def peak(self, precision: str) -> float:
        """Dense peak TFLOPS at ``precision``; 0 where the GPU lists none (or lists 0 or nothing)."""
        return float(self.peak_tflops.get(precision) or 0.0)


def peaks_of(gpus: dict[str, GpuFigures]) -> dict[str, dict[str, float]]:
    """``{name: {precision: peak}}`` of ``gpus``: what the tables' roofline check reads."""
    return {name: dict(g.peak_tflops) for name, g in gpus.items()}


__all__ = ["DEFAULT_HBM_EFFICIENCY", "GpuFigures", "peaks_of"]
