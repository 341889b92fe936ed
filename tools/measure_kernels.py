"""Measure a kernel table on the GPU at hand, in the columns ``python -m sim calibrate --kernels``
reads: GEMMs (``torch.matmul`` in BF16, ``torch._scaled_mm`` in FP8 where the GPU has FP8 tensor
cores) over a grid of shapes, and fused attention (``scaled_dot_product_attention`` with the flash
backend) forward and backward at FlashAttention-3's benchmark shapes.

    python -m tools.measure_kernels --gpu h100 --out my-h100     # writes my-h100_gemm.csv, my-h100_attention.csv
    python -m sim calibrate --kernels my-h100_gemm.csv my-h100_attention.csv --family my-h100 --out my-kernels.yaml

An optional extra (``pip install torch``, a CUDA GPU): nothing in the simulator or its tests needs
it. Each file's header names the GPU, the driver, CUDA and torch versions and the date; times are the
median of ``--repeats`` CUDA-event timings after warm-up.
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path

SIZES = (256, 512, 1024, 2048, 4096, 8192)
ATTENTION_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
ATTENTION_HEAD_DIMS = (64, 128)
BENCH_TOKENS, BENCH_HIDDEN = 16384, 2048


def gemm_shapes(sizes=SIZES) -> list[tuple[int, int, int, int]]:
    """(groups, m, n, k) of the grid: every m, n, k of ``sizes``, one group."""
    return [(1, m, n, k) for m in sizes for n in sizes for k in sizes]


def attention_shapes() -> list[tuple[str, int, int, int]]:
    """(direction, causal, head_dim, seq_len) of FlashAttention-3's benchmark."""
    return [(d, c, h, s) for d in ("fwd", "bwd") for c in (0, 1) for h in ATTENTION_HEAD_DIMS for s in ATTENTION_SEQ]


def attention_flops(direction: str, causal: int, seq_len: int) -> float:
    """FlashAttention's FLOP count at its benchmark (16K tokens, hidden 2,048): forward 4 s^2 d heads
    batch = 4 s x 16K x 2048, half with the mask, the backward 2.5 times the forward."""
    f = 4.0 * seq_len * BENCH_TOKENS * BENCH_HIDDEN * (0.5 if causal else 1.0)
    return f * (2.5 if direction == "bwd" else 1.0)


def write_tables(out: str, gpu: str, header: list[str], gemm_rows: list, attention_rows: list) -> list[Path]:
    """Write ``<out>_gemm.csv`` (gpu, precision, groups, m, n, k, tflops) and ``<out>_attention.csv``
    (gpu, kernel, direction, causal, head_dim, seq_len, tflops)."""
    comment = "".join(f"# {line}\n" for line in header)
    paths = []
    gemm = Path(f"{out}_gemm.csv")
    gemm.write_text(comment + "gpu,precision,groups,m,n,k,tflops\n" + "".join(
        f"{gpu},{p},{g},{m},{n},{k},{t:.3f}\n" for p, g, m, n, k, t in gemm_rows))
    paths.append(gemm)
    if attention_rows:
        att = Path(f"{out}_attention.csv")
        att.write_text(comment + "gpu,kernel,direction,causal,head_dim,seq_len,tflops\n" + "".join(
            f"{gpu},{kernel},{d},{c},{h},{s},{t:.3f}\n" for kernel, d, c, h, s, t in attention_rows))
        paths.append(att)
    return paths


def _timer(torch, repeats: int):
    def median_seconds(fn) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)
    return median_seconds


def measure(gpu: str, repeats: int, sizes=SIZES, fp8: bool = True) -> tuple[list[str], list, list]:
    """Time the grid on the current CUDA device (see the module)."""
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("measure_kernels: no CUDA GPU is visible to torch")
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    header = [f"measured by tools/measure_kernels.py on {props.name} ({props.multi_processor_count} SMs), "
              f"torch {torch.__version__}, CUDA {torch.version.cuda}, {datetime.date.today().isoformat()}",
              f"median of {repeats} CUDA-event timings after warm-up; the simulator's preset GPU: {gpu}"]
    timed = _timer(torch, repeats)
    gemm_rows = []
    for g, m, n, k in gemm_shapes(sizes):
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        gemm_rows.append(("bf16", g, m, n, k, 2.0 * m * n * k / timed(lambda: a @ b) / 1e12))
        if fp8 and hasattr(torch, "float8_e4m3fn"):
            a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=dev)
            try:
                seconds = timed(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
            except RuntimeError:          # no FP8 tensor cores (A100) or an unsupported shape
                continue
            gemm_rows.append(("fp8", g, m, n, k, 2.0 * m * n * k / seconds / 1e12))
    attention_rows = []
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    for direction, causal, head_dim, seq_len in attention_shapes():
        heads, batch = BENCH_HIDDEN // head_dim, BENCH_TOKENS // seq_len
        q, k_, v = (torch.randn(batch, heads, seq_len, head_dim, device=dev, dtype=torch.bfloat16,
                                requires_grad=direction == "bwd") for _ in range(3))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            if direction == "fwd":
                seconds = timed(lambda: sdpa(q, k_, v, is_causal=bool(causal)))
            else:
                out = sdpa(q, k_, v, is_causal=bool(causal))
                grad = torch.randn_like(out)
                seconds = timed(lambda: torch.autograd.grad(out, (q, k_, v), grad, retain_graph=True))
        attention_rows.append(("torch-flash", direction, causal, head_dim, seq_len,
                               attention_flops(direction, causal, seq_len) / seconds / 1e12))
    return header, gemm_rows, attention_rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", required=True, help="the simulator's GPU preset this GPU is (h100, a100, b200, ...)")
    p.add_argument("--out", required=True, help="file stem: writes STEM_gemm.csv and STEM_attention.csv")
    p.add_argument("--repeats", type=int, default=20, help="timed runs per shape (default 20)")
    p.add_argument("--no-fp8", action="store_true", help="BF16 GEMMs only")
    args = p.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("error: measure_kernels needs PyTorch with CUDA (pip install torch); the simulator itself does not",
              file=sys.stderr)
        return 2
    header, gemm_rows, attention_rows = measure(args.gpu, args.repeats, fp8=not args.no_fp8)
    for path in write_tables(args.out, args.gpu, header, gemm_rows, attention_rows):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
