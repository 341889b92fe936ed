"""Every schedule side by side at P=8, M=16 with equal per-rank costs (no communication).

Writes ``results/schedule_comparison.csv`` and ``results/figures/utilization_p8_m16.png`` plus
one timeline per schedule (``results/figures/timeline_<schedule>_p8_m16.png``)."""
from __future__ import annotations

from pathlib import Path

from experiments.common import script_main
from sim.checks import InputError, arg
from sim.io import write_csv_atomic
from sim.pipeline import compare_frame, simulate_pipeline
from sim.plots import plot_timeline, plot_utilization
from sim.schedules import STANDALONE


def add_arguments(parser) -> None:
    parser.add_argument("--pp", type=arg(integer=True, low=1, high=1_000), default=8)
    parser.add_argument("--microbatches", type=arg(integer=True, low=1, high=100_000), default=16)
    parser.add_argument("--out", default="results")


def main(argv=None) -> int:
    return script_main(__doc__, add_arguments, run, argv)


def run(args) -> int:
    out = Path(args.out)
    P, M = args.pp, args.microbatches
    df = compare_frame(P, M)
    write_csv_atomic(df, out / "schedule_comparison.csv")
    runs = []
    for name in STANDALONE:
        try:
            run = simulate_pipeline(name, P, M, 2 if name == "interleaved-1f1b" else None, cost_per="rank")
        except InputError:                          # a schedule that refuses (P, M): a note in the CSV
            continue
        runs.append(run.metrics)
        plot_timeline(run.result, out / "figures" / f"timeline_{name}_p{P}_m{M}.png")
    plot_utilization(runs, out / "figures" / f"utilization_p{P}_m{M}.png",
                     title=f"per-rank utilization, P={P}, M={M}, equal costs, no communication")
    print(_blank_missing(df).to_string(index=False))
    print(f"wrote {out / 'schedule_comparison.csv'} and figures under {out / 'figures'}")
    return 0


def _blank_missing(df):
    """``df`` with its missing cells as blanks, for printing: ``fillna("")``, which pandas warns it
    will refuse on float columns (a schedule that refuses (P, M) has no makespan)."""
    out = df.copy()
    for column in df.columns[df.isna().any()]:
        out[column] = df[column].astype(object).where(df[column].notna(), "")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
