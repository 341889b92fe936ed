"""experiments/results_page.py: the page shows what exists, and every image and link it names exists."""
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd

from experiments import plots, results_page, schedule_comparison


class References(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.links, self.sections = [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a["src"])
        elif tag == "a" and not a["href"].startswith("#"):
            self.links.append(a["href"])
        elif tag == "section":
            self.sections.append(a["id"])


def parse(page: Path) -> References:
    refs = References()
    refs.feed(page.read_text(encoding="utf-8"))
    return refs


def test_page_references_only_files_that_exist(tmp_path):
    schedule_comparison.main(["--out", str(tmp_path)])
    pd.DataFrame([{"id": "L5", "claim": "1F1B bubble = (P-1) x F", "figures": "idle=21", "verdict": "does not hold",
                   "explanation": "<b>drops</b> the backward"}]).to_csv(tmp_path / "lesson_check.csv", index=False)
    (tmp_path / "figures").mkdir(exist_ok=True)
    (tmp_path / "figures" / "my_extra.png").write_bytes(b"\x89PNG\r\n")
    plots.main(["--results", str(tmp_path)])
    assert results_page.main(["--results", str(tmp_path)]) == 0
    page = tmp_path / "index.html"
    refs = parse(page)
    assert refs.images and refs.links
    for ref in refs.images + refs.links:
        assert (tmp_path / ref).is_file(), ref
    figures = {p.name for p in (tmp_path / "figures").glob("*.png")}
    assert {Path(src).name for src in refs.images} == figures         # every figure is shown
    assert refs.sections == ["timelines", "comparison", "lesson", "other"]      # no DeepSeek CSVs: no such section
    text = page.read_text()
    assert "&lt;b&gt;drops&lt;/b&gt;" in text and "<b>drops" not in text   # CSV text is escaped
    assert 'class="text verdict-does"' in text


def test_an_empty_results_folder_gives_a_page_that_says_so(tmp_path):
    assert results_page.main(["--results", str(tmp_path)]) == 0
    assert "No results yet" in (tmp_path / "index.html").read_text()
    assert parse(tmp_path / "index.html").images == []
