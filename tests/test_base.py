"""sim.schedules.base: placements, peak activations, parameter copies, the JSON contract, the W FIFO."""
import json

import pytest

from sim.checks import InputError
from sim.schedules import Op, make_schedule
from sim.schedules.base import Placement, Schedule, fifo_weights


@pytest.mark.parametrize("P", [2, 4, 8, 16])
def test_peak_activations_closed_forms(P):
    M = 4 * P
    assert make_schedule("1f1b", P, M).peak_activations()[0] == P
    assert make_schedule("zb-h1", P, M).peak_activations()[0] == P
    assert make_schedule("zb-h2", P, M).peak_activations()[0] == 2 * P - 1
    assert set(make_schedule("dualpipe", P, M).peak_activations().values()) == {P + 1}
    assert set(make_schedule("dualpipev", P, M).peak_activations().values()) == {2 * P + 1}
    assert make_schedule("gpipe", P, M).peak_activations()[0] == M
    # ZB-V keeps 1F1B's memory: 2P half-size stages = P micro-batches.
    assert max(make_schedule("zbv", P, M).peak_activations_mb().values()) == P


def test_parameter_copies():
    assert make_schedule("dualpipe", 4, 8).placement.parameter_copies(0) == 2
    assert make_schedule("chimera", 4, 8).placement.parameter_copies(3) == 2
    assert make_schedule("dualpipev", 4, 8).placement.parameter_copies(0) == 1
    assert make_schedule("zbv", 4, 8).placement.parameter_copies(0) == 1
    assert make_schedule("interleaved-1f1b", 4, 8, 2).placement.parameter_copies(0) == 1
    assert make_schedule("1f1b", 4, 8).placement.parameter_copies(0) == 1


def test_schedule_json_contract():
    js = make_schedule("dualpipe", 4, 8).to_json()
    assert set(js) == {"schedule", "pp", "num_stages", "microbatches", "placement", "ranks"}
    assert js["placement"] == "bidirectional"
    assert js["ranks"]["0"][7] == {"kind": "FB", "f": {"mb": 3, "stage": 0}, "b": {"mb": 5, "stage": 3}}
    assert js["ranks"]["0"][0] == {"kind": "F", "mb": 0, "stage": 0}


@pytest.mark.parametrize("name,v", [("1f1b", None), ("dualpipe", None), ("dualpipev", None), ("zb-h1", None),
                                    ("interleaved-1f1b", 2)])
def test_schedule_json_round_trip(name, v):
    sched = make_schedule(name, 4, 8, v)
    back = Schedule.from_json(json.loads(json.dumps(sched.to_json())))
    assert back.ranks == sched.ranks and back.placement == sched.placement and back.name == name


@pytest.mark.parametrize("change,pattern", [
    (lambda js: js.pop("ranks"), "missing field\\(s\\) ranks"),
    (lambda js: js.update(pp=float("nan")), "pp must be an integer"),
    (lambda js: js.update(pp=True), "pp must be an integer"),
    (lambda js: js.update(placement="ring"), "placement must be one of linear, v, bidirectional"),
    (lambda js: js.update(num_stages=5), "placement bidirectional needs num_stages = pp"),
    (lambda js: js["ranks"].pop("3"), 'ranks must map each rank "0" .. "3"'),
    (lambda js: js["ranks"].update({"0": "F0@0"}), "each rank's ops must be a list"),
    (lambda js: js["ranks"]["0"].append({"kind": "X", "mb": 0, "stage": 0}), "rank 0: op kind 'X'"),
    (lambda js: js["ranks"]["0"].append({"kind": "F", "mb": -1, "stage": 0}), "mb must be an integer"),
    (lambda js: js["ranks"]["0"].append({"kind": "F", "mb": 1e300, "stage": 0}), "mb must be an integer"),
    (lambda js: js["ranks"]["0"].append({"kind": "FB", "f": 3}), "is missing 'mb'"),
])
def test_schedule_from_json_names_the_bad_field(change, pattern):
    js = make_schedule("dualpipe", 4, 8).to_json()
    change(js)
    with pytest.raises(InputError, match=pattern):
        Schedule.from_json(js, "mine.json")


def test_placements_name_the_rank_of_each_stage():
    linear = Placement("linear", 4, 8, 8)
    assert [linear.rank(0, s) for s in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    v = Placement("v", 4, 8, 8)
    assert [v.rank(0, s) for s in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]
    bi = Placement("bidirectional", 4, 4, 8)
    assert [bi.rank(0, s) for s in range(4)] == [0, 1, 2, 3]          # micro-batches 0..3 go down
    assert [bi.rank(4, s) for s in range(4)] == [3, 2, 1, 0]          # 4..7 go up
    with pytest.raises(ValueError, match="unknown placement"):
        Placement("ring", 4, 4, 8).rank(0, 0)


def test_fifo_weights_complete_the_oldest_pending_input_gradient():
    W = Op("W", -1, -1)
    ops = [Op("I", 2, 0), Op("I", 5, 1), W, Op("I", 7, 0), W, W]
    assert [str(op) for op in fifo_weights(ops)] == ["I2@0", "I5@1", "W2@0", "I7@0", "W5@1", "W7@0"]
    with pytest.raises(ValueError) as caught:
        fifo_weights([W])
    assert str(caught.value) == "a W was scheduled with no pending I on this rank"
    real = [Op("I", 2, 0), Op("I", 5, 0), Op("W", 0, 0), W]        # a real W0 is kept, not a placeholder
    assert [str(op) for op in fifo_weights(real)] == ["I2@0", "I5@0", "W0@0", "W2@0"]


def test_schedule_json_round_trip_keeps_every_field():
    for name, v in (("dualpipe", None), ("zbv", None), ("interleaved-1f1b", 2), ("chimera", None)):
        sched = make_schedule(name, 4, 8, v)
        back = Schedule.from_json(json.loads(json.dumps(sched.to_json())))
        assert back.to_json() == sched.to_json()
        assert (back.pp, back.num_stages, back.microbatches) == (sched.pp, sched.num_stages, sched.microbatches)


def test_schedule_from_json_defaults_and_python_keys():
    js = make_schedule("1f1b", 1, 2).to_json()                  # pp = 1: the smallest allowed
    del js["schedule"], js["placement"]
    js["ranks"] = {0: js["ranks"]["0"]}                         # a Python caller's int keys
    back = Schedule.from_json(js)
    assert back.name == "custom" and back.placement.kind == "linear" and back.pp == 1


def test_schedule_from_json_messages_in_full():
    from sim import limits
    js = make_schedule("1f1b", 2, 2).to_json()
    cases = [(dict(pp=0), "schedule: pp must be an integer in [1, 100,000,000], got 0"),
             (dict(pp=100_000_001), "schedule: pp must be an integer in [1, 100,000,000], got 100000001"),
             (dict(schedule=3), "schedule: schedule must be a name (text), got 3")]
    for change, message in cases:
        with pytest.raises(InputError) as caught:
            Schedule.from_json({**js, **change})
        assert str(caught.value) == message
    with pytest.raises(InputError) as caught:
        Schedule.from_json([1], "mine.json")
    assert str(caught.value) == ("mine.json: expected a JSON object with schedule, pp, num_stages, microbatches, "
                                 "placement and ranks, got list")
    with pytest.raises(InputError) as caught:
        Schedule.from_json({"schedule": "x"}, "mine.json")
    assert str(caught.value) == "mine.json: missing field(s) pp, num_stages, microbatches, ranks"
    for kind, need in (("linear", "num_stages a multiple of pp"), ("v", "num_stages = 2 pp"),
                       ("bidirectional", "num_stages = pp and an even number of micro-batches")):
        with pytest.raises(InputError) as caught:
            Schedule.from_json({**js, "placement": kind, "num_stages": 3}, "mine.json")
        assert str(caught.value) == f"mine.json: placement {kind} needs {need}, got pp=2, num_stages=3, microbatches=2"
    with limits.raised(max_ops=3), pytest.raises(InputError) as caught:
        Schedule.from_json(js, "mine.json")
    assert str(caught.value).startswith("mine.json needs about 8 ops, over the limit of 3")
