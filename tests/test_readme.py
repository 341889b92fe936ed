"""The README serves a user: short, its links resolve, its commands parse, and its worked example's
figures are what the simulator gives today."""
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_short_and_starts_with_the_two_commands():
    assert len(README.splitlines()) <= 400
    first_block = README.split("```")[1]
    assert "make run" in first_block and "make test" in first_block


def test_every_local_link_and_image_exists():
    targets = re.findall(r"\]\(([^)#]+)\)", README)
    assert "docs/validation.md" in targets and "docs/cli.md" in targets
    for target in targets:
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


def commands() -> list[str]:
    """Every ``python -m sim ...`` line of the README's code blocks (continuations joined)."""
    blocks = README.split("```")[1::2]
    out = []
    for block in blocks:
        text = block.replace("\\\n", " ")
        out += [line.split("  #")[0].strip() for line in text.splitlines() if line.startswith("python -m sim ")]
    return out


def test_every_command_in_the_readme_parses():
    from sim.cli import build_parser
    parser = build_parser()
    found = commands()
    assert len(found) >= 8
    for line in found:
        argv = shlex.split(line)[3:]
        if ">" in argv:
            argv = argv[:argv.index(">")]
        parser.parse_args(argv)                 # exits (2) on a flag that does not exist


@pytest.mark.parametrize("schedule", ["1f1b", "dualpipe"])
def test_the_worked_example_gives_the_readmes_figures(schedule, monkeypatch):
    from sim.training.model.specs import load_scenario
    from sim.training.step import simulate_step
    monkeypatch.chdir(ROOT / "tests")                       # paths resolve from the scenario's folder
    res = simulate_step(load_scenario(str(ROOT / "examples" / "qwen3-on-h100.yaml"), schedule=schedule))
    example = README[README.index("python -m sim run examples/qwen3-on-h100.yaml"):]
    row = re.search(rf"^\s*{schedule}\s+([0-9.]+)\s+([0-9.e+]+)\s+([0-9.]+)", example, re.M)
    assert row is not None
    assert float(row.group(1)) == pytest.approx(res.step_time_s, abs=5e-4)
    assert float(row.group(3)) == pytest.approx(res.mfu, abs=5e-4)
