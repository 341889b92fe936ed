"""Calibrate the communication kernels (:mod:`sim.training.comm.kernels`) of a topology and GPU to measured
collectives: the communication counterpart of the compute profile.

A communication profile is a CSV, one measured collective per row, as a user gets from nccl-tests
(github.com/NVIDIA/nccl-tests) or DeepEP's test scripts (github.com/deepseek-ai/DeepEP, ``tests/``)
on their own cluster:

===========  ====================================================================================
column       meaning
===========  ====================================================================================
kind         ``dispatch`` or ``combine`` (DeepEP normal kernels, the scenario's model and routing),
             ``all_gather``, ``reduce_scatter``, ``all_reduce`` (NCCL: hierarchical rings; an
             all-reduce inside a node one ring, or NVLS; over nodes the rings or NCCL's tree) or
             ``send`` (one point-to-point message from the group's first GPU to its last)
gpus         GPUs in the group
nodes        nodes the group spans (``gpus / nodes`` GPUs on each, the first of each node)
tokens       dispatch/combine: tokens per GPU (DeepEP's tests: 4096)
bytes        NCCL kinds: the size nccl-tests reports (all-gather: output; reduce-scatter: input;
             all-reduce: the buffer; send: the message)
sms          dispatch/combine: SMs the kernel ran with (default 20, DeepEP's ``Buffer.num_sms``)
seconds      the measured time; or
gbps         the achieved bandwidth: for dispatch/combine DeepEP's "bottleneck bandwidth" (bytes
             a GPU sends over RDMA, a token counted once per destination node its own included,
             when the group spans nodes; bytes a GPU receives over NVLink, its own tokens included,
             within one node), for NCCL kinds nccl-tests' ``algbw`` (bytes / seconds)
===========  ====================================================================================

:func:`fit` simulates each row's collective on the topology with the kernel parameters, and
finds by least squares on the log ratio of simulated to measured time (relative errors, so
short and long collectives weigh alike) the parameters named in ``params``, from a base preset.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import simpy

from ...checks import InputError, number
from ...network import (
    LinkTable,
    MoERouting,
    TrafficError,
    build_network,
    hierarchical_all_gather,
    hierarchical_reduce_scatter,
    nccl_all_reduce,
    ring_all_reduce,
    route_tokens,
)
from ..model.specs import ModelSpec, RunSpec
from .alltoall import group_latency, measure_all_to_alls
from .collective_shapes import all_to_all_shapes
from .kernels import FITTABLE, MIN_LINK_EFFICIENCY, MIN_SM_GBPS, KernelSpec

MOE_KINDS = ("dispatch", "combine")
NCCL_KINDS = ("all_gather", "reduce_scatter", "all_reduce", "send")
KINDS = MOE_KINDS + NCCL_KINDS
COLUMNS = ("kind", "gpus", "nodes", "tokens", "bytes", "sms", "seconds", "gbps", "source")
BOUNDS = {"launch_us": (0.0, 1e4), "notify_us": (0.0, 1e4), "nccl_launch_us": (0.0, 1e4),
          "sm_GBps": (MIN_SM_GBPS, 1e4), "nvlink_efficiency": (MIN_LINK_EFFICIENCY, 1.0),
          "ib_efficiency": (MIN_LINK_EFFICIENCY, 1.0), "nccl_GBps": (1.0, 1e5), "nccl_copy_GBps": (1.0, 1e5),
          "nccl_reduce_GBps": (1.0, 1e5), "nvls_GBps": (1.0, 1e5), "nvls_latency_us": (0.0, 1e4)}
# Where a fitted parameter is unset (None) in the base preset, the fit starts from: NCCL's engine as
# the preset bounds it, passes at an H100's order of HBM speed, NVLS at NCCL's own latency (GB/s, us).
FIT_START = {"nccl_copy_GBps": 1000.0, "nccl_reduce_GBps": 500.0, "nvls_GBps": 300.0, "nvls_latency_us": 23.0}
DEFAULT_SMS = 20                     # DeepEP's Buffer.num_sms
# What a measured row may say (a value outside is a typo or a unit slip, and one that reaches 0 or
# infinity in the fit's log residuals stops the fit): from a nanosecond to 11 days, from a kilobyte
# per second to a petabyte per second, 1 to 10^9 tokens (the traffic model's limit), 1 to 10^18 bytes.
MIN_SECONDS, MAX_SECONDS = 1e-9, 1e6
MIN_GBPS, MAX_GBPS = 1e-6, 1e6
MAX_TOKENS, MAX_BYTES = 1e9, 1e18


class CalibrationError(InputError):
    """A communication profile or a calibration that cannot be used."""


@dataclass(frozen=True)
class Measurement:
    """One row of a communication profile (``seconds`` resolved from ``gbps`` when given so)."""

    row: int              # the row's number among the CSV's data rows (1 = first)
    kind: str
    gpus: int
    nodes: int
    tokens: float
    nbytes: float
    sms: int
    seconds: float


class Collectives:
    """Simulates the collectives of a profile on ``links`` (a topology's link table) for the
    scenario ``run`` (its model, routing and precisions for dispatch/combine)."""

    def __init__(self, links: LinkTable, run: RunSpec, model: ModelSpec):
        self.links, self.run, self.model = links, run, model
        self.token_bytes = {shape.name: shape.bytes_per_token for shape in all_to_all_shapes(model, run)}
        self.gpus_per_node = int(links.graph.graph.get("gpus_per_node", len(links.gpus)))
        self._traffic: dict[tuple, object] = {}

    def group(self, m: Measurement) -> list[int]:
        """GPU ids: the first ``gpus / nodes`` GPUs of nodes 0 .. nodes-1."""
        return [n * self.gpus_per_node + i for n in range(m.nodes) for i in range(m.gpus // m.nodes)]

    def traffic(self, m: Measurement):
        key = (m.gpus, m.nodes, m.tokens)
        if key not in self._traffic:
            limit = self.run.node_limit
            routing = MoERouting(ep=m.gpus, gpus_per_node=m.gpus // m.nodes, num_experts=self.model.routed_experts,
                                 topk=self.model.topk, tokens_per_gpu=m.tokens,
                                 node_limit=None if limit is None else min(limit, m.nodes))
            self._traffic[key] = route_tokens(routing)
        return self._traffic[key]

    def bottleneck_bytes(self, m: Measurement) -> float:
        """Bytes per GPU behind DeepEP's reported bandwidth (see the module)."""
        t, tb = self.traffic(m), self.token_bytes[m.kind]
        if m.nodes > 1:
            return float(t.node_tokens.sum(axis=1).mean()) * tb
        return float(t.gpu_tokens.sum(axis=0).mean()) * tb

    def seconds(self, m: Measurement, k: KernelSpec) -> float:
        """Simulated seconds of ``m``'s collective with kernels ``k``."""
        links, gpus = k.scale_links(self.links), self.group(m)
        if m.kind in MOE_KINDS:
            ends, _ = measure_all_to_alls(links, [(gpus, self.traffic(m))], self.token_bytes[m.kind],
                                          self.run.a2a_algorithm, m.kind, self.run.a2a_chunks, 0.0,
                                          k.a2a_gpu_rate(m.sms))
            return k.a2a_overhead_s(group_latency(links, gpus)) + ends[0]
        env = simpy.Environment()
        fabric = build_network(env, links, gpu_rate=k.nccl_gpu_rate, nccl_rates=k.nccl_rates)
        g = m.gpus // m.nodes
        protocol = k.ring_protocol(self.run.nccl_protocol)
        if m.kind == "send":
            done = fabric.transfer(gpus[0], gpus[-1], m.nbytes)
        elif m.kind == "all_gather":
            done = hierarchical_all_gather(fabric, gpus, m.nbytes, g, protocol)
        elif m.kind == "reduce_scatter":
            done = hierarchical_reduce_scatter(fabric, gpus, m.nbytes, g, protocol)
        elif m.nodes == 1:                              # all-reduce in a node: NCCL's ring, or NVLS
            done = ring_all_reduce(fabric, gpus, m.nbytes, bulk=True, protocol=protocol)
        else:                                           # all-reduce over nodes: NCCL's tree, or the rings
            done = nccl_all_reduce(fabric, gpus, m.nbytes, g, protocol)
        end = []
        done.callbacks.append(lambda _e: end.append(env.now))
        env.run()
        return k.nccl_launch_s + end[0]


def read_profile(path: str | Path, sim: Collectives) -> list[Measurement]:
    """The rows of a communication profile CSV, checked; ``sim`` resolves ``gbps`` into seconds
    and knows the topology's and model's limits. Every problem is one line naming the row, the
    column, the value and what is allowed."""
    import pandas as pd
    path = Path(path)
    if not path.is_file():
        what = "not a regular file" if path.exists() else "no such file"
        raise CalibrationError(f"communication profile {path}: {what}")
    try:
        df = pd.read_csv(path, comment="#", skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise CalibrationError(f"communication profile {path}: the file is empty; expected a header with "
                               f"{', '.join(COLUMNS[:3])} and seconds or gbps, then one row per collective") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"communication profile {path}: not a readable CSV ({str(exc).strip()})") from None
    df.columns = [str(c).strip() for c in df.columns]
    unknown = [c for c in df.columns if c not in COLUMNS]
    if unknown:
        raise CalibrationError(f"communication profile {path}: unknown column(s) {', '.join(map(repr, unknown))}; "
                               f"allowed: {', '.join(COLUMNS)}")
    missing = [c for c in ("kind", "gpus", "nodes") if c not in df.columns]
    if missing or not ({"seconds", "gbps"} & set(df.columns)):
        need = missing + ([] if {"seconds", "gbps"} & set(df.columns) else ["seconds or gbps"])
        raise CalibrationError(f"communication profile {path}: missing column(s) {', '.join(need)}")
    if df.empty:
        raise CalibrationError(f"communication profile {path}: no rows; give one measured collective per row")
    return [_measurement(path, i + 1, row, sim) for i, row in enumerate(df.to_dict("records"))]


def _value(where: str, row: dict, column: str, integer: bool = False, required: bool = True, low: float = 0.0,
           high: float | None = None):
    """The number in ``column`` of ``row`` (> ``low``, or >= it when ``low`` > 0; <= ``high``), or
    ``None`` when empty and not ``required``."""
    value = row.get(column)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        if required:
            raise CalibrationError(f"{where}: column {column!r} is empty; it needs a number")
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise CalibrationError(f"{where}: {column} must be a number, got {value!r}") from None
    if integer and math.isfinite(x) and x != int(x):
        raise CalibrationError(f"{where}: {column} must be a whole number, got {value!r}")
    x = number(x, f"{where}: {column}", low=low, low_open=low == 0, high=high, error=CalibrationError)
    return int(x) if integer else x


def _measurement(path: Path, row_number: int, row: dict, sim: Collectives) -> Measurement:
    where = f"communication profile {path}, row {row_number}"
    kind = str(row.get("kind", "")).strip()
    if kind not in KINDS:
        raise CalibrationError(f"{where}: kind must be one of {', '.join(KINDS)}, got {row.get('kind')!r}")
    gpus, nodes = _value(where, row, "gpus", integer=True), _value(where, row, "nodes", integer=True)
    if gpus % nodes or gpus < 2:
        raise CalibrationError(f"{where}: gpus ({gpus}) must be at least 2 and a multiple of nodes ({nodes})")
    if gpus // nodes > sim.gpus_per_node or nodes * sim.gpus_per_node > len(sim.links.gpus):
        raise CalibrationError(f"{where}: {gpus} GPUs on {nodes} node(s) do not fit the topology "
                               f"({len(sim.links.gpus)} GPUs, {sim.gpus_per_node} per node)")
    seconds = _value(where, row, "seconds", required=False, low=MIN_SECONDS, high=MAX_SECONDS)
    gbps = _value(where, row, "gbps", required=False, low=MIN_GBPS, high=MAX_GBPS)
    if (seconds is None) == (gbps is None):
        raise CalibrationError(f"{where}: give exactly one of seconds and gbps")
    moe = kind in MOE_KINDS
    tokens = _value(where, row, "tokens", low=1, high=MAX_TOKENS) if moe else 0.0
    nbytes = 0.0 if moe else _value(where, row, "bytes", low=1, high=MAX_BYTES)
    sms = _value(where, row, "sms", integer=True, required=False) if moe else 0
    m = Measurement(row_number, kind, gpus, nodes, tokens, nbytes, DEFAULT_SMS if moe and sms is None else sms, 0.0)
    if moe:
        try:
            sim.traffic(m)
        except TrafficError as exc:
            raise CalibrationError(f"{where}: {exc}") from None
    if seconds is None:
        seconds = (sim.bottleneck_bytes(m) if moe else nbytes) / (gbps * 1e9)
    return Measurement(row_number, kind, gpus, nodes, tokens, nbytes, m.sms, seconds)


def identifiable(rows: list[Measurement]) -> list[str]:
    """The parameters the rows can inform (the default fit): the notify cost and NVLink/IB
    efficiency from dispatch/combine rows (within one node / across nodes), the SM throughput when
    rows ran with different SM counts, NCCL's launch from NCCL rows. ``launch_us`` adds to every
    all-to-all exactly as ``notify_us`` does, so it is fitted only when asked."""
    moe = [m for m in rows if m.kind in MOE_KINDS]
    out = []
    if moe:
        out.append("notify_us")
        if len({m.sms for m in moe}) > 1:
            out.append("sm_GBps")
    if any(m.kind not in MOE_KINDS for m in rows):
        out.append("nccl_launch_us")
    if any(m.nodes == 1 or m.gpus // m.nodes > 1 for m in rows):
        out.append("nvlink_efficiency")
    if any(m.nodes > 1 for m in rows):
        out.append("ib_efficiency")
    return out


@dataclass
class Fit:
    """A calibration's result: the fitted kernels, each row's measured and simulated seconds."""

    kernels: KernelSpec
    rows: list[Measurement]
    simulated: list[float]
    before: list[float]           # the base preset's simulated seconds
    params: tuple = ()            # the parameters this fit fitted (kernels.fitted may name the base's too)

    def frame(self):
        import pandas as pd
        return pd.DataFrame([{"row": m.row, "kind": m.kind, "gpus": m.gpus, "nodes": m.nodes,
                              "measured_ms": m.seconds * 1e3, "simulated_ms": s * 1e3,
                              "error_pct": 100 * (s / m.seconds - 1), "before_pct": 100 * (b / m.seconds - 1)}
                             for m, s, b in zip(self.rows, self.simulated, self.before)])

    @property
    def rms_log_error(self) -> float:
        return float(np.sqrt(np.mean([math.log(s / m.seconds) ** 2 for m, s in zip(self.rows, self.simulated)])))


def fit(rows: list[Measurement], sim: Collectives, base: KernelSpec, params: list[str] | None = None,
        source: str = "") -> Fit:
    """Least squares on log(simulated / measured) over ``params`` (default :func:`identifiable`),
    from ``base``; the returned kernels record ``source`` and the fitted names (and the base's own
    calibration, where it had one, for the names not fitted again)."""
    from scipy.optimize import least_squares
    params = identifiable(rows) if params is None else list(params)
    unknown = [p for p in params if p not in FITTABLE]
    if unknown:
        raise CalibrationError(f"cannot fit {', '.join(map(repr, unknown))}: the parameters are {', '.join(FITTABLE)}")
    if not params:
        raise CalibrationError("nothing to fit: name the parameters (--fit)")
    if len(rows) < len(params):
        raise CalibrationError(f"cannot fit {len(params)} parameters ({', '.join(params)}) to {len(rows)} row(s): "
                               "give at least as many measured collectives as parameters")
    if "sm_GBps" in params and base.sm_GBps is None:
        base = base.with_(sm_GBps=1e3)
    measured = np.array([m.seconds for m in rows])

    def kernels_at(x) -> KernelSpec:
        return base.with_(**{p: float(v) for p, v in zip(params, x)})

    def residuals(x) -> np.ndarray:
        k = kernels_at(x)
        return np.log(np.array([sim.seconds(m, k) for m in rows]) / measured)

    lo = np.array([BOUNDS[p][0] for p in params])
    hi = np.array([BOUNDS[p][1] for p in params])
    x0 = np.clip([_start(base, p) for p in params], lo, hi)
    result = least_squares(residuals, x0, bounds=(lo, hi), diff_step=1e-3, x_scale=np.maximum(np.abs(x0), 1.0),
                           max_nfev=200)
    kept = tuple(p for p in base.fitted if p not in params)     # the base's own calibration, not refitted
    origin = source or None
    if kept and base.calibrated_from:
        origin = f"{source or 'this fit'} + {base.calibrated_from} ({', '.join(kept)})"
    fitted = kernels_at(result.x).with_(calibrated_from=origin, fitted=tuple(params) + kept)
    before = [sim.seconds(m, base) for m in rows]
    return Fit(fitted, rows, [sim.seconds(m, fitted) for m in rows], before, tuple(params))


def _start(base: KernelSpec, param: str) -> float:
    """Where the fit of ``param`` starts: the base preset's value, or where it is unset
    :data:`FIT_START` (``nccl_GBps``: the engine the preset implies, ``nccl_sms x sm_GBps``)."""
    value = getattr(base, param)
    if value is not None:
        return float(value)
    if param == "nccl_GBps":
        rate = base.nccl_gpu_rate
        return rate / 1e9 if rate is not None else BOUNDS[param][1]
    return FIT_START[param]


def write_preset(result: Fit, path: str | Path) -> Path:
    """Write the fitted kernels as a YAML file a scenario can name (``kernels: PATH``)."""
    import yaml

    from ...io import write_text_atomic
    mapping = result.kernels.as_mapping()
    mapping["description"] = (f"calibrated from {result.kernels.calibrated_from} ({len(result.rows)} rows, "
                              f"rms log error {result.rms_log_error:.3f})")
    return write_text_atomic(yaml.safe_dump(mapping, sort_keys=False), path)


__all__ = ["COLUMNS", "CalibrationError", "Collectives", "Fit", "KINDS", "Measurement", "fit",
           "identifiable", "read_profile", "write_preset"]
