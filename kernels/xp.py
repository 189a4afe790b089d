"""Array-namespace helpers shared by every kernel.

Every kernel takes ``xp`` (``numpy`` or ``cupy``) and runs the same steps on
both. Where the two modules differ, the difference lives here, in a small,
named shim with one behaviour — never a second algorithm.

No module-level cupy import: a kernel only ever sees the module it was given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Sentinel for "no watermark yet" / "no value" in int64 event-time arrays.
NONE = np.iinfo(np.int64).min
INT64_MAX = np.iinfo(np.int64).max


#: Tests set this to run the CuPy side of the shims below on NumPy (the
#: ``gpu-sim`` backend), so that the algorithms CuPy gets are checked in CI.
CUPY_BRANCHES = False


def is_numpy(xp: Any) -> bool:
    return xp is np


def _numpy_path(xp: Any) -> bool:
    return is_numpy(xp) and not CUPY_BRANCHES


def to_numpy(xp: Any, a: Any) -> np.ndarray:
    """The explicit device -> host boundary."""
    if is_numpy(xp):
        return np.asarray(a)
    return xp.asnumpy(a)


def scalar(a: Any) -> int:
    """A 0-d array (host or device) as a Python int."""
    return int(a)


def mask_index(xp: Any, mask: Any, count: int) -> Any:
    """Positions of the ``count`` True entries of ``mask`` (``count`` already
    on the host): ``flatnonzero`` without the second read of the count that
    CuPy's (and each boolean-mask index) makes. Gathers by these positions
    then select rows from any number of columns with no further sync.

    >>> mask_index(np, np.array([False, True, True, False, True]), 3).tolist()
    [1, 2, 4]
    """
    if _numpy_path(xp):
        return np.flatnonzero(mask)
    out = xp.empty(count + 1, dtype=xp.int64)
    at = xp.where(mask, xp.cumsum(mask, dtype=xp.int64) - 1, count)  # the others all land in slot ``count``
    out[at] = xp.arange(mask.shape[0])
    return out[:count]


def stable_argsort(xp: Any, a: Any) -> Any:
    """Stable argsort: numpy needs ``kind='stable'``; cupy is always stable."""
    if is_numpy(xp):
        return np.argsort(a, kind="stable")
    return xp.argsort(a)


def sort_unique(xp: Any, a: Any) -> Any:
    """Sort of values known to be distinct: stability is irrelevant, so numpy
    may use its (SIMD) quicksort; cupy's radix sort is used as is."""
    if is_numpy(xp):
        return np.sort(a)
    return xp.sort(a)


def _ordered_bits(xp: Any, a: Any) -> Any:
    """Floats as signed integers of the same width in the same order
    (IEEE 754: flip the magnitude bits of negatives); its own inverse."""
    it = xp.int64 if a.dtype.itemsize == 8 else xp.int32
    b = a.view(it)
    return xp.where(b < 0, b ^ xp.iinfo(it).max, b)


def _scatter_extreme(xp: Any, out: Any, idx: Any, vals: Any, op: str) -> None:
    """``out[idx] = op(out[idx], vals)`` with repeated indices, as NumPy's
    ``maximum.at``/``minimum.at`` give it (NaN propagates).

    On CuPy, floats go through integer atomics on their ordered bits: CuPy
    14's float64 ``maximum.at`` (and ``scatter_max``) returned values
    rounded to float32 precision on an H100 (0.13959463899653946 ->
    0.1395946443080902), which no aggregate may do."""
    uf = xp.maximum if op == "max" else xp.minimum
    if _numpy_path(xp):
        uf.at(out, idx, vals)
        return
    if out.dtype.kind == "f" and out.dtype.itemsize in (4, 8):
        vals = xp.asarray(vals).astype(out.dtype, copy=False)
        keys = _ordered_bits(xp, out)
        _scatter_int(xp, keys, idx, _ordered_bits(xp, vals), op)
        nan = xp.isnan(out).astype(xp.int32)
        _scatter_int(xp, nan, idx, xp.isnan(vals).astype(xp.int32), "max")
        res = _ordered_bits(xp, keys).view(out.dtype)
        out[...] = xp.where(nan > 0, xp.asarray(np.nan, dtype=out.dtype), res)
        return
    _scatter_int(xp, out, idx, vals, op)


def _scatter_int(xp: Any, out: Any, idx: Any, vals: Any, op: str) -> None:
    uf = xp.maximum if op == "max" else xp.minimum
    if is_numpy(xp) or hasattr(uf, "at"):  # CuPy >= 13 has ufunc.at; scatter_max/min are deprecated there
        uf.at(out, idx, vals)
    else:
        import cupyx

        (cupyx.scatter_max if op == "max" else cupyx.scatter_min)(out, idx, vals)


def scatter_max(xp: Any, out: Any, idx: Any, vals: Any) -> None:
    """``out[idx] = max(out[idx], vals)`` with repeated indices."""
    _scatter_extreme(xp, out, idx, vals, "max")


def scatter_min(xp: Any, out: Any, idx: Any, vals: Any) -> None:
    """``out[idx] = min(out[idx], vals)`` with repeated indices."""
    _scatter_extreme(xp, out, idx, vals, "min")


def scatter_add(xp: Any, out: Any, idx: Any, vals: Any) -> None:
    """``out[idx] += vals`` with repeated indices."""
    if is_numpy(xp) or hasattr(xp.add, "at"):  # CuPy >= 13 has ufunc.at; scatter_add is deprecated there
        xp.add.at(out, idx, vals)
    else:
        import cupyx

        cupyx.scatter_add(out, idx, vals)


def bits_for(span: int) -> int:
    """Bits needed to hold every integer in ``[0, span]``."""
    return max(int(span).bit_length(), 1)


# CuPy implements ufunc.accumulate and ufunc.reduceat for ``add`` only
# (cupy/cupy#7082); running maxima and per-run min/max go through these.
def cummax(xp: Any, a: Any) -> Any:
    """Inclusive running maximum of a 1-d array. NumPy: ``maximum.accumulate``;
    CuPy: log2(n) doubling steps (Hillis-Steele), each one elementwise pass
    — a few passes over memory at GPU bandwidth.

    >>> cummax(np, np.array([3, 1, 4, 1, 5])).tolist()
    [3, 3, 4, 4, 5]
    """
    if _numpy_path(xp):
        return np.maximum.accumulate(a)
    out = a.copy()
    n = int(a.shape[0])
    d = 1
    while d < n:
        out[d:] = xp.maximum(out[d:], out[:-d])  # the right side is evaluated first: a new array
        d *= 2
    return out


def reduceat(xp: Any, op: str, a: Any, starts: Any) -> Any:
    """``ufunc.reduceat(a, starts)`` for runs that are not empty (``starts``
    strictly increasing, the first 0), ``op`` in add/min/max. CuPy has
    ``add.reduceat`` only: min and max scatter into one slot per run there.

    >>> reduceat(np, "max", np.array([3, 1, 4, 1, 5]), np.array([0, 2])).tolist()
    [3, 5]
    """
    uf = {"add": xp.add, "min": xp.minimum, "max": xp.maximum}[op]
    if _numpy_path(xp) or (op == "add" and not is_numpy(xp)):
        return uf.reduceat(a, starts)
    n = int(a.shape[0])
    mark = xp.zeros(n, dtype=xp.int64)
    mark[starts[1:]] = 1
    run = xp.cumsum(mark)  # each row's run
    if op == "add":
        out = xp.zeros(int(starts.shape[0]), dtype=a.dtype)
        scatter_add(xp, out, run, a)
        return out
    out = a[starts].copy()
    (scatter_max if op == "max" else scatter_min)(xp, out, run, a)
    return out
