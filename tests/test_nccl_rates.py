"""NCCL's collectives beyond NCCL's own model (sim/network/nccl_rates.py): each GPU's pass over its
own slice, NVLS's rate and latency, worked by hand and on the fabric; their calibration on XLA's
measured H100 collectives."""
import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.checks import InputError
from sim.network import Fabric, hierarchical_all_gather, ring_all_gather, ring_all_reduce, ring_reduce_scatter
from sim.network.collectives import nccl_ring_cost
from sim.network.nccl import NVLS, NVLS_LATENCY_US, RingCost, nvls_port_bytes, ring_cost
from sim.network.nccl_rates import NcclRates, charged
from sim.training.comm.kernels import load_kernels
from topologies import load_topology


def example_rates() -> NcclRates:
    """The rates the cases below work by hand (built in each test, not at import, so that a broken
    NcclRates fails the tests rather than their collection)."""
    return NcclRates(copy_GBps=500.0, reduce_GBps=250.0, nvls_GBps=300.0, nvls_latency_us=40.0)


def nvls_node(tmp_path, nvls=True):
    path = tmp_path / "node.yaml"
    path.write_text(f"kind: hgx_node\ngpus_per_node: 8\nnvlink_bandwidth_GBps: 450\nnvls: {str(nvls).lower()}\n")
    return load_topology(str(path))


def run(op, graph, ranks, nbytes, protocol, rates=None, gpu_rate=None):
    env = simpy.Environment()
    fab = Fabric(env, graph, gpu_rate=gpu_rate, nccl_rates=rates)
    done = op(fab, ranks, nbytes, protocol=protocol)
    env.run(until=done)
    return env.now, fab


# --- by hand ---------------------------------------------------------------------------------------

def test_each_gpus_slice_pass_by_hand():
    """8 MB over 8 GPUs: a 1 MB slice; copied at 500 GB/s 2 us, reduced at 250 GB/s 4 us, an
    all-reduce both (6 us); nothing for one GPU, an empty buffer, or a rate left unset."""
    rates = example_rates()
    assert rates.slice_s("all_gather", 8e6, 8) == pytest.approx(2e-6)
    assert rates.slice_s("reduce_scatter", 8e6, 8) == pytest.approx(4e-6)
    assert rates.slice_s("all_reduce", 8e6, 8) == pytest.approx(6e-6)
    assert rates.slice_s("all_reduce", 8e6, 1) == 0.0 and rates.slice_s("all_gather", 0.0, 8) == 0.0
    assert NcclRates(reduce_GBps=250.0).slice_s("all_gather", 8e6, 8) == 0.0
    assert NcclRates(copy_GBps=500.0).slice_s("all_reduce", 8e6, 8) == pytest.approx(2e-6)


def test_charged_adds_the_pass_and_keeps_ncclss_choice():
    """A ring keeps NCCL's protocol and factor, its latency grows by the pass; NVLS takes its own
    latency and the factor nvls / path (at most 1); no rates, no change."""
    rates = example_rates()
    ring = RingCost("Simple", 30e-6, 1.0)
    out = charged(ring, "all_gather", 8e6, 8, rates, 450.0)
    assert (out.protocol, out.algorithm, out.bandwidth_factor) == ("Simple", ring.algorithm, 1.0)
    assert out.latency_s == pytest.approx(32e-6)
    nvls = RingCost(NVLS, NVLS_LATENCY_US * 1e-6, 1.0, NVLS)
    out = charged(nvls, "all_reduce", 8e6, 8, rates, 450.0)
    assert out.latency_s == pytest.approx(40e-6 + 6e-6) and out.bandwidth_factor == pytest.approx(300 / 450)
    assert charged(nvls, "all_reduce", 8e6, 8, rates, 200.0).bandwidth_factor == 1.0   # the path is slower
    assert charged(ring, "all_gather", 8e6, 8, None, 450.0) is ring
    assert charged(ring, "all_gather", 8e6, 8, NcclRates(), 450.0) is ring


@pytest.mark.parametrize("field", ["copy_GBps", "reduce_GBps", "nvls_GBps"])
@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf"), 2e6])
def test_bad_rates_are_one_line_naming_the_field(field, value):
    with pytest.raises(InputError, match=rf"^NcclRates.{field} \(GB/s\) must be a finite number in \(0, 1,000,000\]"):
        NcclRates(**{field: value})


def test_bad_latency_and_kind_are_one_line():
    rates = example_rates()
    with pytest.raises(InputError, match=r"^NcclRates.nvls_latency_us \(microseconds\) must be a finite number in "
                                         r"\[0, 10,000\], got -1"):
        NcclRates(nvls_latency_us=-1)
    with pytest.raises(InputError, match=r"^collective kind must be one of all_reduce, all_gather, reduce_scatter, "
                                         r"got 'broadcast'$"):
        rates.slice_s("broadcast", 1e6, 8)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["all_gather", "reduce_scatter", "all_reduce"]), st.floats(1.0, 1e10),
       st.integers(2, 1024), st.floats(1.0, 1e4), st.floats(1.0, 1e4))
def test_the_pass_grows_with_the_buffer_and_shrinks_with_the_group(kind, nbytes, ranks, copy, reduce):
    rates = NcclRates(copy_GBps=copy, reduce_GBps=reduce)
    s = rates.slice_s(kind, nbytes, ranks)
    assert s > 0 and math.isfinite(s)
    assert rates.slice_s(kind, 2 * nbytes, ranks) == pytest.approx(2 * s)
    assert rates.slice_s(kind, nbytes, 2 * ranks) == pytest.approx(s / 2)
    assert s <= nbytes / ranks / (min(copy, reduce) * 1e9) * 2 * (1 + 1e-12)


# --- on the fabric ---------------------------------------------------------------------------------

@pytest.mark.parametrize("op, kind", [(ring_all_gather, "all_gather"), (ring_reduce_scatter, "reduce_scatter"),
                                      (ring_all_reduce, "all_reduce")])
def test_a_ring_ends_its_pass_later_exactly(op, kind):
    """On an empty fabric the pass is added before the ring's data, nothing else changes: the time
    with the rates is the time without them plus nbytes / n / rate (both for an all-reduce)."""
    rates = example_rates()
    graph, ranks, nbytes = load_topology("h800-16"), list(range(8)), 4e8
    plain, _ = run(op, graph, ranks, nbytes, "Simple")
    t, fab = run(op, graph, ranks, nbytes, "Simple", rates)
    assert t == pytest.approx(plain + rates.slice_s(kind, nbytes, 8), rel=1e-12)
    cost, _ = nccl_ring_cost(fab, kind, ranks, nbytes, "Simple")
    plain_cost = ring_cost(kind, nbytes, 8, 1, cost_bus(fab), "Simple")
    assert cost.latency_s == pytest.approx(plain_cost.latency_s + rates.slice_s(kind, nbytes, 8))


def cost_bus(fab) -> float:
    return float(fab.links.capacity[fab.links.route(0, 1)[0]].min()) / 1e9


def test_a_hierarchical_all_gather_pays_the_pass_over_all_its_gpus():
    """16 GPUs on 2 nodes: each GPU's slice is nbytes / 16, once for the whole collective."""
    rates = example_rates()
    graph, ranks, nbytes = load_topology("h800-16"), list(range(16)), 1.6e9
    plain, _ = run(lambda f, r, b, protocol: hierarchical_all_gather(f, r, b, 8, protocol), graph, ranks, nbytes,
                   "Simple")
    t, _ = run(lambda f, r, b, protocol: hierarchical_all_gather(f, r, b, 8, protocol), graph, ranks, nbytes,
               "Simple", rates)
    assert t == pytest.approx(plain + 1e8 / 500e9, rel=1e-12)


def test_an_nvls_all_reduce_runs_at_its_own_rate_and_latency(tmp_path):
    """8 GPUs, 1 GB, NVLS: 40 us, the pass over a 125 MB slice (copied 0.25 ms, reduced 0.5 ms),
    then S (n + 1) / n port bytes at 300 GB/s, the NVLink's 450 GB/s notwithstanding."""
    rates = example_rates()
    graph, nbytes = nvls_node(tmp_path), 1e9
    t, fab = run(ring_all_reduce, graph, list(range(8)), nbytes, "auto", rates)
    cost, _ = nccl_ring_cost(fab, "all_reduce", list(range(8)), nbytes, "auto")
    assert cost.protocol == NVLS
    expected = 40e-6 + rates.slice_s("all_reduce", nbytes, 8) + nvls_port_bytes(nbytes, 8) / 300e9
    assert t == pytest.approx(expected, rel=1e-9)
    engine, _ = run(ring_all_reduce, graph, list(range(8)), nbytes, "auto", rates, gpu_rate=200e9)
    assert engine == pytest.approx(40e-6 + rates.slice_s("all_reduce", nbytes, 8) + nvls_port_bytes(nbytes, 8) / 200e9,
                                   rel=1e-9)                # an engine slower than NVLS's rate binds instead


def test_the_choice_stays_ncclss():
    """The rates change what a collective takes, not what NCCL picks: the same protocol with and
    without them, at every size from 1 KB to 1 GB."""
    rates = example_rates()
    graph, ranks = load_topology("dgx-h100-superpod"), list(range(8))
    for nbytes in (1e3, 1e5, 1e6, 1e8, 1e9):
        for kind in ("all_gather", "reduce_scatter", "all_reduce"):
            env = simpy.Environment()
            with_rates = nccl_ring_cost(Fabric(env, graph, nccl_rates=rates), kind, ranks, nbytes, "auto")[0]
            without = nccl_ring_cost(Fabric(env, graph), kind, ranks, nbytes, "auto")[0]
            assert (with_rates.protocol, with_rates.algorithm) == (without.protocol, without.algorithm)


# --- the shipped calibration -----------------------------------------------------------------------

def test_the_shipped_kernels_carry_the_calibrated_rates():
    k = load_kernels("deepep")
    assert k.nccl_gpu_rate == pytest.approx(422.9e9)
    assert k.nccl_rates == NcclRates(612.3, 326.2, 290.5, 35.43)
    assert k.calibrated_from == "experiments/profiles/xla-nccl-h100.csv"
    assert load_kernels("ideal").nccl_rates is None
    assert load_kernels("deepep").with_(nccl_GBps=None).nccl_gpu_rate == pytest.approx(24 * 10.5e9)
