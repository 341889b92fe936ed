"""Transcribe Vidur's measured GEMMs into a kernel table (``sim/compute/tables/gemm_vidur_*.csv``).

Vidur (Agrawal et al., MLSys 2024, github.com/microsoft/vidur) publishes the kernel times its profiler
recorded for each linear layer of several models on A100 and H100, in ``data/profiling/compute/<gpu>/
<model>/mlp.csv``: PyTorch's profiler, FP16, the GPU time of the kernels each layer launched, median
of 20 steps, at 1-4,096 tokens and tensor-parallel widths 1-8 (sharded on one GPU, no communication).
Each row of those files gives four GEMMs, with ``h`` = n_embd, ``d`` = h / n_head, ``f`` =
n_expanded_embd, ``t`` = num_tokens, ``p`` = num_tensor_parallel_workers:

* ``attn_pre_proj``:  t x (n_head + 2 n_kv_head) d / p x h
* ``attn_post_proj``: t x h x h / p
* ``mlp_up_proj``:    t x (2 if use_gated_mlp else 1) f / p x h
* ``mlp_down_proj``:  t x h x f / p

This script takes the models without biases in their linear layers, the token counts of
:data:`TOKENS` (256 and more: a training step's GEMMs; with fewer tokens a profiled GEMM's weights,
read again each repetition, stay in the 40-50 MB L2 cache, which a training step's do not), every
width, and writes one row per distinct shape: its throughput from the median time (the median of
the rows that share the shape). Usage::

    python -m tools.vidur_gemm_table VIDUR_CHECKOUT a100 > sim/compute/tables/gemm_vidur_a100.csv

It needs a checkout of Vidur (not shipped); the tables it wrote are in the repository.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import pandas as pd

MODELS = ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-70b-hf", "codellama/CodeLlama-34b-Instruct-hf",
          "internlm/internlm-20b")
TOKENS = (256, 512, 1024, 2048, 3072, 4096)
GPU_NAMES = {"a100": "NVIDIA A100 80GB", "h100": "NVIDIA H100 SXM (DGX H100)"}


def shapes(row) -> dict[str, tuple[int, int, int]]:
    """(m, n, k) of the four GEMMs of one profiled row (see the module)."""
    h, t, p = int(row.n_embd), int(row.num_tokens), int(row.num_tensor_parallel_workers)
    d = h // int(row.n_head)
    up = (2 if str(row.use_gated_mlp) == "True" else 1) * int(row.n_expanded_embd)
    return {"attn_pre_proj": (t, (int(row.n_head) + 2 * int(row.n_kv_head)) * d // p, h),
            "attn_post_proj": (t, h, h // p), "mlp_up_proj": (t, up // p, h),
            "mlp_down_proj": (t, h, int(row.n_expanded_embd) // p)}


def table_rows(checkout: Path, gpu: str) -> list[tuple[int, int, int, float]]:
    """(m, n, k, TFLOPS) per distinct shape, sorted."""
    seconds: dict[tuple[int, int, int], list[float]] = {}
    for model in MODELS:
        frame = pd.read_csv(checkout / "data/profiling/compute" / gpu / model / "mlp.csv")
        frame.columns = [c.replace(".", "_") for c in frame.columns]      # time_stats.OP.median: an attribute
        for row in frame[frame["num_tokens"].isin(TOKENS)].itertuples(index=False):
            for op, shape in shapes(row).items():
                seconds.setdefault(shape, []).append(getattr(row, f"time_stats_{op}_median") * 1e-3)
    return [(m, n, k, 2.0 * m * n * k / statistics.median(s) / 1e12) for (m, n, k), s in sorted(seconds.items())]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkout", type=Path, help="a checkout of github.com/microsoft/vidur")
    p.add_argument("gpu", choices=sorted(GPU_NAMES), help="which GPU's profiles to transcribe")
    args = p.parse_args(argv)
    checkout, gpu = args.checkout, args.gpu
    missing = [m for m in MODELS if not (checkout / "data/profiling/compute" / gpu / m / "mlp.csv").is_file()]
    if missing:
        print(f"error: {checkout}: no data/profiling/compute/{gpu}/<model>/mlp.csv for {', '.join(missing)} "
              "(a checkout of github.com/microsoft/vidur is needed)", file=sys.stderr)
        return 2
    print(f"# GEMM kernel times measured by Vidur's profiler (Agrawal et al., \"Vidur: A Large-Scale Simulation "
          f"Framework for LLM\n# Inference\", MLSys 2024; github.com/microsoft/vidur, data/profiling/compute/{gpu}/"
          f"<model>/mlp.csv as of commit\n# 7d47513, November 2024) on {GPU_NAMES[gpu]}: PyTorch linear layers in "
          "FP16 (the tensor cores' rate of BF16), the GPU time\n# of each layer's kernels by PyTorch's profiler, "
          "median of 20 steps; models Llama-2-7B, Llama-2-70B, CodeLlama-34B,\n# InternLM-20B (no biases), "
          f"{', '.join(map(str, TOKENS))} tokens, tensor-parallel widths 1-8 sharded on one GPU.\n"
          "# Written by `python -m tools.vidur_gemm_table` (its docstring gives each GEMM's shape); one row per "
          "distinct shape,\n# the median where models share one. A declared calibration table "
          "(sim/compute/presets/calibration.yaml); never a\n# validation row. precision bf16: the rate the fit "
          "is for (FP16 and BF16 run at one tensor rate on these GPUs).")
    print("gpu,precision,groups,m,n,k,tflops")
    for m, n, k, tflops in table_rows(checkout, gpu):
        print(f"{gpu},bf16,1,{m},{n},{k},{tflops:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
