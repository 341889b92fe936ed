"""sim.limits' memory estimate: a run far beyond the memory budget is refused in one line, before
anything is built; within it, nothing is said."""
import subprocess
import sys

import pytest

from sim import limits
from sim.limits import TooLarge, check_memory, run_memory_gb
from topologies import load_topology

BIG = """name: big
kind: fat_tree
gpu: h800
nodes: {nodes}
gpus_per_node: 8
nvlink_bandwidth_GBps: 160
nic_bandwidth_GBps: 50
switch_radix: {radix}
oversubscription: 1
rail_optimized: true
planes: 8
"""


def test_the_estimate_is_linear_in_graph_nodes():
    assert run_memory_gb(0) == limits.MEMORY_BASE_GB
    assert run_memory_gb(2_000_000) - run_memory_gb(1_000_000) == pytest.approx(1e6 * limits.MEMORY_GB_PER_GRAPH_NODE)


def test_a_run_beyond_the_budget_is_refused_naming_the_estimate_and_what_to_change():
    with limits.raised(max_memory_gb=2):
        check_memory(100_000, "a cluster")                  # 1.9 GB: within 2 GB
        with pytest.raises(TooLarge) as err:
            check_memory(280_696, "topology 'h800-128k'")
    text = str(err.value)
    assert "\n" not in text
    for part in ("topology 'h800-128k'", "3.5 GB", "280,696 graph nodes", "the limit of 2 GB", "--mode representative",
                 "--workers 1", "--scheduler", "--max-memory-gb"):
        assert part in text


def test_a_topology_far_beyond_this_machines_memory_is_refused_before_it_is_built(tmp_path):
    """12.6M GPUs (25.6M graph nodes: about 240 GB) against what this machine has available."""
    path = tmp_path / "big.yaml"
    path.write_text(BIG.format(nodes=1_572_864, radix=2048))
    with limits.raised(max_graph_nodes=10**9), pytest.raises(TooLarge, match="this machine has available"):
        load_topology(str(path))


def test_the_command_line_says_it_in_one_line_with_exit_status_2(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(BIG.format(nodes=4096, radix=92))       # 32,768 GPUs: about 1.6 GB
    out = subprocess.run([sys.executable, "-m", "sim", "run", "tiny", "--topology", str(path), "--max-memory-gb", "1"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "needs about 1.6 GB" in lines[0] and "the limit of 1 GB" in lines[0]
    assert "Traceback" not in out.stderr
