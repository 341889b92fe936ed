"""The one place the fabric's kernels get numba from.

``njit`` is numba's decorator, or ``None`` when numba is not installed: every compiled kernel has a
pure-Python (or numpy) body that runs as it is without it. Those fallbacks exist for two reasons:
numba is optional (the numpy oracles give the same answers, slower), and mutation testing runs the
kernels as Python (``NUMBA_DISABLE_JIT=1``), because mutmut's wrappers cannot be compiled.

``LEAF``: the options of the small helpers the kernels call in their inner loops (a heap move, a
link's tallies): cached, and compiled without reference counting. They allocate nothing, and numba
does not prune the increments and decrements of the array arguments around each call, which made a
loop of such calls up to 28x slower than the same code written inline (numba/numba#2345, #2350).

Importing this module also drops the package's stale numba caches (:mod:`sim.network.jitcache`).
"""
from __future__ import annotations

try:                                     # optional: the numpy versions are the fallback
    from numba import njit
except ImportError:                      # pragma: no cover - depends on the environment
    njit = None
else:
    from .jitcache import drop_stale
    drop_stale()                         # caches older than a kernel file they may hold (see jitcache)

LEAF = {"cache": True, "_nrt": False}

__all__ = ["LEAF", "njit"]
