"""The step's communication: the collectives inside an op as named shapes, the all-to-alls measured
on the fabric (:mod:`.alltoall`, once per twin job: :mod:`.flow_twins`) or run live among the other
traffic (:mod:`.live`), the TP and CP collectives (:mod:`.model_parallel`), and the communication
kernels' behaviour (:mod:`.kernels`) with their calibration to measured collectives (:mod:`.calibrate`).

The names below are imported on first use.
"""
from __future__ import annotations

from ...faces import lazy_face

PUBLIC = {"CollectiveShape": "sim.training.comm.collective_shapes", "CommModel": "sim.training.comm.alltoall",
          "LiveComm": "sim.training.comm.live", "ModelParallelComm": "sim.training.comm.model_parallel",
          "KernelSpec": "sim.training.comm.kernels", "load_kernels": "sim.training.comm.kernels",
          "fit": "sim.training.comm.calibrate"}

__getattr__, __dir__ = lazy_face(__name__, PUBLIC, globals())
