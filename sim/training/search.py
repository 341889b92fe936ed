"""A schedule search on the simulator: for one scenario and an HBM limit, better orders than the
named schedules, found by local moves and checked by the full step.

Hand-written rules (1F1B, Zero Bubble's greedy construction, DualPipe) place ops from compute
times alone; the MoE step's ops also carry all-to-alls, overlapped or not, and ranks of unequal
work. The search starts from each named order and improves it:

1. **start**: the named schedule (``zb``: Zero Bubble's searched order at the largest memory
   limit that fits, ``zb-auto`` with N micro-batches; ``dualpipe``; ``dualpipev``; any other
   name) is simulated once by :class:`~sim.training.step.MoEStep`: the step time, memory and
   all-to-all times every later step reuses;
2. **surrogate**: every op's duration on its rank as the step's runner charges it alone
   (:meth:`~sim.training.runner.GroupRunner.op_seconds`: its compute and all-to-alls, overlapped as
   its plan says) and each pair of ranks' pipeline send alone on the step's fabric (plus the
   send kernel's launch) time any order in milliseconds
   (:mod:`sim.schedules.timing`); each rank's end plus its tail in the start's step (exposed
   data-parallel synchronisation and optimizer step) gives the step time. It leaves out
   contention between sends and with the data-parallel traffic, and how the tail changes when
   the order moves a stage's last weight gradient (DeepSeek-V3 under DualPipe: 16.7248 s against
   the full step's 16.7262 s);
3. **climb**, in rounds of :data:`ROUND_MOVES` random local moves (:mod:`sim.schedules.moves`)
   until ``budget`` moves: a move is kept when the order still runs, every rank's memory
   (weights, gradients and optimizer states, which no move changes, plus the order's activation
   peak, :mod:`sim.training.model.memory`) stays within the limit, and the surrogate's step time is not
   longer (equal: kept, to cross plateaus);
4. **verify**: each round's best order (by the surrogate) is simulated by the full step; it
   becomes the next round's start only if the full step is faster (the surrogate's errors, such as
   sends that now meet, never enter the answer); otherwise the next round starts again from the
   best so far. Reported times are always the full step's; an order no faster than the start
   leaves the start as the answer.

Same scenario, limit, budget and seed: the same orders and times, to the last digit.
"""
from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import dataclass, field

import simpy

from ..checks import InputError, number
from ..schedules import Schedule, validate
from ..schedules.moves import propose
from ..schedules.timing import rank_ends
from .model.memory import activation_peak, stage_activation_bytes, stage_output_bytes, stages_held
from .scenario import Scenario
from .step import MoEStep, StepResult

STARTS = ("zb", "dualpipe", "dualpipev")
MAX_BUDGET = 10_000_000
ROUND_MOVES = 500           # moves per round; each round's best order is checked by the full step
DEFAULT_BUDGET = 10_000


@dataclass
class SearchResult:
    """The search from one named start: the start's and the best order's full-step figures
    (seconds, GB), the surrogate's step times (seconds), the climb's counts and the best order."""

    start: str                      # the start as asked (zb, dualpipe, ...)
    schedule: str                   # the named schedule it ran (zb-auto N=.., dualpipe, ...)
    named_step_s: float
    named_memory_gb: float
    best_step_s: float
    best_memory_gb: float
    surrogate_named_s: float        # the surrogate's step time of the start, beside named_step_s
    surrogate_best_s: float
    bound_s: float                  # no order of the start's placement and stages is faster (surrogate)
    moves_tried: int
    moves_kept: int
    improvements: int               # orders the surrogate found better than the round's start
    verified: int                   # orders checked by the full step
    wall_s: float
    order: Schedule = field(repr=False)
    note: str = ""

    @property
    def gain(self) -> float:
        """Named step time / best step time (1: nothing better found)."""
        return self.named_step_s / self.best_step_s

    def row(self) -> dict:
        """The CSV row (no order)."""
        return {"start": self.start, "schedule": self.schedule, "named_step_s": self.named_step_s,
                "named_memory_gb": self.named_memory_gb, "best_step_s": self.best_step_s,
                "best_memory_gb": self.best_memory_gb, "gain": self.gain,
                "surrogate_named_s": self.surrogate_named_s, "surrogate_best_s": self.surrogate_best_s,
                "bound_s": self.bound_s, "moves_tried": self.moves_tried, "moves_kept": self.moves_kept,
                "improvements": self.improvements, "verified": self.verified, "wall_s": self.wall_s,
                "note": self.note}


class Surrogate:
    """Fixed-duration timing of orders of one scenario (see the module, step 2) and their memory."""

    def __init__(self, step: MoEStep, named: StepResult):
        sc = step.scenario
        # After its last op: a rank's gradients reduced in the time they took in the start's step;
        # then (global) every rank waits for the last and the rest of the step follows, or (bypass)
        # the rank's own optimizer step and all-gather, its span counted from its first op.
        first: dict[int, float] = {}
        for rec in named.engine.records:
            first[rec.rank] = min(first.get(rec.rank, rec.start), rec.start)
        if sc.run.optimizer_sync == "bypass":
            self.tail_s = {r.rank: r.sync_end_s - r.last_op_end_s for r in named.ranks}
            self.first_s = {r.rank: first.get(r.rank, 0.0) for r in named.ranks}
            self.after_s = 0.0
        else:
            self.tail_s = {r.rank: r.reduced_s - r.last_op_end_s for r in named.ranks}
            self.first_s = {r.rank: 0.0 for r in named.ranks}
            self.after_s = named.step_time_s - max(r.reduced_s for r in named.ranks)
        self.runner = step.runners(sc.step_fabric(simpy.Environment()))[0]
        self._sends: dict[tuple, float] = {}
        self._scenario = sc
        self._seconds: dict[tuple, float] = {}
        memory = sc.memory
        self.static_gb = [m.total_gb - m.activations_gb for m in memory]
        self.stage_bytes = stage_activation_bytes(sc.model, sc.run, sc.chunk.layers_per_stage)
        self.stage_layers = list(sc.chunk.layers_per_stage)
        self.kept = stage_output_bytes(sc.model, sc.run, len(self.stage_layers))

    def send_s(self, src: int, dst: int) -> float:
        """One pipeline send from rank ``src`` to ``dst`` (replica 0) alone on the step's fabric:
        the send kernel's launch, then the activation's bytes at the rate the fabric gives them (the
        route's slowest link, or the NCCL kernel's own bound) and the route's latency (seconds)."""
        seconds = self._sends.get((src, dst))
        if seconds is None:
            sc = self._scenario
            env = simpy.Environment()
            done = sc.step_fabric(env).transfer(sc.layout.gpu(src, 0), sc.layout.gpu(dst, 0),
                                                sc.chunk.activation_bytes())
            env.run(done)
            seconds = self._sends[(src, dst)] = env.now + sc.kernels.nccl_launch_s
        return seconds

    def duration(self, rank: int, op) -> float:
        key = (rank, op.kind, op.f.stage, op.b.stage) if op.kind == "FB" else (rank, op.kind, op.stage)
        seconds = self._seconds.get(key)
        if seconds is None:
            seconds = self._seconds[key] = self.runner.op_seconds(rank, op)
        return seconds

    def finishes(self, schedule: Schedule) -> dict[int, float] | None:
        """Each rank's last op's end plus its tail (seconds): under the global optimizer barrier,
        when its gradients are reduced (taking as long after its last op as in the start's step);
        under ``bypass``, when its optimizer step ends, counted from its first op (the start's).
        ``None`` if the order deadlocks."""
        ends = rank_ends(schedule, self.duration, self.send_s)
        return None if ends is None else {r: end + self.tail_s[r] - self.first_s[r] for r, end in ends.items()}

    def time(self, schedule: Schedule) -> float | None:
        """Step time (seconds) of ``schedule``: the latest of :meth:`finishes`, plus (global) the
        norm all-reduce, optimizer step and all-gather after the last rank's reduction."""
        finishes = self.finishes(schedule)
        return None if finishes is None else max(finishes.values()) + self.after_s

    def bound(self, schedule: Schedule) -> float:
        """No order of this placement and stage split is faster: the most any rank's ops take,
        back to back, plus its tail (seconds)."""
        return max(sum(self.duration(r, op) for op in ops) + self.tail_s[r]
                   for r, ops in schedule.ranks.items()) + self.after_s

    def rank_memory_gb(self, schedule: Schedule, rank: int) -> float:
        """GB on ``rank`` under ``schedule``: its fixed states plus the order's activation peak (with
        the outputs its stages keep, ``stage_outputs_kept``)."""
        peak = activation_peak(schedule.ranks[rank], self.stage_bytes, self.stage_layers, self.kept)[0]
        return self.static_gb[rank] + peak / 1e9


def check_search(memory_limit_gb: float, budget: int, seed: int) -> None:
    """One line naming the field for a bad limit, budget or seed."""
    number(memory_limit_gb, "memory limit (GB)", low=0, low_open=True, high=1e6)
    number(budget, "search budget (moves tried per start)", integer=True, low=1, high=MAX_BUDGET)
    number(seed, "seed", integer=True, low=0, high=2 ** 63 - 1)


def one_microbatch_gb(scenario: Scenario) -> float:
    """The least HBM any order of this scenario's shape needs on its fullest rank: the rank's
    fixed states plus one micro-batch's forward of its largest stage (GB)."""
    stage_bytes = stage_activation_bytes(scenario.model, scenario.run, scenario.chunk.layers_per_stage)
    held = stages_held(scenario.schedule)
    return max(m.total_gb - m.activations_gb + max(stage_bytes[s][0] for s in held[m.rank]) / 1e9
               for m in scenario.memory)


def zb_start(scenario: Scenario, memory_limit_gb: float) -> Scenario | None:
    """Zero Bubble's searched order (``zb-auto``) at the most micro-batches of activations per
    stage that keep every rank within ``memory_limit_gb`` (``None`` if not even one fits)."""
    probe = scenario.with_schedule("1f1b")             # the same stages and fixed states as zb-auto
    stage_bytes = stage_activation_bytes(probe.model, probe.run, probe.chunk.layers_per_stage)
    unit = max(f for f, _ in stage_bytes[:2]) / 1e9
    room = min(memory_limit_gb - (m.total_gb - m.activations_gb) for m in probe.memory)
    n = math.floor(room / unit) if unit > 0 else 2 * probe.run.pp
    if n < 1:
        return None
    return Scenario(probe.run.with_(schedule="zb-auto", zb_memory_limit=min(n, 4 * probe.run.microbatches)),
                    topology=probe.topology)


def start_scenario(scenario: Scenario, start: str, memory_limit_gb: float) -> Scenario | None:
    return zb_start(scenario, memory_limit_gb) if start == "zb" else scenario.with_schedule(start)


@dataclass
class Climb:
    """One round's outcome: the best order it passed through and its surrogate step time (the
    round's start when nothing was better), moves kept and strict improvements."""

    order: Schedule
    cost: float
    kept: int = 0
    improved: int = 0


def climb(schedule: Schedule, surrogate: Surrogate, memory_limit_gb: float, moves: int, rng: random.Random,
          progress=None) -> Climb:
    """``moves`` random moves from ``schedule`` (see the module, step 3). Half the moves fall on
    the rank that finishes last or a neighbour (the critical path runs through them), half on any
    rank. A move that leaves the surrogate's step time as it was is kept (to cross plateaus)."""
    current = schedule
    finishes = surrogate.finishes(current)
    cost = max(finishes.values())
    memory = [surrogate.rank_memory_gb(current, r) for r in range(current.pp)]
    best = Climb(current, cost if max(memory) <= memory_limit_gb else math.inf)
    P = current.pp
    for _ in range(moves):
        if progress is not None:
            progress(1)
        rank = None
        if rng.random() < 0.5:
            last = max(finishes, key=lambda r: (finishes[r], -r))
            rank = (last + rng.choice((-1, 0, 0, 1))) % P
        move = propose(current, rng, rank=rank)
        if move is None:
            continue
        candidate = move.apply(current)
        new_finishes = surrogate.finishes(candidate)
        if new_finishes is None:
            continue
        new_cost = max(new_finishes.values())
        if new_cost > cost:
            continue
        mem = surrogate.rank_memory_gb(candidate, move.rank)
        if mem > memory_limit_gb and mem > memory[move.rank]:
            continue
        memory[move.rank] = mem
        current, cost, finishes = candidate, new_cost, new_finishes
        best.kept += 1
        if cost < best.cost and max(memory) <= memory_limit_gb:
            best.order, best.cost = current, cost
            best.improved += 1
    return best


def search_start(sc: Scenario, start: str, memory_limit_gb: float, budget: int, seed: int,
                 comm=None, mode: str = "auto", progress=None) -> tuple[SearchResult, object]:
    """The search from the start scenario ``sc`` (:func:`start_scenario`; see the module) and the
    all-to-all measurements it used (``comm``, reused when given)."""
    t0 = time.perf_counter()
    step = MoEStep(sc, mode, comm=comm)
    named = step.simulate()
    surrogate = Surrogate(step, named)
    rng = random.Random(f"{seed}:{start}")
    best_order, best = sc.schedule, named
    fits = named.max_memory_gb <= memory_limit_gb
    kept = improved = checked = 0
    surrogate_best = surrogate.time(best_order)
    for done in range(0, budget, ROUND_MOVES):
        found = climb(best_order, surrogate, memory_limit_gb, min(ROUND_MOVES, budget - done), rng, progress)
        kept, improved = kept + found.kept, improved + found.improved
        if found.order is best_order:
            continue
        result = MoEStep(sc.with_order(validate(found.order)), mode, comm=step.comm).simulate()
        checked += 1
        if result.max_memory_gb <= memory_limit_gb and (result.step_time_s < best.step_time_s or not fits):
            best_order, best, surrogate_best, fits = found.order, result, found.cost, True
    name = sc.schedule.name if sc.run.schedule != "zb-auto" else f"zb-auto N={sc.run.zb_memory_limit:g}"
    best_order = Schedule(f"searched from {name}", best_order.pp, best_order.num_stages, best_order.microbatches,
                          best_order.ranks, best_order.placement)
    note = ""
    if named.max_memory_gb > memory_limit_gb:
        note = (f"{name} itself needs {named.max_memory_gb:.2f} GB, above the {memory_limit_gb:g} GB limit; "
                + ("a searched order fits" if fits else "infeasible: no order found fits, the start is reported"))
    return SearchResult(start, name, named.step_time_s, named.max_memory_gb, best.step_time_s, best.max_memory_gb,
                        surrogate.time(sc.schedule), surrogate_best, surrogate.bound(sc.schedule), budget, kept,
                        improved, checked, time.perf_counter() - t0, best_order, note), step.comm


def search_schedules(scenario: Scenario, memory_limit_gb: float, budget: int = DEFAULT_BUDGET, seed: int = 0,
                     starts: tuple = STARTS, mode: str = "auto",
                     progress: bool | None = None) -> list[SearchResult]:
    """The search from each of ``starts`` (see the module); one :class:`SearchResult` per start
    that fits ``memory_limit_gb``. ``progress``: a bar on stderr (default: when stderr is a
    terminal). Raises :class:`~sim.checks.InputError` in one line when the
    limit is below what one micro-batch needs under every start, or for a bad budget or seed."""
    check_search(memory_limit_gb, budget, seed)
    if not starts:
        raise InputError("starts: name at least one schedule to start from (e.g. zb, dualpipe, dualpipev)")
    run = scenario.run
    if run.faults is not None and run.faults.any:
        raise InputError("search-schedule times orders without faults: leave out the fault options")
    fitting = {}
    for start in starts:
        sc = start_scenario(scenario, start, memory_limit_gb)
        if sc is not None and one_microbatch_gb(sc) <= memory_limit_gb:
            fitting[start] = sc
    if not fitting:
        need = min(one_microbatch_gb(s) for s in (start_scenario(scenario, st, 1e9) for st in starts) if s is not None)
        raise InputError(f"memory limit {memory_limit_gb:g} GB is below what one micro-batch needs: "
                         f"{need:.1f} GB on the fullest rank under {', '.join(starts)} (weights, gradients, "
                         "optimizer states, reserve and one forward's activations)")
    bar = None
    if progress is None:
        progress = sys.stderr.isatty()
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=budget * len(fitting), desc="search", unit="move", file=sys.stderr, mininterval=0.5)
    results, comm = [], None
    try:
        for start, sc in fitting.items():
            result, comm = search_start(sc, start, memory_limit_gb, budget, seed, comm, mode,
                                        bar.update if bar is not None else None)
            results.append(result)
    finally:
        if bar is not None:
            bar.close()
    return results


__all__ = ["DEFAULT_BUDGET", "ROUND_MOVES", "STARTS", "Climb", "SearchResult", "Surrogate", "check_search", "climb",
           "one_microbatch_gb", "search_schedules", "search_start", "start_scenario", "zb_start"]
