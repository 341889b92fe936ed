"""Worker processes that end with the process that started them.

A worker process (the all-to-all measurement pool of :mod:`sim.training.comm.alltoall`, a local Dask cluster's
workers) is a child of the command's process. When that process dies without closing its pool
(killed by the out-of-memory killer, ``kill -9``), nothing tells the workers, and a worker busy with
a long measurement keeps running, orphaned, holding its memory. :func:`watch_parent` starts a
thread in the worker that ends the worker within :data:`POLL_S` seconds once its parent is gone: the
operating system gives an orphan a new parent (init or a subreaper) at once, so a changed
``os.getppid()`` is the sign, whatever became of the old parent (a zombie not yet reaped counts as
gone). A local Dask cluster's workers load this module as a preload (:func:`dask_setup`).
"""
from __future__ import annotations

import os
import threading
import time

POLL_S = 0.5        # how often a worker checks its parent (s)


def watch_parent(poll_s: float = POLL_S) -> threading.Thread:
    """Start a daemon thread that ends this process (``os._exit(1)``, no clean-up: the parent that
    would use its results is gone) once its parent is gone. The parent is the process that started
    this one (``multiprocessing.parent_process()``, else the present parent): a worker that
    finishes starting after its parent died ends at once."""
    import multiprocessing
    creator = multiprocessing.parent_process()
    parent = creator.pid if creator is not None else os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    thread = threading.Thread(target=watch, name="watch-parent", daemon=True)
    thread.start()
    return thread


def dask_setup(worker) -> None:
    """Dask's preload hook: a local cluster's worker ends with the process that started it."""
    watch_parent()


__all__ = ["POLL_S", "dask_setup", "watch_parent"]
