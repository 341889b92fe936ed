"""One validation layer for numbers and choices: every spec, flag, YAML and CSV reader checks its
fields here, so every refusal reads the same way and names the field, the value and what is
allowed.

Why hand-written and not a library such as pydantic: the specs are frozen dataclasses with a few
dozen fields whose rules are ranges and choices; these few functions give the same one-line messages
(field, value, allowed range) without a second model layer over every dataclass, and they refuse
what Python's ``float()`` lets through (NaN, infinity, booleans as numbers).
"""
from __future__ import annotations

import functools
import math
import re
import warnings
from numbers import Integral, Real


class InputError(ValueError):
    """A value a user gave is missing, malformed or out of range; the message says which and why."""


class SpecError(InputError):
    """A spec field is missing, unknown or out of range."""


class InputWarning(UserWarning):
    """A value a user gave is allowed but unlikely to be what they meant (a NIC faster than any on
    the market, a GPU that is not the cluster's); the command line prints ``warning: <message>``."""


class InputNote(InputWarning):
    """What the program made of an input that a user may want to check (the fields a Hugging Face
    config gave and the ones it assumed); the command line prints ``note: <message>``."""


def warn(message: str) -> None:
    """Warn about an input (:class:`InputWarning`): Python shows each distinct message once."""
    warnings.warn(message, InputWarning, stacklevel=2)


def note(message: str) -> None:
    """Say what was made of an input (:class:`InputNote`), once per command on the command line."""
    warnings.warn(message, InputNote, stacklevel=2)


def number(value, field: str, *, integer: bool = False, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False, error: type = InputError) -> float | int:
    """``value`` as a finite number (an ``int`` when ``integer``) within ``[low, high]`` (ends open
    when ``low_open`` / ``high_open``), or an ``error`` (:class:`InputError`) naming ``field``."""
    kind = "an integer" if integer else "a finite number"
    if isinstance(value, bool) or not isinstance(value, Real) or (integer and not isinstance(value, Integral)):
        if integer and isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise error(f"{field} must be {kind}{_range_text(low, high, low_open, high_open)}, got {value!r}")
    if not math.isfinite(value):
        raise error(f"{field} must be {kind}{_range_text(low, high, low_open, high_open)}, got {value!r}")
    if (low is not None and (value < low or (low_open and value == low))) or \
            (high is not None and (value > high or (high_open and value == high))):
        raise error(f"{field} must be {kind}{_range_text(low, high, low_open, high_open)}, got {value!r}")
    return int(value) if integer else value


def choice(value, field: str, allowed, error: type = InputError) -> str:
    """``value`` if it is one of ``allowed``, else an ``error`` listing them."""
    if not isinstance(value, (str, int, float, bool, type(None))) or value not in allowed:
        raise error(f"{field} must be one of {', '.join(map(str, allowed))}, got {value!r}{did_you_mean(value, allowed)}")
    return value


def did_you_mean(value, allowed) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``allowed`` to text ``value``, or ``""``."""
    import difflib
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, [str(a) for a in allowed], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def gpu_ranges(text: str, field: str, n_gpus: int, example: str = "0-7 or 0,8,16") -> list[int]:
    """``0-7``, ``0,8,16`` or ``8-15,0-7`` -> GPU numbers in that order, each range checked to lie
    in ``0..n_gpus - 1`` before it is expanded (and the expansion stopped past ``n_gpus``); a part
    that is not a number or a range, or out of bounds: one line naming ``field``."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise InputError(f"{field}: cannot read {part!r}; use e.g. {example}") from None
        if not 0 <= first <= last < n_gpus:
            raise InputError(f"{field}: {part!r} is not a range of GPUs in 0..{n_gpus - 1}")
        out.extend(range(first, last + 1))
        if len(out) > n_gpus:
            break
    return out


def optional_number(value, field: str, **rules) -> float | int | None:
    """``None``, or :func:`number` of ``value``."""
    return None if value is None else number(value, field, **rules)


def arg(**rules):
    """An argparse ``type`` for a number of :func:`number`'s ``rules`` (the flag's name is in
    argparse's message): ``p.add_argument("--pp", type=arg(integer=True, low=1))``."""
    import argparse

    def parse(text: str):
        try:
            value = float(text) if not rules.get("integer") else int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        try:
            return number(value, "the value", **rules)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc).replace("the value ", "")) from None
    parse.__name__ = "number"
    return parse


# YAML 1.2's floats: PyYAML (YAML 1.1) reads ``1e9`` or ``5e2`` (no dot) as text, which a numeric
# field would then refuse; these are the YAML 1.2 core schema's float forms.
_YAML12_FLOAT = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)


def yaml_load(stream):
    """``yaml.safe_load`` (no tags that run code) that also reads ``1e9`` as a number (YAML 1.2)."""
    import yaml
    return yaml.load(stream, Loader=_yaml_loader())


@functools.lru_cache(maxsize=1)
def _yaml_loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader with YAML 1.2's floats (its resolvers are copied, SafeLoader's stay as they are)."""
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789."))
    return Loader


def read_yaml(path, error: type = InputError):
    """The document of YAML file ``path`` (:func:`yaml_load`), or an ``error`` in one line naming
    the file and, for bad YAML, the line and column."""
    import yaml
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml_load(fh)
    except UnicodeDecodeError:
        raise error(f"{path}: not a text file (it is not UTF-8)") from None
    except OSError as exc:
        raise error(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{path}: not valid YAML{where}: {' '.join(str(problem).split())}") from None


def _show(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e18 else f"{x:g}"


def _range_text(low, high, low_open, high_open) -> str:
    if low is None and high is None:
        return ""
    if high is None:
        return f" {'>' if low_open else '>='} {_show(low)}"
    if low is None:
        return f" {'<' if high_open else '<='} {_show(high)}"
    return f" in {'(' if low_open else '['}{_show(low)}, {_show(high)}{')' if high_open else ']'}"


__all__ = ["InputError", "SpecError", "InputNote", "InputWarning", "arg", "choice", "did_you_mean", "gpu_ranges", "note", "number", "optional_number", "read_yaml", "warn",
           "yaml_load"]
