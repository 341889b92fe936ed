"""Live communication: every all-to-all of a step as flows on the fabric, among the other traffic.

In the measured mode (the fast path, :class:`~sim.training.comm.alltoall.CommModel`) an all-to-all takes the time
measured once for its shape with its stage's other EP groups, whatever else is on the network at
that moment. In the live mode (``RunSpec.communication: live``) each dispatch and combine is
started on the step's fabric when its last GPU launches it, as a bundle
(:meth:`~sim.network.Fabric.transfer_bundle`): one flow per all-to-all whose weight on each link is
the number of its messages there (:mod:`sim.network.loads`), no faster than the all-to-all takes
alone on an empty fabric (measured with the chunked IB-then-NVLink forwarding of the hierarchical
algorithm, :func:`~sim.network.all_to_all`). It shares links max-min fairly with whatever is in
flight: other stages' and EP groups' all-to-alls, pipeline sends, the data-parallel
synchronisation. Alone it takes its measured time; beside other traffic it slows down by its
bottleneck link's share.

Representative mode simulates pipeline 0 only, so its all-to-all stands for every EP group of its
stage: the bundle carries the messages of all of them (balanced routing: the groups run the same
collective at the same moment), no faster than they take together on an empty fabric (the
measured mode's time for the stage); each of its pipeline sends
is sent by every replica (``dp`` flows), and the input has arrived when those of replica 0's EP
group have (they meet at its next all-to-all). The data-parallel synchronisation is simulated
whole in both modes. Full mode: each EP group's all-to-all is its own bundle and each replica's
send its own flow.

Tensor- and context-parallel collectives run live too: each TP or CP part starts its rings
(:meth:`LiveComm.rings`: every TP or CP group of the pipeline's replicas, one ring each, after an
NCCL launch) on the step's fabric, where they meet the data-parallel synchronisation's phases inside
the nodes and, for CP groups or TP groups that leave a node, the traffic between nodes. A CP part
is exposed by what the attention core does not hide of its ring, block by block as each lands
(:meth:`~sim.training.comm.model_parallel.ModelParallelComm.exposed`). In representative mode pipeline 0's
replica runs its rings (the other replicas' rings use links of their own nodes).
"""
from __future__ import annotations

import simpy

from ...network import LinkLoad, Network, RouteSet, sum_loads
from ..model.layout import Layout
from ..model.specs import COMMUNICATION
from .model_parallel import receiving
from .sends import same_node


class LiveComm:
    """Starts the all-to-alls (and, in representative mode, the pipeline sends) of a step as bundles
    on ``fabric``, and keeps how much slower than alone they ran.

    ``comm``: the step's :class:`~sim.training.comm.alltoall.CommModel` (its traffic, and the all-to-alls' times
    on an empty fabric: each EP group alone, ``scope="group"``, in full mode; the stage's groups
    together, ``scope="stage"``, in representative mode); ``representative``: one pipeline stands
    for all (see the module)."""

    def __init__(self, comm, layout: Layout, fabric: Network, representative: bool):
        self.comm, self.layout, self.fabric = comm, layout, fabric
        self.representative = representative
        self._loads: dict[tuple, tuple[LinkLoad, float]] = {}
        first = set(layout.group_replicas(0))                     # replica 0's EP group
        self._first_group = [d in first for d in range(layout.dp)]
        self._first_size = len(first)
        self._send_routes: dict[tuple[int, int], RouteSet] = {}
        self.count = 0
        self.live_s = 0.0           # seconds the all-to-alls took, launch barrier to last byte
        self.alone_s = 0.0          # seconds they take on an empty fabric

    def _bundle(self, shape: str, stage: int, group: int) -> tuple[LinkLoad, float, float]:
        """(link load, kernel overhead, seconds of the data phase alone) of the all-to-all that
        ``group`` (all groups when representative) runs at ``stage``."""
        key = (shape, stage, -1 if self.representative else group)
        if key not in self._loads:
            groups = range(self.layout.groups_per_rank) if self.representative else [group]
            load = sum_loads([self.comm.load(shape, stage, g) for g in groups])
            self._loads[key] = (load, max(self.comm.overhead(stage, g) for g in groups),
                                max(self.comm.data_time(shape, stage, g) for g in groups))   # stage scope: all equal
        return self._loads[key]

    def all_to_all(self, shape: str, stage: int, group: int):
        """Start the ``shape`` all-to-all of ``group`` at ``stage`` now: its kernel's overhead
        (launch, notify), then its data phase as a bundle; an event that fires when its last
        byte lands."""
        load, overhead, alone = self._bundle(shape, stage, group)
        env, t0 = self.fabric.env, self.fabric.env.now
        done = env.event()

        def landed():
            self.count += 1
            self.live_s += env.now - t0
            self.alone_s += overhead + alone
            done.succeed()
        if load.messages:
            self.fabric.transfer_bundle(load, latency=overhead, min_seconds=alone, on_done=landed)
        else:
            env.timeout(overhead + alone).callbacks.append(lambda _e: landed())
        return done

    def rings(self, ring, groups: list[list[int]], nbytes: float, launch_s: float, arrivals: list | None = None):
        """Start ``ring`` (a ring collective of :mod:`sim.network.collectives`) of ``nbytes`` per
        GPU over each of ``groups`` after an NCCL launch of ``launch_s``: the TP and CP collectives
        of a replica among the other traffic. An event that fires when the last ring has ended.
        ``arrivals`` (a CP ring's, ``[ring][GPU]`` lists): filled with the seconds after this call
        at which each GPU received each block (:func:`~sim.training.comm.model_parallel.receiving`)."""
        env = self.fabric.env
        done, t0 = env.event(), env.now

        def start(_e) -> None:
            simpy.AllOf(env, [ring(self.fabric, gpus, nbytes, **receiving(arrivals, g, lambda: env.now - t0))
                              for g, gpus in enumerate(groups)]).callbacks.append(lambda _e: done.succeed())
        env.timeout(launch_s).callbacks.append(start)
        return done

    def send_all(self, src_rank: int, dst_rank: int, nbytes: float, on_done, max_rate: float | None = None
                 ) -> None:
        """Representative mode: the pipeline send from ``src_rank`` to ``dst_rank`` of every
        replica, each its own flow; ``on_done()`` when those of replica 0's EP group have landed
        (its next all-to-all waits for the last of them). ``max_rate`` (bytes/s): the most a send
        between two GPUs of one node moves (:mod:`sim.training.comm.sends`), None: unbounded."""
        left = [self._first_size]

        def landed():
            left[0] -= 1
            if not left[0]:
                on_done()
        done = [landed if first else _ignore for first in self._first_group]
        gpu, replicas, gpn = self.layout.gpu, range(self.layout.dp), self.layout.gpus_per_node
        srcs, dsts = [gpu(src_rank, d) for d in replicas], [gpu(dst_rank, d) for d in replicas]
        inside = [same_node(a, b, gpn) for a, b in zip(srcs, dsts)]
        if max_rate is not None and any(inside):    # each its own flow, bound where the pair shares a node
            for a, b, d, bound in zip(srcs, dsts, done, inside):
                self.fabric.transfer(a, b, nbytes, d, max_rate if bound else None)
            return
        routes = self._send_routes.get((src_rank, dst_rank))
        if routes is None:
            routes = self._send_routes[(src_rank, dst_rank)] = self.fabric.route_set(srcs, dsts)
        self.fabric.transfer_set(routes, nbytes, done)

    @property
    def slowdown(self) -> float:
        """Mean over the step's all-to-alls of time live / time on an empty fabric (1: nothing contended)."""
        return self.live_s / self.alone_s if self.alone_s > 0 else 1.0


def _ignore() -> None:
    """The end of a send that only loads the fabric (another replica's, in representative mode)."""


__all__ = ["COMMUNICATION", "LiveComm"]
