"""sim.cli.search: python -m sim search-schedule end to end on the tiny scenario."""
import json

import pytest

from sim.cli import main


def test_search_writes_the_table_and_the_orders(tmp_path, capsys):
    code = main(["search-schedule", "tiny", "--budget", "300", "--starts", "dualpipe,1f1b", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "tiny: orders searched under 85.52 GB per GPU, 300 moves per start, seed 0" in out
    assert "best: searched from " in out
    assert (tmp_path / "search.csv").exists()
    order = json.loads((tmp_path / "search-1f1b.json").read_text())
    assert order["schedule"] == "searched from 1f1b" and order["pp"] == 4
    code = main(["run", "tiny", "--schedule", str(tmp_path / "search-1f1b.json"), "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["step_time_s"] > 0


def test_search_json(capsys):
    assert main(["search-schedule", "tiny", "--budget", "50", "--starts", "dualpipe", "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["memory_limit_gb"] == 85.52 and js["best"]["start"] == "dualpipe" and js["best_order"]["pp"] == 4


def test_bad_search_input_is_one_line(capsys):
    for argv in (["--budget", "0"], ["--starts", "warp"]):      # argparse: exit 2 with one line
        with pytest.raises(SystemExit) as stop:
            main(["search-schedule", "tiny", *argv])
        assert stop.value.code == 2
    assert main(["search-schedule", "tiny", "--memory-limit-gb", "1", "--budget", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3
    assert "--budget" in err[0] and "unknown start(s) warp" in err[1]
    assert "memory limit 1 GB is below what one micro-batch needs" in err[2]


def test_the_parsers_defaults_are_the_searchs():
    from sim.cli import search as cli
    from sim.training import search
    assert (cli.DEFAULT_BUDGET, cli.MAX_BUDGET, cli.STARTS) == (search.DEFAULT_BUDGET, search.MAX_BUDGET,
                                                                 search.STARTS)
