"""The simulator's prediction for one validation run, in the source's own figure.

Two modes:

* ``first_principles``: the run's layout on its GPU and topology presets, compute from the kernel
  model (:mod:`sim.compute`) and the communication kernels of the ``deepep`` preset;
* ``profile_fed``: the same, with what the source (or the suite's declared calibration set) measured
  of the parts fed in: the Zero Bubble paper's per-stage T_F, T_B, T_W (Table 9) as a compute profile
  (each divided by the layers of a middle stage), or, for DeepEP's low-latency kernels, the kernel
  parameters ``python -m sim calibrate`` fits to DeepEP's normal-kernel table.

Figures (the step time ``t`` in seconds, ``G`` GPUs, ``B`` sequences of ``s`` tokens per step):

* samples/s per GPU = B / t / G; tokens/s per GPU = B s / t / G;
* model TFLOP/s per GPU (Llama 3's Table 4): the simulator's useful FLOPs of the step (GEMMs, the
  causal attention core counted once for the scores it computes, i.e. half of s x s, the output
  head; no recomputation: :meth:`~sim.training.costs.chunk.ChunkModel.model_flops_per_microbatch`) / t / G / 1e12;
* TFLOP/s per GPU, Megatron's equation 3: 96 B s l h^2 (1 + s/6h + V/16lh) / t / G / 1e12 (l layers,
  h hidden, V vocabulary; it counts the recomputed forward);
* GPU hours per trillion tokens = G t / 3600 x 1e12 / (B s);
* a kernel's microseconds, or DeepEP's bottleneck bandwidth (the bytes behind it / the time).

``speed error`` = predicted speed / measured speed - 1, where speed is the figure itself for a
throughput and its inverse for a time: positive means the simulator predicts a faster run than was
measured (optimistic), negative a slower one.
"""
from __future__ import annotations

import functools
from pathlib import Path

from sim.io import write_csv_atomic
from sim.training.comm.calibrate import Collectives, Measurement, fit
from sim.training.comm.kernels import KernelSpec, load_kernels
from sim.training.model.specs import RunSpec, load_model
from sim.training.scenario import Scenario, named_topology
from sim.training.step import MoEStep

from . import deepseek_profile
from .suite import (
    CALIBRATION_PROFILE,
    DEEPSEEK_PROFILE,
    METRICS,
    Run,
    load_runs,
    load_zero_bubble_profiles,
    resolve,
    row_gpu_as_stated,
)

MODES = ("first_principles", "profile_fed")
GPUS_PER_NODE = 8            # DeepEP's tests: EP 8 is one node, larger EP 8 GPUs on each node


def speed_error(run: Run, predicted: float) -> float:
    """Predicted speed / measured speed - 1 (see the module)."""
    if METRICS[run.metric][1] == "throughput":
        return predicted / run.measured - 1
    return run.measured / predicted - 1


def step_figure(run: Run, step_s: float, model_flops: float | None = None) -> float:
    """The source's figure for a simulated step of ``step_s`` seconds (``model_flops``: the step's
    useful FLOPs, for ``tflops_per_gpu_model``)."""
    G, B, s = run.gpus, run.global_batch, run.seq_len
    if run.metric == "samples_per_s_per_gpu":
        return B / step_s / G
    if run.metric == "tokens_per_s_per_gpu":
        return B * s / step_s / G
    if run.metric == "step_time_s":
        return step_s
    if run.metric == "gpu_hours_per_trillion_tokens":
        return G * step_s / 3600 * 1e12 / (B * s)
    if run.metric == "tflops_per_gpu_megatron":
        m = load_model(resolve(run.model))
        l, h, V = m.layers, m.hidden, m.vocab
        flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
        return flops / step_s / G / 1e12
    if run.metric == "tflops_per_gpu_model" and model_flops is not None:
        return model_flops / step_s / G / 1e12
    raise ValueError(f"no step figure for metric {run.metric!r}")


def run_spec(run: Run, profile: str | None = None) -> RunSpec:
    """The :class:`RunSpec` of a training-step row (``profile``: a compute-profile CSV)."""
    return RunSpec(model=resolve(run.model), gpu=resolve(run.gpu), topology=resolve(run.topology), pp=run.pp,
                   ep=run.ep, dp=run.dp, tp=run.tp, cp=run.cp, sequence_parallel=bool(run.sequence_parallel),
                   schedule=run.sim_schedule, microbatches=run.microbatches, seq_len=run.seq_len,
                   microbatch_size=run.microbatch_size, chunks=run.vp,
                   layers_per_virtual_stage=run.layers_per_virtual_stage, embedding_stage=bool(run.embedding_stage),
                   loss_stage=bool(run.loss_stage), comm_sms=20 if run.comm_sms is None else
                   run.comm_sms, dispatch_precision=run.dispatch_precision or "bf16", combine_precision="bf16",
                   gemm_precision=run.precision or "bf16", node_limit=run.node_limit,
                   memory_policy=run.recompute if run.recompute not in (None, "auto") else "none",
                   recompute_granularity="selective" if run.recompute_modules else None,
                   recompute_modules=run.recompute_module_list,
                   zero_stage=run.zero, reshard_after_forward=bool(run.reshard_after_forward),
                   first_stage_layers=run.first_stage_layers, last_stage_layers=run.last_stage_layers,
                   optimizer_sync=run.optimizer_sync or "global", attention_kernel=run.attention_kernel or "flash",
                   fusion=run.fusion or "fused", loss_kernel=run.loss_kernel or "fused",
                   fsdp_grads=run.fsdp_grads or "sharded", zero3_collectives=run.zero3_collectives or "per-layer",
                   grad_bytes=4.0 if run.grad_reduce_in_fp32 else 2.0,
                   fp8_param_gather=bool(run.fp8_param_gather),
                   gradient_accumulation_fusion=bool(run.gradient_accumulation_fusion),
                   tp_comm_overlap=bool(run.tp_comm_overlap),
                   pipeline_sends=run.pipeline_sends or "async", profile=profile, description=run.id)


def profiled_stage_layers(profile: str) -> int:
    """Layers of a middle stage in the runs Table 9 profiled (ZB-2p): the paper's first and last
    stages hold one layer fewer than the others (section 5.1), so with L layers over p stages a middle
    stage holds (L + 2) / p."""
    entry = load_zero_bubble_profiles()[profile]
    layers = load_model(entry["model"]).layers + 2
    if layers % entry["stages"]:
        raise ValueError(f"profile {profile}: {layers - 2} layers do not split as the paper says over "
                         f"{entry['stages']} stages")
    return layers // entry["stages"]


def write_compute_profile(run: Run, folder: Path) -> Path:
    """The profile of ``run`` as a compute-profile CSV named after the run
    (:func:`sim.training.costs.chunk.read_profile`): the parts of one MoE layer of DeepSeek's profiled
    F&B unit (:mod:`validation.deepseek_profile`), or a Zero Bubble profile's T_F, T_B, T_W, each over
    the layers of the stage it was measured on, as one layer's f, i and w (whatever the run's own
    layout: an interleaved run's chunks hold fewer layers)."""
    if run.profile == DEEPSEEK_PROFILE:
        return deepseek_profile.write_compute_profile(Path(folder) / f"{run.id}.csv")
    entry = load_zero_bubble_profiles()[run.profile]
    layers = profiled_stage_layers(run.profile)
    rows = [{"layer": "dense", "part": part, "seconds": entry[key] / 1e3 / layers}
            for part, key in (("f", "t_f_ms"), ("i", "t_b_ms"), ("w", "t_w_ms"))]
    import pandas as pd
    return write_csv_atomic(pd.DataFrame(rows), Path(folder) / f"{run.id}.csv")     # one file a row: rows of
    # one profile run at once in the sweep's workers, and two atomic writes of one file would race


AUTO_POLICIES = ("selective", "full")   # ``recompute: auto``: the first of these whose memory fits


def scenario_of(run: Run, profile: str | None = None, gemm_model: str = "fit") -> Scenario:
    """The assembled run. ``recompute: auto`` (a source that does not say what its run recomputed)
    takes the least recomputation under which every rank fits the GPU's HBM, since the measured run
    did fit: ``selective`` (the attention core, which fused FlashAttention-style kernels recompute in
    their backward anyway), else ``full``. Only memory decides, never the measured speed.
    ``gemm_model``: the run's :attr:`~sim.training.model.specs.RunSpec.gemm_model`."""
    with row_gpu_as_stated():
        return _scenario_of(run, profile, gemm_model)


def _scenario_of(run: Run, profile: str | None, gemm_model: str = "fit") -> Scenario:
    spec = run_spec(run, profile).with_(gemm_model=gemm_model)
    if run.recompute != "auto":
        return Scenario(spec)
    for policy in AUTO_POLICIES:
        scenario = Scenario(spec.with_(memory_policy=policy))
        if all(m.fits for m in scenario.memory):
            return scenario
    return scenario


def predict_step(run: Run, profile: str | None = None, gemm_model: str = "fit") -> dict:
    """Simulate one step of a training-step row; the figure and what it came from."""
    scenario = scenario_of(run, profile, gemm_model)
    result = MoEStep(scenario).simulate()
    flops = scenario.chunk.model_flops_per_microbatch() * scenario.run.microbatches * scenario.run.dp
    return {"predicted": step_figure(run, result.step_time_s, flops), "step_time_s": result.step_time_s,
            "max_memory_gb": result.max_memory_gb, "fits_hbm": result.fits_hbm, "bound": result.bound,
            "memory_policy": scenario.run.memory_policy, "not_costed": "; ".join(scenario.model.not_costed)}


# --- communication kernels ---------------------------------------------------------------------

def kernel_spec(run: Run) -> RunSpec:
    """The run whose model, routing and precisions a kernel row's all-to-all uses: DeepSeek-V3's
    token size and top-k, FP8 dispatch and BF16 combine; the normal kernels forward through the
    node (hierarchical), the low-latency ones send directly (flat)."""
    return RunSpec(model=resolve(run.model), gpu=run.gpu, topology=resolve(run.topology), pp=1, ep=1, dp=1,
                   schedule="1f1b", microbatches=1, seq_len=run.tokens, dispatch_precision=run.dispatch_precision
                   or "fp8", combine_precision="bf16", node_limit=run.node_limit,
                   a2a_algorithm="hierarchical" if run.role == "calibration" else "flat")


@functools.lru_cache(maxsize=8)
def _collectives(spec: RunSpec) -> Collectives:
    return Collectives(named_topology(spec.topology).links, spec, load_model(spec.model))


def _simulator(run: Run) -> Collectives:
    """The collectives simulator of a kernel row (shared by rows of the same routing and algorithm:
    the token count is each measurement's own)."""
    return _collectives(kernel_spec(run).with_(seq_len=1))


def _measurement(run: Run, sim: Collectives, row: int = 1) -> Measurement:
    nodes = max(1, run.gpus // GPUS_PER_NODE)
    m = Measurement(row, run.kernel, run.gpus, nodes, float(run.tokens), 0.0, run.comm_sms or 20, 0.0)
    seconds = run.measured * 1e-6 if run.metric == "kernel_us" else sim.bottleneck_bytes(m) / (run.measured * 1e9)
    return Measurement(row, run.kernel, run.gpus, nodes, float(run.tokens), 0.0, m.sms, seconds)


@functools.lru_cache(maxsize=1)
def calibrated_kernels() -> KernelSpec:
    """The kernels ``python -m sim calibrate`` fits to the suite's calibration rows (DeepEP's
    normal-kernel table) from the ``deepep`` preset: the declared calibration set, never a scored row."""
    rows = [r for r in load_runs() if r.role == "calibration"]
    sim = _simulator(rows[0])
    measured = [_measurement(r, sim, i) for i, r in enumerate(rows, start=1)]
    return fit(measured, sim, load_kernels("deepep"), source=f"validation/runs.csv ({CALIBRATION_PROFILE})").kernels


def predict_kernel(run: Run, kernels: KernelSpec) -> dict:
    """Simulate one kernel row's all-to-all with ``kernels``; its figure."""
    sim = _simulator(run)
    m = _measurement(run, sim)
    seconds = sim.seconds(m, kernels)
    figure = seconds * 1e6 if run.metric == "kernel_us" else sim.bottleneck_bytes(m) / seconds / 1e9
    return {"predicted": figure, "step_time_s": seconds}


def predict(run: Run, mode: str, profile_folder: Path, gemm_model: str = "fit") -> dict:
    """The prediction of ``run`` in ``mode`` (:data:`MODES`), or ``{}`` when the mode does not apply
    (a row without a profile has no profile-fed prediction); ``gemm_model`` as
    :attr:`~sim.training.model.specs.RunSpec.gemm_model` (a training-step row's GEMMs)."""
    if mode == "profile_fed" and run.profile is None:
        return {}
    if run.is_kernel:
        kernels = load_kernels("deepep") if mode == "first_principles" else calibrated_kernels()
        return predict_kernel(run, kernels)
    profile = str(write_compute_profile(run, profile_folder)) if mode == "profile_fed" else None
    return predict_step(run, profile, gemm_model)


__all__ = ["MODES", "calibrated_kernels", "profiled_stage_layers", "predict", "predict_kernel", "predict_step",
           "run_spec", "scenario_of", "speed_error", "step_figure", "write_compute_profile"]
