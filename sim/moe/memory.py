"""HBM per rank: parameters, gradients, ZeRO-1 optimizer states and peak activations.

Per rank (bytes):

* parameters = P_rank x ``weight_bytes``, where P_rank counts the parameters of the stages the
  rank holds (DualPipe and Chimera hold two: 2x). A stage's parameters: per layer attention,
  dense FFN or shared experts + (routed experts / EP) on this GPU, router; the first stage the
  embedding, the last the output head and MTP modules;
* gradients = P_rank x ``grad_bytes``;
* optimizer states (ZeRO-1) = ``optimizer_bytes`` x (dense params / DP + expert params / (DP/EP)):
  the expert weights of a GPU are replicated only over the DP/EP groups of its stage;
* activations = peak stage-forwards held (from the schedule) x tokens x hidden x
  ``activation_factor`` bytes x layers of the stage (Korthikanti et al.'s 34 bytes per token per
  hidden unit for a transformer layer without recomputation, our default assumption).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..schedules.base import Schedule
from .chunk import ChunkModel, attention_params, dense_mlp_params, expert_params
from .specs import ModelSpec, RunSpec


@dataclass(frozen=True)
class RankMemory:
    rank: int
    params_gb: float
    grads_gb: float
    optimizer_gb: float
    activations_gb: float

    @property
    def total_gb(self) -> float:
        return self.params_gb + self.grads_gb + self.optimizer_gb + self.activations_gb


def stage_params(model: ModelSpec, run: RunSpec, chunk: ChunkModel, stage: int) -> tuple[float, float]:
    """(dense parameters, expert parameters) of one stage on one GPU."""
    dense = expert = 0.0
    first = sum(chunk.layers_per_stage[:stage])
    for i in range(first, first + chunk.layers_per_stage[stage]):
        dense += attention_params(model)
        if i < model.dense_layers:
            dense += dense_mlp_params(model)
        else:
            dense += model.shared_experts * expert_params(model) + model.hidden * model.routed_experts
            expert += model.routed_experts / run.ep * expert_params(model)
    if stage == 0:
        dense += model.vocab * model.hidden
    if stage == chunk.num_stages - 1:
        dense += model.vocab * model.hidden * (1 + model.mtp_modules)
        dense += model.mtp_modules * (attention_params(model) + 2 * model.hidden ** 2 + model.shared_experts *
                                      expert_params(model))
        expert += model.mtp_modules * model.routed_experts / run.ep * expert_params(model)
    return dense, expert


def memory_per_rank(model: ModelSpec, run: RunSpec, chunk: ChunkModel, schedule: Schedule) -> list[RankMemory]:
    peaks = schedule.peak_activations()
    held: dict[int, set[int]] = {r: set() for r in schedule.ranks}
    for rank, ops in schedule.ranks.items():
        for op in ops:
            for part in ((op.f, op.b) if op.kind == "FB" else (op,)):
                held[rank].add(part.stage)
    out = []
    for rank in sorted(schedule.ranks):
        dense = expert = 0.0
        for stage in held[rank]:
            d, e = stage_params(model, run, chunk, stage)
            dense, expert = dense + d, expert + e
        params = dense + expert
        layers = max(chunk.layers_per_stage[s] for s in held[rank])
        act = peaks[rank] * run.tokens_per_microbatch * model.hidden * run.activation_factor * layers
        opt = run.optimizer_bytes * (dense / run.dp + expert / max(1, run.dp // run.ep))
        out.append(RankMemory(rank, params * run.weight_bytes / 1e9, params * run.grad_bytes / 1e9,
                              opt / 1e9, act / 1e9))
    return out
