"""A cluster that runs jobs: one SimPy environment, one network over the topology's links, and the
GPUs given to each job.

A :class:`Cluster` owns the clock (``env``), the network (one backend by name,
:func:`~sim.network.build_network`, over a link table it is given: it imports no scenario) and
the allocation of whole nodes to jobs. A job is anything with a ``name``, the number of GPUs it
needs (``gpus_needed``) and ``start(cluster, allocation)``, which starts its processes on the
cluster's clock and returns the call that gives its result once the clock has run
(:class:`Job`; the training step's job is :class:`sim.jobs.StepJob`). Each job sees the network
through a :class:`~sim.network.NetworkView` that numbers its GPUs 0, 1, ... in the order it was
given them, so several jobs' traffic meets on the same links.

Placement (whole nodes, so that a job's node-local GPUs stay together, as its NVLink groups and
hierarchical all-to-alls assume):

===============  ==================================================================================
``packed``       the lowest-numbered free nodes, in order (a job's nodes side by side: on a fat tree,
                 under the fewest leaf switches)
``interleaved``  free nodes spread evenly over the free ones (the i-th of k at ``floor(i x free / k)``):
                 with two equal jobs, one gets the even nodes and the other the odd ones
explicit list    the job's GPUs by number: whole nodes, each node's GPUs together and in order
===============  ==================================================================================

``fragmentation`` says, per job, how many runs of consecutive nodes it holds (1: contiguous).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import simpy

from .checks import InputError, choice
from .network import LinkTable, NcclRates, Network, NetworkView, build_network

PLACEMENTS = ("packed", "interleaved")


@dataclass(frozen=True)
class Allocation:
    """The GPUs (the cluster's numbers, in the job's order) and nodes given to job ``name``."""

    name: str
    gpus: tuple[int, ...]
    nodes: tuple[int, ...]

    @property
    def runs(self) -> int:
        """Runs of consecutive node numbers the job holds (1: one contiguous block)."""
        return 1 + sum(1 for a, b in zip(self.nodes, self.nodes[1:]) if b != a + 1)

    def label(self) -> str:
        """``nodes 0-127`` or ``nodes 0, 2, ..., 254 (128 nodes in 128 runs)``."""
        n = self.nodes
        if self.runs == 1:
            return f"nodes {n[0]}-{n[-1]}" if len(n) > 1 else f"node {n[0]}"
        shown = ", ".join(map(str, n[:2])) + (f", ..., {n[-1]}" if len(n) > 3 else
                                               "".join(f", {x}" for x in n[2:]))
        return f"nodes {shown} ({len(n)} nodes in {self.runs} runs)"


class Job(Protocol):
    """What a cluster runs (see the module)."""

    name: str

    @property
    def gpus_needed(self) -> int: ...

    def start(self, cluster: "Cluster", allocation: Allocation) -> Callable[[], object]: ...


class Cluster:
    """``links`` (a link table: its GPUs, ``gpus_per_node`` to a node) with one ``backend`` network
    on a fresh clock; ``gpu_rate`` (bytes/s, ``None``: no limit) bounds what each GPU's
    communication kernels move per direction; ``nccl_rates`` what its NCCL collectives are charged
    beyond NCCL's model (:mod:`sim.network.nccl_rates`)."""

    def __init__(self, links: LinkTable, gpus_per_node: int, backend: str = "maxmin",
                 gpu_rate: float | None = None, nccl_rates: NcclRates | None = None):
        n = len(links.gpus)
        if gpus_per_node < 1 or n % gpus_per_node:
            raise InputError(f"a cluster of {n} GPUs cannot be split into nodes of {gpus_per_node}")
        self.env = simpy.Environment()
        self.links = links
        self.network: Network = build_network(self.env, links, backend, gpu_rate=gpu_rate, nccl_rates=nccl_rates)
        self.backend = backend
        self.gpus_per_node = gpus_per_node
        self.num_nodes = n // gpus_per_node
        self._owner: list[str | None] = [None] * self.num_nodes
        self.allocations: dict[str, Allocation] = {}

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def free_nodes(self) -> list[int]:
        return [node for node, owner in enumerate(self._owner) if owner is None]

    def allocate(self, name: str, gpus: int | list[int], placement: str = "packed") -> Allocation:
        """Give job ``name`` whole nodes: ``gpus`` GPUs placed by ``placement`` (:data:`PLACEMENTS`),
        or the explicit list ``gpus`` (see the module). Refused in one line: a name used twice, more
        GPUs than are free, a count that is not whole nodes, a GPU another job holds."""
        if name in self.allocations:
            raise InputError(f"job name {name!r} is used twice; give each job its own name")
        gpn = self.gpus_per_node
        if isinstance(gpus, int):
            choice(placement, "placement", PLACEMENTS)
            nodes = self._place(name, gpus, placement)
            ids = [node * gpn + i for node in nodes for i in range(gpn)]
        else:
            ids = list(gpus)
            nodes = self._explicit(name, ids)
        for node in nodes:
            self._owner[node] = name
        allocation = Allocation(name, tuple(ids), tuple(nodes))
        self.allocations[name] = allocation
        return allocation

    def _place(self, name: str, gpus: int, placement: str) -> list[int]:
        gpn, free = self.gpus_per_node, self.free_nodes
        if gpus < 1 or gpus % gpn:
            raise InputError(f"job {name!r}: {gpus} GPUs is not a whole number of nodes of {gpn} GPUs")
        need = gpus // gpn
        if need > len(free):
            raise InputError(f"job {name!r} needs {gpus:,} GPUs ({need:,} nodes); the cluster has "
                             f"{len(free) * gpn:,} free of {self.num_gpus:,}")
        if placement == "packed":
            return free[:need]
        return [free[i * len(free) // need] for i in range(need)]

    def _explicit(self, name: str, ids: list[int]) -> list[int]:
        gpn = self.gpus_per_node
        bad = [g for g in ids if not 0 <= g < self.num_gpus]
        if bad:
            raise InputError(f"job {name!r}: GPU {bad[0]} is not in this cluster's 0..{self.num_gpus - 1}")
        if len(set(ids)) != len(ids):
            raise InputError(f"job {name!r}: its GPU list names a GPU twice")
        nodes = [ids[i] // gpn for i in range(0, len(ids), gpn)]
        whole = len(ids) % gpn == 0 and all(ids[k * gpn:(k + 1) * gpn] == list(range(node * gpn, (node + 1) * gpn))
                                            for k, node in enumerate(nodes))
        if not ids or not whole:
            raise InputError(f"job {name!r}: a GPU list must be whole nodes of {gpn} GPUs, each node's GPUs "
                             "together and in order (e.g. 8-15,0-7)")
        taken = [node for node in nodes if self._owner[node] is not None]
        if taken:
            raise InputError(f"job {name!r}: node {taken[0]} (GPUs {taken[0] * gpn}-{taken[0] * gpn + gpn - 1}) "
                             f"already belongs to job {self._owner[taken[0]]!r}")
        return nodes

    def view(self, allocation: Allocation) -> NetworkView:
        """The network as the job of ``allocation`` sees it (its GPUs numbered 0, 1, ...)."""
        return NetworkView(self.network, list(allocation.gpus))

    def run(self) -> None:
        """Run the clock until every job's processes have ended."""
        self.env.run()


__all__ = ["Allocation", "Cluster", "Job", "PLACEMENTS"]
