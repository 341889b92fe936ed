"""Every command the README and docs/*.md show, extracted and run as a user would copy it.

    python -m tools.docs_commands            # the fast commands (what make test runs too)
    python -m tools.docs_commands --all      # every command (make docs-check; tens of minutes)

A command is a line of a code block that starts with ``python -m`` (continuation backslashes
joined, a trailing ``  # comment`` dropped, ``[...]`` optional arguments left out). Commands that
name a file of the user's own (``my.yaml``, ``my-cluster.yaml``, ...) are placeholders and are not
run; those in :data:`SLOW` run only with ``--all``. Each runs in a scratch folder holding a copy of
``examples/`` and ``experiments/profiles/``, in the order the files show them (a later command may
read what an earlier one wrote), and must exit 0 without a traceback. Where a code block of output
follows a command's block (the README's tables), every line of it but ``...`` must appear in what
the command prints: a figure that moves fails until the docs are updated.
"""
from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/model.md", "docs/network.md", "docs/experiments.md", "docs/performance.md",
        "docs/validation.md", "docs/testing.md", "docs/cli.md")
PLACEHOLDERS = re.compile(r"\bmy[-.]|\bmy-order\.json|\bSTEM\b|TABLE\.csv|\bNAME\b")
# Commands that take more than about 10 s on 2 cores (run by make docs-check, not by make test).
SLOW = (
    "python -m sim search-schedule deepseek-v3",
    "python -m sim search-schedule deepseek-v3 --starts 1f1b,dualpipe --budget 20000 --seed 1 --out results/search",
    "python -m sim run deepseek-v3 --schedule results/search/search-dualpipe.json",
    "python -m sim run deepseek-v3 --communication live",
    "python -m sim run deepseek-v3 --schedule dualpipe --communication live",
    "python -m sim run deepseek-v3 --slow-gpu 5:1.2 --jitter 0.05",
    "python -m sim run deepseek-v3 --schedule dualpipe --slow-gpu 5:1.2",
    "python -m sim run deepseek-v3 --schedule dualpipe --mode full",
    "python -m sim run deepseek-v3 --schedule dualpipe --jitter 0.05 --fault-seed 1",
    "python -m sim run deepseek-v3 --schedule dualpipe --jitter 0.05 --send-grid 0",
    "python -m sim run deepseek-v3 --schedule dualpipe --fail-link node:n1/nic0",
    "python -m sim run deepseek-v3 --degrade-link uplinks:p0/leaf0=0.5 --slow-fraction 0.01 --slow-factor 1.3",
    "python -m sim plan --gpus 1024 --model llama3-70b --topology h100-1024",
    "python -m sim plan --gpus 2048 --model deepseek-v3 --topology h800-2048",
    "python -m experiments.",
    "python -m tools.benchmark",
    "python -m sim jobs examples/jobs/",
    "python -m tools.mutation",
)


class DocCommand(NamedTuple):
    file: str
    line: int
    text: str
    output: tuple = ()      # the output block shown right after the command's block, if any

    @property
    def placeholder(self) -> bool:
        return bool(PLACEHOLDERS.search(self.text))

    @property
    def slow(self) -> bool:
        return any(self.text.startswith(s) for s in SLOW)

    @property
    def argv(self) -> list[str]:
        text = re.sub(r"\s\[[^\]]*\]", "", self.text)          # optional [--flag ...] parts left out
        words = shlex.split(text)
        if ">" in words:
            words = words[:words.index(">")]
        return [sys.executable] + words[1:]


def _blocks(text: str) -> list[tuple[int, str]]:
    """(line number of the opening fence, body) of each fenced code block."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append((i + 1, "\n".join(lines[i + 1:j])))
            i = j + 1
        else:
            i += 1
    return out


def _commands(body: str) -> list[tuple[int, str]]:
    joined = body.replace("\\\n", " ")
    out = []
    for k, line in enumerate(joined.splitlines()):
        text = line.strip().removeprefix("$ ")
        if text.startswith("python -m "):
            out.append((k, re.sub(r"\s+", " ", re.split(r"\s#\s", text)[0]).strip()))
    return out


def extract(path: str | Path) -> list[DocCommand]:
    """The commands of one Markdown file, each with the output block that follows it (if any)."""
    path = Path(path)
    blocks = _blocks(path.read_text(encoding="utf-8"))
    out = []
    for n, (line, body) in enumerate(blocks):
        cmds = _commands(body)
        following = blocks[n + 1][1] if n + 1 < len(blocks) else ""
        shows = len(cmds) == 1 and following.strip() and not _commands(following) and \
            not following.lstrip().startswith(("#", "make "))
        for k, text in cmds:
            output = tuple(following.splitlines()) if shows else ()
            out.append(DocCommand(str(path.relative_to(ROOT)), line + 1 + k, text, output))
    return out


def all_commands() -> list[DocCommand]:
    return [c for doc in DOCS if (ROOT / doc).is_file() for c in extract(ROOT / doc)]


def scratch() -> Path:
    """A folder with what the documented commands read by a path from the repository's root
    (examples, profiles, the topology variants)."""
    folder = Path(tempfile.mkdtemp(prefix="docs-commands-"))
    shutil.copytree(ROOT / "examples", folder / "examples")
    shutil.copytree(ROOT / "experiments" / "profiles", folder / "experiments" / "profiles")
    shutil.copytree(ROOT / "topologies" / "variants", folder / "topologies" / "variants")
    return folder


def missing_lines(command: DocCommand, printed: str) -> list[str]:
    """The lines of the command's output block that its run did not print (``...`` and blank lines
    aside): each, its runs of spaces collapsed, must be part of the printed text with its own
    collapsed (the docs wrap long lines: a wrapped piece is still part of the line)."""
    have = " ".join(printed.split())
    return [line for line in command.output if line.strip() and line.strip() != "..."
            and " ".join(line.split()) not in have]


def run(command: DocCommand, folder: Path, timeout: float = 1800) -> tuple[int, str, str, float]:
    start = time.perf_counter()
    proc = subprocess.run(command.argv, cwd=folder, capture_output=True, text=True, timeout=timeout,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(folder),
                               "MPLBACKEND": "Agg"})
    return proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--all", action="store_true", help="run the slow commands too (make docs-check)")
    args = p.parse_args(argv)
    folder, bad = scratch(), 0
    for c in all_commands():
        if c.placeholder or (c.slow and not args.all):
            continue
        rc, out, err, wall = run(c, folder)
        problems = ([f"exit {rc}"] if rc else []) + (["a traceback"] if "Traceback" in out + err else [])
        problems += [f"not printed: {line.strip()[:100]}" for line in missing_lines(c, out)]
        print(f"{'ok  ' if not problems else 'FAIL'} {wall:6.1f} s  {c.file}:{c.line}  {c.text}")
        for problem in problems:
            print(f"         {problem}")
        bad += bool(problems)
    shutil.rmtree(folder, ignore_errors=True)
    print(f"{bad} command(s) failed" if bad else "every documented command ran")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
