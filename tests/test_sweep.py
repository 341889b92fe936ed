"""Sweeps: Dask and serial give the same CSV, failures are rows, interrupted sweeps resume."""
import pandas as pd
import pytest

from experiments.bubble_vs_microbatches import point
from sim.sweep import grid, run_sweep

POINTS = grid(pp=(4,), microbatches=(8, 10), schedule=("1f1b", "dualpipe", "chimera"))


def metrics(df):
    return df.drop(columns=["wall_s"]).reset_index(drop=True)


def test_grid_is_the_factorial_product():
    assert len(POINTS) == 6 and POINTS[0] == {"pp": 4, "microbatches": 8, "schedule": "1f1b"}


def test_dask_equals_serial_and_failures_are_rows(tmp_path):
    serial = run_sweep(point, POINTS, tmp_path / "serial.csv", scheduler="serial", progress=False)
    dask = run_sweep(point, POINTS, tmp_path / "dask.csv", workers=2, progress=False)
    pd.testing.assert_frame_equal(metrics(serial), metrics(dask))
    assert list(serial.columns[:3]) == ["pp", "microbatches", "schedule"]
    failed = serial[serial["status"] == "error"]
    assert failed[["microbatches", "schedule"]].values.tolist() == [[10, "chimera"]]   # 10 % 4 != 0
    assert "chimera needs" in failed["error"].iloc[0]
    assert (serial[serial["status"] == "ok"]["bubble_fraction"] > 0).all()


class Interrupt(BaseException):
    pass


def test_interrupted_sweep_resumes_without_losing_or_repeating(tmp_path):
    out = tmp_path / "s.csv"
    calls = []

    def flaky(p):
        calls.append(p)
        if len(calls) == 4:
            raise Interrupt()            # like Ctrl-C in the middle of the sweep
        return point(p)

    with pytest.raises(Interrupt):
        run_sweep(flaky, POINTS, out, scheduler="serial", progress=False)
    assert len(pd.read_csv(out)) == 3                    # the finished rows are on disk
    calls.clear()
    done = run_sweep(flaky, POINTS, out, scheduler="serial", progress=False)
    assert len(calls) == 3                               # only the missing points ran
    assert len(done) == len(POINTS) and not done.duplicated(["pp", "microbatches", "schedule"]).any()
    full = run_sweep(point, POINTS, tmp_path / "ref.csv", scheduler="serial", progress=False)
    pd.testing.assert_frame_equal(metrics(done), metrics(full))


def test_rows_of_other_simulator_code_are_run_again(tmp_path, monkeypatch, capsys):
    import sim.sweep as sweep
    out = tmp_path / "s.csv"
    first = run_sweep(point, POINTS[:2], out, scheduler="serial", progress=False)
    assert (first["sim_code"] == sweep.code_fingerprint()).all()
    calls = []

    def counted(p):
        calls.append(p)
        return point(p)

    run_sweep(counted, POINTS[:2], out, scheduler="serial", progress=False)
    assert calls == []                                    # same code: everything resumed
    monkeypatch.setattr(sweep, "code_fingerprint", lambda: "src-0123456789ab")
    again = run_sweep(counted, POINTS[:2], out, scheduler="serial", progress=False)
    assert len(calls) == 2 and (again["sim_code"] == "src-0123456789ab").all() and len(again) == 2
    assert "2 of 2 rows were computed by other simulator code" in capsys.readouterr().err


def test_a_sweep_answers_with_its_own_points_only(tmp_path):
    """Two plans written to one CSV (the planner's default results/plan.csv): the file keeps both,
    each sweep returns only its own rows (a second plan once answered with the first one's)."""
    out = tmp_path / "plan.csv"
    first = grid(pp=(4,), microbatches=(8,), schedule=("1f1b", "dualpipe"))
    second = grid(pp=(2,), microbatches=(8,), schedule=("1f1b",))
    run_sweep(point, first, out, scheduler="serial", progress=False)
    got = run_sweep(point, second, out, scheduler="serial", progress=False)
    assert got[["pp", "schedule"]].values.tolist() == [[2, "1f1b"]]
    assert len(pd.read_csv(out)) == 3
    again = run_sweep(point, first, out, scheduler="serial", progress=False)
    assert sorted(again["schedule"]) == ["1f1b", "dualpipe"] and set(again["pp"]) == {4}
