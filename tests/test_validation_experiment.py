"""experiments/validate.py: the suite end to end on a few runs, the error table and the schedule
rankings worked on a small frame, bad data refused before anything is written."""
import pandas as pd
import pytest

from experiments import validate


def test_a_few_runs_end_to_end(tmp_path, capsys):
    from sim.training.trust import ERRORS
    shipped = ERRORS.read_bytes()
    assert validate.main(["--out", str(tmp_path), "--serial", "--no-progress",
                          "--only", "zb-t4-6.2b-m24", "mt-t1-3.6b", "deepep-ll-dispatch-ep16"]) == 0
    df = pd.read_csv(tmp_path / "validation.csv")
    assert len(df) == 6 and (df["status"] == "ok").all()
    zb_runs = df[df["id"].str.startswith("zb-")]
    assert zb_runs["predicted_first_principles"].gt(0).all() and zb_runs["predicted_profile_fed"].gt(0).all()
    tp_row = df[df["id"] == "mt-t1-3.6b"].iloc[0]                      # TP 2: scored, first principles only
    assert tp_row["role"] == "scored" and tp_row["predicted_first_principles"] > 0
    assert pd.isna(tp_row["predicted_profile_fed"])
    summary = pd.read_csv(tmp_path / "validation_summary.csv")
    assert set(summary["mode"]) == {"first_principles", "profile_fed"}
    zb = summary[(summary["source"] == "zero-bubble") & (summary["mode"] == "first_principles")]
    assert zb["rows"].item() == 4
    ranking = pd.read_csv(tmp_path / "validation_rankings.csv")
    assert ranking["measured_order"].item() == "ZB-2p > 1F1B-I > ZB-1p > 1F1B"    # Table 4, 6.2B, m = 24
    assert (tmp_path / "figures" / "validation.png").stat().st_size > 20_000
    out = capsys.readouterr().out
    assert "speed error = predicted speed / measured speed - 1" in out and "runs: 6 scored" in out
    assert ERRORS.read_bytes() == shipped          # a part of the suite leaves the trust bands' data alone


def test_the_suite_on_the_gemm_tables(tmp_path):
    """--gemm-model tables: every training-step run reads its GEMMs off the tables (the column says so),
    a run whose GEMMs Vidur's A100 table measured near moves, a kernel row does not; the trust bands'
    data is left alone."""
    from sim.training.trust import ERRORS
    shipped = ERRORS.read_bytes()
    only = ["--serial", "--no-progress", "--no-figure", "--only", "zb-t4-28.3b-m96-1f1b", "deepep-ll-dispatch-ep16"]
    assert validate.main(["--out", str(tmp_path / "fit"), *only]) == 0
    assert validate.main(["--out", str(tmp_path / "tables"), "--gemm-model", "tables", *only]) == 0
    fit, tables = (pd.read_csv(tmp_path / d / "validation.csv").set_index("id") for d in ("fit", "tables"))
    assert set(tables["_gemm_model"]) == {"tables"} and set(fit["_gemm_model"]) == {"fit"}
    row = "zb-t4-28.3b-m96-1f1b"
    assert tables.loc[row, "step_time_s_first_principles"] != fit.loc[row, "step_time_s_first_principles"]
    kernel = "deepep-ll-dispatch-ep16"
    assert tables.loc[kernel, "predicted_first_principles"] == fit.loc[kernel, "predicted_first_principles"]
    assert ERRORS.read_bytes() == shipped


def frame():
    rows = []
    for sched, measured, predicted in (("1F1B", 10.0, 11.0), ("ZB-1p", 12.0, 11.5), ("ZB-2p", 13.0, 14.0)):
        rows.append({"id": sched, "source": "s", "role": "scored", "model": "m", "gpu": "g", "gpus": 8,
                     "seq_len": 1, "global_batch": 8, "microbatch_size": 1, "pp": 8, "dp": 1, "ep": 1,
                     "precision": "bf16", "where": "Table 4, x", "schedule": sched, "metric": "samples_per_s_per_gpu",
                     "measured": measured, "predicted_first_principles": predicted,
                     "error_first_principles_pct": 100 * (predicted / measured - 1)})
    return pd.DataFrame(rows)


def test_summary_by_hand():
    row = validate.summary(frame()).iloc[0]
    assert (row["rows"], row["median_abs_error_pct"], row["worst_abs_error_pct"], row["worst_row"]) == \
        (3, pytest.approx(100 / 13), pytest.approx(10.0), "1F1B")           # errors +10%, -4.2%, +7.7%
    assert row["within_10pct"] == 3 and row["median_error_pct"] == pytest.approx(100 / 13)


def test_the_worst_row_is_the_largest_error_either_way():
    """A pessimistic row (-30%) beside optimistic ones (+10%, +7.7%) is the worst: by |error|, with
    its sign kept in the median."""
    df = frame()
    df.loc[1, "predicted_first_principles"] = 8.4                     # ZB-1p: 8.4 / 12 - 1 = -30%
    df.loc[1, "error_first_principles_pct"] = 100 * (8.4 / 12.0 - 1)
    row = validate.summary(df).iloc[0]
    assert row["worst_row"] == "ZB-1p" and row["worst_abs_error_pct"] == pytest.approx(30.0)
    assert row["median_error_pct"] == pytest.approx(100 / 13) and row["within_10pct"] == 2


def test_rankings_by_hand():
    r = validate.rankings(frame()).iloc[0]
    assert r["measured_order"] == "ZB-2p > ZB-1p > 1F1B"
    assert r["first_principles_order"] == "ZB-2p > ZB-1p > 1F1B" and r["first_principles_same_order"]
    assert r["first_principles_speedups"] == ("ZB-1p: 1.200 measured, 1.045 simulated; "
                                              "ZB-2p: 1.300 measured, 1.273 simulated")


def test_bad_data_writes_nothing(tmp_path, capsys):
    runs = tmp_path / "runs.csv"
    runs.write_text(open(validate.RUNS).read().replace("zb-a100-roce,1,1,8,,1,1", "zb-a100-roce,1,1,4,,1,1", 1))
    assert validate.main(["--runs", str(runs), "--out", str(tmp_path / "out"), "--serial"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the layout does not multiply to the GPU count" in err
    assert not (tmp_path / "out").exists()
    assert validate.main(["--out", str(tmp_path / "out"), "--only", "no-such-run"]) == 2
    assert "no run's id contains it" in capsys.readouterr().err


def test_points_round_trip_through_the_csv():
    from validation.suite import load_runs
    for run in load_runs()[:5] + load_runs()[-3:]:
        assert validate.from_point({k: ("" if v == "" else str(v)) for k, v in validate.as_point(run).items()}) == run


def test_a_setting_without_a_mode_is_not_counted_in_that_mode():
    """Two settings, one of them with no profile-fed prediction (torchtitan's: no profile published):
    first-principles ranks 2 settings, profile-fed 1, not 1 of 2."""
    rankings_df = pd.DataFrame({"first_principles_same_order": [True, False],
                                "profile_fed_same_order": [True, None]})
    summary_df = pd.DataFrame({"source": ["s"], "rows": [1]})
    out = validate.text(summary_df, rankings_df, pd.DataFrame({"role": ["scored"]}), pairs_df=pd.DataFrame())
    assert "schedule rankings, first_principles: the same order as measured in 1 of 2 settings" in out
    assert "schedule rankings, profile_fed: the same order as measured in 1 of 1 settings" in out
