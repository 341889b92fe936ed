"""sim.cli: one parser for every command, on top of a library that never imports it."""
import subprocess
import sys


def test_module_entry_point_help():
    res = subprocess.run([sys.executable, "-m", "sim", "simulate", "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "--cost" in res.stdout


def test_every_command_is_registered():
    from sim.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == {"schedule", "simulate", "compare", "collective", "run", "jobs", "plan", "search-schedule",
                                "calibrate"}


def test_the_library_never_imports_the_cli():
    """The CLI is the top floor: no module of sim/ outside sim/cli/, nor topologies/, imports it."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    offenders = []
    for path in list((root / "sim").rglob("*.py")) + list((root / "topologies").rglob("*.py")):
        if "cli" in path.relative_to(root).parts[:2] or path.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            level = getattr(node, "level", 0)
            if any(n == "sim.cli" or n.startswith("sim.cli.") or (level and (n == "cli" or n.startswith("cli.")))
                   for n in names):
                offenders.append(str(path.relative_to(root)))
    assert offenders == []


def test_the_schedule_command_starts_without_the_heavy_libraries():
    """``python -m sim schedule`` needs neither pandas, matplotlib, networkx nor numba: importing
    them cost most of its start-up (docs/performance.md, the 0.5 s target)."""
    code = ("import sys; from sim.cli import main; main(['schedule', 'dualpipe', '--pp', '4', '--microbatches', '8']); "
            "print(sorted(m for m in ('pandas', 'matplotlib', 'networkx', 'numba') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]"
