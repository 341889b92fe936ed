"""The main job of ``make run``: every result the project produces by default, under results/.

1. the DeepSeek-V3 scenario (2,048 H800) under 1f1b, zb-h1, dualpipe, dualpipev;
2. every schedule side by side at P=8, M=16 without communication;
3. bubble against micro-batches for every schedule at P = 8 and 16 (a sweep on a local Dask cluster);
4. the DualPipe lesson's claims checked by simulation (experiments/lesson_check.py);
5. the validation suite: every published measured run of validation/runs.csv against the simulator
   (experiments/validate.py, a sweep on a local Dask cluster), started first in its own process so
   that its workers run beside steps 1-4;
6. the figures that read those CSVs (experiments/plots.py) and the page that shows them all,
   results/index.html (experiments/results_page.py).
The slower sweeps (sweep_ep, sweep_topology) and the lesson exercises run with ``make sweeps``.
"""
from __future__ import annotations

import subprocess
import sys
import time

from experiments import (
    bubble_vs_microbatches,
    deepseek_v3,
    lesson_check,
    plots,
    results_page,
    schedule_comparison,
)
from experiments.common import sweep_main


def start_validation(extra: list[str]) -> subprocess.Popen:
    """The validation suite (step 5) in its own process, started first: its sweep's workers use the
    cores while this process runs steps 1-4; its output is printed when it is done. Its figure is
    drawn by step 6."""
    return subprocess.Popen([sys.executable, "-m", "experiments.validate", "--no-progress", "--no-figure", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish_validation(proc: subprocess.Popen) -> int:
    """Wait for the validation process; print what it printed; its exit status."""
    output, _ = proc.communicate()
    print(output, end="")
    return proc.returncode


def main(argv=None) -> int:
    """Each step in turn (the validation suite beside steps 1-4, in its own process); the first that
    fails stops the job with its exit status. ``argv`` (e.g. ``["--force"]``) is passed to every
    step."""
    t0 = time.perf_counter()
    extra = list(argv or [])
    validation = start_validation(extra)
    steps = [lambda: deepseek_v3.main(extra), lambda: schedule_comparison.main(extra),
             lambda: sweep_main("bubble_vs_microbatches", bubble_vs_microbatches.point, bubble_vs_microbatches.points,
                                bubble_vs_microbatches.__doc__, ["--no-progress", "--serial", *extra]),
             lambda: lesson_check.main(extra), lambda: finish_validation(validation),
             lambda: plots.main(extra), lambda: results_page.main(extra)]
    try:
        for step in steps:
            status = step()
            if status:
                return status
            print()
    finally:
        if validation.poll() is None:       # a step before it failed: do not leave it running
            validation.kill()
            validation.wait()
    print(f"main job done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    import sys
    raise SystemExit(main(sys.argv[1:]))
