"""One place that builds a network from a link table and a backend name (:mod:`sim.network.api`
says what a network is; each backend is a module of its own).

==============  ===========================================================================
``maxmin``      :class:`~sim.network.fabric.Fabric`, flows sharing links max-min fairly
``analytical``  :class:`~sim.network.analytical.AnalyticalNetwork`, no contention
==============  ===========================================================================

A new backend: a module with a class of :class:`~sim.network.api.Network`'s calls, its name in
:data:`NETWORK_BACKENDS` and a branch in :func:`build_network`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import simpy

from ..checks import choice
from .analytical import AnalyticalNetwork
from .api import Network
from .fabric import Fabric
from .links import LinkTable
from .nccl_rates import NcclRates

if TYPE_CHECKING:
    import networkx as nx

NETWORK_BACKENDS = ("maxmin", "analytical")


def build_network(env: simpy.Environment, links: "LinkTable | nx.Graph", backend: str = "maxmin", *,
                  gpu_rate: float | None = None, completion_window: float = 0.0,
                  nccl_rates: NcclRates | None = None) -> Network:
    """A network of ``backend`` (:data:`NETWORK_BACKENDS`) over ``links`` (a link table, or the
    topology's graph, whose table is built): ``gpu_rate`` (bytes/s,
    ``None``: no limit) bounds what each GPU's communication kernels move per direction;
    ``completion_window`` batches the max-min backend's flow ends (:class:`~sim.network.Fabric`;
    the analytical backend has nothing to batch); ``nccl_rates``: what NCCL collectives are charged
    beyond NCCL's model (:mod:`sim.network.nccl_rates`)."""
    choice(backend, "network backend", NETWORK_BACKENDS)
    if backend == "analytical":
        return AnalyticalNetwork(env, links, gpu_rate=gpu_rate, nccl_rates=nccl_rates)
    return Fabric(env, links, completion_window=completion_window, gpu_rate=gpu_rate, nccl_rates=nccl_rates)


__all__ = ["NETWORK_BACKENDS", "build_network"]
