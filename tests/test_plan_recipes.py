"""sim.plan_recipes: the recipes a layout is tried with, the memory frontier, the step's lower bound."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.checks import InputError
from sim.plan_recipes import (POLICY_LEVELS, ZERO_GROUPS, compute_bound_s, expert_tps, memory_frontier, overlaps,
                              policy_levels, precisions, recipe_text, zero_groups)


def test_fixed_fields_are_not_searched():
    assert precisions(None, True) == ("bf16", "fp8") and precisions(None, False) == ("bf16",)
    assert precisions("mxfp8", True) == ("mxfp8",)
    assert expert_tps(None, True, 4) == (1, 4) and expert_tps(None, False, 4) == (1,) and expert_tps(None, True, 1) == (1,)
    assert expert_tps(2, True, 4) == (2,) and expert_tps(3, True, 4) == ()            # 3 does not divide TP 4
    assert overlaps(None, 2, True) == (False, True) and overlaps(None, 2, False) == (False,)
    assert overlaps(None, 1, True) == (False,) and overlaps(True, 1, True) == () and overlaps(False, 1, True) == (False,)
    assert policy_levels(None, False) == (("none",), ("selective",), ("full",))
    assert policy_levels(None, True) == POLICY_LEVELS and policy_levels("full", True) == (("full",),)
    assert zero_groups(None) == ZERO_GROUPS and zero_groups(0) == ((0,),)


def table(needs: dict):
    """A need_gb that reads a table and records the rungs it was asked for."""
    asked = []

    def need_gb(policy, zero):
        asked.append((policy, zero))
        return needs[policy, zero]
    return need_gb, asked


def test_the_frontier_keeps_the_lightest_fitting_rung_of_each_zero_group():
    """HBM 80: (none, 1) 90 and (none, 2) 85 miss, selective fits at ZeRO-1 (70) and deepseek-v3 at
    ZeRO-2 (75): both kept (neither recomputes a superset); full never asked. ZeRO-3 only at the
    lighter level, none: 60 fits, kept."""
    needs = {("none", 1): 90, ("none", 2): 85, ("selective", 1): 70, ("deepseek-v3", 1): 82, ("deepseek-v3", 2): 75,
             ("none", 3): 60}
    need, asked = table(needs)
    kept, nearest = memory_frontier(need, 80, POLICY_LEVELS, ZERO_GROUPS)
    assert kept == [("selective", 1, 70), ("deepseek-v3", 2, 75), ("none", 3, 60)]
    assert asked == [("none", 1), ("none", 2), ("selective", 1), ("deepseek-v3", 1), ("deepseek-v3", 2), ("none", 3)]
    assert nearest == ("deepseek-v3", 1, 82)


def test_zero3_is_not_tried_when_nothing_lighter_is_left():
    need, asked = table({("none", 1): 50})
    kept, nearest = memory_frontier(need, 80, POLICY_LEVELS, ZERO_GROUPS)
    assert kept == [("none", 1, 50)] and asked == [("none", 1)] and nearest == ()


def test_nothing_fits_names_the_closest_miss():
    needs = {(p, z): 100 + 10 * i - z for i, level in enumerate(POLICY_LEVELS) for p in level for z in (1, 2, 3)}
    need, asked = table(needs)
    kept, nearest = memory_frontier(need, 80, POLICY_LEVELS, ZERO_GROUPS)
    assert kept == [] and nearest == ("none", 3, 97) and len(asked) == 2 * 4 + 4    # every rung, both groups


def test_a_layout_error_is_passed_on():
    def need(policy, zero):
        raise InputError("RunSpec.ep (3) must divide dp (8)")
    with pytest.raises(InputError, match="must divide"):
        memory_frontier(need, 80, POLICY_LEVELS, ZERO_GROUPS)


def one_f_one_b_ish(stage: int, m: int) -> list[tuple[str, int]]:
    return [("F", stage)] * m + [("I", stage)] * m + [("W", stage)] * m


def test_the_bound_worked_by_hand():
    """Two stages, one each, F = I = W = 1, M = 4: rank 0: 0 + 4 x 2 + max(4, 0) = 12; rank 1:
    F_0 = 1 + 8 + max(4, I_0 = 1) = 13. 1F1B takes (M + P - 1)(F + I + W) = 15 >= 13."""
    assert compute_bound_s([1, 1], [1, 1], [1, 1], {0: one_f_one_b_ish(0, 4), 1: one_f_one_b_ish(1, 4)}) == 13
    # one micro-batch, no weight gradients: the critical path F0 F1 F2 I2 I1 I0 = 1 + 1 + 1 + 1 + 2 + 2
    ranks = {s: [("F", s), ("I", s)] for s in range(3)}
    assert compute_bound_s([1, 1, 1], [2, 2, 1], [0, 0, 0], ranks) == 8
    # a full backward is its I and its W: 0 + F 1 + I 2 + max(W 3, tail 0)
    assert compute_bound_s([1], [2], [3], {0: [("F", 0), ("B", 0)]}) == 6
    # DualPipe-like: a rank of stages 0 and 3, each part once (each direction carries half the batch)
    assert compute_bound_s([1] * 4, [1] * 4, [1] * 4, {0: [("F", 0), ("F", 3), ("B", 3), ("B", 0)]}) == 6
    # the head and tail come from the first part and the last backward, in the rank's order
    assert compute_bound_s([1, 5], [7, 1], [0, 0], {1: [("F", 1), ("I", 1)], 0: []}) == 1 + 5 + 1 + 7
    assert compute_bound_s([1], [1], [1], {0: []}) == 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 5), st.floats(0.1, 5), st.floats(0, 5)), min_size=1, max_size=6),
       st.integers(1, 8))
def test_the_bound_is_at_least_each_ranks_own_work(stages, m):
    f, i, w = (list(x) for x in zip(*stages))
    ranks = {r: one_f_one_b_ish(r, m) for r in range(len(stages))}
    bound = compute_bound_s(f, i, w, ranks)
    assert all(bound >= m * (f[s] + i[s] + w[s]) - 1e-9 for s in range(len(stages)))
    assert bound >= sum(f[:-1]) + m * (f[-1] + i[-1]) - 1e-9


def test_recipe_text():
    p = {"microbatch_size": 2, "gemm_precision": "fp8", "memory_policy": "full", "zero_stage": 3, "expert_tp": 2,
         "tp_comm_overlap": "True"}
    assert recipe_text(p) == "micro-batch 2, GEMMs fp8, recomputation full, ZeRO-3, expert TP 2, TP comm overlap"
    assert recipe_text({**p, "expert_tp": 1, "tp_comm_overlap": False}) == \
        "micro-batch 2, GEMMs fp8, recomputation full, ZeRO-3"


def test_every_simulated_candidate_takes_at_least_its_bound():
    """The bound is below the simulated step for each schedule and recipe of a small MoE plan."""
    from sim.planner import PlanRequest, candidates, evaluate
    ok, _ = candidates(PlanRequest(gpus=16, model="tiny-moe", topology="h800-16", global_batch=32, seq_len=256,
                                   pps=(2, 4), eps=(4,), tps=(1, 2), node_limit=1,
                                   schedules=("1f1b", "zb-h1", "dualpipe", "dualpipev", "interleaved-1f1b")))
    seen = set()
    for p in ok:
        key = (p["schedule"], p["tp"], p["pp"], p["memory_policy"], p["gemm_precision"])
        if key in seen:
            continue
        seen.add(key)
        assert evaluate(p)["step_time_s"] >= float(p["bound_s"]) > 0, p
    assert len({k[0] for k in seen}) == 5 and len(seen) >= 15
