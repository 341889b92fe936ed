"""``python -m sim run --example``: a scenario YAML with every :class:`~sim.training.model.specs.RunSpec` field,
its unit, what it allows and its default, ready to edit (``python -m sim run --example > my.yaml``).

The example describes its own model inline (a Qwen3-30B-A3B-like MoE, the fields of its public
Hugging Face config) on a 256-GPU slice of an H100 cluster, so that a reader sees how a model that is
not a preset is written. A test loads the template and runs it, so it never drifts from the specs.
"""
from __future__ import annotations

import json
from dataclasses import MISSING, fields

from ...compute.ops import ATTENTION_KERNELS, FUSIONS, LOSS_KERNELS
from .recompute import GRANULARITIES, METHODS, MODULES
from .specs import (
    COMMUNICATION,
    COMPUTE_MODELS,
    DP_SYNC,
    FSDP_GRADS,
    GEMM_MODELS,
    GEMM_PRECISIONS,
    MEMORY_POLICIES,
    OPTIMIZER_SYNC,
    PIPELINE_SENDS,
    PRECISION_BYTES,
    ZERO3_COLLECTIVES,
    RunSpec,
    gpu_names,
)

MODEL = {"name": "my-qwen3-30b-a3b", "layers": 48, "hidden": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128,
         "routed_experts": 128, "expert_intermediate": 768, "topk": 8, "vocab": 151936}
REQUIRED = {"gpu": "h100", "topology": "h100-1024", "pp": 8, "ep": 8, "dp": 32, "schedule": "dualpipe",
            "microbatches": 32, "seq_len": 4096}
CHANGED: dict = {}       # fields the example sets away from their defaults

HELP = {
    "model": "a preset name, a Hugging Face config.json, a YAML file of model fields, or the fields inline (here)",
    "gpu": f"a preset ({', '.join(gpu_names())}), a YAML file of GPU fields, or the fields inline",
    "topology": "a topology preset or YAML file (paths are relative to this file)",
    "pp": "pipeline-parallel ranks",
    "ep": "expert-parallel GPUs (whole replicas: a multiple of tp x cp whose replicas divide dp; 1 for a dense model)",
    "dp": "data-parallel replicas; GPUs = tp x cp x pp x dp",
    "tp": "tensor-parallel GPUs per replica (divides the heads and a node's GPUs; MoE: experts not split)",
    "cp": "context-parallel GPUs per replica (the sequence split, seq_len a multiple of 2 cp)",
    "sequence_parallel": "with tp > 1: Megatron's sequence parallelism (norms and dropouts split too; MoE needs it)",
    "expert_tp": "GPUs each routed expert is split over (divides tp; 1: whole experts, EP folded over TP)",
    "tp_across_nodes": "allow a TP group to leave its node (warned)",
    "tp_comm_overlap": "with sequence_parallel: TP all-gathers and reduce-scatters beside their GEMMs (userbuffers)",
    "tp_comm_sms": "SMs the overlapped TP communication holds (our assumption)",
    "reshard_after_forward": "ZeRO-3: gather weights in every op (true) or once per step (false, as Llama 3's FSDP)",
    "schedule": "1f1b, zb-h1, zb-1p, zb-2p, dualpipe, dualpipev, ... (python -m sim schedule --help), or a .json order",
    "microbatches": "micro-batches per step per replica (M); global batch = dp x M x microbatch_size sequences",
    "seq_len": "tokens per sequence",
    "microbatch_size": "sequences per micro-batch",
    "chunks": "interleaved-1f1b and combined-1f1b only: model chunks per rank",
    "layers_per_virtual_stage": "interleaved-1f1b and combined-1f1b: layers per virtual stage, chunks derived (Megatron's "
                                "num_layers_per_virtual_pipeline_stage; null: chunks)",
    "microbatch_group_size_per_vp_stage": "interleaved-1f1b and combined-1f1b: micro-batches each model chunk takes "
                                          "at a time, P to M (Megatron-Core's; null: P)",
    "embedding_stage": "count the embedding as a layer of the pipeline split: the first stage holds one layer fewer "
                       "(Megatron's account_for_embedding_in_pipeline_split)",
    "loss_stage": "count the loss as a layer of the split: the last stage holds one layer fewer (Megatron's "
                  "account_for_loss_in_pipeline_split)",
    "comm_sms": "SMs an all-to-all kernel holds (of the GPU's)",
    "dispatch_precision": f"all-to-all dispatch on the wire: {', '.join(PRECISION_BYTES)}",
    "combine_precision": f"all-to-all combine on the wire: {', '.join(PRECISION_BYTES)}",
    "gemm_precision": f"GEMMs' number format, sets their peak: {', '.join(GEMM_PRECISIONS)}",
    "node_limit": "max nodes a token's experts may span (null: no limit)",
    "compute_model": f"how compute is costed: {', '.join(COMPUTE_MODELS)} (kernels: each kernel by shape, sim/compute)",
    "gemm_model": f"a GEMM's time: {', '.join(GEMM_MODELS)} (tables: the fit corrected by the measured rows around "
                  "its shape, sim/compute/gemm_table.py)",
    "gemm_efficiency": "set: every GEMM flat at this share of the dense peak (null: by shape; flops model: 0.6)",
    "attention_efficiency": "set: the attention core flat at this share of the BF16 peak (null: by shape; flops: 0.4)",
    "hbm_efficiency": "fraction of HBM bandwidth memory-bound work reaches (our assumption)",
    "kernel_launch_us": "microseconds each non-GEMM kernel's launch and gap costs (our assumption)",
    "fusion": f"which kernels the trainer fuses: {', '.join(FUSIONS)} (fused: Transformer Engine / Megatron)",
    "attention_kernel": f"the attention core: {', '.join(ATTENTION_KERNELS)} (flash2: FlashAttention-2, PyTorch's "
                        "attention on Hopper; unfused: Megatron's core, scores in HBM)",
    "loss_kernel": f"the cross-entropy: {', '.join(LOSS_KERNELS)} (fused: Megatron's; eager / compiled: PyTorch's "
                   "F.cross_entropy on FP32 logits, without or with torch.compile; eager-bf16: on BF16 logits)",
    "vocab_parallel_loss": "each TP GPU computes the loss on its vocabulary shard (false: the logits gathered "
                           "whole on every TP GPU first)",
    "logits_kept": "the train loop still holds the BF16 logits while the backward runs (it never deletes them)",
    "stage_outputs_kept": "each pipeline stage keeps every micro-batch's output (the last: its logits) until the step "
                          "ends, as torch.distributed.pipelining did in 2024 (PyTorch PRs 153383, 159251)",
    "compute_kernels": "a YAML of fitted kernel families (python -m sim calibrate --kernels; null: shipped)",
    "a2a_algorithm": "hierarchical (NVLink then network, DeepEP) or flat",
    "a2a_chunks": "pieces an all-to-all is sent in",
    "routing_skew": "Zipf exponent of expert popularity (0: uniform; > 0 simulates every rank)",
    "routing_seed": "seed of the skewed routing",
    "memory_policy": f"what layers keep and recompute: {', '.join(MEMORY_POLICIES)}",
    "activation_offload": "share (0-1) of each layer's saved activations copied to host memory after its forward and "
                          "back for its backward, over the GPU's host link (Transformer Engine's CPU offloading)",
    "zero_stage": "ZeRO stage 0-3 (sharding over the data-parallel group)",
    "fsdp_grads": f"ZeRO-3's gradients: {', '.join(FSDP_GRADS)} (unsharded: accumulated whole until the last "
                  "micro-batch's backward, as PyTorch's pipeline stages run FSDP2)",
    "zero3_collectives": f"ZeRO-3's collectives: {', '.join(ZERO3_COLLECTIVES)} (per-tensor: DeepSpeed's ZeRO-3 of "
                         "2021, one all-gather or reduce-scatter per parameter tensor, each gather blocking the "
                         "compute)",
    "weight_bytes": "bytes per parameter of the weights",
    "grad_bytes": "bytes per parameter of the gradients (2: accumulated and reduced in BF16, Megatron's "
                  "grad_reduce_in_fp32 off)",
    "fp8_param_gather": "FP8 GEMMs: weights kept only as FP8 copies, gathered in FP8 (Megatron's fp8_param_gather)",
    "gradient_accumulation_fusion": "weight-gradient GEMMs add into the main gradient in place, reading and writing "
                                    "grad_bytes an element (Megatron's; false: a BF16 gradient written, then added "
                                    "by a kernel of its own where micro-batches accumulate)",
    "optimizer_bytes": "bytes per parameter of the optimizer state",
    "memory_reserve_gb": "set: GB per GPU kept beside the model, flat (null: CUDA context, NCCL, buffers, 2% fragmentation)",
    "recompute_granularity": f"Megatron-Core's recompute granularity: {', '.join(GRANULARITIES)} (null: memory_policy's)",
    "recompute_modules": f"selective: modules recomputed, a list of {', '.join(MODULES)}",
    "recompute_method": f"full: which layers recompute: {', '.join(METHODS)}",
    "recompute_num_layers": "full: layers per recomputed group (uniform) or recomputed per stage (block)",
    "stage_layers": "layers of each stage, e.g. [12, 12, 12, 12] (null: even)",
    "first_stage_layers": "layers of the first stage, the rest even (null: even)",
    "last_stage_layers": "layers of the last stage, the rest even (null: even)",
    "dp_sync": f"gradient sync: {', '.join(DP_SYNC)}",
    "optimizer_sync": f"before the optimizer: {', '.join(OPTIMIZER_SYNC)} (bypass: Zero Bubble's post-validation)",
    "zb_memory_limit": "zb-auto only: activation memory limit in micro-batches",
    "communication": f"all-to-alls: {', '.join(COMMUNICATION)}",
    "network": "network backend: maxmin (flows share each link max-min fairly) or analytical (no contention)",
    "nccl_protocol": "NCCL rings: auto (NCCL's pick by size), LL, LL128, Simple, or none (the fabric alone)",
    "pipeline_sends": f"pipeline sends: {', '.join(PIPELINE_SENDS)} (blocking: Megatron without overlap_p2p_comm)",
    "kernels": "communication kernels: deepep, ideal, or a YAML file (python -m sim calibrate)",
    "faults": "slow GPUs, jitter, link faults (a mapping; docs/model.md, Stragglers and faults)",
    "profile": "CSV of measured part durations replacing the FLOPs model (null: first principles)",
    "description": "free text, shown nowhere as a figure",
}


def _value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v if v else '""'
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v if not isinstance(v, tuple) else list(v))      # JSON flow style is YAML
    return str(v)


def example_yaml(base: dict | None = None, title: str | None = None) -> str:
    """The commented template: every RunSpec field, its meaning and unit, and its default. With
    ``base`` (a scenario's fields, as :func:`~sim.training.model.specs.scenario_mapping` reads them) the values
    are that scenario's, every other field at its default: ``run tiny --example`` starts from tiny."""
    base = dict(base or {})
    lines = [f"# A scenario for `python -m sim run my.yaml`{f', starting from {title}' if title else ''}: "
             "every field, its unit and its default.",
             "# Required fields first; then every optional field at its default (delete what you keep as is)."]
    model = base.pop("model", None) if base else MODEL
    if isinstance(model, dict) or model is None:
        lines.append("model:                   # " + HELP["model"])
        lines += [f"  {k}: {_value(v)}" for k, v in (model or MODEL).items()]
    else:
        lines.append(f"{'model:':<24} {_value(model):<10} # {HELP['model']} (required)")
    for f in fields(RunSpec):
        if f.name == "model":
            continue
        required = f.default is MISSING
        if f.name in base:
            value = base[f.name]
        elif base:
            value = None if required else f.default
        else:
            value = REQUIRED[f.name] if required else CHANGED.get(f.name, f.default)
        if f.name == "description" and not base:
            value = "a Qwen3-30B-A3B-like MoE on 256 H100"
        comment = HELP.get(f.name, "")
        default = "required" if required else f"default {_value(f.default)}"
        lines.append(f"{f.name + ':':<24} {_value(value):<10} # {comment} ({default})")
    return "\n".join(lines) + "\n"


__all__ = ["example_yaml"]
