"""Keep the garbage collector out of the hot loop.

A simulation allocates millions of short-lived events and closures; Python's cyclic collector
then walks every live object again and again (half the wall time of a 2,048-GPU all-to-all).
``gc_paused`` turns it off for the run and back on after (no forced collection: with numba and
pandas loaded a full collection costs tens of milliseconds, more than a small run itself; the
collector's own thresholds take over again)."""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def gc_paused():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
