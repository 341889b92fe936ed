"""MoE routing statistics -> how many token copies each GPU sends where (no SimPy here).

An expert-parallel (EP) group of ``ep`` GPUs, ``gpus_per_node`` per node, holds ``num_experts``
routed experts, ``num_experts / ep`` per GPU. Each token picks ``topk`` experts, on at most
``node_limit`` nodes (DeepSeek's node-limited routing: pick the top nodes first, then the top-k
experts among them).

* ``gpu_tokens[a, g]``: tokens of GPU a with at least one expert on GPU g (a token bound for
  several experts on one GPU is sent to it once).
* ``node_tokens[a, n]``: tokens of GPU a with at least one expert on node n of the group (what
  the hierarchical all-to-all sends over IB once per node).

``uniform`` (default) gives expected values in closed form: a token picks each node with
probability ``m/N`` (m = min(node_limit, N) of N nodes), then k experts uniformly among the
``m * E_node`` experts of its chosen nodes, so a chosen node is hit with probability
``1 - C(X - E_node, k) / C(X, k)`` and a GPU of it with ``1 - C(X - e, k) / C(X, k)``
(X = m E_node, e experts per GPU). ``skew > 0`` samples each token with a seeded generator from
Zipf-like expert popularity ``p_e ~ 1 / rank^skew`` (hot experts, for stragglers): exact counts,
different on every seed, identical for the same seed.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np

from .. import limits
from ..checks import InputError, number
from ..rng import standard_exponential_f32
from .jit import LEAF, njit              # numba, or None: the numpy sampler below is the fallback


class TrafficError(InputError):
    """Bad MoE routing parameters; the message names the field and the allowed values."""


def ep_group_error(ep: int, gpus_per_node: int, num_experts: int | None = None) -> str | None:
    """Why ``ep`` GPUs cannot form an expert-parallel group, or ``None`` if they can.

    The one home of the EP placement rule: a group is whole nodes (``ep`` a multiple of
    ``gpus_per_node``) or a divisor of one node (so groups tile the nodes), and each GPU holds
    ``num_experts / ep`` routed experts (not checked for ``num_experts=None``: a dense model)."""
    if ep > gpus_per_node and ep % gpus_per_node:
        return (f"ep ({ep}) must be a multiple of gpus_per_node={gpus_per_node} (or at most {gpus_per_node}): "
                "an EP group spans whole nodes")
    if ep < gpus_per_node and gpus_per_node % ep:
        return f"ep ({ep}) must divide the {gpus_per_node} GPUs per node"
    if num_experts is not None and num_experts % ep:
        return (f"ep must divide num_experts: ep={ep}, num_experts={num_experts} (each GPU holds "
                "num_experts / ep routed experts)")
    return None


def token_bytes(hidden: int, bytes_per_elem: float, scale_bytes: float | None = None) -> float:
    """Bytes of one token copy on the wire: ``hidden`` x bytes per element, plus, for 1-byte (FP8)
    elements, one fp32 scale per 1x128 tile (DeepSeek-V3's fine-grained quantization, report
    section 3.3), unless ``scale_bytes`` gives the extra bytes per copy."""
    hidden = number(hidden, "hidden (hidden size)", integer=True, low=1, high=10_000_000, error=TrafficError)
    number(bytes_per_elem, "bytes_per_elem", low=0, low_open=True, high=16, error=TrafficError)
    if scale_bytes is None:
        scale_bytes = 4 * -(-hidden // 128) if bytes_per_elem < 2 else 0
    number(scale_bytes, "scale_bytes", low=0, high=1e9, error=TrafficError)
    return hidden * bytes_per_elem + scale_bytes


@dataclass(frozen=True)
class MoERouting:
    ep: int
    gpus_per_node: int
    num_experts: int
    topk: int
    tokens_per_gpu: float
    node_limit: int | None = None
    skew: float = 0.0
    seed: int = 0

    def __post_init__(self):
        for name in ("ep", "gpus_per_node", "num_experts", "topk"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TrafficError(f"{name} must be a positive integer, got {value!r}")
        number(self.ep, "ep", integer=True, low=1, high=1_000_000, error=TrafficError)
        number(self.tokens_per_gpu, "tokens_per_gpu", low=0, high=1e9, error=TrafficError)
        number(self.skew, "skew", low=0, high=100, error=TrafficError)
        number(self.seed, "seed", integer=True, low=0, high=2 ** 63 - 1, error=TrafficError)
        problem = ep_group_error(self.ep, self.gpus_per_node, self.num_experts)
        if problem:
            raise TrafficError(problem)
        if self.topk > self.num_experts:
            raise TrafficError(f"topk must be <= num_experts={self.num_experts}, got {self.topk}")
        if self.node_limit is not None and (not isinstance(self.node_limit, int) or self.node_limit < 1):
            raise TrafficError(f"node_limit must be a positive integer or None, got {self.node_limit!r}")
        if self.node_limit is not None:
            experts_reachable = min(self.node_limit, self.nodes) * self.experts_per_gpu * self.gpus_in_node
            if experts_reachable < self.topk:
                raise TrafficError(f"node_limit={self.node_limit} reaches only {experts_reachable} experts, "
                                   f"fewer than topk={self.topk}")

    @property
    def gpus_in_node(self) -> int:
        return min(self.ep, self.gpus_per_node)

    @property
    def nodes(self) -> int:
        return max(1, self.ep // self.gpus_per_node)

    @property
    def experts_per_gpu(self) -> int:
        return self.num_experts // self.ep

    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_in_node


@dataclass(frozen=True)
class Traffic:
    routing: MoERouting
    gpu_tokens: np.ndarray   # [ep, ep]
    node_tokens: np.ndarray  # [ep, nodes]


def route_tokens(r: MoERouting) -> Traffic:
    """Token counts per (source GPU, destination GPU) and per (source GPU, destination node)."""
    return _expected(r) if r.skew == 0 else _sampled(r)


def _expected(r: MoERouting) -> Traffic:
    N = r.nodes
    m = min(r.node_limit or N, N)
    e = r.experts_per_gpu
    e_node = e * r.gpus_in_node
    X = m * e_node
    k = r.topk
    p_node = m / N * (1 - comb(X - e_node, k) / comb(X, k))
    p_gpu = m / N * (1 - comb(X - e, k) / comb(X, k))
    gpu_tokens = np.full((r.ep, r.ep), r.tokens_per_gpu * p_gpu)
    node_tokens = np.full((r.ep, N), r.tokens_per_gpu * p_node)
    return Traffic(r, gpu_tokens, node_tokens)


def _sampled(r: MoERouting, batch_rows: int = 16384) -> Traffic:
    """Every token of every source GPU routed by node-limited top-k over noisy expert scores
    ``log p_e + Gumbel`` (Gumbel-top-k = sampling experts without replacement, in proportion to
    their popularity), DeepSeek-V3's group-limited routing: a node's score is the sum of its
    ``ceil(k / node_limit)`` best expert scores, the best ``node_limit`` nodes are chosen, then the
    ``k`` best experts among them.

    Drawn as an exponential race, the same distribution without a logarithm: with ``E_e ~ Exp(1)``,
    ``log p_e + Gumbel = -log(E_e / p_e)``, so the best scores are the smallest keys ``E_e / p_e``
    and a node's score sum is ``-log`` of the product of its smallest keys. Tokens are i.i.d. given
    the popularity, so the tokens of several sources are drawn in one batch (float32 keys); the
    selection runs compiled (numba) or in numpy, on the same keys, with the same counts (but for an
    exact tie between two float32 keys at a selection's edge, which the two may break differently)."""
    rng = np.random.default_rng(r.seed)
    E, N, k = r.num_experts, r.nodes, r.topk
    m = min(r.node_limit or N, N)
    e_node = r.experts_per_gpu * r.gpus_in_node
    popularity = 1.0 / np.arange(1, E + 1) ** r.skew
    popularity = popularity[rng.permutation(E)]            # which experts are hot: seeded
    inv_p = (popularity.sum() / popularity).astype(np.float32)
    per_node_top = -(-k // m)                               # ceil(k / m) experts score a node
    gpu_tokens = np.zeros((r.ep, r.ep))
    node_tokens = np.zeros((r.ep, N))
    T = int(round(r.tokens_per_gpu))
    if T == 0:
        return Traffic(r, gpu_tokens, node_tokens)
    limits.check("max_draws", r.ep * T * E, f"skewed routing of {r.ep} GPUs x {T:,} tokens x {E} experts")
    select = _select_compiled if njit is not None else _select_numpy
    sources = max(1, batch_rows // T)                       # whole sources per batch
    piece = min(T, batch_rows)             # a source's tokens drawn at once: all, unless over a batch
    buffer = np.empty((sources * piece, E), dtype=np.float32)   # reused: no fresh pages per batch
    for first in range(0, r.ep, sources):
        src = range(first, min(first + sources, r.ep))
        for lo in range(0, T, piece):      # pieces in order: the same draws as one block
            block = min(piece, T - lo)
            keys = buffer[:len(src) * block]
            standard_exponential_f32(rng, keys)           # numpy's draws, compiled (sim.rng)
            keys *= inv_p
            gpus, nodes = select(keys, block, N, e_node, m, k, per_node_top, r.experts_per_gpu, r.ep,
                                 r.gpus_in_node)
            gpu_tokens[src.start:src.stop] += gpus
            node_tokens[src.start:src.stop] += nodes
    return Traffic(r, gpu_tokens, node_tokens)


def _select_numpy(keys, T, N, e_node, m, k, per_node_top, experts_per_gpu, ep, gpus_in_node):
    """(tokens per [source, GPU], tokens per [source, node]) of a block of sources' tokens, ``T``
    per source, by the rule of :func:`_sampled` (a token counts once per GPU and node it reaches)."""
    b = keys.shape[0]
    by_node = keys.reshape(b, N, e_node)
    if m < N:
        best = np.partition(by_node, per_node_top - 1, axis=2)[:, :, :per_node_top]
        chosen = np.argpartition(best.prod(axis=2), m - 1, axis=1)[:, :m]       # [b, m] nodes
        by_node = np.take_along_axis(by_node, chosen[:, :, None], axis=1)       # [b, m, e_node]
    else:
        chosen = np.broadcast_to(np.arange(N), (b, N))
    top = np.argpartition(by_node.reshape(b, m * e_node), k - 1, axis=1)[:, :k]
    expert = np.take_along_axis(chosen, top // e_node, axis=1) * e_node + top % e_node
    hits = np.zeros((b, ep), dtype=bool)
    np.put_along_axis(hits, expert // experts_per_gpu, True, axis=1)
    per_source = hits.reshape(b // T, T, ep)
    return per_source.sum(axis=1), per_source.reshape(b // T, T, N, gpus_in_node).any(axis=3).sum(axis=1)


def _keep_smallest(keys, ids, filled, key, ident):
    """Insert ``key`` (and its ``ident``) into ``keys[:filled]``, ascending, keeping the
    ``keys.size`` smallest: an equal key goes after those already there (the earlier one wins a
    tie at the edge). Returns how many are kept now."""
    size = keys.size
    if filled < size:
        i = filled
        filled += 1
    elif key < keys[size - 1]:
        i = size - 1
    else:
        return filled
    while i > 0 and keys[i - 1] > key:
        keys[i] = keys[i - 1]
        ids[i] = ids[i - 1]
        i -= 1
    keys[i] = key
    ids[i] = ident
    return filled


def _select_compiled(keys, T, N, e_node, m, k, per_node_top, experts_per_gpu, ep, gpus_in_node):
    """:func:`_select_numpy` as a loop over tokens. A node's score is the product of its
    ``per_node_top`` smallest keys (two in DeepSeek-V3's case: a running minimum pair, without
    branches); the ``m`` best nodes are kept by insertion (the lower node wins a tie). The ``k``
    smallest keys of the chosen nodes are all at most ``tau``, the largest of the chosen nodes'
    ``per_node_top``-th smallest keys (``m x per_node_top >= k`` keys are that small), so only those
    are inserted, node by chosen node, in expert order (a tie goes to the node chosen first, then the
    lower expert, as when every key is inserted)."""
    b = keys.shape[0]
    gpus = np.zeros((b // T, ep))
    nodes = np.zeros((b // T, N))
    gpu_seen = np.full(ep, -1, dtype=np.int64)
    node_seen = np.full(N, -1, dtype=np.int64)
    low = np.empty(per_node_top, dtype=np.float32)
    low_expert = np.empty(per_node_top, dtype=np.int64)
    node_worst = np.empty(N, dtype=np.float32)          # a node's per_node_top-th smallest key
    chosen = np.empty(m, dtype=np.int64)
    chosen_key = np.empty(m)
    best_key = np.empty(k, dtype=np.float32)
    best_expert = np.empty(k, dtype=np.int64)
    inf = np.float32(np.inf)
    for t in range(b):
        row = keys[t]
        tau = inf
        if m < N:
            n_chosen = 0
            for n in range(N):
                base = n * e_node
                if per_node_top == 2:
                    first, second = inf, inf
                    for e in range(base, base + e_node):
                        key = row[e]
                        second = min(second, max(first, key))
                        first = min(first, key)
                    prod = 1.0 * first * second
                    node_worst[n] = second
                else:
                    filled = 0                          # the node's per_node_top smallest keys
                    for e in range(base, base + e_node):
                        filled = _keep_smallest(low, low_expert, filled, row[e], e)
                    prod = 1.0
                    for j in range(per_node_top):
                        prod *= low[j]
                    node_worst[n] = low[per_node_top - 1]
                n_chosen = _keep_smallest(chosen_key, chosen, n_chosen, prod, n)   # the m best nodes
            tau = node_worst[chosen[0]]
            for j in range(1, m):
                tau = max(tau, node_worst[chosen[j]])
        else:
            for j in range(m):
                chosen[j] = j
        filled = 0                                      # the k smallest keys among the chosen nodes
        for j in range(m):
            n = chosen[j]
            for e in range(n * e_node, (n + 1) * e_node):
                key = row[e]
                if key <= tau:
                    filled = _keep_smallest(best_key, best_expert, filled, key, e)
        src = t // T
        for j in range(k):
            g = best_expert[j] // experts_per_gpu
            if gpu_seen[g] != t:
                gpu_seen[g] = t
                gpus[src, g] += 1.0
                n = g // gpus_in_node
                if node_seen[n] != t:
                    node_seen[n] = t
                    nodes[src, n] += 1.0
    return gpus, nodes


if njit is not None:
    _keep_smallest = njit(**LEAF)(_keep_smallest)
    _select_compiled = njit(cache=True)(_select_compiled)
