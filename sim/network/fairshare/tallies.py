"""Per-link tallies of the fabric, brought up to date lazily: the bytes each link has carried and
the seconds it has been busy. A link's rate is constant between two changes, so its tally moves
once per change (:func:`credit`, called before the rate or the flows on the link change), not once
per flow-link pair per event."""
from __future__ import annotations

from ..jit import LEAF, njit


def credit(links, l, now):
    """Bring link l's tallies (:class:`~sim.network.fairshare.records.Links`) up to ``now``: it has
    carried ``links.rate[l]`` bytes/s, and been busy if any flow was on it (``links.users[l] > 0``),
    since ``links.since[l]``."""
    dt = now - links.since[l]
    if dt > 0.0:
        if links.users[l] > 0:
            links.carried[l] += links.rate[l] * dt
            links.busy[l] += dt
        links.since[l] = now


def credit_all(links, now):
    """:func:`credit` every link (to read the tallies mid-run)."""
    for l in range(links.rate.size):
        credit(links, l, now)


if njit is not None:
    credit = njit(**LEAF)(credit)
    credit_all = njit(cache=True)(credit_all)

__all__ = ["credit", "credit_all"]
