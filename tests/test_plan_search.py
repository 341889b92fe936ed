"""sim.plan_search: every layout once, the fastest layouts with each recipe, pruned by the bound."""
import pandas as pd

from sim.plan_search import layout_key, likeliest_first, search


def point(pp, schedule, recipe, bound, zero=1):
    return {"tp": 1, "cp": 1, "pp": pp, "ep": 4, "schedule": schedule, "last_stage_layers": 0, "recipe": recipe,
            "zero_stage": zero, "bound_s": f"{bound:g}"}


def fake(steps: dict):
    """simulate(points): rows with the step of each recipe from ``steps``; records each call."""
    calls = []

    def simulate(points):
        calls.append([p["recipe"] for p in points])
        return pd.DataFrame([{**p, "step_time_s": steps[p["recipe"]], "status": "ok"} for p in points])
    return simulate, calls


def test_likeliest_first_puts_zero3_last():
    ps = [point(2, "1f1b", "z3", 1.0, zero=3), point(2, "1f1b", "b", 2.0), point(2, "1f1b", "a", 1.5)]
    assert [p["recipe"] for p in likeliest_first(ps)] == ["a", "b", "z3"]


def test_search_simulates_each_layout_once_then_the_top_layouts_recipes_under_the_best():
    """Three layouts; step 1 simulates a1, b1, c1 (lowest bounds); the top 2 layouts are a (3.0) and
    b (4.0); of their other recipes a2 (bound 2.5 < 3.0) is simulated and a3 (bound 3.5) pruned;
    c's other recipe is not searched. a2 wins."""
    pts = [point(2, "1f1b", "a1", 1.0), point(2, "1f1b", "a2", 2.5), point(2, "1f1b", "a3", 3.5),
           point(4, "1f1b", "b1", 1.0), point(4, "1f1b", "b2", 5.0),
           point(2, "zb-h1", "c1", 1.0), point(2, "zb-h1", "c2", 1.2)]
    simulate, calls = fake({"a1": 3.0, "a2": 2.8, "a3": 9, "b1": 4.0, "b2": 9, "c1": 6.0, "c2": 1.0})
    df, summary = search(pts, simulate, top=2)
    assert calls[0] == ["a1", "b1", "c1"]
    assert calls[1] == ["a1", "b1", "c1", "a2"]          # the sweep resumes: the earlier points given again
    assert df.sort_values("step_time_s")["recipe"].iloc[0] == "a2"
    assert (summary.candidates, summary.layouts, summary.simulated, summary.pruned, summary.unsearched) == (7, 3, 4, 2, 1)
    assert "simulated 4 of 7 candidates" in summary.line() and "2 skipped" in summary.line()


def test_nothing_more_to_simulate_is_one_round():
    pts = [point(2, "1f1b", "a1", 1.0), point(2, "1f1b", "a2", 5.0)]
    simulate, calls = fake({"a1": 3.0, "a2": 1.0})
    df, summary = search(pts, simulate)
    assert len(calls) == 1 and summary.pruned == 1 and summary.simulated == 1


def test_failed_rows_only_stop_the_search():
    def simulate(points):
        return pd.DataFrame([{**p, "step_time_s": float("nan"), "status": "error"} for p in points])
    df, summary = search([point(2, "1f1b", "a1", 1.0), point(2, "1f1b", "a2", 2.0)], simulate)
    assert summary.simulated == 1 and summary.unsearched == 1 and set(df["status"]) == {"error"}


def test_the_layout_key_survives_a_csv_round_trip():
    p = point(2, "1f1b", "a", 1.0)
    back = pd.read_csv(pd.io.common.StringIO(pd.DataFrame([p]).to_csv(index=False))).iloc[0].to_dict()
    assert layout_key(back) == layout_key(p)
