"""sim.moe.runpage: a run's results page, every claim checked against the CSV it was read from."""
import re

import pandas as pd
import pytest

from sim.cli import main
from sim.moe.runpage import captions, conclusion, summary_table


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
