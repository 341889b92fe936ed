"""sim.network.traffic: routing statistics in closed form and sampled, token bytes, the EP group rule."""
import numpy as np
import pytest

from sim.network import MoERouting, TrafficError, route_tokens


def test_uniform_expectations():
    """DeepSeek-V3: 256 experts over EP64 (4 per GPU), top-8 on at most 4 of 8 nodes."""
    r = MoERouting(ep=64, gpus_per_node=8, num_experts=256, topk=8, tokens_per_gpu=1, node_limit=4)
    tr = route_tokens(r)
    from math import comb
    p_gpu = 0.5 * (1 - comb(124, 8) / comb(128, 8))
    p_node = 0.5 * (1 - comb(96, 8) / comb(128, 8))
    assert tr.gpu_tokens[0, 5] == pytest.approx(p_gpu)
    assert tr.node_tokens[0, 3] == pytest.approx(p_node)
    # expected distinct GPUs per token is below top-k (several experts can share a GPU)
    assert 7 < tr.gpu_tokens[0].sum() < 8
    assert tr.node_tokens[0].sum() <= 4


def test_sampled_routing_respects_node_limit_and_seed():
    r = MoERouting(ep=64, gpus_per_node=8, num_experts=256, topk=8, tokens_per_gpu=256, node_limit=4,
                   skew=1.2, seed=7)
    a, b = route_tokens(r), route_tokens(r)
    assert np.array_equal(a.gpu_tokens, b.gpu_tokens)
    assert a.node_tokens.sum(axis=1).max() <= 4 * 256
    assert (a.gpu_tokens.sum(axis=1) <= 8 * 256).all()
    c = route_tokens(MoERouting(ep=64, gpus_per_node=8, num_experts=256, topk=8, tokens_per_gpu=256,
                                node_limit=4, skew=1.2, seed=8))
    assert not np.array_equal(a.gpu_tokens, c.gpu_tokens)
    # skew makes some GPUs hot: column loads differ widely
    load = a.gpu_tokens.sum(axis=0)
    assert load.max() > 1.5 * load.mean()


def test_a_source_with_more_tokens_than_a_batch_is_drawn_in_pieces_with_the_same_draws():
    """97 tokens per GPU in batches of 32 rows (pieces of 32, 32, 32 and a last one of 1 token)
    give the counts of one batch holding every source: the draws are taken in the same order.
    Memory is one batch."""
    from sim.network.traffic import _sampled
    r = MoERouting(ep=16, gpus_per_node=8, num_experts=64, topk=8, tokens_per_gpu=97, node_limit=2,
                   skew=1.0, seed=3)
    whole, pieces = _sampled(r, batch_rows=16384), _sampled(r, batch_rows=32)
    assert np.array_equal(whole.gpu_tokens, pieces.gpu_tokens)
    assert np.array_equal(whole.node_tokens, pieces.node_tokens)
    assert whole.node_tokens.sum(axis=1).max() <= 2 * 97 and whole.gpu_tokens.sum() >= 16 * 97


def test_a_sample_over_the_draw_limit_is_refused_before_drawing():
    from sim.limits import TooLarge, raised
    r = MoERouting(ep=16, gpus_per_node=8, num_experts=64, topk=8, tokens_per_gpu=100, node_limit=2, skew=1.0)
    with raised(max_draws=16 * 100 * 64 - 1), pytest.raises(
            TooLarge, match="skewed routing of 16 GPUs x 100 tokens x 64 experts needs about 102,400 draws, "
                            "over the limit of 102,399; raise it with --max-draws N"):
        route_tokens(r)
    with raised(max_draws=16 * 100 * 64):
        route_tokens(r)


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(ep=48), "ep must divide num_experts"),
    (dict(ep=12, num_experts=60), "multiple of gpus_per_node"),
    (dict(topk=0), "topk must be a positive integer"),
    (dict(node_limit=0), "node_limit must be a positive integer"),
    (dict(skew=-1), r"skew must be a finite number in \[0, 100\], got -1"),
    (dict(skew=float("nan")), "skew must be a finite number"),
    (dict(skew=float("inf")), "skew must be a finite number"),
    (dict(node_limit=1, topk=40), "reaches only 32 experts"),
    (dict(ep=12, num_experts=60), r"\(or at most 8\): an EP group spans whole nodes$"),
    (dict(topk=True), r"^topk must be a positive integer, got True$"),
    (dict(gpus_per_node=2.5), r"^gpus_per_node must be a positive integer, got 2\.5$"),
    (dict(ep=2_000_000, num_experts=2_000_000, topk=8), r"^ep must be an integer in \[1, 1,000,000\], got 2000000$"),
])
def test_bad_routing(kwargs, pattern):
    base = dict(ep=64, gpus_per_node=8, num_experts=256, topk=8, tokens_per_gpu=10)
    base.update(kwargs)
    with pytest.raises(TrafficError, match=pattern):
        MoERouting(**base)


def test_token_bytes_adds_fp8_scales():
    from sim.network import token_bytes
    assert token_bytes(7168, 1) == 7168 + 4 * 56           # one fp32 scale per 1x128 tile
    assert token_bytes(7168, 2) == 2 * 7168
    assert token_bytes(7168, 1, scale_bytes=0) == 7168
    assert token_bytes(100, 1) == 100 + 4 * 1              # a partial tile has its scale too
    for args, field in (((0, 1), "hidden"), ((7168, 0), "bytes_per_elem"), ((7168, 1, -1.0), "scale_bytes")):
        with pytest.raises(TrafficError, match=f"^{field}"):
            token_bytes(*args)


def test_ep_group_rule():
    from sim.network import ep_group_error
    assert ep_group_error(64, 8, 256) is None and ep_group_error(4, 8, 16) is None
    assert "multiple of gpus_per_node" in ep_group_error(12, 8, 48)
    assert "must divide the 8 GPUs per node" in ep_group_error(3, 8, 48)
    assert "ep must divide num_experts" in ep_group_error(8, 8, 12)
    assert ep_group_error(8, 8) is None                     # dense model: no expert rule


@pytest.mark.parametrize("kw", [dict(ep=64, node_limit=4), dict(ep=64, node_limit=None),
                                dict(ep=16, node_limit=2, topk=6, num_experts=64)])
def test_compiled_routing_counts_equal_the_numpy_selection(kw, monkeypatch):
    """The same keys, selected by the compiled kernel and by numpy: the same counts."""
    import sim.network.traffic as traffic
    base = dict(gpus_per_node=8, num_experts=256, topk=8, tokens_per_gpu=512, skew=1.0, seed=11)
    r = MoERouting(**{**base, **kw})
    compiled = route_tokens(r)
    monkeypatch.setattr(traffic, "_select_compiled", traffic._select_numpy)
    plain = route_tokens(r)
    assert np.array_equal(compiled.gpu_tokens, plain.gpu_tokens)
    assert np.array_equal(compiled.node_tokens, plain.node_tokens)


def test_sampling_counts_each_token_once_per_gpu_and_node():
    r = MoERouting(ep=16, gpus_per_node=8, num_experts=64, topk=6, tokens_per_gpu=300, node_limit=1, skew=0.8, seed=2)
    tr = route_tokens(r)
    assert (tr.node_tokens.sum(axis=1) == 300).all()          # node limit 1: every token reaches one node
    assert (tr.gpu_tokens.sum(axis=1) >= 300).all() and (tr.gpu_tokens.sum(axis=1) <= 6 * 300).all()


@pytest.mark.parametrize("m, k", [(4, 8), (3, 8), (2, 6)])
def test_compiled_selection_breaks_ties_by_lower_index(m, k):
    """Keys on a coarse grid (many exact ties): the compiled kernel picks the ``m`` nodes with the
    smallest products of their ``ceil(k/m)`` smallest keys and then the ``k`` smallest keys among
    them, ties going to the lower node among nodes and, among keys, to the node chosen first (the
    smaller product), then the lower expert: what a stable sort does."""
    from sim.network.traffic import _select_compiled
    rng = np.random.default_rng(5)
    T, N, e_node, experts_per_gpu, gpn = 4, 8, 8, 2, 4          # 64 experts on 32 GPUs, 4 per node
    keys = (rng.integers(1, 6, size=(3 * T, N * e_node)) / 4).astype(np.float32)
    p = -(-k // m)
    gpus, nodes = _select_compiled(keys, T, N, e_node, m, k, p, experts_per_gpu, N * gpn, gpn)
    want_g, want_n = np.zeros_like(gpus), np.zeros_like(nodes)
    for t, row in enumerate(keys.astype(float)):
        score = [float(np.prod(np.sort(row[n * e_node:(n + 1) * e_node])[:p])) for n in range(N)]
        chosen = sorted(range(N), key=lambda n: (score[n], n))[:m]
        experts = sorted((e for n in chosen for e in range(n * e_node, (n + 1) * e_node)),
                         key=lambda e: row[e])[:k]                # stable: chosen order, then expert
        hit = sorted({e // experts_per_gpu for e in experts})
        want_g[t // T, hit] += 1
        want_n[t // T, sorted({g // gpn for g in hit})] += 1
    assert np.array_equal(gpus, want_g) and np.array_equal(nodes, want_n)


def test_fewer_than_one_token_per_gpu_routes_nothing():
    """Sampled routing of 0.4 tokens per GPU rounds to no token: no traffic, and the routing it
    came from is kept."""
    r = MoERouting(ep=8, gpus_per_node=8, num_experts=16, topk=2, tokens_per_gpu=0.4, skew=1.0, seed=0)
    t = route_tokens(r)
    assert t.routing is r and t.gpu_tokens.shape == (8, 8) and t.node_tokens.shape == (8, 1)
    assert not t.gpu_tokens.any() and not t.node_tokens.any()
