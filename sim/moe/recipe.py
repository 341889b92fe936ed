"""What a run simulated, computed from its spec, not from its free-text description: the layout,
the batch, the number formats, the memory policy, the kernels and the communication mode.

``python -m sim run`` and ``python -m sim plan`` print it (:func:`recipe_line`), put it in
``--json`` and in their CSV, so a reader sees which assumptions stand behind a step time or an MFU.

Formulas: GPUs = PP x DP (each pipeline rank of each data-parallel replica, expert parallelism
inside DP); global batch = DP x M x micro-batch size sequences, times the sequence length in tokens.
"""
from __future__ import annotations

from .specs import RunSpec, spec_label

MFU_BOUND = 0.7     # above this, an MFU needs a second look (a stated bound: published runs reach 0.2-0.6)


def recipe(run: RunSpec, topology_gpus: int | None = None) -> dict:
    """The recipe of ``run`` as plain fields (names and numbers). ``topology_gpus``: how many GPUs
    the topology holds (the layout may use fewer)."""
    sequences = run.dp * run.microbatches * run.microbatch_size
    out = {"model": spec_label(run.model), "gpu": spec_label(run.gpu), "topology": spec_label(run.topology),
           "gpus": run.gpus, "pp": run.pp, "dp": run.dp, "ep": run.ep, "microbatches": run.microbatches,
           "microbatch_size": run.microbatch_size, "seq_len": run.seq_len, "global_batch_seqs": sequences,
           "global_batch_tokens": sequences * run.seq_len, "gemm_precision": run.gemm_precision,
           "dispatch_precision": run.dispatch_precision, "combine_precision": run.combine_precision,
           "memory_policy": run.memory_policy, "zero_stage": run.zero_stage, "kernels": spec_label(run.kernels),
           "communication": run.communication}
    if topology_gpus is not None:
        out["topology_gpus"] = topology_gpus
    return out


def recipe_line(r: dict) -> str:
    """The recipe in one line: ``simulated: deepseek-v3 on 2,048 h800 (PP16 x DP128, EP64), ...``."""
    batch = (f"global batch {r['global_batch_seqs']:,} sequences x {r['seq_len']:,} tokens = "
             f"{r['global_batch_tokens'] / 1e6:.3g}M tokens (M={r['microbatches']:,} micro-batches of "
             f"{r['microbatch_size']} per replica)")
    return (f"simulated: {r['model']} on {r['gpus']:,} {r['gpu']} of {r['topology']} (PP{r['pp']} x DP{r['dp']}, "
            f"EP{r['ep']}); {batch}; GEMMs {r['gemm_precision']}, all-to-all wire {r['dispatch_precision']}/"
            f"{r['combine_precision']}; memory policy {r['memory_policy']}, ZeRO-{r['zero_stage']}; "
            f"kernels {r['kernels']}, communication {r['communication']}")


def recipe_warnings(r: dict, mfu: float | None = None, gemm_efficiency: float | None = None) -> list[str]:
    """Warnings a reader should see beside the recipe: a layout that leaves the topology's GPUs
    idle; an MFU above :data:`MFU_BOUND`, naming the assumptions behind it."""
    out = []
    have = r.get("topology_gpus")
    if have is not None and have > r["gpus"]:
        out.append(f"the layout uses {r['gpus']:,} of the {have:,} GPUs of topology {r['topology']!r} "
                   f"(PP{r['pp']} x DP{r['dp']}); the rest stay idle and carry no traffic")
    if mfu is not None and mfu > MFU_BOUND:
        eff = f"GEMMs at {gemm_efficiency:g} of the {r['gemm_precision']} peak, " if gemm_efficiency else ""
        out.append(f"MFU {mfu:.2f} is above {MFU_BOUND}: it assumes {eff}no kernel launch gaps or per-token "
                   "work beyond the FLOPs model; published runs reach 0.2-0.6")
    return out


__all__ = ["MFU_BOUND", "recipe", "recipe_line", "recipe_warnings"]
