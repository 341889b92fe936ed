"""Every command of the README and docs/*.md (tools/docs_commands.py): each parses, each fast one
runs from a scratch folder with exit status 0 and no traceback, and every line of output the
README quotes after a command is what the command prints today. `make docs-check` runs the slow
ones too."""
import re
from pathlib import Path

import pytest

from tools.docs_commands import ROOT, all_commands, extract, missing_lines, run, scratch

COMMANDS = all_commands()
FAST = [c for c in COMMANDS if not c.placeholder and not c.slow]


def test_the_readme_and_docs_show_commands_and_their_output():
    assert len(COMMANDS) >= 40 and len(FAST) >= 18
    readme = [c for c in extract(ROOT / "README.md") if c.output]
    shown = {c.text.split()[4] for c in readme}
    assert {"deepseek-v3", "--gpus", "examples/qwen3-on-h100.yaml"} <= shown        # the three quoted outputs


def test_every_documented_command_parses():
    from sim.cli import build_parser
    parser = build_parser()
    for c in COMMANDS:
        if c.text.startswith("python -m sim "):
            parser.parse_args(c.argv[3:])            # exits (2) on a flag that does not exist


def test_every_documented_make_target_exists():
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.M))
    for doc in ("README.md", *(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))):
        for name in re.findall(r"`make ([a-z-]+)`", (ROOT / doc).read_text()):
            assert name in targets, (doc, name)


@pytest.fixture(scope="module")
def folder():
    path = scratch()
    yield path
    import shutil
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("command", FAST, ids=[f"{Path(c.file).name}:{c.line}" for c in FAST])
def test_a_documented_command_runs_and_prints_what_the_docs_quote(command, folder):
    rc, out, err, _ = run(command, folder, timeout=300)
    assert rc == 0, f"{command.text}: exit {rc}\n{err[-2000:]}"
    assert "Traceback" not in out + err, f"{command.text}: a traceback\n{err[-2000:]}"
    assert missing_lines(command, out) == [], f"{command.file}:{command.line}: the docs quote lines it no longer prints"


def test_the_results_page_opens_as_the_readme_says(folder):
    """The worked example's page (written by the fast command above, or here) opens with the
    sentence the README quotes."""
    page = folder / "results" / "qwen3" / "index.html"
    if not page.is_file():
        c = next(c for c in FAST if "qwen3-on-h100.yaml --out" in c.text)
        assert run(c, folder)[0] == 0
    readme = (ROOT / "README.md").read_text()
    quoted = re.search(r"`results/qwen3/index.html` opens with: \*(.+?)\*", readme, re.S).group(1)
    opening = re.search(r'class="conclusion">([^<]+)', page.read_text()).group(1)
    assert " ".join(quoted.split()) == " ".join(opening.replace("&#x27;", "'").split())


def test_a_quoted_line_that_moved_is_reported():
    """The comparison itself: a figure not printed any more is named, wrapped lines and '...' pass."""
    from tools.docs_commands import DocCommand
    c = DocCommand("README.md", 1, "python -m sim run x", ("step 1.25 s, wrapped", "over two lines", "...", ""))
    assert missing_lines(c, "a b step 1.25 s, wrapped over two lines\n") == []
    assert missing_lines(c, "step 1.26 s, wrapped over two lines") == ["step 1.25 s, wrapped"]
