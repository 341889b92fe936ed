"""Keeping numba's on-disk caches of the fabric's kernels in step with their sources.

numba keys a cached function on its own file's timestamp and size (its cache index), yet the
machine code it keeps holds the kernels it calls from other files: ``fairshare.step.solve`` holds
``fairshare.refill.refill``, ``fairshare.scan.fill_scan`` and ``fairshare.tallies.credit``. After
one of those files is edited, the caller's cache would go on running the old code, silently
(numba's documentation, "Cache invalidation": changes to functions in other files are not
detected). So when :mod:`sim.network.jit` is first imported, once any kernel file is newer than a
cache file of this package (its folders with kernels), that cache file is removed, and the kernels
compile anew on first use (tens of seconds, once). A fresh checkout or install has no caches; an unchanged checkout keeps its own.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

# The modules of this package with compiled kernels, from its folder (a test keeps the list complete).
KERNEL_FILES = ("fairshare/filling.py", "fairshare/heap.py", "fairshare/refill.py", "fairshare/scan.py",
                "fairshare/step.py", "fairshare/tallies.py", "links.py", "traffic.py")
# Kernels elsewhere that this package's kernels call: the random draws of skewed routing.
CALLED_KERNELS = (Path(__file__).resolve().parent.parent / "rng.py",)


def drop_stale(folder: Path | str = Path(__file__).parent, called: tuple = CALLED_KERNELS) -> int:
    """Remove the numba cache files of ``folder`` (``*.nbi`` and ``*.nbc`` in the ``__pycache__`` of
    each folder with a kernel file) that are older than its newest kernel file, or than a kernel file elsewhere that they call (``called``);
    returns how many were removed. Missing files and a cache
    file another process removed first are not errors. A kernel file dated in the future (files
    copied from a machine whose clock was ahead) removes nothing: every cache written until then
    would look stale, and every run would compile the kernels again."""
    folder = Path(folder)
    try:
        newest = max(os.stat(path).st_mtime_ns for path in [*(folder / name for name in KERNEL_FILES), *called])
    except OSError:                 # not this package's layout
        return 0
    entries = []
    for cache in sorted({(folder / name).parent / "__pycache__" for name in KERNEL_FILES}):
        try:
            entries.extend(os.scandir(cache))
        except OSError:             # no caches there yet
            pass
    if newest > time.time_ns():
        return 0
    removed = 0
    for entry in entries:
        if entry.name.endswith((".nbi", ".nbc")):
            try:
                if entry.stat().st_mtime_ns < newest:
                    os.remove(entry.path)
                    removed += 1
            except OSError:         # removed by another process, or read-only
                pass
    return removed
