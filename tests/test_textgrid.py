"""sim.textgrid: the rank x time text grid."""
from sim.pipeline import simulate_pipeline
from sim.textgrid import render


def test_text_grid_1f1b():
    text = render(simulate_pipeline("1f1b", 2, 2).result)
    rows = [line.split("|")[1].split() for line in text.splitlines()[1:]]
    assert rows[0] == ["F0", "F1", ".", ".", "B0", "B0", ".", "B1", "B1"]
    assert rows[1] == [".", "F0", "B0", "B0", "F1", "B1", "B1", ".", "."]


def test_text_grid_marks_second_stage_and_fb_halves():
    text = render(simulate_pipeline("dualpipe", 4, 8).result)
    row0 = text.splitlines()[1].split("|")[1].split()
    assert row0[:7] == ["F0", "F1", "F2", "F4'", "I4'", "W4'", "F5'"]
    assert row0[7:10] == ["F3", "B5'", "B5'"]          # [F3 & B5']: forward's slot, then the backward's
    assert text.splitlines()[0].startswith("dualpipe: P=4, M=8, S=4")
