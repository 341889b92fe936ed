"""tools/mutation.py without running mutmut: the seeded sample and the score table, on
meta files written by hand (mutmut's format: exit codes by mutant, None before a run)."""
import json

import pytest

from tools.mutation import EQUIVALENT, sample, scores
from sim.checks import InputError


def _meta(root, module, codes):
    path = root / (module.replace(".", "/") + ".py.meta")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"exit_code_by_key": codes}))


def test_a_sample_is_seeded_and_leaves_out_what_is_checked(tmp_path):
    names = [f"pkg.mod.x_f__mutmut_{i}" for i in range(1, 41)]
    _meta(tmp_path, "pkg.mod", {name: None for name in names})
    first = sample(["pkg.mod"], 10, seed=3, root=tmp_path)
    assert len(first) == 10 and set(first) <= set(names) and first == sorted(first)
    assert sample(["pkg.mod"], 10, seed=3, root=tmp_path) == first
    assert sample(["pkg.mod"], 10, seed=4, root=tmp_path) != first
    _meta(tmp_path, "pkg.mod", {name: (1 if name in first[:4] else None) for name in names})
    assert sample(["pkg.mod"], 10, seed=3, root=tmp_path) == first[4:]      # an interrupted run resumes
    assert len(sample(["pkg.mod"], 100, seed=3, root=tmp_path)) == 36        # all the unchecked ones


def test_a_package_is_sampled_module_by_module(tmp_path):
    _meta(tmp_path, "pkg.a", {f"pkg.a.x_f__mutmut_{i}": None for i in range(1, 6)})
    _meta(tmp_path, "pkg.b", {f"pkg.b.x_g__mutmut_{i}": None for i in range(1, 6)})
    chosen = sample(["pkg"], 2, seed=0, root=tmp_path)
    assert len(chosen) == 4 and sum(n.startswith("pkg.a.") for n in chosen) == 2


def test_bad_samples_are_named(tmp_path):
    with pytest.raises(InputError, match=r"--sample must be >= 1, got 0"):
        sample(["pkg.mod"], 0, seed=0, root=tmp_path)
    with pytest.raises(InputError, match=r"no mutants listed for pkg\.none"):
        sample(["pkg.none"], 5, seed=0, root=tmp_path)


def test_scores_count_killed_survived_and_equivalent(tmp_path):
    """mutmut's exit codes: 1 killed, 0 survived, 33 no tests, 36 timeout (killed), None not run."""
    pytest.importorskip("mutmut")                   # `make mutation` installs it; `make test` does not
    equivalent = next(name for name in EQUIVALENT if name.startswith("sim.sweep."))
    _meta(tmp_path, "sim.sweep", {"sim.sweep.x_a__mutmut_1": 1, "sim.sweep.x_a__mutmut_2": 0,
                                  "sim.sweep.x_a__mutmut_3": 33, "sim.sweep.x_a__mutmut_4": 36,
                                  "sim.sweep.x_a__mutmut_5": None, equivalent: 0})
    row = scores(tmp_path).iloc[0]
    assert (row["module"], row["mutants"], row["checked"], row["killed"], row["survived"], row["equivalent"]) == \
        ("sim.sweep", 6, 5, 2, 2, 1)
    assert row["score"] == 0.5
    assert row["survivors"] == "sim.sweep.x_a__mutmut_2 sim.sweep.x_a__mutmut_3"


def test_recheck_runs_only_the_named_survivors_alone_and_records_them(tmp_path, monkeypatch):
    """Survivors of the module asked for are run again (their function's tests, the mutant named in
    the environment) and their exit codes written back; equivalent ones, killed ones and other
    modules' are left alone."""
    pytest.importorskip("mutmut")
    import subprocess

    import tools.mutation as mutation
    equivalent = next(name for name in EQUIVALENT if name.startswith("sim.sweep.x_run_point"))
    _meta(tmp_path, "sim.sweep", {"sim.sweep.x_run_point__mutmut_1": 0, "sim.sweep.x_run_point__mutmut_2": 1,
                                  equivalent: 0})
    _meta(tmp_path, "sim.engine", {"sim.engine.x_inputs_of__mutmut_1": 0})
    (tmp_path / "mutmut-stats.json").write_text(json.dumps({"tests_by_mangled_function_name": {
        "sim.sweep.x_run_point": ["tests/test_sweep.py::test_a"], "sim.engine.x_inputs_of": ["tests/test_engine.py::b"]}}))
    calls = []

    def fake_run(cmd, cwd, env, capture_output, timeout):
        calls.append((env["MUTANT_UNDER_TEST"], cmd[-1], cwd))
        return subprocess.CompletedProcess(cmd, 1)
    monkeypatch.setattr(mutation.subprocess, "run", fake_run)
    done = mutation.recheck(tmp_path, status="survived", modules=["sim.sweep"])
    assert calls == [("sim.sweep.x_run_point__mutmut_1", "tests/test_sweep.py::test_a", tmp_path)]
    assert done == {"sim.sweep.x_run_point__mutmut_1": 1}
    codes = json.loads((tmp_path / "sim" / "sweep.py.meta").read_text())["exit_code_by_key"]
    assert codes == {"sim.sweep.x_run_point__mutmut_1": 1, "sim.sweep.x_run_point__mutmut_2": 1, equivalent: 0}
    assert json.loads((tmp_path / "sim" / "engine.py.meta").read_text())["exit_code_by_key"] == \
        {"sim.engine.x_inputs_of__mutmut_1": 0}
    calls.clear()                                       # a function's survivors, or one mutant, by name
    assert mutation.recheck(tmp_path, status="survived", modules=["sim.engine.x_inputs"]) == {}   # not a prefix
    assert mutation.recheck(tmp_path, status="survived", modules=["sim.engine.x_inputs_of"]) == \
        {"sim.engine.x_inputs_of__mutmut_1": 1}


def test_recheck_runs_new_test_files_the_map_does_not_list(tmp_path, monkeypatch):
    """``--tests``: a test file written since mutmut's map (copied into the mutants' tests) runs on
    every rechecked mutant after the map's own tests (a 'suspicious' one too: the table counts it
    a survivor); a file that is not there is one line."""
    pytest.importorskip("mutmut")
    import subprocess

    import tools.mutation as mutation
    _meta(tmp_path, "sim.engine", {"sim.engine.x_inputs_of__mutmut_1": 4})   # 4: 'suspicious', counted a survivor
    (tmp_path / "mutmut-stats.json").write_text(json.dumps({"tests_by_mangled_function_name": {
        "sim.engine.x_inputs_of": ["tests/test_engine.py::b"]}}))
    (tmp_path / "tests").mkdir()
    new = tmp_path / "test_new.py"
    new.write_text("def test_x():\n    assert True\n")
    calls = []

    def fake_run(cmd, cwd, env, capture_output, timeout):
        calls.append(cmd[-2:])
        return subprocess.CompletedProcess(cmd, 1)
    monkeypatch.setattr(mutation.subprocess, "run", fake_run)
    done = mutation.recheck(tmp_path, status="survived", extra_tests=[str(new)])
    assert done == {"sim.engine.x_inputs_of__mutmut_1": 1}
    assert calls == [["tests/test_engine.py::b", "tests/test_new.py"]]
    assert (tmp_path / "tests" / "test_new.py").read_text() == new.read_text()
    with pytest.raises(InputError, match=r"^--tests: .*none.py is not a file$"):
        mutation.recheck(tmp_path, status="survived", extra_tests=[str(tmp_path / "none.py")])


def test_a_sample_against_named_test_files_runs_each_unchecked_mutant_alone_on_them_only(tmp_path, monkeypatch):
    """``--sample N --tests FILE``: each sampled, unchecked mutant runs alone on the named files (not
    mutmut's map, which may reach sweeps a mutant hangs), its exit code recorded; checked,
    equivalent and unsampled mutants are left alone; a timeout stays unchecked."""
    pytest.importorskip("mutmut")
    import subprocess

    import tools.mutation as mutation
    equivalent = next(name for name in EQUIVALENT if name.startswith("sim.sweep.x_run_point"))
    _meta(tmp_path, "sim.sweep", {"sim.sweep.x_run_point__mutmut_1": None, "sim.sweep.x_run_point__mutmut_2": None,
                                  "sim.sweep.x_run_point__mutmut_3": 0, "sim.sweep.x_run_point__mutmut_4": None,
                                  equivalent: None})
    (tmp_path / "tests").mkdir()
    mine = tmp_path / "test_mine.py"
    mine.write_text("def test_x():\n    assert True\n")
    calls = []

    def fake_run(cmd, cwd, env, capture_output, timeout):
        name = env["MUTANT_UNDER_TEST"]
        calls.append((name, cmd[-1]))
        if name.endswith("_2"):
            raise subprocess.TimeoutExpired(cmd, timeout)
        return subprocess.CompletedProcess(cmd, 1)
    monkeypatch.setattr(mutation.subprocess, "run", fake_run)
    names = ["sim.sweep.x_run_point__mutmut_1", "sim.sweep.x_run_point__mutmut_2", "sim.sweep.x_run_point__mutmut_3",
             equivalent]
    done = mutation.run_alone(names, [str(mine)], tmp_path)
    assert done == {"sim.sweep.x_run_point__mutmut_1": 1}
    assert calls == [("sim.sweep.x_run_point__mutmut_1", "tests/test_mine.py"),
                     ("sim.sweep.x_run_point__mutmut_2", "tests/test_mine.py")]
    codes = json.loads((tmp_path / "sim" / "sweep.py.meta").read_text())["exit_code_by_key"]
    assert codes == {"sim.sweep.x_run_point__mutmut_1": 1, "sim.sweep.x_run_point__mutmut_2": None,
                     "sim.sweep.x_run_point__mutmut_3": 0, "sim.sweep.x_run_point__mutmut_4": None, equivalent: None}
    assert (tmp_path / "tests" / "test_mine.py").is_file()


def test_no_results_make_an_empty_table_and_a_clear_line(tmp_path, monkeypatch, capsys):
    """No mutmut results anywhere (a fresh checkout): an empty table with its columns, and
    ``--report`` says to run first instead of a traceback."""
    pytest.importorskip("mutmut")
    import argparse

    import tools.mutation as mutation
    df = scores([tmp_path / "none"])
    assert df.empty and list(df.columns)[:2] == ["module", "mutants"]
    monkeypatch.setattr(mutation, "_roots", lambda: (tmp_path / "none",))
    parser = argparse.ArgumentParser()
    mutation.add_arguments(parser)
    assert mutation.run(parser.parse_args(["--report", "--out", str(tmp_path / "out")])) == 1
    assert "no mutmut results" in capsys.readouterr().err


def test_scores_read_every_tree(tmp_path):
    """The core modules' results and the kernels' (their own tree) make one table, by module."""
    pytest.importorskip("mutmut")
    _meta(tmp_path / "a", "sim.sweep", {"sim.sweep.x_a__mutmut_1": 1})
    _meta(tmp_path / "b", "sim.network.fairshare.filling", {"sim.network.fairshare.filling.x_f__mutmut_1": 0})
    df = scores([tmp_path / "b", tmp_path / "a", tmp_path / "none"])
    assert list(df["module"]) == ["sim.network.fairshare.filling", "sim.sweep"] and list(df["score"]) == [0.0, 1.0]


def test_the_kernels_tree_mutates_only_the_kernels_and_rewrites_only_what_changed(tmp_path, monkeypatch):
    """A copy of sim/, tests/, topologies/ and experiments/ whose pyproject keeps everything but
    mutmut's section, which names the compiled kernels and their tests."""
    import tomllib

    from tools.mutation import KERNELS, kernel_tree
    monkeypatch.chdir(tmp_path)
    for name in ("sim/network/fairshare/filling.py", "tests/test_fairshare_filling.py", "topologies/presets/a.yaml",
                 "experiments/x.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    (tmp_path / "sim/__pycache__").mkdir()
    (tmp_path / "sim/__pycache__/x.pyc").write_text("stale")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.mutmut]\nonly_mutate = ["sim/a.py"]\n\n'
                                             '[tool.ruff]\nline-length = 120\n')
    tree = kernel_tree(tmp_path / "k")
    config = tomllib.loads((tree / "pyproject.toml").read_text())
    assert config["project"] == {"name": "x"} and config["tool"]["ruff"] == {"line-length": 120}
    assert [f.removesuffix(".py").replace("/", ".") for f in config["tool"]["mutmut"]["only_mutate"]] == list(KERNELS)
    assert config["tool"]["mutmut"]["pytest_add_cli_args_test_selection"] == \
        ["tests/test_fairshare_filling.py", "tests/test_fairshare_scan.py", "tests/test_fairshare_step.py",
         "tests/test_fairshare_refill.py", "tests/test_fairshare_tallies.py", "tests/test_fairshare_records.py",
         "tests/test_traffic.py", "tests/test_fabric.py", "tests/test_flowloop.py", "tests/test_links.py",
         "tests/test_jitcache.py"]
    assert (tree / "topologies/presets/a.yaml").read_text() == "topologies/presets/a.yaml"
    assert not (tree / "sim/__pycache__").exists()
    copied = tree / "sim/network/fairshare/filling.py"
    before = copied.stat().st_mtime_ns
    (tmp_path / "experiments/x.py").write_text("changed")
    kernel_tree(tmp_path / "k")
    assert copied.stat().st_mtime_ns == before and (tree / "experiments/x.py").read_text() == "changed"


def test_the_core_tree_leaves_out_every_module_of_the_kernels_tree():
    """pyproject's mutmut section (the core tree) must not wrap a compiled kernel: numba cannot
    compile mutmut's wrappers, so every kernel module is in its do_not_mutate, and none is
    mutated twice."""
    from fnmatch import fnmatch
    from pathlib import Path

    import tomllib

    from tools.mutation import KERNELS
    root = Path(__file__).parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mutmut"]
    kernel_files = {m.replace(".", "/") + ".py" for m in KERNELS}
    assert all((root / f).is_file() for f in kernel_files)
    assert all(any(fnmatch(f, pattern) for pattern in config["do_not_mutate"]) for f in kernel_files)


def test_the_core_modules_are_what_the_core_tree_mutates():
    """``CORE`` (the default modules of a run) and pyproject's ``only_mutate`` name the same files:
    a module in one only would be run with no mutant (its old score reported) or never run."""
    from pathlib import Path

    import tomllib

    from tools.mutation import CORE
    config = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["tool"]["mutmut"]
    named = {m.replace(".", "/") + (".py" if Path(m.replace(".", "/") + ".py").is_file() else "/*") for m in CORE}
    assert named == set(config["only_mutate"])


def test_kernels_forward_every_option_to_their_tree_and_recheck_nothing_here(tmp_path, monkeypatch):
    """``--kernels --sample 5 --recheck-survivors``: one run in the kernels' tree with numba off and
    the options passed on; back here only the table is written (no recheck of this tree's mutants)."""
    import argparse

    import tools.mutation as mutation
    calls, rechecks = [], []
    monkeypatch.setattr(mutation, "kernel_tree", lambda: tmp_path)
    monkeypatch.setattr(mutation.subprocess, "call", lambda cmd, cwd, env: calls.append((cmd, cwd, env)) or 0)
    monkeypatch.setattr(mutation, "recheck", lambda *a, **k: rechecks.append((a, k)))
    monkeypatch.setattr(mutation, "scores", lambda roots=None: mutation.pd.DataFrame(
        [{"module": "m", "mutants": 1, "checked": 1, "killed": 1, "survived": 0, "equivalent": 0, "score": 1.0,
          "survivors": ""}]))
    parser = argparse.ArgumentParser()
    mutation.add_arguments(parser)
    args = parser.parse_args(["--kernels", "--sample", "5", "--recheck-survivors", "--out", str(tmp_path / "out")])
    assert mutation.run(args) == 0
    (cmd, cwd, env), = calls
    assert cwd == tmp_path and env["NUMBA_DISABLE_JIT"] == "1"
    assert cmd[3:3 + len(mutation.KERNELS)] == list(mutation.KERNELS)
    assert "--recheck-survivors" in cmd and cmd[cmd.index("--sample") + 1] == "5"
    assert rechecks == [] and (tmp_path / "out" / "mutation.csv").is_file()


def test_a_sample_is_drawn_from_mutants_of_todays_sources(tmp_path, monkeypatch):
    """A source newer than mutmut's copy of it makes its module stale; a sampled run then has mutmut
    mutate it again (a run stopped at a name that matches nothing) before drawing the sample."""
    import os

    import tools.mutation as mutation
    monkeypatch.chdir(tmp_path)
    for folder in (tmp_path / "pkg", tmp_path / "mutants" / "pkg"):
        folder.mkdir(parents=True)
        (folder / "a.py").write_text("x = 1\n")
        (folder / "b.py").write_text("y = 2\n")
    os.utime(tmp_path / "mutants" / "pkg" / "a.py", (1e9, 1e9))        # mutmut's copy of a.py is old
    assert mutation.stale_modules(["pkg.a", "pkg.b", "pkg"]) == ["pkg.a", "pkg"]
    assert mutation.stale_modules(["pkg.b", "pkg.none"]) == []
    (tmp_path / "fresh").mkdir()
    (tmp_path / "fresh" / "c.py").write_text("z = 3\n")                # never mutated: no copy at all
    assert mutation.stale_modules(["fresh.c", "fresh"]) == ["fresh.c", "fresh"]
    calls = []
    monkeypatch.setattr(mutation.subprocess, "call", lambda cmd, **kw: calls.append(cmd) or 0)
    parser = _parser_with_an_empty_sample(mutation, monkeypatch)
    assert mutation.run(parser.parse_args(["--sample", "3", "--out", str(tmp_path / "out"), "pkg.a"])) == 0
    assert calls == [[mutation.sys.executable, "-m", "mutmut", "run", "refresh-only.no-such-mutant"]]
    calls.clear()
    assert mutation.run(parser.parse_args(["--sample", "3", "--out", str(tmp_path / "out"), "pkg.b"])) == 0
    assert calls == []                                                  # nothing changed: no refresh


@pytest.mark.parametrize("argv, needle", [
    (["--sample", "0"], "argument --sample: must be an integer >= 1, got 0"),
    (["--children", "0"], "argument --children: must be an integer in [1, 256], got 0"),
    (["nosuch.module"], "unknown module 'nosuch.module': no nosuch/module.py or package nosuch/module/ here"),
    (["--kernels", "sim.network.nosuch"], "unknown module 'sim.network.nosuch'"),
    (["--tests", "tests/test_engine.py", "sim.engine"], "--tests: give it with --sample N"),
])
def test_bad_arguments_are_refused_before_mutmut_runs(argv, needle, tmp_path, monkeypatch, capsys):
    """A run takes minutes to hours: a bad module, sample or worker count is one line (status 2)
    before mutmut starts (it ran for minutes, then mutated nothing or raised, until 2026-12-01)."""
    import subprocess

    from tools import mutation
    monkeypatch.setattr(subprocess, "call", lambda *a, **k: pytest.fail("mutmut was started"))
    try:
        status = mutation.main(argv + ["--out", str(tmp_path)])
    except SystemExit as stop:                      # argparse's refusal
        status = stop.code
    err = capsys.readouterr().err
    assert status == 2 and needle in err and err.count("\n") == 1


def test_copies_of_removed_files_leave_mutmuts_tree(tmp_path, monkeypatch):
    """sim/old.py and tests/test_old.py were removed (renamed) here: their copies and the old
    module's mutant records go; what the checkout still has stays, records included."""
    from tools.mutation import drop_removed
    monkeypatch.chdir(tmp_path)
    for name in ("sim/new.py", "tests/test_new.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    root = tmp_path / "mutants"
    for name in ("sim/new.py", "sim/new.py.meta", "sim/old.py", "sim/old.py.meta", "sim/old.py.spans",
                 "tests/test_new.py", "tests/test_old.py", "sim/__pycache__/old.cpython-311.pyc"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    assert drop_removed(root) == ["sim/old.py", "sim/old.py.meta", "sim/old.py.spans", "tests/test_old.py"]
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert left == ["sim/__pycache__/old.cpython-311.pyc", "sim/new.py", "sim/new.py.meta", "tests/test_new.py"]


def test_a_test_map_older_than_a_renamed_function_is_stale(tmp_path, monkeypatch):
    """mutmut's map names sim.a's function f; sim/a.py now has g (renamed after the map was built):
    stale. Once the map is newer than the source, a function missing from it (no test reaches it) is
    not a reason to rebuild; nor is a module not asked about."""
    import os
    monkeypatch.chdir(tmp_path)
    from tools.mutation import stale_test_map
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim/a.py").write_text("")
    root = tmp_path / "mutants"
    (root / "sim").mkdir(parents=True)
    (root / "sim/a.py.meta").write_text(json.dumps({"exit_code_by_key": {"sim.a.x_g__mutmut_1": None}}))
    stats = root / "mutmut-stats.json"
    stats.write_text(json.dumps({"tests_by_mangled_function_name": {"sim.a.x_f": ["tests/test_a.py::t"]}}))
    os.utime(stats, ns=(1_000_000_000, 1_000_000_000))
    os.utime(tmp_path / "sim/a.py", ns=(2_000_000_000, 2_000_000_000))
    assert stale_test_map(["sim.a"], root) and stale_test_map([], root)
    assert not stale_test_map(["sim.b"], root)
    os.utime(stats, ns=(3_000_000_000, 3_000_000_000))
    assert not stale_test_map(["sim.a"], root)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_a.py").write_text("")               # a test changed since the map, and the source
    os.utime(tmp_path / "tests/test_a.py", ns=(2_000_000_000, 2_000_000_000))
    assert not stale_test_map(["sim.a"], root)                  # both older than the map
    os.utime(tmp_path / "sim/a.py", ns=(4_000_000_000, 4_000_000_000))
    (root / "sim/a.py.meta").write_text(json.dumps({"exit_code_by_key": {"sim.a.x_f__mutmut_1": None}}))
    assert not stale_test_map(["sim.a"], root)                  # the source changed, no test did
    os.utime(tmp_path / "tests/test_a.py", ns=(5_000_000_000, 5_000_000_000))
    assert stale_test_map(["sim.a"], root)                      # a test changed too: it may reach f now
    stats.unlink()
    assert not stale_test_map(["sim.a"], root)                  # no map yet: mutmut builds one anyway


def test_a_run_clears_removed_copies_and_a_stale_test_map_first(tmp_path, monkeypatch):
    """Before mutmut starts: the copy of a removed module goes, and a map of tests by function that
    predates sim/a.py's renamed function is removed (mutmut builds it anew)."""
    import os

    import tools.mutation as mutation
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim/a.py").write_text("def g(): pass\n")
    root = tmp_path / "mutants"
    (root / "sim").mkdir(parents=True)
    (root / "sim/a.py").write_text("def g(): pass\n")
    (root / "sim/gone.py").write_text("")
    (root / "sim/a.py.meta").write_text(json.dumps({"exit_code_by_key": {"sim.a.x_g__mutmut_1": None}}))
    stats = root / "mutmut-stats.json"
    stats.write_text(json.dumps({"tests_by_mangled_function_name": {"sim.a.x_f": []}}))
    os.utime(stats, ns=(1_000_000_000, 1_000_000_000))
    monkeypatch.setattr(mutation.subprocess, "call", lambda cmd, **kw: 0)
    parser = _parser_with_an_empty_sample(mutation, monkeypatch)
    assert mutation.run(parser.parse_args(["--sample", "3", "--out", str(tmp_path / "out"), "sim.a"])) == 0
    assert not (root / "sim/gone.py").exists() and (root / "sim/a.py").exists() and not stats.exists()


def _parser_with_an_empty_sample(mutation, monkeypatch):
    """tools.mutation's argument parser, with sampling finding nothing to run and a one-row table
    (what a run does before and after mutmut, without mutmut)."""
    import argparse
    monkeypatch.setattr(mutation, "sample", lambda modules, n, seed: [])
    monkeypatch.setattr(mutation, "scores", lambda roots=None: mutation.pd.DataFrame(
        [{"module": "m", "mutants": 1, "checked": 1, "killed": 1, "survived": 0, "equivalent": 0, "score": 1.0,
          "survivors": ""}]))
    parser = argparse.ArgumentParser()
    mutation.add_arguments(parser)
    return parser


def test_a_sample_with_test_files_goes_to_run_alone_not_mutmut(tmp_path, monkeypatch):
    import tools.mutation as mutation
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim/a.py").write_text("def g(): pass\n")
    calls, alone = [], []
    monkeypatch.setattr(mutation.subprocess, "call", lambda cmd, **kw: calls.append(cmd) or 0)
    parser = _parser_with_an_empty_sample(mutation, monkeypatch)
    monkeypatch.setattr(mutation, "sample", lambda modules, n, seed: ["sim.a.x_g__mutmut_1"])
    monkeypatch.setattr(mutation, "run_alone", lambda names, tests: alone.append((names, list(tests))) or {})
    assert mutation.run(parser.parse_args(["--sample", "3", "--tests", "tests/test_a.py", "--out",
                                           str(tmp_path / "out"), "sim.a"])) == 0
    assert alone == [(["sim.a.x_g__mutmut_1"], ["tests/test_a.py"])]
    assert not any("run" in cmd and "--max-children" in cmd for cmd in calls)      # mutmut's own run not started
