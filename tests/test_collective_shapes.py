"""sim.training.comm.collective_shapes: the collectives inside an op as named records: DeepSeek-V3's two
all-to-alls worked by hand, a dense model's none, bad records refused in one line."""
import pytest

from sim.training.comm.collective_shapes import AXES, CollectiveShape, op_collectives, shape_named
from sim.training.model.specs import SpecError, load_model, load_scenario


def test_deepseek_v3s_all_to_alls_are_dispatch_in_fp8_and_combine_in_bf16_over_ep():
    """hidden 7168: dispatch in FP8 is 7168 bytes plus one fp32 scale per 128 elements (56 x 4 =
    224): 7,392 bytes a token; combine in BF16 is 2 x 7168 = 14,336."""
    run = load_scenario("deepseek-v3")
    assert (run.dispatch_precision, run.combine_precision) == ("fp8", "bf16")
    shapes = op_collectives(load_model("deepseek-v3"), run)
    assert shapes == (CollectiveShape("dispatch", "ep", "hierarchical", 7392.0),
                      CollectiveShape("combine", "ep", "hierarchical", 14336.0))
    assert all(s.is_all_to_all for s in shapes)
    flat = op_collectives(load_model("deepseek-v3"), run.with_(a2a_algorithm="flat"))
    assert {s.algorithm for s in flat} == {"flat"}


def test_a_dense_model_issues_no_collective_inside_its_ops():
    assert op_collectives(load_model("llama3-70b"), load_scenario("deepseek-v3")) == ()


def test_a_shape_is_found_by_name_or_refused_naming_the_known_ones():
    shapes = op_collectives(load_model("deepseek-v3"), load_scenario("deepseek-v3"))
    assert shape_named(shapes, "combine").name == "combine"
    with pytest.raises(SpecError, match=r"^no collective shape 'gather'; this run's are: dispatch, combine$"):
        shape_named(shapes, "gather")
    with pytest.raises(SpecError, match=r"this run's are: none$"):
        shape_named((), "dispatch")


@pytest.mark.parametrize("field, value, message", [
    ("axis", "pp", r"^collective 'x': axis must be one of ep, tp, cp, dp, etp, got 'pp'$"),
    ("bytes_per_token", 0.0, r"^collective 'x': bytes_per_token must be a positive finite number, got 0.0$"),
    ("bytes_per_token", float("inf"), r"bytes_per_token must be a positive finite number, got inf$"),
    ("bytes_per_token", True, r"bytes_per_token must be a positive finite number, got True$"),
    ("name", "", r"^collective shape name must be a non-empty string, got ''$"),
])
def test_a_bad_record_is_one_line_naming_the_field(field, value, message):
    fields = dict(name="x", axis="ep", algorithm="hierarchical", bytes_per_token=1.0)
    fields[field] = value
    with pytest.raises(SpecError, match=message):
        CollectiveShape(**fields)


def test_the_axes_are_megatrons_names_and_only_all_to_alls_are_measured_as_such():
    assert AXES == ("ep", "tp", "cp", "dp", "etp")
    assert not CollectiveShape("tp_all_reduce", "tp", "ring", 2.0).is_all_to_all


def test_any_positive_size_is_a_size():
    """Half a byte a token (a compressed format, say) is allowed: only 0, negatives and inf are not."""
    assert CollectiveShape("x", "ep", "hierarchical", 0.5).bytes_per_token == 0.5


def test_expert_tp_adds_a_gather_and_a_reduce_scatter_over_etp_at_each_directions_precision():
    run = load_scenario("deepseek-v3").with_(tp=2, sequence_parallel=True, expert_tp=2, dp=64)
    shapes = {s.name: s for s in op_collectives(load_model("deepseek-v3"), run)}
    assert shapes["etp_all_gather"].axis == shapes["etp_reduce_scatter"].axis == "etp"
    assert shapes["etp_all_gather"].bytes_per_token == shapes["dispatch"].bytes_per_token == 7168 + 56 * 4
    assert shapes["etp_reduce_scatter"].bytes_per_token == shapes["combine"].bytes_per_token == 7168 * 2
    assert "etp_all_gather" not in {s.name for s in op_collectives(load_model("deepseek-v3"), run.with_(expert_tp=1))}
