"""Keeping numba's on-disk caches of the fabric's kernels in step with their sources.

numba keys a cached function on its own file's timestamp and size (its cache index), yet the
machine code it keeps holds the kernels it calls from other files: ``flowcore.solve`` holds
``refill.refill``, ``fillscan.fill_scan`` and ``tallies.credit``. After one of those files is
edited, the caller's cache would go on running the old code, silently (numba's documentation,
"Cache invalidation": changes to functions in other files are not detected). So when
:mod:`sim.network.maxmin` is imported, once any kernel file is newer than a cache file of this
package, that cache file is removed, and the kernels compile anew on first use (tens of seconds,
once). A fresh checkout or install has no caches; an unchanged checkout keeps its own.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

# The modules of this package with compiled kernels (a test keeps the list complete).
KERNEL_FILES = ("fillscan.py", "flowcore.py", "links.py", "maxmin.py", "refill.py", "tallies.py", "traffic.py")
# Kernels elsewhere that this package's kernels call: the random draws of skewed routing.
CALLED_KERNELS = (Path(__file__).resolve().parent.parent / "rng.py",)


def drop_stale(folder: Path | str = Path(__file__).parent, called: tuple = CALLED_KERNELS) -> int:
    """Remove the numba cache files of ``folder`` (``__pycache__/*.nbi`` and ``*.nbc``) that are
    older than its newest kernel file, or than a kernel file elsewhere that they call (``called``);
    returns how many were removed. Missing files and a cache
    file another process removed first are not errors. A kernel file dated in the future (files
    copied from a machine whose clock was ahead) removes nothing: every cache written until then
    would look stale, and every run would compile the kernels again."""
    folder = Path(folder)
    try:
        newest = max(os.stat(path).st_mtime_ns for path in [*(folder / name for name in KERNEL_FILES), *called])
        entries = list(os.scandir(folder / "__pycache__"))
    except OSError:                 # no caches yet, or not this package's layout
        return 0
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
