"""The docs name only modules and files that exist: every ``sim/...`` path and dotted ``sim.x.y``
module (or one attribute of a module) in README.md and docs/*.md is in the tree."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"(?<![\w/.-])((?:sim|tools|experiments|topologies|validation|tests|examples)/[\w./<>*-]*[\w*>])")
MODULE = re.compile(r"`((?:sim|tools|experiments|topologies|validation)(?:\.\w+)+)")


def is_module(parts: list[str]) -> bool:
    where = ROOT.joinpath(*parts)
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def has_attribute(parts: list[str]) -> bool:
    import importlib
    return hasattr(importlib.import_module(".".join(parts[:-1])), parts[-1])


def missing_names(text: str) -> list[str]:
    """The paths and dotted modules of ``text`` that are not in the tree (a glob or a ``<module>``
    pattern names a pattern, not a file)."""
    out = []
    for m in PATH.finditer(text):
        path = m.group(1).rstrip(".")
        if "*" in path or "<" in path:
            continue
        if not (ROOT / path).exists():
            out.append(path)
    for m in MODULE.finditer(text):
        parts = m.group(1).split(".")
        if not (is_module(parts) or (is_module(parts[:-1]) and has_attribute(parts))):   # or a module's name
            out.append(m.group(1))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_module_and_file_the_docs_name_exists(doc):
    assert missing_names(doc.read_text()) == []


def test_a_removed_module_is_caught():
    assert missing_names("the solver (`sim.network.maxmin`) in sim/network/maxmin.py") == [
        "sim/network/maxmin.py", "sim.network.maxmin"]
    assert missing_names("`sim.network.fabric.Fabric` and sim/network/fabric.py, tests/test_<module>.py") == []
