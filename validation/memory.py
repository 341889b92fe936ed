"""The memory validation suite: published peak memory per GPU (``validation/memory.csv``) against
the simulator's memory model (:mod:`sim.training.model.memory`), run by ``python -m experiments.validate``.

A row names its model, GPU, layout and recipe; the prediction is the largest per-GPU figure over the
pipeline ranks (what the sources report: the maximum across GPUs), in GB (1e9 bytes), as the
source's PyTorch counter would count it (``measure``: ``reserved`` leaves out the CUDA context and
NCCL's buffers, which the caching allocator never holds; ``allocated`` its reserve too:
:meth:`~sim.training.model.memory.RankMemory.pytorch_counter_gb`), against the measured figure
converted from its unit (GiB = 2^30 bytes). ``error`` = predicted / measured - 1
(positive: the simulator predicts more memory than was measured). Nothing here is fitted to a row.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, fields
from pathlib import Path

from sim.checks import InputError, choice, number
from sim.compute.ops import FUSIONS, LOSS_KERNELS
from sim.training.model.recompute import MODULES as RECOMPUTE_MODULES
from sim.training.model.specs import FSDP_GRADS, MEMORY_POLICIES, RunSpec
from sim.training.scenario import Scenario

from .suite import ROOT, ValidationDataError, load_sources, resolve, row_gpu_as_stated

MEMORY = ROOT / "memory.csv"
UNITS = {"GiB": 2 ** 30 / 1e9, "GB": 1.0}
MEASURES = ("reserved", "allocated")
TOPOLOGY = "llama3-h100-roce"          # enough GPUs for every row; memory does not depend on the network, so a
                                       # row's GPU other than the topology's (Trainy's H200) is not warned
SOURCE_RECIPES = {                     # bytes per parameter of weights, gradients, optimizer (sources.yaml: assumed)
    "torchtitan": (4.0, 4.0, 8.0), "trainy": (4.0, 4.0, 8.0), "kempnerforge": (2.0, 2.0, 4.0),
    "megatron-bridge-ep-overlap": (2.0, 2.0, 12.0), "megatron-bridge-recompute": (2.0, 2.0, 8.0)}


@dataclass(frozen=True)
class MemoryRun:
    id: str
    source: str
    where: str
    model: str
    gpu: str
    gpus: int
    tp: int
    cp: int
    pp: int
    dp: int
    zero: int
    reshard_after_forward: int
    seq_len: int
    microbatch_size: int
    microbatches: int
    schedule: str
    recompute: str
    precision: str
    measured: float
    unit: str
    measure: str
    vp: int | None = None
    ep: int = 1
    fusion: str = "fused"
    loss_kernel: str = "fused"
    fsdp_grads: str = "sharded"
    vocab_parallel_loss: int = 1
    logits_kept: int = 0
    stage_outputs_kept: int = 0
    recompute_modules: str = ""       # recompute selective: Megatron-Core's recompute_modules, ";"-separated
    note: str = ""

    @property
    def recompute_module_list(self) -> tuple[str, ...] | None:
        """``recompute_modules`` as a tuple (``None`` when the row names none)."""
        return tuple(m.strip() for m in self.recompute_modules.split(";")) if self.recompute_modules else None

    @property
    def measured_gb(self) -> float:
        return self.measured * UNITS[self.unit]


INTS = ("gpus", "tp", "cp", "pp", "vp", "dp", "ep", "zero", "reshard_after_forward", "seq_len", "microbatch_size",
        "microbatches", "vocab_parallel_loss", "logits_kept", "stage_outputs_kept")


def load_memory_runs(path: Path = MEMORY) -> list[MemoryRun]:
    """Every row of ``memory.csv``, checked: one :class:`ValidationDataError` naming the row and the field."""
    sources = load_sources()
    with open(path, newline="", encoding="utf-8") as fh:
        lines = [(n, line) for n, line in enumerate(fh, start=1) if not line.startswith("#")]
    reader = csv.DictReader(line for _, line in lines)
    names = {f.name for f in fields(MemoryRun)}
    out, seen = [], set()
    for (line, _), row in zip(lines[1:], reader):
        where = f"memory run {row.get('id') or '?'} (memory.csv line {line})"
        values = {}
        for key, raw in row.items():
            if key not in names:
                raise ValidationDataError(f"{where}: unknown column {key!r}")
            cell = (raw or "").strip()
            if not cell:
                continue
            try:
                if key in INTS:
                    values[key] = number(float(cell), f"{where}: {key}", integer=True, low=0, error=ValidationDataError)
                elif key == "measured":
                    values[key] = number(float(cell), f"{where}: measured", low=0, low_open=True,
                                         error=ValidationDataError)
                else:
                    values[key] = cell
            except ValueError:
                raise ValidationDataError(f"{where}: {key} must be a number, got {raw!r}") from None
        try:
            run = MemoryRun(**values)
        except TypeError as exc:
            raise ValidationDataError(f"{where}: {exc}") from None
        choice(run.source, f"{where}: source", tuple(sources), error=ValidationDataError)
        choice(run.unit, f"{where}: unit", tuple(UNITS), error=ValidationDataError)
        choice(run.measure, f"{where}: measure", MEASURES, error=ValidationDataError)
        choice(run.recompute, f"{where}: recompute", MEMORY_POLICIES, error=ValidationDataError)
        choice(run.fusion, f"{where}: fusion", FUSIONS, error=ValidationDataError)
        choice(run.loss_kernel, f"{where}: loss_kernel", LOSS_KERNELS, error=ValidationDataError)
        choice(run.fsdp_grads, f"{where}: fsdp_grads", FSDP_GRADS, error=ValidationDataError)
        if run.recompute_modules:
            if run.recompute != "selective":
                raise ValidationDataError(f"{where}: recompute_modules ({run.recompute_modules!r}) needs recompute "
                                          f"selective, got recompute {run.recompute!r}")
            for module in run.recompute_module_list:
                choice(module, f"{where}: recompute_modules", RECOMPUTE_MODULES, error=ValidationDataError)
        if run.tp * run.cp * run.pp * run.dp != run.gpus:
            raise ValidationDataError(f"{where}: tp x cp x pp x dp = {run.tp * run.cp * run.pp * run.dp}, but gpus = "
                                      f"{run.gpus}")
        if run.id in seen:
            raise ValidationDataError(f"{where}: the id is used twice")
        seen.add(run.id)
        out.append(run)
    return out


def memory_spec(run: MemoryRun) -> RunSpec:
    """The :class:`RunSpec` a memory row is simulated as (its source's bytes per parameter)."""
    weight, grad, optimizer = SOURCE_RECIPES.get(run.source, (2.0, 4.0, 8.0))
    gpu = resolve(run.gpu) if run.gpu.startswith("validation/") else run.gpu
    return RunSpec(model=resolve(run.model), gpu=gpu, topology=TOPOLOGY, pp=run.pp, dp=run.dp, ep=run.ep, tp=run.tp,
                   cp=run.cp, sequence_parallel=run.tp > 1, schedule=run.schedule, microbatches=run.microbatches,
                   seq_len=run.seq_len, microbatch_size=run.microbatch_size, chunks=run.vp, zero_stage=run.zero,
                   reshard_after_forward=bool(run.reshard_after_forward), memory_policy=run.recompute,
                   recompute_granularity="selective" if run.recompute_modules else None,
                   recompute_modules=run.recompute_module_list,
                   fusion=run.fusion, loss_kernel=run.loss_kernel, fsdp_grads=run.fsdp_grads,
                   vocab_parallel_loss=bool(run.vocab_parallel_loss), logits_kept=bool(run.logits_kept),
                   stage_outputs_kept=bool(run.stage_outputs_kept),
                   gemm_precision=run.precision, weight_bytes=weight, grad_bytes=grad, optimizer_bytes=optimizer,
                   description=run.id)


def predict_memory(run: MemoryRun) -> dict:
    """The simulated peak of ``run``: the fullest rank as the source's counter counts it, and its
    breakdown (GB; ``outside_counter_gb``: the part of the breakdown that counter does not see)."""
    try:
        with row_gpu_as_stated():
            memory = Scenario(memory_spec(run)).memory
    except InputError as exc:
        return {"id": run.id, "source": run.source, "measured_gb": run.measured_gb, "predicted_gb": None,
                "error_pct": None, "status": str(exc)}
    top = max(memory, key=lambda m: m.pytorch_counter_gb(run.measure))
    predicted = top.pytorch_counter_gb(run.measure)
    return {"id": run.id, "source": run.source, "measured_gb": run.measured_gb, "predicted_gb": predicted,
            "error_pct": 100 * (predicted / run.measured_gb - 1), "status": "ok", "rank": top.rank,
            "params_gb": top.params_gb, "grads_gb": top.grads_gb, "optimizer_gb": top.optimizer_gb,
            "activations_gb": top.activations_gb, "fixed_gb": top.reserve_gb, "fp8_weights_gb": top.fp8_weights_gb,
            "outside_counter_gb": top.total_gb - predicted, "where": run.where, "note": run.note}


__all__ = ["MEMORY", "MemoryRun", "load_memory_runs", "memory_spec", "predict_memory"]
