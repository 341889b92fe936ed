"""sim.plan_search: every layout once, the fastest layouts with each recipe, pruned by the bound or
screened (branch and bound on a lower bound)."""
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

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


def fake_screen(bounds: dict):
    """screen(points): the lower bound of each recipe from ``bounds``; records each call."""
    calls = []

    def screen(points):
        calls.append([p["recipe"] for p in points])
        return [bounds[p["recipe"]] for p in points]
    return screen, calls


def test_a_screen_simulates_in_its_order_only_what_could_beat_the_best():
    """Layouts a, b, c; their likeliest recipes screen at 1.0, 2.0 and 5.0, so the top 2 are a and b,
    whose other recipes are screened (a2 1.5, a3 4.0, b2 2.5; c2 is not). In the screen's order,
    two at a time: a1 and a2 are simulated (best 1.8); b1's screen, 2.0, cannot beat it: the rest
    are not simulated."""
    pts = [point(2, "1f1b", "a1", 1.0), point(2, "1f1b", "a2", 1.1), point(2, "1f1b", "a3", 1.2),
           point(4, "1f1b", "b1", 1.0), point(4, "1f1b", "b2", 1.1),
           point(2, "zb-h1", "c1", 1.0), point(2, "zb-h1", "c2", 1.1)]
    screen, screened = fake_screen({"a1": 1.0, "a2": 1.5, "a3": 4.0, "b1": 2.0, "b2": 2.5, "c1": 5.0, "c2": 0.1})
    simulate, calls = fake({"a1": 3.0, "a2": 1.8, "a3": 4.1, "b1": 2.1, "b2": 2.6, "c1": 5.5, "c2": 0.2})
    df, summary = search(pts, simulate, top=2, screen=screen, batch=2)
    assert screened == [["a1", "b1", "c1"], ["a2", "a3", "b2"]]
    assert calls == [["a1", "a2"]]
    assert df.sort_values("step_time_s")["recipe"].iloc[0] == "a2"
    assert (summary.candidates, summary.layouts, summary.simulated, summary.pruned, summary.unsearched,
            summary.screened) == (7, 3, 2, 4, 1, 6)
    assert "screened 6 of 7 candidates" in summary.line() and "simulated the 2 whose screen" in summary.line()


def test_a_screen_goes_on_while_the_next_bound_is_below_the_best():
    """Batches of one: each round adds the next candidate while its screen is below the best step
    so far; a failed screen (-inf) is simulated first."""
    pts = [point(2, "1f1b", "a1", 1.0), point(4, "1f1b", "b1", 1.0), point(8, "1f1b", "c1", 1.0),
           point(16, "1f1b", "d1", 1.0)]
    screen, _ = fake_screen({"a1": 1.0, "b1": -float("inf"), "c1": 2.9, "d1": 3.5})
    simulate, calls = fake({"a1": 3.0, "b1": 4.0, "c1": 2.95, "d1": 3.6})
    df, summary = search(pts, simulate, screen=screen, batch=1)
    assert calls == [["b1"], ["b1", "a1"], ["b1", "a1", "c1"]]
    assert summary.simulated == 3 and summary.pruned == 1
    assert df.sort_values("step_time_s")["recipe"].iloc[0] == "c1"


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0.1, 10), st.floats(0, 5)), min_size=1, max_size=12),
       st.integers(1, 5))
def test_under_a_lower_bound_the_screened_answer_is_the_best_of_the_screened(rows, batch):
    """Any steps, any screens at or below them: the answer is the fastest of the candidates the
    search screened, as if each had been simulated."""
    pts, steps, bounds = [], {}, {}
    for i, (layout, step, gap) in enumerate(rows):
        name = f"r{i}"
        pts.append(point(2 ** layout, "1f1b", name, 1.0 + i))
        steps[name], bounds[name] = step, step - gap
    screen, screened = fake_screen(bounds)
    simulate, _ = fake(steps)
    df, summary = search(pts, simulate, top=2, screen=screen, batch=batch)
    pool = [name for call in screened for name in call]
    assert df["step_time_s"].min() == min(steps[name] for name in pool)
    assert summary.simulated + summary.pruned == summary.screened == len(pool)
