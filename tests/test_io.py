"""sim.io: atomic writes leave either the old file or the new one, never a half-written file."""
import json
import os

import pandas as pd
import pytest

from sim.io import MANIFEST, write_csv_atomic, write_json_atomic, write_text_atomic


def test_writes_creating_folders_with_ordinary_permissions(tmp_path):
    path = write_text_atomic("hello\n", tmp_path / "a" / "b" / "x.txt")
    assert path.read_text() == "hello\n"
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask        # not mkstemp's 0600
    write_csv_atomic(pd.DataFrame({"a": [1, 2]}), tmp_path / "t.csv")
    assert pd.read_csv(tmp_path / "t.csv")["a"].tolist() == [1, 2]
    write_json_atomic({"k": [1]}, tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text()) == {"k": [1]}


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = write_text_atomic("old", tmp_path / "x.txt")

    class Boom:
        def __str__(self):
            raise RuntimeError("boom")

    with pytest.raises(TypeError):
        write_text_atomic(Boom(), path)           # fh.write refuses a non-string
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST, "x.txt"]


def test_a_folder_that_takes_no_file_is_named_by_the_file_asked_for(tmp_path, monkeypatch):
    """The error names the path the user gave, not the hidden temporary beside it."""
    import errno

    import sim.io

    def full(**_kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".x.txt.abc.tmp"))
    monkeypatch.setattr(sim.io.tempfile, "mkstemp", full)
    with pytest.raises(OSError) as caught:
        write_text_atomic("new", tmp_path / "x.txt")
    assert caught.value.filename == str(tmp_path / "x.txt")
    assert caught.value.strerror == "cannot write it (No space left on device)"


def test_an_output_whose_folder_cannot_be_made_is_refused_before_the_run(tmp_path):
    from sim.checks import InputError
    from sim.io import check_output
    (tmp_path / "file").write_text("x")
    assert check_output(tmp_path / "new" / "deeper" / "x.csv").parent.is_dir()
    with pytest.raises(InputError, match="cannot write .*/proc/nope/x.csv: its folder cannot be made"):
        check_output("/proc/nope/x.csv")
