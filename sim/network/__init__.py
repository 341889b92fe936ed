"""The network side: link table and routes, a max-min fair flow-level fabric in SimPy, MoE
traffic, collectives and link statistics. It knows nothing about pipeline schedules."""
from .alone import Transfers, all_to_all_alone, all_to_all_alone_s, hierarchical_alone_s, ring_alone_s, transfers_on
from .analytical import AnalyticalNetwork
from .api import Network
from .backends import NETWORK_BACKENDS, build_network
from .collectives import (
                    all_to_all,
                    hierarchical_all_gather,
                    hierarchical_reduce_scatter,
                    nccl_all_reduce,
                    p2p,
                    ring_all_gather,
                    ring_all_reduce,
                    ring_reduce_scatter,
                    tree_all_reduce,
)
from .fabric import Fabric, RouteSet
from .fairshare import max_min_rates
from .links import LinkTable
from .loads import LinkLoad, all_to_all_load, p2p_load, sum_loads
from .nccl_rates import NcclRates
from .stats import busiest_links, link_stats
from .timeline import LinkTimeline
from .traffic import MoERouting, Traffic, TrafficError, ep_group_error, route_tokens, token_bytes
from .view import NetworkView

__all__ = ["all_to_all", "hierarchical_all_gather", "hierarchical_reduce_scatter", "nccl_all_reduce", "p2p",
           "ring_all_gather", "ring_all_reduce", "ring_reduce_scatter", "tree_all_reduce", "Transfers",
           "all_to_all_alone", "all_to_all_alone_s",
           "hierarchical_alone_s", "ring_alone_s", "transfers_on", "AnalyticalNetwork", "Fabric", "NETWORK_BACKENDS",
           "Network", "RouteSet", "build_network", "LinkTable", "LinkLoad", "all_to_all_load", "p2p_load", "sum_loads",
           "max_min_rates", "busiest_links", "link_stats", "LinkTimeline", "NetworkView", "MoERouting", "Traffic",
           "TrafficError", "ep_group_error", "route_tokens", "token_bytes", "NcclRates"]
