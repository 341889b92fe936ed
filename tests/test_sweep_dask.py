"""sim.sweep_dask: sweeps survive worker failures on a real cluster (``dask scheduler`` and two
``dask worker`` processes): no row lost or duplicated, the final CSV equal to an uninterrupted
run's (wall times aside); a lost cluster stops the sweep within the grace period, keeping rows."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
from sweep_points import spin, square

from sim.sweep import SweepTable, grid, run_sweep
from sim.sweep_dask import ClusterLost, _Runner

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DASK = str(Path(sys.executable).with_name("dask"))


def rows(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=["wall_s"]).reset_index(drop=True)


class Cluster:
    """A scheduler and worker processes (each a nanny and its worker), one thread per worker."""

    def __init__(self, tmp: Path):
        self.tmp, self.workers = tmp, []
        self.env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{ROOT}",
                    "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
        file = tmp / "scheduler.json"
        self.scheduler = self._start([DASK, "scheduler", "--port", "0", "--no-dashboard", "--scheduler-file", str(file)])
        for _ in range(300):
            if file.exists() and file.stat().st_size:
                break
            time.sleep(0.1)
        self.address = json.loads(file.read_text())["address"]

    def _start(self, cmd):
        return subprocess.Popen(cmd, cwd=self.tmp, env=self.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)

    def add_workers(self, n: int) -> None:
        from distributed import Client
        for _ in range(n):
            self.workers.append(self._start([DASK, "worker", self.address, "--nthreads", "1", "--no-dashboard",
                                             "--local-directory", str(self.tmp)]))
        with Client(self.address, timeout=30) as client:
            client.wait_for_workers(len([w for w in self.workers if w.poll() is None]), timeout=60)

    def kill_worker_process(self, i: int) -> None:
        """SIGKILL the worker under nanny ``i`` (the nanny starts a new one)."""
        for child in psutil.Process(self.workers[i].pid).children(recursive=True):
            child.kill()

    def kill_all_workers(self) -> None:
        for w in self.workers:
            os.killpg(w.pid, signal.SIGKILL)
            w.wait()

    def close(self) -> None:
        for p in [*self.workers, self.scheduler]:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.close()


def later(seconds: float, action) -> threading.Timer:
    t = threading.Timer(seconds, action)
    t.start()
    return t


POINTS = grid(x=range(16), sleep=(0.3,))


def test_a_worker_killed_mid_sweep_loses_no_row(cluster, tmp_path):
    cluster.add_workers(2)
    reference = run_sweep(square, POINTS, tmp_path / "ref.csv", scheduler="serial", progress=False)
    timer = later(1.0, lambda: cluster.kill_worker_process(0))
    df = run_sweep(square, POINTS, tmp_path / "s.csv", scheduler=cluster.address, progress=False)
    timer.join()
    assert (df["status"] == "ok").all() and len(df) == 16
    pd.testing.assert_frame_equal(rows(df), rows(reference))


def test_a_point_that_kills_its_worker_is_retried_once_then_a_row(cluster, tmp_path):
    cluster.add_workers(2)
    points = grid(x=range(8), sleep=(0.1,), die_at=(5,))
    df = run_sweep(square, points, tmp_path / "s.csv", scheduler=cluster.address, progress=False)
    dead = df[df["x"] == 5].iloc[0]
    assert dead["status"] == "error" and dead["error"].startswith("worker died: ")
    ok = df[df["x"] != 5]
    assert (ok["status"] == "ok").all() and ok["y"].tolist() == [x * x for x in range(8) if x != 5]
    reference = run_sweep(square, [p for p in points if p["x"] != 5], tmp_path / "ref.csv", scheduler="serial",
                          progress=False)
    pd.testing.assert_frame_equal(rows(ok), rows(reference), check_dtype=False)   # y: float beside the NaN row


def when_rows(path: Path, rows: int, action, timeout_s: float = 60.0) -> threading.Thread:
    """Run ``action`` once the CSV at ``path`` holds ``rows`` rows (or after ``timeout_s``): a kill
    that waits for progress, not for a fixed time, so a slow or busy machine cannot make it come
    before the first point has finished."""
    def wait():
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            try:
                if len(path.read_text().splitlines()) > rows:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        action()
    t = threading.Thread(target=wait)
    t.start()
    return t


def test_all_workers_lost_stops_within_the_grace_and_resumes(cluster, tmp_path):
    cluster.add_workers(2)
    out = tmp_path / "s.csv"
    timer = when_rows(out, 2, cluster.kill_all_workers)
    t0 = time.monotonic()
    with pytest.raises(ClusterLost, match=r"no Dask worker for 3 s: the sweep stopped with \d+ point\(s\) not run"):
        run_sweep(square, POINTS, out, scheduler=cluster.address, progress=False, lost_after_s=3)
    timer.join()
    assert time.monotonic() - t0 < 30
    kept = pd.read_csv(out)
    assert 0 < len(kept) < 16 and not kept.duplicated("x").any() and (kept["status"] == "ok").all()
    cluster.workers.clear()
    cluster.add_workers(2)
    df = run_sweep(square, POINTS, out, scheduler=cluster.address, progress=False)
    reference = run_sweep(square, POINTS, tmp_path / "ref.csv", scheduler="serial", progress=False)
    pd.testing.assert_frame_equal(rows(df), rows(reference))


def test_a_finished_point_whose_worker_died_before_its_row_was_read_does_not_hang(cluster, tmp_path):
    """The race that hung CI: a point finished, then every worker died before the sweep read its
    row. Reading it waits for a recomputation no worker is left to run; the read is bounded, the
    point counts as running again, and the sweep stops as a lost cluster."""
    from distributed import Client, wait

    import sim.sweep_dask as sd
    from sim.sweep_rows import run_point
    cluster.add_workers(1)
    point = {"x": 3}
    with Client(cluster.address, timeout=30) as client:
        fut = client.submit(run_point, square, point, None, pure=False)
        wait([fut], timeout=30)
        cluster.kill_all_workers()
        runner = _Runner(client, square, SweepTable(tmp_path / "s.csv", [point], []), None, 3.0, None)
        t0 = time.monotonic()
        assert runner._outcome(fut, point) is sd._LOST
        assert time.monotonic() - t0 < sd.RESULT_WAIT_S + 5
        runner.running[fut] = (point, time.monotonic())
        with pytest.raises(ClusterLost, match=r"no Dask worker for 3 s: the sweep stopped with 1 point\(s\) not run"):
            runner.run([])


def test_time_limit_cooperative_and_stuck_points(cluster, tmp_path):
    cluster.add_workers(2)
    points = grid(x=range(6), sleep=(0.05,), spin_at=(1,), stuck_at=(4,))
    t0 = time.monotonic()
    df = run_sweep(spin, points, tmp_path / "s.csv", scheduler=cluster.address, progress=False, point_timeout_s=1)
    assert time.monotonic() - t0 < 40
    status = dict(zip(df["x"], df["status"]))
    assert status == {0: "ok", 1: "timeout", 2: "ok", 3: "ok", 4: "timeout", 5: "ok"}
    assert "did not stop; its worker was restarted" in df[df["x"] == 4]["error"].iloc[0]
    assert "ran past the time limit of 1 s" in df[df["x"] == 1]["error"].iloc[0]


def test_a_scheduler_port_that_refuses_fails_at_once_not_after_the_timeout(tmp_path):
    """Nothing listens on port 9 here: the connection is refused, and the sweep says so at once
    instead of letting Dask's client retry for its whole 30 s."""
    t0 = time.monotonic()
    with pytest.raises(ClusterLost, match="the Dask scheduler at tcp://127.0.0.1:9 refused the connection "
                                          r"\(nothing listens on port 9\); nothing ran"):
        run_sweep(square, POINTS, tmp_path / "s.csv", scheduler="tcp://127.0.0.1:9", progress=False, lost_after_s=30)
    assert time.monotonic() - t0 < 5


def test_a_scheduler_address_without_a_port_is_one_line(tmp_path):
    """distributed raises a ValueError deep in its address parsing; the sweep says which flag."""
    with pytest.raises(ClusterLost, match="--scheduler 'garbage' is not a Dask scheduler address "
                                          "\\(missing port number.*give tcp://HOST:PORT"):
        run_sweep(square, POINTS, tmp_path / "s.csv", scheduler="garbage", progress=False, lost_after_s=2)


def test_serial_time_limit_is_a_row(tmp_path):
    points = grid(x=range(3), spin_at=(1,))
    df = run_sweep(spin, points, tmp_path / "s.csv", scheduler="serial", progress=False, point_timeout_s=0.2)
    assert df["status"].tolist() == ["ok", "timeout", "ok"]


class ScriptedClient:
    """A stand-in Dask client: every submitted point's future raises ``KilledWorker`` (its workers
    died), and the live-worker count follows ``threads(t)`` of the seconds since the start."""

    status = "running"

    def __init__(self, threads):
        self.threads, self.t0 = threads, time.monotonic()

    def nthreads(self, callback_timeout=None):
        return {"w": 1} if self.threads(time.monotonic() - self.t0) else {}

    def submit(self, run, fn, point, timeout_s, pure):
        return KilledFuture(point)


class KilledFuture:
    status = "error"

    def __init__(self, point):
        self.point = point

    def result(self, timeout=None):
        from types import SimpleNamespace

        from distributed.scheduler import KilledWorker
        raise KilledWorker(task=f"point-{self.point['x']}", last_worker=SimpleNamespace(address="tcp://w"),
                           allowed_failures=1)


class ScriptedRunner(_Runner):
    def _wait(self):
        return list(self.running)


def scripted_run(tmp_path, threads, lost_after_s=1.0):
    points = grid(x=range(2))
    table = SweepTable(tmp_path / "s.csv", points, [])
    ScriptedRunner(ScriptedClient(threads), None, table, None, lost_after_s, None).run(points)
    return table


def test_a_point_whose_workers_died_is_a_row_once_workers_are_back(tmp_path):
    """Workers gone when the points fail, back 0.3 s later (their nannies restarted them): the points
    killed them, so each gets its ``worker died`` row."""
    table = scripted_run(tmp_path, lambda t: t > 0.3)
    rows_ = list(table.rows.values())
    assert len(rows_) == 2 and all(r["status"] == "error" and r["error"].startswith("worker died: ") for r in rows_)


def test_a_killed_worker_with_no_worker_left_is_the_clusters_loss_not_the_points(tmp_path):
    """Every worker gone for good: the sweep stops as lost and writes no ``worker died`` row."""
    with pytest.raises(ClusterLost, match=r"no Dask worker for 1 s: the sweep stopped with 2 point\(s\) not run"):
        scripted_run(tmp_path, lambda t: False)


class LostResultClient(ScriptedClient):
    """A stand-in Dask client whose points finish, but each point's row is lost with its worker
    before it is read (``result`` times out) ``losses`` times; after that it arrives."""

    def __init__(self, threads, losses):
        super().__init__(threads)
        self.losses, self.submitted = losses, []

    def submit(self, run, fn, point, timeout_s, pure):
        self.submitted.append(point)
        return LostResultFuture(self, run(fn, point, timeout_s))


class LostResultFuture:
    status = "finished"                               # Dask has not yet said the row is lost

    def __init__(self, client, row):
        self.client, self.row, self.reads = client, row, 0

    def result(self, timeout=None):
        from distributed import TimeoutError as DaskTimeoutError
        assert timeout is not None                    # a wait without a bound is what hung CI
        self.reads += 1
        if self.reads <= self.client.losses:
            raise DaskTimeoutError
        return self.row


def test_a_row_lost_with_its_worker_is_waited_for_once_more_not_run_twice(tmp_path):
    """A point finished and its worker died before its row was read: Dask recomputes it, the sweep
    waits for it again (bounded), and each point is submitted once and has one row."""
    points = grid(x=range(3))
    table = SweepTable(tmp_path / "s.csv", points, [])
    client = LostResultClient(lambda t: True, losses=2)
    ScriptedRunner(client, square, table, None, 5.0, None).run(points)
    assert [p["x"] for p in client.submitted] == [0, 1, 2]
    assert sorted((r["x"], r["y"], r["status"]) for r in table.rows.values()) == [(0, 0, "ok"), (1, 1, "ok"),
                                                                                   (2, 4, "ok")]


def test_a_row_lost_with_the_last_worker_stops_the_sweep_as_lost_not_hung(tmp_path):
    """Rows lost with workers that never come back: the sweep does not wait for them for ever; it
    stops as a lost cluster within ``lost_after_s`` and leaves the points for the resume."""
    points = grid(x=range(2))
    table = SweepTable(tmp_path / "s.csv", points, [])
    t0 = time.monotonic()
    with pytest.raises(ClusterLost, match=r"no Dask worker for 1 s: the sweep stopped with 2 point\(s\) not run"):
        ScriptedRunner(LostResultClient(lambda t: False, losses=10**9), square, table, None, 1.0, None).run(points)
    assert time.monotonic() - t0 < 10 and not table.rows


class RecordingClient:
    """A stand-in Dask client of ``threads`` one-thread workers that runs each submitted point at
    once and records it; ``in_flight`` counts points submitted and not yet collected (their
    future's ``result()`` read), ``most`` its largest value at any submission."""

    status = "running"

    def __init__(self, threads):
        self.threads, self.submitted, self.in_flight, self.most = threads, [], 0, 0

    def nthreads(self, callback_timeout=None):
        return {f"w{i}": 1 for i in range(self.threads)}

    def submit(self, run, fn, point, timeout_s, pure):
        self.submitted.append(point)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        return DoneFuture(self, run(fn, point, timeout_s))


class DoneFuture:
    status = "finished"

    def __init__(self, client, row):
        self.client, self.row = client, row

    def result(self, timeout=None):
        self.client.in_flight -= 1
        return self.row


class OneAtATime(_Runner):
    """Each poll hands back only the oldest running point: the window stays full."""

    def _wait(self):
        return list(self.running)[:1]


def stop_at(p: dict) -> dict:
    if int(p["x"]) == int(p.get("stop_at", -1)):
        raise KeyboardInterrupt
    return square(p)


def test_the_submit_window_and_the_resume_are_exact(tmp_path, monkeypatch):
    """With 3 workers no more than 3 points are ever in flight. A sweep stopped (Ctrl-C) as its 8th
    point starts, with points 5 and 6 still in flight, keeps the 5 rows it collected; the rerun
    submits only the 15 points without a row, each once, and ends with every point's row."""
    import sim.sweep_dask as sd
    clients = []

    def fake_run_on_dask(fn, todo, table, scheduler, workers, timeout_s, lost_after_s, bar=None):
        clients.append(RecordingClient(3))
        OneAtATime(clients[-1], fn, table, timeout_s, lost_after_s, bar).run(todo)
    monkeypatch.setattr(sd, "run_on_dask", fake_run_on_dask)
    points = grid(x=range(20), stop_at=(7,))
    with pytest.raises(KeyboardInterrupt):
        run_sweep(stop_at, points, tmp_path / "s.csv", progress=False)
    first = clients[-1]
    assert first.most == 3 and [p["x"] for p in first.submitted] == list(range(8))
    assert pd.read_csv(tmp_path / "s.csv")["x"].tolist() == list(range(5))
    df = run_sweep(square, points, tmp_path / "s.csv", progress=False)       # nothing stops it now
    second = clients[-1]
    assert second.most == 3 and [p["x"] for p in second.submitted] == list(range(5, 20))
    assert df["x"].tolist() == list(range(20)) and (df["status"] == "ok").all()
    assert df["y"].tolist() == [x * x for x in range(20)]
