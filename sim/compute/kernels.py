"""What each kernel costs on a GPU: the kernel model behind the chunk model.

* a GEMM: :func:`~sim.compute.gemm.gemm_seconds` with the GPU family's fit at its precision (a
  fixed time, wave quantization over the SMs, the ``k`` pipeline, the roofline);
* the fused attention core: :class:`~sim.compute.attention.AttentionModel` at its sequence length
  and head size, plus one launch: the family's own kernel (``attention_kernel: flash``:
  FlashAttention-3 on Hopper and Blackwell, FlashAttention-2 on Ampere) or FlashAttention-2 where
  the family fitted it too (``flash2``: PyTorch's scaled_dot_product_attention on Hopper);
* a memory-bound kernel: ``launches x kernel_launch_us + bytes / (HBM bandwidth x hbm_efficiency)``.

A flat efficiency set by the user overrides its class (``gemm_efficiency``: every GEMM at
``FLOPs / (peak x efficiency)``; ``attention_efficiency``: the core's useful FLOPs at the BF16 peak
x efficiency), as the FLOPs model costs them. The fitted families live in
``sim/compute/presets/kernels.yaml`` (``python -m sim calibrate --kernels --write``); a GPU runs the
family its spec names (``kernel_family``), else the family listing its name, else ``generic``: the
``sm90`` fits at the ratio of the GPU's peaks to the H100's (said in the recipe line). A GPU that
runs a family at another BF16 peak than the family was fitted at (its ``reference_bf16_tflops``:
an H100 NVL or a power-limited H100 naming ``sm90``) runs its GEMM and attention fits at the ratio
of the two peaks too (:func:`peak_ratio`), also said in the recipe line.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ..checks import InputError, read_yaml
from .attention import AttentionFit, AttentionModel
from .device import DEFAULT_HBM_EFFICIENCY, GpuFigures
from .gemm import GemmFit, gemm_cost
from .gemm_table import corrected_seconds, family_corrections
from .ops import ATTENTION_KERNELS, Op

FITTED = Path(__file__).with_name("presets") / "kernels.yaml"
ELEMENT_BYTES = {"bf16": 2.0, "fp8": 1.0, "mxfp8": 1.0}
DEFAULT_LAUNCH_US = 3.0      # a small kernel's launch and ramp, and the gap to the next: our assumption
GENERIC_FROM = "sm90"


class KernelFamilyError(InputError):
    """A kernel family file is missing or malformed, or a GPU's family is unknown."""


@dataclass(frozen=True)
class Family:
    """One GPU family's fitted kernels: GEMM fits by precision, the attention model, and the other
    attention kernels it fitted (``also``: kernel name -> :class:`AttentionModel`)."""

    name: str
    gemm: dict
    attention: AttentionModel
    source: str
    also: dict = field(default_factory=dict)

    def attention_model(self, kernel: str) -> AttentionModel:
        """The model of ``attention_kernel`` ``kernel``: ``flash`` (or ``unfused``, whose core is not
        this model's) the family's own kernel; a kernel's table name (``flash2``) the family's own
        if it is that kernel, else the one fitted under ``also``; refused where the family has none."""
        if kernel in ("flash", "unfused", self.attention.kernel):
            return self.attention
        if kernel not in self.also:
            allowed = ["flash", *sorted({self.attention.kernel, *self.also} & set(ATTENTION_KERNELS)), "unfused"]
            raise KernelFamilyError(f"attention_kernel {kernel!r}: kernel family {self.name} has no fitted {kernel} "
                                    f"attention (allowed: {', '.join(allowed)})")
        return self.also[kernel]


class OpCost(NamedTuple):
    """An op with its seconds and what bounds it: ``compute``, ``hbm`` or ``launch``."""

    op: Op
    seconds: float
    bound: str


@functools.lru_cache(maxsize=8)
def _families(path: str, stamp: int) -> dict:
    data = read_yaml(path, KernelFamilyError) or {}
    if not isinstance(data, dict) or not data:
        raise KernelFamilyError(f"kernel families {path}: expected a mapping of families (python -m sim calibrate "
                                "--kernels writes one)")
    return data


def load_families(path: str | Path | None = None) -> dict:
    """The fitted families of ``path`` (default: the shipped ``kernels.yaml``)."""
    file = Path(path) if path else FITTED
    if not file.is_file():
        raise KernelFamilyError(f"kernel families {file}: no such file")
    return _families(str(file), file.stat().st_mtime_ns)


def family_of(gpu: GpuFigures, families: dict) -> tuple[str, float | None]:
    """(the family ``gpu`` runs, ``None``, or for a GPU no family knows the factor on
    :data:`GENERIC_FROM`'s rates: the ratio of its BF16 peak to that family's)."""
    if gpu.family:
        if gpu.family not in families:
            raise KernelFamilyError(f"GPU {gpu.name}: kernel_family {gpu.family!r} is not a fitted family "
                                    f"(allowed: {', '.join(sorted(families))})")
        return gpu.family, None
    for name, fam in families.items():
        if gpu.name in (fam.get("gpus") or []):
            return name, None
    return GENERIC_FROM, peak_ratio(gpu, families[GENERIC_FROM])


def peak_ratio(gpu: GpuFigures, entry: dict) -> float:
    """``gpu``'s BF16 peak over the one family ``entry`` was fitted at (``reference_bf16_tflops``):
    the factor on that family's GEMM and attention rates for a GPU that runs its kernels at another
    peak (lower clocks, a lower power limit: an H100 NVL's 835 TFLOPS against the SXM's 989)."""
    return gpu.peak("bf16") / entry["reference_bf16_tflops"]


def _attention_model(att: dict, gpu: GpuFigures, factor: float) -> AttentionModel:
    fits = {tuple([k.split("_")[0], int(k.split("_")[1])]): AttentionFit(**f) for k, f in att["fits"].items()}
    scale = gpu.peak("bf16") * att["per_peak"] if att.get("per_peak") else factor
    return AttentionModel(fits, att["kernel"], scale, att.get("source", ""))


def _family(name: str, entry: dict, gpu: GpuFigures, factor: float) -> Family:
    try:
        gemm = {p: GemmFit(**{**f, "rate_tflops": f["rate_tflops"] * factor}) for p, f in (entry.get("gemm") or {}).items()}
        att = entry["attention"]
        attention = _attention_model(att, gpu, factor)
        also = {k: _attention_model(a, gpu, factor) for k, a in (att.get("also") or {}).items()}
    except (KeyError, TypeError, ValueError, InputError) as exc:
        raise KernelFamilyError(f"kernel family {name}: malformed entry ({exc})") from None
    return Family(name, gemm, attention, "; ".join(f"{p}: {f.source}" for p, f in gemm.items()), also)


class KernelModel:
    """Seconds of each :class:`~sim.compute.ops.Op` on ``gpu`` (see the module).

    ``hbm_efficiency``: memory-bound kernels' share of HBM bandwidth; ``launch_us``: each
    non-GEMM kernel's fixed time; ``gemm_efficiency`` / ``attention_efficiency``: flat overrides
    (``None``: the fitted kernels); ``families``: a file of fitted families (``None``: shipped);
    ``attention_kernel``: which fused attention kernel runs (:meth:`Family.attention_model`);
    ``gemm_tables``: the figures of the GPUs the calibration tables were measured on, to read each
    GEMM's time off the family's tables around its shape (:mod:`.gemm_table`, ``gemm_model:
    tables``); empty: the fit alone."""

    def __init__(self, gpu: GpuFigures, *, hbm_efficiency: float = DEFAULT_HBM_EFFICIENCY,
                 launch_us: float = DEFAULT_LAUNCH_US, gemm_efficiency: float | None = None,
                 attention_efficiency: float | None = None, families: str | None = None,
                 attention_kernel: str = "flash", gemm_tables: tuple[GpuFigures, ...] = ()):
        self.gpu = gpu
        self.hbm_rate = gpu.hbm_tbps * 1e12 * hbm_efficiency
        self.launch_s = launch_us * 1e-6
        self.gemm_efficiency, self.attention_efficiency = gemm_efficiency, attention_efficiency
        table = load_families(families)
        name, generic = family_of(gpu, table)
        self.generic = generic is not None
        # the family's fits at the ratio of the peaks: 1 for the family's own GPUs at its peak
        self.peak_factor = peak_ratio(gpu, table[name])
        self.family = _family(name, table[name], gpu, self.peak_factor)
        self.attention = self.family.attention_model(attention_kernel)
        self.gemm_corrections = family_corrections(name, table[name], {g.name: g for g in gemm_tables}) \
            if gemm_tables else None
        self.memo: dict = {}        # a caller's costs of whole ops lists by their key (shared_kernel_model)

    @property
    def label(self) -> str:
        """The kernel model as the recipe line names it."""
        if self.gemm_efficiency is not None and self.attention_efficiency is not None:
            return f"flat efficiencies (GEMMs {self.gemm_efficiency:g}, attention {self.attention_efficiency:g})"
        if self.generic:
            fam = f"{self.family.name} (generic: {self.family.name}'s fits at {self.gpu.name}'s peaks)"
        elif self.peak_factor != 1.0:
            fam = f"{self.family.name} (at {self.peak_factor:.3g} of its rates: {self.gpu.name}'s BF16 peak)"
        else:
            fam = self.family.name
        flat = []
        if self.gemm_efficiency is not None:
            flat.append(f"GEMMs flat at {self.gemm_efficiency:g}")
        if self.attention_efficiency is not None:
            flat.append(f"attention flat at {self.attention_efficiency:g}")
        if self.gemm_corrections is not None and self.gemm_efficiency is None:
            counts = ", ".join(f"{p} {c.rows}" for p, c in self.gemm_corrections.items())
            flat.append("GEMMs read off the measured tables around their shapes: "
                        + (f"{counts} rows" if counts else "none declared, the fit"))
        return f"kernels {fam}, {self.attention.kernel}" + (f" ({', '.join(flat)})" if flat else "")

    def gemm_fit(self, precision: str) -> GemmFit:
        fit = self.family.gemm.get(precision)
        if fit is None:
            raise KernelFamilyError(f"GPU {self.gpu.name} (kernel family {self.family.name}) has no fitted "
                                    f"{precision} GEMMs (fitted: {', '.join(sorted(self.family.gemm))})")
        return fit

    def _gemm_kw(self, precision: str, sms: int | None, hbm_share: float = 0.0) -> dict:
        return dict(sms=sms or self.gpu.sms, gpu_sms=self.gpu.sms, in_bytes=ELEMENT_BYTES[precision],
                    hbm_bytes_per_s=self.hbm_rate * (1.0 - hbm_share))

    def cost(self, op: Op, sms: int | None = None, hbm_share: float = 0.0) -> OpCost:
        """Seconds of ``op`` on ``sms`` SMs (default: all) and what bounds it, with ``hbm_share``
        (0 <= share < 1) of the HBM bandwidth taken by something else running beside it (a
        communication kernel's copies): memory-bound work then moves at ``(1 - hbm_share)`` of
        the rate; the attention core, compute-bound, does not see it."""
        if not 0.0 <= hbm_share < 1.0:
            raise ValueError(f"hbm_share {hbm_share!r} is outside [0, 1)")
        extra = (op.kernels - 1) * self.launch_s
        fewer = self.gpu.sms / (sms or self.gpu.sms)                   # a flat rate on fewer SMs: proportionally slower
        if op.kind == "gemm":
            if self.gemm_efficiency is not None:
                return OpCost(op, fewer * op.flops / (self.gpu.peak(op.precision) * 1e12 * self.gemm_efficiency),
                              "compute")
            g, m, n, k = op.shape
            kw = self._gemm_kw(op.precision, sms, hbm_share)
            seconds, bound = gemm_cost(self.gemm_fit(op.precision), float(m), float(n), float(k), float(g), kw["sms"],
                                       kw["gpu_sms"], kw["in_bytes"], float(op.out_bytes), kw["hbm_bytes_per_s"])
            if self.gemm_corrections:
                floor = max(op.flops / (self.gpu.peak(op.precision) * 1e12) * fewer,
                            g * ((m * k + k * n) * kw["in_bytes"] + m * n * op.out_bytes) / (self.gpu.hbm_tbps * 1e12))
                seconds = corrected_seconds(seconds, self.gemm_corrections.get(op.precision), float(m), float(n),
                                            float(k), float(g), floor)
            return OpCost(op, seconds + extra, bound)
        if op.kind == "attention":
            if self.attention_efficiency is not None:
                return OpCost(op, fewer * op.useful / (self.gpu.peak("bf16") * 1e12 * self.attention_efficiency),
                              "compute")
            _, seq_len, head_dim, causal = op.shape
            work = self.attention.seconds(op.direction, bool(causal), op.flops, seq_len, head_dim) * fewer
            return OpCost(op, self.launch_s + work + extra, "compute" if work > self.launch_s else "launch")
        data = op.bytes / (self.hbm_rate * (1.0 - hbm_share))
        launch = op.kernels * self.launch_s
        return OpCost(op, launch + data, "hbm" if data >= launch else "launch")

    def costs(self, ops: list[Op], sms: int | None = None, hbm_share: float = 0.0) -> list[OpCost]:
        return [self.cost(op, sms, hbm_share) for op in ops]


_SHARED: dict[tuple, KernelModel] = {}


def shared_kernel_model(gpu: GpuFigures, **options) -> KernelModel:
    """The :class:`KernelModel` of ``gpu`` and ``options`` (its keyword arguments), one per
    configuration, families file version and process: the runs of a sweep or a plan share it and
    what callers keep in its ``memo`` (the costs of a layer shape's kernels)."""
    families = options.get("families")
    file = Path(families) if families else FITTED
    key = (repr(gpu), str(file), file.stat().st_mtime_ns if file.is_file() else None, repr(sorted(options.items())))
    model = _SHARED.get(key)
    if model is None:
        if len(_SHARED) >= 64:
            _SHARED.clear()
        model = _SHARED[key] = KernelModel(gpu, **options)
    return model


__all__ = ["DEFAULT_LAUNCH_US", "Family", "KernelFamilyError", "KernelModel", "OpCost", "family_of", "load_families",
           "peak_ratio", "shared_kernel_model"]
