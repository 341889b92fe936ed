"""Command line: ``python -m sim COMMAND ...`` (``--help`` on each). The top floor of the package:
command modules import the library; nothing in the library imports them.

* :mod:`sim.cli.pipeline`: ``schedule``, ``simulate``, ``compare`` (schedules with fixed costs);
* :mod:`sim.cli.collective`: ``collective`` (one collective on a topology's fabric);
* :mod:`sim.cli.run`: ``run`` (one MoE training step of a scenario);
* :mod:`sim.cli.plan`: ``plan`` (search PP, EP, schedule and micro-batches within HBM).

Bad input never shows a traceback: every error names the field, the value and what is allowed,
and the command exits with status 2.
"""
from __future__ import annotations

import argparse
import sys

from . import collective, pipeline, plan, run

COMMAND_MODULES = (pipeline, collective, run, plan)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        for name, (help_text, add_arguments, handler) in module.COMMANDS.items():
            p = sub.add_parser(name, help=help_text)
            add_arguments(p)
            p.set_defaults(func=handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except (ValueError, KeyError, FileNotFoundError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {msg}", file=sys.stderr)
        return 2
