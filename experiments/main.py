"""The main job of ``make run``: every result the project produces by default, under results/."""
from __future__ import annotations

from experiments import schedule_comparison


def main() -> int:
    schedule_comparison.main([])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
