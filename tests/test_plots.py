"""sim.plots: the timeline and utilization figures are drawn."""
from sim.pipeline import simulate_pipeline
from sim.plots import plot_timeline, plot_utilization


def test_timeline_p16_m40(tmp_path):
    run = simulate_pipeline("dualpipe", 16, 40)
    out = plot_timeline(run.result, tmp_path / "tl.png")
    assert out.stat().st_size > 20_000


def test_utilization_bars(tmp_path):
    runs = [simulate_pipeline(n, 8, 16).metrics for n in ("1f1b", "dualpipe")]
    assert plot_utilization(runs, tmp_path / "u.png").stat().st_size > 5_000


