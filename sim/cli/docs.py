"""``docs/cli.md``, the command-line reference, generated from the argparse parsers themselves
(``python -m sim.cli.docs > docs/cli.md``); a test holds the file to what this prints, so the
reference never drifts from the flags."""
from __future__ import annotations

import os

WIDTH = "100"       # columns argparse wraps help at, fixed so the file is the same on every terminal


def cli_markdown() -> str:
    """Every command's ``--help``, in order, as Markdown."""
    from . import build_parser
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        parts = ["# Command-line reference", "",
                 "Generated from the parsers by `python -m sim.cli.docs > docs/cli.md`; "
                 "`tests/test_cli_docs.py` fails when it is out of date.", "",
                 "## python -m sim", "", "```text", parser.format_help().rstrip(), "```", ""]
        for name, command in sub.choices.items():
            parts += [f"## python -m sim {name}", "", "```text", command.format_help().rstrip(), "```", ""]
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(parts)


if __name__ == "__main__":
    print(cli_markdown(), end="")
