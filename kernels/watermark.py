"""Watermark filter kernel: per-split watermarks, keep-mask, late count.

Semantics (gpuwm/DESIGN.md, "Watermark semantics"): a row's candidate watermark is
``ts - delay`` (the caller folds Flink's extra ``- 1`` into ``delay``). A
split's watermark is the running maximum of its rows' candidates, starting
from the split's previous watermark. A row is late when ``ts < W``
(``inclusive=False``) or ``ts <= W`` (``inclusive=True``), where W is

* ``on-batch``: the split's watermark before this chunk;
* ``on-event``: the split's watermark from the rows before it in arrival
  order (an exclusive, segmented prefix maximum — the RFC pseudo-code).

Null event times never advance a watermark. With ``drop_nulls`` a null row is
dropped when the watermark it is tested against exists, else it passes.

All arrays are int64 on ``xp``; :data:`kernels.xp.NONE` means "no watermark".
No Python loop over rows; the only loops are over splits in a fallback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .order import group_starts
from .window import segmented_cummax
from .xp import INT64_MAX, NONE, _numpy_path, cummax, scatter_max, scatter_min, stable_argsort, to_numpy


@dataclass
class FilterResult:
    keep: Any | None  #: bool mask over rows, None when every row is kept
    watermarks: Any  #: int64 per split, after this chunk (NONE: none yet)
    late: int  #: non-null rows dropped as late
    nulls_dropped: int  #: null rows dropped
    kept: int  #: rows kept
    top: Any = None  #: int64 per split: the chunk's largest non-null event time (NONE: no such row)
    seen: Any = None  #: periodic: int64 per split, the largest candidate so far, emitted or not
    count: Any = None  #: periodic: int64 per split, rows with an event time so far, modulo ``every``


def per_split_max(xp: Any, v: Any, codes: Any | None, nsplits: int, init: Any) -> Any:
    """``max(init[s], max(v[rows of s]))`` for every split s (NONE = empty)."""
    out = init.copy()
    if v.shape[0] == 0:
        return out
    if codes is None:
        m = v.max()
        return xp.maximum(out, m)
    scatter_max(xp, out, codes, v)
    return out


def _segment_exclusive_cummax(xp: Any, v: Any, codes: Any | None, nsplits: int, loop_max: int = 256) -> Any:
    """For every row, the max of ``v`` over the earlier rows of its split
    (NONE where there is none). ``v`` uses NONE for rows that don't count.

    Rows are sorted by split (stable: arrival order inside a split), which
    makes each split a contiguous segment. Up to ``loop_max`` splits, one
    running max per segment (a loop over splits, never rows); beyond, one
    segmented running max over all rows (:func:`kernels.window.segmented_cummax`)."""
    n = v.shape[0]
    out = xp.empty(n, dtype=xp.int64)
    if n == 0:
        return out
    if codes is None or nsplits == 1:
        out[0] = NONE
        if n > 1:
            out[1:] = cummax(xp, v[:-1])
        return out
    # narrow codes sort by radix (numpy) instead of merge sort
    order = stable_argsort(xp, codes.astype(xp.int16) if nsplits < (1 << 15) else codes)
    sv = v[order]
    if nsplits <= loop_max and _numpy_path(xp):  # a device takes the segmented scan: no launches per split
        counts = xp.bincount(codes, minlength=nsplits)
        ends = to_numpy(xp, counts.cumsum()).tolist()
        ex = xp.empty(n, dtype=xp.int64)
        start = 0
        for end in ends:
            if end > start:
                ex[start] = NONE
                if end - start > 1:
                    ex[start + 1 : end] = cummax(xp, sv[start : end - 1])
            start = end
        out[order] = ex
        return out
    sc = codes[order]
    valid = sv != NONE
    # a null stands for "nothing": give it a value below every value of its split
    lo = xp.full(nsplits, INT64_MAX, dtype=xp.int64)
    scatter_min(xp, lo, sc, xp.where(valid, sv, INT64_MAX))  # nulls leave it as it is
    floor = lo[sc] - 1
    first = group_starts(xp, [sc])
    run = segmented_cummax(xp, xp.where(valid, sv, floor), first)
    ex = xp.empty(n, dtype=xp.int64)
    ex[0] = NONE
    ex[1:] = run[:-1]
    out[order] = xp.where(first | (ex == floor), NONE, ex)  # nothing before, or only nulls
    return out


def ts_candidates(xp: Any, src: Any, delay: int, grain: int = 1) -> Any:
    """Each row's watermark candidate of the bounded out-of-orderness
    strategy: ``ts - delay``, ``ts`` first truncated to a multiple of
    ``grain``; :data:`NONE` where ``src`` is (a null event time)."""
    t = src if grain == 1 else xp.where(src != NONE, src - src % grain, NONE)
    return xp.where(t != NONE, t - delay, NONE)


def periodic_points(xp: Any, cand: Any, counted: Any | None, codes: Any | None, nsplits: int, seen: Any,
                    count: Any, every: int) -> tuple[Any, Any, Any]:
    """Periodic emission every ``every`` rows of a split (Flink's
    ``on-periodic``, counted in rows): the watermark a split emits after its
    ``every``-th, ``2 * every``-th, ... row with an event time (the count
    going on across chunks from ``count``), the largest candidate so far —
    ``seen`` before this chunk, then this chunk's rows up to that one.

    Returns (per row: the watermark emitted after it, :data:`NONE` where it
    emits none; per split: the new ``seen``; the new ``count``).

    >>> import numpy as np
    >>> e, seen, count = periodic_points(np, np.array([5, 9, 3, 7, 8]), None, None, 1,
    ...                                  np.array([NONE]), np.array([1]), 2)
    >>> [int(x) if x != NONE else None for x in e], seen.tolist(), count.tolist()
    ([5, None, 9, None, 9], [9], [0])
    """
    n = int(cand.shape[0])
    ones = xp.ones(n, dtype=xp.int64) if counted is None else counted.astype(xp.int64)
    if codes is None or nsplits == 1:
        c = codes if codes is not None else xp.zeros(n, dtype=xp.int64)
        k = xp.cumsum(ones)
    else:
        c = codes
        order = stable_argsort(xp, codes.astype(xp.int16) if nsplits < (1 << 15) else codes)
        so = ones[order]
        first = group_starts(xp, [codes[order]])
        cs = xp.cumsum(so)
        before = xp.where(first, cs - so, 0)  # the running count where each split's segment starts
        k_sorted = cs - cummax(xp, before)
        k = xp.empty(n, dtype=xp.int64)
        k[order] = k_sorted
    incl = xp.maximum(_segment_exclusive_cummax(xp, cand, codes, nsplits), cand)
    incl = xp.maximum(incl, seen[c])
    emits = ((count[c] + k) % every == 0) & (ones > 0)
    e = xp.where(emits, incl, NONE)
    new_seen = per_split_max(xp, cand, codes, nsplits, seen)
    per = xp.bincount(c, weights=ones, minlength=nsplits).astype(xp.int64) if n else xp.zeros(nsplits, xp.int64)
    return e, new_seen, (count + per) % every


def align_admit(xp: Any, n: int, contrib: Any | None, codes: Any | None, nsplits: int, wm: Any,
                bound: int) -> Any | None:
    """Watermark alignment (FLIP-182 pause/resume): the rows each split reads
    in this chunk while the group's bound is ``bound`` (the slowest split's
    watermark plus the drift). A split reads its rows in arrival order while
    its watermark is at most the bound; once a row moves it past the bound
    the split pauses and its later rows are not read (held).

    ``n``: rows in the chunk. ``wm``: int64 per split, its watermark before the chunk. ``contrib``:
    int64 per row, what the row moves its split's watermark to
    (:data:`NONE`: nothing) — its candidate under ``on-event``, its emission
    point under ``on-periodic``; None under ``on-batch`` (the watermark moves
    only after the chunk, so a split reads all its rows or none).

    Returns the bool mask of rows read, or None when every row is.

    >>> import numpy as np
    >>> wm = np.array([0, 0], dtype=np.int64)
    >>> align_admit(np, 4, np.array([5, 20, 3, 9]), np.array([0, 1, 1, 0]), 2, wm, 10).tolist()
    [True, True, False, True]
    """
    w = xp.full(n, wm[0], dtype=xp.int64) if codes is None else wm[codes]
    if contrib is not None:
        w = xp.maximum(_segment_exclusive_cummax(xp, contrib, codes, nsplits), w)
    ok = w <= bound
    return None if bool(ok.all()) else ok


def watermark_filter(
    xp: Any,
    ts: Any,
    valid: Any | None,
    codes: Any | None,
    nsplits: int,
    test_wm: Any,
    prev_wm: Any,
    *,
    delay: int,
    inclusive: bool,
    on_event: bool,
    drop_nulls: bool,
    lateness: int = 0,
    against: int | None = None,
    grain: int = 1,
    cand: Any | None = None,
    periodic: tuple[Any, Any, int] | None = None,
) -> FilterResult:
    """Filter one chunk.

    Parameters
    ----------
    ts : int64 array of event times (any value where ``valid`` is False).
    valid : bool array, or None when no value is null.
    codes : int split code per row (0..nsplits-1), or None for one split.
    test_wm : int64 per split: the watermark rows are tested against before
        this chunk (equals ``prev_wm`` except under a lagging profile).
    prev_wm : int64 per split: the watermark before this chunk, advanced by
        this chunk's rows into the returned ``watermarks``.
    delay : the bounded out-of-orderness, already including any ``- 1``.
    lateness : allowed lateness: a row is tested as ``ts + lateness``.
    against : rows are tested against this watermark instead of their
        split's (one input of several: the inputs' combined watermark, which
        an input back from idleness may be behind; :data:`NONE`: no row is
        late).
    grain : the newest event time is truncated to a multiple of this before
        the delay is taken off (Spark's whole milliseconds; ``on-batch``).
    cand : int64 per row, the row's watermark candidate (:data:`NONE`:
        none) in place of ``ts - delay`` (a watermark expression, or
        punctuation); ``delay`` and ``grain`` then do not apply.
    periodic : ``(seen, count, every)``: the watermark advances only every
        ``every`` rows of a split (:func:`periodic_points`); rows are tested
        against the one emitted last before them (with ``on_event``).

    Examples
    --------
    >>> import numpy as np
    >>> w = np.array([5], dtype=np.int64)
    >>> r = watermark_filter(np, np.array([4, 9, 5, 2]), None, None, 1, w, w,
    ...                      delay=3, inclusive=False, on_event=False, drop_nulls=True)
    >>> r.keep.tolist(), r.watermarks.tolist(), r.late
    ([False, True, True, False], [6], 2)
    """
    n = int(ts.shape[0])
    ts = ts.astype(xp.int64, copy=False)
    # the watermark advance: per-split max of ts, minus the delay (null rows
    # never count); no per-row candidate array is materialised
    src = ts if valid is None else xp.where(valid, ts, NONE)
    top = per_split_max(xp, src, codes, nsplits, xp.full(nsplits, NONE, dtype=xp.int64))
    seen = count = None
    if periodic is not None:
        if cand is None:
            cand = ts_candidates(xp, src, delay, grain)
        emitted, seen, count = periodic_points(xp, cand, valid, codes, nsplits, periodic[0], periodic[1],
                                               periodic[2])
        new_wm = per_split_max(xp, emitted, codes, nsplits, prev_wm)
        cand = emitted  # what rows are tested against: the emission points
    elif cand is None:
        if grain > 1:
            top = xp.where(top != NONE, top - top % grain, top)
        new_wm = xp.where(top != NONE, xp.maximum(prev_wm, top - delay), prev_wm)
    else:  # the candidates as they are; ``top`` still says which splits had rows
        new_wm = per_split_max(xp, cand, codes, nsplits, prev_wm)
    if n == 0:
        return FilterResult(None, new_wm, 0, 0, 0, top, seen, count)

    if on_event:
        if cand is None:
            cand = xp.where(src != NONE, src - delay, NONE) if valid is not None else ts - delay
        prefix = _segment_exclusive_cummax(xp, cand, codes, nsplits)
        base = test_wm if codes is None else test_wm[codes]
        w_row = xp.maximum(prefix, base)
    else:
        w_row = test_wm[0] if codes is None else test_wm[codes]
    if against is not None:
        w_row = against

    t = ts + lateness if lateness else ts
    keep = (t > w_row) if inclusive else (t >= w_row)
    if valid is None:
        nlate = n - int(xp.count_nonzero(keep))
        if nlate == 0:
            return FilterResult(None, new_wm, 0, 0, n, top, seen, count)
        return FilterResult(keep, new_wm, nlate, 0, n - nlate, top, seen, count)
    late = valid & ~keep
    nlate = int(xp.count_nonzero(late))
    if drop_nulls:
        null_drop = ~valid & (w_row != NONE)
        ndrop = int(xp.count_nonzero(null_drop))
    else:
        null_drop, ndrop = None, 0
    if nlate == 0 and ndrop == 0:
        return FilterResult(None, new_wm, 0, 0, n, top, seen, count)
    drop = late if null_drop is None else late | null_drop
    return FilterResult(~drop, new_wm, nlate, ndrop, n - nlate - ndrop, top, seen, count)
