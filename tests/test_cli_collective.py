"""sim.cli.collective: python -m sim collective, JSON and text, clean errors."""
import json

import pytest

from sim.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_all_to_all_json(capsys):
    code, out, _ = run(capsys, "collective", "all-to-all", "--topology", "h800-64", "--ep", "64", "--tokens", "4096",
                       "--hidden", "7168", "--topk", "8", "--bytes-per-elem", "1", "--node-limit", "4",
                       "--algorithm", "hierarchical", "--json")
    assert code == 0
    js = json.loads(out)
    assert {"time_s", "bytes_per_gpu", "algbw_gbps", "busiest_links"} <= set(js)
    assert 1e-3 < js["time_s"] < 5e-3
    assert js["busiest_links"][0]["bytes"] >= js["busiest_links"][-1]["bytes"]


def test_p2p_and_all_reduce_text(capsys, tmp_path):
    code, out, _ = run(capsys, "collective", "p2p", "--topology", "h800-16", "--src", "0", "--dst", "8",
                       "--bytes", "1e8", "--links-csv", str(tmp_path / "l.csv"))
    assert code == 0 and "2002.8 us" in out and (tmp_path / "l.csv").exists()
    code, out, _ = run(capsys, "collective", "all-reduce", "--topology", "h800-16", "--ranks", "0-7", "--bytes", "1e9")
    assert code == 0 and "busiest links" in out


def test_an_all_reduce_on_an_nvls_node_says_what_nccl_runs(capsys):
    """docs/network.md quotes these two lines: 100 MB over 8 H100s as NVLS, then as a Simple ring."""
    argv = ["collective", "all-reduce", "--topology", "dgx-h100-superpod", "--ranks", "0-7", "--bytes", "1e8"]
    code, out, _ = run(capsys, *argv)
    assert code == 0 and out.splitlines()[0] == "all-reduce on dgx-h100-superpod (8 GPUs, NCCL NVLS): 273.0 us"
    code, out, _ = run(capsys, *argv, "--nccl-protocol", "Simple")
    assert out.splitlines()[0] == "all-reduce on dgx-h100-superpod (8 GPUs, NCCL ring, Simple): 444.9 us"
    code, out, _ = run(capsys, *argv, "--json")
    assert json.loads(out)["nccl"] == "NVLS"


@pytest.mark.parametrize("argv,pattern", [
    (["collective", "p2p", "--topology", "h800-16", "--src", "0", "--dst", "99", "--bytes", "1"], "out of range"),
    (["collective", "p2p", "--topology", "h800-16", "--src", "0"], "needs --dst"),
    (["collective", "all-reduce", "--topology", "h800-16", "--ranks", "0", "--bytes", "1"], "at least two distinct"),
    (["collective", "all-to-all", "--topology", "h800-16", "--ep", "64"], "needs 64 GPUs"),
    (["collective", "all-to-all", "--topology", "nowhere"], "unknown topology 'nowhere'"),
    (["collective", "all-to-all", "--topology", "h800-64", "--ep", "48"], "ep must divide num_experts"),
])
def test_errors(capsys, argv, pattern):
    code, _, err = run(capsys, *argv)
    assert code == 2 and pattern in err and "Traceback" not in err
