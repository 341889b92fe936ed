"""The main job of ``make run``: every result the project produces by default, under results/.

1. the DeepSeek-V3 scenario (2,048 H800) under 1f1b, zb-h1, dualpipe, dualpipev;
2. every schedule side by side at P=8, M=16 without communication.
"""
from __future__ import annotations

import time

from experiments import deepseek_v3, schedule_comparison


def main() -> int:
    t0 = time.perf_counter()
    deepseek_v3.main([])
    print()
    schedule_comparison.main([])
    print(f"main job done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
