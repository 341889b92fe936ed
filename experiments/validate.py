"""The validation suite: every published measured run of ``validation/runs.csv`` against the
simulator's prediction, first-principles and profile-fed (:mod:`validation.predict`).

Writes, under ``--out`` (default ``results``):

* ``validation.csv``: one row per run, its layout and source, the measured figure, each mode's
  prediction and speed error (predicted speed / measured speed - 1: positive = the simulator is
  optimistic), the simulated step time and peak memory; rows that need tensor or context
  parallelism, or that the model cannot express, are listed with their role and no prediction;
* ``validation_summary.csv``: per source and mode, the scored rows, the median and worst |error|;
* ``validation_rankings.csv``: where a source measured several schedules in one setting, whether the
  simulator orders them the same way, and each schedule's speed-up over 1F1B, measured and simulated;
* ``validation_pairs.csv``: every pair of runs of one job measured under two schedules or layouts,
  the measured and simulated gap, whether they agree, ties under 2% (:mod:`experiments.ranking_pairs`);
* ``validation_slopes.csv``: each Zero Bubble schedule's step time as a line in its micro-batches,
  measured and simulated, in units of the paper's profiled passes: what a micro-batch costs and what
  the step pays once (:mod:`experiments.microbatch_slopes`);
* ``validation_memory.csv``: the memory suite (``validation/memory.csv``, :mod:`validation.memory`), a row
  per run: ``id``, ``source``, ``measured_gb``, ``predicted_gb`` (as the source's PyTorch counter
  counts it), ``error_pct`` (predicted / measured - 1) and the simulated rank's breakdown, with
  ``outside_counter_gb``, the part of it that counter does not see;
* ``figures/validation.png``: predicted against measured, log-log, with +-10% and +-25% bands.

The runs are a sweep (Dask on the local cores by default; ``--serial`` in this process), written as
they finish and resumed when interrupted. Bad data in the suite is one line naming the row and the
field, before anything is simulated or written.
"""
from __future__ import annotations

import functools
import hashlib
import threading
from dataclasses import asdict, fields
from pathlib import Path

import pandas as pd

from experiments.common import compile_kernels, sweep_parser
from experiments.microbatch_slopes import microbatch_slopes, slopes_text
from experiments.ranking_pairs import pairs_text, ranking_pairs, speed
from sim.checks import InputError
from sim.cli import guarded
from sim.io import check_output, overwriting, write_csv_atomic
from sim.sweep import run_sweep
from sim.training.model.specs import GEMM_MODELS
from validation.memory import load_memory_runs, predict_memory
from validation.predict import MODES, calibrated_kernels, predict, speed_error
from validation.suite import KERNEL_METRICS, ROOT, RUNS, Run, load_runs, resolve

NAME = "validation"
READY = "kernels ready"                   # --announce-ready's line
PROFILES = "validation_profiles"          # compute profiles written from the Zero Bubble paper's Table 9


@functools.lru_cache(maxsize=1)
def suite_code() -> str:
    """A fingerprint of the suite's code and data (``validation/`` and this script): a resumed row
    computed by other suite code is computed again (the simulator's own fingerprint is ``sim_code``)."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for path in sorted(ROOT.rglob("*")):
        if path.suffix in (".py", ".csv", ".yaml") and path.is_file():
            h.update(str(path.relative_to(ROOT)).encode())
            h.update(path.read_bytes())
    return "suite-" + h.hexdigest()[:12]


def as_point(run: Run) -> dict:
    """A run as a sweep point: its fields, empty cells as empty strings (as the CSV reads them back)."""
    return {**{k: ("" if v is None else v) for k, v in asdict(run).items()}, "suite_code": suite_code()}


def from_point(point: dict) -> Run:
    """The :class:`Run` of a sweep point (its cells back to numbers and ``None``)."""
    types = {f.name: f.type for f in fields(Run)}
    values = {}
    for key, value in point.items():
        if key not in types:
            continue
        if value == "" or value is None:
            values[key] = None
        elif key == "measured":
            values[key] = float(value)
        elif "int" in str(types[key]):
            values[key] = int(value)
        else:
            values[key] = str(value)
    return Run(**{k: v for k, v in values.items() if v is not None})


def point(p: dict) -> dict:
    """One run's predictions in every mode that applies (a sweep's point function); a kernel row
    whose ``_kernels_fit`` is ``parent`` leaves its profile-fed mode to the sweep's own process
    (:func:`fill_kernel_rows`: the calibration set is fitted once there, not once per worker)."""
    run = from_point(p)
    out = {}
    if not run.simulated:
        return out
    folder = Path(p.get("_profiles", "")) if p.get("_profiles") else Path(".") / PROFILES
    modes = ("first_principles",) if run.is_kernel and p.get("_kernels_fit") == "parent" else MODES
    for mode in modes:
        result = predict(run, mode, folder, p.get("_gemm_model") or "fit")
        if not result:
            continue
        out[f"predicted_{mode}"] = result["predicted"]
        out[f"error_{mode}_pct"] = 100 * speed_error(run, result["predicted"])
        out[f"step_time_s_{mode}"] = result["step_time_s"]
        for key in ("max_memory_gb", "fits_hbm", "bound", "memory_policy", "not_costed"):
            if key in result and mode == "first_principles":
                out[key] = result[key]
    return out


def expected_cost(run: Run) -> int:
    """A rough cost of simulating ``run`` (ops of one pipeline, at least one): the sweep starts the
    dearest first, so that no long run is left alone at the end."""
    return 1 if run.is_kernel or not run.simulated else run.pp * run.microbatches * (run.vp or 1)


def fill_kernel_rows(df: pd.DataFrame, runs: list[Run], kernels) -> pd.DataFrame:
    """The profile-fed predictions of the kernel rows (:func:`point` left them to this process),
    with ``kernels`` the calibration set's fit (:func:`validation.predict.calibrated_kernels`)."""
    from validation.predict import predict_kernel
    by_id = {r.id: r for r in runs}
    df = df.copy()
    for i, row in df.iterrows():
        run = by_id.get(row["id"])
        if run is None or not run.is_kernel or run.profile is None or row.get("status") != "ok":
            continue
        result = predict_kernel(run, kernels)
        df.loc[i, "predicted_profile_fed"] = result["predicted"]
        df.loc[i, "error_profile_fed_pct"] = 100 * speed_error(run, result["predicted"])
        df.loc[i, "step_time_s_profile_fed"] = result["step_time_s"]
    return df


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per source and mode: rows scored, median and worst |speed error| (%), the worst row, the
    median signed error, rows within 10% and 25%."""
    rows = []
    scored = df[df["role"] == "scored"]
    for mode in MODES:
        col = f"error_{mode}_pct"
        if col not in scored:
            continue
        for source, g in list(scored.groupby("source", sort=False)) + [("all sources", scored)]:
            e = g[col].dropna()
            if e.empty:
                continue
            worst = e.abs().idxmax()
            rows.append({"source": source, "mode": mode, "rows": len(e),
                         "median_abs_error_pct": float(e.abs().median()), "worst_abs_error_pct": float(e.abs().max()),
                         "worst_row": g.loc[worst, "id"], "median_error_pct": float(e.median()),
                         "within_10pct": int((e.abs() <= 10 + 1e-9).sum()),
                         "within_25pct": int((e.abs() <= 25 + 1e-9).sum())})
    return pd.DataFrame(rows)


# Runs that differ only in their schedule (and what the schedule brings: chunks, the first and last
# stages' layers) measured in one table: a schedule comparison.
SETTING = ["source", "model", "gpu", "gpus", "seq_len", "global_batch", "microbatch_size", "pp", "dp", "ep",
           "precision", "where_table"]


def rankings(df: pd.DataFrame) -> pd.DataFrame:
    """Each setting a source measured under several schedules: the measured order of the schedules
    (fastest first), the simulated order in each mode, whether they agree, and each schedule's
    speed-up over 1F1B, measured and simulated."""
    scored = df[(df["role"] == "scored") & df["metric"].isin(["samples_per_s_per_gpu", "tokens_per_s_per_gpu"])]
    scored = scored.assign(where_table=scored["where"].str.split(",").str[0])
    rows = []
    for key, g in scored.groupby(SETTING, sort=False, dropna=False):
        if g["schedule"].nunique() < 2:
            continue
        measured = g.sort_values("measured", ascending=False)["schedule"].tolist()
        row = dict(zip(SETTING, key))
        row.pop("where_table")
        row["table"] = key[-1]
        row["measured_order"] = " > ".join(measured)
        base = g[g["schedule"] == "1F1B"]
        for mode in MODES:
            col = f"predicted_{mode}"
            if col not in g or g[col].isna().any():
                continue
            simulated = g.sort_values(col, ascending=False)["schedule"].tolist()
            row[f"{mode}_order"] = " > ".join(simulated)
            row[f"{mode}_same_order"] = simulated == measured
            if len(base):
                row[f"{mode}_speedups"] = "; ".join(
                    f"{s}: {m / base['measured'].iloc[0]:.3f} measured, {p / base[col].iloc[0]:.3f} simulated"
                    for s, m, p in zip(g["schedule"], g["measured"], g[col]) if s != "1F1B")
        rows.append(row)
    return pd.DataFrame(rows)


def run(args) -> int:
    runs = load_runs(Path(args.runs))                   # bad data: one line, nothing written
    if args.only:
        runs = [r for r in runs if any(part in r.id for part in args.only)]
        if not runs:
            raise InputError(f"--only {' '.join(args.only)}: no run's id contains it (ids: validation/runs.csv)")
    out = Path(args.out)
    paths = [out / f"{NAME}.csv", out / f"{NAME}_summary.csv", out / f"{NAME}_rankings.csv",
             out / "figures" / f"{NAME}.png", out / f"{NAME}_memory.csv", out / f"{NAME}_pairs.csv",
             out / f"{NAME}_slopes.csv"]
    with overwriting(args.force):
        for path in paths:
            check_output(path)
    fit = None
    if any(r.is_kernel and r.profile is not None for r in runs):      # fitted here while the sweep runs
        fit = threading.Thread(target=calibrated_kernels, daemon=True)
        fit.start()
    if args.announce_ready or not args.serial:      # once here, not once per worker (each would compile them)
        seconds = compile_kernels()
        if args.announce_ready:
            print(f"{READY} ({seconds:.1f} s)", flush=True)
    order = sorted(range(len(runs)), key=lambda i: -expected_cost(runs[i]))     # dearest first
    points = [{**as_point(runs[i]), "_profiles": str(out / PROFILES), "_kernels_fit": "parent",
               "_gemm_model": args.gemm_model} for i in order]
    df = run_sweep(point, points, paths[0], scheduler="serial" if args.serial else args.scheduler,
                   workers=args.workers, progress=not args.no_progress, desc=NAME,
                   point_timeout_s=args.point_timeout, force=args.force)
    df = df.set_index("id").loc[[r.id for r in runs if r.id in set(df["id"])]].reset_index()   # the suite's order
    if fit is not None:
        fit.join()
        df = fill_kernel_rows(df, runs, calibrated_kernels())
    failed = df[df["status"] != "ok"]
    summary_df, rankings_df, pairs_df = summary(df), rankings(df), ranking_pairs(df)     # rankings: none when --only picks no table of them
    slopes_df = microbatch_slopes(df)
    with overwriting(args.force):
        write_csv_atomic(df, paths[0])          # this suite's runs only (a resumed CSV keeps rows of old points)
        write_csv_atomic(summary_df, paths[1])
        write_csv_atomic(rankings_df, paths[2])
        write_csv_atomic(pairs_df, paths[5])
        write_csv_atomic(slopes_df, paths[6])
    if not args.no_figure:
        from experiments.plots import validation_figure
        validation_figure(pd.read_csv(paths[0]), out / "figures")
    memory_df = memory_suite(args.only)
    with overwriting(args.force):
        write_csv_atomic(memory_df, paths[4])
    if not args.only and Path(args.runs).resolve() == RUNS.resolve() and not len(failed) and args.gemm_model == "fit":
        write_trust_errors(df)                  # the whole shipped suite, as shipped: the trust bands' data
    print(text(summary_df, rankings_df, df, pairs_df))
    for line in slopes_text(slopes_df):
        print(line)
    print(memory_text(memory_df))
    print(f"wrote {paths[0]} ({len(df)} runs, {int((df['status'] == 'ok').sum())} ok, {len(failed)} failed), "
          f"{paths[1].name}, {paths[2].name}, {paths[5].name}, {paths[6].name}, " +
          ("" if args.no_figure else f"figures/{paths[3].name}, ") +
          f"{paths[4].name} ({len(memory_df)} runs)")
    return 1 if len(failed) else 0


def trust_errors(df: pd.DataFrame) -> pd.DataFrame:
    """The scored step-level runs' features, first-principles errors, ranking group (``job``, empty
    for a run in none) and measured figure as a speed (a time metric's inverse:
    :func:`experiments.ranking_pairs.speed`), as :mod:`sim.training.trust` reads them (the
    communication-kernel micro-benchmarks left out)."""
    from sim.training.model.specs import load_model
    from sim.training.trust import COLUMNS, generation, model_params
    pairs = ranking_pairs(df, modes=("first_principles",))
    job = {} if pairs.empty else {run: group for side in ("faster", "slower")
                                  for run, group in zip(pairs[side], pairs["group"])}
    rows = []
    scored = df[(df["role"] == "scored") & (df["status"] == "ok") & ~df["metric"].isin(KERNEL_METRICS)]
    for r in scored.dropna(subset=["error_first_principles_pct"]).to_dict("records"):
        model = load_model(resolve(r["model"]))
        rows.append({"id": r["id"], "source": r["source"], "generation": generation(r["gpu"]),
                     "moe": int(model.is_moe), "model_parallel": int(int(r["tp"]) * int(r["cp"]) > 1),
                     "microbatch_size": int(r["microbatch_size"]), "params_b": round(model_params(model) / 1e9, 3),
                     "error_pct": round(float(r["error_first_principles_pct"]), 3), "job": job.get(r["id"], ""),
                     "measured": speed(r, "measured")})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def write_trust_errors(df: pd.DataFrame) -> Path:
    """Write :func:`trust_errors` over the shipped file (``sim/training/presets/validation_errors.csv``),
    atomically; the package's data, not an output of ours in the manifest sense."""
    import os
    import tempfile

    from sim.training.trust import ERRORS
    header = ("# The validation suite's first-principles errors per scored step-level run (with its ranking group,\n"
              "# job, and its measured figure as a speed: a time metric's inverse), written by\n"
              "# `python -m experiments.validate` over the whole of validation/runs.csv (make run); read by\n"
              "# sim/training/trust.py for the trust band of every run and\n"
              "# the ranking agreement of every plan. Never an input to any parameter.\n")
    fd, tmp = tempfile.mkstemp(dir=ERRORS.parent, prefix=f".{ERRORS.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(header + trust_errors(df).to_csv(index=False))
    os.replace(tmp, ERRORS)
    return ERRORS


def memory_suite(only: list[str] | None = None) -> pd.DataFrame:
    """The memory suite's rows (``--only`` picks by id here too; none picked: an empty table)."""
    runs = [r for r in load_memory_runs() if not only or any(part in r.id for part in only)]
    columns = ["id", "source", "measured_gb", "predicted_gb", "error_pct", "status"]
    return pd.DataFrame([predict_memory(r) for r in runs]) if runs else pd.DataFrame(columns=columns)


def memory_text(memory_df: pd.DataFrame) -> str:
    """Median and worst |memory error| per source and over all (predicted / measured - 1)."""
    ok = memory_df[memory_df["status"] == "ok"] if len(memory_df) else memory_df
    if ok.empty:
        return "memory: no run"
    parts = []
    for source, g in list(ok.groupby("source", sort=False)) + [("all", ok)]:
        e = g["error_pct"]
        runs = f"{len(e)} run{'s' if len(e) != 1 else ''}"
        parts.append(f"{source} {runs}, median |error| {e.abs().median():.1f}%, worst {e.abs().max():.1f}% "
                     f"({g.loc[e.abs().idxmax(), 'id']})")
    return "memory error = predicted / measured peak per GPU - 1: " + "; ".join(parts)


def text(summary_df: pd.DataFrame, rankings_df: pd.DataFrame, df: pd.DataFrame,
         pairs_df: pd.DataFrame | None = None) -> str:
    """What the command prints: the error per source and mode, the schedule rankings, the ranking pairs
    (``pairs_df``: :func:`experiments.ranking_pairs.ranking_pairs` of ``df``, found here when not given)."""
    lines = ["speed error = predicted speed / measured speed - 1 (positive: the simulator is optimistic)",
             summary_df.to_string(index=False, float_format=lambda v: f"{v:.1f}")]
    if not rankings_df.empty:
        for mode in MODES:
            col = f"{mode}_same_order"
            if col in rankings_df:
                known = rankings_df[col].notna() & (rankings_df[col].astype(str) != "")   # the mode simulated both
                same = rankings_df[col].astype(str).str.lower() == "true"
                lines.append(f"schedule rankings, {mode}: the same order as measured in {int(same.sum())} of "
                             f"{int(known.sum())} settings")
    lines += pairs_text(ranking_pairs(df) if pairs_df is None else pairs_df)
    counts = df["role"].value_counts().to_dict()
    lines.append("runs: " + ", ".join(f"{counts[k]} {k}" for k in sorted(counts)))
    return "\n".join(lines)


def parser():
    p = sweep_parser(__doc__)
    p.add_argument("--runs", default=str(RUNS), help="the runs to validate: a CSV of runs.csv's columns (default: the "
                                                     "suite, validation/runs.csv)")
    p.add_argument("--no-figure", action="store_true", help="do not draw figures/validation.png (python -m "
                                                             "experiments.plots draws it from the CSV)")
    p.add_argument("--only", nargs="+", metavar="TEXT",
                   help="run only the runs whose id contains one of these (e.g. zb-t4-6.2b deepep-ll)")
    p.add_argument("--gemm-model", choices=GEMM_MODELS, default="fit",
                   help="a GEMM's time in every training-step run: fit (the default, as every run of the simulator) or "
                        "tables (read off the measured calibration tables around its shape, sim/compute/gemm_table.py)")
    p.add_argument("--announce-ready", action="store_true",
                   help=f"print '{READY}' once the fabric's kernels are compiled here, before the sweep's workers "
                        "start (make run waits for it before its own steps that need them)")
    return p


def main(argv=None) -> int:
    return guarded(lambda: run(parser().parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["as_point", "from_point", "memory_suite", "memory_text", "point", "rankings", "summary", "suite_code",
           "trust_errors", "write_trust_errors"]
