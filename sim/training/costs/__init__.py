"""The step's compute: a stage's layers as kernels with their times (the chunk model, on
:mod:`sim.compute`'s kernel model), an op as parts on a GPU's compute and communication streams, the
per-stage costs the Zero Bubble search reads, and the kernel table a run reports.

The names below are imported on first use.
"""
from __future__ import annotations

from ...faces import lazy_face

PUBLIC = {"ChunkModel": "sim.training.costs.chunk", "LayerCost": "sim.training.costs.chunk",
          "Part": "sim.training.costs.streams", "OpPlan": "sim.training.costs.streams",
          "stage_costs": "sim.training.costs.stagecosts", "kernel_frame": "sim.training.costs.kernel_report"}

__getattr__, __dir__ = lazy_face(__name__, PUBLIC, globals())
