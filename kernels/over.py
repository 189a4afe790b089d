"""Over-window steps on rows sorted into segments (one per partition key), on
numpy or cupy: positions in a segment, the row ``n`` before or after in the
same segment (lag / lead), running sums that restart at every segment (running
extremes: :func:`kernels.window.segmented_cummax`), and the last ``h`` rows
of each segment. No Python loop over rows.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .xp import cummax


class Segments(NamedTuple):
    """``first``: a segment starts at the row; ``seg``: each row's segment
    number; ``pos``: its position in the segment; ``size``: each row's
    segment length."""

    first: Any
    seg: Any
    pos: Any
    size: Any


def segments(xp: Any, first: Any) -> Segments:
    """From a segment-start mask (``first[0]`` True when there are rows).

    >>> import numpy as np
    >>> s = segments(np, np.array([1, 0, 0, 1, 0], bool))
    >>> s.seg.tolist(), s.pos.tolist(), s.size.tolist()
    ([0, 0, 0, 1, 1], [0, 1, 2, 0, 1], [3, 3, 3, 2, 2])
    """
    n = int(first.shape[0])
    seg = xp.cumsum(first) - 1
    starts = xp.flatnonzero(first)
    pos = xp.arange(n, dtype=xp.int64) - starts[seg]
    ends = xp.concatenate([starts[1:], xp.asarray([n], dtype=starts.dtype)])
    size = (ends - starts)[seg]
    return Segments(first, seg, pos, size)


def shifted(xp: Any, s: Segments, n: int) -> tuple[Any, Any]:
    """For each row, the row ``n`` places later in its segment (``n < 0``:
    earlier) and whether there is one: ``(index, hit)``, index clipped into
    range where there is none.

    >>> import numpy as np
    >>> s = segments(np, np.array([1, 0, 0, 1, 0], bool))
    >>> [a.tolist() for a in shifted(np, s, -1)]
    [[0, 0, 1, 0, 3], [False, True, True, False, True]]
    >>> shifted(np, s, 2)[1].tolist()
    [True, False, False, False, False]
    """
    p = s.pos + n
    hit = (p >= 0) & (p < s.size)
    idx = xp.arange(s.pos.shape[0], dtype=xp.int64) + n
    return xp.where(hit, idx, 0), hit


def segmented_cumsum(xp: Any, v: Any, s: Segments) -> Any:
    """Inclusive running sum of ``v`` restarting at every segment.

    >>> import numpy as np
    >>> segmented_cumsum(np, np.array([1, 2, 3, 4, 5]), segments(np, np.array([1, 0, 0, 1, 0], bool))).tolist()
    [1, 3, 6, 4, 9]
    """
    if not v.shape[0]:
        return v.copy()
    c = xp.cumsum(v)
    before = c - v  # the sum before each row
    return c - before[xp.flatnonzero(s.first)][s.seg]


def last_rows(xp: Any, s: Segments, h: int) -> Any:
    """Mask of the last ``h`` rows of each segment.

    >>> import numpy as np
    >>> last_rows(np, segments(np, np.array([1, 0, 0, 1, 0], bool)), 2).tolist()
    [False, True, True, True, True]
    """
    return s.size - s.pos <= h


def ranks(xp: Any, s: Segments, ties: Any, fn: str) -> Any:
    """``row_number`` / ``rank`` / ``dense_rank`` (int64, from 1) of rows
    sorted by (partition, order): ``s`` the partitions' segments, ``ties``
    the mask of each run of equal (partition, order) values' first row.

    >>> import numpy as np
    >>> s = segments(np, np.array([1, 0, 0, 0, 1, 0], bool))
    >>> ties = np.array([1, 0, 1, 1, 1, 1], bool)
    >>> [ranks(np, s, ties, f).tolist() for f in ("row_number", "rank", "dense_rank")]
    [[1, 2, 3, 4, 1, 2], [1, 1, 3, 4, 1, 2], [1, 1, 2, 3, 1, 2]]
    """
    if fn == "row_number":
        return s.pos + 1
    n = int(ties.shape[0])
    if fn == "rank":  # the position of the row's run's first row (runs start at every partition too)
        run = cummax(xp, xp.where(ties, xp.arange(n, dtype=xp.int64), 0)) if n else xp.zeros(0, xp.int64)
        return run - (xp.arange(n, dtype=xp.int64) - s.pos) + 1
    if fn == "dense_rank":
        return segmented_cumsum(xp, ties.astype(xp.int64), s)
    raise ValueError(f"unknown rank function {fn!r}")
