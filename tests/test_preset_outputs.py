"""``run --out`` and ``--trace`` on every topology preset and every example scenario, a small layout
each: the files a user's first copy-paste writes (CSV, figures, the results page, a Chrome trace with
the link timeline's counters) exist and read back, whatever the cluster's NVLink and NIC speeds."""
import csv
import json
from pathlib import Path

import pytest

from sim.cli import main
from sim.training.model.example import example_yaml
from topologies.presets import preset_names, read_spec

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = preset_names() + [str(ROOT / "examples" / "h100-256.yaml")]
# Each example scenario cut to a small layout of its own model and cluster (16 GPUs at most).
SCENARIOS = {
    "deepseek-v3": ["--pp", "2", "--dp", "8", "--ep", "8", "--microbatches", "4"],
    "tiny": [],
    "llama3-70b": ["--pp", "2", "--dp", "1", "--microbatches", "4", "--schedule", "interleaved-1f1b"],
    str(ROOT / "examples" / "qwen3-on-h100.yaml"): ["--pp", "2", "--dp", "8", "--ep", "8", "--microbatches", "4"],
    "template": ["--pp", "2", "--dp", "8", "--ep", "8", "--microbatches", "4"],
}


def check_outputs(folder: Path, stem: str, trace: Path, schedule: str, moe: bool = True) -> None:
    """The files of ``run --out folder --trace trace``, each read back (the all-to-alls' links table
    only for an MoE model)."""
    with open(folder / f"{stem}_summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["schedule"] for r in rows] == [schedule] and float(rows[0]["step_time_s"]) > 0
    for name in (f"{stem}_ranks.csv", f"{stem}_link_timeline.csv", f"{stem}_events_{schedule}.csv",
                 *([f"{stem}_links.csv"] if moe else [])):
        assert (folder / name).stat().st_size > 0, name
    assert (folder / "figures" / f"{stem}_link_timeline.png").stat().st_size > 5000
    assert "<html" in (folder / "index.html").read_text().lower()
    events = json.loads(trace.read_text())["traceEvents"]
    kinds = {e.get("ph") for e in events}
    assert {"X", "C"} <= kinds         # the ranks' parts and the links' load counters


@pytest.mark.parametrize("topology", TOPOLOGIES, ids=lambda t: Path(t).stem)
def test_out_and_trace_on_every_topology_preset(topology, tmp_path, capsys):
    spec = read_spec(topology)
    gpus = spec.get("gpus_per_node") or spec.get("gpus_per_domain")
    layout = ["--pp", "2", "--dp", "4", "--ep", "4"] if gpus == 8 and spec.get("nodes") is None else []
    code = main(["run", "tiny", "--topology", topology, "--gpu", spec["gpu"], *layout, "--schedule", "1f1b",
                 "--out", str(tmp_path), "--trace", str(tmp_path / "t.json")])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "Traceback" not in out.err and "warning: gpu" not in out.err
    check_outputs(tmp_path, "tiny", tmp_path / "t.json", "1f1b")


@pytest.mark.parametrize("scenario", list(SCENARIOS), ids=lambda s: Path(s).stem)
def test_out_and_trace_on_every_example_scenario(scenario, tmp_path, capsys):
    if scenario == "template":              # run --example's template, as a user saves it
        (tmp_path / "my.yaml").write_text(example_yaml())
        scenario_arg, stem = str(tmp_path / "my.yaml"), "my"
    else:
        scenario_arg, stem = scenario, Path(scenario).stem.replace("-", "_")
    out_dir = tmp_path / "out"
    args = SCENARIOS[scenario] if "--schedule" in SCENARIOS[scenario] else [*SCENARIOS[scenario], "--schedule", "1f1b"]
    code = main(["run", scenario_arg, *args, "--out", str(out_dir), "--trace", str(tmp_path / "t.json")])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "Traceback" not in out.err
    check_outputs(out_dir, stem, tmp_path / "t.json", args[args.index("--schedule") + 1],
                  moe=scenario != "llama3-70b")
