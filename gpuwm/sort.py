"""The range-drain stream sort: an event-time-ordered, append-only stream.

Rows are buffered as sorted runs (one per push, sorted in ``O(c log c)``).
``drain(W)`` releases every buffered row below W — ``ts < W`` or, under the
``spark``/``flink`` profiles, ``ts <= W`` — ordered by ``(ts, key...,
arrival)``, and keeps the rest. A drain binary-searches each run and sorts
only the released rows, so its cost does not grow with what stays buffered.

Because the output is append-only and ordered, a row pushed after a drain at
W with ``ts`` already released-below W cannot be placed any more: it is
dropped and counted in ``late_rows`` (put a :class:`WatermarkFilter` in front
to drop such rows at the source). Rows with a null event time are dropped
and counted in ``null_rows``.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import pyarrow as pa

from kernels import cut, merge_released, sort_rows

from .backend import Backend, get_backend
from .drained import Drained
from .errors import SchemaError, WatermarkError
from .frame import Frame, sort_table
from .keys import KeyCodec
from .profiles import Profile, resolve
from .timecol import TimeDomain, event_time_domain
from .watermark import same_schema


class _Run:
    __slots__ = ("frame", "ts", "keys")

    def __init__(self, frame: Frame, ts: Any, keys: list[Any]):
        self.frame, self.ts, self.keys = frame, ts, keys

    def slice(self, a: int, b: int) -> "_Run":
        return _Run(self.frame.slice(a, b), self.ts[a:b], [k[a:b] for k in self.keys])


class StreamSort(Drained):
    """Buffer rows and release them in event-time order below a watermark.

    Parameters
    ----------
    column : event-time column (timestamp or integer).
    key : further sort columns (ties on event time), e.g. a primary key.
    profile : ``"risingwave"`` releases ``ts < W``; ``"spark"``/``"flink"`` ``ts <= W``.
    release_inclusive : override the profile's boundary.
    backend : ``"auto"``, ``"cpu"`` or ``"gpu"``.

    Examples
    --------
    >>> import pyarrow as pa, gpuwm
    >>> s = gpuwm.StreamSort("ts", key=["pk"])
    >>> s.push(pa.table({"pk": [1, 2, 3, 4], "ts": [1, 2, 6, 7]}))
    >>> s.drain(3).to_pydict()
    {'pk': [1, 2], 'ts': [1, 2]}
    >>> s.push(pa.table({"pk": [98, 37, 60], "ts": [4, 5, 8]}))
    >>> s.drain(7).to_pydict()
    {'pk': [98, 37, 3], 'ts': [4, 5, 6]}
    """

    def __init__(
        self,
        column: str,
        key: Sequence[str] = (),
        profile: str | Profile = "risingwave",
        *,
        release_inclusive: bool | None = None,
        backend: str | None = None,
    ):
        self.column = column
        self.key = [key] if isinstance(key, str) else list(key)
        self.profile = resolve(profile, release_inclusive=release_inclusive)
        self._backend: Backend = get_backend(backend)
        self._schema: pa.Schema | None = None
        self._domain: TimeDomain | None = None
        self._codecs: list[KeyCodec] = []
        self._runs: list[_Run] = []
        self._init_drained()

    def _bind(self, schema: pa.Schema) -> None:
        if self._schema is not None:
            same_schema(self._schema, schema, "StreamSort.push")
            return
        self._domain = event_time_domain(schema, self.column)
        for k in self.key:
            if k not in schema.names:
                raise SchemaError(f"sort key column {k!r} not found; the table has columns {schema.names}")
        self._codecs = [KeyCodec(k, schema.field(k).type) for k in self.key]
        self._schema = schema
        self._bind_pending_drain()

    @property
    def buffered_rows(self) -> int:
        return sum(r.frame.num_rows for r in self._runs)

    @property
    def buffered_bytes(self) -> int:
        return sum(r.frame.nbytes() for r in self._runs)

    # the names every stateful operator answers to (metrics)
    state_rows = buffered_rows
    state_bytes = buffered_bytes

    def push(self, table: pa.Table | Frame) -> None:
        """Buffer a chunk (sorted once, here). ``table``: Arrow, or a
        :class:`~gpuwm.frame.Frame` already on this operator's backend."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        self._bind(table.schema)
        self.rows_in += table.num_rows
        if table.num_rows == 0:
            return
        b = self._backend
        xp = b.xp
        frame = Frame.of(table, b)
        ts, valid = frame.values(self.column)
        ts = ts.astype(xp.int64, copy=False)
        keep = None
        if valid is not None:
            self.null_rows += int(table.num_rows - xp.count_nonzero(valid))
            keep = valid
        if self._drained is not None:
            behind = (ts <= self._drained) if self.profile.release_inclusive else (ts < self._drained)
            if valid is not None:
                behind &= valid
            nbehind = int(xp.count_nonzero(behind))
            if nbehind:
                self.late_rows += nbehind
                keep = ~behind if keep is None else keep & ~behind
        if keep is not None:
            frame = frame.filter(keep)
            ts = ts[keep]
        if frame.num_rows == 0:
            return
        keys = [c.encode(xp, frame.columns[c.name], b) for c in self._codecs]
        order, (sts, *skeys) = sort_rows(xp, [ts, *keys])
        self._runs.append(_Run(frame.take(order, self._known(frame, sts, skeys)), sts, skeys))

    def _known(self, frame: Frame, sts: Any, skeys: list[Any]) -> dict:
        """Columns equal to a sort column come out of the sort words: no gather."""
        xp = self._backend.xp
        known = {}
        if frame.columns[self.column].values.dtype == xp.int64:
            known[self.column] = sts  # null event times never reach a run
        for c, k in zip(self._codecs, skeys):
            col = frame.columns[c.name]
            if c.ordered and col.valid is None and col.values.dtype == xp.int64 and c.name not in known:
                known[c.name] = k
        return known

    def drain(self, watermark: Any) -> pa.Table:
        """Release, in ``(ts, key...)`` order, every buffered row below ``watermark``."""
        w = self._drain_to(watermark)
        if w is None:
            return pa.table({}) if self._schema is None else self._schema.empty_table()
        xp = self._backend.xp
        released: list[_Run] = []
        kept: list[_Run] = []
        for run in self._runs:
            c = cut(xp, run.ts, w, self.profile.release_inclusive)
            if c:
                released.append(run.slice(0, c))
            if c < run.frame.num_rows:
                kept.append(run.slice(c, run.frame.num_rows) if c else run)
        self._runs = kept
        self._compact_keys()
        if not released:
            return self._schema.empty_table()
        if len(released) == 1:
            out = released[0].frame
        else:
            frame = Frame.concat([r.frame for r in released])
            ts = xp.concatenate([r.ts for r in released])
            keys = [xp.concatenate([r.keys[i] for r in released]) for i in range(len(self.key))]
            perm, (sts, *skeys) = merge_released(xp, [ts, *keys])
            out = frame.take(perm, self._known(frame, sts, skeys))
        self.rows_out += out.num_rows
        table = out.to_arrow()
        if any(not c.ordered for c in self._codecs):
            table = self._order_unordered_keys(table)
        return table

    def _compact_keys(self) -> None:
        """Forget dictionary keys no buffered row references any more (the
        released rows carry their values, not codes)."""
        b = self._backend
        rows = self.buffered_rows
        for i, c in enumerate(self._codecs):
            new = c.compact_codes(b.xp, [r.keys[i] for r in self._runs], rows, b.to_numpy)
            for r, codes in zip(self._runs, new or ()):
                r.keys[i] = codes

    def _order_unordered_keys(self, table: pa.Table) -> pa.Table:
        # dictionary-coded keys (strings...) were grouped by code, not value:
        # order ties on event time by the real values (a stable host sort of
        # the released rows only).
        return sort_table(table, [self.column, *self.key])

    # -- state -----------------------------------------------------------------
    def snapshot(self) -> pa.Table:
        """Buffered rows, oldest run first, with the sort's counters in metadata."""
        meta = self._drained_meta()
        if self._schema is None:
            return pa.table({}).replace_schema_metadata({"gpuwm.sort": json.dumps(meta)})
        if self._runs:
            table = Frame.concat([r.frame for r in self._runs]).to_arrow()
        else:
            table = self._schema.empty_table()
        md = dict(table.schema.metadata or {})
        md[b"gpuwm.sort"] = json.dumps(meta).encode()
        return table.replace_schema_metadata(md)

    def restore(self, snapshot: pa.Table) -> "StreamSort":
        """Continue exactly where the snapshotted sort stopped."""
        if self._schema is not None:
            raise WatermarkError("restore() must be called on a fresh StreamSort")
        md = dict(snapshot.schema.metadata or {})
        meta = json.loads(md.pop(b"gpuwm.sort"))
        if snapshot.num_columns:  # rows in the snapshot were accepted already: no drain yet
            self.push(snapshot.replace_schema_metadata(md or None))
        self._load_drained_meta(meta)
        return self
