"""A columnar table whose fixed-width columns live on a backend's device.

Arrow is the interchange at the edges: :meth:`Frame.from_arrow` moves a
``pa.Table`` to the backend once (zero-copy views on the CPU; on the GPU one
host->device copy of every fixed-width column through page-locked memory,
:mod:`gpuwm.staging`) and :meth:`Frame.to_arrow` brings it back (one
device->host copy). Between
the two, operators gather, filter, slice and concatenate on the device.

Fixed-width columns (integers, floats, booleans, timestamps, dates,
durations, times) are ``xp`` arrays plus an optional validity mask. Other
columns are host Arrow arrays, except strings on a GPU backend with cuDF
(``Backend.cudf``): those are ``cudf.Index`` objects on the device, gathered,
filtered, sliced, concatenated and dictionary-coded by cuDF with device
indices (an Index, not a Series: it has no row labels that every gather would
carry along). Host columns are gathered with host indices (on the GPU that
costs one index copy per call). The same class serves numpy and cupy, so the
CPU tests exercise the code the GPU runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from kernels.xp import mask_index

from . import staging
from .backend import Backend


def _fixed_dtype(t: pa.DataType) -> np.dtype | None:
    if pa.types.is_boolean(t):
        return np.dtype(bool)
    if pa.types.is_integer(t):
        return np.dtype(t.to_pandas_dtype())
    if pa.types.is_floating(t):
        return np.dtype(t.to_pandas_dtype())
    if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_date64(t):
        return np.dtype(np.int64)
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return np.dtype(np.int32)
    if pa.types.is_time64(t):
        return np.dtype(np.int64)
    return None


def _bits(xp: Any, packed: Any, lo: int, n: int) -> Any:
    """Bits ``lo .. lo+n`` of packed bytes (LSB first, as Arrow) as bools."""
    return xp.unpackbits(packed, bitorder="little")[lo : lo + n].astype(bool)


def arrow_to_numpy(arr: pa.Array, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, valid) of a fixed-width Arrow array as host arrays (views of
    its buffers, but for booleans); valid is None when no value is null.
    Values under nulls are unspecified."""
    n = len(arr)
    if n == 0:
        return np.empty(0, dtype=dtype), None
    data, valid = staging.input_parts(arr, dtype)
    lo = arr.offset % 8
    values = _bits(np, data, lo, n) if dtype == np.dtype(bool) else data.view(dtype)
    return values, None if valid is None else _bits(np, valid, lo, n)


def numpy_to_arrow(t: pa.DataType, values: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """The inverse of :func:`arrow_to_numpy`, for host arrays."""
    n = values.shape[0]
    nulls = 0 if valid is None else int(n - np.count_nonzero(valid))
    vbuf = None if not nulls else pa.py_buffer(np.packbits(valid, bitorder="little"))
    if values.dtype == np.dtype(bool):
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
    else:
        data = pa.py_buffer(np.ascontiguousarray(values))
    return pa.Array.from_buffers(t, n, [vbuf, data], null_count=nulls)


def _upload_fixed(backend: Backend, arrays: Sequence[tuple[pa.Array, np.dtype]]) -> list[tuple[Any, Any]]:
    """Fixed-width Arrow arrays to the device in one pinned copy
    (:mod:`gpuwm.staging`): (values, valid) device arrays for each."""
    xp = backend.xp
    parts: list = []
    for arr, dtype in arrays:
        parts.extend(staging.input_parts(arr, dtype) if len(arr) else (None, None))
    dev = staging.upload(backend, parts)
    out = []
    for i, (arr, dtype) in enumerate(arrays):
        n, lo = len(arr), arr.offset % 8
        data, valid = dev[2 * i], dev[2 * i + 1]
        if not n:
            out.append((xp.empty(0, dtype=dtype), None))
            continue
        values = _bits(xp, data, lo, n) if dtype == np.dtype(bool) else data.view(dtype)
        out.append((values, None if valid is None else _bits(xp, valid, lo, n)))
    return out


def _download_fixed(backend: Backend, columns: Sequence["Column"], n: int) -> list[pa.Array]:
    """Fixed-width device columns of ``n`` rows as Arrow arrays, in one
    device->host copy into page-locked memory (:mod:`gpuwm.staging`);
    booleans and validity are bit-packed on the device, and Arrow counts
    the nulls on the host."""
    xp = backend.xp
    parts: list = []
    for c in columns:
        v = c.values
        parts.append(xp.packbits(v, bitorder="little") if v.dtype == np.dtype(bool) else staging.as_bytes(xp, v))
        parts.append(None if c.valid is None else xp.packbits(c.valid, bitorder="little"))
    host = staging.download(backend, parts)
    out = []
    for i, c in enumerate(columns):
        data, valid = host[2 * i], host[2 * i + 1]
        vbuf = None if valid is None else pa.py_buffer(valid)
        out.append(pa.Array.from_buffers(c.type, n, [vbuf, pa.py_buffer(data)], null_count=-1 if vbuf else 0))
    return out


@dataclass
class Column:
    type: pa.DataType
    values: Any  #: xp array (device), pa.Array (host, non fixed-width) or cudf.Index (device, non fixed-width)
    valid: Any | None  #: xp bool array, or None (no nulls / host or cuDF column: nulls are in ``values``)
    in_cudf: bool = False  #: ``values`` is a cudf.Index

    @property
    def on_host(self) -> bool:
        return isinstance(self.values, pa.Array)

    @property
    def fixed(self) -> bool:
        """``values`` is an ``xp`` array (with ``valid`` beside it)."""
        return not self.on_host and not self.in_cudf

    def to_arrow(self, backend: Backend) -> pa.Array:
        """This column as a host Arrow array of its schema type."""
        if self.on_host:
            return self.values
        if self.in_cudf:
            return _cudf_to_arrow(self.values, self.type)
        if backend.is_gpu:
            return _download_fixed(backend, [self], int(self.values.shape[0]))[0]
        return numpy_to_arrow(self.type, self.values, self.valid)


def _to_cudf(cudf: Any, arr: pa.Array) -> Any | None:
    """A string Arrow array as a cudf.Index on the device, or None for other
    types (decimals, nested, dictionaries: they stay on the host, where
    their semantics are Arrow's)."""
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        return None
    return cudf.Index.from_arrow(arr)


def _cudf_to_arrow(index: Any, t: pa.DataType) -> pa.Array:
    """A cudf.Index back as Arrow of the schema type ``t`` (cuDF hands strings
    back as ``large_string``, and may pick other widths)."""
    arr = index.to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr if arr.type == t else arr.cast(t)


class Frame:
    """Columns of equal length on one backend, with an Arrow schema."""

    __slots__ = ("backend", "schema", "columns", "num_rows")

    def __init__(self, backend: Backend, schema: pa.Schema, columns: dict[str, Column], num_rows: int):
        self.backend = backend
        self.schema = schema
        self.columns = columns
        self.num_rows = num_rows

    # -- edges ---------------------------------------------------------------
    @classmethod
    def from_arrow(cls, table: pa.Table | pa.RecordBatch, backend: Backend) -> "Frame":
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        cols: dict[str, Column] = {}
        fixed: list[tuple[str, pa.DataType, pa.Array, np.dtype]] = []
        for field, chunked in zip(table.schema, table.columns):
            arr = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
            if isinstance(arr, pa.ChunkedArray):  # zero chunks
                arr = pa.array([], type=field.type)
            dtype = _fixed_dtype(field.type)
            if dtype is None:
                dev = None if backend.cudf is None else _to_cudf(backend.cudf, arr)
                cols[field.name] = Column(field.type, arr, None) if dev is None else \
                    Column(field.type, dev, None, in_cudf=True)
                continue
            cols[field.name] = None  # placeholder: keeps the schema's order
            fixed.append((field.name, field.type, arr, dtype))
        if backend.is_gpu:
            moved = _upload_fixed(backend, [(arr, dtype) for _, _, arr, dtype in fixed])
        else:
            moved = [arrow_to_numpy(arr, dtype) for _, _, arr, dtype in fixed]
        for (name, t, _, _), (values, valid) in zip(fixed, moved):
            cols[name] = Column(t, values, valid)
        return cls(backend, table.schema, cols, table.num_rows)

    def to_arrow(self) -> pa.Table:
        """Back to host Arrow; on a GPU, every fixed-width column in one copy."""
        names = [f.name for f in self.schema]
        fixed = [n for n in names if self.columns[n].fixed] if self.backend.is_gpu else []
        got = dict(zip(fixed, _download_fixed(self.backend, [self.columns[n] for n in fixed], self.num_rows)
                       if fixed else []))
        arrays = [got[n] if n in got else self.columns[n].to_arrow(self.backend) for n in names]
        return pa.Table.from_arrays(arrays, schema=self.schema)

    @classmethod
    def of(cls, data: "pa.Table | pa.RecordBatch | Frame", backend: Backend) -> "Frame":
        """``data`` as a Frame on ``backend``: a Frame passes through (no copy),
        Arrow goes through :meth:`from_arrow`."""
        if isinstance(data, Frame):
            if data.backend.name != backend.name:
                raise ValueError(f"a Frame on backend {data.backend.name!r} was given to an operator on "
                                 f"{backend.name!r}")
            return data
        return cls.from_arrow(data, backend)

    @classmethod
    def empty(cls, schema: pa.Schema, backend: Backend) -> "Frame":
        return cls.from_arrow(schema.empty_table(), backend)

    # -- access --------------------------------------------------------------
    def values(self, name: str) -> tuple[Any, Any | None]:
        c = self.columns[name]
        return c.values, c.valid

    # -- row selection ---------------------------------------------------------
    def _map(self, dev, host, n: int, known: dict | None = None, obj=None) -> "Frame":
        """Apply a row selection to every column: ``dev`` to xp arrays,
        ``host`` to host Arrow arrays, ``obj`` (default ``dev``) to cudf.Index
        columns."""
        obj = obj or dev

        def one(item):
            name, c = item
            if known and name in known:
                return name, Column(c.type, known[name], None)
            if c.on_host:
                return name, Column(c.type, host(c.values), None)
            if c.in_cudf:
                return name, Column(c.type, obj(c.values), None, in_cudf=True)
            return name, Column(c.type, dev(c.values), None if c.valid is None else dev(c.valid))

        items = list(self.columns.items())
        if not self.backend.is_gpu and len(items) > 1 and self.num_rows >= 100_000:
            # host gathers are memory-latency bound: one thread per column
            # (numpy and Arrow release the GIL)
            return Frame(self.backend, self.schema, dict(staging.pool().map(one, items)), n)
        return Frame(self.backend, self.schema, dict(map(one, items)), n)

    def take(self, idx: Any, known: dict | None = None) -> "Frame":
        """Rows at ``idx`` (an int array on this backend). ``known`` maps
        column names to their already-gathered, null-free values."""
        host_idx = None
        if any(c.on_host for c in self.columns.values()):
            host_idx = pa.array(self.backend.to_numpy(idx))
        return self._map(lambda a: a[idx], lambda a: a.take(host_idx), int(idx.shape[0]), known,
                         obj=lambda a: a.take(idx))

    def filter(self, mask: Any, count: int | None = None) -> "Frame":
        """Rows where ``mask`` (a bool array on this backend) is True;
        ``count``, where the caller knows it, is their number (saves a read
        of it from the device)."""
        xp = self.backend.xp
        n = int(xp.count_nonzero(mask)) if count is None else count
        if self.backend.is_gpu:  # one count read back, then gathers (a mask index per column reads its own)
            return self.take(mask_index(xp, mask, n))
        host_mask = rows = None
        if any(c.on_host for c in self.columns.values()):
            host_mask = pa.array(self.backend.to_numpy(mask))
        if any(c.in_cudf for c in self.columns.values()):
            rows = xp.flatnonzero(mask)  # cuDF gathers by position; a mask is not one of its take inputs
        return self._map(lambda a: a[mask], lambda a: a.filter(host_mask), n, obj=lambda a: a.take(rows))

    def drop(self, names: Sequence[str]) -> "Frame":
        """The Frame without columns ``names`` (no copy)."""
        keep = [f for f in self.schema if f.name not in names]
        return Frame(self.backend, pa.schema(keep, metadata=self.schema.metadata),
                     {f.name: self.columns[f.name] for f in keep}, self.num_rows)

    def slice(self, start: int, stop: int) -> "Frame":
        stop = min(stop, self.num_rows)
        start = min(start, stop)
        return self._map(lambda a: a[start:stop], lambda a: a.slice(start, stop - start), stop - start)

    @classmethod
    def concat(cls, frames: Sequence["Frame"]) -> "Frame":
        frames = [f for f in frames]
        first = frames[0]
        if len(frames) == 1:
            return first
        xp = first.backend.xp
        cols = {}
        for name, c0 in first.columns.items():
            parts = [f.columns[name] for f in frames]
            if c0.in_cudf:
                objs = [p.values for p in parts]
                cols[name] = Column(c0.type, first.backend.cudf.concat(objs, ignore_index=True), None, in_cudf=True)
                continue
            if c0.on_host:
                cols[name] = Column(c0.type, pa.concat_arrays([p.values for p in parts]), None)
                continue
            values = xp.concatenate([p.values for p in parts])
            valid = None
            if any(p.valid is not None for p in parts):
                valid = xp.concatenate(
                    [p.valid if p.valid is not None else xp.ones(p.values.shape[0], dtype=bool) for p in parts]
                )
            cols[name] = Column(c0.type, values, valid)
        return cls(first.backend, first.schema, cols, sum(f.num_rows for f in frames))

    def nbytes(self) -> int:
        total = 0
        for c in self.columns.values():
            total += c.values.memory_usage() if c.in_cudf else c.values.nbytes
            if c.valid is not None:
                total += c.valid.nbytes
        return total


def sort_table(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """Stable ascending sort of a (small, host) table, nulls first."""
    import pyarrow.compute as pc

    try:
        idx = pc.sort_indices(table, sort_keys=[(c, "ascending", "at_start") for c in columns])
    except (TypeError, ValueError, pa.ArrowInvalid):  # pyarrow < 25: one placement for all keys
        idx = pc.sort_indices(table, sort_keys=[(c, "ascending") for c in columns], null_placement="at_start")
    return table.take(idx)



def filter_table(table: pa.Table, mask: np.ndarray) -> pa.Table:
    """``table.filter(mask)`` with the columns filtered in parallel threads
    (Arrow releases the GIL), for host tables on the CPU backend."""
    m = pa.array(mask, type=pa.bool_())
    if table.num_columns < 2 or table.num_rows < 100_000:
        return table.filter(m)
    cols = list(staging.pool().map(lambda c: c.filter(m), table.columns))
    return pa.Table.from_arrays(cols, schema=table.schema)


def table_to_bytes(t: pa.Table) -> bytes:
    """A table as Arrow IPC stream bytes (state kept inside other state)."""
    import io

    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue()


def bytes_to_table(b: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(b)).read_all()
