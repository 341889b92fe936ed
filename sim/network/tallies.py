"""Per-link tallies of the fabric, brought up to date lazily: the bytes each link has carried and
the seconds it has been busy. A link's rate is constant between two changes, so its tally moves
once per change (:func:`credit`, called before the rate or the flows on the link change), not once
per flow-link pair per event. Compiled with numba where installed, as the kernels that call it
(:mod:`sim.network.flowcore`, :mod:`sim.network.refill`)."""
from __future__ import annotations

from .jit import LEAF, njit


def credit(l, now, link_rate, link_users, link_bytes, link_busy, since):
    """Bring link l's tallies up to ``now``: it has carried ``link_rate[l]`` bytes/s, and been busy if
    any flow was on it (``link_users[l] > 0``), since ``since[l]``."""
    dt = now - since[l]
    if dt > 0.0:
        if link_users[l] > 0:
            link_bytes[l] += link_rate[l] * dt
            link_busy[l] += dt
        since[l] = now


def credit_all(now, link_rate, link_users, link_bytes, link_busy, since):
    """:func:`credit` every link (to read the tallies mid-run)."""
    for l in range(link_rate.size):
        credit(l, now, link_rate, link_users, link_bytes, link_busy, since)


if njit is not None:
    credit = njit(**LEAF)(credit)
    credit_all = njit(cache=True)(credit_all)
