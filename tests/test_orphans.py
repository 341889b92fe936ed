"""Worker processes end with their parent (sim.orphans): a parent killed with SIGKILL leaves no
worker of its measurement pool, nor of its local Dask cluster, behind."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from sim.orphans import POLL_S, watch_parent

POOL = """
    from sim.training.comm.alltoall import _pool
    pool = _pool(2).__enter__()
    [f.result() for f in [pool.submit(abs, -1) for _ in range(4)]]     # both workers started
"""
DASK = """
    from sim.sweep_dask import local_cluster
    cluster = local_cluster(2)
"""


def spawn_parent(start: str) -> subprocess.Popen:
    """A Python process that starts workers as ``start`` does, says READY and waits to be killed."""
    code = textwrap.dedent(start) + "\nprint('READY', flush=True)\nimport time\ntime.sleep(600)\n"
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gone(pids: list[int], within_s: float) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("start", [POOL, DASK], ids=["measurement-pool", "local-dask-cluster"])
def test_a_parent_killed_with_sigkill_leaves_no_worker_behind(start):
    parent = spawn_parent(start)
    try:
        assert parent.stdout.readline().strip() == "READY"
        workers = [c.pid for c in psutil.Process(parent.pid).children(recursive=True)]
        assert len(workers) >= 2                       # the workers are there while the parent lives
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert gone(workers, within_s=10 * POLL_S + 5)
    finally:
        if parent.poll() is None:
            parent.kill()


def test_watch_parent_keeps_a_process_whose_parent_lives():
    """The watch does not end a process whose parent is alive (it would end this test)."""
    thread = watch_parent(poll_s=0.01)
    time.sleep(0.05)
    assert thread.is_alive()
