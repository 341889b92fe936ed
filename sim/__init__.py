"""moe-pipesim: pipeline-parallel training steps (MoE first) simulated on a modeled cluster.

The package's face, as SimPy's is: the four calls most uses need, imported on first use (so that
``import sim`` stays light for the command line)::

    import sim
    run = sim.load_scenario("deepseek-v3", schedule="dualpipe")   # a RunSpec: preset or YAML, fields replaced
    step = sim.simulate_step(run)                                 # a StepResult: step_time_s, mfu, ranks, ...
    order = sim.make_schedule("zb-h1", pp=8, microbatches=16)     # a Schedule: the ops of every rank, as data
    fixed = sim.simulate_pipeline("1f1b", 8, 16)                  # the same at fixed op costs, no network

The command line (``python -m sim``) sits on top of these; the modules say the rest.
"""
from __future__ import annotations

from .faces import lazy_face

__version__ = "0.1.0"

PUBLIC = {"load_scenario": "sim.training.model.specs", "simulate_step": "sim.training.step",
          "make_schedule": "sim.schedules", "simulate_pipeline": "sim.pipeline"}

__getattr__, __dir__ = lazy_face(__name__, PUBLIC, globals())

__all__ = ["PUBLIC", "load_scenario", "make_schedule", "simulate_pipeline", "simulate_step"]
