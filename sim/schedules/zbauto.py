"""Zero Bubble's automatic schedules (Qi et al., ICLR 2024, section 3.1): ZB-1p, ZB-2p and ZB-auto.

A greedy construction from profiled per-stage times (F, I = the paper's B, W, and one pipeline
send) under a memory limit per stage, as the paper's heuristic and its public implementation
(github.com/sail-sg/zero-bubble-pipeline-parallelism, ``zerobubble/scheduler/zb.py``) build it; the
code here is our own. Where the two differ we follow the implementation, and say so:

* the stages' times are replaced by their median (the implementation: "uniform f/b/w timing");
* the limit is ``N x`` a micro-batch's forward memory (``--zero-bubble-max-pending-backward``):
  ZB-1p is N = P (1F1B's peak), ZB-2p N = 2P;
* three yes/no choices are tried in all 8 combinations and the order with the shortest longest
  stage span kept (the paper: "a grid search to find the best combination of hyperparameters");
  the implementation's ILP refinement is not part of it;
* where a profiled input gradient adds memory (its W keeps more than the forward held: the
  output gradients a deferred W needs, as under DeepSeek-V3's FP8 caching), a forward is put only
  with room left for the I that must follow it; the implementation's memory model (an I always
  frees) never meets this case, and without it the construction stalls at the limit.

Memory counts in the units the caller gives: a forward adds ``mem_f`` to its stage, an input
gradient ``mem_i`` (usually negative: it frees what only the forward needed), a weight gradient
``mem_w`` (frees the rest); ``mem_f + mem_i + mem_w = 0``. Without a profile: F = I = W = 1, no
send time, memory 2, -1, -1 (the implementation's example).

The construction, per stage ``j`` (a stage's ops run back to back; an op starts when its stage is
free and, for F, the previous stage's F plus a send has ended, for I the next stage's I plus a send):

1. micro-batch 0: a forward on every stage; then as many more forwards as fit in memory before the
   first input gradient can arrive (or, with ``allow_bubble``, until one more would delay it),
   each stage keeping at least one forward fewer than the one before; then I of micro-batch 0
   from the last stage back;
2. each further micro-batch i: a forward on each stage that has one left (with ``prioritize_i``,
   a stage two or more forwards ahead of the next may hold its forward back when that would delay
   the next stage's I), no stage more than the one before; W's are put first where memory demands
   it, and where they fit in the wait for the forward's input (with ``fill_gaps``, also into a
   wait shorter than a W when that wait keeps the stage's bubble below the largest stage's);
   then I of micro-batch i from the last stage back, filling waits with W's the same way; the
   first stage drains its W's once its forwards are done;
3. every W left, in order.

Each rank's ops come out in the order they were put; ``validate`` checks the result.
"""
from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

from ..checks import InputError, number
from .ops import Op


@dataclass(frozen=True)
class StageCosts:
    """Per-stage times of one micro-batch (any one unit), the send time between stages, and the
    memory each op leaves on its stage (``mem_f + mem_i + mem_w = 0`` per stage)."""

    f: tuple
    i: tuple
    w: tuple
    comm: float = 0.0
    mem_f: tuple = ()
    mem_i: tuple = ()
    mem_w: tuple = ()

    @classmethod
    def uniform(cls, stages: int, f: float = 1.0, i: float = 1.0, w: float = 1.0, comm: float = 0.0,
                mem: tuple = (2.0, -1.0, -1.0)) -> "StageCosts":
        return cls((f,) * stages, (i,) * stages, (w,) * stages, comm, (mem[0],) * stages, (mem[1],) * stages,
                   (mem[2],) * stages)

    def check(self, stages: int) -> "StageCosts":
        """Refuse times that are zero or negative, lists of the wrong length, memory that does not
        balance; one line naming the field."""
        mem_f = self.mem_f or (2.0,) * stages
        mem_i = self.mem_i or (-1.0,) * stages
        mem_w = self.mem_w or (-1.0,) * stages
        for name, values in (("f", self.f), ("i", self.i), ("w", self.w), ("mem_f", mem_f), ("mem_i", mem_i),
                             ("mem_w", mem_w)):
            if len(values) != stages:
                raise InputError(f"profiled {name} times must list one value per stage ({stages}), got "
                                 f"{len(values)}")
        for name, values in (("F", self.f), ("I (input gradient)", self.i), ("W (weight gradient)", self.w)):
            for s, v in enumerate(values):
                number(v, f"profiled {name} time of stage {s}", low=0, low_open=True)
        number(self.comm, "profiled send time between stages", low=0)
        for s in range(stages):
            number(mem_f[s], f"memory of a forward on stage {s}", low=0, low_open=True)
            if abs(mem_f[s] + mem_i[s] + mem_w[s]) > 1e-9 * max(1.0, abs(mem_f[s])):
                raise InputError(f"memory of stage {s} does not balance: forward {mem_f[s]:g} + input gradient "
                                 f"{mem_i[s]:g} + weight gradient {mem_w[s]:g} must be 0")
        return StageCosts(tuple(map(float, self.f)), tuple(map(float, self.i)), tuple(map(float, self.w)),
                          float(self.comm), tuple(map(float, mem_f)), tuple(map(float, mem_i)),
                          tuple(map(float, mem_w)))


class _Builder:
    """One greedy construction (three yes/no choices); ``put`` appends an op to a stage and times it."""

    def __init__(self, P: int, M: int, c: StageCosts, limit: list[float]):
        self.P, self.M, self.c, self.limit = P, M, c, limit
        self.cost = {"F": c.f, "I": c.i, "W": c.w}
        self.mem = {"F": c.mem_f, "I": c.mem_i, "W": c.mem_w}
        # Room a forward leaves for the input gradient that must follow it, where that I adds memory
        # (its W keeps more than the forward held); 0 in the implementation's model (an I frees).
        self.reserve = [max(0.0, m) for m in c.mem_i]
        self.count = {k: [0] * P for k in "FIW"}
        self.free = [0.0] * P                 # when each stage is next free
        self.used = [0.0] * P                 # memory held on each stage
        self.bubble = [0.0] * P               # idle time inside each stage's span so far
        self.end: dict[tuple, float] = {}     # (kind, stage, mb) -> end time
        self.ops: list[list[Op]] = [[] for _ in range(P)]

    def ready(self, kind: str, j: int, mb: int) -> float:
        """When the input of ``kind`` micro-batch ``mb`` on stage ``j`` has arrived."""
        if kind == "F" and j > 0:
            return self.end[("F", j - 1, mb)] + self.c.comm
        if kind == "I" and j < self.P - 1:
            return self.end[("I", j + 1, mb)] + self.c.comm
        return 0.0

    def put(self, j: int, kind: str) -> None:
        mb = self.count[kind][j]
        cost = self.cost[kind][j]
        start = max(self.free[j], self.ready(kind, j, mb))
        if self.count["F"][j] > 0:
            self.bubble[j] += start - self.free[j]
        self.free[j] = self.end[(kind, j, mb)] = start + cost
        self.used[j] += self.mem[kind][j]
        self.count[kind][j] += 1
        self.ops[j].append(Op(kind, mb, j))

    def pending_w(self, j: int) -> bool:
        return self.count["W"][j] < self.count["I"][j]

    def make_room(self, j: int, kind: str) -> None:
        """W's until ``kind`` fits the stage's memory limit (a forward with room for its I)."""
        need = self.mem[kind][j] + (self.reserve[j] if kind == "F" else 0.0)
        while self.used[j] + need > self.limit[j] + 1e-9:
            if not self.pending_w(j):
                raise InputError(f"the memory limit ({self.limit[j]:g}) is below what stage {j} needs for one "
                                 f"more micro-batch's {kind} ({self.used[j] + need:g} with nothing "
                                 "left to free): raise it")
            self.put(j, "W")

    def fill(self, j: int, until: float, fill_gaps: bool) -> None:
        """W's into the wait before ``until`` (the next op's input): every W that ends by then, and one
        more into a shorter wait (with ``fill_gaps`` only when the wait would keep this stage's bubble
        within the largest stage's; always when it would not)."""
        while self.pending_w(j) and self.free[j] + self.cost["W"][j] <= until:
            self.put(j, "W")
        if self.pending_w(j) and self.free[j] < until:
            if until - self.free[j] > max(self.bubble) - self.bubble[j] or fill_gaps:
                self.put(j, "W")

    def warm_up(self, allow_bubble: bool) -> None:
        """Phase 1: micro-batch 0's forwards, as many more as fit before its I returns, its I's."""
        P, M, c = self.P, self.M, self.c
        for j in range(P):
            self.put(j, "F")
        extra = [0] * P
        arrival = self.end[("F", P - 1, 0)] + c.i[P - 1]          # I of micro-batch 0 leaves the last stage
        for j in range(P - 2, -1, -1):
            used, busy = self.used[j], self.free[j]
            while (self.count["F"][j] + extra[j] < M
                   and used + c.mem_f[j] + self.reserve[j] <= self.limit[j] + 1e-9):
                if (busy + c.f[j] > arrival + c.comm) if allow_bubble else (busy >= arrival + c.comm):
                    break
                used += c.mem_f[j]
                busy += c.f[j]
                extra[j] += 1
            arrival = max(busy, arrival + c.comm) + c.i[j]
        for j in range(1, P):                                      # each stage fewer than the one before
            while 0 < extra[j] and extra[j] >= extra[j - 1] and self.count["F"][j] + extra[j] < M:
                extra[j] -= 1
        for j in range(P):
            for _ in range(extra[j]):
                self.put(j, "F")
        for j in range(P - 1, -1, -1):
            self.put(j, "I")

    def holds_back(self, j: int) -> bool:
        """With ``prioritize_i``: whether stage ``j``, two or more forwards ahead of ``j + 1``, keeps
        its next forward back so as not to delay ``j + 1``'s input gradient."""
        c = self.c
        nxt = j + 1
        due = self.free[nxt] + c.f[nxt] + c.i[nxt] + c.comm    # when j+1's next F and I would be done
        if self.free[j] >= due:
            return True
        w_cost, room = 0.0, self.used[j] + c.mem_f[j] + self.reserve[j]
        k = self.count["W"][j]
        while room > self.limit[j] + 1e-9 and k < self.count["I"][j]:
            w_cost += c.w[j]
            room += c.mem_w[j]
            k += 1
        if self.free[j] + c.f[j] + w_cost <= due:
            return False
        return due - self.free[j] <= max(self.bubble) - self.bubble[j]

    def steady(self, mb: int, prioritize_i: bool, fill_gaps: bool) -> None:
        """Phase 2 for micro-batch ``mb`` >= 1."""
        P, M = self.P, self.M
        want = [0] * P
        for j in range(P):
            if self.count["F"][j] >= M:
                continue
            ahead = j + 1 < P and self.count["F"][j] >= self.count["F"][j + 1] + 2
            want[j] = 0 if (prioritize_i and ahead and self.holds_back(j)) else 1
        for j in range(P - 2, -1, -1):
            want[j] = min(want[j], want[j + 1])
        for j in range(P):
            if want[j]:
                self.make_room(j, "F")
                if j > 0:
                    self.fill(j, self.ready("F", j, self.count["F"][j]), fill_gaps)
                self.put(j, "F")
        for j in range(P - 1, -1, -1):
            self.make_room(j, "I")
            if j + 1 < P:
                self.fill(j, self.ready("I", j, mb), fill_gaps)
            if j == 0 and self.count["F"][j] == M:
                while self.pending_w(j):
                    self.put(j, "W")
            self.put(j, "I")

    def build(self, allow_bubble: bool, prioritize_i: bool, fill_gaps: bool) -> float:
        self.warm_up(allow_bubble)
        for mb in range(1, self.M):
            self.steady(mb, prioritize_i, fill_gaps)
        for j in range(self.P):
            while self.count["W"][j] < self.M:
                self.put(j, "W")
        return self.span()

    def span(self) -> float:
        """The longest stage span: from the start of a stage's first F to the end of its last W."""
        return max(self.end[("W", j, self.M - 1)] - self.end[("F", j, 0)] + self.c.f[j] for j in range(self.P))


def median_costs(c: StageCosts) -> StageCosts:
    """Every stage at the median stage's times (the implementation's uniform timing); memory kept."""
    P = len(c.f)
    return StageCosts((statistics.median(c.f),) * P, (statistics.median(c.i),) * P, (statistics.median(c.w),) * P,
                      c.comm, c.mem_f, c.mem_i, c.mem_w)


@dataclass(frozen=True)
class AutoResult:
    """A constructed order: per-rank ops, its longest stage span and bubble rate in the costs'
    units, the three choices that built it."""

    ranks: dict
    span: float
    bubble_rate: float
    choices: tuple


def zb_auto(P: int, M: int, memory_limit: float, costs: StageCosts | None = None) -> AutoResult:
    """The best of the 8 constructions under a limit of ``memory_limit`` forwards' memory per stage
    (the largest of the first two stages' forward memory, as the implementation measures it).
    Bubble rate (the paper's Table 5): (span - M (F + I + W)) / span at the median stage's times."""
    number(P, "pp (P)", integer=True, low=1)
    number(M, "microbatches (M)", integer=True, low=1)
    number(memory_limit, "memory limit (micro-batches of activations per stage)", low=1)
    c = median_costs((costs or StageCosts.uniform(P)).check(P))
    unit = max(c.mem_f[:2])
    limit = [memory_limit * unit] * P
    best = None
    for choices in itertools.product((True, False), repeat=3):
        builder = _Builder(P, M, c, limit)
        span = builder.build(*choices)
        if best is None or span < best[0] - 1e-12:
            best = (span, builder, choices)
    span, builder, choices = best
    work = M * (c.f[0] + c.i[0] + c.w[0])
    return AutoResult({j: builder.ops[j] for j in range(P)}, span, (span - work) / span, choices)


def zb_1p(P: int, M: int, costs: StageCosts | None = None) -> dict:
    """ZB-1p: the construction under 1F1B's activation memory (P micro-batches per stage)."""
    return zb_auto(P, M, P, costs).ranks


def zb_2p(P: int, M: int, costs: StageCosts | None = None) -> dict:
    """ZB-2p: under twice 1F1B's activation memory (2P micro-batches), where the paper finds the
    bubble close to zero."""
    return zb_auto(P, M, 2 * P, costs).ranks


__all__ = ["AutoResult", "StageCosts", "median_costs", "zb_1p", "zb_2p", "zb_auto"]
