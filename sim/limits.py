"""Size limits and deadlines: refuse up front what would not finish, stop what runs too long.

Before building anything, a command estimates the size of what it was asked for from its inputs
alone (:func:`schedule_ops`, :func:`step_parts`, and the topology builders' graph-node count) and
refuses it beyond a limit, naming the estimate and the flag that raises the limit. The defaults
keep one command under a few minutes on one core:

=================  ==========  ===============================================================
limit              default     what it counts (flag that raises it)
=================  ==========  ===============================================================
``max_ops``        2,000,000   ops of one schedule, about 40,000 simulated per second (``--max-ops``)
``max_parts``      20,000,000  compute and communication parts of one MoE step, about 50,000 per
                               second (``--max-parts``)
``max_graph_nodes`` 1,000,000  nodes of a topology graph (``--max-nodes``)
``max_draws``      10 ** 10    expert scores drawn by one sample of skewed routing: GPUs x tokens
                               x experts, about 80 million per second (``--max-draws``)
``max_memory_gb``  0           GB of memory a step's processes may need, estimated from the
                               topology graph's nodes (:func:`run_memory_gb`); 0: what the machine
                               has available (``--max-memory-gb``)
=================  ==========  ===============================================================

The limits are process-wide (:func:`current`, changed for a block with :func:`raised`). A
deadline (:func:`deadline`) is per thread: the engine and the fabric call :func:`check_deadline`
as they go, and a run past its deadline raises :class:`DeadlineExceeded`; sweeps use it for their
per-point time limit.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace

from .checks import InputError, number


@dataclass(frozen=True)
class Limits:
    max_ops: int = 2_000_000
    max_parts: int = 20_000_000
    max_graph_nodes: int = 1_000_000
    max_draws: int = 10_000_000_000
    max_memory_gb: int = 0              # 0: the memory this machine has available when the check runs


FLAGS = {"max_ops": "--max-ops", "max_parts": "--max-parts", "max_graph_nodes": "--max-nodes",
         "max_draws": "--max-draws", "max_memory_gb": "--max-memory-gb"}
# The memory (GB) a step on a cluster takes, all its processes together, grows with the topology
# graph's nodes (the graph, the link table, the routes of every EP group and DP ring): measured with
# ``python -m tools.benchmark --only scale`` (DeepSeek-V3, DualPipe, representative mode, 2 worker
# processes): 1.7 GB at 70,720 graph nodes (32,768 GPUs), 3.5 GB at 280,696 (131,072 GPUs).
MEMORY_BASE_GB = 1.0
MEMORY_GB_PER_GRAPH_NODE = 9e-6
_current = Limits()


class TooLarge(InputError):
    """The estimated size of a run is over a limit; the message gives the estimate and the flag."""


class DeadlineExceeded(Exception):
    """A run went past the deadline set by :func:`deadline` (a sweep's per-point time limit)."""


def current() -> Limits:
    return _current


@contextmanager
def raised(**changes):
    """Within the block, use these limits (``None`` values keep the current ones)."""
    global _current
    old = _current
    changes = {k: number(v, FLAGS.get(k, k), integer=True, low=1) for k, v in changes.items() if v is not None}
    _current = replace(old, **changes)
    try:
        yield _current
    finally:
        _current = old


def check(limit: str, estimate: float, what: str) -> None:
    """Raise :class:`TooLarge` if ``estimate`` is over limit ``limit`` (a :class:`Limits` field)."""
    allowed = getattr(_current, limit)
    if estimate > allowed:
        raise TooLarge(f"{what} needs about {estimate:,.0f} {limit.removeprefix('max_').replace('_', ' ')}, over "
                       f"the limit of {allowed:,}; raise it with {FLAGS[limit]} N if you mean it")


def run_memory_gb(graph_nodes: int) -> float:
    """Estimated peak memory (GB) of a representative step on a topology of ``graph_nodes`` nodes:
    :data:`MEMORY_BASE_GB` + :data:`MEMORY_GB_PER_GRAPH_NODE` per node (every rank needs more)."""
    return MEMORY_BASE_GB + MEMORY_GB_PER_GRAPH_NODE * graph_nodes


def available_gb() -> float:
    """The memory (GB) this machine has available now (``psutil``; else physical pages free)."""
    try:
        import psutil
        return psutil.virtual_memory().available / 2**30
    except ImportError:                  # pragma: no cover - psutil comes with dask.distributed
        import os
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30


def check_memory(graph_nodes: int, what: str) -> None:
    """Raise :class:`TooLarge`, one line with the estimate and what to change, when a run on a
    topology of ``graph_nodes`` nodes needs more memory (:func:`run_memory_gb`) than ``max_memory_gb``
    or, when that is 0, than this machine has available: said before anything is built, instead of
    the process being killed when memory runs out."""
    allowed = _current.max_memory_gb
    budget = allowed or available_gb()
    need = run_memory_gb(graph_nodes)
    if need > budget:
        where = f"the limit of {allowed:,} GB" if allowed else f"the {budget:.1f} GB this machine has available"
        raise TooLarge(f"{what} needs about {need:.1f} GB of memory for one step ({graph_nodes:,} graph nodes), over "
                       f"{where}: run it on a machine with more memory (--mode representative and --workers 1 use "
                       f"the least), spread a sweep over a Dask cluster (--scheduler tcp://HOST:8786), or raise the "
                       f"limit with {FLAGS['max_memory_gb']} N if you mean it")


def schedule_ops(pp: int, microbatches: int, chunks: int | None = None) -> int:
    """Upper bound on a schedule's simple ops: F, I and W of every (micro-batch, stage), with
    ``S = P * max(v, 2)`` stages (V-shaped schedules have 2P)."""
    return 3 * microbatches * pp * max(chunks or 1, 2)


def step_parts(pipelines: int, microbatches: int, layers: int, per_layer_op: int = 8) -> int:
    """Parts of one MoE step: every simulated pipeline runs ``microbatches`` x 3 ops (F, I, W)
    over the model's ``layers``, about ``per_layer_op`` parts each (attention, dispatch, MLP,
    combine, recomputation, ...)."""
    return 3 * pipelines * microbatches * layers * per_layer_op


_local = threading.local()


@contextmanager
def deadline(seconds: float | None):
    """Within the block (in this thread), :func:`check_deadline` raises after ``seconds``."""
    old = getattr(_local, "until", None)
    _local.until = None if seconds is None else time.monotonic() + seconds
    try:
        yield
    finally:
        _local.until = old


def check_deadline() -> None:
    """Raise :class:`DeadlineExceeded` if this thread's deadline has passed (cheap: call it often)."""
    until = getattr(_local, "until", None)
    if until is not None and time.monotonic() > until:
        raise DeadlineExceeded("the run went past its time limit")


__all__ = ["DeadlineExceeded", "FLAGS", "Limits", "MEMORY_BASE_GB", "MEMORY_GB_PER_GRAPH_NODE", "TooLarge",
           "available_gb", "check", "check_deadline", "check_memory", "current", "deadline", "run_memory_gb",
           "raised", "schedule_ops", "step_parts"]
