"""sim: the package's face, the public entry points imported on first use."""
import importlib
import subprocess
import sys

import pytest

import sim


def test_the_four_entry_points_run_a_step_and_a_pipeline():
    run = sim.load_scenario("tiny", schedule="1f1b")
    assert sim.simulate_step(run).step_time_s > 0
    assert sim.make_schedule("zb-h1", 4, 8).pp == 4
    assert sim.simulate_pipeline("1f1b", 4, 8).metrics.makespan == pytest.approx((4 - 1 + 8) * 3)   # (P-1+M)(F+B)
    assert set(sim.PUBLIC) <= set(dir(sim)) and set(sim.__all__) >= set(sim.PUBLIC)
    with pytest.raises(AttributeError, match="module 'sim' has no attribute 'nope'"):
        sim.nope


def test_importing_the_package_imports_none_of_them():
    code = "import sys, sim; print(sorted(m for m in sys.modules if m.startswith('sim.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['sim.faces']"


FACES = ("sim.training", "sim.training.model", "sim.training.comm", "sim.training.costs", "sim.training.reports")


@pytest.mark.parametrize("package", FACES)
def test_every_face_names_what_its_modules_define(package):
    face = importlib.import_module(package)
    for name in face.PUBLIC:
        assert getattr(face, name) is getattr(importlib.import_module(face.PUBLIC[name]), name)
        assert face.PUBLIC[name].startswith(package + ".")
    assert set(face.PUBLIC) <= set(dir(face))
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nope'"):
        face.nope


def test_a_face_imports_no_module_until_a_name_is_used():
    code = ("import sys, sim.training.model; print(sorted(m for m in sys.modules if m.startswith('sim.'))); "
            "sim.training.model.Layout; print('sim.training.model.layout' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["['sim.faces', 'sim.training', 'sim.training.model']", "True"]
