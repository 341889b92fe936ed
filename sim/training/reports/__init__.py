"""What a step's results become: the comparison table and text, per-rank and summary CSVs, the
figures (the F&B unit's streams, link timelines, per-rank time), and the results page of
``python -m sim run --out DIR``.

The names below are imported on first use.
"""
from __future__ import annotations

from ...faces import lazy_face

PUBLIC = {"comparison_text": "sim.training.reports.report", "write_outputs": "sim.training.reports.report",
          "write_run_page": "sim.training.reports.runpage"}

__getattr__, __dir__ = lazy_face(__name__, PUBLIC, globals())
