"""sim.metrics: busy, idle, utilization, bubble fraction and the events frame, by definition."""
import pytest

from sim.metrics import events_frame
from sim.pipeline import simulate_pipeline


def test_events_frame_columns_and_busy():
    run = simulate_pipeline("1f1b", 2, 2)
    df = events_frame(run.result)
    assert list(df.columns[:4]) == ["rank", "kind", "mb", "stage"]
    assert (df["end"] - df["start"]).groupby(df["rank"]).sum().tolist() == [r.busy for r in run.metrics.ranks]


def test_bubble_fraction_definition():
    m = simulate_pipeline("1f1b", 4, 8).metrics
    assert m.bubble_fraction == sum(r.idle for r in m.ranks) / (4 * m.makespan)


def test_summarize_hand_built_records():
    """Two ranks; rank 0 busy 3 of 5, rank 1 busy 5 of 5: idle 2 and 0, bubble 2 / (2 x 5)."""
    from sim.engine import EngineResult, OpRecord
    from sim.metrics import summarize
    from sim.schedules import make_schedule
    sched = make_schedule("1f1b", 2, 1)
    recs = [OpRecord(0, "F", 0, 0, -1, -1, 0.0, 1.0), OpRecord(1, "F", 0, 1, -1, -1, 1.0, 3.0),
            OpRecord(1, "B", 0, 1, -1, -1, 3.0, 4.0), OpRecord(0, "B", 0, 0, -1, -1, 4.0, 5.0),
            OpRecord(1, "B", 0, 1, -1, -1, 0.0, 1.0)]
    m = summarize(EngineResult.of(sched, recs))
    assert m.makespan == 5.0
    assert [r.busy for r in m.ranks] == [2.0, 4.0] and [r.idle for r in m.ranks] == [3.0, 1.0]
    assert m.bubble_fraction == pytest.approx(4 / 10)
    assert m.mean_utilization == pytest.approx((2 / 5 + 4 / 5) / 2)
