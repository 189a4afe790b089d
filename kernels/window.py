"""Window kernels: assignment, group-reduce of partial aggregates, closing.

Window math is integer arithmetic in the event-time column's unit:

* ``tumble_start(ts, size) = ts - ((ts - offset) mod size)`` (floor mod);
* a hopping window ``[s, s + size)`` with slide ``d`` (``size % d == 0``)
  contains ``ts`` for the ``size // d`` starts ``tumble_start(ts, d) - j*d``;
* a window closes when ``W >= end - close_offset`` (0, or 1 under Flink);
* derived watermarks (RisingWave): ``W(start) = tumble_start(W - (size -
  slide), slide)``, ``W(end) = W(start) + size``.

Partial aggregates are *accumulator columns*, each with a combine op
(``add``, ``min``, ``max``, or ``first`` / ``last``: the value of the
group's first / last row in input order — the grouping is stable, so a
merge that puts the state's partials before the new ones keeps Spark's
``first``/``last``). Aggregating raw rows and merging partials into
state are the same operation — group by key columns, reduce each
accumulator with its op — so one kernel, :func:`group_reduce`, does both.
"""

from __future__ import annotations

from typing import Any, Sequence

from .order import group_starts, order_indices, sort_rows, value_ranges
from .xp import cummax, reduceat


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


def assign_windows(xp: Any, ts: Any, size: int, slide: int) -> tuple[Any, Any]:
    """Expand rows into their windows.

    Returns ``(row, index)``: for every (row, window) pair the row index and
    the window's index ``start // slide`` (windows are aligned to the epoch;
    ``start = index * slide``). Tumbling (``slide == size``) is one window per
    row. The loop is over the ``size // slide`` windows a row belongs to,
    never over rows.

    >>> import numpy as np
    >>> r, w = assign_windows(np, np.array([7, 12]), size=10, slide=5)
    >>> r.tolist(), (w * 5).tolist()
    ([0, 0, 1, 1], [5, 0, 10, 5])
    """
    n = ts.shape[0]
    first = ts // slide  # floor division: negative times too
    k = size // slide
    rows = xp.arange(n, dtype=xp.int64)
    if k == 1:
        return rows, first
    # row-major (each row's k windows together): a window's rows stay in input order (first / last)
    return xp.repeat(rows, k), (first[:, None] - xp.arange(k, dtype=first.dtype)[None, :]).reshape(-1)


_REDUCERS = ("add", "min", "max", "first", "last")


def group_reduce(
    xp: Any,
    keys: Sequence[Any],
    accs: Sequence[Any],
    ops: Sequence[str],
    allow_dense: bool = True,
) -> tuple[list[Any], list[Any], Any, Any]:
    """Group rows by ``keys`` (int64 arrays) and reduce each accumulator.

    An accumulator given as ``None`` (op ``"add"``) counts rows: the reduce of
    a column of ones, without materialising or scattering it (the group
    sizes fall out of the grouping itself).

    Returns ``(group_keys, reduced_accs, order, starts)``: groups ordered by
    their keys; ``order`` is the row permutation used and ``starts`` the
    index of each group's first row in that order (for callers that reduce
    extra columns the same way; None when the dense direct-address path ran).

    >>> import numpy as np
    >>> k, a, _, _ = group_reduce(np, [np.array([2, 1, 2])], [np.array([5, 6, 7])], ["add"])
    >>> k[0].tolist(), a[0].tolist()
    ([1, 2], [6, 12])
    """
    for a, op in zip(accs, ops):
        if op not in _REDUCERS:
            raise ValueError(f"unknown reducer {op!r}; expected one of {_REDUCERS}")
        if a is None and op != "add":
            raise ValueError("a None accumulator counts rows: its reducer must be 'add'")
    n = int(keys[0].shape[0])
    if n == 0:
        return ([k[:0] for k in keys], [xp.zeros(0, xp.int64) if a is None else a[:0] for a in accs],
                xp.zeros(0, xp.int64), xp.zeros(0, xp.int64))
    ranges = value_ranges(xp, keys)
    cells = 1
    for lo, hi in ranges:
        cells *= hi - lo + 1
    if allow_dense and cells <= max(2 * n, 1 << 16):
        gk, ga = _dense_reduce(xp, keys, accs, ops, ranges, cells)
        return gk, ga, None, None
    order = order_indices(xp, keys)
    sk = [k[order] for k in keys]
    starts = xp.nonzero(group_starts(xp, sk))[0]
    gkeys = [k[starts] for k in sk]
    return gkeys, reduce_runs(xp, accs, ops, order, starts), order, starts


def reduce_runs(xp: Any, accs: Sequence[Any], ops: Sequence[str], order: Any, starts: Any) -> list[Any]:
    """Reduce each accumulator over runs of rows: the rows taken in ``order``,
    one run from each index of ``starts`` (ascending, the first one 0) to the
    next. A None accumulator counts the rows of each run.

    >>> import numpy as np
    >>> [a.tolist() for a in reduce_runs(np, [None, np.array([4, 1, 3])], ["add", "min"],
    ...                                  np.array([2, 0, 1]), np.array([0, 2]))]
    [[2, 1], [3, 1]]
    """
    n = int(order.shape[0])
    out = []
    sizes = None
    for a, op in zip(accs, ops):
        if a is None:
            if sizes is None:
                sizes = xp.diff(xp.concatenate([starts, xp.asarray([n], dtype=starts.dtype)])).astype(xp.int64)
            out.append(sizes)
            continue
        if op in ("first", "last"):  # the run's first / last row in ``order`` (a stable sort: input order)
            at = starts if op == "first" else xp.concatenate([starts[1:], xp.asarray([n], dtype=starts.dtype)]) - 1
            out.append(a[order[at]])
            continue
        out.append(reduceat(xp, op, a[order], starts))
    return out


def segmented_cummax(xp: Any, v: Any, first: Any) -> Any:
    """Inclusive running maximum of ``v`` (int64) that restarts at every row
    where ``first`` is True (``first[0]`` must be True).

    One running maximum (:func:`kernels.xp.cummax`) over values lifted into
    disjoint per-segment ranges when the ranges fit in int64; else log2(n) doubling steps (a
    segmented Hillis-Steele scan). No loop over rows or segments.

    >>> import numpy as np
    >>> segmented_cummax(np, np.array([3, 1, 5, 2, 0, 7]), np.array([1, 0, 0, 1, 0, 1], bool)).tolist()
    [3, 3, 5, 2, 2, 7]
    """
    n = int(v.shape[0])
    if n == 0:
        return v.copy()
    starts = xp.nonzero(first)[0]
    lo = reduceat(xp, "min", v, starts)
    hi = reduceat(xp, "max", v, starts)
    # the lift needs the sum of the spans (hi - lo + 1, each >= 1) below 2**63:
    # checked in float64, where a span cannot overflow
    if float((hi.astype(xp.float64) - lo.astype(xp.float64) + 1).sum()) < 2.0 ** 62:
        span = hi - lo + 1
        base = xp.cumsum(span) - span
        seg = xp.cumsum(first) - 1
        shift = base - lo  # per segment: value -> base + (value - lo)
        lifted = v + shift[seg]
        return cummax(xp, lifted) - shift[seg]
    seg = xp.cumsum(first)
    out = v.copy()
    d = 1
    while d < n:
        nxt = out.copy()
        same = seg[d:] == seg[:-d]
        nxt[d:] = xp.where(same, xp.maximum(out[d:], out[:-d]), out[d:])
        out = nxt
        d *= 2
    return out


def sessionize(xp: Any, keys: Sequence[Any], start: Any, end: Any | int) -> tuple[Any, Any, list[Any], Any, Any]:
    """Merge intervals ``[start, end]`` per key into sessions.

    Rows are ordered by ``(keys, start)``; a row joins the session before it
    (same key) when ``start <= `` the largest ``end`` so far in that session
    — intervals that overlap or touch merge, as in Spark's and Flink's
    session windows. Merging is associative: sessions of partial sessions
    are the sessions of their rows. ``end`` may be an int ``gap``: every
    interval is ``[start, start + gap]`` (raw rows), and the largest end so
    far is the previous row's, with no running maximum.

    Returns ``(order, starts, keys, start, end)``: the permutation ordering
    the rows, the index (in that order) of each session's first row — the
    runs :func:`reduce_runs` reduces — and each session's keys, start and
    end. Sessions come out ordered by (keys, start).

    >>> import numpy as np
    >>> ts = np.array([20, 0, 5, 31, 9])
    >>> order, starts, (k,), s, e = sessionize(np, [np.array([1, 1, 1, 1, 2])], ts, 10)
    >>> ts[order].tolist(), starts.tolist(), k.tolist(), s.tolist(), e.tolist()
    ([0, 5, 20, 31, 9], [0, 2, 3, 4], [1, 1, 1, 2], [0, 20, 31, 9], [15, 30, 41, 19])
    """
    n = int(start.shape[0])
    if n == 0:
        z = xp.zeros(0, xp.int64)
        return z, z, [k[:0] for k in keys], z, z
    order, sorted_cols = sort_rows(xp, list(keys) + [start])
    s = sorted_cols[-1]
    key_first = group_starts(xp, sorted_cols[:-1]) if keys else _first_only(xp, n)
    first = key_first.copy()
    if isinstance(end, int):
        first[1:] |= s[1:] > s[:-1] + end
        starts = xp.nonzero(first)[0]
        last = xp.concatenate([starts[1:] - 1, xp.asarray([n - 1], dtype=starts.dtype)])
        send = s[last] + end
    else:
        e = end[order]
        reach = segmented_cummax(xp, e, key_first)  # per key: the largest end up to each row
        first[1:] |= s[1:] > reach[:-1]
        starts = xp.nonzero(first)[0]
        send = reduceat(xp, "max", e, starts)
    return order, starts, [k[starts] for k in sorted_cols[:-1]], s[starts], send


def in_intervals(xp: Any, keys: Sequence[Any], ts: Any, ikeys: Sequence[Any], lo: Any, hi: Any) -> Any:
    """Which rows ``(keys, ts)`` fall in an interval ``[lo, hi]`` of their
    key (``ikeys``); the intervals of a key must not overlap. One sort of
    intervals and rows together (an interval just before the rows at its
    ``lo``) and a running maximum: each row meets the last interval before it.

    >>> import numpy as np
    >>> in_intervals(np, [np.array([1, 1, 2, 1])], np.array([5, 12, 6, 9]),
    ...              [np.array([1, 2])], np.array([4, 7]), np.array([9, 9])).tolist()
    [True, False, False, True]
    """
    n, m = int(ts.shape[0]), int(lo.shape[0])
    if n == 0 or m == 0:
        return xp.zeros(n, dtype=bool)
    cols = [xp.concatenate([ik, k]) for ik, k in zip(ikeys, keys)]
    t = xp.concatenate([lo, ts])
    kind = xp.concatenate([xp.zeros(m, dtype=xp.int64), xp.ones(n, dtype=xp.int64)])
    order = order_indices(xp, [*cols, t, kind])
    is_iv = order < m
    last = cummax(xp, xp.where(is_iv, xp.arange(n + m), -1))  # position of the last interval so far
    at = xp.maximum(last, 0)
    inside = (last >= 0) & ~is_iv & (t[order] <= hi[xp.minimum(order[at], m - 1)])
    for c in cols:
        inside &= c[order] == c[order[at]]
    out = xp.zeros(n, dtype=bool)
    rows = ~is_iv
    out[order[rows] - m] = inside[rows]
    return out


def _first_only(xp: Any, n: int) -> Any:
    f = xp.zeros(n, dtype=bool)
    f[0] = True
    return f


def _dense_reduce(xp, keys, accs, ops, ranges, cells):
    """Direct-address twin of the sort path, for key ranges that are dense
    (``cells`` = product of the key ranges, at most ~2 rows per cell): each
    row scatters into its cell, occupied cells in key order are the groups.
    Same output as sorting; O(rows + cells), no permutation of the rows."""
    from .xp import scatter_add, scatter_max, scatter_min

    strides = []
    stride = 1
    for (lo, hi) in reversed(ranges):
        strides.append(stride)
        stride *= hi - lo + 1
    strides.reverse()
    cell = None
    for k, (lo, _), st in zip(keys, ranges, strides):  # one temporary per key, the rest in place
        term = k - lo
        if st != 1:
            term *= st
        if cell is None:
            cell = term
        else:
            cell += term
    counts = xp.bincount(cell, minlength=cells)
    occupied = xp.nonzero(counts)[0]
    gkeys = [(occupied // st) % (hi - lo + 1) + lo for (lo, hi), st in zip(ranges, strides)]
    out = []
    pos = None  # first / last: each occupied cell's first and last row
    for a, op in zip(accs, ops):
        if a is None:  # a row count: the bincount above
            out.append(counts[occupied].astype(xp.int64))
            continue
        if op == "add":
            acc = xp.zeros(cells, dtype=a.dtype)
            scatter_add(xp, acc, cell, a)
        elif op in ("first", "last"):  # each cell's lowest / highest row position
            if pos is None:
                n = int(cell.shape[0])
                rows = xp.arange(n, dtype=xp.int64)
                pos = {"first": xp.full(cells, n, dtype=xp.int64), "last": xp.full(cells, -1, dtype=xp.int64)}
                scatter_min(xp, pos["first"], cell, rows)
                scatter_max(xp, pos["last"], cell, rows)
                pos = {k: v[occupied] for k, v in pos.items()}
            out.append(a[pos[op]])
            continue
        else:
            info = xp.finfo(a.dtype) if a.dtype.kind == "f" else xp.iinfo(a.dtype)
            ident = (info.max if op == "min" else info.min) if a.dtype.kind != "f" else (
                xp.inf if op == "min" else -xp.inf)
            acc = xp.full(cells, ident, dtype=a.dtype)
            (scatter_min if op == "min" else scatter_max)(xp, acc, cell, a)
        out.append(acc[occupied])
    return gkeys, out
