"""The recipe half of a plan: which training recipes a layout is tried with, the memory frontier
that keeps only the fastest recipes that fit, and a cheap lower bound on a candidate's step.

A candidate is a layout (TP, CP, PP, EP, schedule, layer split) and a recipe. The recipe's fields
that change the work (:data:`WORK_FIELDS`: micro-batch size, GEMM precision, expert TP, TP
communication overlap) are tried as a product; those that only trade time for memory
(:data:`MEMORY_FIELDS`: recomputation and ZeRO stage) are walked as a ladder
(:func:`memory_frontier`), cheapest first. A field the user (or the scenario) fixed is not searched.

Dominance, in this simulator's own model, is what lets the ladder stop early:

* recomputation adds compute and saves memory: ``none`` < (``selective``, and ``deepseek-v3`` on an
  MLA model) < ``full`` (:data:`POLICY_LEVELS`); the first level that fits is kept (both members of
  the middle level when both fit: neither recomputes a superset of the other);
* ZeRO-1 and ZeRO-2 move the same bytes in the data-parallel sync (a reduce-scatter of gradients,
  the optimizer, an all-gather of weights; :mod:`sim.training.dpsync`) and ZeRO-2 keeps less, so ZeRO-2
  is tried only when ZeRO-1 does not fit; ZeRO-3 adds the weights' gathers before every layer, so
  it is kept only with less recomputation than ZeRO-1/2 needed (``none`` under ZeRO-3 can beat
  ``full`` under ZeRO-1; ``full`` under ZeRO-3 cannot beat ``full`` under ZeRO-1).

The bound (:func:`compute_bound_s`): a rank runs every forward, input-gradient and weight-gradient
part the schedule gives it on one compute stream. Its first part, on stage ``s``, cannot start
before its micro-batch has run the forwards of stages ``0 .. s-1`` (``head``).
Its last input gradient, on stage ``s``, comes after all its forwards and input gradients, and
stages ``s-1 .. 0`` must still run that micro-batch's input gradients (``tail``), while its weight
gradients may run before or beside them::

    head_r = sum_{s' < s_first} F_s'        tail_r = sum_{s' < s_last} I_s'
    bound  = max over ranks r of [ head_r + sum of r's F and I parts + max(sum of r's W parts, tail_r) ]

where ``s_first`` is the stage of the rank's first part and ``s_last`` that of its last input
gradient (a rank runs its parts in the schedule's order); a full backward ``B`` is its ``I`` and
its ``W``; each part is counted as often as the schedule runs it (DualPipe's two directions each
carry half the micro-batches through a rank's two stages).

with ``F, I, W`` the chunk model's compute of one micro-batch (:func:`sim.training.costs.stagecosts.stage_times`;
recomputation in ``I``). Every simulated step is at least this (it adds communication, bubbles,
slowdowns and the optimizer; ``tests/test_plan_recipes.py`` checks it on simulated candidates), so a
candidate whose bound is above a simulated step can be dropped unsimulated.
"""
from __future__ import annotations

from typing import Callable

WORK_FIELDS = ("microbatch_size", "gemm_precision", "expert_tp", "tp_comm_overlap")
MEMORY_FIELDS = ("memory_policy", "zero_stage")
RECIPE_FIELDS = WORK_FIELDS + MEMORY_FIELDS
MICROBATCH_SIZES = (1, 2)              # searched when not given: the sizes MoE and long-context recipes use
POLICY_LEVELS = (("none",), ("selective", "deepseek-v3"), ("full",))
ZERO_GROUPS = ((1, 2), (3,))


def precisions(fixed: str | None, has_fp8: bool) -> tuple[str, ...]:
    """GEMM precisions tried: the one fixed, else BF16 and (on a GPU with FP8 tensor cores) FP8."""
    if fixed is not None:
        return (fixed,)
    return ("bf16", "fp8") if has_fp8 else ("bf16",)


def expert_tps(fixed: int | None, moe: bool, tp: int) -> tuple[int, ...]:
    """Expert TP sizes tried: the one fixed (when it divides ``tp``), else 1 and (MoE, TP > 1) ``tp``."""
    if fixed is not None:
        return (fixed,) if tp % fixed == 0 else ()
    return (1, tp) if moe and tp > 1 else (1,)


def overlaps(fixed: bool | None, tp: int, sequence_parallel: bool) -> tuple[bool, ...]:
    """TP-communication overlap tried: as fixed, else off and (TP > 1 with sequence parallelism) on."""
    possible = tp > 1 and sequence_parallel
    if fixed is not None:
        return (fixed,) if possible or not fixed else ()
    return (False, True) if possible else (False,)


def policy_levels(fixed: str | None, mla: bool) -> tuple[tuple[str, ...], ...]:
    """The recomputation ladder (:data:`POLICY_LEVELS`; ``deepseek-v3`` only on an MLA model), or the
    one policy fixed."""
    if fixed is not None:
        return ((fixed,),)
    return tuple(tuple(p for p in level if mla or p != "deepseek-v3") for level in POLICY_LEVELS)


def zero_groups(fixed: int | None) -> tuple[tuple[int, ...], ...]:
    """The ZeRO ladder (:data:`ZERO_GROUPS`), or the one stage fixed."""
    return ((fixed,),) if fixed is not None else ZERO_GROUPS


def memory_frontier(need_gb: Callable[[str, int], float], hbm_gb: float, levels, groups) -> tuple[list, tuple]:
    """Walk the memory ladder (see the module) for one layout and work recipe.

    ``need_gb(policy, zero)``: the fullest rank's HBM in GB (it may raise
    :class:`~sim.checks.InputError`, a layout that no recipe can fix: passed on). Returns (the
    recipes kept, as ``(policy, zero, need_gb)``, fastest first; the closest miss ``(policy, zero,
    need_gb)`` or ``()`` when nothing was checked). A ZeRO group is kept only with a lighter policy
    level than every group before it fitted at."""
    kept: list[tuple[str, int, float]] = []
    nearest: tuple = ()
    ceiling = len(levels)                 # a later group must fit at a lighter level than this
    for group in groups:
        for depth, level in enumerate(levels[:ceiling]):
            fitted = []
            for policy in level:
                for zero in group:
                    need = need_gb(policy, zero)
                    if need <= hbm_gb:
                        fitted.append((policy, zero, need))
                        break                     # a higher stage of the same group: no faster
                    if not nearest or need < nearest[2]:
                        nearest = (policy, zero, need)
            if fitted:
                kept += fitted
                ceiling = depth
                break
    return kept, nearest


def compute_bound_s(f: list[float], i: list[float], w: list[float], ranks: dict[int, list[tuple[str, int]]]) -> float:
    """The step's lower bound of the module from each stage's ``f``, ``i``, ``w`` (seconds of one
    micro-batch) and each rank's parts in order (``(kind, stage)``: ``F``, ``I``, ``W`` or ``B`` =
    ``I`` then ``W``; an overlapped unit's two parts listed one after the other)."""
    before_f = [sum(f[:s]) for s in range(len(f))]
    before_i = [sum(i[:s]) for s in range(len(i))]
    best = 0.0
    for parts in ranks.values():
        if not parts:
            continue
        head = before_f[parts[0][1]]               # its first part waits for the forwards before it
        backwards = [stage for kind, stage in parts if kind in ("I", "B")]
        tail = before_i[backwards[-1]] if backwards else 0.0
        forward_input = sum(f[s] if kind == "F" else i[s] for kind, s in parts if kind in ("F", "I", "B"))
        weights = sum(w[s] for kind, s in parts if kind in ("W", "B"))
        best = max(best, head + forward_input + max(weights, tail))
    return best


def recipe_text(p: dict) -> str:
    """A candidate's recipe in words (its :data:`RECIPE_FIELDS`)."""
    etp = int(p.get("expert_tp", 1))
    return (f"micro-batch {int(p['microbatch_size'])}, GEMMs {p['gemm_precision']}, recomputation "
            f"{p['memory_policy']}, ZeRO-{int(p['zero_stage'])}" + (f", expert TP {etp}" if etp > 1 else "")
            + (", TP comm overlap" if str(p.get("tp_comm_overlap", False)).lower() == "true" else ""))


__all__ = ["MEMORY_FIELDS", "MICROBATCH_SIZES", "POLICY_LEVELS", "RECIPE_FIELDS", "WORK_FIELDS", "ZERO_GROUPS",
           "compute_bound_s", "expert_tps", "memory_frontier", "overlaps", "policy_levels", "precisions",
           "recipe_text", "zero_groups"]
