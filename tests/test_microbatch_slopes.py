"""experiments.microbatch_slopes on hand-made tables: 1F1B's (m + p - 1) slots, a mode that is fast
per micro-batch, groups that cannot give a line, and Table 9's unit."""
import pandas as pd
import pytest

from experiments.microbatch_slopes import line, microbatch_slopes, pass_ms, slopes_text

SLOT_S = 0.05          # one micro-batch through a stage, T_F + T_B + T_W, seconds
GPUS, MBS = 8, 6


def row(m: int, step_s: float, predicted_step_s: float, schedule="1F1B", table="Table 4", source="zero-bubble",
        model="zb-gpt-1.5b") -> dict:
    """A validation row whose measured step is ``step_s`` (samples per GPU per second from it)."""
    batch = m * MBS
    return {"id": f"{table}-{schedule}-{m}", "source": source, "role": "scored", "metric": "samples_per_s_per_gpu",
            "where": f"{table}, row {schedule}", "model": model, "gpus": GPUS, "dp": 1, "microbatch_size": MBS,
            "global_batch": batch, "schedule": schedule, "optimizer_sync": "global",
            "measured": batch / GPUS / step_s, "predicted_first_principles": batch / GPUS / predicted_step_s,
            "predicted_profile_fed": None}


def test_line_recovers_a_straight_line():
    assert line([1, 2, 4], [3, 5, 9]) == pytest.approx((2.0, 1.0))


def test_1f1b_is_m_plus_p_minus_1_slots_and_the_ratio_is_the_measured_excess():
    p = 8
    # measured: each micro-batch 10% over its passes, the fill and drain at the passes' cost; simulated: exact
    rows = [row(m, 1.1 * SLOT_S * m + (p - 1) * SLOT_S, SLOT_S * (m + p - 1)) for m in (24, 32, 64)]
    out = microbatch_slopes(pd.DataFrame(rows), {"zb-gpt-1.5b": SLOT_S * 1e3}).iloc[0]
    assert out["microbatches"] == "24/32/64" and out["table"] == "Table 4"
    assert out["measured_slot"] == pytest.approx(1.1) and out["measured_fixed_slots"] == pytest.approx(p - 1)
    assert out["first_principles_slot"] == pytest.approx(1.0)
    assert out["first_principles_fixed_slots"] == pytest.approx(p - 1)
    assert out["first_principles_slot_ratio"] == pytest.approx(1.1)
    assert out["first_principles_fixed_gap_slots"] == pytest.approx(0.0, abs=1e-9)
    assert out["profile_fed_slot"] is None and out["profile_fed_slot_ratio"] is None     # no prediction in that mode


def test_groups_split_by_table_and_schedule_and_need_two_microbatch_counts():
    rows = [row(m, SLOT_S * (m + 7), SLOT_S * (m + 7)) for m in (24, 32)]
    rows += [row(m, SLOT_S * m, SLOT_S * m, schedule="ZB-2p") for m in (24, 32)]
    rows += [row(2, SLOT_S * 9, SLOT_S * 9, table="Table 12")]                  # one count: no line
    rows += [row(m, SLOT_S * m, SLOT_S * m, source="megatron-2021") for m in (24, 32)]   # no Table 9
    out = microbatch_slopes(pd.DataFrame(rows), {"zb-gpt-1.5b": SLOT_S * 1e3})
    assert sorted(out["schedule"]) == ["1F1B", "ZB-2p"] and set(out["table"]) == {"Table 4"}
    zb = out.set_index("schedule").loc["ZB-2p"]
    assert zb["measured_slot"] == pytest.approx(1.0) and zb["measured_fixed_slots"] == pytest.approx(0, abs=1e-9)


def test_a_model_without_a_profile_gives_no_line_and_no_rows_give_no_text():
    rows = [row(m, SLOT_S * m, SLOT_S * m, model="gpt-x") for m in (24, 32)]
    assert microbatch_slopes(pd.DataFrame(rows), {"zb-gpt-1.5b": 50.0}).empty
    assert slopes_text(pd.DataFrame()) == []


def test_the_text_gives_the_median_and_range_of_the_ratio():
    rows = [row(m, 1.2 * SLOT_S * m, SLOT_S * m) for m in (24, 32)]
    rows += [row(m, 1.1 * SLOT_S * m, SLOT_S * m, schedule="ZB-2p") for m in (24, 32)]
    text = slopes_text(microbatch_slopes(pd.DataFrame(rows), {"zb-gpt-1.5b": SLOT_S * 1e3}))
    assert text == ["Zero Bubble, 2 schedule lines, first_principles: a micro-batch costs 1.150x (from 1.100 to "
                    "1.200) what the simulator charges, the fixed part +0.0 slots (median; a slot is Table 9's "
                    "T_F + T_B + T_W)"]


def test_pass_ms_is_the_mean_of_a_models_table_9_rows():
    profiles = {"a": {"model": "x", "t_f_ms": 1.0, "t_b_ms": 2.0, "t_w_ms": 3.0},
                "b": {"model": "x", "t_f_ms": 2.0, "t_b_ms": 2.0, "t_w_ms": 4.0},
                "c": {"model": "y", "t_f_ms": 1.0, "t_b_ms": 1.0, "t_w_ms": 1.0}}
    assert pass_ms(profiles) == {"x": 7.0, "y": 3.0}
    shipped = pass_ms()
    assert shipped["zb-gpt-1.5b"] == pytest.approx((18.522 + 18.086 + 9.337 + 18.513 + 18.086 + 9.331 + 18.546
                                                     + 18.097 + 9.321) / 3)
