"""What is run: the model, the GPU and the run as validated specs (presets in
``sim/training/presets``, Hugging Face ``config.json`` files), the parallel layout in Megatron-Core's
tp-cp-ep-dp-pp order, the recomputation recipe, parameter counts, saved activations and the memory
of every rank, injected faults, and the recipe line a run prints. Nothing here simulates.

The names below are imported on first use.
"""
from __future__ import annotations

from ...faces import lazy_face

PUBLIC = {"RunSpec": "sim.training.model.specs", "ModelSpec": "sim.training.model.specs",
          "GPUSpec": "sim.training.model.specs", "SpecError": "sim.training.model.specs",
          "load_scenario": "sim.training.model.specs", "load_model": "sim.training.model.specs",
          "load_gpu": "sim.training.model.specs", "Layout": "sim.training.model.layout",
          "Recompute": "sim.training.model.recompute", "RankMemory": "sim.training.model.memory",
          "memory_per_rank": "sim.training.model.memory", "FaultSpec": "sim.training.model.faults",
          "recipe_line": "sim.training.model.recipe"}

__getattr__, __dir__ = lazy_face(__name__, PUBLIC, globals())
