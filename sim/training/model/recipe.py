"""What a run simulated, computed from its spec, not from its free-text description: the layout,
the batch, the number formats, the memory policy, the compute and communication kernels (with the
SMs the communication holds), the communication mode and the routing.

``python -m sim run`` and ``python -m sim plan`` print it (:func:`recipe_line`), put it in
``--json`` and in their CSV, so a reader sees which assumptions stand behind a step time or an MFU.

Formulas: GPUs = TP x CP x PP x DP (each pipeline rank of each data-parallel replica, a replica of
a rank being TP x CP GPUs; expert parallelism inside DP); global batch = DP x M x micro-batch size sequences, times the sequence length in tokens.
"""
from __future__ import annotations

from ...io import is_true
from .specs import RunSpec, spec_label

MFU_BOUND = 0.7     # above this, an MFU needs a second look (a stated bound: published runs reach 0.2-0.6)


def recipe(run: RunSpec, topology_gpus: int | None = None, compute: str = "") -> dict:
    """The recipe of ``run`` as plain fields (names and numbers). ``topology_gpus``: how many GPUs
    the topology holds (the layout may use fewer); ``compute``: how compute was costed (the chunk
    model's :attr:`~sim.training.costs.chunk.ChunkModel.compute_label`)."""
    sequences = run.dp * run.microbatches * run.microbatch_size
    out = {"model": spec_label(run.model), "gpu": spec_label(run.gpu), "topology": spec_label(run.topology),
           "gpus": run.gpus, "tp": run.tp, "cp": run.cp, "sequence_parallel": run.sequence_parallel,
           "expert_tp": run.expert_tp,
           "pp": run.pp, "dp": run.dp, "ep": run.ep, "microbatches": run.microbatches,
           "microbatch_size": run.microbatch_size, "seq_len": run.seq_len, "global_batch_seqs": sequences,
           "global_batch_tokens": sequences * run.seq_len, "gemm_precision": run.gemm_precision,
           "dispatch_precision": run.dispatch_precision, "combine_precision": run.combine_precision,
           "memory_policy": run.memory_policy, "zero_stage": run.zero_stage, "kernels": spec_label(run.kernels),
           "communication": run.communication, "comm_sms": run.comm_sms, "routing_skew": run.routing_skew,
           "routing_seed": run.routing_seed}
    if run.network != "maxmin":          # the default backend is not named (the same columns as before it had a choice)
        out["network"] = run.network
    if run.stage_outputs_kept:           # named only when set (torch.distributed.pipelining of 2024)
        out["stage_outputs_kept"] = True
    if run.zero3_collectives == "per-tensor":    # named only when set (DeepSpeed's ZeRO-3 of 2021)
        out["zero3_collectives"] = run.zero3_collectives
    if compute:
        out["compute"] = compute
    if topology_gpus is not None:
        out["topology_gpus"] = topology_gpus
    return out


def recipe_line(r: dict) -> str:
    """The recipe in one line: ``simulated: deepseek-v3 on 2,048 h800 (PP16 x DP128, EP64), ...``."""
    batch = (f"global batch {r['global_batch_seqs']:,} sequences x {r['seq_len']:,} tokens = "
             f"{r['global_batch_tokens'] / 1e6:.3g}M tokens (M={r['microbatches']:,} micro-batches of "
             f"{r['microbatch_size']} per replica)")
    etp = f" x expert TP{r['expert_tp']}" if int(r.get("expert_tp", 1)) > 1 else ""
    return (f"simulated: {r['model']} on {r['gpus']:,} {r['gpu']} of {r['topology']} ({layout_label(r)}, "
            f"EP{r['ep']}{etp}); {batch}; GEMMs {r['gemm_precision']}, all-to-all wire {r['dispatch_precision']}/"
            f"{r['combine_precision']}; memory policy {r['memory_policy']}, ZeRO-{r['zero_stage']}"
            + (" per tensor, each gather blocking" if r.get("zero3_collectives") == "per-tensor" else "")
            + (", stage outputs kept to the step's end" if is_true(r.get("stage_outputs_kept")) else "") + "; "
            + (f"compute: {r['compute']}; " if r.get("compute") else "")
            + f"communication kernels {r['kernels']} on {r['comm_sms']} SMs, communication {r['communication']}; "
            + (f"network {r['network']} (no contention); " if r.get("network", "maxmin") == "analytical" else "")
            + routing_text(r))


def routing_text(r: dict) -> str:
    """``routing balanced (every expert its expected share)`` or ``routing skewed 1.2 (Zipf-like, seed 0)``."""
    skew = float(r.get("routing_skew", 0) or 0)
    if not skew:
        return "routing balanced (every expert its expected share)"
    return f"routing skewed {skew:g} (Zipf-like expert popularity, seed {int(r.get('routing_seed', 0) or 0)})"


def layout_label(r: dict) -> str:
    """``PP16 x DP128`` (with ``TP8 x`` and ``CP2 x`` in front when they are above 1, ``+SP`` after
    TP with sequence parallelism)."""
    tp = f"TP{r['tp']}{'+SP' if is_true(r.get('sequence_parallel')) else ''} x " if int(r.get("tp", 1)) > 1 else ""
    cp = f"CP{r['cp']} x " if int(r.get("cp", 1)) > 1 else ""
    return f"{tp}{cp}PP{r['pp']} x DP{r['dp']}"


def idle_warning(used: int, have: int, topology: str, what: str = "layout", detail: str = "") -> str | None:
    """A warning when a ``what`` (layout, plan) uses fewer GPUs than the topology holds, or ``None``;
    ``detail`` (such as ``PP2 x DP4``) follows the counts in brackets."""
    if have <= used:
        return None
    return (f"the {what} uses {used:,} of the {have:,} GPUs of topology {topology!r}"
            f"{f' ({detail})' if detail else ''}; the rest stay idle and carry no traffic")


def mfu_warning(mfu: float, gemm_precision: str, gemm_efficiency: float | None = None) -> str | None:
    """A warning when ``mfu`` is above :data:`MFU_BOUND`, naming the assumptions behind it, or ``None``."""
    if mfu <= MFU_BOUND:
        return None
    eff = f"GEMMs at {gemm_efficiency:g} of the {gemm_precision} peak, " if gemm_efficiency else ""
    return (f"MFU {mfu:.2f} is above {MFU_BOUND}: it assumes {eff}no kernel launch gaps or per-token work beyond "
            "the FLOPs model; published runs reach 0.2-0.6")


def recipe_warnings(r: dict, mfu: float | None = None, gemm_efficiency: float | None = None) -> list[str]:
    """Warnings a reader should see beside the recipe: a layout that leaves the topology's GPUs
    idle (:func:`idle_warning`); an MFU above :data:`MFU_BOUND` (:func:`mfu_warning`)."""
    idle = idle_warning(r["gpus"], r.get("topology_gpus") or 0, r["topology"], detail=layout_label(r))
    high = mfu_warning(mfu, r["gemm_precision"], gemm_efficiency) if mfu is not None else None
    return [w for w in (idle, high) if w]


__all__ = ["MFU_BOUND", "idle_warning", "layout_label", "mfu_warning", "recipe", "recipe_line", "recipe_warnings",
           "routing_text"]
