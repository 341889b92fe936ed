"""sim.schedules.moves: every move keeps each (micro-batch, stage)'s single F and single backward
(property test over the schedules and random chains of moves); each move by hand."""
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.schedules import STANDALONE, make_schedule, validate
from sim.schedules.moves import MOVES, Move, propose, reads_from
from sim.schedules.ops import FBOp, Op, parse_op, parts
from sim.schedules.timing import makespan


def _complete(sched) -> bool:
    """Each (mb, stage) has one F and either one B or one I and one W (whether a W comes after its
    I, which a move may break, the timing and the validator judge: a W before its I deadlocks)."""
    count = Counter()
    for ops in sched.ranks.values():
        for op in ops:
            for p in parts(op):
                count[(p.kind, p.mb, p.stage)] += 1
    for mb in range(sched.microbatches):
        for s in range(sched.num_stages):
            b, i, w = (count[(k, mb, s)] for k in "BIW")
            if count[("F", mb, s)] != 1 or not ((b, i, w) == (1, 0, 0) or (b, i, w) == (0, 1, 1)):
                return False
    return sum(count.values()) == sum(len(list(parts(op))) for ops in sched.ranks.values() for op in ops)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([n for n in STANDALONE if n != "interleaved-1f1b"]), st.sampled_from([2, 4]),
       st.integers(1, 3), st.integers(0, 2 ** 32), st.integers(1, 60))
def test_random_moves_keep_every_op_and_runnable_orders_validate(name, P, k, seed, moves):
    """After any chain of moves the order is complete; whenever the timing says it runs, the
    validator accepts it (and whenever the validator accepts it, the timing runs it)."""
    M = 2 * P * k
    sched = make_schedule(name, P, M, 2 if name == "combined-1f1b" else None)
    rng = random.Random(seed)
    for _ in range(moves):
        move = propose(sched, rng)
        if move is None:
            continue
        assert move.kind in MOVES
        candidate = move.apply(sched)
        assert _complete(candidate)
        runs = makespan(candidate, lambda rank, op: 1.0 + 0.5 * (op.kind == "FB")) is not None
        try:
            validate(candidate)
            valid = True
        except Exception:
            valid = False
        assert runs == valid
        if runs:
            sched = candidate


def _one(ops_text: str, kind: str, seed: int = 0, tries: int = 200):
    """The first move of ``kind`` on rank 0 of a one-rank schedule with these ops."""
    sched = make_schedule("1f1b", 1, 3)
    sched.ranks[0] = [parse_op(t) for t in ops_text.split()]
    rng = random.Random(seed)
    for _ in range(tries):
        move = propose(sched, rng, kinds=(kind,), rank=0)
        if move is not None:
            return [str(op) for op in move.ops]
    return None


def test_split_and_merge_a_backward():
    assert _one("F0@0 B0@0", "split-b") == ["F0@0", "I0@0", "W0@0"]
    assert _one("F0@0 I0@0 W0@0", "merge-iw") == ["F0@0", "B0@0"]
    assert _one("F0@0 I0@0 F1@0 W0@0", "merge-iw") is None          # W not right after its I


def test_split_and_merge_an_overlapped_unit():
    assert _one("F0@0 [F1@0&B0@0] B1@0", "split-fb") in (["F0@0", "F1@0", "B0@0", "B1@0"],
                                                          ["F0@0", "B0@0", "F1@0", "B1@0"])
    assert _one("F0@0 F1@0 B0@0 B1@0", "merge-fb") == ["F0@0", "[F1@0&B0@0]", "B1@0"]
    assert _one("F0@0 B0@0", "merge-fb") is None                     # one micro-batch


def test_weight_gradients_move_only_after_their_input_gradient():
    for seed in range(30):
        out = _one("F0@0 F1@0 I0@0 I1@0 W1@0 W0@0", "shift-w", seed)
        if out is not None:
            assert out.index("W0@0") > out.index("I0@0") and out.index("W1@0") > out.index("I1@0")
    assert _one("F0@0 I0@0 W0@0 F1@0 B1@0", "sink-w") == ["F0@0", "I0@0", "F1@0", "B1@0", "W0@0"]


def test_a_swap_never_puts_a_reader_before_what_it_reads():
    assert not reads_from(Op("F", 1, 0), Op("F", 0, 0), 1)
    assert reads_from(Op("B", 0, 0), Op("F", 0, 0), 1)
    assert reads_from(Op("W", 0, 0), Op("I", 0, 0), 1)
    assert reads_from(FBOp(Op("F", 1, 0), Op("B", 0, 0)), Op("F", 0, 0), 1)
    for seed in range(20):
        out = _one("F0@0 B0@0 F1@0", "swap", seed)
        assert out is None or out == ["F0@0", "F1@0", "B0@0"]


def test_apply_leaves_the_schedule_as_it_was():
    sched = make_schedule("1f1b", 2, 2)
    before = {r: list(ops) for r, ops in sched.ranks.items()}
    Move("swap", 0, tuple(reversed(sched.ranks[0]))).apply(sched)
    assert sched.ranks == before


def test_an_unknown_move_is_refused():
    with pytest.raises(ValueError, match="unknown move 'jump'"):
        propose(make_schedule("1f1b", 2, 2), random.Random(0), kinds=("jump",))


def test_a_shift_reaches_the_first_place_and_changes_the_order():
    outs = {tuple(o) for o in (_one("F0@0 F1@0 F2@0 B0@0 B1@0 B2@0", "shift", seed) for seed in range(60)) if o}
    assert any(o[0] not in ("F0@0", "F1@0") for o in outs)      # an op moved into the first place
    assert ("F0@0", "F1@0", "F2@0", "B0@0", "B1@0", "B2@0") not in outs


def test_a_moved_weight_gradient_changes_the_order():
    start = ["F0@0", "F1@0", "I0@0", "I1@0", "W1@0", "W0@0"]
    outs = [_one(" ".join(start), "shift-w", seed) for seed in range(30)]
    assert any(o is not None for o in outs)
    assert all(o != start for o in outs if o is not None)
