"""Sweeps: Dask and serial give the same CSV, failures are rows, interrupted sweeps resume."""
import pandas as pd
import pytest

from experiments.bubble_vs_microbatches import point
from sim.sweep import SweepTable, grid, run_sweep

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
    import sim.sweep_rows as sweep_rows
    for module in (sweep, sweep_rows):              # the sweep's check and each row's stamp
        monkeypatch.setattr(module, "code_fingerprint", lambda: "src-0123456789ab")
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


def test_serial_failures_are_rows_with_the_error_s_last_line(tmp_path):
    """The same grid as the Dask comparison, in this process only: chimera at M = 10 fails (10 is
    not a multiple of P = 4) and is a row saying why; the columns are the point's, then the
    metrics, then status, error, wall time and the code's fingerprint."""
    import sim.sweep as sweep
    df = run_sweep(point, POINTS, tmp_path / "s.csv", scheduler="serial", progress=False)
    failed = df[df["status"] == "error"]
    assert failed[["microbatches", "schedule"]].values.tolist() == [[10, "chimera"]]
    assert failed["error"].iloc[0] == ("sim.schedules.registry.ScheduleConfigError: chimera needs M divisible by D = P "
                                       "(whole basic units of D micro-batches) and M >= 2P, got M=10, P=4")
    ok = df[df["status"] == "ok"]
    assert len(ok) == 5 and (ok["error"].fillna("") == "").all() and (ok["bubble_fraction"] > 0).all()
    assert list(df.columns[:3]) == ["pp", "microbatches", "schedule"]
    assert list(df.columns[-4:]) == ["status", "error", "wall_s", "sim_code"]
    assert (df["wall_s"] >= 0).all() and (df["sim_code"] == sweep.code_fingerprint()).all()


def test_run_point_rows():
    """A point's row: its values, the metrics, ok and no error; the function gets a copy of the
    point; an exception is an error row with the exception's last line; a run past the time limit
    (checked by the engine as it goes) a timeout row naming the limit."""
    import time

    from sim.limits import check_deadline
    from sim.sweep import code_fingerprint, failed_row, run_point

    def meddling(p):
        p["x"] = 99
        return {"y": 2 * p["x"]}

    row = run_point(meddling, {"x": 1})
    assert {k: row[k] for k in ("x", "y", "status", "error")} == {"x": 1, "y": 198, "status": "ok", "error": ""}
    assert row["wall_s"] >= 0 and row["sim_code"] == code_fingerprint()

    def broken(p):
        raise ValueError("no such thing")

    row = run_point(broken, {"x": 1})
    assert (row["status"], row["error"], row["x"]) == ("error", "ValueError: no such thing", 1)
    assert "y" not in row and row["sim_code"] == code_fingerprint()

    def slow(p):
        time.sleep(0.05)
        check_deadline()
        return {"y": 1}

    row = run_point(slow, {"x": 1}, timeout_s=0.01)
    assert (row["status"], row["error"]) == ("timeout", "ran past the time limit of 0.01 s per point")
    assert 0.05 <= row["wall_s"] < 10
    assert run_point(slow, {"x": 1}, timeout_s=None)["status"] == "ok"
    assert failed_row({"x": 1}, "error", "worker died: boom") == {
        "x": 1, "status": "error", "error": "worker died: boom", "wall_s": 0.0, "sim_code": code_fingerprint()}


def test_point_keys_survive_a_csv_round_trip():
    from sim.sweep import point_key
    assert point_key({"b": 2, "a": "x"}) == '{"a": "x", "b": "2"}' == point_key({"a": "x", "b": "2"})


def test_bad_sweep_arguments_and_unreadable_results(tmp_path):
    """Workers and the time limit are checked with a message; a results file that is empty, or
    lacks the point's columns, resumes nothing (every point runs)."""
    from sim.checks import InputError
    with pytest.raises(InputError, match="workers"):
        run_sweep(point, POINTS, tmp_path / "a.csv", scheduler="serial", workers=0, progress=False)
    with pytest.raises(InputError, match="point time limit"):
        run_sweep(point, POINTS, tmp_path / "a.csv", scheduler="serial", point_timeout_s=0, progress=False)
    out = tmp_path / "b.csv"
    run_sweep(point, POINTS[:1], out, scheduler="serial", progress=False)
    pd.read_csv(out).drop(columns=["schedule"]).to_csv(out, index=False)    # a column of the points gone
    calls = []
    df = run_sweep(lambda p: calls.append(p) or point(p), POINTS[:1], out, scheduler="serial", progress=False,
                   force=True)
    assert len(calls) == 1 and len(df) == 1 and len(pd.read_csv(out)) == 1    # the stray row is not kept
    out.write_text("")
    calls.clear()
    run_sweep(lambda p: calls.append(p) or point(p), POINTS[:1], out, scheduler="serial", progress=False, force=True)
    assert len(calls) == 1
    assert run_sweep(point, [], tmp_path / "c.csv", scheduler="serial", progress=False).empty


def slow_point(p):
    """Sleeps past a 0.05 s limit when ``p["slow"]``, then lets the deadline check notice."""
    import time

    from sim.limits import check_deadline
    if p["slow"]:
        time.sleep(0.1)
        check_deadline()
    return {"y": 1}


def test_serial_sweeps_keep_the_time_limit_show_progress_and_refuse_a_user_s_file(tmp_path, capsys):
    """In this process too a point past the time limit is a timeout row; the progress bar counts
    the resumed points and carries its label (default "sweep"); a CSV that is not one of ours is
    refused unless forced; a fractional limit under a second is allowed."""
    from sim.checks import InputError
    points = grid(slow=(False, True))
    out = tmp_path / "t.csv"
    df = run_sweep(slow_point, points, out, scheduler="serial", progress=False, point_timeout_s=0.05)
    assert df["status"].tolist() == ["ok", "timeout"]
    assert run_sweep(slow_point, points[:1], tmp_path / "u.csv", scheduler="serial", progress=False,
                     point_timeout_s=0.5)["status"].tolist() == ["ok"]
    assert capsys.readouterr().err == ""                               # progress=False: no bar
    run_sweep(slow_point, grid(slow=(False, 0)), tmp_path / "v.csv", scheduler="serial", desc="my grid")
    err = capsys.readouterr().err
    assert "my grid" in err and "2/2" in err and "point/s]" in err
    run_sweep(slow_point, points[:1], out, scheduler="serial")          # resumed: nothing left to run
    err = capsys.readouterr().err
    assert "sweep: 100%" in err and "1/1" in err
    # The timed-out point runs again on the next run (here with time enough); the ok one does not.
    calls = []
    df = run_sweep(lambda p: calls.append(p) or slow_point(p), points, out, scheduler="serial", progress=False,
                   point_timeout_s=5.0)
    assert df["status"].tolist() == ["ok", "ok"] and calls == [points[1]]
    assert "1 row(s) ran past their time limit or lost their worker; running them again" in capsys.readouterr().err
    user = tmp_path / "mine.csv"
    user.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="mine.csv"):
        run_sweep(slow_point, points[:1], user, scheduler="serial", progress=False)
    assert user.read_text() == "a,b\n1,2\n"


def test_workers_must_be_a_whole_number_from_1_to_10000(tmp_path):
    from sim.checks import InputError
    for bad in (1.5, 10_001):
        with pytest.raises(InputError, match=r"^workers must be"):
            run_sweep(slow_point, [], tmp_path / "w.csv", scheduler="serial", workers=bad, progress=False)
    for good in (1, 10_000):
        run_sweep(slow_point, grid(slow=(False,)), tmp_path / "w.csv", scheduler="serial", workers=good,
                  progress=False)
    with pytest.raises(InputError, match=r"^point time limit \(s\) must be"):
        run_sweep(slow_point, [], tmp_path / "w.csv", scheduler="serial", point_timeout_s=-1, progress=False)


def test_resumed_points_keep_their_text_and_the_file_keeps_point_order(tmp_path):
    """Point values that pandas would reread as something else ("007", "NA", 1.0) are resumed
    (not run again) and returned; a point added in the middle of a grid is written in its place;
    when the first point fails, its row still puts the metrics before the status columns."""
    from sim.sweep import rows_of
    calls = []

    def echo(p):
        calls.append(p)
        if p["x"] == "bad":
            raise ValueError("bad point")
        return {"y": 1}

    for k, points in enumerate((grid(x=("007", "010")), grid(x=("NA", "b")), grid(x=(1.0, 2.5)))):
        out = tmp_path / f"s{k}.csv"
        run_sweep(echo, points, out, scheduler="serial", progress=False)
        calls.clear()
        again = run_sweep(echo, points, out, scheduler="serial", progress=False)
        assert calls == [] and len(again) == 2 and len(rows_of(out, points)) == 2
    assert rows_of(tmp_path / "none.csv", points).empty
    middle = grid(x=("a", "b", "c"))
    run_sweep(echo, [middle[0], middle[2]], tmp_path / "m.csv", scheduler="serial", progress=False)
    df = run_sweep(echo, middle, tmp_path / "m.csv", scheduler="serial", progress=False)
    assert df["x"].tolist() == ["a", "b", "c"] and pd.read_csv(tmp_path / "m.csv")["x"].tolist() == ["a", "b", "c"]
    df = run_sweep(echo, grid(x=("bad", "good")), tmp_path / "f.csv", scheduler="serial", progress=False)
    assert df.columns.tolist() == ["x", "y", "status", "error", "wall_s", "sim_code"]
    assert df["wall_s"].max() < 60


def test_rows_of_other_code_are_counted_in_the_message(tmp_path, monkeypatch, capsys):
    """Two rows on file, one by other code: "1 of 2 rows"; none: no message."""
    out = tmp_path / "s.csv"
    run_sweep(point, POINTS[:2], out, scheduler="serial", progress=False)
    run_sweep(point, POINTS[:2], out, scheduler="serial", progress=False)
    assert "other simulator code" not in capsys.readouterr().err
    df = pd.read_csv(out, dtype=str, keep_default_na=False)
    df.loc[0, "sim_code"] = "src-0123456789ab"
    df.to_csv(out, index=False)
    run_sweep(point, POINTS[:2], out, scheduler="serial", progress=False, force=True)   # edited: no longer ours
    assert "1 of 2 rows were computed by other simulator code" in capsys.readouterr().err


def test_a_point_whose_row_ran_out_has_no_answer_yet(tmp_path):
    """A timeout row and a lost worker's row leave their point to do (and counted as left, what the
    Dask runner reports when the cluster is lost); ok and error rows are answers; a row of a point
    outside the sweep counts for nothing."""
    points = grid(x=range(5))
    rows = [{"x": 0, "status": "ok", "error": ""}, {"x": 1, "status": "error", "error": "ValueError: no"},
            {"x": 2, "status": "timeout", "error": "ran past the time limit of 1 s per point"},
            {"x": 3, "status": "error", "error": "worker died: KilledWorker"},
            {"x": 9, "status": "timeout", "error": ""}]
    table = SweepTable(tmp_path / "t.csv", points, rows)
    assert [p in table for p in points] == [True, True, False, False, False]
    assert table.left() == 3


def test_a_second_sweep_on_a_csv_being_written_is_refused_in_one_line(tmp_path, capsys):
    """Two sweeps given one CSV would each rewrite it with their own rows (the last writer wins)
    and remove each other's temporaries: the second is refused, and the first's file is intact;
    a time limit under a millisecond is refused too (every point would time out)."""
    from experiments.common import sweep_main
    from sim.io import sole_writer
    out = tmp_path / "bubble.csv"
    run_sweep(point, POINTS[:1], out, scheduler="serial", progress=False)
    before = out.read_text()
    with sole_writer(out):                               # a sweep running on it
        status = sweep_main("bubble", point, lambda: POINTS, "doc", ["--out", str(tmp_path), "--serial",
                                                                     "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "bubble.csv is being written by another run" in err
    assert out.read_text() == before
    with pytest.raises(SystemExit) as stop:
        sweep_main("bubble", point, lambda: POINTS, "doc", ["--out", str(tmp_path), "--serial", "--no-progress",
                                                             "--point-timeout", "5e-324"])
    assert stop.value.code == 2
    assert "--point-timeout: must be a finite number >= 0.001, got 5e-324" in capsys.readouterr().err
