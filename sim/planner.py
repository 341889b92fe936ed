"""The planner: search PP, EP, schedule, micro-batch count and the layer split within HBM, rank by
simulated step time, and say why the winner wins (``python -m sim plan``).

Candidates: every TP in ``tps`` and CP in ``cps`` (by default TP 1, 2, 4, 8 for a dense model and
1, 2 for an MoE model, as Megatron's MoE recipes use, with Megatron's sequence parallelism; CP 1,
or 1, 2, 4, 8 for sequences over 8K tokens) and PP in ``pps`` whose product divides the GPUs
(DP = GPUs / (TP x CP x PP)), every EP in ``eps`` (GPUs, folded over TP, CP and DP: a multiple of
TP x CP whose replicas divide DP) that divides the model's routed experts and fits whole nodes;
M = global batch / DP sequences of
``microbatch_size``; and each layer split in ``head_cuts``: the even split, or the stage holding the
output heads and MTP modules (the last stage) given that many fewer layers than the even split,
the rest even; and each recipe of :mod:`sim.plan_recipes` (those fields the request leaves
``None``). Each candidate's memory is checked first, from the memory model alone (no fabric is
built: one topology graph serves every candidate's layout checks); :mod:`sim.plan_search` picks
which of those that fit HBM are simulated (a sweep: local Dask cluster or a scheduler address),
and they are ranked by step time. Each row
says what bounds the candidate (its largest loss besides compute), how uneven its ranks' compute
is, and its memory headroom.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .checks import InputError, choice, number
from .io import is_true
from .plan_recipes import (
    MICROBATCH_SIZES,
    RECIPE_FIELDS,
    compute_bound_s,
    expert_tps,
    memory_frontier,
    overlaps,
    policy_levels,
    precisions,
    zero_groups,
)
from .training.model.specs import COMPARED_SCHEDULES, GEMM_PRECISIONS, MEMORY_POLICIES, RunSpec, load_gpu, load_model

DEFAULT_GLOBAL_BATCH = 1024     # sequences (4.2M tokens at 4K): our stated default, printed with every plan
LONG_SEQUENCE = 8192            # tokens: longer sequences make the planner try context parallelism
VIRTUAL_STAGES = 2              # interleaved-1f1b's model chunks per rank in a plan
PLAN_SCHEDULES = COMPARED_SCHEDULES + ("interleaved-1f1b",)   # what a plan compares by default


@dataclass(frozen=True)
class PlanRequest:
    """What to plan for: a global batch of :data:`DEFAULT_GLOBAL_BATCH` sequences of 4K tokens by
    default. The recipe fields left ``None`` are searched (:mod:`sim.plan_recipes`): micro-batch
    size 1 or 2, BF16 or FP8 GEMMs (FP8 where the GPU has it), recomputation and ZeRO stage (the
    fastest that fit), expert TP, TP-communication overlap; a field given is fixed. ``scenario``
    (a preset or YAML file) fixes its own recipe instead (``deepseek-v3``: FP8 GEMMs, its memory
    policy, 15,360 sequences), every other field of the scenario (wire precision, bytes per
    parameter, kernels) included. ``gpu`` ``None``: the topology's own GPU (its ``gpu:`` field)."""

    gpus: int
    model: str
    topology: str
    gpu: str | None = None
    global_batch: int = DEFAULT_GLOBAL_BATCH
    seq_len: int = 4096
    microbatch_size: int | None = None         # None: searched (MICROBATCH_SIZES)
    pps: tuple[int, ...] = (8, 16)
    eps: tuple[int, ...] = (8, 16, 32, 64)
    tps: tuple[int, ...] = ()                  # () = (1, 2, 4, 8), or (1, 2) for an MoE model
    cps: tuple[int, ...] = ()                  # () = (1,), or (1, 2, 4, 8) for sequences over 8K tokens
    sequence_parallel: bool = True             # with TP > 1 (Megatron's recommended setting)
    schedules: tuple[str, ...] = field(default=PLAN_SCHEDULES)
    gemm_precision: str | None = None          # None: BF16 and FP8 where the GPU has it
    node_limit: int = 0
    memory_policy: str | None = None           # None: the recomputation ladder (POLICY_LEVELS)
    zero_stage: int | None = None              # None: ZeRO-1, -2 or -3 (ZERO_GROUPS)
    expert_tp: int | None = None               # None: 1 and TP (MoE)
    tp_comm_overlap: bool | None = None        # None: off and on (TP > 1 with SP)
    head_cuts: tuple[int, ...] = (0, 1)
    scenario: str = ""

    def __post_init__(self):
        from .schedules import SCHEDULE_NAMES
        for name, low in (("gpus", 1), ("global_batch", 1), ("seq_len", 1), ("microbatch_size", 1),
                          ("node_limit", 0), ("expert_tp", 1)):
            if getattr(self, name) is not None or name in ("gpus", "global_batch", "seq_len", "node_limit"):
                number(getattr(self, name), name, integer=True, low=low, high=100_000_000)
        for name, low in (("pps", 1), ("eps", 1), ("head_cuts", 0), ("tps", 1), ("cps", 1)):
            values = getattr(self, name)
            if not values and name not in ("cps", "tps"):
                raise InputError(f"{name} must list at least one value")
            for v in values:
                number(v, f"{name} entries", integer=True, low=low, high=100_000_000)
        if not self.schedules:
            raise InputError("schedules must list at least one schedule")
        for name in self.schedules:
            choice(name, "schedules entries", SCHEDULE_NAMES)
        if self.gemm_precision is not None:
            choice(self.gemm_precision, "gemm_precision", GEMM_PRECISIONS)
        if self.memory_policy is not None:
            choice(self.memory_policy, "memory_policy", MEMORY_POLICIES)
        if self.zero_stage is not None:
            number(self.zero_stage, "zero_stage", integer=True, low=0, high=3)
        for name in ("sequence_parallel", "tp_comm_overlap"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (name == "tp_comm_overlap" and value is None):
                raise InputError(f"{name} must be true or false, got {value!r}")

    @property
    def searched(self) -> tuple[str, ...]:
        """The recipe fields this plan searches (those not fixed)."""
        return tuple(name for name in RECIPE_FIELDS if getattr(self, name) is None)

    def tensor_sizes(self, moe: bool) -> tuple[int, ...]:
        """The TP sizes searched: ``tps``, or by default 1, 2, 4, 8 (1, 2 for an MoE model)."""
        return self.tps or ((1, 2) if moe else (1, 2, 4, 8))

    @property
    def context_sizes(self) -> tuple[int, ...]:
        """The CP sizes searched: ``cps``, or by default 1 (and 2, 4, 8 for sequences over 8K)."""
        return self.cps or ((1, 2, 4, 8) if self.seq_len > LONG_SEQUENCE else (1,))


def plan_request(scenario: str = "", **given) -> PlanRequest:
    """A :class:`PlanRequest` from what a user gave (``None``: not given): a field given wins, then
    the ``scenario``'s (its model, GPU, topology, batch and its recipe: micro-batch size, precision,
    memory policy, ZeRO stage, expert TP, TP overlap, node limit), then the defaults (a recipe
    field not given: searched)."""
    base = {}
    if scenario:
        from .training.model.specs import load_scenario
        run = load_scenario(scenario)
        base = {"model": run.model, "topology": run.topology, "gpu": run.gpu, "seq_len": run.seq_len,
                "global_batch": run.dp * run.microbatches * run.microbatch_size,
                "microbatch_size": run.microbatch_size, "gemm_precision": run.gemm_precision,
                "node_limit": run.node_limit or 0, "memory_policy": run.memory_policy, "zero_stage": run.zero_stage,
                "expert_tp": run.expert_tp, "tp_comm_overlap": run.tp_comm_overlap}
    merged = {**base, **{k: v for k, v in given.items() if v is not None}}
    for name in ("gpus", "model", "topology"):
        if merged.get(name) is None:
            raise InputError(f"{name} is required (give --{name}, or --scenario with one)")
    return PlanRequest(scenario=scenario, **merged)


def run_spec(p: dict) -> RunSpec:
    """The :class:`RunSpec` of a candidate point (a sweep row: plain values, maybe read back as text);
    a point with a ``scenario`` starts from that scenario's fields."""
    last = int(p["last_stage_layers"]) if str(p.get("last_stage_layers", "0")) not in ("0", "") else None
    tp, cp = int(p.get("tp", 1)), int(p.get("cp", 1))
    overlap = tp > 1 and is_true(p.get("tp_comm_overlap", False))
    fields_ = dict(model=p["model"], gpu=p["gpu"], topology=p["topology"], pp=int(p["pp"]), ep=int(p["ep"]),
                   dp=int(p["dp"]), tp=tp, cp=cp, sequence_parallel=tp > 1 and is_true(p.get("sequence_parallel", True)),
                   schedule=p["schedule"], microbatches=int(p["microbatches"]),
                   seq_len=int(p["seq_len"]), microbatch_size=int(p["microbatch_size"]),
                   gemm_precision=p["gemm_precision"], node_limit=int(p["node_limit"]) or None,
                   memory_policy=p["memory_policy"], zero_stage=int(p["zero_stage"]), last_stage_layers=last,
                   expert_tp=int(p.get("expert_tp", 1)), tp_comm_overlap=overlap,
                   chunks=virtual_stages(p["schedule"], int(p["pp"])))
    scenario = p.get("scenario")
    if isinstance(scenario, str) and scenario:
        from .training.model.specs import load_scenario
        base = load_scenario(scenario)
        # the scenario's own stage split is for its own PP: the point's split replaces it
        return base.with_(**fields_, stage_layers=None, first_stage_layers=None, description="")
    return RunSpec(**fields_)


def gpu_of(req: PlanRequest, graph) -> str:
    """The GPU a plan is for: the request's, or the topology's own (its ``gpu:`` field)."""
    from .training.model.specs import topology_gpu, warn_gpu_mismatch
    own = topology_gpu(graph, req.topology)
    if req.gpu is not None:
        warn_gpu_mismatch(req.gpu, req.topology, own)
        return req.gpu
    if own:
        return own
    raise InputError(f"gpu: topology {req.topology!r} names no GPU (no 'gpu:' field); give --gpu")


PLAN_METRICS = ("step_time_s", "tokens_per_s", "mfu", "bubble_share", "exposed_comm_share", "max_memory_gb",
                "min_headroom_gb", "compute_spread", "busiest_rank", "bound", "trust_runs", "trust_like",
                "trust_median_error_pct", "trust_low_error_pct", "trust_high_error_pct")


def evaluate(p: dict) -> dict:
    """Simulate one candidate (a sweep point): the metrics of :data:`PLAN_METRICS`."""
    from .training.step import simulate_step
    summary = simulate_step(run_spec(p)).summary()
    return {k: summary[k] for k in PLAN_METRICS}


def screen(p: dict) -> dict:
    """One candidate's screen (a sweep point): ``screen_s``, a lower bound on its simulated step
    from the analytical network (:mod:`sim.plan_screen`)."""
    from .plan_screen import screen_step_s
    return {"screen_s": screen_step_s(run_spec(p))}


def _stages(schedule: str, pp: int) -> int:
    from .schedules import SCHEDULES
    spec = SCHEDULES[schedule]
    return pp if spec.placement == "bidirectional" else \
        pp * (spec.stages_per_rank or virtual_stages(schedule, pp) or 1)


def virtual_stages(schedule: str, pp: int) -> int | None:
    """Model chunks per rank of a schedule that takes them as a parameter (``interleaved-1f1b``, and
    ``combined-1f1b`` over more than one rank: :data:`VIRTUAL_STAGES`, Megatron's usual); ``None``
    for the others."""
    from .schedules import takes_chunks
    return VIRTUAL_STAGES if takes_chunks(schedule, pp) else None


def candidates(req: PlanRequest, graph=None) -> tuple[list[dict], list[dict]]:
    """(points that fit HBM, rows of refused or non-fitting candidates with the reason); ``graph``:
    the request's topology when the caller has loaded it already. Each layout is tried with every
    work recipe and the memory frontier of :mod:`sim.plan_recipes`; each point carries ``bound_s``,
    its lower bound on the step (:func:`~sim.plan_recipes.compute_bound_s`, text: a sweep's config
    column)."""
    from topologies import load_topology

    from .training.costs.chunk import split_layers
    if graph is None:
        graph = load_topology(req.topology)
    gpu_name = gpu_of(req, graph)
    model, gpu = load_model(req.model), load_gpu(gpu_name)
    have = len(graph.graph["gpus"])
    if req.gpus > have:
        raise InputError(f"gpus {req.gpus:,} is more than the {have:,} GPUs of topology {req.topology!r}")
    ok, refused = [], []
    sizes = (req.microbatch_size,) if req.microbatch_size is not None else MICROBATCH_SIZES
    layouts = [(tp, cp, pp) for tp in req.tensor_sizes(model.is_moe) for cp in req.context_sizes for pp in req.pps]
    for tp, cp, pp in layouts:
        where = {"tp": tp, "cp": cp, "pp": pp}
        if req.gpus % (tp * cp * pp):
            refused.append({**where, "reason": f"TP {tp} x CP {cp} x PP {pp} does not divide {req.gpus} GPUs"})
            continue
        dp = req.gpus // (tp * cp * pp)
        batch_sizes = [m for m in sizes if req.global_batch % (dp * m) == 0]
        if not batch_sizes:
            refused.append({**where, "reason": f"global batch {req.global_batch} not divisible by DP {dp}"
                            + (f" x micro-batch size {sizes[0]}" if sizes[0] > 1 else "")})
            continue
        sp = req.sequence_parallel and tp > 1
        for mbs, ep, schedule, cut, precision, etp in itertools.product(
                batch_sizes, req.eps if model.is_moe else [1], req.schedules, req.head_cuts,
                precisions(req.gemm_precision, bool(gpu.fp8_tflops)), expert_tps(req.expert_tp, model.is_moe, tp)):
            p = {"tp": tp, "cp": cp, "sequence_parallel": sp, "pp": pp, "ep": ep, "dp": dp, "schedule": schedule,
                 "microbatches": req.global_batch // (dp * mbs), "last_stage_layers": 0, "model": req.model,
                 "gpu": gpu_name, "topology": req.topology, "seq_len": req.seq_len, "microbatch_size": mbs,
                 "gemm_precision": precision, "node_limit": req.node_limit or 0, "expert_tp": etp,
                 "tp_comm_overlap": False, "memory_policy": "none", "zero_stage": 1, "scenario": req.scenario}
            row = {**where, "ep": ep, "schedule": schedule, "head_cut": cut, "microbatch_size": mbs,
                   "gemm_precision": precision, "expert_tp": etp}
            if cut:
                stages = _stages(schedule, pp)
                even = split_layers(model.layers, stages) if stages <= model.layers else [0]
                if even[-1] - cut < 1:
                    continue
                p["last_stage_layers"] = even[-1] - cut
            _fit(p, row, req, graph, gpu, model, ok, refused)
    return ok, refused


def _fit(p: dict, row: dict, req: PlanRequest, graph, gpu, model, ok: list, refused: list) -> None:
    """Walk one candidate's memory ladder: its fitting recipes (each with each TP overlap) to
    ``ok``, or its closest miss to ``refused``."""
    from .schedules.ops import parts
    from .training.costs.stagecosts import stage_times
    from .training.scenario import Scenario
    built: dict[tuple[str, int], Scenario] = {}

    def need_gb(policy: str, zero: int) -> float:
        try:
            sc = Scenario(run_spec({**p, "memory_policy": policy, "zero_stage": zero}), graph=graph)
        except InputError:
            if not built:
                raise                          # the layout itself: no recipe mends it
            return float("inf")                # this recipe only (a recomputation the model refuses)
        built[policy, zero] = sc
        return max(m.total_gb for m in sc.memory)
    try:
        kept, nearest = memory_frontier(need_gb, gpu.hbm_gb, policy_levels(req.memory_policy, model.attention == "mla"),
                                        zero_groups(req.zero_stage))
    except InputError as exc:
        refused.append({**row, "reason": str(exc)})
        return
    if not kept:
        policy, zero, gb = nearest
        refused.append({**row, "memory_policy": policy, "zero_stage": zero, "memory_gb": round(gb, 1),
                        "reason": f"needs {gb:.1f} GB > {gpu.hbm_gb:g} GB HBM (the least: recomputation {policy}, "
                                  f"ZeRO-{zero})"})
        return
    for policy, zero, _ in kept:
        sc = built[policy, zero]
        ranks = {r: [(part.kind, part.stage) for op in ops for part in parts(op)] for r, ops in sc.schedule.ranks.items()}
        bound = compute_bound_s(*stage_times(sc.chunk), ranks)
        for overlap in overlaps(req.tp_comm_overlap, p["tp"], p["sequence_parallel"]):
            ok.append({**p, "memory_policy": policy, "zero_stage": zero, "tp_comm_overlap": overlap,
                       "bound_s": f"{bound:.6g}"})


__all__ = ["DEFAULT_GLOBAL_BATCH", "LONG_SEQUENCE", "PLAN_METRICS", "PLAN_SCHEDULES", "VIRTUAL_STAGES", "virtual_stages", "PlanRequest", "candidates", "evaluate", "gpu_of", "plan_request",
           "run_spec", "screen"]
