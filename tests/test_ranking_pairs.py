"""experiments.ranking_pairs on hand-made groups: pairs, gaps, ties, inversions, layouts."""
import pandas as pd
import pytest

from experiments.ranking_pairs import agreement, pairs_text, ranking_pairs


def run(rid, schedule, measured, predicted, pp=8, source="src", gpus=8, role="scored", fusion="fused"):
    return {"id": rid, "source": source, "model": "m", "gpu": "a100", "gpus": gpus, "seq_len": 1024,
            "global_batch": 64, "precision": "bf16", "metric": "samples_per_s_per_gpu", "role": role, "tp": 1,
            "cp": 1, "pp": pp, "vp": None, "layers_per_virtual_stage": None, "dp": 1, "ep": 1,
            "microbatch_size": 1, "zero": 1, "schedule": schedule, "recompute": "none", "optimizer_sync": "global",
            "fusion": fusion, "tp_comm_overlap": 0, "measured": measured, "predicted_first_principles": predicted}


def test_a_hand_made_group_of_three_schedules_and_a_layout():
    """Measured: c 12 > b 10.1 > a 10; simulated: b 13 > c 12.5 > a 11. Pairs (faster first):
    (c, b) +18.8% measured, simulated 12.5/13 - 1 = -3.8%: an inversion; (c, a) +20%, +13.6%: agree;
    (b, a) +1%: a tie, simulated +18.2% (agrees, but not scored). Another source's two layouts
    (PP 4 against PP 8, 5% apart) agree; a third's eager and compiled runs (only the fusion differs, 20%
    apart) are a recipe pair and agree. A run that is not scored, or of another job, is no pair."""
    df = pd.DataFrame([run("a", "1F1B", 10.0, 11.0), run("b", "ZB-1p", 10.1, 13.0), run("c", "ZB-2p", 12.0, 12.5),
                       run("x", "1F1B", 9.0, 9.0, role="needs-tp"), run("y", "1F1B", 9.0, 9.0, gpus=16),
                       run("p4", "1F1B", 2.1, 3.0, pp=4, source="other"), run("p8", "1F1B", 2.0, 2.0, source="other"),
                       run("eager", "1F1B", 5.0, 6.0, source="third", fusion="unfused"),
                       run("compiled", "1F1B", 6.0, 6.5, source="third")])
    pairs = ranking_pairs(df, modes=("first_principles",)).set_index(["faster", "slower"])
    assert sorted(pairs.index) == [("b", "a"), ("c", "a"), ("c", "b"), ("compiled", "eager"), ("p4", "p8")]
    assert pairs.loc[("c", "b"), "measured_gap_pct"] == pytest.approx(100 * (12 / 10.1 - 1))
    assert pairs.loc[("c", "b"), "first_principles_gap_pct"] == pytest.approx(100 * (12.5 / 13 - 1))
    assert not pairs.loc[("c", "b"), "first_principles_same_order"] and pairs.loc[("c", "a"), "first_principles_same_order"]
    assert pairs.loc[("b", "a"), "tie"] and not pairs.loc[("c", "b"), "tie"]
    assert pairs.loc[("p4", "p8"), "kind"] == "layout" and pairs.loc[("c", "b"), "kind"] == "schedule"
    assert pairs.loc[("compiled", "eager"), "kind"] == "recipe"
    # scored: (c, b), (c, a), (p4, p8), (compiled, eager): 3 of 4 agree; the tie (b, a) left out
    assert agreement(pairs.reset_index(), "first_principles") == (3, 4)
    assert agreement(pairs.reset_index(), "first_principles", min_gap_pct=10) == (2, 3)
    text = pairs_text(pairs.reset_index(), modes=("first_principles",))
    assert text[0] == ("ranking pairs: 5 pairs in 3 groups (1 of schedules, 1 of layouts, 1 of recipes) from 3 "
                       "sources; 1 ties (measured gap under 2%)")
    assert text[1] == "ranking pairs, first_principles: 3 of 4 pairs with a measured gap of 3% or more ordered as measured (75%)"


def test_no_group_no_pair():
    df = pd.DataFrame([run("a", "1F1B", 10.0, 11.0), run("b", "1F1B", 10.0, 11.0, gpus=16)])
    assert ranking_pairs(df).empty and pairs_text(ranking_pairs(df)) == []


def test_a_group_measured_in_seconds_a_step_is_ranked_by_speed():
    """A time metric (step_time_s): the faster run is the one with the shorter step. Measured 17.6 s
    and 19.7 s: the first is faster by 19.7 / 17.6 - 1 = 11.9%; simulated 11.8 s and 15.8 s, the same
    order by 15.8 / 11.8 - 1 = 33.9%. A third run at 29 s predicted at 13.6 s is inverted against the
    second (simulated 13.6 < 15.8 s: faster, measured slower)."""
    rows = [run("a", "1F1B-I", 17.6, 11.8, pp=8), run("b", "1F1B", 19.7, 15.8, pp=8),
            run("c", "1F1B", 29.0, 13.6, pp=4)]
    df = pd.DataFrame([{**r, "metric": "step_time_s"} for r in rows])
    pairs = ranking_pairs(df, modes=("first_principles",)).set_index(["faster", "slower"])
    assert sorted(pairs.index) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert pairs.loc[("a", "b"), "measured_gap_pct"] == pytest.approx(100 * (19.7 / 17.6 - 1))
    assert pairs.loc[("a", "b"), "first_principles_gap_pct"] == pytest.approx(100 * (15.8 / 11.8 - 1))
    assert pairs.loc[("a", "b"), "first_principles_same_order"]
    assert not pairs.loc[("b", "c"), "first_principles_same_order"]
    assert pairs.loc[("a", "b"), "kind"] == "schedule" and pairs.loc[("b", "c"), "kind"] == "layout"


def test_runs_of_one_job_under_two_metrics_are_no_pair():
    df = pd.DataFrame([run("a", "1F1B", 10.0, 11.0), {**run("b", "ZB-1p", 12.0, 13.0), "metric": "step_time_s"}])
    assert ranking_pairs(df).empty
