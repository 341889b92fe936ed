"""sim.training.reports.runpage: a run's results page, every claim checked against the CSV it was read from."""
import re

import pandas as pd
import pytest

from sim.cli import main
from sim.training.reports.runpage import captions, conclusion, summary_table


def summary(**over):
    rows = [{"schedule": "1f1b", "step_time_s": 3.0, "tokens_per_s": 1e6, "mfu": 0.2, "max_memory_gb": 40.0,
             "fits_hbm": True, "bubble_share": 0.3, "exposed_comm_share": 0.1},
            {"schedule": "dualpipe", "step_time_s": 2.0, "tokens_per_s": 1.5e6, "mfu": 0.3, "max_memory_gb": 90.0,
             "fits_hbm": False, "bubble_share": 0.1, "exposed_comm_share": 0.01}]
    return pd.DataFrame(rows)


def test_conclusion_names_the_fastest_its_speed_up_and_what_does_not_fit():
    text = conclusion(summary(), hbm_gb=80, skipped={"dualpipev": "needs M >= 2P"})
    assert text.startswith("dualpipe is the fastest: 2 s per step (1.5M tokens/s, MFU 0.30), a speed-up of 1.50x "
                           "over the slowest, 1f1b (3 s).")
    assert "Does not fit: dualpipe (peak 90.0 GB > 80 GB HBM)." in text
    assert text.endswith("Not run: dualpipev (needs M >= 2P).")


def test_the_summary_table_has_units_and_rounded_numbers_fastest_first():
    table = summary_table(summary())
    assert "<th>Step time (s)</th>" in table and "<th>Bubble (% of rank-time)</th>" in table
    assert table.index("dualpipe") < table.index("1f1b")
    assert "<td>10.0</td>" in table and "<td>30.0</td>" in table        # bubble shares in percent


def test_the_wait_for_peers_is_a_column_only_when_a_run_has_some():
    quiet = summary().assign(mean_peer_wait_s=0.0)
    assert "Waiting for peers" not in summary_table(quiet)
    table = summary_table(quiet.assign(mean_peer_wait_s=[1.257, 0.0]))
    assert "<th>Waiting for peers at collectives (s per GPU)</th>" in table and "<td>1.257</td>" in table


def test_link_caption_says_whether_the_all_to_alls_are_drawn():
    measured = captions("x", summary(), None, "measured")["x_link_timeline.png"]
    live = captions("x", summary(), None, "live")["x_link_timeline.png"]
    assert "are not on this fabric" in measured and "every all-to-all" in live


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["run", "tiny", "--microbatches", "6", "--out", str(out)]) == 0
    return out, (out / "index.html").read_text()


def test_run_out_writes_a_page_whose_conclusion_matches_its_csv(page):
    out, html = page
    df = pd.read_csv(out / "tiny_summary.csv")
    best = df.loc[df["step_time_s"].idxmin()]
    worst = df.loc[df["step_time_s"].idxmax()]
    claim = re.search(r'class="conclusion">(\S+) is the fastest: ([0-9.e-]+) s per step.*?a speed-up of '
                      r"([0-9.]+)x over the slowest, (\S+) ", html)
    assert claim is not None, html[:2000]
    assert claim.group(1) == best["schedule"] and float(claim.group(2)) == pytest.approx(best["step_time_s"], rel=1e-3)
    assert float(claim.group(3)) == pytest.approx(worst["step_time_s"] / best["step_time_s"], abs=0.006)
    assert claim.group(4) == worst["schedule"]
    assert "Not run: dualpipe (dualpipe needs an even M &gt;= 2P" in html      # M=6 at P=4: left out, said why


def test_every_figure_once_with_a_caption_from_the_data(page):
    out, html = page
    sources = re.findall(r'<img src="([^"]+)"', html)
    assert sources and len(sources) == len(set(sources))
    assert all((out / s).is_file() for s in sources)
    ranks = pd.read_csv(out / "tiny_ranks.csv")
    for name, g in ranks.groupby("schedule"):
        busy = g["compute_s"] + g["recompute_s"]
        rank = int(g.loc[busy.idxmax(), "rank"])
        assert f"{name}: rank {rank} computes most" in html
    assert "are not on this fabric" in html                              # measured mode, said under the figure


def three():
    """Three schedules, the slowest not the second row: the fastest and the slowest are found by
    step time, not by position."""
    return pd.DataFrame([
        {"schedule": "a", "step_time_s": 2.5, "tokens_per_s": 2e6, "mfu": 0.25, "max_memory_gb": 50.0,
         "fits_hbm": True, "bubble_share": 0.2, "exposed_comm_share": 0.05},
        {"schedule": "b", "step_time_s": 4.0, "tokens_per_s": 1.25e6, "mfu": 0.15, "max_memory_gb": 60.0,
         "fits_hbm": "True", "bubble_share": 0.4, "exposed_comm_share": 0.1},
        {"schedule": "c", "step_time_s": 2.0, "tokens_per_s": 2.5e6, "mfu": 0.3125, "max_memory_gb": 81.25,
         "fits_hbm": "False", "bubble_share": 0.1, "exposed_comm_share": 0.0}])


def test_the_conclusion_read_whole():
    assert conclusion(three()) == ("c is the fastest: 2 s per step (2.5M tokens/s, MFU 0.31), a speed-up of 2.00x "
                                   "over the slowest, b (4 s). Does not fit: c (peak 81.2 GB beyond HBM).")
    assert conclusion(three().iloc[[0]]) == "a: 2.5 s per step (2M tokens/s, MFU 0.25)."     # one schedule: not "the fastest"


def test_the_summary_table_read_whole():
    assert summary_table(three().iloc[[0, 2]]) == (
        "<table><tr><th>Schedule</th><th>Step time (s)</th><th>Throughput (M tokens/s)</th>"
        "<th>MFU (of the GEMM peak)</th><th>Bubble (% of rank-time)</th><th>Exposed communication (% of step)</th>"
        "<th>Peak memory (GB)</th><th>Fits HBM</th></tr>"
        "<tr><td>c</td><td>2</td><td>2.5</td><td>0.312</td><td>10.0</td><td>0.0</td><td>81.2</td><td>False</td></tr>"
        "<tr><td>a</td><td>2.5</td><td>2</td><td>0.250</td><td>20.0</td><td>5.0</td><td>50.0</td><td>True</td></tr>"
        "</table>")


def test_the_captions_read_whole():
    ranks = pd.DataFrame({"schedule": ["a", "a", "c", "c"], "rank": [0, 1, 0, 1], "compute_s": [1.0, 1.5, 2.0, 1.0],
                          "recompute_s": [0.75, 0.0, 0.0, 0.5]})
    got = captions("x", three().iloc[[0, 2]], ranks, "measured")
    assert got == {
        "x_ranks.png": "Where each rank's step goes, stacked seconds per schedule (compute, recompute, exposed "
                       "all-to-all, pipeline transfer, DP sync, optimizer, bubble); a: rank 0 computes most (1.75 s); "
                       "c: rank 0 computes most (2 s).",
        "x_fb_unit_a.png": "a: one forward-and-backward unit of a middle rank, its compute stream above its "
                           "communication stream (milliseconds).",
        "x_fb_unit_c.png": "c: one forward-and-backward unit of a middle rank, its compute stream above its "
                           "communication stream (milliseconds).",
        "x_link_timeline.png": "The step fabric's busiest links over the step, per schedule: pipeline sends and "
                               "data-parallel traffic only. The all-to-alls were measured apart (communication: "
                               "measured) and are not on this fabric; --communication live puts them here."}
    assert captions("x", three(), ranks.drop(columns="recompute_s"), "live")["x_ranks.png"].endswith(
        "a: rank 1 computes most (1.5 s); c: rank 0 computes most (2 s).")
    assert captions("x", three(), None, "live")["x_link_timeline.png"] == (
        "The step fabric's busiest links over the step, per schedule: pipeline sends, data-parallel traffic and "
        "every all-to-all (live communication).")


def test_a_page_from_its_files(tmp_path):
    """build_run_page reads the summary and ranks CSVs and shows only the figures that exist."""
    from sim.training.reports.runpage import build_run_page, write_run_page
    three().to_csv(tmp_path / "x_summary.csv", index=False)
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "x_fb_unit_c.png").write_bytes(b"png")
    page = build_run_page(tmp_path, "x", "my <run>", "simulated: this", 80, {"d": "needs M >= 2P"})
    assert page.startswith('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>my &lt;run&gt;</title>')
    assert "<h1>my &lt;run&gt;</h1>" in page and page.endswith("</body></html>\n")
    assert '<p class="conclusion">c is the fastest' in page and "Not run: d (needs M &gt;= 2P).</p>" in page
    assert "<p>simulated: this</p>" in page and "peak 81.2 GB &gt; 80 GB HBM" in page
    assert '<a href="x_summary.csv">x_summary.csv</a>' in page and '<a href="x_ranks.csv">x_ranks.csv</a>' in page
    assert re.findall(r'<img src="([^"]+)"', page) == ["figures/x_fb_unit_c.png"]
    assert '<figcaption>c: one forward-and-backward unit' in page
    written = write_run_page(tmp_path, "x", "my <run>", "simulated: this", 80, {"d": "needs M >= 2P"})
    assert written == tmp_path / "index.html" and written.read_text() == page
    assert "<p>simulated" not in build_run_page(tmp_path, "x", "t")


def test_rounding_ties_and_every_spelling_of_true():
    """1.235M tokens/s shows as 1.24 (1e6, not a near miss); the same step time keeps the input
    order; "true" and 1 mean it fits as True does; two unfit and two skipped schedules are listed
    with their separators."""
    df = pd.DataFrame([
        {"schedule": "x", "step_time_s": 1.0, "tokens_per_s": 1.235e6, "mfu": 0.2, "max_memory_gb": 1.0,
         "fits_hbm": "true"},
        {"schedule": "y", "step_time_s": 1.0, "tokens_per_s": 1.235e6, "mfu": 0.2, "max_memory_gb": 1.0,
         "fits_hbm": 1},
        {"schedule": "z", "step_time_s": 3.0, "tokens_per_s": 1e6, "mfu": 0.1, "max_memory_gb": 99.0,
         "fits_hbm": False},
        {"schedule": "w", "step_time_s": 2.0, "tokens_per_s": 1e6, "mfu": 0.1, "max_memory_gb": 98.0,
         "fits_hbm": "False"}])
    assert conclusion(df, 80, {"p": "one", "q": "two"}) == (
        "x is the fastest: 1 s per step (1.24M tokens/s, MFU 0.20), a speed-up of 3.00x over the slowest, z (3 s). "
        "Does not fit: w (peak 98.0 GB > 80 GB HBM), z (peak 99.0 GB > 80 GB HBM). Not run: p (one); q (two).")


def test_captions_follow_the_schedules_order_and_the_pages_mode(tmp_path):
    from sim.training.reports.runpage import build_run_page, write_run_page
    ranks = pd.DataFrame({"schedule": ["c", "a"], "rank": [0, 0], "compute_s": [1.0, 2.0], "recompute_s": [0.0, 0.0]})
    assert captions("x", three(), ranks, "measured")["x_ranks.png"].endswith(
        "c: rank 0 computes most (1 s); a: rank 0 computes most (2 s).")
    summary = three().iloc[[0, 1]].assign(communication=["live", "measured"])
    summary.to_csv(tmp_path / "x_summary.csv", index=False)
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "x_link_timeline.png").write_bytes(b"png")
    assert "every all-to-all (live communication)" in build_run_page(tmp_path, "x", "t")
    three().to_csv(tmp_path / "x_summary.csv", index=False)             # no communication column: measured
    page = build_run_page(tmp_path, "x", "t")
    assert "are not on this fabric" in page
    assert re.search(r'class="conclusion">[^<]*</p><table><tr><th>Schedule</th>', page)   # no recipe unless given
    assert "</table><p>Every number:" in page and "</p><figure>" in page
    assert re.search(r'class="conclusion">[^<]*</p><table>', write_run_page(tmp_path, "x", "t").read_text())
