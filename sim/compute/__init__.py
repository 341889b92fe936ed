"""Compute costs as the kernels run: the operator list of a layer (:mod:`.ops`), GEMMs by shape
(:mod:`.gemm`), fused attention by sequence length and head size (:mod:`.attention`), memory-bound
kernels and launches (:mod:`.kernels`), and the fit of their parameters to declared measured
tables (:mod:`.fit`, :mod:`.tables`). It knows nothing of schedules, networks or scenarios: the
chunk model (:mod:`sim.training.costs.chunk`) describes a layer with a :class:`LayerShape` and sums the costs."""
from .attention import AttentionFit, AttentionModel
from .device import DEFAULT_HBM_EFFICIENCY, GpuFigures
from .gemm import GemmFit, gemm_bound, gemm_seconds
from .kernels import DEFAULT_LAUNCH_US, KernelFamilyError, KernelModel, OpCost, load_families, shared_kernel_model
from .ops import FUSIONS, LayerShape, Op, attention_ops, embedding_ops, head_ops, layer_ops, mlp_ops
from .tables import KernelTableError

__all__ = ["AttentionFit", "AttentionModel", "DEFAULT_HBM_EFFICIENCY", "DEFAULT_LAUNCH_US", "FUSIONS", "GemmFit",
           "GpuFigures", "KernelFamilyError", "KernelModel", "KernelTableError", "LayerShape", "Op", "OpCost",
           "attention_ops", "embedding_ops", "gemm_bound", "gemm_seconds", "head_ops", "layer_ops", "load_families",
           "mlp_ops", "shared_kernel_model"]
