"""Window kernels: assignment, group-reduce of partial aggregates, closing.

Window math is integer arithmetic in the event-time column's unit:

* ``tumble_start(ts, size) = ts - ((ts - offset) mod size)`` (floor mod);
* a hopping window ``[s, s + size)`` with slide ``d`` (``size % d == 0``)
  contains ``ts`` for the ``size // d`` starts ``tumble_start(ts, d) - j*d``;
* a window closes when ``W >= end - close_offset`` (0, or 1 under Flink);
* derived watermarks (RisingWave): ``W(start) = tumble_start(W - (size -
  slide), slide)``, ``W(end) = W(start) + size``.

Partial aggregates are *accumulator columns*, each with a combine op
(``add``, ``min``, ``max``). Aggregating raw rows and merging partials into
state are the same operation — group by key columns, reduce each
accumulator with its op — so one kernel, :func:`group_reduce`, does both.
"""

from __future__ import annotations

from typing import Any, Sequence

from .order import group_starts, order_indices


def tumble_start(xp: Any, ts: Any, size: int, offset: int = 0) -> Any:
    return ts - ((ts - offset) % size)


def tumble_start_scalar(ts: int, size: int, offset: int = 0) -> int:
    return ts - ((ts - offset) % size)


def derive_watermarks(wm: int, size: int, slide: int, offset: int = 0) -> tuple[int, int]:
    """(window_start watermark, window_end watermark) for a watermark on ts.

    >>> derive_watermarks(47, size=30, slide=15)
    (30, 60)
    >>> derive_watermarks(47, size=10, slide=10)
    (40, 50)
    """
    start = tumble_start_scalar(wm - (size - slide), slide, offset)
    return start, start + size


def assign_windows(xp: Any, ts: Any, size: int, slide: int, offset: int = 0) -> tuple[Any, Any]:
    """Expand rows into their windows.

    Returns ``(row, start)``: for every (row, window) pair the row index and
    the window start. Tumbling (``slide == size``) is one window per row.
    The loop is over the ``size // slide`` windows a row belongs to, never
    over rows.

    >>> import numpy as np
    >>> r, s = assign_windows(np, np.array([7, 12]), size=10, slide=5)
    >>> r.tolist(), s.tolist()
    ([0, 1, 0, 1], [5, 10, 0, 5])
    """
    n = ts.shape[0]
    first = tumble_start(xp, ts, slide, offset)
    k = size // slide
    rows = xp.arange(n, dtype=xp.int64)
    if k == 1:
        return rows, first
    return xp.tile(rows, k), xp.concatenate([first - j * slide for j in range(k)])


_REDUCERS = ("add", "min", "max")


def group_reduce(
    xp: Any,
    keys: Sequence[Any],
    accs: Sequence[Any],
    ops: Sequence[str],
) -> tuple[list[Any], list[Any], Any, Any]:
    """Group rows by ``keys`` (int64 arrays) and reduce each accumulator.

    Returns ``(group_keys, reduced_accs, order, starts)``: groups ordered by
    their keys; ``order`` is the row permutation used and ``starts`` the
    index of each group's first row in that order (for callers that reduce
    extra columns the same way).

    >>> import numpy as np
    >>> k, a, _, _ = group_reduce(np, [np.array([2, 1, 2])], [np.array([5, 6, 7])], ["add"])
    >>> k[0].tolist(), a[0].tolist()
    ([1, 2], [6, 12])
    """
    for op in ops:
        if op not in _REDUCERS:
            raise ValueError(f"unknown reducer {op!r}; expected one of {_REDUCERS}")
    n = int(keys[0].shape[0])
    if n == 0:
        return [k[:0] for k in keys], [a[:0] for a in accs], xp.zeros(0, xp.int64), xp.zeros(0, xp.int64)
    order = order_indices(xp, keys)
    sk = [k[order] for k in keys]
    starts = xp.nonzero(group_starts(xp, sk))[0]
    gkeys = [k[starts] for k in sk]
    out = []
    for a, op in zip(accs, ops):
        sa = a[order]
        uf = {"add": xp.add, "min": xp.minimum, "max": xp.maximum}[op]
        out.append(uf.reduceat(sa, starts))
    return gkeys, out, order, starts
