"""Interval-join kernels: the matches of probe rows in a build side, by
equal keys and an event-time range, and their expansion into pairs.

``run_ranges`` probes a *run*, build rows already sorted by ``(keys, ts)``
(a join side's state): a ``searchsorted`` on the first key column, then a
binary search within each probe row's block of equal first keys, all probe
rows at once — the cost is the probe rows times the log of a block, not the
run's size. ``interval_ranges`` takes unsorted build rows:

A probe row ``i`` matches build row ``j`` when every key code is equal (and
not null) and ``lo[i] <= ts[j] <= hi[i]``. The matches of each probe row are
one contiguous range of the build side ordered by ``(keys, ts)``; there the ranges
come from one sort of the build rows together with two query rows per probe
row, ``(keys, lo)`` ordered before equal build rows and ``(keys, hi)`` after
them, and a running count of build rows: the count before a query is its
rank among the build rows. No Python loop over rows; the same steps run on
numpy and cupy.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from .order import key_blocks, lex_search, sort_rows
from .xp import NONE


class Ranges(NamedTuple):
    start: Any  #: int64 per probe row: the first match, as a position in ``order``
    count: Any  #: int64 per probe row: how many build rows match
    order: Any  #: int64: build row indexes ordered by (keys, ts, arrival); None: the build rows are in that order


def run_ranges(xp: Any, run_keys: Sequence[Any], run_ts: Any, probe_keys: Sequence[Any], lo: Any, hi: Any) -> Ranges:
    """:func:`interval_ranges` for a run: build rows already ordered by
    ``(keys, ts)`` (ranges are positions in the run; ``order`` is None).

    >>> import numpy as np
    >>> r = run_ranges(np, [np.array([1, 1, 1, 2])], np.array([5, 7, 9, 6]),
    ...                [np.array([1, 2, 3])], np.array([6, 0, 0]), np.array([9, 9, 9]))
    >>> r.start.tolist(), r.count.tolist()
    ([1, 3, 4], [2, 1, 0])
    """
    if not int(run_ts.shape[0]) or not int(lo.shape[0]):
        z = xp.zeros(int(lo.shape[0]), dtype=xp.int64)
        return Ranges(z, z.copy(), None)
    run_keys, probe_keys = _keyed(xp, run_keys, run_ts, probe_keys, lo)
    cols = [*run_keys, run_ts]
    block = key_blocks(xp, cols[0], probe_keys[0])  # one block of equal first keys for both bounds
    start = lex_search(xp, cols, [*probe_keys, lo], block=block)
    count = xp.maximum(lex_search(xp, cols, [*probe_keys, hi], right=True, block=block) - start, 0)
    known = known_keys(xp, probe_keys)
    if known is not None:
        count = xp.where(known, count, 0)
    return Ranges(start, count, None)


def interval_ranges(xp: Any, build_keys: Sequence[Any], build_ts: Any, probe_keys: Sequence[Any],
                    lo: Any, hi: Any) -> Ranges:
    """For each probe row, the build rows with its keys and ``lo <= ts <= hi``.

    All arrays are int64 on ``xp``; a key code of :data:`kernels.NONE` is a
    null key, which matches nothing.

    >>> import numpy as np
    >>> r = interval_ranges(np, [np.array([1, 1, 2, 1])], np.array([5, 9, 6, 7]),
    ...                     [np.array([1, 2, 3])], np.array([6, 0, 0]), np.array([9, 9, 9]))
    >>> r.count.tolist(), r.order[r.start[0]:r.start[0] + r.count[0]].tolist()
    ([2, 1, 0], [3, 1])
    """
    nb = int(build_ts.shape[0])
    npr = int(lo.shape[0])
    if npr == 0 or nb == 0:
        z = xp.zeros(npr, dtype=xp.int64)
        return Ranges(z, z.copy(), xp.zeros(0, dtype=xp.int64))
    build_keys, probe_keys = _keyed(xp, build_keys, build_ts, probe_keys, lo)
    # build rows tag 1; a lower query (tag 0) sorts before build rows with its
    # (keys, lo), an upper query (tag 2) after those with its (keys, hi)
    cols = [xp.concatenate([b, p, p]) for b, p in zip(build_keys, probe_keys)]
    cols.append(xp.concatenate([build_ts, lo, hi]))
    tag = xp.concatenate([xp.ones(nb, dtype=xp.int64), xp.zeros(npr, dtype=xp.int64),
                          xp.full(npr, 2, dtype=xp.int64)])
    cols.append(tag)
    perm, _ = sort_rows(xp, cols)
    is_build = perm < nb
    below = xp.cumsum(is_build.astype(xp.int64)) - is_build  # build rows before each sorted position
    at = xp.empty(nb + 2 * npr, dtype=xp.int64)
    at[perm] = below
    start = at[nb:nb + npr]
    count = xp.maximum(at[nb + npr:] - start, 0)
    known = known_keys(xp, probe_keys)
    if known is not None:
        count = xp.where(known, count, 0)
    return Ranges(start, count, perm[is_build])


def known_keys(xp: Any, keys: Sequence[Any]) -> Any:
    """Rows whose key codes are all known (none :data:`kernels.NONE`, a null
    key, which matches nothing); None for no key columns.

    >>> import numpy as np
    >>> known_keys(np, [np.array([1, NONE, 3]), np.array([4, 5, NONE])]).tolist()
    [True, False, False]
    """
    known = None
    for k in keys:
        known = (k != NONE) if known is None else known & (k != NONE)
    return known


def expand(xp: Any, ranges: Ranges, total: int | None = None) -> tuple[Any, Any]:
    """The matches as pairs ``(probe row, build row)``, probe rows in order,
    each one's build rows in ``(keys, ts, arrival)`` order (one device sync:
    the number of pairs, unless the caller read it: ``total``).

    >>> import numpy as np
    >>> r = Ranges(np.array([0, 2, 1]), np.array([2, 0, 1]), np.array([7, 8, 9]))
    >>> [a.tolist() for a in expand(np, r)]
    [[0, 0, 2], [7, 8, 8]]
    """
    ends = xp.cumsum(ranges.count)
    if total is None:
        total = int(ends[-1]) if ends.shape[0] else 0
    if total == 0:
        z = xp.zeros(0, dtype=xp.int64)
        return z, z.copy()
    k = xp.arange(total, dtype=xp.int64)
    probe = xp.searchsorted(ends, k, side="right")
    at = ranges.start[probe] + (k - (ends - ranges.count)[probe])
    return probe, at if ranges.order is None else ranges.order[at]


def interval_pairs(xp: Any, build_keys: Sequence[Any], build_ts: Any, probe_keys: Sequence[Any],
                   lo: Any, hi: Any) -> tuple[Any, Any]:
    """:func:`interval_ranges` then :func:`expand`: every matching pair."""
    return expand(xp, interval_ranges(xp, build_keys, build_ts, probe_keys, lo, hi))


def _keyed(xp: Any, build_keys: Sequence[Any], build_ts: Any, probe_keys: Sequence[Any],
           lo: Any) -> tuple[Sequence[Any], Sequence[Any]]:
    """The key columns as given, or — a join on the times alone — one key
    every row shares."""
    if build_keys:
        return build_keys, probe_keys
    return [xp.zeros(int(build_ts.shape[0]), dtype=xp.int64)], [xp.zeros(int(lo.shape[0]), dtype=xp.int64)]
