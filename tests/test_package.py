"""sim: the package's face, the public entry points imported on first use."""
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
    assert out.strip() == "[]"
