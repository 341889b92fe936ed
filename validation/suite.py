"""The validation suite's data as checked records: ``runs.csv`` (one published measured run per row),
``sources.yaml`` (where each source's numbers come from and what it leaves us to assume) and
``zero_bubble_table9.csv`` (the Zero Bubble paper's profiled per-stage times).

Honesty rules (also at the top of ``runs.csv``): no parameter of the simulator is fitted to a row of
this suite. A value is a public spec, a stated assumption, or fitted by ``python -m sim calibrate``
on the rows whose role is ``calibration`` (DeepEP's normal-kernel table), which are never scored.

Every problem with the data is one :class:`ValidationDataError` naming the row, the field, the value
and what is allowed, raised before anything is simulated or written.
"""
from __future__ import annotations

import contextlib
import csv
import warnings
from dataclasses import dataclass, fields
from pathlib import Path

from sim.checks import InputError, choice, number, read_yaml
from sim.compute.ops import ATTENTION_KERNELS, FUSIONS, LOSS_KERNELS
from sim.training.model.recompute import MODULES as RECOMPUTE_MODULES
from sim.training.model.specs import (
    FSDP_GRADS,
    GEMM_PRECISIONS,
    MEMORY_POLICIES,
    OPTIMIZER_SYNC,
    PIPELINE_SENDS,
    ZERO3_COLLECTIVES,
)

ROOT = Path(__file__).resolve().parent
RUNS = ROOT / "runs.csv"
SOURCES = ROOT / "sources.yaml"
ZB_PROFILES = ROOT / "zero_bubble_table9.csv"
ROLES = ("scored", "calibration", "needs-tp", "needs-cp", "not-modelled")
KERNELS = ("dispatch", "combine")
# metric -> (unit as the source states it, "throughput" (higher is faster) or "time" (lower is faster))
METRICS = {
    "samples_per_s_per_gpu": ("samples/s per GPU", "throughput"),
    "tokens_per_s_per_gpu": ("tokens/s per GPU", "throughput"),
    "tflops_per_gpu_megatron": ("TFLOP/s per GPU, Megatron's equation 3 (recomputation counted)", "throughput"),
    "tflops_per_gpu_model": ("model TFLOP/s per GPU", "throughput"),
    "gpu_hours_per_trillion_tokens": ("GPU hours per trillion tokens", "time"),
    "step_time_s": ("seconds per training step", "time"),
    "kernel_us": ("microseconds per kernel", "time"),
    "bottleneck_gbps": ("GB/s, DeepEP's bottleneck bandwidth", "throughput"),
}
KERNEL_METRICS = ("kernel_us", "bottleneck_gbps")


class ValidationDataError(InputError):
    """A row of the validation data that cannot be used; the message names the row and the field."""


@dataclass(frozen=True)
class Run:
    """One published measured run (a row of ``runs.csv``; empty cells are ``None``)."""

    id: str
    source: str
    where: str
    role: str
    model: str
    gpus: int
    gpu: str
    metric: str
    measured: float
    topology: str | None = None
    seq_len: int | None = None
    microbatch_size: int | None = None
    global_batch: int | None = None
    tp: int = 1
    cp: int = 1
    pp: int = 1
    vp: int | None = None
    dp: int = 1
    ep: int = 1
    zero: int = 1
    schedule: str = ""
    sim_schedule: str | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    recompute: str | None = None
    precision: str | None = None
    dispatch_precision: str | None = None
    node_limit: int | None = None
    comm_sms: int | None = None
    optimizer_sync: str | None = None
    kernel: str | None = None
    tokens: int | None = None
    profile: str | None = None
    note: str = ""
    sequence_parallel: int = 0            # 1: Megatron's sequence parallelism with TP (the source says or implies it)
    reshard_after_forward: int = 1        # ZeRO-3: 0 when the weights stay gathered for the step (Llama 3's FSDP)
    attention_kernel: str | None = None   # "unfused": the run used Megatron's unfused core attention (None: fused)
    layers_per_virtual_stage: int | None = None   # interleaved: Megatron's num_layers_per_virtual_pipeline_stage
    embedding_stage: int = 0              # 1: the embedding counted as a layer of the split (Megatron's account_for_...)
    loss_stage: int = 0                   # 1: the loss counted likewise
    fusion: str | None = None             # "unfused": eager PyTorch (each op its own kernels); None: fused
    tp_comm_overlap: int = 0              # 1: TP collectives overlapped with their GEMMs (torchtitan's AsyncTP)
    pipeline_sends: str | None = None     # "blocking": the pipeline waited for its sends (None: asynchronous)
    loss_kernel: str | None = None        # "eager" / "compiled": PyTorch's cross-entropy (None: a fused one)
    fsdp_grads: str | None = None         # "unsharded": ZeRO-3's gradients whole until the last backward
    zero3_collectives: str | None = None  # "per-tensor": DeepSpeed's ZeRO-3 of 2021 (None: one a layer)
    recompute_modules: str | None = None  # recompute selective: Megatron-Core's recompute_modules, ";"-separated
    grad_reduce_in_fp32: int = 1          # 0: gradients accumulated and reduced in BF16 (Megatron's flag off)
    fp8_param_gather: int = 0             # 1: FP8 GEMMs with the weights kept and gathered in FP8 only (Megatron's)
    gradient_accumulation_fusion: int = 1  # 0: weight gradients written in BF16 (autograd, FSDP2), not added in place

    @property
    def recompute_module_list(self) -> tuple[str, ...] | None:
        """``recompute_modules`` as a tuple (``None`` when the row names none)."""
        return tuple(m.strip() for m in self.recompute_modules.split(";")) if self.recompute_modules else None

    @property
    def is_kernel(self) -> bool:
        """A row that measures one communication kernel, not a training step."""
        return self.metric in KERNEL_METRICS

    @property
    def simulated(self) -> bool:
        return self.role in ("scored", "calibration")

    @property
    def microbatches(self) -> int:
        """Micro-batches per pipeline: global batch / (DP x micro-batch size)."""
        return self.global_batch // (self.dp * self.microbatch_size)


INTEGER_FIELDS = ("gpus", "seq_len", "microbatch_size", "global_batch", "tp", "cp", "pp", "vp", "dp", "ep", "zero",
                  "first_stage_layers", "last_stage_layers", "node_limit", "comm_sms", "tokens", "sequence_parallel",
                  "reshard_after_forward", "layers_per_virtual_stage", "embedding_stage", "loss_stage",
                  "tp_comm_overlap", "grad_reduce_in_fp32", "fp8_param_gather", "gradient_accumulation_fusion")
STEP_FIELDS = ("seq_len", "microbatch_size", "global_batch")
FLAG_FIELDS = ("sequence_parallel", "reshard_after_forward", "embedding_stage", "loss_stage",
               "tp_comm_overlap", "grad_reduce_in_fp32", "fp8_param_gather", "gradient_accumulation_fusion")  # 0 or 1


def _cell(value: str | None):
    value = (value or "").strip()
    return value or None


def _run(row: dict, line: int, sources: dict, profiles: set) -> Run:
    rid = _cell(row.get("id")) or f"(line {line})"
    where = f"validation run {rid} (runs.csv line {line})"
    known = {f.name for f in fields(Run)}
    values = {}
    for key, raw in row.items():
        if key not in known:
            raise ValidationDataError(f"{where}: unknown column {key!r}; allowed: {', '.join(sorted(known))}")
        cell = _cell(raw)
        if cell is None:
            continue
        if key in INTEGER_FIELDS:
            try:
                cell = float(cell)
            except ValueError:
                raise ValidationDataError(f"{where}: {key} must be a whole number, got {raw!r}") from None
            flag = key in FLAG_FIELDS
            cell = number(cell, f"{where}: {key}", integer=True, low=0 if flag or key in ("zero", "node_limit",
                          "comm_sms") else 1, high=1 if flag else 100_000_000, error=ValidationDataError)
        elif key == "measured":
            try:
                cell = float(cell)
            except ValueError:
                raise ValidationDataError(f"{where}: measured must be a number, got {raw!r}") from None
            cell = number(cell, f"{where}: measured", low=0, low_open=True, error=ValidationDataError)
        values[key] = cell
    for key in ("id", "source", "where", "role", "model", "gpus", "gpu", "metric", "measured"):
        if key not in values:
            raise ValidationDataError(f"{where}: column {key!r} is empty; it needs a value")
    choice(values["role"], f"{where}: role", ROLES, error=ValidationDataError)
    choice(values["source"], f"{where}: source", tuple(sources), error=ValidationDataError)
    choice(values["metric"], f"{where}: metric", tuple(METRICS), error=ValidationDataError)
    run = Run(**values)
    if run.profile is not None and run.profile not in profiles:
        raise ValidationDataError(f"{where}: profile {run.profile!r} is not one of {', '.join(sorted(profiles))}")
    if run.is_kernel:
        choice(run.kernel, f"{where}: kernel", KERNELS, error=ValidationDataError)
        if run.tokens is None or run.ep != run.gpus:
            raise ValidationDataError(f"{where}: a kernel row needs tokens and ep equal to gpus ({run.gpus}), got "
                                      f"tokens={run.tokens}, ep={run.ep}")
        return run
    product = run.tp * run.cp * run.pp * run.dp
    if product != run.gpus:
        raise ValidationDataError(f"{where}: the layout does not multiply to the GPU count: tp x cp x pp x dp = "
                                  f"{run.tp} x {run.cp} x {run.pp} x {run.dp} = {product}, but gpus = {run.gpus}")
    if (run.tp * run.cp * run.dp) % run.ep:
        raise ValidationDataError(f"{where}: ep ({run.ep}) must divide tp x cp x dp ({run.tp} x {run.cp} x {run.dp}): "
                                  "expert parallelism folds over the data-parallel (and, in Megatron-Core, tensor- "
                                  "and context-parallel) ranks")
    for key in STEP_FIELDS:
        if getattr(run, key) is None:
            raise ValidationDataError(f"{where}: column {key!r} is empty; a training-step row needs it")
    if run.recompute is not None:
        choice(run.recompute, f"{where}: recompute", MEMORY_POLICIES + ("auto",), error=ValidationDataError)
    if run.recompute_modules is not None:
        if run.recompute != "selective":
            raise ValidationDataError(f"{where}: recompute_modules ({run.recompute_modules!r}) needs recompute "
                                      f"selective, got recompute {run.recompute!r}")
        for module in run.recompute_module_list:
            choice(module, f"{where}: recompute_modules", RECOMPUTE_MODULES, error=ValidationDataError)
    if run.precision is not None:
        choice(run.precision, f"{where}: precision", GEMM_PRECISIONS, error=ValidationDataError)
    if run.optimizer_sync is not None:
        choice(run.optimizer_sync, f"{where}: optimizer_sync", OPTIMIZER_SYNC, error=ValidationDataError)
    if run.attention_kernel is not None:
        choice(run.attention_kernel, f"{where}: attention_kernel", ATTENTION_KERNELS, error=ValidationDataError)
    if run.fusion is not None:
        choice(run.fusion, f"{where}: fusion", FUSIONS, error=ValidationDataError)
    if run.pipeline_sends is not None:
        choice(run.pipeline_sends, f"{where}: pipeline_sends", PIPELINE_SENDS, error=ValidationDataError)
    if run.loss_kernel is not None:
        choice(run.loss_kernel, f"{where}: loss_kernel", LOSS_KERNELS, error=ValidationDataError)
    if run.fsdp_grads is not None:
        choice(run.fsdp_grads, f"{where}: fsdp_grads", FSDP_GRADS, error=ValidationDataError)
    if run.zero3_collectives is not None:
        choice(run.zero3_collectives, f"{where}: zero3_collectives", ZERO3_COLLECTIVES, error=ValidationDataError)
        if run.zero != 3:
            raise ValidationDataError(f"{where}: zero3_collectives {run.zero3_collectives} needs zero 3, got zero "
                                      f"{run.zero}")
    if run.tp_comm_overlap and not run.sequence_parallel:
        raise ValidationDataError(f"{where}: tp_comm_overlap 1 needs sequence_parallel 1 (the overlapped TP "
                                  "collectives are sequence parallelism's all-gathers and reduce-scatters)")
    if run.fp8_param_gather and (run.precision not in ("fp8", "mxfp8") or run.zero == 3):
        raise ValidationDataError(f"{where}: fp8_param_gather 1 needs precision fp8 or mxfp8 and zero 0-2, got "
                                  f"precision {run.precision or 'bf16'}, zero {run.zero}")
    if run.global_batch % (run.dp * run.microbatch_size):
        raise ValidationDataError(f"{where}: global_batch ({run.global_batch}) must be a multiple of dp x "
                                  f"microbatch_size ({run.dp} x {run.microbatch_size})")
    if run.simulated:
        if not run.sim_schedule or not run.topology:
            raise ValidationDataError(f"{where}: role {run.role} needs sim_schedule and topology")
    return run


def load_sources(path: Path = SOURCES) -> dict:
    """The sources, each a mapping with ``title``, ``url``, ``measured``, ``tables``, ``assumed``."""
    sources = read_yaml(path, ValidationDataError)
    if not isinstance(sources, dict) or not sources:
        raise ValidationDataError(f"{path}: expected a mapping of sources")
    for key, src in sources.items():
        missing = [k for k in ("title", "url", "measured") if not isinstance(src, dict) or not src.get(k)]
        if missing:
            raise ValidationDataError(f"{path}: source {key!r} lacks {', '.join(missing)}")
    return sources


def load_zero_bubble_profiles(path: Path = ZB_PROFILES) -> dict[str, dict]:
    """Table 9's rows by profile id: model, stages, micro-batches and t_f/t_b/t_w/t_comm (ms)."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    out = {}
    for i, row in enumerate(rows, start=1):
        where = f"{path.name} row {i}"
        entry = {"model": row["model"], "stages": int(row["stages"]), "microbatches": int(row["microbatches"])}
        for key in ("t_f_ms", "t_b_ms", "t_w_ms", "t_comm_ms"):
            try:
                entry[key] = number(float(row[key]), f"{where}: {key}", low=0, low_open=True,
                                    error=ValidationDataError)
            except ValueError:
                raise ValidationDataError(f"{where}: {key} must be a number, got {row[key]!r}") from None
        out[row["profile"]] = entry
    return out


CALIBRATION_PROFILE = "deepep-normal"     # the rows of role `calibration`, fitted by `python -m sim calibrate`
DEEPSEEK_PROFILE = "deepseek-profile-data"  # DeepSeek's published F&B-unit trace (validation/deepseek_profile.py)


def load_runs(path: Path = RUNS) -> list[Run]:
    """Every row of ``runs.csv``, checked (:class:`ValidationDataError` on the first problem)."""
    sources = load_sources()
    profiles = set(load_zero_bubble_profiles()) | {CALIBRATION_PROFILE, DEEPSEEK_PROFILE}
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            lines = [(n, line) for n, line in enumerate(fh, start=1) if not line.startswith("#")]
    except OSError as exc:
        raise ValidationDataError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    reader = csv.DictReader(line for _, line in lines)
    runs, seen = [], set()
    for (line, _), row in zip(lines[1:], reader):
        run = _run(row, line, sources, profiles)
        if run.id in seen:
            raise ValidationDataError(f"validation run {run.id} (runs.csv line {line}): the id is used twice")
        seen.add(run.id)
        runs.append(run)
    return runs


@contextlib.contextmanager
def row_gpu_as_stated():
    """Quiet the warning of a GPU other than its topology's: a row's GPU on another GPU's cluster
    (Trainy's H200 on the RoCE cluster's network) is what the row states."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="gpu .* is not the GPU of topology")
        yield


def resolve(name: str | None) -> str | None:
    """A model, GPU or topology named by a path inside ``validation/`` (``validation/models/x.yaml``) as
    an absolute path; preset names unchanged."""
    if name and name.startswith("validation/"):
        return str(ROOT / name.removeprefix("validation/"))
    return name


__all__ = ["CALIBRATION_PROFILE", "DEEPSEEK_PROFILE", "KERNELS", "METRICS", "ROLES", "ROOT", "Run",
           "ValidationDataError", "load_runs", "load_sources", "load_zero_bubble_profiles", "resolve", "row_gpu_as_stated"]
