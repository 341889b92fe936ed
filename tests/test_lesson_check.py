"""experiments/lesson_check.py: the claims that need no MoE step, against closed forms."""
import math

from experiments import lesson_check, lesson_exercises


def figures(row: dict) -> dict:
    return dict(item.split("=", 1) for item in row["figures"].split("; "))


def test_l4_the_m_at_which_1f1b_loses_12_percent_at_8_stages():
    row = lesson_check.l4()
    m = math.ceil(7 / 0.12 - 7)                     # (P-1)/(M+P-1) <= 0.12 at P=8
    assert int(figures(row)["smallest_M_at_or_below_12pct"]) == m == 52
    assert row["verdict"] == "holds only when"


def test_l5_the_1f1b_bubble_includes_the_backward():
    row = lesson_check.l5()
    f = figures(row)
    assert float(f["idle_per_rank_sim"]) == 7 * 3 and row["verdict"] == "does not hold"


def test_l8_overlapped_units_pair_a_forward_with_a_backward():
    row = lesson_check.l8()
    f = figures(row)
    assert int(f["forward+backward_units"]) > 0 and int(f["forward+forward_units"]) == 0
    assert f["rank0_first_ops"].startswith("F0 F1 F2 F4'") and row["verdict"] == "does not hold"


def test_l14_1f1b_matches_the_toy_and_dualpipe_does_not():
    f = figures(lesson_check.l14())
    assert abs(float(f["1f1b_simulated"]) - 7 / 23) < 1e-4
    assert float(f["dualpipe_simulated"]) > 1.5 * float(f["dualpipe_lesson"])


def test_exercise_2_names_every_idle_slot(tmp_path):
    rows = []
    lesson_exercises.exercise_2(rows, tmp_path)
    answers = {q: (v, note) for _, q, v, _, note in rows}
    settled, note = answers["first slot after which no rank idles again before its last op"]
    assert settled > answers["first slot with every rank busy"][0]
    last_idle = max(int(s) for part in note.split(": ", 1)[1].split("; ") for s in part.split(": ")[1].split()
                    if s != "none")
    assert settled == last_idle + 1


def test_the_claims_on_schedules_alone_need_no_step(monkeypatch):
    def no_fabric(*_, **__):
        raise AssertionError("a claim answered ahead simulated a step")
    monkeypatch.setattr(lesson_check, "simulate_step", no_fabric)
    lesson_check.answer.cache_clear()
    lesson_check.prepare()
    assert lesson_check.answer.cache_info().currsize == len(lesson_check.SCHEDULES_ONLY)
    assert lesson_check.answer(lesson_check.l4) is lesson_check.answer(lesson_check.l4)   # looked up, not redone
    lesson_check.answer.cache_clear()


def test_remembered_steps_answer_for_the_unchanged_preset_only(monkeypatch):
    class Given:
        class run:
            schedule = "dualpipe"
    monkeypatch.setattr(lesson_check, "simulated_step", lambda schedule, **over: ("simulated", schedule, over))
    monkeypatch.setattr(lesson_check, "_GIVEN", {})
    lesson_check.remember([Given])
    assert lesson_check.step("dualpipe") is Given
    assert lesson_check.step("dualpipe", microbatches=64) == ("simulated", "dualpipe", {"microbatches": 64})
    assert lesson_check.step("1f1b") == ("simulated", "1f1b", {})
