"""Schedule generators: reference orders (DeepSeek, PyTorch) and invariants."""
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.schedules import SCHEDULE_NAMES, Op, make_schedule, validate
from sim.schedules.ops import FBOp, parts

DATA = Path(__file__).parent / "data"
TORCH = json.loads((DATA / "torch_orders.json").read_text())

# DeepSeek's DualPipe.step: DualPipe rank 0, P=4, M=8 (DeepSeek's order).
GOLDEN_DUALPIPE_RANK0 = ("F0@0 F1@0 F2@0 F4@3 I4@3 W4@3 F5@3 [F3@0&B5@3] [F6@3&B0@0] B6@3 "
                         "[F7@3&B1@0] B7@3 I2@0 W2@0 I3@0 W3@0").split()


def as_text(schedule):
    return {str(r): [str(op) for op in ops] for r, ops in schedule.ranks.items()}


def test_dualpipe_golden_rank0():
    assert as_text(make_schedule("dualpipe", 4, 8))["0"] == GOLDEN_DUALPIPE_RANK0


@pytest.mark.parametrize("name", ["1f1b", "gpipe", "zbv", "dualpipev"])
@pytest.mark.parametrize("key", sorted(TORCH["1f1b"]))
def test_matches_pytorch_order(name, key):
    P, M = map(int, key.split(","))
    if name == "dualpipev" and M < 2 * P:
        pytest.skip("dualpipev needs M >= 2P")
    assert as_text(make_schedule(name, P, M)) == TORCH[name][key]


@pytest.mark.parametrize("key", sorted(TORCH["interleaved-1f1b"]))
def test_interleaved_matches_pytorch_order(key):
    P, M, v = map(int, key.split(","))
    assert as_text(make_schedule("interleaved-1f1b", P, M, v)) == TORCH["interleaved-1f1b"][key]


@pytest.mark.parametrize("P,M", [(2, 4), (4, 8), (4, 10), (8, 20), (6, 13)])
def test_dualpipev_is_first_half_of_dualpipe(P, M):
    """DualPipeV (the cut-in-half note): DualPipeV on P ranks with M micro-batches equals the first P ranks of
    DualPipe on 2P ranks with 2M micro-batches, relabelled: DualPipe's up micro-batch M+k is the
    V's micro-batch k, and its stage on rank r (2P-1-r) is the V's stage 2P-1-r already."""
    v = make_schedule("dualpipev", P, M)
    d = make_schedule("dualpipe", 2 * P, 2 * M)

    def relabel(op):
        if isinstance(op, FBOp):
            return FBOp(relabel(op.f), relabel(op.b))
        return op if op.mb < M else Op(op.kind, op.mb - M, op.stage)

    for r in range(P):
        assert [relabel(op) for op in d.ranks[r]] == v.ranks[r]


VALID = {
    "gpipe": lambda P, M: True, "1f1b": lambda P, M: True, "zb-h1": lambda P, M: True,
    "zb-h2": lambda P, M: True, "zbv": lambda P, M: True,
    "interleaved-1f1b": lambda P, M: M % P == 0,
    "dualpipe": lambda P, M: P % 2 == 0 and M % 2 == 0 and M >= 2 * P,
    "dualpipev": lambda P, M: M >= 2 * P,
    "chimera": lambda P, M: P % 2 == 0 and M % P == 0 and M >= 2 * P,
}


@st.composite
def schedule_args(draw):
    name = draw(st.sampled_from(SCHEDULE_NAMES))
    P = draw(st.integers(1, 10))
    M = draw(st.integers(1, 40))
    if not VALID[name](P, M):
        if name in ("dualpipe", "chimera"):
            P = 2 * max(1, P // 2)
            M = P * max(2, M // P) if name == "chimera" else max(2 * P, M + M % 2)
        elif name == "dualpipev":
            M = max(M, 2 * P)
        else:
            M = P * max(1, M // P)
    v = draw(st.integers(2, 4)) if name == "interleaved-1f1b" else None
    return name, P, M, v


@given(schedule_args())
def test_every_schedule_is_valid_and_complete(args):
    name, P, M, v = args
    sched = validate(make_schedule(name, P, M, v))
    counts = {}
    for rank, ops in sched.ranks.items():
        for op in ops:
            for p in parts(op):
                assert sched.placement.rank(p.mb, p.stage) == rank
                counts[(p.kind, p.mb, p.stage)] = counts.get((p.kind, p.mb, p.stage), 0) + 1
    for mb in range(M):
        for s in range(sched.num_stages):
            assert counts.get(("F", mb, s)) == 1
            n_b, n_i, n_w = (counts.get((k, mb, s), 0) for k in "BIW")
            assert (n_b, n_i, n_w) in ((1, 0, 0), (0, 1, 1))


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
    assert set(js) == {"schedule", "pp", "num_stages", "microbatches", "ranks"}
    assert js["ranks"]["0"][7] == {"kind": "FB", "f": {"mb": 3, "stage": 0}, "b": {"mb": 5, "stage": 3}}
    assert js["ranks"]["0"][0] == {"kind": "F", "mb": 0, "stage": 0}
