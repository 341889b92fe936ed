"""Running a sweep's points on Dask so that no worker failure stops it or loses a row.

* Bounded submission: at most as many points are submitted as the cluster has threads, so a
  submitted point is a running point and its time limit counts from when it started.
* A worker that dies (out of memory, a crash, killed) while running a point: Dask runs the point
  again on another worker; a point that kills its worker twice gets the row ``error`` /
  ``worker died: ...``, written once a worker is alive again: when every worker went at once and
  none comes back, the cluster was lost, not the point, and the point stays unrun for the resume.
  The embedded cluster is started with Dask's ``distributed.scheduler.allowed-failures`` set to
  :data:`RETRIES` (1: one retry); a cluster of your own applies its scheduler's setting (set it to
  1 there to match).
* Per-point time limit: the engine and the fabric stop a point past its limit themselves (a
  ``timeout`` row, the worker keeps working); a point that does not stop within a grace period
  more (stuck outside the simulation loop) gets its ``timeout`` row here and its worker is
  restarted.
* A point whose result was lost before it was read (its worker finished it and died): Dask runs
  it again on a live worker and the sweep waits for it as a running point; the wait for a row is
  bounded (:data:`RESULT_WAIT_S`), so a result that no worker is left to recompute cannot hang
  the sweep, and it ends as a lost cluster below.
* A cluster with no worker for ``lost_after_s``, a scheduler that cannot be reached or is lost:
  the sweep stops with :class:`ClusterLost`, one line naming what happened; the finished rows are
  on disk and the next run resumes from them.
"""
from __future__ import annotations

import os
import time

from .sweep_rows import SweepTable, failed_row, run_point

RETRIES = 1
POLL_S = 0.5
RESULT_WAIT_S = 5.0       # the longest wait for a finished point's row (a few hundred bytes) to arrive
_PARKED = object()        # _outcome's answer for a worker-died row held until a worker is seen alive
_LOST = object()          # _outcome's answer for a result lost with its worker: the point runs again


class ClusterLost(ConnectionError):
    """The Dask cluster cannot run the sweep any more; the finished rows are kept."""


def run_on_dask(fn, todo: list[dict], table: SweepTable, scheduler: str | None, workers: int | None,
                timeout_s: float | None, lost_after_s: float, bar=None) -> None:
    """Run ``todo`` on a Dask cluster (``scheduler`` address, or an embedded one of ``workers``
    processes), adding each row to ``table`` as it finishes."""
    from dask.distributed import Client
    cluster = None
    if scheduler:
        refused_at_once(scheduler, table)
    try:
        if scheduler:
            client = Client(scheduler, timeout=lost_after_s)
        else:
            cluster = local_cluster(workers)
            client = Client(cluster)
    except ValueError as exc:                    # distributed's parse of the address
        raise ClusterLost(f"--scheduler {scheduler!r} is not a Dask scheduler address ({exc}); give "
                          f"tcp://HOST:PORT, e.g. tcp://10.0.0.1:8786; nothing ran") from None
    except (OSError, TimeoutError) as exc:
        raise ClusterLost(f"cannot reach the Dask scheduler at {scheduler} within {lost_after_s:g} s "
                          f"({type(exc).__name__}); nothing ran, rows so far are in {table.path}") from None
    try:
        _Runner(client, fn, table, timeout_s, lost_after_s, bar).run(todo)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def local_cluster(workers: int | None = None):
    """An embedded Dask cluster of ``workers`` processes (default one per core), one thread each,
    a failed task retried :data:`RETRIES` times, each worker ending with this process if it dies
    (:mod:`sim.orphans`); the caller closes it (or uses it as a context)."""
    import dask
    from dask.distributed import LocalCluster
    with dask.config.set({"distributed.scheduler.allowed-failures": RETRIES}):
        return LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                            dashboard_address=None, preload=["sim.orphans"])   # workers end with this process


def refused_at_once(scheduler: str, table: SweepTable) -> None:
    """Raise :class:`ClusterLost` at once when nothing listens at a ``tcp://HOST:PORT`` scheduler
    address (the host answers with a refusal): Dask's client would retry it for its whole timeout.
    A host that does not answer at all is left to that timeout."""
    import socket
    address = scheduler[len("tcp://"):] if scheduler.startswith("tcp://") else None
    if address is None or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        port_number = int(port)
    except ValueError:
        return                                   # distributed's own parse names the bad address
    try:
        with socket.create_connection((host.strip("[]"), port_number), timeout=2.0):
            pass
    except ConnectionRefusedError:
        raise ClusterLost(f"the Dask scheduler at {scheduler} refused the connection (nothing listens on port "
                          f"{port_number}); nothing ran, rows so far are in {table.path}") from None
    except OSError:
        return                                   # unreachable or slow: Dask's timeout decides


class _Runner:
    def __init__(self, client, fn, table: SweepTable, timeout_s, lost_after_s: float, bar):
        self.client, self.fn, self.table, self.bar = client, fn, table, bar
        self.timeout_s, self.lost_after_s = timeout_s, lost_after_s
        self.grace_s = max(10.0, 0.1 * timeout_s) if timeout_s else None
        self.running: dict = {}                  # future -> (point, monotonic start)
        self.no_workers_since: float | None = None
        self.parked: list[tuple[dict, float]] = []   # (worker-died row, monotonic time) awaiting a live worker

    def run(self, todo: list[dict]) -> None:
        queue = list(todo)
        while queue or self.running or self.parked:
            threads = self._threads()
            if threads:
                self._release_parked()
            while queue and len(self.running) < max(threads, 1):
                p = queue.pop(0)
                self.running[self.client.submit(run_point, self.fn, p, self.timeout_s, pure=False)] = \
                    (p, time.monotonic())
            for fut in self._wait():
                p, _ = self.running.pop(fut)
                row = self._outcome(fut, p)
                if row is _LOST:
                    self.running[fut] = (p, time.monotonic())   # Dask recomputes it: running again
                elif row is None:
                    queue.insert(0, p)           # lost with its worker or the scheduler: run it again
                elif row is not _PARKED:
                    self._add(row)
            self._enforce_time_limit()

    def _wait(self):
        """The futures that finished within :data:`POLL_S` (none when nothing runs)."""
        from distributed import TimeoutError as DaskTimeoutError
        from distributed import wait
        if not self.running:
            time.sleep(POLL_S)
            return ()
        try:
            return wait(list(self.running), timeout=POLL_S, return_when="FIRST_COMPLETED").done
        except (TimeoutError, DaskTimeoutError):    # the same class from Python 3.11
            return ()

    def _release_parked(self) -> None:
        """Workers are alive a poll after a point's workers died: the point, not the cluster, killed them."""
        now = time.monotonic()
        for item in [i for i in self.parked if now - i[1] >= POLL_S]:
            self.parked.remove(item)
            self._add(item[0])

    def _add(self, row: dict) -> None:
        self.table.add(row)
        if self.bar:
            self.bar.update(1)

    def _outcome(self, fut, point: dict) -> dict | None:
        from distributed import TimeoutError as DaskTimeoutError
        from distributed.scheduler import KilledWorker
        if fut.status in ("lost", "pending"):    # finished, then its worker died with the row unread
            return _LOST
        try:
            return fut.result(timeout=RESULT_WAIT_S)
        except (TimeoutError, DaskTimeoutError):    # the same, before Dask had said so
            return _LOST
        except KilledWorker as exc:
            row = failed_row(point, "error", f"worker died: {' '.join(str(exc).split())}")
            self.parked.append((row, time.monotonic()))
            return _PARKED
        except Exception as exc:
            if self.client.status not in ("running", "connecting"):
                self._lost("lost the connection to the Dask scheduler")
            if type(exc).__name__ in ("CancelledError", "FutureCancelledError"):
                return None
            return failed_row(point, "error", f"{type(exc).__name__}: {' '.join(str(exc).split())}")

    def _threads(self) -> int:
        """Threads of the live workers; stop when there have been none for ``lost_after_s``."""
        try:
            threads = sum(self.client.nthreads(callback_timeout=self.lost_after_s).values())
        except (OSError, TimeoutError) as exc:
            self._lost(f"lost the Dask scheduler ({type(exc).__name__})")
        now = time.monotonic()
        if threads:
            self.no_workers_since = None
        elif self.no_workers_since is None:
            self.no_workers_since = now
        elif now - self.no_workers_since > self.lost_after_s:
            self._lost(f"no Dask worker for {self.lost_after_s:g} s")
        return threads

    def _lost(self, what: str):
        left = self.table.left()
        raise ClusterLost(f"{what}: the sweep stopped with {left} point(s) not run; the finished rows are in "
                          f"{self.table.path} and the next run resumes from them")

    def _enforce_time_limit(self) -> None:
        """A point past its limit plus the grace did not stop by itself: record it, restart its worker."""
        if not self.timeout_s:
            return
        now = time.monotonic()
        late = [f for f, (_, t0) in self.running.items() if now - t0 > self.timeout_s + self.grace_s]
        if not late:
            return
        try:
            processing = self.client.processing()
        except (OSError, TimeoutError):
            processing = {}
        for fut in late:
            p, t0 = self.running.pop(fut)
            holders = [w for w, keys in processing.items() if fut.key in keys]
            fut.cancel()
            if holders:
                try:
                    self.client.restart_workers(holders, raise_for_error=False)
                except Exception:            # a worker without a nanny cannot restart; it stays busy
                    pass
            self._add(failed_row(p, "timeout", f"ran past the time limit of {self.timeout_s:g} s per point "
                                               "and did not stop; its worker was restarted", now - t0))


__all__ = ["ClusterLost", "RESULT_WAIT_S", "RETRIES", "run_on_dask"]
