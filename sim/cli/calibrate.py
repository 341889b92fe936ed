"""``python -m sim calibrate``: fit the simulator's kernels to measurements.

* ``calibrate PROFILE.csv``: the communication kernels of a topology and GPU, fitted to measured
  collectives (:mod:`sim.training.comm.calibrate`), written as a kernels preset a scenario can name;
* ``calibrate --kernels``: the compute kernel model fitted to its declared calibration set
  (:mod:`sim.compute.fit`), each table's fit error printed; ``--write`` rewrites the shipped fit;
* ``calibrate --kernels TABLE.csv ... --family NAME --out FILE``: a family of one's own fitted to
  one's own GEMM (and attention) tables in the same columns, for ``compute_kernels: FILE``.
"""
from __future__ import annotations

from ..checks import InputError


def cmd_calibrate(args) -> int:
    if args.kernels is not None:
        return _compute_kernels(args)
    if args.profile is None:
        raise InputError("calibrate: give a communication profile CSV, or --kernels for the compute kernels")
    from ..io import check_output, overwriting
    from ..training.comm.calibrate import Collectives, fit, read_profile, write_preset
    from ..training.comm.kernels import load_kernels
    from ..training.model.specs import load_model, load_scenario
    from ..training.scenario import named_topology
    run = load_scenario(args.scenario, topology=args.topology)
    model = load_model(run.model)
    if not model.is_moe:
        raise InputError(f"calibrate: scenario {args.scenario!r} has a dense model; dispatch/combine rows need an MoE")
    sim = Collectives(named_topology(run.topology).links, run, model)
    rows = read_profile(args.profile, sim)
    params = [p.strip() for p in args.fit.split(",") if p.strip()] if args.fit else None
    if args.out:
        with overwriting(args.force):
            check_output(args.out)
    base = args.base or "deepep"
    result = fit(rows, sim, load_kernels(base), params, source=str(args.profile))
    k = result.kernels
    print(f"calibrated {', '.join(result.params)} on {len(rows)} measured collective(s), topology {run.topology}, "
          f"from kernels {base}:")
    print("  " + ", ".join(f"{p} = {getattr(k, p):.4g}" for p in result.params))
    print(result.frame().to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"rms log error {result.rms_log_error:.4f}")
    if args.out:
        with overwriting(args.force):
            path = write_preset(result, args.out)
        print(f"wrote {path}; use it with `python -m sim run SCENARIO --kernels {path}` or `kernels: {path}`")
    return 0


def _compute_kernels(args) -> int:
    import pandas as pd

    from ..compute.fit import FITTED, calibrate, calibrate_tables, fitted_text
    from ..compute.kernels import load_families
    from ..io import check_output, overwriting, write_text_atomic
    from ..training.model.specs import gpu_names, load_gpu
    gpus = {n: load_gpu(n).figures() for n in gpu_names()}
    if args.out:
        with overwriting(args.force):
            check_output(args.out)
    if args.kernels:
        if not args.family:
            raise InputError("calibrate --kernels TABLE...: name the family with --family (a GPU of your own then "
                             "sets kernel_family to it)")
        shipped = load_families()
        base = args.base or "sm90"
        if args.family in shipped:
            raise InputError(f"calibrate --kernels: --family {args.family!r} is a shipped family; choose another name")
        if base not in shipped:
            raise InputError(f"calibrate --kernels: --base {base!r} must be a shipped kernel family "
                             f"({', '.join(shipped)}) for the attention when no attention table is given")
        own, report = calibrate_tables(args.kernels, gpus, args.family, shipped[base], base)
        fitted = {**own, **shipped}
    else:
        fitted, report = calibrate(gpus)
    frame = pd.DataFrame([r._asdict() for r in report]).rename(columns={"rms_pct": "rms_error_pct",
                                                                        "max_pct": "worst_error_pct"})
    print("kernel model fit, each table's time error over its rows (rms and worst, %):")
    print(frame.to_string(index=False))
    for name, fam in fitted.items():
        if args.kernels and name != args.family:
            continue
        gemm = ", ".join(f"{p}: rate {f['rate_tflops']:.4g} TFLOPS, k0 {f['k0']:.4g}, fixed {f['fixed_us']:.3g} us"
                         for p, f in fam["gemm"].items())
        also = "".join(f" (also {k})" for k in (fam["attention"].get("also") or {}))
        print(f"{name} ({', '.join(fam['gpus'])}): {gemm}; attention {fam['attention']['kernel']}{also}")
    text = fitted_text(fitted)
    if args.write:
        if args.kernels:
            raise InputError("calibrate --kernels: --write rewrites the shipped fit from the declared set; with your "
                             "own tables use --out FILE")
        FITTED.write_text(text, encoding="utf-8")     # the shipped file in the source tree: no outputs manifest
        print(f"wrote {FITTED}")
    if args.out:
        with overwriting(args.force):
            path = write_text_atomic(text, args.out)
        hint = (f"; a GPU of your own sets `kernel_family: {args.family}`" if args.kernels else "")
        print(f"wrote {path}; use it with `compute_kernels: {path}` in a scenario{hint}")
    return 0


def add_arguments(p) -> None:
    p.add_argument("profile", nargs="?", help="communication profile CSV: kind, gpus, nodes, tokens or bytes, [sms], "
                                              "seconds or gbps (docs/model.md: Calibration)")
    p.add_argument("--topology", help="topology the measurements were taken on (default: the scenario's)")
    p.add_argument("--scenario", default="deepseek-v3",
                   help="scenario giving the model, routing and precisions of dispatch/combine rows")
    p.add_argument("--base",
                   help="communication: the kernels preset or YAML the fit starts from, unfitted values kept "
                        "(default deepep); --kernels: the compute family whose attention a GEMM-only table takes "
                        "(default sm90)")
    p.add_argument("--fit", help="comma-separated parameters to fit (default: those the rows can inform)")
    p.add_argument("--kernels", nargs="*", metavar="TABLE",
                   help="fit the compute kernel model: with no table, to its declared calibration set (prints each "
                        "table's error); with tables (GEMM: gpu, precision, groups, m, n, k, tflops; attention: gpu, "
                        "kernel, direction, causal, head_dim, seq_len, tflops), a family of your own (--family)")
    p.add_argument("--family", help="--kernels TABLE...: the name of the family your tables make")
    p.add_argument("--write", action="store_true",
                   help="--kernels: rewrite the shipped fit (sim/compute/presets/kernels.yaml) from the declared set")
    p.add_argument("--out", help="write the fitted kernels preset (YAML) here")
    p.add_argument("--force", action="store_true", help="replace --out even if this tool did not write it")


COMMANDS = {"calibrate": ("fit communication or compute kernels to measurements", add_arguments, cmd_calibrate)}
