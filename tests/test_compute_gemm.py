"""sim.compute.gemm: a GEMM's time by shape, worked by hand and as properties (monotone in every size,
never faster than the roofline)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.compute.gemm import SPLIT_PARTIAL_BYTES, GemmFit, gemm_bound, gemm_seconds
from sim.checks import InputError

FIT = GemmFit(rate_tflops=800.0, k0=128.0, fixed_us=5.0)
H100 = dict(sms=132, gpu_sms=132, in_bytes=2.0, out_bytes=2.0, hbm_bytes_per_s=3.35e12 * 0.7)


def test_one_wave_of_full_tiles_by_hand():
    """132 tiles of 128 x 256 fill the 132 SMs once: m = 128 x 132... as 11 x 12 tiles of 256 rows and
    128 columns, or any tile whose count is 132. m = 2816 (11 x 256), n = 1536 (12 x 128), k = 4096:
    each SM runs one 256 x 128 tile of 2 x 256 x 128 x (4096 + 128) FLOPs at 800/132 TFLOPS; no
    split wins (splits add waves). Memory: (m k + k n + m n) x 2 bytes, far below."""
    m, n, k = 2816, 1536, 4096
    tile = 2 * 256 * 128 * (k + 128) / (800e12 / 132)
    assert gemm_seconds(FIT, m, n, k, **H100) == pytest.approx(5e-6 + tile, rel=1e-12)
    assert gemm_bound(FIT, m, n, k, **H100) == "compute"


def test_a_partial_wave_costs_a_whole_one():
    """128 more rows than 132 tiles of 128 x 128 hold: the best tiling is 266 tiles of 64 x 128, three
    waves of half-sized tiles, 1.5 times the 132 tiles' one wave (a second wave of 128 x 128 tiles
    would double it; splitting k adds partial sums that cost more)."""
    kw = {**H100, "in_bytes": 0.0, "out_bytes": 0.0}
    full = gemm_seconds(FIT, 128 * 132, 128, 4096, **kw) - 5e-6
    one_more = gemm_seconds(FIT, 128 * 133, 128, 4096, **kw) - 5e-6
    assert full == pytest.approx(2 * 128 * 128 * (4096 + 128) / (800e12 / 132), rel=1e-12)
    assert one_more == pytest.approx(1.5 * full, rel=1e-12)


def test_few_tiles_split_k_and_pay_for_their_partial_sums():
    """A 128 x 128 output with k = 65,536: two 64 x 128 tiles, each split 16 ways: 32 units in one
    wave, each k/16 + k0 long, plus 16 FP32 partial sums of the output written and read back."""
    m = n = 128
    k = 65536
    per_sm = 800e12 / 132
    split = 2 * 64 * 128 * (k / 16 + 128) / per_sm + m * n * 16 * SPLIT_PARTIAL_BYTES / H100["hbm_bytes_per_s"]
    unsplit = 2 * 64 * 128 * (k + 128) / per_sm
    assert split < unsplit
    kw = {**H100, "in_bytes": 0.0, "out_bytes": 0.0}
    assert gemm_seconds(FIT, m, n, k, **kw) == pytest.approx(5e-6 + split, rel=1e-12)


def test_a_skinny_gemm_is_bound_by_reading_its_weights():
    """64 rows against a 16,384 x 16,384 weight: the weight's 512 MB at the HBM rate dominate."""
    t = gemm_seconds(FIT, 64, 16384, 16384, **H100)
    weights = 16384 * 16384 * 2 / H100["hbm_bytes_per_s"]
    assert t > weights and gemm_bound(FIT, 64, 16384, 16384, **H100) == "hbm"
    assert gemm_bound(FIT, 16, 16, 16, **H100) == "launch"


def test_fewer_sms_are_slower_in_proportion_when_the_waves_are_many():
    big = dict(m=16384, n=16384, k=8192)
    all_sms = gemm_seconds(FIT, **big, **H100) - 5e-6
    fewer = gemm_seconds(FIT, **big, **{**H100, "sms": 112}) - 5e-6
    assert fewer / all_sms == pytest.approx(132 / 112, rel=0.03)


def test_arrays_give_what_scalars_give():
    ms, ns, ks = [256, 4096, 777], [512, 1024, 3000], [64, 8192, 999]
    vec = gemm_seconds(FIT, ms, ns, ks, **H100)
    assert list(vec) == [gemm_seconds(FIT, m, n, k, **H100) for m, n, k in zip(ms, ns, ks)]


def test_a_fit_faster_than_the_peak_is_refused():
    with pytest.raises(InputError, match="above the dense peak of 989 TFLOPS"):
        GemmFit(1000.0, 0.0, 0.0).checked_against(989.0, "sm90 bf16")
    with pytest.raises(InputError, match="GemmFit.rate_tflops must be a finite number"):
        GemmFit(0.0, 1.0, 1.0)


size = st.integers(min_value=1, max_value=65536)


@settings(max_examples=150, deadline=None)
@given(m=size, n=size, k=size, g=st.integers(1, 64), axis=st.sampled_from("mnkg"), grow=st.integers(1, 5000))
def test_time_never_falls_as_a_size_grows(m, n, k, g, axis, grow):
    sizes = dict(m=m, n=n, k=k, groups=g)
    bigger = dict(sizes)
    bigger[{"g": "groups"}.get(axis, axis)] += grow
    assert gemm_seconds(FIT, **bigger, **H100) >= gemm_seconds(FIT, **sizes, **H100)


@settings(max_examples=150, deadline=None)
@given(m=size, n=size, k=size, g=st.integers(1, 64), sms=st.integers(1, 132))
def test_never_faster_than_the_roofline(m, n, k, g, sms):
    peak, hbm_peak = 989e12, 3.35e12
    t = gemm_seconds(FIT, m, n, k, g, **{**H100, "sms": sms})
    flops = 2.0 * g * m * n * k
    nbytes = g * (m * k + k * n + m * n) * 2.0
    assert t >= max(flops / peak, nbytes / hbm_peak) and math.isfinite(t)
    assert t >= flops / (800e12 * sms / 132)        # no faster than the fit's rate on its SMs


def test_the_model_is_monotone_on_the_calibration_grid():
    """On XLA's grid of 256-4,096 cubed the fitted model's times never fall along an axis."""
    from sim.compute import load_families
    fit = GemmFit(**load_families()["sm90"]["gemm"]["bf16"])
    sizes = np.array([256, 512, 1024, 2048, 4096])
    grid = np.array([[[gemm_seconds(fit, m, n, k, **H100) for k in sizes] for n in sizes] for m in sizes])
    for axis in range(3):
        assert (np.diff(grid, axis=axis) >= 0).all()


def test_a_fit_at_the_peak_is_allowed_and_one_above_it_refused():
    """At most the peak, with a relative slack of 1e-9 for the peak's own rounding."""
    assert GemmFit(rate_tflops=989.5, k0=0, fixed_us=0).checked_against(989.5, "x").rate_tflops == 989.5
    assert GemmFit(rate_tflops=989.5 * (1 + 5e-10), k0=0, fixed_us=0).checked_against(989.5, "x")
    assert GemmFit(rate_tflops=989.5 * (1 + 1e-9), k0=0, fixed_us=0).checked_against(989.5, "x")   # the slack's end
    with pytest.raises(InputError) as info:
        GemmFit(rate_tflops=989.5 * (1 + 2e-9), k0=0, fixed_us=0).checked_against(989.5, "family sm90, bf16")
    assert str(info.value) == (f"family sm90, bf16: rate_tflops {989.5 * (1 + 2e-9):g} is above the dense peak of "
                               "989.5 TFLOPS (allowed: at most the peak)")


def test_the_time_is_exact_to_the_last_digits_and_a_float_for_one_gemm():
    """One 64 x 128 tile on one SM of a 1 TFLOPS GPU: 2 x 64 x 128 x k / 1e12 seconds, as a float."""
    fit = GemmFit(rate_tflops=1.0, k0=0.0, fixed_us=0.0)
    kw = dict(sms=1, gpu_sms=1, in_bytes=0.0, out_bytes=0.0, hbm_bytes_per_s=1e12)
    t = gemm_seconds(fit, 64, 128, 1000, **kw)
    assert type(t) is float and t == pytest.approx(2 * 64 * 128 * 1000 / 1e12, rel=1e-14)
    assert gemm_seconds(fit, np.array([64, 64]), 128, 1000, **kw) == pytest.approx([t, t], rel=1e-14)


def test_sizes_past_int64_are_costed_as_floats():
    """Whole-number sizes are taken as floats: one row against a 2^32 x 2^32 weight reads 2^65
    bytes, which int64 would wrap around to 0."""
    big = 2 ** 32
    t = gemm_seconds(FIT, 1, big, big, **H100)
    assert t == gemm_seconds(FIT, 1.0, float(big), float(big), **H100)
    assert t > 2.0 * big * big / H100["hbm_bytes_per_s"]


def test_the_bound_counts_the_groups_and_calls_launch_only_past_half_the_time():
    """64 x 2048 x 2048: one GEMM spends 5 of its 8.8 us on the launch (launch); two read twice the
    bytes, 7.6 us of HBM against the 5 us launch (hbm, though the launch is above a third)."""
    assert gemm_bound(FIT, 64, 2048, 2048, **H100) == "launch"
    assert gemm_bound(FIT, 64, 2048, 2048, 1, **H100) == "launch"
    assert gemm_bound(FIT, 64, 2048, 2048, 2, **H100) == "hbm"
    assert gemm_bound(FIT, 16, 16, 16, groups=100_000, **H100) != "launch"


def test_a_launch_of_exactly_half_the_time_is_not_launch_bound():
    """k = 1 on one SM of a 1 TFLOPS GPU: 16,384 FLOPs take 0.016384 us, the launch as long."""
    kw = dict(sms=1, gpu_sms=1, in_bytes=0.0, out_bytes=0.0, hbm_bytes_per_s=1e12)
    fit = GemmFit(rate_tflops=1.0, k0=0.0, fixed_us=0.016384)
    assert fit.fixed_us * 1e-6 == gemm_seconds(GemmFit(rate_tflops=1.0, k0=0.0, fixed_us=0.0), 64, 128, 1, **kw)
    assert gemm_bound(fit, 64, 128, 1, **kw) == "compute"


@pytest.mark.parametrize("fields,message", [
    (dict(rate_tflops=0.0, k0=0, fixed_us=0),
     r"GemmFit.rate_tflops must be a finite number in \(0, 1,000,000\], got 0.0"),
    (dict(rate_tflops=1_000_000.5, k0=0, fixed_us=0), r"GemmFit.rate_tflops must be .*, got 1000000.5"),
    (dict(rate_tflops=1.0, k0=-1, fixed_us=0), r"GemmFit.k0 must be a finite number in \[0, 1,000,000\], got -1"),
    (dict(rate_tflops=1.0, k0=1_000_000.5, fixed_us=0), r"GemmFit.k0 must be .*, got 1000000.5"),
    (dict(rate_tflops=1.0, k0=0, fixed_us=-1), r"GemmFit.fixed_us must be a finite number in \[0, 1,000,000\], got -1"),
    (dict(rate_tflops=1.0, k0=0, fixed_us=1_000_000.5), r"GemmFit.fixed_us must be .*, got 1000000.5"),
])
def test_a_bad_fit_is_refused_naming_its_field(fields, message):
    with pytest.raises(InputError, match=message):
        GemmFit(**fields)


def test_a_fits_bounds_themselves_are_allowed():
    assert GemmFit(rate_tflops=1e6, k0=1e6, fixed_us=1e6).rate_tflops == 1e6
    assert GemmFit(rate_tflops=0.5, k0=0, fixed_us=0).k0 == 0
