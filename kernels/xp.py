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


def is_numpy(xp: Any) -> bool:
    return xp is np


def to_numpy(xp: Any, a: Any) -> np.ndarray:
    """The explicit device -> host boundary."""
    if is_numpy(xp):
        return np.asarray(a)
    return xp.asnumpy(a)


def scalar(a: Any) -> int:
    """A 0-d array (host or device) as a Python int."""
    return int(a)


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


def scatter_max(xp: Any, out: Any, idx: Any, vals: Any) -> None:
    """``out[idx] = max(out[idx], vals)`` with repeated indices."""
    if is_numpy(xp):
        np.maximum.at(out, idx, vals)
    else:
        import cupyx

        cupyx.scatter_max(out, idx, vals)


def scatter_min(xp: Any, out: Any, idx: Any, vals: Any) -> None:
    """``out[idx] = min(out[idx], vals)`` with repeated indices."""
    if is_numpy(xp):
        np.minimum.at(out, idx, vals)
    else:
        import cupyx

        cupyx.scatter_min(out, idx, vals)


def scatter_add(xp: Any, out: Any, idx: Any, vals: Any) -> None:
    """``out[idx] += vals`` with repeated indices."""
    if is_numpy(xp):
        np.add.at(out, idx, vals)
    else:
        import cupyx

        cupyx.scatter_add(out, idx, vals)


def bits_for(span: int) -> int:
    """Bits needed to hold every integer in ``[0, span]``."""
    return max(int(span).bit_length(), 1)
