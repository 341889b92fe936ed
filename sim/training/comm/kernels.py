"""Communication kernels as they behave: launch costs, DeepEP's notify phase, SM-bounded throughput
and link efficiencies, as a :class:`KernelSpec` (presets in ``sim/training/presets/kernels.yaml``, or a
YAML file such as one written by ``python -m sim calibrate``).

A MoE all-to-all (dispatch or combine) runs as DeepEP's normal kernels do
(github.com/deepseek-ai/DeepEP, ``csrc/kernels/internode.cu``): each GPU launches the kernel
(``launch_us``); a notify phase exchanges the per-GPU token counts within the EP group, a small
all-to-all and a barrier (``notify_us`` plus ``notify_round_trips`` crossings of the group's longest
route); then the
data phase moves the tokens. Its throughput is bounded by the links (the fabric's max-min sharing)
and by the SMs the kernel holds: a GPU's kernel moves at most ``comm_sms x sm_GBps`` GB/s in each
direction (a forwarding GPU's forwards count for it). So an all-to-all of EP group G lasts

    launch + notify + notify_round_trips x max route latency in G
    + max(data phase on the fabric, max over GPUs of G of bytes sent or received / (comm_sms x sm_GBps)),

and the GPU waits for the slowest member at the barrier (:mod:`sim.training.costs.streams`, rule 3). Giving
communication fewer SMs slows it down and leaves more for compute (``SMs / (SMs - comm_sms)``):
the trade-off DeepSeek tuned to 20 SMs.

Pipeline sends and the data-parallel collectives are NCCL-like kernels: each pays
``nccl_launch_us`` before its first byte, and a GPU's NCCL kernels move at most
``nccl_sms x sm_GBps`` GB/s per direction (the step fabric's per-GPU engines, which its
concurrent NCCL flows share max-min fairly). ``nvlink_efficiency`` and ``ib_efficiency`` scale the
topology's NVLink and scale-out (IB and the GPU-NIC PCIe hop) bandwidths: the fraction of the
nominal rate a collective achieves (1: the preset's figures, already effective ones). The NCCL
ring collectives also pay NCCL's own latency and protocol (``nccl_latency``, :mod:`sim.network.nccl`;
the run's ``nccl_protocol`` picks the protocol), and what a measured table shows beyond NCCL's model
(:mod:`sim.network.nccl_rates`): ``nccl_GBps``, a GPU's NCCL engine instead of ``nccl_sms x
sm_GBps``; ``nccl_copy_GBps`` and ``nccl_reduce_GBps``, each GPU's pass over its own slice of an
all-gather and a reduce-scatter (an all-reduce pays both); ``nvls_GBps`` and ``nvls_latency_us``,
NVLS's own rate and latency. ``None`` leaves each out.

Sources of the defaults (``deepep``): the DeepSeek-V3 report (arXiv 2412.19437, section 3.2.2)
says 20 SMs suffice to use the full IB and NVLink bandwidths (a forwarding GPU drives both at
once), so ``sm_GBps`` = (160 GB/s NVLink + 50 GB/s IB of an H800) / 20 SMs = 10.5 GB/s, the least
that makes the claim true; DeepEP's ``Buffer.num_sms`` defaults to 20. ``launch_us``, ``notify_us``, ``nccl_launch_us`` and ``nccl_sms`` are our
assumptions (a few microseconds is the usual CUDA launch cost; NCCL runs one channel per SM and
uses up to 32 on H100), stated as such in docs/model.md; ``python -m sim calibrate`` fits them to a
user's measurements (:mod:`sim.training.comm.calibrate`). The ``deepep`` preset's NCCL rates are
fitted so to XLA's measured collectives on one 8-GPU H100 node (``experiments/profiles/xla-nccl-h100.csv``,
a declared calibration table; the preset says which fields), and stand for every GPU (an
assumption beyond H100: the topology's links still bound each GPU).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Optional

from ...checks import InputError, number, read_yaml
from ...network import LinkTable, NcclRates
from ...network.nccl import ring_protocol
from ...network.nccl_rates import MAX_GBPS, MAX_LATENCY_US
from ..model.specs import SpecError, load_presets

FITTABLE = ("launch_us", "notify_us", "sm_GBps", "nccl_launch_us", "nvlink_efficiency", "ib_efficiency",
            "nccl_GBps", "nccl_copy_GBps", "nccl_reduce_GBps", "nvls_GBps", "nvls_latency_us")
NCCL_RATE_FIELDS = ("nccl_GBps", "nccl_copy_GBps", "nccl_reduce_GBps", "nvls_GBps")   # GB/s, or None
MIN_SM_GBPS = 0.1                    # GB/s per SM: the lowest a kernel spec (or a calibration) may give
MIN_LINK_EFFICIENCY = 0.01           # x a link's bandwidth: the same
SCALEOUT_KINDS = ("ib", "pcie")      # link kinds that ib_efficiency scales (the GPU-NIC hop and the IB fabric)


@dataclass(frozen=True)
class KernelSpec:
    """The communication kernels of a run. Units: microseconds, GB/s (1e9 bytes/s), SMs, fractions."""

    name: str
    launch_us: float = 4.0            # our assumption: a kernel launch
    notify_us: float = 10.0           # our assumption: DeepEP's notify phase, besides its round trip
    notify_round_trips: int = 2       # our assumption: the count exchange and the barrier
    sm_GBps: Optional[float] = 10.5   # per SM and direction: DeepSeek-V3 report, 20 SMs fill NVLink + IB; None: no bound
    nccl_launch_us: float = 4.0       # our assumption
    nccl_sms: int = 24                # our assumption: SMs (channels) of an NCCL kernel
    nvlink_efficiency: float = 1.0    # x the topology's NVLink bandwidth
    ib_efficiency: float = 1.0        # x the topology's IB and GPU-NIC bandwidth
    nccl_latency: bool = True         # NCCL's latency and protocols on the ring collectives (sim.network.nccl)
    # NCCL's collectives beyond NCCL's own model, calibrated on a measured table (None: not charged;
    # nccl_GBps None: nccl_sms x sm_GBps): sim.network.nccl_rates
    nccl_GBps: Optional[float] = None         # a GPU's NCCL engine, per direction
    nccl_copy_GBps: Optional[float] = None    # an all-gather's pass over each GPU's own slice
    nccl_reduce_GBps: Optional[float] = None  # a reduce-scatter's (an all-reduce pays both)
    nvls_GBps: Optional[float] = None         # an NVLS all-reduce's port bytes per second
    nvls_latency_us: Optional[float] = None   # NVLS's latency as charged (None: NCCL's 23 us)
    calibrated_from: Optional[str] = None   # the profile CSV a calibration fitted (None: defaults)
    fitted: tuple = ()                # the parameters that calibration fitted
    description: str = ""

    def __post_init__(self):
        try:
            for name in ("launch_us", "notify_us", "nccl_launch_us"):
                number(getattr(self, name), f"KernelSpec.{name}", low=0, high=1e6)
            if self.sm_GBps is not None:
                number(self.sm_GBps, "KernelSpec.sm_GBps", low=MIN_SM_GBPS, high=1e6)
            number(self.nccl_sms, "KernelSpec.nccl_sms", integer=True, low=1, high=100_000)
            number(self.notify_round_trips, "KernelSpec.notify_round_trips", integer=True, low=0, high=100)
            for name in ("nvlink_efficiency", "ib_efficiency"):
                number(getattr(self, name), f"KernelSpec.{name}", low=MIN_LINK_EFFICIENCY, high=1)
            for name in NCCL_RATE_FIELDS:
                if getattr(self, name) is not None:
                    number(getattr(self, name), f"KernelSpec.{name} (GB/s)", low=MIN_SM_GBPS, high=MAX_GBPS)
            if self.nvls_latency_us is not None:
                number(self.nvls_latency_us, "KernelSpec.nvls_latency_us", low=0, high=MAX_LATENCY_US)
        except InputError as exc:
            raise SpecError(f"kernels {self.name!r}: {exc}") from None
        if not isinstance(self.nccl_latency, bool):
            raise SpecError(f"kernels {self.name!r}: nccl_latency must be true or false, got {self.nccl_latency!r}")
        if self.calibrated_from is not None and not isinstance(self.calibrated_from, str):
            raise SpecError(f"kernels {self.name!r}: calibrated_from must be a file name, got {self.calibrated_from!r}")
        fitted = tuple(self.fitted or ())
        unknown = [p for p in fitted if p not in FITTABLE]
        if unknown:
            raise SpecError(f"kernels {self.name!r}: fitted names unknown parameter(s) {', '.join(map(repr, unknown))}; "
                            f"allowed: {', '.join(FITTABLE)}")
        object.__setattr__(self, "fitted", fitted)

    # -- what the model uses ------------------------------------------------------------------
    def a2a_overhead_s(self, route_latency_s: float) -> float:
        """Seconds of an all-to-all before its data phase: launch, notify and the count exchange's
        crossings of the group's longest route (``route_latency_s``, one way)."""
        return (self.launch_us + self.notify_us) * 1e-6 + self.notify_round_trips * route_latency_s

    def a2a_gpu_rate(self, comm_sms: int) -> float | None:
        """Bytes/s a GPU's all-to-all kernel moves per direction with ``comm_sms`` SMs (``None``:
        not bounded, for 0 SMs, a kernel that holds none, or ``sm_GBps: null``)."""
        return comm_sms * self.sm_GBps * 1e9 if comm_sms and self.sm_GBps is not None else None

    @property
    def nccl_gpu_rate(self) -> float | None:
        """Bytes/s a GPU's NCCL kernels move per direction: ``nccl_GBps`` where set, else
        ``nccl_sms x sm_GBps`` (``None``: not bounded)."""
        if self.nccl_GBps is not None:
            return self.nccl_GBps * 1e9
        return self.nccl_sms * self.sm_GBps * 1e9 if self.sm_GBps is not None else None

    @property
    def nccl_rates(self) -> NcclRates | None:
        """What the NCCL collectives are charged beyond NCCL's model (:mod:`sim.network.nccl_rates`);
        ``None`` where nothing is set."""
        rates = NcclRates(self.nccl_copy_GBps, self.nccl_reduce_GBps, self.nvls_GBps, self.nvls_latency_us)
        return rates if rates.active else None

    def ring_protocol(self, choice: str) -> str | None:
        """What the ring collectives take for a run's ``nccl_protocol`` ``choice``
        (:func:`sim.network.nccl.ring_protocol`); ``None`` (the fabric alone) without ``nccl_latency``."""
        protocol = ring_protocol(choice)
        return protocol if self.nccl_latency else None

    @property
    def nccl_launch_s(self) -> float:
        return self.nccl_launch_us * 1e-6

    def scale_links(self, links: LinkTable) -> LinkTable:
        """``links`` with NVLink and scale-out bandwidths scaled by the efficiencies (the same
        table when both are 1; routes are shared, they do not depend on bandwidth)."""
        factors = {"nvlink": self.nvlink_efficiency, **{k: self.ib_efficiency for k in SCALEOUT_KINDS}}
        return links.scaled(factors) if any(f != 1 for f in factors.values()) else links

    def provenance(self) -> str:
        """One line: where the kernel parameters come from."""
        if self.calibrated_from:
            rest = [p for p in FITTABLE if p not in self.fitted]
            return (f"kernels {self.name}: calibrated from {self.calibrated_from} ({', '.join(self.fitted)}); "
                    f"defaults: {', '.join(rest) or 'none'}")
        return f"kernels {self.name}: first-principles defaults (none calibrated)"

    def as_mapping(self) -> dict:
        """The fields as a YAML-ready mapping (without the name)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "name"}
        out["fitted"] = list(self.fitted)
        return out

    def with_(self, **changes) -> "KernelSpec":
        return dataclasses.replace(self, **changes)


def load_kernels(name_or_path: str) -> KernelSpec:
    """A kernel preset by name (``sim/training/presets/kernels.yaml``) or a YAML file of KernelSpec fields."""
    presets = load_presets("kernels")
    path = Path(str(name_or_path))
    if name_or_path in presets:
        mapping, name = presets[name_or_path], name_or_path
    elif path.suffix in (".yaml", ".yml") and path.is_file():
        mapping = read_yaml(path, SpecError) or {}
        if not isinstance(mapping, dict):
            raise SpecError(f"{path}: expected a mapping of kernel fields, got {type(mapping).__name__}")
        name = str(path)
    else:
        raise SpecError(f"RunSpec.kernels: unknown kernels {name_or_path!r}: not a preset "
                        f"({', '.join(sorted(presets))}) and not an existing .yaml file")
    allowed = {f.name for f in fields(KernelSpec)} - {"name"}
    unknown = set(mapping) - allowed
    if unknown:
        raise SpecError(f"kernels {name!r}: unknown field(s) {', '.join(repr(k) for k in sorted(unknown, key=str))}; "
                        f"allowed: {', '.join(sorted(allowed))}")
    return KernelSpec(name=name, **mapping)


__all__ = ["FITTABLE", "KernelSpec", "load_kernels"]
