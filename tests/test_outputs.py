"""Files and machine-readable output (README: What the outputs mean): a folder or a user's file at an output
path is refused in one line, ``--force`` replaces it, interrupted runs leave nothing behind, sweeps
write only under their ``--out``, and every ``--json`` is strict RFC 8259 JSON."""
import contextlib
import io
import json
import os

import pandas as pd
import pytest

from experiments.bubble_vs_microbatches import point
from experiments.common import sweep_main
from sim.checks import InputError
from sim.cli import main
from sim.io import MANIFEST, check_output, overwriting, write_csv_atomic, write_text_atomic
from sim.sweep import grid, run_sweep

POINTS = grid(pp=(4,), microbatches=(8,), schedule=("1f1b", "zb-h1"))


def cli(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as stop:
            rc = stop.code
    return rc, out.getvalue(), err.getvalue()


def strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as JavaScript's JSON.parse does."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


SIMULATE = ["simulate", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8"]


def test_a_folder_as_output_is_one_line(tmp_path):
    for flag in ("--csv", "--plot", "--trace"):
        rc, _, err = cli(SIMULATE + [flag, str(tmp_path)])
        assert rc == 2 and err.strip().endswith("is a folder; give a file path") and "Traceback" not in err


def test_a_path_under_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    rc, _, err = cli(SIMULATE + ["--csv", str(tmp_path / "f" / "x.csv")])
    assert rc == 2 and "is a file, not a folder" in err


def test_a_users_file_is_kept_unless_forced(tmp_path):
    mine = tmp_path / "t.csv"
    mine.write_text("my,own\n1,2\n")
    rc, _, err = cli(SIMULATE + ["--csv", str(mine)])
    assert rc == 2 and "not a file this simulator wrote" in err and "--force" in err
    assert mine.read_text() == "my,own\n1,2\n"
    assert cli(SIMULATE + ["--csv", str(mine), "--force"])[0] == 0
    assert "rank" in pd.read_csv(mine).columns
    assert cli(SIMULATE + ["--csv", str(mine)])[0] == 0               # ours now: replaced freely
    mine.write_text(mine.read_text() + "edited by hand\n")             # changed since: the user's again
    assert cli(SIMULATE + ["--csv", str(mine)])[0] == 2


def test_stale_temporaries_are_removed_at_the_next_write(tmp_path):
    stale = tmp_path / ".x.csv.abc123.tmp"
    stale.write_text("half a file")
    write_text_atomic("a\n1\n", tmp_path / "x.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST, "x.csv"]


def test_check_output_names_the_problem(tmp_path):
    with pytest.raises(InputError, match="is a folder"):
        check_output(tmp_path)
    (tmp_path / "a.png").write_bytes(b"\x89PNG user plot")
    with pytest.raises(InputError, match="a.png exists"):
        check_output(tmp_path / "a.png")
    with overwriting(True):
        assert check_output(tmp_path / "a.png") == tmp_path / "a.png"


@pytest.mark.parametrize("content", [b"", b"\x00\xff\xfe binary \x00", b"other,columns\n1,2\n"])
def test_a_sweep_refuses_a_file_it_did_not_write_then_force_replaces_it(tmp_path, content):
    out = tmp_path / "s.csv"
    out.write_bytes(content)
    with pytest.raises(InputError, match="not a file this simulator wrote"):
        run_sweep(point, POINTS, out, scheduler="serial", progress=False)
    assert out.read_bytes() == content
    df = run_sweep(point, POINTS, out, scheduler="serial", progress=False, force=True)
    assert len(df) == 2 and (df["status"] == "ok").all()


def test_an_empty_sweep_file_of_ours_resumes_from_nothing(tmp_path):
    out = tmp_path / "s.csv"
    write_text_atomic("", out)
    assert len(run_sweep(point, POINTS, out, scheduler="serial", progress=False)) == 2


def test_a_sweep_writes_only_under_its_out_folder_and_refuses_a_file_as_out(tmp_path, monkeypatch, capsys):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    out = tmp_path / "out"
    assert sweep_main("tiny_sweep", point, lambda: POINTS, "doc", ["--out", str(out), "--serial",
                                                                  "--no-progress"]) == 0
    assert list(cwd.iterdir()) == []
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "tiny_sweep.csv"]
    (tmp_path / "afile").write_text("x")
    assert sweep_main("tiny_sweep", point, lambda: POINTS, "doc", ["--out", str(tmp_path / "afile"),
                                                                  "--serial"]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "Traceback" not in err


def test_sweep_columns_keep_one_type(tmp_path):
    """An error row leaves numbers empty (NaN), never a text in a number column."""
    points = grid(pp=(4,), microbatches=(8, 10), schedule=("chimera",))     # M=10: an error row
    df = run_sweep(point, points, tmp_path / "s.csv", scheduler="serial", progress=False)
    assert df["status"].tolist() == ["ok", "error"]
    for column in ("makespan", "bubble_fraction"):
        assert pd.api.types.is_float_dtype(df[column]) and df[column].isna().tolist() == [False, True]


@pytest.mark.parametrize("argv", [
    ["plan", "--gpus", "16", "--model", "tiny-moe", "--topology", "h800-16", "--global-batch", "32", "--seq-len",
     "256", "--pp", "2,4", "--ep", "4", "--schedules", "1f1b,dualpipe", "--serial", "--json"],
    ["run", "tiny", "--schedule", "1f1b", "--json"],
    ["simulate", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--json"],
    ["compare", "--pp", "4", "--microbatches", "6", "--json"],
    ["schedule", "dualpipe", "--pp", "4", "--microbatches", "8", "--json"],
    ["collective", "p2p", "--topology", "h800-16", "--src", "0", "--dst", "9", "--bytes", "1e6", "--json"],
])
def test_every_json_output_is_strict(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(argv)
    assert rc == 0, err
    strict_json(out)


def test_plan_json_has_null_not_nan(tmp_path, monkeypatch):
    """Refused candidates have no memory figure for some layouts: null in JSON (was a bare NaN);
    with no candidate the answer is still JSON, with exit status 1."""
    monkeypatch.chdir(tmp_path)
    rc, out, _ = cli(["plan", "--gpus", "16", "--model", "tiny-moe", "--topology", "h800-16", "--serial",
                      "--json"])
    answer = strict_json(out)
    assert rc == 1 and answer["recommendation"] is None and answer["candidates"] == []
    assert answer["refused"] and "NaN" not in out and "Infinity" not in out


def test_write_csv_atomic_is_used_with_a_frame(tmp_path):
    path = write_csv_atomic(pd.DataFrame({"x": [1.5]}), tmp_path / "a.csv")
    assert os.path.exists(path) and pd.read_csv(path)["x"].tolist() == [1.5]
