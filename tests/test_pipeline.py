"""sim.pipeline: costs from text, per-stage and per-rank costs, every schedule side by side."""
import pytest

from sim.checks import InputError
from sim.pipeline import compare_frame, parse_costs, simulate_pipeline


def test_parse_costs_defaults_and_subsets():
    assert parse_costs("") == {"F": 1.0, "I": 1.0, "W": 1.0}
    assert parse_costs("f=2, W=0.5") == {"F": 2.0, "I": 1.0, "W": 0.5}
    for text, pattern in (("F", "expected NAME=VALUE"), ("F=-1", r"finite number in \(0, "), ("F=inf", "finite number"),
                          ("F=nan", "finite number"), ("F=1e308", r"1,000,000,000,000\], got 1e\+308"), ("Q=1", "one of F, I, W")):
        with pytest.raises(ValueError, match=pattern):
            parse_costs(text)


def test_cost_per_rank_halves_stage_costs_of_v_schedules():
    """ZB-V has 2P stages: with costs per rank each stage costs half, so a rank's busy time is the
    same as 1F1B's for the same model (M x (F+I+W))."""
    P, M = 4, 8
    zbv = simulate_pipeline("zbv", P, M, F=2, I=2, W=2, cost_per="rank").metrics
    one = simulate_pipeline("1f1b", P, M, F=2, I=2, W=2, cost_per="rank").metrics
    assert [r.busy for r in zbv.ranks] == [r.busy for r in one.ranks] == [M * 6.0] * P
    per_stage = simulate_pipeline("zbv", P, M, F=2, I=2, W=2).metrics
    assert [r.busy for r in per_stage.ranks] == [2 * M * 6.0] * P
    with pytest.raises(ValueError, match="cost_per"):
        simulate_pipeline("zbv", P, M, cost_per="gpu")


def test_compare_frame_gives_refusals_a_row_with_the_reason():
    df = compare_frame(4, 6)
    notes = dict(zip(df["schedule"], df["note"]))
    assert "even M >= 2P" in notes["dualpipe"] and notes["1f1b"] == ""
    one = df[df.schedule == "1f1b"].iloc[0]
    assert one["bubble_fraction"] == pytest.approx(3 / 9, abs=1e-4)          # (P-1)/(M+P-1)


def test_a_subnormal_cost_is_refused_by_name():
    """F=1e-320 passes "> 0" but underflows every sum it enters."""
    with pytest.raises(InputError, match=r"cost F must be at least 2.225e-308 \(a normal float\), got 1e-320"):
        parse_costs("F=1e-320")
