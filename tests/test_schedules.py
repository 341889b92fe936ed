"""Schedule generators: reference orders (DeepSeek, PyTorch) and invariants."""
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.schedules import SCHEDULE_NAMES, make_schedule, validate
from sim.schedules.ops import parts

DATA = Path(__file__).parent / "data"
TORCH = json.loads((DATA / "torch_orders.json").read_text())


def as_text(schedule):
    return {str(r): [str(op) for op in ops] for r, ops in schedule.ranks.items()}


@pytest.mark.parametrize("name", ["1f1b", "gpipe", "zbv", "dualpipev"])
@pytest.mark.parametrize("key", sorted(TORCH["1f1b"]))
def test_matches_pytorch_order(name, key):
    P, M = map(int, key.split(","))
    if name == "dualpipev" and M < 2 * P:
        pytest.skip("dualpipev needs M >= 2P")
    assert as_text(make_schedule(name, P, M)) == TORCH[name][key]


@pytest.mark.parametrize("key", sorted(TORCH["interleaved-1f1b"]))
def test_interleaved_matches_pytorch_order(key):
    """PyTorch's ScheduleInterleaved1F1B runs M / max(1, M // P) micro-batches a round: Megatron's
    order with that group (G = P when P divides M; M = 10 over P = 4 in two rounds of 5)."""
    P, M, v = map(int, key.split(","))
    group = M // max(1, M // P)
    assert as_text(make_schedule("interleaved-1f1b", P, M, v, group=group)) == TORCH["interleaved-1f1b"][key]
    if M % P == 0:
        assert as_text(make_schedule("interleaved-1f1b", P, M, v)) == TORCH["interleaved-1f1b"][key]


VALID = {
    "gpipe": lambda P, M: True, "1f1b": lambda P, M: True, "zb-h1": lambda P, M: True,
    "zb-h2": lambda P, M: True, "zbv": lambda P, M: True, "zb-1p": lambda P, M: True, "zb-2p": lambda P, M: True,
    "zb-auto": lambda P, M: True,
    "interleaved-1f1b": lambda P, M: M % P == 0, "combined-1f1b": lambda P, M: M % P == 0,
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
    v = draw(st.integers(2, 4)) if name == "interleaved-1f1b" or (name == "combined-1f1b" and P > 1) else None
    limit = draw(st.floats(1, 3 * P)) if name == "zb-auto" else None
    return name, P, M, v, limit


@given(schedule_args())
def test_every_schedule_is_valid_and_complete(args):
    name, P, M, v, limit = args
    sched = validate(make_schedule(name, P, M, v, limit))
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


