"""sim.network.pcg64: numpy's float32 exponential draws, compiled, bit for bit and state for state."""
import numpy as np
import pytest

from sim.network import pcg64
from sim.network.pcg64 import standard_exponential_f32


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
