"""What the Zero Bubble search (:mod:`sim.schedules.zbauto`) reads for a run: each stage's times of
one micro-batch's forward, input gradient and weight gradient, the time of one pipeline send, and
the activation memory each leaves: the profile its runtime would measure, here from the model.

* F, I, W (seconds): the chunk model's parts summed over the stage's layers (recomputation in I),
  with the embedding on the first stage and the output heads and their loss on the last
  (:mod:`sim.training.costs.chunk`); a measured profile (``RunSpec.profile``) replaces them where it gives
  them. The all-to-alls of MoE layers are not in them: the search knows compute only (what a rule
  written for dense models knows), the step then runs the order with every all-to-all.
* send (seconds): one micro-batch's activations (T x hidden x 2 bytes) over the slowest link of the
  route between pipeline ranks 0 and 1 (replica 0), or NCCL's bound on a send inside a node
  (:mod:`sim.training.comm.sends`) where that is lower, plus the route's latency.
* memory (bytes): a forward keeps its stage's activations, an input gradient trades them for what
  the deferred weight gradient needs, the weight gradient frees that (:mod:`sim.training.model.memory`).
"""
from __future__ import annotations

import networkx as nx

from ...schedules.zbauto import StageCosts
from ..comm.sends import send_bound
from ..model.layout import Layout
from ..model.memory import stage_activation_bytes
from ..model.specs import ModelSpec, RunSpec
from .chunk import ChunkModel


def stage_times(chunk: ChunkModel) -> tuple[list[float], list[float], list[float]]:
    """Per stage, seconds of one micro-batch's F, I (with recomputation) and W."""
    f, i, w = [], [], []
    for stage in range(chunk.num_stages):
        layers, ends = chunk.stage_work(stage)
        f.append(sum(c.forward for c in layers) + ends.embed_f + ends.head_f)
        i.append(sum(c.backward_i + c.attn_r + c.mlp_r for c in layers) + ends.head_i)
        w.append(sum(c.backward_w for c in layers) + ends.head_w + ends.embed_w)
    return f, i, w


def send_seconds(graph: nx.Graph, layout: Layout, nbytes: float, send_rate: float | None = None) -> float:
    """One pipeline send from rank 0 to rank 1 (replica 0): ``nbytes`` over the slowest link of the
    shortest path, or at ``send_rate`` (bytes/s) where the two share a node and that is lower, plus
    its latency (0 with one rank)."""
    if layout.pp < 2:
        return 0.0
    gpus = graph.graph["gpus"]
    src, dst = layout.gpu(0, 0), layout.gpu(1, 0)
    path = nx.shortest_path(graph, gpus[src], gpus[dst])
    edges = [graph.edges[a, b] for a, b in zip(path, path[1:])]
    bound = send_bound(src, dst, layout.gpus_per_node, send_rate)
    rate = min([e["bandwidth"] for e in edges] + ([bound] if bound is not None else []))
    return nbytes / rate + sum(e["latency"] for e in edges)


def stage_costs(model: ModelSpec, run: RunSpec, chunk: ChunkModel, graph: nx.Graph, layout: Layout,
                send_rate: float | None = None) -> StageCosts:
    """The profile of :mod:`sim.schedules.zbauto` for ``run`` (see the module; ``send_rate``:
    :func:`send_seconds`)."""
    f, i, w = stage_times(chunk)
    memory = stage_activation_bytes(model, run, chunk.layers_per_stage)
    return StageCosts(tuple(f), tuple(i), tuple(w), send_seconds(graph, layout, chunk.activation_bytes(), send_rate),
                      tuple(held for held, _ in memory), tuple(keep - held for held, keep in memory),
                      tuple(-keep for _, keep in memory))


__all__ = ["send_seconds", "stage_costs", "stage_times"]
