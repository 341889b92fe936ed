from sim.metrics import events_frame
from sim.pipeline import simulate_pipeline
from sim.plots import plot_timeline, plot_utilization
from sim.textgrid import render


def test_timeline_p16_m40(tmp_path):
    run = simulate_pipeline("dualpipe", 16, 40)
    out = plot_timeline(run.result, tmp_path / "tl.png")
    assert out.stat().st_size > 20_000


def test_utilization_bars(tmp_path):
    runs = [simulate_pipeline(n, 8, 16).metrics for n in ("1f1b", "dualpipe")]
    assert plot_utilization(runs, tmp_path / "u.png").stat().st_size > 5_000


def test_events_frame_columns_and_busy():
    run = simulate_pipeline("1f1b", 2, 2)
    df = events_frame(run.result)
    assert list(df.columns[:4]) == ["rank", "kind", "mb", "stage"]
    assert (df["end"] - df["start"]).groupby(df["rank"]).sum().tolist() == [r.busy for r in run.metrics.ranks]


def test_text_grid_1f1b():
    text = render(simulate_pipeline("1f1b", 2, 2).result)
    rows = [line.split("|")[1].split() for line in text.splitlines()[1:]]
    assert rows[0] == ["F0", "F1", ".", ".", "B0", "B0", ".", "B1", "B1"]
    assert rows[1] == [".", "F0", "B0", "B0", "F1", "B1", "B1", ".", "."]


def test_bubble_fraction_definition():
    m = simulate_pipeline("1f1b", 4, 8).metrics
    assert m.bubble_fraction == sum(r.idle for r in m.ranks) / (4 * m.makespan)
