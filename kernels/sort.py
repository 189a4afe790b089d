"""Range-drain sort kernels: cut sorted runs at a watermark, merge the cuts.

The sort buffer is a list of runs, each sorted by ``(ts, keys..., arrival)``
when it was pushed (``O(c log c)`` for a chunk of c rows). Draining at W
costs one binary search per run plus a sort of only the released rows —
never a pass over the rows that stay buffered.
"""

from __future__ import annotations

from typing import Any, Sequence

from .order import sort_rows


def cut(xp: Any, sorted_ts: Any, wm: int, inclusive: bool) -> int:
    """Number of leading rows of a sorted run released at ``wm``:
    rows with ``ts < wm`` (or ``ts <= wm`` when ``inclusive``).

    >>> import numpy as np
    >>> cut(np, np.array([1, 2, 3, 3, 5]), 3, False), cut(np, np.array([1, 2, 3, 3, 5]), 3, True)
    (2, 4)
    """
    side = "right" if inclusive else "left"
    # a Python int: CuPy's searchsorted takes Python scalars or device arrays, not NumPy scalars
    return int(xp.searchsorted(sorted_ts, int(wm), side=side))


def merge_released(xp: Any, cols: Sequence[Any]) -> tuple[Any, list[Any]]:
    """Order of the concatenated released prefixes (oldest run first), and
    the sort columns in that order.

    Ties on every column keep concatenation order, which is arrival order:
    older runs come first and each run keeps arrival order among its ties.
    """
    return sort_rows(xp, cols)


def range_parts(xp: Any, ts: Any, lo: int | None, hi: int, parts: int) -> Any:
    """Which of ``parts`` consecutive event-time ranges each ``ts`` falls in:
    ``[lo, hi)`` cut into ranges of ``ceil((hi - lo) / parts)``; below ``lo``
    is range 0, at or above ``hi`` the last. Non-decreasing in ``ts``, so the
    ranges of an ordered stream are consecutive pieces of it. ``lo`` None (or
    not below ``hi``): everything is range 0.

    >>> import numpy as np
    >>> range_parts(np, np.array([0, 10, 14, 15, 29, 30, 99]), 10, 30, 4).tolist()
    [0, 0, 0, 1, 3, 3, 3]
    """
    n = int(ts.shape[0])
    if parts <= 1 or lo is None or hi <= lo:
        return xp.zeros(n, dtype=xp.int32)
    step = -(-(hi - lo) // parts)
    rel = xp.clip(ts, lo, hi) - lo  # clipped first: no overflow far outside [lo, hi)
    return xp.minimum(rel // step, parts - 1).astype(xp.int32)
