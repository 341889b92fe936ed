"""Command line: ``python -m sim COMMAND ...`` (``--help`` on each). The top floor of the package:
command modules import the library; nothing in the library imports them.

* :mod:`sim.cli.pipeline`: ``schedule``, ``simulate``, ``compare`` (schedules with fixed costs);
* :mod:`sim.cli.collective`: ``collective`` (one collective on a topology's fabric);
* :mod:`sim.cli.run`: ``run`` (one MoE training step of a scenario);
* :mod:`sim.cli.jobs`: ``jobs`` (several jobs on one cluster, alone and together);
* :mod:`sim.cli.plan`: ``plan`` (search PP, EP, schedule and micro-batches within HBM);
* :mod:`sim.cli.search`: ``search-schedule`` (orders better than the named schedules, within HBM);
* :mod:`sim.cli.calibrate`: ``calibrate`` (fit the communication kernels to measured collectives).

Exit status: 0 done; 1 no answer (``plan``: no candidate can run); 2 bad input, one line on
stderr naming the field, the value and what is allowed (a schedule that breaks a rule also shows
its grid); 3 a bug in the simulator: the traceback and a line asking to report it; 130
interrupted (Ctrl-C), one line, files already written are kept.
"""
from __future__ import annotations

import argparse
import contextlib
import sys

from ..checks import InputError, arg
from ..limits import FLAGS, Limits
from . import calibrate, collective, jobs, pipeline, plan, run, search

COMMAND_MODULES = (pipeline, collective, run, jobs, plan, search, calibrate)
DESCRIPTION = ("Simulate pipeline-parallel training steps (MoE first) on a modeled cluster: schedules, layouts, "
               "network.\nStart with `python -m sim run deepseek-v3`, or `python -m sim run --example > my.yaml` "
               "to describe your own run.")
EPILOG = ("exit status: 0 done; 1 no answer (plan: nothing fits); 2 bad input (one line naming the field); "
          "3 a bug in the simulator; 130 interrupted")
EXIT_NO_ANSWER, EXIT_BAD_INPUT, EXIT_BUG, EXIT_INTERRUPTED = 1, 2, 3, 130
REPORT = ("this is a bug in the simulator, not a problem with your input; please report it with the command "
          "line and the traceback above")


class Parser(argparse.ArgumentParser):
    """argparse, with its usage errors on one line."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_limit_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("size limits (docs/testing.md: Input checks, limits and failures)")
    defaults = Limits()
    for field, flag in FLAGS.items():
        what = f"this many {field.removeprefix('max_').replace('_', ' ')} (default {getattr(defaults, field):,})"
        if field == "max_memory_gb":
            what = "this many GB of memory (default: what the machine has available)"
        g.add_argument(flag, dest=field, type=arg(integer=True, low=1), default=None,
                       help=f"refuse runs estimated above {what}")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m sim", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMAND_MODULES:
        for name, (help_text, add_arguments, handler) in module.COMMANDS.items():
            p = sub.add_parser(name, help=help_text)
            add_arguments(p)
            add_limit_arguments(p)
            p.set_defaults(func=handler)
    return parser


def describe(exc: BaseException) -> str:
    """One line for an input or file problem."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc)


def guarded(call) -> int:
    """``call()``'s exit status, with the exit-status rules above: bad input and file problems one
    line (2), Ctrl-C one line (130), anything else a bug (traceback and a request to report, 3)."""
    try:
        return call() or 0
    except BrokenPipeError:                      # output piped into `head` and the like: stop quietly
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("interrupted; files already written are kept", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (InputError, OSError) as exc:
        print(f"error: {describe(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception:
        import traceback
        traceback.print_exc()
        print(f"error: {REPORT}", file=sys.stderr)
        return EXIT_BUG


@contextlib.contextmanager
def input_warnings_shown():
    """Within: each :class:`~sim.checks.InputWarning` printed as ``warning: <message>`` on stderr
    (an :class:`~sim.checks.InputNote` as ``note: <message>``), once per command however often it
    is raised; other warnings as Python shows them."""
    import warnings

    from ..checks import InputNote, InputWarning
    shown, seen = warnings.showwarning, set()

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, InputWarning):
            shown(message, category, filename, lineno, file, line)
        elif str(message) not in seen:
            seen.add(str(message))
            print(f"{'note' if issubclass(category, InputNote) else 'warning'}: {message}", file=sys.stderr)
    with warnings.catch_warnings():          # restores the filters and showwarning after
        warnings.simplefilter("always", InputWarning)      # our own once-per-command, not Python's
        warnings.showwarning = show
        yield


def main(argv: list[str] | None = None) -> int:
    from .. import limits

    def call() -> int:
        args = build_parser().parse_args(argv)
        with limits.raised(**{f: getattr(args, f, None) for f in FLAGS}), input_warnings_shown():
            return args.func(args)
    return guarded(call)
