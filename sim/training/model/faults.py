"""Stragglers and faults: slow GPUs, kernel-time jitter, degraded and failed links.

A :class:`FaultSpec` (``RunSpec.faults``: a mapping in a scenario YAML, or the ``run`` command's
``--slow-gpu``, ``--slow-fraction``, ``--jitter``, ``--degrade-link``, ``--fail-link``) says

* ``slow_gpus``: ``{GPU: factor}``, each listed GPU's compute parts last ``factor`` (>= 1)
  times longer (a throttled clock); ``slow_fraction`` of the other GPUs, drawn with ``seed``, are
  slowed by ``slow_factor``. A GPU is a global index, or its place in the layout in Megatron's
  names, ``pp<R>.dp<D>`` (pipeline rank R of data-parallel replica D; ``.tp<T>`` and ``.cp<C>``
  after it pick one GPU of that rank's TP x CP group, else its first). A TP x CP group computes at
  the pace of its slowest GPU (its collectives wait for it), so any slow member slows the group;
* ``jitter_cv``: every compute part on every GPU lasts ``x`` times its time, ``x`` drawn per part,
  GPU and op from a log-normal distribution of mean 1 and coefficient of variation ``jitter_cv``
  (``sigma^2 = ln(1 + cv^2)``, ``mu = -sigma^2 / 2``), from ``seed``: the same seed, the same step;
  0 gives the fault-free step exactly; under jitter pipeline sends start on a grid of
  ``send_grid_s`` (default :data:`SEND_GRID_S`, 1 ms, or a send's own time alone where that is
  shorter; 0: each at its own instant), each landing for its receiver as if it had left when
  due;
* ``links``: ``[(selector, factor)]``; the selected links keep ``factor`` of their bandwidth
  (:data:`MIN_LINK_FACTOR` <= factor <= 1: at most 1000x slower, as a slow GPU) or fail (factor 0):
  failed links are removed and routes avoid them where a path remains.

Link selectors name topology nodes (``n3/gpu0``, ``n3/nic0``, ``p0/leaf1``, ``p0/spine4``):
``A--B`` the link between two nodes; ``node:NAME`` every link of a node (a NIC, a switch);
``nics:N`` every link of node N's NICs; ``uplinks:LEAF`` a leaf's links to its spines;
``plane:P`` every link of plane P's switches. A selector that matches nothing, a factor out of
range, a GPU that does not exist, or a failure that cuts a GPU off from the others is one line
naming it.

Any fault makes the step simulate every rank (``mode: auto``): a slow GPU or a failed NIC breaks
the symmetry that lets one pipeline stand for all.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...checks import InputError, number

if TYPE_CHECKING:                        # networkx is imported where a graph is changed: not at start-up
    import networkx as nx


class FaultError(InputError):
    """A fault that names something that does not exist, or one the cluster cannot run with."""


# Under jitter every replica ends each op at its own time, and a pipeline send per replica per
# instant costs the fabric a rate recomputation or two (hundreds of thousands in a DeepSeek-V3
# step). Jittered runs start pipeline sends on a grid (rounding up), so sends due close together
# share recomputations, and each send lands for its receiver as much before its last byte as it
# waited for the grid (sim.training.runner.GroupRunner._grid), so that a send whose rate does not change
# lands when it would have without the grid. The grid is no coarser than a send takes alone. The
# 1 ms default keeps the DeepSeek-V3 step within about 2 ms of exact send times, a fifth of the
# spread between seeds (docs/model.md: Stragglers and faults, cost of simulating).
SEND_GRID_S = 1e-3
MAX_SEND_GRID_S = 1e-2
MIN_LINK_FACTOR = 1e-3   # a degraded link keeps at least this share of its bandwidth (0: failed)
GPU_PLACE = re.compile(r"pp(\d+)\.dp(\d+)(?:\.tp(\d+))?(?:\.cp(\d+))?")
GPU_FORMS = "a global GPU index or pp<rank>.dp<replica>[.tp<i>][.cp<i>] (e.g. pp3.dp5)"


def slow_gpu_key(value):
    """A ``slow_gpus`` key as given: a GPU index (an ``int``; digits in text too) or a layout place
    ``pp<R>.dp<D>[.tp<T>][.cp<C>]`` (text), or a :class:`FaultError` naming the forms allowed."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, str):
        if GPU_PLACE.fullmatch(value.strip()):
            return value.strip()
        raise FaultError(f"faults.slow_gpus GPU must be {GPU_FORMS}, got {value!r}")
    return number(value, "faults.slow_gpus GPU index", integer=True, low=0, high=10_000_000, error=FaultError)


@dataclass(frozen=True)
class FaultSpec:
    slow_gpus: tuple = ()              # ((GPU index, factor >= 1), ...)
    slow_fraction: float = 0.0         # of the other GPUs, drawn with seed
    slow_factor: float = 1.0
    jitter_cv: float = 0.0             # coefficient of variation of each compute part's time
    links: tuple = ()                  # ((selector, factor in [0, 1]), ...); 0 = failed
    seed: int = 0
    send_grid_s: float = SEND_GRID_S   # under jitter, pipeline sends start on this grid (0: exact)

    def __post_init__(self):
        slow = _pairs(self.slow_gpus, f"faults.slow_gpus must map GPUs ({GPU_FORMS}) to factors >= 1")
        pairs = tuple((slow_gpu_key(g), number(f, f"faults.slow_gpus factor of GPU {g}", low=1, high=1000,
                                               error=FaultError))
                      for g, f in slow)
        object.__setattr__(self, "slow_gpus", pairs)
        number(self.slow_fraction, "faults.slow_fraction", low=0, high=1, error=FaultError)
        number(self.slow_factor, "faults.slow_factor", low=1, high=1000, error=FaultError)
        number(self.jitter_cv, "faults.jitter_cv (coefficient of variation)", low=0, high=10, error=FaultError)
        number(self.seed, "faults.seed", integer=True, low=0, high=2 ** 63 - 1, error=FaultError)
        number(self.send_grid_s, "faults.send_grid_s (seconds)", low=0, high=MAX_SEND_GRID_S, error=FaultError)
        links = _pairs(self.links, "faults.links must map link selectors to factors in [0, 1]")
        checked = tuple((str(sel), number(f, f"faults.links factor of {sel!r}", low=0, high=1, error=FaultError))
                        for sel, f in links)
        for sel, f in checked:
            if 0 < f < MIN_LINK_FACTOR:
                raise FaultError(f"faults.links factor of {sel!r} must be 0 (failed) or in [{MIN_LINK_FACTOR:g}, 1] "
                                 f"(at most {1 / MIN_LINK_FACTOR:g}x slower, as a slow GPU), got {f!r}")
        object.__setattr__(self, "links", checked)

    @classmethod
    def of(cls, value) -> "FaultSpec | None":
        """A FaultSpec from a mapping (a scenario's ``faults:``), or ``None`` for none."""
        if value is None or isinstance(value, FaultSpec):
            return value
        if not isinstance(value, dict):
            raise FaultError(f"faults must be a mapping of slow_gpus, slow_fraction, slow_factor, jitter_cv, links, "
                             f"seed, send_grid_s; got {value!r}")
        allowed = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(value) - allowed, key=str)
        if unknown:
            raise FaultError(f"faults: unknown field(s) {', '.join(map(repr, unknown))}; allowed: "
                             f"{', '.join(sorted(allowed))}")
        return cls(**value)

    @property
    def sends_on_grid_s(self) -> float:
        """The grid pipeline sends start on: ``send_grid_s`` under jitter (at most: the runner takes
        a send's own time alone where that is shorter), else 0 (exact times: without jitter a
        boundary's sends leave at few distinct instants)."""
        return self.send_grid_s if self.jitter_cv else 0.0

    @property
    def any(self) -> bool:
        return bool(self.slow_gpus or (self.slow_fraction and self.slow_factor > 1) or self.jitter_cv or self.links)

    def describe(self) -> str:
        parts = [f"GPU {g} {f:g}x slower" for g, f in self.slow_gpus]
        if self.slow_fraction and self.slow_factor > 1:
            parts.append(f"{self.slow_fraction:.1%} of GPUs {self.slow_factor:g}x slower")
        if self.jitter_cv:
            grid = ("" if self.send_grid_s == SEND_GRID_S else ", sends at their own instants" if not self.send_grid_s
                    else f", sends on a {self.send_grid_s * 1e6:g} us grid")
            parts.append(f"kernel jitter cv {self.jitter_cv:g}{grid}")
        parts += [f"{sel} {'failed' if f == 0 else f'at {f:g}x bandwidth'}" for sel, f in self.links]
        return ", ".join(parts) + (f" (seed {self.seed})" if self.slow_fraction or self.jitter_cv else "")

    # -- GPUs -------------------------------------------------------------------------------------
    def compute_factors(self, n_gpus: int, layout=None) -> np.ndarray:
        """Each GPU's compute slowdown (1 = healthy); ``layout`` (a :class:`~sim.training.model.layout.Layout`)
        places the ``pp<R>.dp<D>`` GPUs."""
        out = np.ones(n_gpus)
        listed = set()
        for key, f in self.slow_gpus:
            g = key if isinstance(key, int) else _placed_gpu(key, layout)
            if g >= n_gpus:
                raise FaultError(f"faults.slow_gpus: GPU {g} does not exist; this run has GPUs 0..{n_gpus - 1}")
            out[g] = f
            listed.add(g)
        if self.slow_fraction and self.slow_factor > 1:
            others = np.array([g for g in range(n_gpus) if g not in listed])
            k = int(round(self.slow_fraction * n_gpus))
            chosen = np.random.default_rng([self.seed, 1]).choice(others, size=min(k, others.size), replace=False)
            out[chosen] = self.slow_factor
        return out

    def jitter(self, stage: int, seq: int, replicas: np.ndarray, parts: int, step: int = 0) -> np.ndarray | None:
        """[part, replica] factors of the compute parts of op ``seq`` on pipeline rank ``stage``
        for the data-parallel ``replicas`` (a lockstep group of them: one stream of draws per
        group, op and rank, from ``seed``); ``step``: which of a job's steps (0, the first, draws
        as a one-step run does; each later step draws anew)."""
        if not self.jitter_cv:
            return None
        from ...rng import lognormal_from_seed  # numba: not at the CLI's start-up
        sigma2 = math.log1p(self.jitter_cv ** 2)
        key = [self.seed, 2, stage, seq, int(replicas[0])] + ([step] if step else [])
        return lognormal_from_seed(key, -sigma2 / 2, math.sqrt(sigma2),
                                   (parts, len(replicas)))       # default_rng(those).lognormal(...), compiled

    # -- links ------------------------------------------------------------------------------------
    def apply_to(self, graph: nx.Graph) -> nx.Graph:
        """A copy of ``graph`` with the link faults applied; refuses a failure that disconnects a GPU."""
        if not self.links:
            return graph
        g = graph.copy()
        failed = []
        for selector, factor in self.links:
            edges = select_links(graph, selector)
            for u, v in edges:
                if factor == 0:
                    if g.has_edge(u, v):
                        g.remove_edge(u, v)
                        failed.append(selector)
                else:
                    g.edges[u, v]["bandwidth"] = graph.edges[u, v]["bandwidth"] * factor
        gpus = graph.graph["gpus"]
        import networkx as nx
        home = nx.node_connected_component(g, gpus[0])
        cut = [x for x in gpus if x not in home]
        if cut:
            lost = cut if len(cut) <= 4 else cut[:4] + [f"and {len(cut) - 4} more"]
            raise FaultError(f"faults.links: failing {', '.join(dict.fromkeys(failed))} cuts GPU(s) {', '.join(lost)} "
                             f"off from the others (no route is left)")
        g.graph["name"] = f"{graph.graph.get('name', 'topology')}+faults"
        g.graph["faults"] = self.links
        return g


def _placed_gpu(key: str, layout) -> int:
    """The global index of the GPU at layout place ``key`` (``pp3.dp5.tp1``)."""
    from .layout import Coordinates
    if layout is None:
        raise FaultError(f"faults.slow_gpus: GPU {key!r} is a place in a layout; give a global GPU index here")
    pp, dp, tp, cp = (int(x) if x is not None else 0 for x in GPU_PLACE.fullmatch(key).groups())
    for name, value, size in (("pp", pp, layout.pp), ("dp", dp, layout.dp), ("tp", tp, layout.tp),
                              ("cp", cp, layout.cp)):
        if value >= size:
            raise FaultError(f"faults.slow_gpus: GPU {key!r}: {name} {value} does not exist; this layout has "
                             f"{name} 0..{size - 1}")
    return layout.gpu_at(Coordinates(tp, cp, dp, pp))


def _pairs(value, message: str) -> list[tuple]:
    """``value`` (a mapping or a sequence of pairs) as a list of pairs, or one line saying what is wrong."""
    items = list(value.items()) if isinstance(value, dict) else value
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        raise FaultError(f"{message}, got {value!r}")
    items = list(items)
    if not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in items):
        raise FaultError(f"{message}, got {value!r}")
    return items


def select_links(graph: nx.Graph, selector: str) -> list[tuple]:
    """The undirected edges a selector names (see the module)."""
    sel = selector.strip()
    nodes = graph.nodes
    if "--" in sel:
        a, b = (s.strip() for s in sel.split("--", 1))
        if not graph.has_edge(a, b):
            raise FaultError(f"faults.links: no link {a}--{b} in topology {graph.graph.get('name')!r}"
                             + ("" if a in nodes and b in nodes else f" ({a if a not in nodes else b!r} is not a node)"))
        return [(a, b)]
    kind, _, name = sel.partition(":")
    if kind == "node":
        if name not in nodes:
            raise FaultError(f"faults.links: node {name!r} does not exist (e.g. n0/nic0, p0/leaf0, p0/spine0)")
        edges = list(graph.edges(name))
    elif kind == "nics":
        prefix = f"n{name}/nic"
        edges = [e for n in nodes if str(n).startswith(prefix) for e in graph.edges(n)]
    elif kind == "uplinks":
        if name not in nodes or "leaf" not in str(name):
            raise FaultError(f"faults.links: uplinks needs a leaf switch (e.g. p0/leaf0), got {name!r}")
        edges = [(name, v) for v in graph.neighbors(name) if "spine" in str(v)]
    elif kind == "plane":
        prefix = f"p{name}/"
        edges = [e for n in nodes if str(n).startswith(prefix) for e in graph.edges(n)]
    else:
        raise FaultError(f"faults.links: unknown selector {selector!r}; use A--B, node:NAME, nics:N, uplinks:LEAF "
                         "or plane:P")
    edges = list(dict.fromkeys(tuple(sorted(map(str, e))) for e in edges))
    if not edges:
        raise FaultError(f"faults.links: selector {selector!r} matches no link in topology {graph.graph.get('name')!r}")
    return edges


__all__ = ["FaultError", "FaultSpec", "select_links"]
