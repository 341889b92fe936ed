"""sim.compute.gemm_table: a GEMM's time read off the measured tables around its shape, worked by hand
(the weights at a measured shape, one octave and the radius away), against the shipped tables (every
measured shape reproduced) and as a property (never faster than the roofline)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.compute import KernelModel
from sim.compute.gemm_table import RADIUS, GemmCorrection, corrected_seconds, correction_of, family_corrections
from sim.compute.ops import Op
from sim.compute.tables import GemmRow
from sim.training.costs.chunk import table_gpus
from sim.training.model.specs import SpecError, load_scenario

GPUS = {g.name: g for g in table_gpus()}


def one_point(r=0.3, at=(10.0, 11.0, 12.0, 0.0)) -> GemmCorrection:
    return GemmCorrection(np.array([at]), np.array([r]), ("hand",))


def test_at_a_measured_shape_the_correction_is_its_residual():
    c = one_point()
    assert c.log_factor(2 ** 10, 2 ** 11, 2 ** 12, 1) == 0.3


def test_two_rows_of_one_shape_give_their_mean():
    c = GemmCorrection(np.array([[10.0, 11.0, 12.0, 0.0]] * 2), np.array([0.1, 0.3]), ("a", "b"))
    assert c.log_factor(2 ** 10, 2 ** 11, 2 ** 12, 1) == pytest.approx(0.2, abs=1e-15)


def test_one_octave_away_half_the_residual_by_hand():
    """d = 1, R = 2: w = (1 - 1/2)^2 / 1 = 0.25 against the fit's own weight 1 / R^2 = 0.25: c = r / 2."""
    assert RADIUS == 2.0
    assert one_point().log_factor(2 ** 11, 2 ** 11, 2 ** 12, 1) == pytest.approx(0.15, rel=1e-12)


def test_two_rows_weigh_by_their_distance_by_hand():
    """Two rows inside R, at d = 0.5 (w = 0.75^2 / 0.25 = 2.25) and d = 1.5 (w = 0.25^2 / 2.25 = 1/36):
    c = (2.25 x 0.4 + 0.2 / 36) / (0.25 + 2.25 + 1/36)."""
    c = GemmCorrection(np.array([[10.0, 10.0, 10.0, 0.0], [12.0, 10.0, 10.0, 0.0]]), np.array([0.4, 0.2]), ("hand",))
    expected = (2.25 * 0.4 + 0.2 / 36) / (0.25 + 2.25 + 1 / 36)
    assert c.log_factor(2 ** 10.5, 2 ** 10, 2 ** 10, 1) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("shape", [(2 ** 12, 2 ** 11, 2 ** 12, 1), (2 ** 10, 2 ** 11, 2 ** 12, 4),
                                   (2 ** 8, 2 ** 14, 2 ** 12, 1)])
def test_the_radius_away_from_every_row_the_fit_alone(shape):
    """Exactly R octaves away (the first two: one size, or the groups, 2 octaves off) and further."""
    assert one_point().log_factor(*shape) == 0.0
    assert corrected_seconds(1e-3, one_point(), *shape, floor=0.0) == 1e-3


def test_no_rows_no_correction():
    from sim.compute.gemm import GemmFit
    empty = GemmCorrection(np.zeros((0, 4)), np.zeros(0), ())
    assert empty.rows == 0 and empty.log_factor(4096, 4096, 4096, 1) == 0.0
    none = correction_of([], GemmFit(700.0, 100.0, 5.0), GPUS, ("t.csv",))
    assert none.rows == 0 and none.points.shape == (0, 4) and none.tables == ("t.csv",)
    assert none.log_factor(4096, 4096, 4096, 1) == 0.0


def test_the_roofline_is_a_floor():
    assert corrected_seconds(1e-3, one_point(r=-5.0), 2 ** 10, 2 ** 11, 2 ** 12, 1, floor=8e-4) == 8e-4
    assert corrected_seconds(1e-3, None, 2 ** 10, 2 ** 11, 2 ** 12, 1, floor=8e-4) == 1e-3


def test_a_malformed_correction_is_refused():
    with pytest.raises(ValueError, match=r"^GemmCorrection: points must be an \[N, 4\] array with one residual each$"):
        GemmCorrection(np.zeros((2, 3)), np.zeros(2), ())
    with pytest.raises(ValueError, match=r"^GemmCorrection: radius 0.0 must be positive$"):
        GemmCorrection(np.zeros((0, 4)), np.zeros(0), (), radius=0.0)


def test_a_row_measured_at_the_fits_time_has_no_residual():
    """A row whose measured time is the fit's own gives residual 0 (the fit taken on the row's GPU)."""
    from sim.compute.fit import gemm_row_seconds
    from sim.compute.gemm import GemmFit
    fit = GemmFit(700.0, 100.0, 5.0)
    probe = GemmRow("h100", "bf16", 1, 4096, 4096, 4096, 1.0, 2)
    seconds = float(gemm_row_seconds(fit, [probe], GPUS)[0])
    row = probe._replace(tflops=probe.flops / seconds / 1e12)
    c = correction_of([row], fit, GPUS, ("hand",))
    assert c.residuals[0] == pytest.approx(0.0, abs=1e-12)


def shipped(family: str) -> dict:
    from sim.compute import load_families
    return family_corrections(family, load_families()[family], GPUS)


def test_every_measured_shape_of_the_h100_tables_is_read_back_as_measured():
    """Each BF16 row of the sm90 family's tables (XLA's and Vidur's H100 GEMMs, MAMF's), where no other
    row measured its shape: the model's GEMM costs what the table measured (exactly, up to floats)."""
    model = KernelModel(GPUS["h100"], gemm_tables=table_gpus(), launch_us=0.0)
    c = model.gemm_corrections["bf16"]
    from sim.compute.device import peaks_of
    from sim.compute.tables import read_gemm_table
    rows = [r for t in c.tables for r in read_gemm_table(t, peaks_of(GPUS))
            if r.gpu == "h100" and r.precision == "bf16"]
    shapes = [(r.groups, r.m, r.n, r.k) for r in rows]
    single = [r for r, s in zip(rows, shapes) if shapes.count(s) == 1]
    assert c.rows >= 700 and len(single) >= 600
    for r in single:
        op = Op("g", "mlp", "f", "gemm", flops=r.flops, shape=(r.groups, r.m, r.n, r.k))
        assert model.cost(op).seconds == pytest.approx(r.seconds, rel=1e-9), r


def test_families_without_a_shape_table_keep_the_fit_and_same_as_shares():
    assert shipped("gb200") == {}                       # scaled from B200's fit by one GEMM
    b200 = shipped("sm100")
    assert b200["mxfp8"] is b200["fp8"] and b200["bf16"].rows > 300
    assert "bf16" in shipped("sm80") and "fp8" not in shipped("sm80")


def test_the_label_names_the_tables():
    model = KernelModel(GPUS["h100"], gemm_tables=table_gpus())
    assert "GEMMs read off the measured tables around their shapes: bf16 712, fp8 30 rows" in model.label
    gb = KernelModel(GPUS["gb200"], gemm_tables=table_gpus())
    assert "measured tables around their shapes: none declared, the fit" in gb.label
    assert "measured tables" not in KernelModel(GPUS["h100"]).label


def test_a_malformed_declaration_is_one_input_error(tmp_path):
    from sim.checks import InputError
    bad = tmp_path / "calibration.yaml"
    bad.write_text("families: [sm90\n")
    with pytest.raises(InputError, match="calibration.yaml"):
        family_corrections("sm90", {"gpus": ["h100"], "gemm": {}}, GPUS, declaration=bad)
    assert family_corrections("nothing-declared", {"gpus": ["h100"], "gemm": {}}, GPUS) == {}


def test_a_precision_without_a_table_is_passed_over_not_the_rest(tmp_path):
    """A declaration whose first precision has no shape table of its own (scaled from another family)
    still corrects the precisions after it."""
    declared = tmp_path / "calibration.yaml"
    declared.write_text("families:\n  mine:\n    gpus: [h100]\n    gemm:\n"
                        "      bf16: {scale_from: sm90, ratio_table: gemm_mamf.csv}\n"
                        "      fp8: {tables: [gemm_mamf.csv]}\n      mxfp8: {same_as: fp8}\n")
    fit = {"rate_tflops": 1500.0, "k0": 100.0, "fixed_us": 5.0}
    got = family_corrections("mine", {"gpus": ["h100"], "gemm": {"bf16": fit, "fp8": fit}}, GPUS, declaration=declared)
    assert sorted(got) == ["fp8", "mxfp8"] and got["fp8"].rows == 1 and got["mxfp8"] is got["fp8"]


def test_a_family_gpu_without_figures_is_refused():
    from sim.checks import InputError
    with pytest.raises(InputError, match=r"the family sm90's GPUs \['h800', 'h200'\] have no figures"):
        family_corrections("sm90", {"gpus": ["h100", "h800", "h200"], "gemm": {}}, {"h100": GPUS["h100"]})


MODEL = KernelModel(GPUS["h100"], gemm_tables=table_gpus(), launch_us=0.0)


def floored(shape) -> KernelModel:
    """An H100 model whose BF16 table says the GEMM of ``shape`` (g, m, n, k) runs e^20 times faster
    than the fit: only the roofline holds it."""
    model = KernelModel(GPUS["h100"], gemm_tables=table_gpus(), launch_us=0.0)
    g, m, n, k = shape
    model.gemm_corrections = {"bf16": one_point(r=-20.0, at=tuple(np.log2([m, n, k, g])))}
    return model


def test_a_skinny_gemm_is_floored_at_its_bytes_by_hand():
    """16 x 8192 x 8192: A (16 x 8192), B (8192 x 8192) and C (16 x 8192), 2 bytes each, at the
    H100's 3.35 TB/s, far above its FLOPs at the peak."""
    shape = (1, 16, 8192, 8192)
    op = Op("g", "mlp", "f", "gemm", flops=2.0 * 16 * 8192 * 8192, shape=shape)
    expected = (16 * 8192 + 8192 * 8192 + 16 * 8192) * 2.0 / (GPUS["h100"].hbm_tbps * 1e12)
    assert floored(shape).cost(op).seconds == pytest.approx(expected, rel=1e-12)


def test_a_square_gemm_on_half_the_sms_is_floored_at_half_the_peak_by_hand():
    shape = (2, 8192, 8192, 8192)
    op = Op("g", "mlp", "f", "gemm", flops=2.0 * 2 * 8192 ** 3, shape=shape)
    expected = op.flops / (GPUS["h100"].peak("bf16") * 1e12) * 2
    assert floored(shape).cost(op, sms=66).seconds == pytest.approx(expected, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(6, 16), st.integers(6, 16), st.integers(6, 16), st.integers(0, 4), st.sampled_from([132, 66, 20]))
def test_never_faster_than_the_roofline(lm, ln, lk, lg, sms):
    m, n, k, g = 2 ** lm, 2 ** ln, 2 ** lk, 2 ** lg
    op = Op("g", "mlp", "f", "gemm", flops=2.0 * g * m * n * k, shape=(g, m, n, k))
    seconds = MODEL.cost(op, sms=sms).seconds
    gpu = GPUS["h100"]
    assert seconds >= op.flops / (gpu.peak("bf16") * 1e12 * sms / gpu.sms) * (1 - 1e-12)
    assert seconds >= g * (m * k + k * n + m * n) * 2.0 / (gpu.hbm_tbps * 1e12) * (1 - 1e-12)
    assert math.isfinite(seconds)


def test_a_run_names_the_gemm_model_or_gets_one_line():
    assert load_scenario("tiny", gemm_model="tables").gemm_model == "tables"
    with pytest.raises(SpecError, match="RunSpec.gemm_model must be one of fit, tables, got 'interpolated'"):
        load_scenario("tiny", gemm_model="interpolated")


def test_a_run_on_the_tables_differs_from_the_fit_and_says_so():
    from sim.training.scenario import Scenario
    spec = load_scenario("tiny", compute_model="kernels")
    a, b = Scenario(spec), Scenario(spec.with_(gemm_model="tables"))
    assert "measured tables" in b.chunk.kernels.label and "measured tables" not in a.chunk.kernels.label
    moe = a.model.is_moe
    gemms = [sum(c.seconds for c in s.chunk.kernel_costs(moe) if c.op.kind == "gemm") for s in (a, b)]
    assert gemms[0] != gemms[1]
