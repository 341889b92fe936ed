"""experiments/ep_overlap.py: Megatron-Bridge's profile of expert-parallel overlap against the simulator."""
from types import SimpleNamespace

import pandas as pd
import pytest

from experiments.ep_overlap import QUANTITIES, main, measured_breakdown, read_nsight, simulated_breakdown
from validation.suite import ValidationDataError


def test_the_measured_breakdown_by_hand():
    """Overlap on: 3,958.997 ms beside GEMMs and attention, 36.55% of the communication kernels'
    time, so 3.958997 / 0.3655 = 10.8317 s of them, 6.8727 s alone; the GPU busy 21.221 s, of which
    the computation at least 21.221 - 6.8727 = 14.3483 s; over 4 x 48 x 64 = 12,288 all-to-alls
    0.88148 ms each."""
    case = next(c for c in read_nsight() if c["case"] == "on")
    got = measured_breakdown(case, 12288)
    assert got["comm_s"] == pytest.approx(10.831729, rel=1e-6)
    assert got["comm_exposed_s"] == pytest.approx(6.872732, rel=1e-6)
    assert got["compute_s"] == pytest.approx(14.348268, rel=1e-6)
    assert got["all_to_all_ms"] == pytest.approx(0.881488, rel=1e-5)
    assert got["step_s"] == 20.992 and got["gpu_active_s"] == 21.221


def test_the_simulated_breakdown_by_hand():
    rank = SimpleNamespace(compute_s=10.0, recompute_s=1.0, comm_s=4.0, exposed_comm_s=1.5, dp_sync_s=0.2,
                           optimizer_s=0.1)
    got = simulated_breakdown(SimpleNamespace(step_time_s=13.0, ranks=[rank]), 1000)
    assert got == {"step_s": 13.0, "comm_s": 4.0, "all_to_all_ms": 4.0, "comm_beside_compute_s": 2.5,
                   "comm_exposed_s": 1.5, "compute_s": 11.0, "gpu_active_s": pytest.approx(12.8)}


def test_the_script_sets_the_profile_beside_the_suites_prediction(tmp_path, capsys):
    from validation.predict import predict_step
    from validation.suite import load_runs
    assert main(["--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "ep_overlap.csv")
    assert len(table) == 2 * len(QUANTITIES) and set(table["case"]) == {"off", "on"}
    runs = {r.id: r for r in load_runs()}
    for case, run_id in (("off", "mb-epov-qwen3-30b-a3b-off"), ("on", "mb-epov-qwen3-30b-a3b-on")):
        row = table[(table["case"] == case) & (table["quantity"] == "step_s")].iloc[0]
        assert row["simulated"] == pytest.approx(predict_step(runs[run_id])["step_time_s"], rel=1e-9)
        assert row["measured"] == runs[run_id].measured
    got = table.set_index(["case", "quantity"])
    # the simulated all-to-alls are the same kernels either way; overlap hides them beside compute
    assert got.loc[("on", "comm_s"), "simulated"] == pytest.approx(got.loc[("off", "comm_s"), "simulated"])
    assert got.loc[("on", "comm_exposed_s"), "simulated"] < got.loc[("off", "comm_exposed_s"), "simulated"]
    out = capsys.readouterr().out
    assert "expert-parallel overlap off and on" in out
    from tools.docs_commands import all_commands, missing_lines
    shown = next(c for c in all_commands() if c.text == "python -m experiments.ep_overlap")
    assert shown.output and missing_lines(shown, out) == [], "docs/validation.md quotes lines it no longer prints"


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace(",gpu_active_s", ""), r"missing column\(s\) gpu_active_s"),
    (lambda t: t.replace(",36.55,", ",136.55,"), r"row 2 \(on\): comm_beside_compute_pct must be a positive number up "
                                                 r"to 100, got '136.55'"),
    (lambda t: t.replace(",24.7138,", ",soon,"), r"row 1 \(off\): step_s must be a positive number, got 'soon'"),
])
def test_a_bad_profile_table_is_one_line(tmp_path, edit, message):
    from experiments.ep_overlap import NSIGHT
    path = tmp_path / "nsight.csv"
    path.write_text(edit(NSIGHT.read_text()))
    with pytest.raises(ValidationDataError, match=message):
        read_nsight(path)
