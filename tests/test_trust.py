"""sim.training.trust: the validated runs like a run and the errors on them; the similarity rule by hand,
the shipped errors against the suite's rows, the band in a run's text, JSON, CSV and page."""
import json
from pathlib import Path

import pandas as pd
import pytest

from sim.cli import main
from sim.training.model.specs import load_model
from sim.training.trust import (
    MIN_RUNS,
    band_from_columns,
    generation,
    load_errors,
    model_params,
    ranking_agreement,
    similar_runs,
    trust_band,
)
from validation.suite import load_runs, resolve

ROOT = Path(__file__).resolve().parents[1]


def row(id, gen="Hopper", moe=True, mp=False, mbs=1, params_b=30.0, error=10.0, job="", measured=1.0):
    return {"id": id, "source": "s", "generation": gen, "moe": moe, "model_parallel": mp, "microbatch_size": mbs,
            "params_b": params_b, "error_pct": error, "job": job, "measured": measured}


ROWS = [row("a", error=100.0), row("b", error=50.0), row("c", mbs=4, error=5.0), row("d", mbs=4, error=-5.0),
        row("e", mbs=4, error=15.0), row("f", mp=True, error=-20.0), row("g", moe=False, error=3.0),
        row("h", gen="A100", error=25.0)]


def test_the_rule_narrows_only_while_three_runs_stay():
    """MoE on Hopper: a to f (6). No TP or CP: a to e (5, kept). Micro-batch 1-2: a, b (2 < 3, not
    kept). Under 50B: a to e again (5). The band: the median of 100, 50, 5, -5, 15."""
    chosen, like = similar_runs("Hopper", True, False, 1, 30e9, ROWS)
    assert [r["id"] for r in chosen] == ["a", "b", "c", "d", "e"]
    assert like == "MoE on Hopper, no TP or CP, under 50B parameters"
    band = trust_band("Hopper", True, False, 1, 30e9, ROWS)
    assert (band.runs, band.median_pct, band.low_pct, band.high_pct) == (5, 15.0, -5.0, 100.0)
    assert band.line() == ("like 5 published runs (MoE on Hopper, no TP or CP, under 50B parameters): the model "
                           "predicted them 15% fast at the median (-5% to +100%)")
    # micro-batch 4: c, d, e are three, so that narrowing holds
    chosen, like = similar_runs("Hopper", True, False, 4, 30e9, ROWS)
    assert [r["id"] for r in chosen] == ["c", "d", "e"] and "micro-batch over 2" in like
    tp = trust_band("Hopper", True, True, 1, 30e9, ROWS)     # one TP run: not narrowed; micro-batch 1-2: a, b, f
    assert tp.ids == ("a", "b", "f") and tp.like == "MoE on Hopper, micro-batch 1-2, under 50B parameters"
    one = trust_band("Hopper", False, False, 1, 7e9, ROWS)
    assert one.runs == 1 and one.line().startswith("like 1 published run (dense on Hopper): the model predicted it 3% fast")
    assert trust_band("Blackwell", True, False, 1, 30e9, ROWS) is None and trust_band(None, True, False, 1, 1, ROWS) is None
    assert MIN_RUNS == 3


def test_a_slow_median_says_slow_and_the_columns_round_trip():
    band = trust_band("Hopper", True, True, 1, 30e9, [row("x", mp=True, error=-30.0)] * 3)
    assert "30% slow at the median (-30% to -30%)" in band.line()
    assert band_from_columns(band.columns()) == band.__class__(band.runs, band.like, band.median_pct, band.low_pct,
                                                               band.high_pct)
    assert band_from_columns({"trust_runs": 0}) is None and band_from_columns({"trust_runs": ""}) is None


@pytest.mark.parametrize("name,family,gen", [("h800", None, "Hopper"), ("gb200", None, "Blackwell"),
                                             ("b200", None, "Blackwell"), ("a100", None, "A100"),
                                             ("validation/gpus/h100-hbm2e-96.yaml", None, "Hopper"),
                                             ("my-gpu.yaml", "sm90", "Hopper"), ("my-gpu.yaml", None, None)])
def test_the_gpu_generation(name, family, gen):
    assert generation(name, family) == gen


def test_the_shipped_errors_are_the_suites_scored_step_runs():
    """Every shipped row is a scored run of a whole step in validation/runs.csv, with that run's GPU
    generation, kind of model, model parallelism and micro-batch; the suite's every such run is there."""
    shipped = {r["id"]: r for r in load_errors()}
    runs = {r.id: r for r in load_runs() if r.role == "scored" and not r.is_kernel}
    assert set(shipped) == set(runs)
    for id, r in shipped.items():
        run = runs[id]
        model = load_model(resolve(run.model))
        assert r["generation"] == generation(run.gpu)
        assert r["moe"] == model.is_moe and r["microbatch_size"] == run.microbatch_size
        assert r["model_parallel"] == ((run.tp or 1) * (run.cp or 1) > 1)
        assert r["params_b"] == pytest.approx(model_params(model) / 1e9, abs=1e-3)


def test_the_shipped_errors_match_the_last_validation_run():
    """When results/validation.csv is there (make run), the shipped errors are its first-principles
    errors, to the CSV's rounding."""
    results = ROOT / "results" / "validation.csv"
    if not results.is_file():
        pytest.skip("no results/validation.csv (make run writes it)")
    from experiments.validate import trust_errors
    fresh = trust_errors(pd.read_csv(results)).set_index("id")["error_pct"]
    shipped = pd.Series({r["id"]: r["error_pct"] for r in load_errors()})
    assert (fresh.sort_index() - shipped.sort_index()).abs().max() < 1e-3


def test_model_params_of_deepseek_v3():
    assert model_params(load_model("deepseek-v3")) / 1e9 == pytest.approx(671, rel=0.01)


def test_a_run_prints_writes_and_pages_its_band(tmp_path, capsys):
    """The worked example's band in the text, the JSON, the summary CSV and the page, the same
    figures as the rule gives from the shipped errors."""
    example = str(ROOT / "examples" / "qwen3-on-h100.yaml")
    band = trust_band("Hopper", True, False, 1, model_params(load_model(str(ROOT / "examples" / "qwen3-like.yaml"))))
    assert main(["run", example, "--schedule", "dualpipe", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"trust: {band.line()}; see docs/validation.md" in out.splitlines()
    summary = pd.read_csv(tmp_path / "qwen3_on_h100_summary.csv")
    assert summary["trust_runs"].item() == band.runs
    assert summary["trust_median_error_pct"].item() == pytest.approx(band.median_pct)
    assert band.line() in (tmp_path / "index.html").read_text().replace("&#x27;", "'")
    assert main(["run", example, "--schedule", "dualpipe", "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["trust"]["runs"] == band.runs and js["trust"]["line"] == band.line()


def test_ranking_agreement_by_hand():
    """Job J (dense on A100): x 10 measured, +10% (11 simulated); y 12, -10% (10.8); z 10.2, +50%.
    Pairs measured 3% or more apart: (y, x) 20% apart, simulated 10.8 < 11: inverted; (y, z) 17.6%
    apart, 10.8 < 15.3: inverted; (z, x) 2% apart: not counted. Job K: u 5, v 6, both exact: kept.
    A dense A100 plan: 1 of 3 pairs in 2 groups; an MoE plan on Hopper has no pair like it and
    gets every pair, saying so; no rows with a job: no agreement."""
    rows = [row("x", gen="A100", moe=False, job="J", measured=10.0, error=10.0),
            row("y", gen="A100", moe=False, job="J", measured=12.0, error=-10.0),
            row("z", gen="A100", moe=False, job="J", measured=10.2, error=50.0),
            row("u", gen="A100", moe=False, job="K", measured=5.0, error=0.0),
            row("v", gen="A100", moe=False, job="K", measured=6.0, error=0.0),
            row("w", gen="Hopper", moe=True, measured=3.0)]
    dense = ranking_agreement("A100", False, rows)
    assert (dense.same, dense.total, dense.groups, dense.like) == (1, 3, 2, "dense on A100")
    assert dense.line() == ("of 3 pairs of published runs of one job (dense on A100) measured 3% or more apart, "
                            "in 2 groups, the model ordered 1 as measured")
    moe = ranking_agreement("Hopper", True, rows)
    assert (moe.same, moe.total) == (1, 3) and moe.like == "no MoE job on Hopper in the suite; all: dense on A100"
    assert ranking_agreement("A100", False, [r for r in rows if not r["job"]]) is None


def test_the_shipped_jobs_give_the_suites_pair_agreement():
    """The shipped rows' jobs and measured figures give the agreement experiments.validate prints
    over the whole suite (its first-principles pairs measured 3% or more apart)."""
    results = ROOT / "results" / "validation.csv"
    if not results.is_file():
        pytest.skip("no results/validation.csv (make run writes it)")
    from experiments.ranking_pairs import agreement, ranking_pairs
    pairs = ranking_pairs(pd.read_csv(results), modes=("first_principles",))
    same, total = agreement(pairs, "first_principles")
    rows = load_errors()
    everything = ranking_agreement(None, False, rows)
    assert (everything.same, everything.total) == (same, total)
