"""numpy's float32 exponential draws, compiled: the same numbers, about twice as fast.

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

Where numba or those tables are missing, or the generator is not PCG64, numpy draws them.
``tests/test_pcg64.py`` compares the draws and the final state with numpy's, bit for bit.
"""
from __future__ import annotations

import numpy as np

try:                                     # optional: numpy draws them otherwise
    from llvmlite import ir
    from numba import config, njit, types
    from numba.extending import intrinsic
    from numba.np.random._constants import fe_float, ke_float, we_float, ziggurat_exp_r_f
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


def _draws(st, out, ke, we, fe, r_f, mult_hi, mult_lo):
    """Fill ``out`` (float32, 1-D) with exponential draws; ``st`` (uint64[6]): state high, low,
    increment high, low, has_uint32, uinteger, updated in place."""
    m32 = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    s58 = np.uint64(58)
    s63 = np.uint64(63)
    s64 = np.uint64(64)
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
            new_lo = lo * mult_lo         # state x multiplier (mod 2^128), on 64-bit halves
            new_hi = hi * mult_lo + lo * mult_hi + _mulhi(lo, mult_lo)
            lo = new_lo + inc_lo
            hi = new_hi + inc_hi + (one if lo < new_lo else zero)
            rot = hi >> s58
            xored = hi ^ lo
            out64 = (xored >> rot) | (xored << ((s64 - rot) & s63))
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


__all__ = ["standard_exponential_f32"]
