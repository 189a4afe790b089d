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

from typing import Any, NamedTuple, Sequence

from .xp import _numpy_path, bits_for, sort_unique, stable_argsort, to_numpy

_U64_MASK = (1 << 64) - 1


def value_ranges(xp: Any, cols: Sequence[Any]) -> list[tuple[int, int]]:
    """(min, max) of each (non-empty) integer column as Python ints: on a
    device, all of them in one copy to the host (one sync, whatever the
    number of columns).

    >>> import numpy as np
    >>> value_ranges(np, [np.array([3, 1, 2]), np.array([-5, 9])])
    [(1, 3), (-5, 9)]
    """
    if _numpy_path(xp) or any(c.dtype == xp.uint64 for c in cols):  # uint64 does not fit the int64 stack
        return [(int(c.min()), int(c.max())) for c in cols]
    ends = to_numpy(xp, xp.stack([e.astype(xp.int64) for c in cols for e in (c.min(), c.max())])).tolist()
    return list(zip(ends[0::2], ends[1::2]))


def order_indices(xp: Any, cols: Sequence[Any]) -> Any:
    """Permutation ordering rows by ``cols`` (int64 arrays), ties by position.

    >>> import numpy as np
    >>> order_indices(np, [np.array([3, 1, 3, 1]), np.array([0, 5, -1, 5])]).tolist()
    [1, 3, 2, 0]
    """
    return sort_rows(xp, cols)[0]


def sort_rows(xp: Any, cols: Sequence[Any]) -> tuple[Any, list[Any]]:
    """``(perm, [c[perm] for c in cols])``, the sorted columns recovered from
    the packed sort words where possible (a streaming pass instead of a
    random gather per column).

    >>> import numpy as np
    >>> p, (a, b) = sort_rows(np, [np.array([3, 1, 3, 1]), np.array([0, 5, -1, 5])])
    >>> p.tolist(), a.tolist(), b.tolist()
    ([1, 3, 2, 0], [1, 1, 3, 3], [5, 5, -1, 0])
    """
    n = int(cols[0].shape[0])
    if n == 0:
        return xp.zeros(0, dtype=xp.int64), [c[:0].astype(xp.int64) for c in cols]
    ranges = value_ranges(xp, cols)
    widths = [bits_for(hi - lo) for lo, hi in ranges]
    key_bits = sum(widths)
    if key_bits <= 63:
        idx_bits = bits_for(n - 1)
        single = key_bits + idx_bits <= 64
        # build the words in place: [key columns | row index] when they fit
        word = xp.arange(n, dtype=xp.uint64) if single else xp.zeros(n, dtype=xp.uint64)
        _pack(xp, word, cols, ranges, widths, idx_bits if single else 0)
        if single:
            word = sort_unique(xp, word)
            keys, base = word, idx_bits
        else:
            perm, keys = _sort_packed(xp, word, key_bits)
            base = 0
        out = []
        shift = base
        for (lo, _), w in zip(reversed(ranges), reversed(widths)):
            col = keys >> xp.uint64(shift)
            col &= xp.uint64((1 << w) - 1)
            col += xp.uint64(lo & _U64_MASK)
            out.append(col.view(xp.int64))
            shift += w
        if single:
            word &= xp.uint64((1 << idx_bits) - 1)  # last use of the words: in place
            perm = word.view(xp.int64)
        return perm, out[::-1]
    # LSD shim: stable sorts, least significant column first
    perm = xp.arange(n, dtype=xp.int64)
    for c in reversed(cols):
        perm = perm[stable_argsort(xp, c[perm])]
    return perm, [c[perm] for c in cols]


def _pack(xp: Any, word: Any, cols: Sequence[Any], ranges: list[tuple[int, int]], widths: list[int],
          shift: int) -> Any:
    """``word`` with ``cols`` (above their minimum, ``widths`` bits each,
    the last column lowest) or-ed in from bit ``shift`` up, in place."""
    for c, (lo, _), w in zip(reversed(cols), reversed(ranges), reversed(widths)):
        rel = c.astype(xp.int64, copy=False).view(xp.uint64) - xp.uint64(lo & _U64_MASK)
        if shift:
            rel <<= xp.uint64(shift)
        word |= rel
        del rel
        shift += w
    return word


def _sort_packed(xp: Any, word: Any, key_bits: int) -> tuple[Any, Any]:
    """Stable argsort of packed keys (< 2**63), and the sorted keys.

    The row index goes into the free low bits so that one sort of distinct
    words yields the permutation. When key + index bits exceed 64, rows are
    cut into pieces small enough for their local index to fit; each piece is
    sorted that way, and the sorted pieces are merged by one stable sort of
    their keys (runs that a merge sort consumes in ``O(n log pieces)``). A
    device, whose sort is a radix sort of pairs, sorts the keys with their
    positions in one stable pass instead.
    """
    n = int(word.shape[0])
    idx_bits = 64 - key_bits
    piece = 1 << idx_bits
    if not _numpy_path(xp) and n > piece:
        # a device sorts (key, index) pairs in one radix pass; pieces would be a
        # sort launch each (4,308 of them for 600 k rows of a 57-bit key: 14 s)
        perm = stable_argsort(xp, word)
        return perm, word[perm]
    if n <= piece:
        return _sort_piece(xp, word, 0, n, idx_bits)
    perms, keys = [], []
    for a in range(0, n, piece):
        p, k = _sort_piece(xp, word, a, min(a + piece, n), idx_bits)
        perms.append(p)
        keys.append(k)
    allkeys = xp.concatenate(keys)
    merge = stable_argsort(xp, allkeys)
    return xp.concatenate(perms)[merge], allkeys[merge]


def _sort_piece(xp: Any, word: Any, a: int, b: int, idx_bits: int) -> tuple[Any, Any]:
    local = xp.arange(b - a, dtype=xp.uint64)
    w = sort_unique(xp, (word[a:b] << xp.uint64(idx_bits)) | local)
    mask = xp.uint64((1 << idx_bits) - 1)
    return (w & mask).astype(xp.int64) + a, w >> xp.uint64(idx_bits)


def key_blocks(xp: Any, col: Any, query: Any) -> tuple[Any, Any]:
    """For each query value, the block ``[lo, hi)`` of rows of sorted
    ``col`` equal to it (two ``searchsorted``)."""
    return xp.searchsorted(col, query, side="left"), xp.searchsorted(col, query, side="right")


def lex_search(xp: Any, cols: Sequence[Any], query: Sequence[Any], right: bool = False,
               block: tuple[Any, Any] | None = None) -> Any:
    """``searchsorted`` over rows sorted by several int64 columns: for each
    query row, the first position whose row is not below it (``right``: not
    at or below it), comparing column by column. The first column's block
    comes from ``xp.searchsorted`` (or ``block``, :func:`key_blocks` of the
    query's first column); the rest is a binary search of every query row at
    once, one step per bit of the largest block (one sync; none on a device,
    which takes a step per bit of the row count).

    >>> import numpy as np
    >>> k, t = np.array([1, 1, 1, 2, 2]), np.array([3, 5, 5, 1, 9])
    >>> lex_search(np, [k, t], [np.array([1, 1, 2, 3]), np.array([5, 5, 0, 0])]).tolist()
    [1, 1, 3, 5]
    >>> lex_search(np, [k, t], [np.array([1, 1, 2, 0]), np.array([5, 6, 9, 0])], right=True).tolist()
    [3, 3, 5, 0]
    """
    if len(cols) == 1:
        return xp.searchsorted(cols[0], query[0], side="right" if right else "left")
    lo, hi = block if block is not None else key_blocks(xp, cols[0], query[0])
    last = int(cols[0].shape[0]) - 1
    if _numpy_path(xp):  # as many steps as the largest block needs (one read)
        steps = int((hi - lo).max()).bit_length() if lo.shape[0] else 0
    else:  # a device takes as many as the rows could need: more cheap passes, no read back
        steps = (last + 1).bit_length()
    for _ in range(steps):  # a loop over bits, not rows: every block halves each step
        mid = (lo + hi) >> 1
        at = xp.minimum(mid, last)
        # the row at mid is below the query (right: at or below) on cols[1:]
        below = (cols[-1][at] <= query[-1]) if right else (cols[-1][at] < query[-1])
        for c, q in zip(cols[-2:0:-1], query[-2:0:-1]):
            v = c[at]
            below = (v < q) | ((v == q) & below)
        open_ = lo < hi
        lo = xp.where(open_ & below, mid + 1, lo)
        hi = xp.where(open_ & ~below, mid, hi)
    return lo


def merge_order(xp: Any, a: Sequence[Any], b: Sequence[Any]) -> Any:
    """The permutation of ``concat(a, b)`` that orders it, for ``a`` and
    ``b`` each sorted by their int64 columns — what :func:`order_indices`
    gives (ties: ``a``'s rows first), by binary searches instead of a sort.

    >>> import numpy as np
    >>> merge_order(np, [np.array([1, 1, 3]), np.array([0, 5, 0])], [np.array([1, 2]), np.array([5, 0])]).tolist()
    [0, 1, 3, 4, 2]
    """
    na, nb = int(a[0].shape[0]), int(b[0].shape[0])
    if _numpy_path(xp) and na and nb:
        # on a CPU, one stable sort of the packed keys: numpy's (timsort) finds the two sorted runs and merges
        # them in one linear pass, where the binary searches gather every column ~log2(block) times
        cols = [xp.concatenate([x, y]) for x, y in zip(a, b)]
        ranges = value_ranges(xp, cols)
        widths = [bits_for(hi - lo) for lo, hi in ranges]
        if sum(widths) <= 63:
            return stable_argsort(xp, _pack(xp, xp.zeros(na + nb, dtype=xp.uint64), cols, ranges, widths, 0))
    perm = xp.empty(na + nb, dtype=xp.int64)
    perm[xp.arange(na, dtype=xp.int64) + lex_search(xp, b, a)] = xp.arange(na, dtype=xp.int64)
    perm[xp.arange(nb, dtype=xp.int64) + lex_search(xp, a, b, right=True)] = xp.arange(na, na + nb, dtype=xp.int64)
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


class KeyFilter(NamedTuple):
    """Which buckets of ``2**shift`` consecutive key values hold a key: bit
    ``b`` of ``bits[i]`` for bucket ``8 * i + b`` of ``key - lo``."""

    lo: int
    hi: int
    shift: int
    bits: Any


def _buckets(xp: Any, keys: Any, lo: int, shift: int) -> Any:
    rel = keys.astype(xp.uint64) - xp.uint64(lo & _U64_MASK)  # modulo 2**64: exact for keys >= lo
    return rel >> xp.uint64(shift)


def key_filter(xp: Any, sorted_keys: Any, per_key: int = 8) -> KeyFilter:
    """A membership filter over sorted int64 keys (not empty): about
    ``per_key`` buckets per key, so a probe says "maybe" for every key present
    and "no" for most absent ones — roughly ``1 - 1/per_key`` of them when
    keys are spread evenly — in one gather, where a binary search takes
    log2(n) dependent reads. No hash: buckets are ranges of values, so
    building it is sequential passes over the sorted keys (~1 byte per key).

    >>> import numpy as np
    >>> f = key_filter(np, np.array([3, 9, 9, 40]))
    >>> key_filter_probe(np, f, np.array([3, 6, 9, 40, 41, -5])).tolist()
    [True, False, True, True, False, False]
    """
    n = int(sorted_keys.shape[0])
    lo, hi = int(sorted_keys[0]), int(sorted_keys[-1])
    shift = ((hi - lo) // (per_key * n)).bit_length()  # (hi - lo) >> shift < per_key * n
    flags = xp.zeros(((hi - lo) >> shift) + 1, dtype=bool)
    flags[_buckets(xp, sorted_keys, lo, shift)] = True
    return KeyFilter(lo, hi, shift, xp.packbits(flags, bitorder="little"))


def key_filter_probe(xp: Any, f: KeyFilter, keys: Any) -> Any:
    """Boolean mask: False where ``keys`` are certainly not in the filter."""
    inside = (keys >= f.lo) & (keys <= f.hi)
    b = _buckets(xp, xp.where(inside, keys, f.lo), f.lo, f.shift)
    hit = (f.bits[b >> xp.uint64(3)] >> (b & xp.uint64(7)).astype(xp.uint8)) & xp.uint8(1)
    return inside & hit.astype(bool)
