"""sim.rng (PCG64): numpy's float32 exponential draws, compiled, bit for bit and state for state."""
import numpy as np
import pytest

from sim import rng as pcg64
from sim.rng import standard_exponential_f32


def twins(seed):
    """Two generators in the same state, one of them left with a pending 32-bit half."""
    a, b = np.random.default_rng(seed), np.random.default_rng(seed)
    for g in (a, b):
        g.random(3)
        g.integers(0, 10, dtype=np.uint32)             # a 32-bit draw: the high half waits
    assert a.bit_generator.state["has_uint32"] == 1
    return a, b


@pytest.mark.parametrize("seed", [0, 1, 2 ** 40 + 7])
@pytest.mark.parametrize("n", [1, 2, 3, 1001])
def test_the_same_numbers_and_the_same_state_as_numpy(seed, n):
    ours, numpys = twins(seed)
    want = numpys.standard_exponential(dtype=np.float32, out=np.empty(n, dtype=np.float32))
    got = standard_exponential_f32(ours, np.empty(n, dtype=np.float32))
    assert np.array_equal(got, want)
    assert ours.bit_generator.state == numpys.bit_generator.state
    assert np.array_equal(ours.random(4), numpys.random(4))     # and the stream goes on alike


def test_every_path_of_the_ziggurat_on_four_million_draws():
    """4 million draws: about 1% take the rare path (a wedge test with a second 32-bit draw) and
    about 1,800 the tail beyond the last level (7.697, drawn by a logarithm); all equal numpy's,
    into a 2-D array as the router uses it."""
    ours, numpys = twins(5)
    want = numpys.standard_exponential(dtype=np.float32, out=np.empty((16384, 256), dtype=np.float32))
    got = standard_exponential_f32(ours, np.empty((16384, 256), dtype=np.float32))
    assert np.array_equal(got, want) and ours.bit_generator.state == numpys.bit_generator.state
    assert (got > 7.6971174).sum() > 1000                       # the tail was drawn
    assert 0.9 < got.mean() < 1.1


def test_other_generators_and_layouts_are_numpys():
    """Not PCG64, or not float32, or not contiguous: numpy's own call (which refuses the last)."""
    a, b = np.random.Generator(np.random.MT19937(3)), np.random.Generator(np.random.MT19937(3))
    assert np.array_equal(standard_exponential_f32(a, np.empty(50, dtype=np.float32)),
                          b.standard_exponential(dtype=np.float32, out=np.empty(50, dtype=np.float32)))
    with pytest.raises(TypeError):                              # float64 out: numpy wants dtype=float64
        standard_exponential_f32(np.random.default_rng(9), np.empty(7))
    with pytest.raises(ValueError):
        standard_exponential_f32(np.random.default_rng(9), np.empty((10, 2), dtype=np.float32)[:, 0])


@pytest.mark.skipif(pcg64.njit is None, reason="numba is not installed")
def test_the_128_bit_multiply_high_half():
    """The high half of a 64 x 64-bit product, against Python's integers, at the edges."""
    from numba import njit
    mulhi = njit(lambda a, b: pcg64._mulhi(a, b))
    for a, b in [(0, 0), (1, 2 ** 64 - 1), (2 ** 64 - 1, 2 ** 64 - 1), (2 ** 63, 2), (pcg64._MULT_LO, 12345678901234567)]:
        assert int(mulhi(np.uint64(a), np.uint64(b))) == (a * b) >> 64


@pytest.mark.parametrize("entropy", [[0], [0, 2, 3, 100, 5], [7, 2, 15, 999, 1024], [2 ** 40 + 3, 2, 0, 0, 0],
                                     [2 ** 64 - 1, 2, 1, 2, 3], [5, 2, 1, 2, 3, 4, 5, 6], [1, 2]])
@pytest.mark.parametrize("shape", [(1, 1), (3, 4), (40, 64)])
def test_lognormal_draws_from_a_fresh_seed_are_numpys(entropy, shape):
    """Kernel jitter's draws: ``default_rng(entropy).lognormal(...)`` bit for bit, for entropy of
    one to eight words, multi-word ints among them (SeedSequence's pool takes four, the rest are
    mixed in after), and the jitter's own mean and sigma."""
    sigma2 = np.log1p(0.05 ** 2)
    want = np.random.default_rng(entropy).lognormal(-sigma2 / 2, np.sqrt(sigma2), shape)
    got = pcg64.lognormal_from_seed(entropy, -sigma2 / 2, np.sqrt(sigma2), shape)
    assert got.shape == want.shape and np.array_equal(got, want)


def test_lognormal_draws_take_every_path_of_the_normal_ziggurat():
    """2 million draws: about 0.7% take the wedge test (a second 64-bit draw, some rejected) and
    a few hundred the tail beyond the last level (3.654, two logarithms); all equal numpy's."""
    want = np.random.default_rng([9, 9]).lognormal(0.0, 1.0, 2_000_000)
    got = pcg64.lognormal_from_seed([9, 9], 0.0, 1.0, 2_000_000)
    assert np.array_equal(got, want)
    z = np.log(got)
    assert (np.abs(z) > 3.6541528853610088).sum() > 300            # the tail was drawn
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01


def test_entropy_words_are_seedsequence_s():
    """The words SeedSequence hashes: each int's 32-bit words, least significant first; negative
    entropy is refused as numpy refuses it."""
    assert pcg64.entropy_words([0, 1, 2 ** 32, 2 ** 64 - 1]).tolist() == [0, 1, 0, 1, 2 ** 32 - 1, 2 ** 32 - 1]
    with pytest.raises(ValueError):
        pcg64.entropy_words([3, -1])
    with pytest.raises(ValueError):
        np.random.SeedSequence([3, -1])
