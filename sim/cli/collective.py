"""``python -m sim collective KIND --topology PRESET_OR_YAML ...``: one collective on a network
(``--network``: the max-min fabric, or the analytical backend without contention).

Printed (and in ``--json``): ``time_s`` (first byte sent to last byte landed), ``bytes_per_gpu``
(mean bytes each participating GPU put on the wire, forwarded bytes included), ``algbw_gbps``
(payload / time in GB/s = 1e9 B/s, as nccl-tests' algbw: payload is the buffer for p2p and ring
collectives, and for an all-to-all the token bytes each GPU addresses to other GPUs, the same for
both algorithms), ``busiest_links`` (the links that carried the most bytes). The ring collectives
run as NCCL would (``--nccl-protocol``, :mod:`sim.network.nccl`): NCCL's latency and the chosen
protocol's share of the bandwidth.
"""
from __future__ import annotations

from ..checks import InputError, arg, gpu_ranges, number

KINDS = ("p2p", "all-to-all", "all-reduce", "reduce-scatter", "all-gather")


def parse_ranks(text: str, n_gpus: int) -> list[int]:
    """``0-7``, ``0,8,16`` or ``0-3,8-11`` -> GPU indices; checks the range before expanding it."""
    out = gpu_ranges(text, "--ranks", n_gpus)
    if len(out) < 2 or len(set(out)) != len(out):
        raise InputError(f"--ranks must name at least two distinct GPUs in 0..{n_gpus - 1}, got {text!r}")
    return out


def run_collective(args) -> dict:
    import numpy as np
    import simpy

    from topologies import load_topology

    from ..network import (
        MoERouting,
        all_to_all,
        build_network,
        busiest_links,
        link_stats,
        ring_all_gather,
        ring_all_reduce,
        ring_reduce_scatter,
        route_tokens,
        token_bytes,
    )
    from ..network.collectives import nccl_ring_cost
    from ..network.nccl import NVLS, TREE, ring_protocol
    from ..training.comm.alltoall import SCATTERED_WINDOW
    from ..training.model.specs import topology_gpu
    graph = load_topology(args.topology)
    topology_gpu(graph, args.topology)          # a GPU the topology names must exist, though unused here
    env = simpy.Environment()
    window = args.completion_window
    if window is None:
        window = SCATTERED_WINDOW if args.kind == "all-to-all" else 0.0
    fabric = build_network(env, graph, args.network, completion_window=window)
    n = fabric.num_gpus
    nccl = None                                 # how NCCL runs it: "NVLS", "ring, <protocol>" or "tree, <protocol>"
    if args.kind == "p2p":
        for name in ("src", "dst", "bytes"):
            if getattr(args, name) is None:
                raise InputError(f"collective p2p needs --{name}")
        if args.src == args.dst:
            raise InputError(f"--src and --dst must be different GPUs, got {args.src} twice")
        members = [args.src, args.dst]
        done = fabric.transfer(args.src, args.dst, args.bytes)
        payload = args.bytes
    elif args.kind == "all-to-all":
        tb = token_bytes(args.hidden, args.bytes_per_elem, args.scale_bytes)
        routing = MoERouting(ep=args.ep, gpus_per_node=graph.graph.get("gpus_per_node", 8),
                             num_experts=args.experts, topk=args.topk, tokens_per_gpu=args.tokens,
                             node_limit=args.node_limit, skew=args.skew, seed=args.seed)
        groups = n // args.ep if args.groups == "all" else args.groups
        if groups < 1 or groups * args.ep > n:
            raise InputError(f"--groups {args.groups} x --ep {args.ep} needs {max(groups, 1) * args.ep} GPUs; "
                             f"topology {args.topology!r} has {n}")
        traffic = route_tokens(routing)
        members = list(range(groups * args.ep))
        events = [all_to_all(fabric, list(range(k * args.ep, (k + 1) * args.ep)), traffic, tb, args.algorithm,
                             args.direction, args.chunks) for k in range(groups)]
        done = simpy.AllOf(env, events)
        off_diag = traffic.gpu_tokens.sum(axis=1) - np.diag(traffic.gpu_tokens)
        payload = float(off_diag.mean() * tb)
    else:
        if args.ranks is None or args.bytes is None:
            raise InputError(f"collective {args.kind} needs --ranks and --bytes")
        members = parse_ranks(args.ranks, n)
        op = {"all-reduce": ring_all_reduce, "reduce-scatter": ring_reduce_scatter,
              "all-gather": ring_all_gather}[args.kind]
        protocol = ring_protocol(args.nccl_protocol)
        done = op(fabric, members, args.bytes, protocol=protocol)
        payload = args.bytes
        if protocol is not None and len(members) > 1 and args.bytes > 0:
            kind = args.kind.replace("-", "_")
            chosen = nccl_ring_cost(fabric, kind, members, args.bytes, protocol)[0]
            algorithm = "tree" if chosen.algorithm == TREE else "ring"
            nccl = NVLS if chosen.algorithm == NVLS else f"{algorithm}, {chosen.protocol}"
    env.run(until=done)
    t = env.now
    sent = fabric.bytes_sent[members]
    result = {"kind": args.kind, "topology": graph.graph.get("name"), "gpus": len(members), "time_s": t,
              "bytes_per_gpu": float(sent.mean()), "max_bytes_per_gpu": float(sent.max()),
              "algbw_gbps": payload / t / 1e9 if t > 0 else float("inf"),
              "busiest_links": busiest_links(fabric, 5, t), "recomputations": fabric.recomputations, "nccl": nccl}
    if args.links_csv:
        from ..io import overwriting, write_csv_atomic
        with overwriting(args.force):
            write_csv_atomic(link_stats(fabric, t), args.links_csv)
    return result


def cmd_collective(args) -> int:
    from ..perf import gc_paused
    with gc_paused():
        res = run_collective(args)
    if args.json:
        from ..io import json_text
        print(json_text(res))
        return 0
    nccl = f", NCCL {res['nccl']}" if res["nccl"] else ""
    print(f"{res['kind']} on {res['topology']} ({res['gpus']} GPUs{nccl}): {res['time_s'] * 1e6:.1f} us")
    print(f"bytes sent per GPU: mean {res['bytes_per_gpu'] / 1e6:.3f} MB, max {res['max_bytes_per_gpu'] / 1e6:.3f} MB;"
          f" algbw {res['algbw_gbps']:.2f} GB/s")
    print("busiest links:")
    for link in res["busiest_links"]:
        print(f"  {link['link']:<40} {link['kind']:<7} {link['bytes'] / 1e6:10.3f} MB  mean util "
              f"{100 * link['mean_util']:5.1f}%  peak {100 * link['peak_util']:5.1f}%")
    return 0


def _groups(text: str):
    import argparse
    if text == "all":
        return text
    try:
        return number(int(text), "groups", integer=True, low=1, high=1_000_000)
    except (ValueError, InputError):
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'all', got {text!r}") from None


def add_arguments(p) -> None:
    gpu = arg(integer=True, low=0, high=100_000_000)
    count = arg(integer=True, low=1, high=100_000_000)
    p.add_argument("kind", choices=KINDS, help="which collective")
    p.add_argument("--topology", required=True, help="preset name or a YAML file")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--links-csv", help="write every used link's statistics to this CSV")
    p.add_argument("--force", action="store_true", help="replace --links-csv even if this tool did not write it")
    p.add_argument("--network", default="maxmin",
                   help="network backend: maxmin (flows share each link max-min fairly, the default) or analytical "
                        "(each transfer alone on its route, no contention)")
    p.add_argument("--completion-window", type=arg(low=0, high=1, high_open=True), default=None,
                   help="flows due within this fraction of the elapsed busy time finish together (default: "
                        "1e-3 for all-to-all, whose skewed flows end at scattered times; 0, exact, for the rest: "
                        "a ring's thousands of short steps would lose their data time)")
    p.add_argument("--nccl-protocol", default="auto", choices=("auto", "LL", "LL128", "Simple", "none"),
                   help="ring collectives: NCCL's protocol (auto: the one NCCL's cost model picks by size; "
                        "none: the fabric alone, each step its route's latency)")
    g = p.add_argument_group("p2p")
    g.add_argument("--src", type=gpu, help="source GPU (global index)")
    g.add_argument("--dst", type=gpu, help="destination GPU")
    g.add_argument("--bytes", type=arg(low=0, high=1e15), help="bytes per GPU buffer (p2p, ring collectives)")
    g = p.add_argument_group("all-to-all (MoE dispatch / combine)")
    g.add_argument("--ep", type=count, default=64, help="expert-parallel group size (default 64)")
    g.add_argument("--tokens", type=arg(low=0, high=1e9), default=4096, help="tokens per GPU (default 4096)")
    g.add_argument("--hidden", type=arg(integer=True, low=1, high=10_000_000), default=7168,
                   help="hidden size (default 7168)")
    g.add_argument("--topk", type=count, default=8, help="routed experts per token (default 8)")
    g.add_argument("--experts", type=count, default=256, help="routed experts in the group (default 256)")
    g.add_argument("--bytes-per-elem", type=arg(low=0, low_open=True, high=16), default=1,
                   help="1 = FP8 (default), 2 = BF16")
    g.add_argument("--scale-bytes", type=arg(low=0, high=1e9), default=None,
                   help="extra bytes per token copy (default: FP8 1x128 fp32 scales, 0 for BF16)")
    g.add_argument("--node-limit", type=count, default=4, help="max nodes per token (default 4)")
    g.add_argument("--algorithm", choices=("hierarchical", "flat"), default="hierarchical")
    g.add_argument("--direction", choices=("dispatch", "combine"), default="dispatch")
    g.add_argument("--chunks", type=arg(integer=True, low=1, high=1_000), default=4,
                   help="pieces per hierarchical message (default 4)")
    g.add_argument("--groups", type=_groups, default=1, help="EP groups running at once, or 'all' (default 1)")
    g.add_argument("--skew", type=arg(low=0, high=100), default=0.0,
                   help="Zipf exponent of expert popularity (0 = uniform)")
    g.add_argument("--seed", type=arg(integer=True, low=0, high=2 ** 63 - 1), default=0,
                   help="seed of the skewed routing sample")
    g = p.add_argument_group("all-reduce / reduce-scatter / all-gather")
    g.add_argument("--ranks", help="GPUs, e.g. 0-7 or 0,8,16,24")


COMMANDS = {"collective": ("run one collective on a topology's fabric", add_arguments, cmd_collective)}
