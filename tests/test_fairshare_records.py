"""sim.network.fairshare.records: the solver's named state (fresh records' sizes and types,
growth keeping what was there), and the package's shape: every function takes the records whole
(at most 8 parameters) and no module reaches for another's private names."""
import ast
from pathlib import Path

import numpy as np

from sim.network.fairshare import Flows, Links, Pairs, grown, new_flows, new_links, new_pairs, new_scratch

PACKAGE = Path(__file__).parents[1] / "sim/network/fairshare"


def test_fresh_records_have_the_sizes_and_types_the_kernels_read():
    flows, pairs = new_flows(3), new_pairs(5)
    assert isinstance(flows, Flows) and [a.size for a in flows] == [3] * 5
    assert [a.dtype.kind for a in flows] == ["f", "f", "f", "i", "i"]
    assert isinstance(pairs, Pairs) and [a.dtype.kind for a in pairs] == ["i", "i", "f"]
    assert pairs.weight.tolist() == [1.0] * 5                      # a plain flow weighs 1
    capacity = np.array([2.0, 3.0])
    links = new_links(capacity)
    assert isinstance(links, Links) and links.capacity.tolist() == [2.0, 3.0] and links.capacity is not capacity
    assert [a.dtype.kind for a in links] == ["f", "f", "i", "f", "i", "f", "f", "f", "f"]
    assert all(not a.any() for a in links[1:])                    # idle: no rate, users, tallies
    scratch = new_scratch(4, dirty=7)
    assert (scratch.gen.size, scratch.local.size, scratch.dirty.size) == (4, 4, 7)


def test_a_grown_record_keeps_its_used_entries_and_fills_the_rest():
    pairs = Pairs(np.array([4, 5, 6]), np.array([7, 8, 9]), np.array([0.5, 2.0, 3.0]))
    bigger = grown(pairs, 2, 5, fill=1)
    assert isinstance(bigger, Pairs)
    assert bigger.flow.tolist() == [4, 5, 1, 1, 1] and bigger.weight.tolist() == [0.5, 2.0, 1.0, 1.0, 1.0]
    assert bigger.link.dtype == np.int64 and pairs.flow.size == 3            # the old record is left as it was
    assert grown(new_flows(2), 0, 4).size.tolist() == [0.0] * 4


def test_every_function_of_the_solver_takes_at_most_eight_parameters():
    wide = [f"{path.name}:{node.name}" for path in sorted(PACKAGE.glob("*.py"))
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef) and len(node.args.args) + len(node.args.kwonlyargs) > 8]
    assert wide == []


def test_no_module_of_the_solver_imports_a_private_name():
    private = [f"{path.name}: {alias.name}" for path in sorted(PACKAGE.glob("*.py"))
               for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)
               for alias in node.names if alias.name.startswith("_")]
    assert private == []
