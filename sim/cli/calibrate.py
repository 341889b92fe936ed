"""``python -m sim calibrate PROFILE.csv``: fit the communication kernels of a topology and GPU to
measured collectives (:mod:`sim.moe.calibrate`) and write a kernels preset a scenario can name."""
from __future__ import annotations

from ..checks import InputError


def cmd_calibrate(args) -> int:
    from ..io import check_output, overwriting
    from ..moe.calibrate import Collectives, fit, read_profile, write_preset
    from ..moe.comm_kernels import load_kernels
    from ..moe.scenario import named_topology
    from ..moe.specs import load_model, load_scenario
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
    result = fit(rows, sim, load_kernels(args.base), params, source=str(args.profile))
    k = result.kernels
    print(f"calibrated {', '.join(k.fitted)} on {len(rows)} measured collective(s), topology {run.topology}, "
          f"from kernels {args.base}:")
    print("  " + ", ".join(f"{p} = {getattr(k, p):.4g}" for p in k.fitted))
    print(result.frame().to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"rms log error {result.rms_log_error:.4f}")
    if args.out:
        with overwriting(args.force):
            path = write_preset(result, args.out)
        print(f"wrote {path}; use it with `python -m sim run SCENARIO --kernels {path}` or `kernels: {path}`")
    return 0


def add_arguments(p) -> None:
    p.add_argument("profile", help="communication profile CSV: kind, gpus, nodes, tokens or bytes, [sms], "
                                   "seconds or gbps (docs/model.md: Calibration)")
    p.add_argument("--topology", help="topology the measurements were taken on (default: the scenario's)")
    p.add_argument("--scenario", default="deepseek-v3",
                   help="scenario giving the model, routing and precisions of dispatch/combine rows")
    p.add_argument("--base", default="deepep", help="kernels preset or YAML the fit starts from (unfitted values kept)")
    p.add_argument("--fit", help="comma-separated parameters to fit (default: those the rows can inform)")
    p.add_argument("--out", help="write the fitted kernels preset (YAML) here")
    p.add_argument("--force", action="store_true", help="replace --out even if this tool did not write it")


COMMANDS = {"calibrate": ("fit communication kernels to measured collectives", add_arguments, cmd_calibrate)}
