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


FLAGS = {"max_ops": "--max-ops", "max_parts": "--max-parts", "max_graph_nodes": "--max-nodes",
         "max_draws": "--max-draws"}
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


__all__ = ["DeadlineExceeded", "FLAGS", "Limits", "TooLarge", "check", "check_deadline", "current", "deadline",
           "raised", "schedule_ops", "step_parts"]
