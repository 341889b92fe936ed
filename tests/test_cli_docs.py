"""docs/cli.md is what the parsers print today (regenerate: python -m sim.cli.docs > docs/cli.md)."""
from pathlib import Path

from sim.cli.docs import cli_markdown

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def test_the_cli_reference_is_current():
    assert DOC.read_text(encoding="utf-8") == cli_markdown(), \
        "docs/cli.md is out of date: run python -m sim.cli.docs > docs/cli.md"


def test_every_command_is_in_the_reference():
    from sim.cli import COMMAND_MODULES
    text = DOC.read_text(encoding="utf-8")
    for module in COMMAND_MODULES:
        for name in module.COMMANDS:
            assert f"## python -m sim {name}\n" in text
