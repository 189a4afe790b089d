"""Row ordering and grouping by several int64 columns, on numpy or cupy.

``order_indices`` is the one sort every operator uses: it returns the
permutation that orders rows by ``(cols[0], cols[1], ..., arrival position)``
— a total, deterministic order, so a replayed micro-batch reproduces its
output exactly.

Fast path: when the value ranges of all columns plus the row index fit in 64
bits, they are packed into one ``uint64`` per row and sorted once; the row
index sits in the low bits, so the sorted words *are* the permutation (no
separate argsort, no stability needed). Otherwise: one stable argsort per
column, least significant first (the LSD shim).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .xp import bits_for, sort_unique, stable_argsort

_U64_MASK = (1 << 64) - 1


def _ranges(xp: Any, cols: Sequence[Any]) -> list[tuple[int, int]]:
    # one device->host sync per column for min and max: O(columns), not rows
    return [(int(c.min()), int(c.max())) for c in cols]


def order_indices(xp: Any, cols: Sequence[Any]) -> Any:
    """Permutation ordering rows by ``cols`` (int64 arrays), ties by position.

    >>> import numpy as np
    >>> order_indices(np, [np.array([3, 1, 3, 1]), np.array([0, 5, -1, 5])]).tolist()
    [1, 3, 2, 0]
    """
    n = int(cols[0].shape[0])
    if n == 0:
        return xp.zeros(0, dtype=xp.int64)
    ranges = _ranges(xp, cols)
    idx_bits = bits_for(n - 1)
    widths = [bits_for(hi - lo) for lo, hi in ranges]
    if sum(widths) + idx_bits <= 64:
        word = xp.arange(n, dtype=xp.uint64)
        shift = idx_bits
        for c, (lo, _), w in zip(reversed(cols), reversed(ranges), reversed(widths)):
            rel = c.astype(xp.int64).view(xp.uint64) - xp.uint64(lo & _U64_MASK)
            word |= rel << xp.uint64(shift)
            shift += w
        word = sort_unique(xp, word)
        return (word & xp.uint64((1 << idx_bits) - 1)).astype(xp.int64)
    # LSD shim: stable sorts, least significant column first
    perm = xp.arange(n, dtype=xp.int64)
    for c in reversed(cols):
        perm = perm[stable_argsort(xp, c[perm])]
    return perm


def group_starts(xp: Any, sorted_cols: Sequence[Any]) -> Any:
    """Boolean mask of the first row of each run of equal keys (rows sorted)."""
    n = int(sorted_cols[0].shape[0])
    flag = xp.zeros(n, dtype=bool)
    if n == 0:
        return flag
    flag[0] = True
    for c in sorted_cols:
        flag[1:] |= c[1:] != c[:-1]
    return flag
