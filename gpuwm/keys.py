"""Order-preserving int64 codes for key columns, and back.

Fixed-width columns map to int64 by value (floats through their ordered bit
pattern, unsigned 64-bit through a sign flip), so codes sort like values.
Other columns (strings, decimals, ...) go through a persistent dictionary:
codes are stable across batches but not ordered; callers that must order by
such a column sort the (small) output with Arrow. Nulls get :data:`NULL_CODE`,
which sorts first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kernels import NONE

from .backend import Backend
from .frame import Column, _cudf_to_arrow, _fixed_dtype, numpy_to_arrow

NULL_CODE = NONE
_SIGN = np.uint64(1 << 63)


class KeyCodec:
    """Encodes one key column's values as int64 codes (and decodes them).

    A dictionary-coded column's dictionary would grow with every distinct
    key ever seen; operators call :meth:`compact_codes` after a drain so that
    it holds only the keys their state still references (state stays
    bounded).
    """

    #: a dictionary is compacted once it is larger than this and more than
    #: twice the state rows (so at least half of it is dead)
    COMPACT_MIN = 1 << 16

    def __init__(self, name: str, type_: pa.DataType):
        self.name = name
        self.type = type_
        self.dtype = _fixed_dtype(type_)
        self.ordered = self.dtype is not None
        self._dict: dict[Any, int] = {}
        self._values: list[Any] = []

    # -- encode ----------------------------------------------------------------
    def encode(self, xp: Any, col: Column, backend: Backend) -> Any:
        if self.ordered:
            v = col.values
            if v.dtype.kind == "f":
                bits = v.astype(xp.float64).view(xp.int64)
                code = xp.where(bits < 0, bits ^ xp.int64(0x7FFFFFFFFFFFFFFF), bits)
            elif v.dtype == xp.uint64:
                code = (v ^ xp.uint64(_SIGN)).view(xp.int64)
            else:
                code = v.astype(xp.int64, copy=False)
            if col.valid is not None:
                code = xp.where(col.valid, code, NULL_CODE)
            return code
        if col.in_cudf:
            # factorized on the device; only the distinct values come to the host
            # (-1, a null, picks the lookup table's last entry, NULL_CODE)
            pos, uniq = col.values.factorize(sort=False, use_na_sentinel=True)
            lut = self._lookup(_cudf_to_arrow(uniq, self.type))
            return xp.asarray(lut)[xp.asarray(pos).astype(xp.int64)]
        arr = col.values  # host pa.Array
        uniq = pc.unique(arr).drop_null()
        pos = pc.index_in(arr, value_set=uniq).to_numpy(zero_copy_only=False)
        lut = self._lookup(uniq)
        pos = np.where(np.isnan(pos), len(uniq), pos).astype(np.int64) if pos.dtype.kind == "f" else pos
        return backend.asarray(lut[pos])

    def _lookup(self, uniq: pa.Array) -> np.ndarray:
        """The codes of ``uniq`` (distinct non-null values; new ones are added
        to the dictionary), then NULL_CODE."""
        codes = []
        for v in uniq.to_pylist():  # one per distinct value in the chunk
            c = self._dict.get(v)
            if c is None:
                c = len(self._values)
                self._dict[v] = c
                self._values.append(v)
            codes.append(c)
        return np.asarray(codes + [NULL_CODE], dtype=np.int64)

    # -- decode ----------------------------------------------------------------
    def decode(self, codes: np.ndarray) -> pa.Array:
        valid = codes != NULL_CODE
        if self.ordered:
            c = codes
            if self.dtype.kind == "f":
                vals = self.device_values(np, c).astype(self.dtype)
            elif self.dtype == np.uint64:
                vals = c.view(np.uint64) ^ _SIGN
            else:
                vals = c.astype(self.dtype)
            return numpy_to_arrow(self.type, vals, None if valid.all() else valid)
        dictionary = pa.array(self._values, type=self.type)
        idx = pa.array(np.where(valid, codes, 0), mask=~valid)
        return dictionary.take(idx)

    def device_values(self, xp: Any, codes: Any) -> Any:
        """A numeric column's values from their codes, on the codes' device
        (int64, or float64 for floating columns; a null's code is no value)."""
        if self.dtype is None or self.dtype.kind not in "iuf":
            raise TypeError(f"{self.name}: only a numeric column's codes are values")
        if self.dtype.kind == "f":
            return xp.where(codes < 0, codes ^ xp.int64(0x7FFFFFFFFFFFFFFF), codes).view(xp.float64)
        return codes

    # -- dictionary size ----------------------------------------------------------
    def __len__(self) -> int:
        """Entries in the dictionary (0 for value-coded columns)."""
        return len(self._values)

    def compact_codes(self, xp: Any, parts: list[Any], state_rows: int, to_numpy: Any) -> list[Any] | None:
        """Drop dictionary entries no code in ``parts`` (every code array the
        operator keeps) refers to, when the dictionary has grown past
        :attr:`COMPACT_MIN` and twice ``state_rows``. Returns ``parts``
        re-coded, or None when nothing was done. The re-coding is monotone
        (the k-th live code becomes k), so arrays sorted by code stay sorted."""
        if self.ordered or len(self._values) <= max(self.COMPACT_MIN, 2 * state_rows):
            return None
        if parts:
            live = xp.unique(xp.concatenate(parts))
            live = live[live != NULL_CODE]
        else:
            live = xp.zeros(0, dtype=xp.int64)
        live_h = to_numpy(live)
        dictionary = pa.array(self._values, type=self.type).take(pa.array(live_h))
        self.load_dictionary(dictionary)
        return [xp.where(p == NULL_CODE, NULL_CODE, xp.searchsorted(live, p)) for p in parts]

    # -- state -----------------------------------------------------------------
    def dictionary(self) -> pa.Array | None:
        return None if self.ordered else pa.array(self._values, type=self.type)

    def load_dictionary(self, values: pa.Array) -> None:
        self._values = values.to_pylist()
        self._dict = {v: i for i, v in enumerate(self._values)}


def dictionary_tables(codecs: list[KeyCodec]) -> dict[str, pa.Table]:
    """The key dictionaries of ``codecs`` as state tables ``dict.<column>``
    (ordered codecs have none)."""
    out = {}
    for c in codecs:
        d = c.dictionary()
        if d is not None:
            out[f"dict.{c.name}"] = pa.table({"value": d})
    return out


def load_dictionaries(codecs: list[KeyCodec], tables: Any) -> None:
    """Reload the dictionaries :func:`dictionary_tables` saved."""
    for c in codecs:
        if f"dict.{c.name}" in tables:
            c.load_dictionary(tables[f"dict.{c.name}"].column("value"))
