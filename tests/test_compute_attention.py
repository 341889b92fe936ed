"""sim.compute.attention: a fused attention kernel's rate and time by shape, worked by hand."""
import numpy as np
import pytest

from sim.checks import InputError
from sim.compute.attention import AttentionFit, AttentionModel

FWD = AttentionFit(rate_tflops=600.0, s0=1024.0, d0=64.0, fixed_us=4.0, source="t", rows=3)
FWD_CAUSAL = AttentionFit(rate_tflops=500.0, s0=2048.0, d0=64.0, fixed_us=6.0)
BWD = AttentionFit(rate_tflops=400.0, s0=512.0, d0=128.0, fixed_us=8.0)


def test_the_rate_grows_with_the_sequence_and_the_head_by_hand():
    """rate = R s / (s + s0) d / (d + d0): at s = s0 and d = d0, a quarter of R; 4x s0 and 3x d0: 4/5 x 3/4."""
    assert FWD.rate(1024, 64) == pytest.approx(600e12 / 4, rel=1e-14)
    assert FWD.rate(4096, 192) == pytest.approx(600e12 * 4 / 5 * 3 / 4, rel=1e-14)
    assert FWD.rate(np.array([1024, 4096]), np.array([64, 192])) == pytest.approx([150e12, 360e12], rel=1e-14)


def test_the_time_is_the_launch_plus_the_flops_at_that_rate():
    flops = 4 * 4096 ** 2 * 128 * 32                 # 4 s^2 d heads, one sequence of 32 heads
    rate = 600e12 * 4096 / (4096 + 1024) * 128 / (128 + 64)
    assert FWD.seconds(flops, 4096, 128) == pytest.approx(4e-6 + flops / rate, rel=1e-14)
    assert type(FWD.seconds(flops, 4096, 128)) is float         # not a numpy scalar
    both = FWD.seconds(np.array([flops, 2 * flops]), 4096, 128)
    assert both == pytest.approx([4e-6 + flops / rate, 4e-6 + 2 * flops / rate], rel=1e-14)


def test_a_model_uses_each_directions_own_fit_and_scale():
    model = AttentionModel({("fwd", 0): FWD, ("fwd", 1): FWD_CAUSAL, ("bwd", 0): BWD}, "flash3", scale=0.5)
    assert model.rate("fwd", False, 1024, 64) == pytest.approx(0.5 * 150e12, rel=1e-14)
    assert model.rate("fwd", True, 2048, 64) == pytest.approx(0.5 * 500e12 / 4, rel=1e-14)
    flops = 1e12
    assert model.seconds("fwd", True, flops, 2048, 64) == pytest.approx(6e-6 + flops / (0.5 * 125e12), rel=1e-14)


def test_a_causal_backward_without_a_fit_scales_the_plain_one_as_the_forward_is_scaled():
    """No (bwd, causal) fit: rate = bwd plain rate x (fwd causal rate / fwd plain rate), with the
    plain backward's launch."""
    model = AttentionModel({("fwd", 0): FWD, ("fwd", 1): FWD_CAUSAL, ("bwd", 0): BWD}, "flash3")
    scaled = AttentionModel(model.fits, "flash3", scale=0.25)
    s, d = 2048, 128
    ratio = FWD_CAUSAL.rate(s, d) / FWD.rate(s, d)
    assert model.rate("bwd", True, s, d) == pytest.approx(BWD.rate(s, d) * ratio, rel=1e-14)
    assert ratio != pytest.approx(1.0)
    assert scaled.rate("bwd", True, s, d) == pytest.approx(0.25 * BWD.rate(s, d) * ratio, rel=1e-14)
    flops = 3e12
    assert model.seconds("bwd", True, flops, s, d) == pytest.approx(8e-6 + flops / (BWD.rate(s, d) * ratio), rel=1e-14)
    assert model.seconds("bwd", False, flops, s, d) == pytest.approx(8e-6 + flops / BWD.rate(s, d), rel=1e-14)


@pytest.mark.parametrize("fields,message", [
    (dict(rate_tflops=0.0, s0=1, d0=1),
     r"AttentionFit.rate_tflops must be a finite number in \(0, 1,000,000\], got 0.0"),
    (dict(rate_tflops=2e6, s0=1, d0=1), r"AttentionFit.rate_tflops must be .* got 2000000.0"),
    (dict(rate_tflops=1.0, s0=-1, d0=1), r"AttentionFit.s0 must be a finite number in \[0, 1,000,000,000\], got -1"),
    (dict(rate_tflops=1.0, s0=1, d0=-1), r"AttentionFit.d0 must be .* got -1"),
    (dict(rate_tflops=1.0, s0=1, d0=1, fixed_us=-1), r"AttentionFit.fixed_us must be .* got -1"),
    (dict(rate_tflops=1.0, s0=1, d0=1, fixed_us=2e9), r"AttentionFit.fixed_us must be .* got 2000000000.0"),
])
def test_a_bad_fit_is_refused_naming_the_field(fields, message):
    with pytest.raises(InputError, match=message):
        AttentionFit(**fields)


def test_the_bounds_themselves_are_allowed():
    assert AttentionFit(rate_tflops=1e6, s0=0, d0=1e9, fixed_us=1e9).rate(1, 1) > 0
