"""numpy's float32 exponential draws, and its log-normal draws from a fresh seed, compiled: the
same numbers, faster.

Skewed routing (:mod:`sim.network.traffic`) draws one float32 exponential key per expert per token
(67 million per EP64 group of DeepSeek-V3). numpy draws them at about 10 ns each, mostly its
per-draw calls through the bit generator's function pointers. :func:`standard_exponential_f32`
draws the very same numbers as ``Generator.standard_exponential(dtype=np.float32, out=...)`` and
leaves the generator in the very same state, with the generator's steps inlined in one compiled
loop:

* PCG64 (numpy's default bit generator; O'Neill 2014, pcg-random.org): a 128-bit LCG,
  ``state = state x 0x2360ED051FC65DA44385DF649FCCF645 + inc (mod 2^128)``, output XSL-RR
  (the two 64-bit halves xor-ed, rotated right by the top 6 bits); the state steps first, then
  the output is taken from the new state. 128-bit arithmetic is done on 64-bit halves (the
  high half of a 64 x 64-bit product by one 128-bit multiply in LLVM IR).
* 32-bit draws take the low then the high half of one 64-bit output (numpy's ``has_uint32`` and
  ``uinteger`` hold a pending high half between calls).
* The float32 exponential is numpy's 256-level ziggurat (Marsaglia and Tsang 2000,
  ``random_standard_exponential_f`` in numpy/random/src/distributions/distributions.c), with its
  tables as numba ships them for its own port of numpy's generators
  (``numba.np.random._constants``).

Kernel-time jitter (:mod:`sim.training.model.faults`) draws a few thousand log-normal factors per op from a
generator seeded anew for each op (``default_rng([seed, 2, stage, seq, replica])``): numpy spends
about 80 us per op, half of it making the ``SeedSequence`` and the ``PCG64``.
:func:`lognormal_from_seed` gives the same numbers in one compiled call: numpy's ``SeedSequence``
(O'Neill's ``seed_seq_fe`` hashing of the entropy words into a pool of four, then
``generate_state(4, uint64)``), ``PCG64``'s seeding from those words (``pcg64_set_seed``: state 0,
increment ``2 x initseq + 1``, a step, add the initial state, a step) and numpy's 64-bit normal
ziggurat (``random_standard_normal``, 256 levels, tables as numba ships them), ``exp(mean + sigma
x z)`` as ``random_lognormal``.

Where numba or those tables are missing, or the generator is not PCG64, numpy draws them.
``tests/test_rng.py`` compares the draws and the final state with numpy's, bit for bit.
"""
from __future__ import annotations

import numpy as np

try:                                     # optional: numpy draws them otherwise
    from llvmlite import ir
    from numba import config, njit, types
    from numba.extending import intrinsic
    from numba.np.random._constants import (
        fe_float,
        fi_double,
        ke_float,
        ki_double,
        we_float,
        wi_double,
        ziggurat_exp_r_f,
        ziggurat_nor_inv_r,
        ziggurat_nor_r,
    )
    if config.DISABLE_JIT:               # run as Python, 67 million draws would take minutes
        njit = None
except ImportError:                      # pragma: no cover - depends on the environment
    njit = None

_MULT_HI = 2549297995355413924           # PCG's default 128-bit multiplier, high and low halves
_MULT_LO = 4865540595714422341
_MASK64 = (1 << 64) - 1


if njit is not None:
    @intrinsic
    def _mulhi(typingctx, a, b):
        """The high 64 bits of the 128-bit product of two uint64 (one machine multiply)."""
        def codegen(context, builder, signature, args):
            wide = ir.IntType(128)
            product = builder.mul(builder.zext(args[0], wide), builder.zext(args[1], wide))
            return builder.trunc(builder.lshr(product, ir.Constant(wide, 64)), ir.IntType(64))
        return types.uint64(types.uint64, types.uint64), codegen


def _next64(hi, lo, inc_hi, inc_lo, mult_hi, mult_lo):
    """PCG64's next 64-bit output: the state steps (``state x multiplier + inc`` mod 2^128, on
    64-bit halves), then XSL-RR of the new state (its halves xor-ed, rotated right by its top 6
    bits). Returns (state high, state low, output)."""
    new_lo = lo * mult_lo
    new_hi = hi * mult_lo + lo * mult_hi + _mulhi(lo, mult_lo)
    lo = new_lo + inc_lo
    hi = new_hi + inc_hi + (np.uint64(1) if lo < new_lo else np.uint64(0))
    rot = hi >> np.uint64(58)
    xored = hi ^ lo
    return hi, lo, (xored >> rot) | (xored << ((np.uint64(64) - rot) & np.uint64(63)))


def _draws(st, out, ke, we, fe, r_f, mult_hi, mult_lo):
    """Fill ``out`` (float32, 1-D) with exponential draws; ``st`` (uint64[6]): state high, low,
    increment high, low, has_uint32, uinteger, updated in place."""
    m32 = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    one = np.uint64(1)
    zero = np.uint64(0)
    hi, lo, inc_hi, inc_lo, has, pending = st[0], st[1], st[2], st[3], st[4], st[5]
    scale = np.float32(1.0) / np.float32(16777216.0)
    i = 0
    n = out.size
    need_float = False                  # the next 32 bits make a float of the rare path
    idx = zero
    x = np.float32(0.0)
    while i < n:
        if has != zero:                 # next 32 bits: the pending high half ...
            has = zero
            r = pending
        else:                           # ... or the low half of a fresh 64-bit output
            hi, lo, out64 = _next64(hi, lo, inc_hi, inc_lo, mult_hi, mult_lo)
            has = one
            pending = out64 >> s32
            r = out64 & m32
        if need_float:                  # the rare path of the draw in progress
            need_float = False
            u = np.float32(r >> np.uint64(8)) * scale
            if idx == 0:
                out[i] = np.float32(r_f - np.float32(np.log1p(np.float32(-u))))
                i += 1
            elif (fe[idx - one] - fe[idx]) * u + fe[idx] < np.float32(np.exp(np.float32(-x))):
                out[i] = x
                i += 1
            continue                    # else: a fresh draw for the same number
        ri = r >> one
        idx = ri & np.uint64(0xFF)
        ri >>= np.uint64(8)
        x = np.float32(np.float32(ri) * we[idx])
        if ri < ke[idx]:                # 98.9% of draws end here
            out[i] = x
            i += 1
        else:
            need_float = True
    st[0], st[1], st[4], st[5] = hi, lo, has, pending


if njit is not None:
    _next64 = njit(cache=True, inline="always")(_next64)
    _draws = njit(cache=True)(_draws)
    _TABLES = (np.asarray(ke_float, dtype=np.uint64), np.asarray(we_float, dtype=np.float32),
               np.asarray(fe_float, dtype=np.float32), np.float32(ziggurat_exp_r_f))


def standard_exponential_f32(rng: np.random.Generator, out: np.ndarray) -> np.ndarray:
    """``rng.standard_exponential(dtype=np.float32, out=out)``: the same numbers and the same
    state of ``rng`` afterwards (compiled for PCG64; numpy otherwise). ``out``: C-contiguous
    float32."""
    bits = rng.bit_generator
    if njit is None or type(bits) is not np.random.PCG64 or not out.flags.c_contiguous or out.dtype != np.float32:
        return rng.standard_exponential(dtype=np.float32, out=out)
    state = bits.state
    s, inc = state["state"]["state"], state["state"]["inc"]
    st = np.array([s >> 64, s & _MASK64, inc >> 64, inc & _MASK64, state["has_uint32"], state["uinteger"]],
                  dtype=np.uint64)
    _draws(st, out.reshape(-1), *_TABLES, np.uint64(_MULT_HI), np.uint64(_MULT_LO))
    hi, lo, _, _, has, pending = (int(v) for v in st)
    bits.state = {"bit_generator": "PCG64", "state": {"state": (hi << 64) | lo, "inc": inc},
                  "has_uint32": has, "uinteger": pending}
    return out


# numpy's SeedSequence (numpy/random/bit_generator.pyx; O'Neill's seed_seq_fe): uint32 arithmetic.
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43b0d7e5, 0x931e8875, 0x8b51f9dd, 0x58f38ded
_MIX_MULT_L, _MIX_MULT_R = 0xca01f9dd, 0x4973f715


def _lognormal(words, mean, sigma, out, tables):
    """Fill ``out`` (float64, 1-D) with numpy's ``default_rng(entropy).lognormal(mean, sigma)``
    draws, ``words`` being the entropy as numpy's SeedSequence assembles it (uint32 words);
    ``tables``: the ziggurat's (ki, wi, fi, r, 1 / r) and PCG64's multiplier (high, low words)."""
    ki, wi, fi, nor_r, nor_inv_r, mult_hi, mult_lo = tables
    m32 = np.uint64(0xFFFFFFFF)
    x16 = np.uint64(16)
    pool = np.zeros(4, dtype=np.uint64)
    h = np.uint64(_INIT_A)
    n_words = words.size
    for i in range(4):                           # hashmix each word (or 0) into the pool
        v = np.uint64(words[i]) if i < n_words else np.uint64(0)
        v ^= h
        h = (h * np.uint64(_MULT_A)) & m32
        v = (v * h) & m32
        pool[i] = v ^ (v >> x16)
    for i_src in range(4 + max(n_words - 4, 0)):  # mix every pool word (then each extra word) into the others
        for i_dst in range(4):
            if i_src < 4 and i_src == i_dst:
                continue
            v = pool[i_src] if i_src < 4 else np.uint64(words[i_src])
            v ^= h
            h = (h * np.uint64(_MULT_A)) & m32
            v = (v * h) & m32
            v ^= v >> x16
            r = (np.uint64(_MIX_MULT_L) * pool[i_dst] - np.uint64(_MIX_MULT_R) * v) & m32
            pool[i_dst] = r ^ (r >> x16)
    seed = np.zeros(4, dtype=np.uint64)          # generate_state(4, uint64): 8 words, little-endian pairs
    h = np.uint64(_INIT_B)
    for i in range(8):
        v = pool[i % 4] ^ h
        h = (h * np.uint64(_MULT_B)) & m32
        v = (v * h) & m32
        v ^= v >> x16
        seed[i // 2] |= v << np.uint64(32 * (i % 2))
    one = np.uint64(1)
    inc_hi = (seed[2] << one) | (seed[3] >> np.uint64(63))     # pcg64_set_seed: inc = 2 x initseq + 1
    inc_lo = (seed[3] << one) | one
    hi, lo, _ = _next64(np.uint64(0), np.uint64(0), inc_hi, inc_lo, mult_hi, mult_lo)
    lo2 = lo + seed[1]                                        # state += initstate, then a step
    hi, lo, _ = _next64(hi + seed[0] + (one if lo2 < lo else np.uint64(0)), lo2, inc_hi, inc_lo, mult_hi, mult_lo)
    mask52 = np.uint64(0x000FFFFFFFFFFFFF)
    to_double = 1.0 / 9007199254740992.0                      # next_double: the top 53 bits / 2^53
    i = 0
    while i < out.size:
        hi, lo, r = _next64(hi, lo, inc_hi, inc_lo, mult_hi, mult_lo)
        idx = r & np.uint64(0xFF)
        r >>= np.uint64(8)
        rabs = (r >> one) & mask52
        x = float(rabs) * wi[idx]
        if r & one:
            x = -x
        if rabs >= ki[idx]:                      # 0.7% of draws: the wedge or the tail
            if idx == 0:                         # the tail: two doubles, until accepted
                while True:
                    hi, lo, u0 = _next64(hi, lo, inc_hi, inc_lo, mult_hi, mult_lo)
                    hi, lo, u1 = _next64(hi, lo, inc_hi, inc_lo, mult_hi, mult_lo)
                    xx = -nor_inv_r * np.log1p(-(float(u0 >> np.uint64(11)) * to_double))
                    yy = -np.log1p(-(float(u1 >> np.uint64(11)) * to_double))
                    if yy + yy > xx * xx:
                        x = -(nor_r + xx) if (rabs >> np.uint64(8)) & one else nor_r + xx
                        break
            else:                                # the wedge: one double; rejected, a fresh draw for it
                hi, lo, u0 = _next64(hi, lo, inc_hi, inc_lo, mult_hi, mult_lo)
                if not ((fi[idx - 1] - fi[idx]) * (float(u0 >> np.uint64(11)) * to_double) + fi[idx]
                        < np.exp(-0.5 * x * x)):
                    continue
        out[i] = np.exp(mean + sigma * x)
        i += 1


if njit is not None:
    _lognormal = njit(cache=True)(_lognormal)
    _NORMAL_TABLES = (np.asarray(ki_double, dtype=np.uint64), np.asarray(wi_double, dtype=np.float64),
                      np.asarray(fi_double, dtype=np.float64), float(ziggurat_nor_r), float(ziggurat_nor_inv_r))


def entropy_words(entropy: list[int]) -> np.ndarray:
    """The uint32 words numpy's ``SeedSequence(entropy)`` hashes for a list of non-negative ints:
    each int's 32-bit words, least significant first (0 is one word)."""
    words = []
    for value in entropy:
        value = int(value)
        if value < 0:
            raise ValueError(f"entropy must be non-negative, got {value}")
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        while value:
            words.append(value & 0xFFFFFFFF)
            value >>= 32
    return np.array(words, dtype=np.uint32)


def lognormal_from_seed(entropy: list[int], mean: float, sigma: float, shape) -> np.ndarray:
    """``np.random.default_rng(entropy).lognormal(mean, sigma, shape)``, bit for bit (compiled;
    numpy's own call without numba). ``entropy``: non-negative ints."""
    if njit is None:
        return np.random.default_rng(entropy).lognormal(mean, sigma, shape)
    out = np.empty(shape)
    _lognormal(entropy_words(entropy), float(mean), float(sigma), out.reshape(-1),
               (*_NORMAL_TABLES, np.uint64(_MULT_HI), np.uint64(_MULT_LO)))
    return out


__all__ = ["entropy_words", "lognormal_from_seed", "standard_exponential_f32"]
