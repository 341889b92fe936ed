"""sim.io: atomic writes leave either the old file or the new one, never a half-written file."""
import json
import os
import re

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


def test_one_writer_per_file_and_a_dead_writer_blocks_nothing(tmp_path):
    """A second claim on a file that a run is writing is refused with one line naming the holder
    (here in this process, as a second sweep would be); once the first ends, the file is free and
    its lock file gone; a lock file a killed run left behind blocks nothing; another file in the
    same folder is its own claim."""
    from sim.checks import InputError
    from sim.io import sole_writer
    out = tmp_path / "x.csv"
    with sole_writer(out):
        lock = tmp_path / ".x.csv.lock"
        assert lock.read_text() == f"process {os.getpid()} on {__import__('socket').gethostname()}"
        with pytest.raises(InputError, match=rf"^{re.escape(str(out))} is being written by another run "
                                             rf"\(process {os.getpid()} on .*\); wait for it"):
            with sole_writer(out):
                pass
        with sole_writer(tmp_path / "y.csv"):
            pass
    assert not lock.exists()
    lock.write_text("process 1 on a host with a long name")   # left by a run that was killed: no lock held
    with sole_writer(out):
        assert lock.read_text() == f"process {os.getpid()} on {__import__('socket').gethostname()}"
    with sole_writer(out):                               # and again: nothing left over
        pass
    assert not lock.exists()


def test_a_writer_in_another_process_is_named_and_its_end_frees_the_file(tmp_path):
    """The claim holds across processes (a second sweep started in another terminal) and goes
    with the process, however it ends (here: killed)."""
    import subprocess
    import sys
    import time

    from sim.checks import InputError
    from sim.io import sole_writer
    out = tmp_path / "x.csv"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from sim.io import sole_writer\n"
                               f"with sole_writer({str(out)!r}):\n    print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(InputError, match=f"process {holder.pid} on "):
            with sole_writer(out):
                pass
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.05)
    with sole_writer(out):                               # the killed holder's lock went with it
        pass
