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
the rest even. Each candidate's memory is checked first, from the memory model alone (no fabric is
built: one topology graph serves every candidate's layout checks); the ones that fit HBM are
simulated (a sweep: local Dask cluster or a scheduler address) and ranked by step time. Each row
says what bounds the candidate (its largest loss besides compute), how uneven its ranks' compute
is, and its memory headroom.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from .checks import InputError, choice, number
from .io import is_true
from .moe.specs import COMPARED_SCHEDULES, GEMM_PRECISIONS, MEMORY_POLICIES, RunSpec, load_gpu, load_model

_RUN = {f.name: f.default for f in fields(RunSpec)}
DEFAULT_GLOBAL_BATCH = 1024     # sequences (4.2M tokens at 4K): our stated default, printed with every plan
LONG_SEQUENCE = 8192            # tokens: longer sequences make the planner try context parallelism


@dataclass(frozen=True)
class PlanRequest:
    """What to plan for. The defaults are ``python -m sim run``'s (:class:`~sim.moe.specs.RunSpec`'s:
    BF16 GEMMs, no recomputation, ZeRO-1, no node limit) and a global batch of
    :data:`DEFAULT_GLOBAL_BATCH` sequences of 4K tokens; ``scenario`` (a preset or YAML file) makes
    its recipe the base instead (``deepseek-v3``: FP8 GEMMs, its memory policy, 15,360 sequences),
    every other field of the scenario (wire precision, bytes per parameter, kernels) included.
    ``gpu`` ``None``: the topology's own GPU (its ``gpu:`` field)."""

    gpus: int
    model: str
    topology: str
    gpu: str | None = None
    global_batch: int = DEFAULT_GLOBAL_BATCH
    seq_len: int = 4096
    microbatch_size: int = _RUN["microbatch_size"]
    pps: tuple[int, ...] = (8, 16)
    eps: tuple[int, ...] = (8, 16, 32, 64)
    tps: tuple[int, ...] = ()                  # () = (1, 2, 4, 8), or (1, 2) for an MoE model
    cps: tuple[int, ...] = ()                  # () = (1,), or (1, 2, 4, 8) for sequences over 8K tokens
    sequence_parallel: bool = True             # with TP > 1 (Megatron's recommended setting)
    schedules: tuple[str, ...] = field(default=COMPARED_SCHEDULES)
    gemm_precision: str = _RUN["gemm_precision"]
    node_limit: int = 0
    memory_policy: str = _RUN["memory_policy"]
    zero_stage: int = _RUN["zero_stage"]
    head_cuts: tuple[int, ...] = (0, 1)
    scenario: str = ""

    def __post_init__(self):
        from .schedules import SCHEDULE_NAMES
        for name, low in (("gpus", 1), ("global_batch", 1), ("seq_len", 1), ("microbatch_size", 1),
                          ("node_limit", 0)):
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
        choice(self.gemm_precision, "gemm_precision", GEMM_PRECISIONS)
        choice(self.memory_policy, "memory_policy", MEMORY_POLICIES)
        number(self.zero_stage, "zero_stage", integer=True, low=0, high=3)
        if not isinstance(self.sequence_parallel, bool):
            raise InputError(f"sequence_parallel must be true or false, got {self.sequence_parallel!r}")

    def tensor_sizes(self, moe: bool) -> tuple[int, ...]:
        """The TP sizes searched: ``tps``, or by default 1, 2, 4, 8 (1, 2 for an MoE model)."""
        return self.tps or ((1, 2) if moe else (1, 2, 4, 8))

    @property
    def context_sizes(self) -> tuple[int, ...]:
        """The CP sizes searched: ``cps``, or by default 1 (and 2, 4, 8 for sequences over 8K)."""
        return self.cps or ((1, 2, 4, 8) if self.seq_len > LONG_SEQUENCE else (1,))


def plan_request(scenario: str = "", **given) -> PlanRequest:
    """A :class:`PlanRequest` from what a user gave (``None``: not given): a field given wins, then
    the ``scenario``'s (its model, GPU, topology, batch, precision, memory policy, ZeRO stage, node
    limit), then the defaults."""
    base = {}
    if scenario:
        from .moe.specs import load_scenario
        run = load_scenario(scenario)
        base = {"model": run.model, "topology": run.topology, "gpu": run.gpu, "seq_len": run.seq_len,
                "global_batch": run.dp * run.microbatches * run.microbatch_size,
                "microbatch_size": run.microbatch_size, "gemm_precision": run.gemm_precision,
                "node_limit": run.node_limit or 0, "memory_policy": run.memory_policy, "zero_stage": run.zero_stage}
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
    fields_ = dict(model=p["model"], gpu=p["gpu"], topology=p["topology"], pp=int(p["pp"]), ep=int(p["ep"]),
                   dp=int(p["dp"]), tp=tp, cp=cp, sequence_parallel=tp > 1 and is_true(p.get("sequence_parallel", True)),
                   schedule=p["schedule"], microbatches=int(p["microbatches"]),
                   seq_len=int(p["seq_len"]), microbatch_size=int(p["microbatch_size"]),
                   gemm_precision=p["gemm_precision"], node_limit=int(p["node_limit"]) or None,
                   memory_policy=p["memory_policy"], zero_stage=int(p["zero_stage"]), last_stage_layers=last)
    scenario = p.get("scenario")
    if isinstance(scenario, str) and scenario:
        from .moe.specs import load_scenario
        base = load_scenario(scenario)
        # the scenario's own stage split is for its own PP: the point's split replaces it
        return base.with_(**fields_, stage_layers=None, first_stage_layers=None, description="")
    return RunSpec(**fields_)


def gpu_of(req: PlanRequest, graph) -> str:
    """The GPU a plan is for: the request's, or the topology's own (its ``gpu:`` field)."""
    from .moe.specs import topology_gpu, warn_gpu_mismatch
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
    from .moe.step import simulate_step
    summary = simulate_step(run_spec(p)).summary()
    return {k: summary[k] for k in PLAN_METRICS}


def _stages(schedule: str, pp: int) -> int:
    from .schedules import SCHEDULES
    spec = SCHEDULES[schedule]
    return pp if spec.placement == "bidirectional" else pp * (spec.stages_per_rank or 1)


def candidates(req: PlanRequest, graph=None) -> tuple[list[dict], list[dict]]:
    """(points that fit HBM, rows of refused or non-fitting candidates with the reason); ``graph``:
    the request's topology when the caller has loaded it already."""
    from topologies import load_topology

    from .moe.chunk import split_layers
    from .moe.scenario import Scenario
    if graph is None:
        graph = load_topology(req.topology)
    gpu_name = gpu_of(req, graph)
    model, gpu = load_model(req.model), load_gpu(gpu_name)
    have = len(graph.graph["gpus"])
    if req.gpus > have:
        raise InputError(f"gpus {req.gpus:,} is more than the {have:,} GPUs of topology {req.topology!r}")
    ok, refused = [], []
    layouts = [(tp, cp, pp) for tp in req.tensor_sizes(model.is_moe) for cp in req.context_sizes for pp in req.pps]
    for tp, cp, pp in layouts:
        where = {"tp": tp, "cp": cp, "pp": pp}
        if req.gpus % (tp * cp * pp):
            refused.append({**where, "reason": f"TP {tp} x CP {cp} x PP {pp} does not divide {req.gpus} GPUs"})
            continue
        dp = req.gpus // (tp * cp * pp)
        if req.global_batch % (dp * req.microbatch_size):
            refused.append({**where, "reason": f"global batch {req.global_batch} not divisible by DP {dp}"})
            continue
        M = req.global_batch // (dp * req.microbatch_size)
        for ep in (req.eps if model.is_moe else [1]):
            for schedule in req.schedules:
                for cut in req.head_cuts:
                    p = {"tp": tp, "cp": cp, "sequence_parallel": req.sequence_parallel and tp > 1,
                         "pp": pp, "ep": ep, "dp": dp, "schedule": schedule, "microbatches": M,
                         "last_stage_layers": 0, "model": req.model, "gpu": gpu_name, "topology": req.topology,
                         "seq_len": req.seq_len, "microbatch_size": req.microbatch_size,
                         "gemm_precision": req.gemm_precision, "node_limit": req.node_limit or 0,
                         "memory_policy": req.memory_policy, "zero_stage": req.zero_stage,
                         "scenario": req.scenario}
                    row = {**where, "ep": ep, "schedule": schedule, "head_cut": cut}
                    if cut:
                        stages = _stages(schedule, pp)
                        even = split_layers(model.layers, stages) if stages <= model.layers else [0]
                        if even[-1] - cut < 1:
                            continue
                        p["last_stage_layers"] = even[-1] - cut
                    try:
                        memory = Scenario(run_spec(p), graph=graph).memory
                    except InputError as exc:
                        refused.append({**row, "reason": str(exc)})
                        continue
                    need = max(m.total_gb for m in memory)
                    if need > gpu.hbm_gb:
                        refused.append({**row, "memory_gb": round(need, 1),
                                        "reason": f"needs {need:.1f} GB > {gpu.hbm_gb:g} GB HBM"})
                    else:
                        ok.append(p)
    return ok, refused


__all__ = ["DEFAULT_GLOBAL_BATCH", "LONG_SEQUENCE", "PLAN_METRICS", "PlanRequest", "candidates", "evaluate", "gpu_of", "plan_request",
           "run_spec"]
