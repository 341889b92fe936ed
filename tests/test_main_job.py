"""experiments.main: the validation process's kernels-ready line, read early and printed with the rest."""
import subprocess
import sys

from experiments import main as main_job
from experiments import validate
from experiments.common import compile_kernels

CHILD = ("import time; print('a'); print('{ready} (0.1 s)', flush=True); time.sleep(0.2); print('b'); "
         "raise SystemExit(3)")


def test_the_ready_line_is_waited_for_and_nothing_is_lost(capsys):
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(ready=validate.READY)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    first = main_job.wait_for_kernels(proc)
    assert first == ["a\n", f"{validate.READY} (0.1 s)\n"]
    assert proc.poll() is None                  # still running: waited for that line only
    assert main_job.finish_validation(proc, first) == 3
    assert capsys.readouterr().out == f"a\n{validate.READY} (0.1 s)\nb\n"


def test_a_process_that_ends_before_it_is_ready_gives_all_its_lines():
    proc = subprocess.Popen([sys.executable, "-c", "print('error: bad input'); raise SystemExit(2)"],
                            stdout=subprocess.PIPE, text=True)
    assert main_job.wait_for_kernels(proc) == ["error: bad input\n"]
    assert main_job.finish_validation(proc, []) == 2


def test_the_kernels_compile_in_the_process_that_asks():
    assert compile_kernels() > 0


def test_validate_announces_ready_before_its_sweep(tmp_path, capsys):
    assert validate.main(["--out", str(tmp_path), "--workers", "1", "--no-progress", "--no-figure",
                          "--announce-ready", "--only", "deepep-ll-dispatch-ep8"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(validate.READY + " (")
    assert sum(line.startswith(validate.READY) for line in out) == 1


def test_a_serial_validation_announces_too_and_only_when_asked(tmp_path, capsys):
    args = ["--out", str(tmp_path), "--serial", "--no-progress", "--no-figure", "--only", "deepep-ll-dispatch-ep8"]
    assert validate.main([*args, "--announce-ready"]) == 0
    assert capsys.readouterr().out.startswith(validate.READY + " (")
    assert validate.main([*args, "--force"]) == 0
    assert validate.READY not in capsys.readouterr().out
