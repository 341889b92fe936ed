"""Indexed binary heaps and grouping by key, the building blocks of the heap fillings
(:mod:`.filling`): a heap holds items (links or flows) ordered by (key, item), with each item's place
kept in ``pos`` (-1 when out), so an item whose key changes moves up or down from where it is.
Compiled without reference counting (``LEAF``, :mod:`sim.network.jit`): they allocate nothing and
sit in the fillings' inner loops.
"""
from __future__ import annotations

import numpy as np

from ..jit import LEAF, njit


def group_by(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, order): the positions of ``keys`` (each in 0..n-1) grouped by key, in increasing
    order within a key, by counting sort: key k's are ``order[indptr[k]:indptr[k + 1]]``."""
    indptr = np.zeros(n + 1, dtype=np.int64)
    for k in keys:
        indptr[k + 1] += 1
    for i in range(n):
        indptr[i + 1] += indptr[i]
    fill = indptr[:-1].copy()
    order = np.empty(keys.size, dtype=np.int64)
    for p in range(keys.size):
        k = keys[p]
        order[fill[k]] = p
        fill[k] += 1
    return indptr, order


def heap_less(key, a, b):
    """Whether item ``a`` comes before item ``b``: the lower key, then the lower item (the order
    of ``(key, item)`` tuples)."""
    return key[a] < key[b] or (key[a] == key[b] and a < b)


def heap_up(heap, pos, key, i):
    """Move the entry at ``i`` of the indexed binary heap up to its place."""
    l = heap[i]
    while i > 0:
        parent = (i - 1) >> 1
        p = heap[parent]
        if not heap_less(key, l, p):
            break
        heap[i] = p
        pos[p] = i
        i = parent
    heap[i] = l
    pos[l] = i


def heap_down(heap, pos, key, i, size):
    """Move the entry at ``i`` of the indexed binary heap (of ``size`` entries) down to its place."""
    l = heap[i]
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        c = heap[child]
        if child + 1 < size and heap_less(key, heap[child + 1], c):
            child += 1
            c = heap[child]
        if not heap_less(key, c, l):
            break
        heap[i] = c
        pos[c] = i
        i = child
    heap[i] = l
    pos[l] = i


def heap_remove(heap, pos, key, l, size):
    """Take item ``l`` out of the heap of ``size`` entries; returns the new size."""
    i = pos[l]
    pos[l] = -1
    size -= 1
    if i == size:
        return size
    last = heap[size]
    heap[i] = last
    pos[last] = i
    if i > 0 and heap_less(key, last, heap[(i - 1) >> 1]):
        heap_up(heap, pos, key, i)
    else:
        heap_down(heap, pos, key, i, size)
    return size


def heapify(heap, pos, key, size):
    """Order the first ``size`` entries of ``heap`` (their ``pos`` set) as a heap."""
    for i in range(size // 2 - 1, -1, -1):
        heap_down(heap, pos, key, i, size)


if njit is not None:
    group_by = njit(cache=True)(group_by)
    heap_less = njit(**LEAF)(heap_less)
    heap_up = njit(**LEAF)(heap_up)
    heap_down = njit(**LEAF)(heap_down)
    heap_remove = njit(**LEAF)(heap_remove)
    heapify = njit(**LEAF)(heapify)

__all__ = ["group_by", "heap_down", "heap_less", "heap_remove", "heap_up", "heapify"]
