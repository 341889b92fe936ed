"""GEMM times interpolated from the measured tables the GPU family was fitted to (``gemm_model: tables``).

The fit (:mod:`.gemm`: a roofline with wave quantization, three parameters per family and precision)
reproduces its calibration tables within about 10% rms and 23-52% at worst (``python -m sim
calibrate --kernels``). Where a GEMM's shape is near shapes a table measured, the table knows
better; so a GEMM's time becomes the fit's time times a correction read off the measured rows
around it, as XLA's GPU cost model reads its measured matmul table by shape, with the fit as the
fallback away from every measured shape:

* each measured row ``i`` of the family's declared tables at that precision
  (``sim/compute/presets/calibration.yaml``) gives a point ``p_i = log2(m, n, k, groups)`` and its
  residual ``r_i = ln(measured seconds / the fit's seconds)``, the fit taken on the row's own GPU as
  the calibration takes it;
* a GEMM at ``q = log2(m, n, k, groups)`` takes ``c(q) = sum_i w_i r_i / (w_0 + sum_i w_i)`` with
  ``d_i = |q - p_i|`` (octaves), ``w_i = (1 - d_i / R)^2 / d_i^2`` for ``d_i < R`` (else 0) and
  ``w_0 = 1 / R^2`` the fit's own weight (its residual 0), ``R`` = :data:`RADIUS`; at a measured
  shape ``c`` is that row's residual (the mean where rows repeat it), and ``R`` octaves away from
  every one of them it is 0 (the fit alone);
* the time is ``fit x exp(c)``, never below the roofline (``FLOPs / peak`` on the SMs it has,
  ``bytes / HBM peak``).

Assumptions, said where the model is described (docs/model.md): the correction measured on a whole
GPU holds on the SMs a communication kernel leaves and on another GPU of the family (a ratio, as
the family's fit is carried over); a family with no shape table of its own (GB200's, scaled from
B200's by one GEMM) keeps the fit. Unlike the fit, the interpolated time need not grow with every
dimension: a measured table does not always (a library's kernel choice).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..checks import InputError, read_yaml
from .device import GpuFigures, peaks_of
from .fit import CALIBRATION, gemm_row_seconds
from .gemm import GemmFit
from .tables import read_gemm_table

RADIUS = 2.0                 # octaves: how far a measured shape's residual reaches (our assumption)


@dataclass(frozen=True, eq=False)
class GemmCorrection:
    """Measured shapes (``points``: rows of ``log2(m, n, k, groups)``) and their residuals against the
    fit (``residuals``: natural log of measured / fitted seconds), read within ``radius`` octaves;
    ``tables``: where the rows come from."""

    points: np.ndarray
    residuals: np.ndarray
    tables: tuple[str, ...]
    radius: float = RADIUS
    _memo: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.points.ndim != 2 or self.points.shape[1] != 4 or len(self.points) != len(self.residuals):
            raise ValueError("GemmCorrection: points must be an [N, 4] array with one residual each")
        if not self.radius > 0:
            raise ValueError(f"GemmCorrection: radius {self.radius!r} must be positive")

    @property
    def rows(self) -> int:
        return len(self.residuals)

    def log_factor(self, m: float, n: float, k: float, groups: float = 1.0) -> float:
        """``c(q)`` of the module at ``m x n x k`` (``groups`` of them), remembered per shape."""
        key = (m, n, k, groups)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._log_factor(np.log2([m, n, k, groups]))
        return hit

    def _log_factor(self, q: np.ndarray) -> float:
        if not self.rows:
            return 0.0
        d = np.sqrt(((self.points - q) ** 2).sum(axis=1))
        at = d < 1e-9
        if at.any():
            return float(self.residuals[at].mean())
        near = d < self.radius
        if not near.any():
            return 0.0
        w = (1.0 - d[near] / self.radius) ** 2 / d[near] ** 2
        return float((w * self.residuals[near]).sum() / (1.0 / self.radius ** 2 + w.sum()))


def correction_of(rows: list, fit: GemmFit, gpus: dict[str, GpuFigures], tables: tuple[str, ...],
                  radius: float = RADIUS) -> GemmCorrection:
    """The :class:`GemmCorrection` of measured ``rows`` (:class:`~sim.compute.tables.GemmRow`) against
    ``fit``, each row on its own GPU's SMs and HBM (:func:`sim.compute.fit.gemm_row_seconds`)."""
    if not rows:
        return GemmCorrection(np.zeros((0, 4)), np.zeros(0), tables, radius)
    fitted = gemm_row_seconds(fit, rows, gpus)
    points = np.log2([[r.m, r.n, r.k, r.groups] for r in rows])
    residuals = np.log([r.seconds for r in rows]) - np.log(fitted)
    return GemmCorrection(points, residuals, tables, radius)


def family_corrections(family: str, entry: dict, gpus: dict[str, GpuFigures],
                       declaration: Path = CALIBRATION) -> dict[str, GemmCorrection]:
    """Per GEMM precision, the correction of kernel family ``family`` (``entry``: its fitted
    parameters, as ``kernels.yaml`` holds them) from the tables ``declaration`` names for it; ``{}``
    for a family the declaration does not name, a precision with no shape table of its own
    (``scale_from``) left out, one declared ``same_as`` another taking that one's."""
    spec = read_yaml(declaration, InputError) or {}
    declared = ((spec.get("families") or {}).get(family) or {}).get("gemm") or {}
    members = list(entry.get("gpus") or [])
    missing = [g for g in members if g not in gpus]
    if missing:
        raise InputError(f"gemm_model tables: the family {family}'s GPUs {missing} have no figures")
    peaks = peaks_of(gpus)
    out: dict[str, GemmCorrection] = {}
    for precision, how in declared.items():
        if "tables" not in how or precision not in (entry.get("gemm") or {}):
            continue
        fitted = entry["gemm"][precision]
        fit = GemmFit(fitted["rate_tflops"], fitted["k0"], fitted["fixed_us"])
        tables = tuple(how["tables"])
        rows = [r for t in tables for r in read_gemm_table(t, peaks) if r.gpu in members and r.precision == precision]
        out[precision] = correction_of(rows, fit, gpus, tables)
    for precision, how in declared.items():
        if "same_as" in how and how["same_as"] in out:
            out[precision] = out[how["same_as"]]
    return out


def corrected_seconds(seconds: float, correction: GemmCorrection | None, m: float, n: float, k: float,
                      groups: float, floor: float) -> float:
    """``seconds`` (the fit's) times the correction at this shape, never under ``floor`` (the roofline)."""
    if correction is None:
        return seconds
    return max(seconds * float(np.exp(correction.log_factor(m, n, k, groups))), floor)


__all__ = ["GemmCorrection", "RADIUS", "corrected_seconds", "correction_of", "family_corrections"]
