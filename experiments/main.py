"""The main job of ``make run``: every result the project produces by default, under results/.

1. the validation suite: every published measured run of validation/runs.csv against the simulator
   (experiments/validate.py, a sweep on a local Dask cluster), started first in its own process so
   that its workers run beside steps 2-5; it compiles the fabric's numba kernels once, before its
   workers start, and says so;
2. every schedule side by side at P=8, M=16 without communication,
3. bubble against micro-batches for every schedule at P = 8 and 16, and the lesson's claims that
   need schedules alone (step 5's, answered ahead): none needs the fabric, so they run while step 1
   compiles, and so are the figures of the CSVs already there;
4. the DeepSeek-V3 scenario (2,048 H800) under 1f1b, zb-h1, dualpipe, dualpipev, once the kernels
   are compiled (loaded from numba's cache, not compiled a second time here), and its figures;
5. the DualPipe lesson's claims checked by simulation (experiments/lesson_check.py; step 4's four
   steps are handed to it, not simulated again);
6. once the suite is done, its figure (experiments/plots.py) and the page that shows them all,
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
    validate,
)
from experiments.common import sweep_main

DEEPSEEK_FIGURES = ("deepseek_v3_links", "deepseek_v3_events_dualpipe")   # plots.py's, from step 4's CSVs


def start_validation(extra: list[str]) -> subprocess.Popen:
    """The validation suite (step 1) in its own process, started first: its sweep's workers use the
    cores while this process runs the other steps; its output is printed when it is done. Its
    figure is drawn by step 6."""
    return subprocess.Popen([sys.executable, "-m", "experiments.validate", "--no-progress", "--no-figure",
                             "--announce-ready", *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_kernels(proc: subprocess.Popen) -> list[str]:
    """The validation process's lines up to its ``kernels ready`` line (all of them if it ends
    first, having failed before): the fabric's kernels are then in numba's cache, so this process
    loads them instead of compiling them too. The lines are printed with the rest of its output."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(validate.READY):
            break
    return lines


def finish_validation(proc: subprocess.Popen, first: list[str]) -> int:
    """Wait for the validation process; print what it printed (``first``: the lines already read);
    its exit status."""
    output, _ = proc.communicate()
    print("".join(first) + output, end="")
    return proc.returncode


def main(argv=None) -> int:
    """Each step in turn (the validation suite beside steps 2-5, in its own process); the first that
    fails stops the job with its exit status. ``argv`` (e.g. ``["--force"]``) is passed to every
    step."""
    t0 = time.perf_counter()
    extra = list(argv or [])
    validation = start_validation(extra)
    first: list[str] = []

    def kernels_ready() -> int:
        first.extend(wait_for_kernels(validation))
        return 0

    later = ["validation", *DEEPSEEK_FIGURES]
    steps = [lambda: schedule_comparison.main(extra),
             lambda: sweep_main("bubble_vs_microbatches", bubble_vs_microbatches.point, bubble_vs_microbatches.points,
                                bubble_vs_microbatches.__doc__, ["--no-progress", "--serial", *extra]),
             lambda: lesson_check.prepare() or plots.main([*extra, "--skip", *later]),
             lambda: kernels_ready() or deepseek_v3.main(extra, keep=lesson_check.remember)
             or plots.main([*extra, "--only", *DEEPSEEK_FIGURES]),
             lambda: lesson_check.main(extra),
             lambda: finish_validation(validation, first), lambda: plots.main([*extra, "--only", "validation"]),
             lambda: results_page.main(extra)]
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
