"""sim.schedules.ops: the op notation and its round trips."""
import pytest

from sim.schedules.ops import FBOp, Op, op_from_json, parse_op, parts


@pytest.mark.parametrize("text", ["F3@0", "I2@1", "W0@7", "B12@15", "[F3@0&B5@3]"])
def test_round_trip_text(text):
    assert str(parse_op(text)) == text


def test_round_trip_json():
    for op in (Op("I", 4, 3), FBOp(Op("F", 3, 0), Op("B", 5, 3))):
        assert op_from_json(op.to_json()) == op


@pytest.mark.parametrize("text", ["X3@0", "F3", "F-1@0", "[F3@0 B5@3]", ""])
def test_bad_text_shows_expected_form(text):
    with pytest.raises(ValueError, match="expected KIND MB@STAGE"):
        parse_op(text)


def test_bad_json_names_field():
    with pytest.raises(ValueError, match="kind"):
        op_from_json({"mb": 1})
    with pytest.raises(ValueError, match="not one of"):
        op_from_json({"kind": "Q", "mb": 1, "stage": 0})


def test_parts():
    fb = FBOp(Op("F", 3, 0), Op("B", 5, 3))
    assert parts(fb) == (Op("F", 3, 0), Op("B", 5, 3))
    assert parts(Op("W", 1, 1)) == (Op("W", 1, 1),)


def test_parse_op_error_shows_the_notation():
    from sim.checks import InputError
    from sim.schedules import parse_op
    with pytest.raises(InputError) as caught:
        parse_op("Q1@0")
    assert str(caught.value) == ("cannot parse op 'Q1@0': expected KIND MB@STAGE with KIND in F, I, W, B "
                                 "(e.g. 'F3@0', 'I2@1') or an overlapped unit '[F3@0&B5@3]'")
