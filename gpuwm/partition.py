"""Vnode assignment: which state partition a row's key belongs to.

A stable hash (the same in every process and run, unlike Python's ``hash``
of strings) of the key columns, modulo the number of vnodes. Integer keys
hash by value; other keys hash each distinct value once (CRC32 of its
repr), so the cost per row is one lookup.
"""

from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_MULT = np.uint64(0x9E3779B97F4A7C15)


def _column_hash(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_timestamp(t) or pa.types.is_date(t):
        v = col.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        return v.view(np.uint64)
    enc = pc.dictionary_encode(col)
    codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    lut = np.array([zlib.crc32(repr(v).encode()) for v in enc.dictionary.to_pylist()] + [0], dtype=np.uint64)
    return lut[codes]


def vnode_of(table: pa.Table, columns: Sequence[str], vnodes: int) -> np.ndarray:
    """int32 vnode per row in ``[0, vnodes)``; all 0 without key columns."""
    n = table.num_rows
    if vnodes <= 1 or not columns or n == 0:
        return np.zeros(n, dtype=np.int32)
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for c in columns:
            h = (h ^ _column_hash(table.column(c))) * _MULT
            h ^= h >> np.uint64(29)
    return (h % np.uint64(vnodes)).astype(np.int32)


def rescale(olds: Sequence, fresh, keys: Sequence[str], vnodes: int, vnode: int):
    """Online rescale (RisingWave: scan every state): ``fresh``, a new
    operator for ``vnode`` of ``vnodes``, takes the state of ``olds`` — the
    operators of every vnode of the layout before — whose rows hash to it on
    ``keys`` (the columns rows reach its vnodes by), and their last drain
    and counters. The operators must declare ``Capabilities(rescale=True)``.
    A key's state was on one old vnode and goes to one new one whole, so
    the rescaled operators continue exactly as the old ones would have."""
    parts = [t for t in (o.rescale_rows() for o in olds) if t is not None and t.num_rows]
    if parts:
        rows = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        mine = vnode_of(rows, keys, vnodes) == vnode
        if mine.any():
            fresh.rescale_absorb(rows.filter(pa.array(mine)))
    fresh.rescale_meta(list(olds), vnode == 0)
    return fresh
