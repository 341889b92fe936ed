"""The training step of a model (dense or MoE) on a cluster: what runs, what it costs, the step.

Its rooms, from the ground up (each imports only those below it):

- :mod:`sim.training.model`: what is run: the model, GPU and run specs with their presets, the
  parallel layout, the recomputation recipe, parameters, activations and memory per rank, faults;
- :mod:`sim.training.comm`: the communication: all-to-all and TP/CP collective shapes and their
  times on the fabric (measured or live), the communication kernels and their calibration;
- :mod:`sim.training.costs`: the compute: a stage's layers as kernels (the chunk model), an op as
  parts on a GPU's streams, the costs the Zero Bubble search reads;
- this package: the scenario assembled from a spec (:mod:`.scenario`), the ranks run on the engine
  (:mod:`.runner`, :mod:`.dpsync`), the step and its result (:mod:`.step`), how far to trust it
  (:mod:`.trust`), the schedule search (:mod:`.search`);
- :mod:`sim.training.reports`: the step's tables, figures, files and results page.

The names below are imported on first use.
"""
from __future__ import annotations

from ..faces import lazy_face

PUBLIC = {"Scenario": "sim.training.scenario", "MoEStep": "sim.training.step", "StepResult": "sim.training.step",
          "simulate_step": "sim.training.step", "simulate_schedules": "sim.training.step",
          "trust_band": "sim.training.trust", "search_schedules": "sim.training.search"}

__getattr__, __dir__ = lazy_face(__name__, PUBLIC, globals())
