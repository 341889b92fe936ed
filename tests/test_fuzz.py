"""Fuzzing the command line and the YAML loaders, the way a careless user or a script would.

Every command is run in process through :func:`sim.cli.main` with values drawn from numbers that
break naive code (nan, inf, negatives, zero, huge, non-numbers, empty strings) and random field
names. The rules (docs/testing.md: Input checks, limits and failures): the exit status is 0 (a valid result), 1 (no
answer) or 2 (bad input, one line); never a traceback, never status 3 (a bug), never more than a
few seconds. The loaders raise :class:`sim.checks.InputError` or return a checked object.
"""
from __future__ import annotations

import contextlib
import io
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.checks import InputError
from sim.cli import main
from sim.training.model.specs import load_scenario
from sim.training.scenario import Scenario
from topologies.presets import load_topology

SECONDS = 10.0    # "a few seconds" on a loaded 2-core CI machine; a hang would take minutes

NASTY = ["nan", "NaN", "inf", "-inf", "1e308", "-1e308", "0", "-0", "-1", "-3", "1e12", "100000000", "",
         " ", "x", "1,2", "0x10", "1e-320", "true", "None", "3.5", "2**64", "18446744073709551617", "--",
         "\u00e9", "1_000", "0.0"]
SMALL = ["1", "2", "3", "4", "8", "16"]


def values() -> st.SearchStrategy[str]:
    """Strings a flag may receive: nasty tokens, small valid integers, and random floats/ints/text."""
    return st.one_of(
        st.sampled_from(NASTY), st.sampled_from(SMALL), st.sampled_from(SMALL),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.integers(min_value=-10**20, max_value=10**20).map(str),
        st.text(max_size=8))


def run_cli(argv: list[str]) -> tuple[int, str, float]:
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as stop:              # argparse's own usage errors
            rc = stop.code if isinstance(stop.code, int) else 2
    return rc, out.getvalue() + err.getvalue(), time.perf_counter() - start


TEST_LIMITS = ["--max-ops", "20000", "--max-parts", "500000"]


def check(argv: list[str]) -> None:
    """The rules above, with size limits at test scale (the defaults admit runs of a minute or
    more, which are valid work, not hangs) unless the command draws its own."""
    if len(argv) > 1 and argv[0] in ("schedule", "simulate", "compare", "run", "plan") and \
            not any(a.startswith("--max-") for a in argv):
        argv = argv + TEST_LIMITS
    rc, text, seconds = run_cli(argv)
    assert "Traceback" not in text, (argv, text)
    assert rc in (0, 1, 2), (argv, rc, text)
    assert seconds < SECONDS, (argv, seconds)
    if rc == 2:
        error_lines = [line for line in text.splitlines() if "error" in line]
        assert len(error_lines) == 1, (argv, text)


SCHEDULES = st.sampled_from(["1f1b", "zb-h1", "dualpipe", "dualpipev", "interleaved", "bogus", ""])


def commands() -> st.SearchStrategy[list[str]]:
    v = values()
    return st.one_of(
        st.builds(lambda s, p, m: ["schedule", s, "--pp", p, "--microbatches", m], SCHEDULES, v, v),
        st.builds(lambda s, p, m, f, c: ["simulate", "--schedule", s, "--pp", p, "--microbatches", m,
                                         "--cost", f"F={f},I={c},W=1"], SCHEDULES, v, v, v, v),
        st.builds(lambda p, m, c: ["compare", "--pp", p, "--microbatches", m, "--chunks", c], v, v, v),
        st.builds(lambda s, d, b: ["collective", "p2p", "--topology", "h800-16", "--src", s, "--dst", d,
                                   "--bytes", b], v, v, v),
        st.builds(lambda flag, x: ["collective", "all-to-all", "--topology", "h800-16", "--ep", "16",
                                   "--tokens", "64", flag, x],
                  st.sampled_from(["--hidden", "--skew", "--topk", "--experts", "--bytes-per-elem",
                                   "--scale-bytes", "--node-limit", "--chunks", "--completion-window",
                                   "--seed", "--groups"]), v),
        st.builds(lambda flag, x: ["collective", "all-reduce", "--topology", "h800-16", flag, x],
                  st.sampled_from(["--ranks", "--bytes"]), v),
        st.builds(lambda s, flag, x: ["run", "tiny", "--schedule", s, flag, x],
                  st.sampled_from(["1f1b", "dualpipe"]),
                  st.sampled_from(["--pp", "--ep", "--dp", "--microbatches", "--skew", "--seed", "--workers",
                                   "--zero-stage", "--memory-policy", "--topology", "--max-ops", "--max-parts",
                                   "--comm-sms", "--kernels", "--slow-gpu", "--jitter", "--fail-link",
                                   "--degrade-link", "--slow-fraction", "--fault-seed"]), v),
        st.builds(lambda flag, x: ["calibrate", "experiments/profiles/deepep-h800.csv", "--topology", "h800-16",
                                   flag, x], st.sampled_from(["--fit", "--base", "--scenario", "--topology"]), v),
        st.builds(lambda x: ["calibrate", x], v),
        st.builds(lambda flag, x: ["plan", "--gpus", "16", "--model", "tiny-moe", "--topology", "h800-16",
                                   "--serial", "--top", "1", flag, x],
                  st.sampled_from(["--gpus", "--global-batch", "--seq-len", "--microbatch-size", "--pp", "--ep",
                                   "--schedules", "--node-limit", "--head-cuts", "--top", "--zero-stage"]), v),
        st.lists(st.text(max_size=6), max_size=4),
    )


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(commands())
def test_cli_never_tracebacks_or_hangs(argv):
    check(argv)


def test_the_issue_examples_are_refused_in_one_line():
    """Inputs that once gave a traceback, a hang or a confident wrong answer."""
    for argv in (["schedule", "1f1b", "--pp", "100000", "--microbatches", "100000"],
                 ["collective", "p2p", "--topology", "h800-16", "--src", "0", "--dst", "1", "--bytes", "inf"],
                 ["collective", "p2p", "--topology", "h800-16", "--src", "3", "--dst", "3", "--bytes", "1e6"],
                 ["collective", "all-to-all", "--topology", "h800-16", "--ep", "16", "--hidden", "0"],
                 ["simulate", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8",
                  "--cost", "F=1e308,B=1e308,W=1e308"],
                 ["run", "tiny", "--schedule", "1f1b", "--skew", "nan"],
                 ["run", "tiny", "--schedule", "1f1b", "--skew", "inf"],
                 ["run", "tiny", "--microbatches", "100000000"],
                 ["run", "tiny", "--workers", "0"],
                 ["plan", "--gpus", "0", "--model", "tiny-moe", "--topology", "h800-16"],
                 ["run", "tiny", "--schedule", "1f1b", "--degrade-link", "node:n0/nic0=5e-324"]):
        rc, text, seconds = run_cli(argv)
        assert rc == 2 and "Traceback" not in text and seconds < SECONDS, (argv, rc, text)


NUMERIC_FIELDS = ["gemm_efficiency", "attention_efficiency", "hbm_efficiency", "comm_sms", "a2a_chunks", "seq_len",
                  "microbatch_size", "microbatches", "routing_skew", "weight_bytes", "grad_bytes", "optimizer_bytes",
                  "memory_reserve_gb", "first_stage_layers", "last_stage_layers"]
EXTREMES = [5e-324, 1e-310, 1e-300, 1e-12, 1e-3, 0.5, 1, 3, 1e3, 1e6, 1e9, 1e12, 1e300, 0, -1, 1.5]


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(NUMERIC_FIELDS), st.sampled_from(EXTREMES), min_size=1, max_size=3),
       st.sampled_from([[], ["--communication", "live"], ["--jitter", "0.2"], ["--kernels", "deepep"]]))
def test_scenario_files_with_extreme_numbers_run_to_an_answer_or_one_line(tmp_path, change, flags):
    """The property test above only assembles a scenario; this one runs it to the end, where a
    value that passed the checks once hung the run (infinite attention time) or printed a step
    of 1e295 s: the CLI's rules hold, and a step it prints is under a year."""
    argv = ["run", write(tmp_path, "scenario.yaml", {**TINY, **change}), "--schedule", "1f1b", "--json", *flags]
    check(argv)
    rc, text, _ = run_cli(argv + TEST_LIMITS)
    if rc == 0:
        import json
        result, _ = json.JSONDecoder().raw_decode(text)       # stdout first; a progress bar may follow
        assert 0 < result["step_time_s"] < 3.2e7, (change, text)


@pytest.mark.parametrize("field,value", [
    ("attention_efficiency", 5e-324),     # attention took inf s: the clock reached inf and the fabric spun there
    ("gemm_efficiency", 1e-300),          # a step of 4.5e295 s, printed as a result
    ("hbm_efficiency", 1e-310),
    ("weight_bytes", 1e300),              # refused, but by a message that did not name the field
    ("microbatch_size", 10 ** 8),         # the same
])
def test_tiny_efficiencies_and_huge_sizes_in_a_scenario_file_are_refused(tmp_path, field, value):
    """Values that once hung the run or gave an absurd step, found by running fuzzed scenario
    files to the end (the property test above only assembles them)."""
    rc, text, seconds = run_cli(["run", write(tmp_path, "scenario.yaml", {**TINY, field: value}), "--schedule", "1f1b"])
    assert rc == 2 and f"RunSpec.{field}" in text and seconds < SECONDS, (rc, text)
    assert len([line for line in text.splitlines() if "error" in line]) == 1


@pytest.mark.parametrize("field", ["nvlink_bandwidth_GBps", "nic_bandwidth_GBps"])
def test_a_link_slower_than_a_megabyte_per_second_is_refused(tmp_path, field):
    """A NIC of 5e-324 GB/s made a transfer's end -inf ("Negative delay", a traceback)."""
    rc, text, _ = run_cli(["run", "tiny", "--schedule", "1f1b", "--topology",
                           write(tmp_path, "topology.yaml", {**H800_16, field: 5e-324})])
    assert rc == 2 and f"{field} (GB/s) must be a finite number in [0.001, 1,000,000], got 5e-324" in text, text


def test_run_header_names_the_layout_it_ran():
    rc, text, _ = run_cli(["run", "tiny", "--schedule", "1f1b", "--pp", "2", "--dp", "2", "--ep", "2"])
    assert rc == 0
    header = text.splitlines()[0]           # what ran, from the spec: not the scenario's description
    assert header.startswith("simulated: tiny-moe on 4 h800 of h800-16 (PP2 x DP2, EP2)") and "PP4" not in header


# --- YAML loaders ---------------------------------------------------------------------------------

TINY = {"description": "fuzzed", "model": "tiny-moe", "gpu": "h800", "topology": "h800-16", "pp": 4, "ep": 4,
        "dp": 4, "schedule": "1f1b", "microbatch_size": 1, "microbatches": 8, "seq_len": 512, "node_limit": 1}
H800_16 = {"name": "fuzzed", "kind": "fat_tree", "gpu": "h800", "nodes": 2, "gpus_per_node": 8,
           "nvlink_bandwidth_GBps": 160, "nic_bandwidth_GBps": 50, "switch_radix": 64, "oversubscription": 1,
           "rail_optimized": True, "planes": 8}
YAML_VALUES = st.one_of(
    st.sampled_from([1, 2, 4, 8, 0.5, "1f1b", "dualpipe", "h800", "tiny-moe", "deepseek-v3", "h800-16"]),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-10**30, max_value=10**30),
    st.booleans(), st.none(), st.text(max_size=6), st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(-3, 3), max_size=2))


def mutated(base: dict) -> st.SearchStrategy[dict]:
    keys = st.one_of(st.sampled_from(sorted(base)), st.text(min_size=1, max_size=10))
    return st.dictionaries(keys, YAML_VALUES, min_size=1, max_size=3).map(lambda change: {**base, **change})


def write(tmp_path, name: str, mapping: dict) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(mapping), encoding="utf-8")
    return str(path)


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mutated(TINY))
def test_scenario_yaml_is_refused_or_assembles(tmp_path, mapping):
    start = time.perf_counter()
    try:
        Scenario(load_scenario(write(tmp_path, "scenario.yaml", mapping)))
    except InputError as exc:
        assert "\n" not in str(exc)
    assert time.perf_counter() - start < SECONDS


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mutated(H800_16))
def test_topology_yaml_is_refused_or_builds(tmp_path, mapping):
    start = time.perf_counter()
    try:
        graph = load_topology(write(tmp_path, "topology.yaml", mapping))
    except InputError as exc:
        assert "\n" not in str(exc)
    else:
        assert graph.graph["gpus"], mapping
        for _, _, data in graph.edges(data=True):
            assert 0 < data["bandwidth"] < float("inf") and 0 <= data["latency"] < 1
    assert time.perf_counter() - start < SECONDS
