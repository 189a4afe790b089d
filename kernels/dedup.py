"""Key membership for deduplication, on numpy or cupy.

``lookup`` finds chunk keys in a run of distinct keys sorted by
:func:`~kernels.order.sort_rows` (one column: a binary search per key; several:
the run and the keys ordered together, a key's match the run row that starts
its group). No Python loop over rows.
"""

from __future__ import annotations

from typing import Any, Sequence

from .order import group_starts, sort_rows


def lookup(xp: Any, run: Sequence[Any], keys: Sequence[Any]) -> Any:
    """For each row of ``keys``, the position of the equal row of ``run``
    (distinct rows, ordered by ``sort_rows``), or -1.

    >>> import numpy as np
    >>> lookup(np, [np.array([2, 5, 9])], [np.array([5, 1, 9, 10])]).tolist()
    [1, -1, 2, -1]
    >>> lookup(np, [np.array([1, 1, 2]), np.array([4, 6, 4])], [np.array([1, 2, 1]), np.array([6, 6, 4])]).tolist()
    [1, -1, 0]
    """
    nr, nq = int(run[0].shape[0]), int(keys[0].shape[0])
    if nr == 0 or nq == 0:
        return xp.full(nq, -1, dtype=xp.int64)
    if len(run) == 1:
        r, q = run[0], keys[0]
        pos = xp.searchsorted(r, q)
        at = xp.minimum(pos, nr - 1)
        return xp.where(r[at] == q, at, -1)
    both = [xp.concatenate([a, b]) for a, b in zip(run, keys)]
    perm, skeys = sort_rows(xp, both)  # equal keys: the run's row first (it comes first)
    starts = group_starts(xp, skeys)
    head = perm[xp.flatnonzero(starts)]  # each group's first row
    match = xp.where(head < nr, head, -1)[xp.cumsum(starts) - 1]  # per sorted row: its group's run row
    out = xp.empty(nq, dtype=xp.int64)
    is_key = perm >= nr
    out[perm[is_key] - nr] = match[is_key]
    return out
