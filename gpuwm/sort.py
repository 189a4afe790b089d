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
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np
import pyarrow as pa

from kernels import cut, merge_released, sort_rows
from kernels.xp import mask_index

from .backend import Backend, get_backend
from .drained import Drained
from .errors import ConfigError, SchemaError, StateError, WatermarkError
from .frame import Frame, sort_table
from .keys import KeyCodec
from .operator import Capabilities, Operator, OperatorSpec, StageContext, json_options
from .profiles import Profile, resolve
from .schema import same_schema
from .timecol import TimeDomain, event_time_domain


class _Run:
    """One pushed chunk, sorted. Drains only ever cut a run's front, so a run
    is the rows ``[base, end)`` of what was pushed as run ``id``; ``saved`` is
    the offset its last saved part starts at (None: never saved)."""

    __slots__ = ("frame", "ts", "keys", "id", "base", "saved")

    def __init__(self, frame: Frame, ts: Any, keys: list[Any], rid: int, base: int = 0, saved: int | None = None):
        self.frame, self.ts, self.keys = frame, ts, keys
        self.id, self.base, self.saved = rid, base, saved

    def cut_front(self, c: int) -> "_Run":
        n = self.frame.num_rows
        return _Run(self.frame.slice(c, n), self.ts[c:n], [k[c:n] for k in self.keys], self.id, self.base + c, self.saved)

    def head(self, c: int) -> "_Run":
        return _Run(self.frame.slice(0, c), self.ts[:c], [k[:c] for k in self.keys], self.id, self.base)


@dataclass(frozen=True)
class SortSpec(OperatorSpec):
    """A stream sort on event-time ``column``, ties broken by ``key``.

    >>> SortSpec("ts", ("pk",)).build("risingwave", "cpu").key
    ['pk']
    """

    column: str
    key: tuple[str, ...] = ()

    capabilities: ClassVar[Capabilities] = Capabilities(range_exchange=True, rescale=True)
    kind: ClassVar[str] = "sort"

    def __post_init__(self) -> None:
        key = (self.key,) if isinstance(self.key, str) else tuple(self.key)
        if not all(isinstance(k, str) for k in key):
            raise ConfigError(f"sort key must be column names, got {self.key!r}")
        object.__setattr__(self, "key", key)

    @classmethod
    def from_json(cls, options: dict, ctx: StageContext) -> "SortSpec":
        """``{"sort": {"key": [columns]}}``: on the input's event time."""
        o = json_options("sort", options, {"key"})
        return cls(ctx.event_time, o.get("key", ()))

    def build(self, profile: Any, backend: str | None = None) -> "StreamSort":
        return StreamSort(self.column, key=self.key, profile=profile, backend=backend)

    def vnode_keys(self, vnodes: int) -> tuple[str, ...]:
        # spread evenly over the vnodes; the range exchange puts the output back in one order
        return (self.column, *self.key) if vnodes > 1 else ()

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        event_time_domain(schema, self.column)
        for k in self.key:
            if k not in schema.names:
                raise SchemaError(f"sort key column {k!r} not found; the table has columns {schema.names}")
        return schema

    def with_next(self, nxt: OperatorSpec) -> OperatorSpec:
        if isinstance(nxt, SortSpec):
            raise ConfigError("a second sort cannot follow a sort: the stream is ordered already")
        return self


class StreamSort(Operator, Drained):
    """Buffer rows and release them in event-time order below a watermark.

    Parameters
    ----------
    column : event-time column (timestamp or integer).
    key : further sort columns (ties on event time), e.g. a primary key.
        Rows equal on ``column`` and every key leave in arrival order, which
        over several input partitions is the order the exchange delivers
        them in (as with ``ORDER BY``): a key that makes rows unique makes
        the order total.
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

    late_reason = "sort released"

    def __init__(
        self,
        column: str,
        key: Sequence[str] = (),
        profile: str | Profile = "risingwave",
        *,
        release_inclusive: bool | None = None,
        backend: str | None = None,
    ):
        self.spec = SortSpec(column, key)
        self.column = column
        self.key = list(self.spec.key)
        self.profile = resolve(profile, release_inclusive=release_inclusive)
        self._backend: Backend = get_backend(backend)
        self._schema: pa.Schema | None = None
        self._domain: TimeDomain | None = None
        self._codecs: list[KeyCodec] = []
        self._runs: list[_Run] = []
        self._next_run = 0
        self._init_drained()

    def bind(self, schema: pa.Schema) -> "StreamSort":
        """Fix the input schema before any row (checked on every push)."""
        self._bind(schema)
        return self

    def _bind(self, schema: pa.Schema) -> None:
        if self._schema is not None:
            same_schema(self._schema, schema, "StreamSort.push")
            return
        self.spec.output_schema(schema)
        self._domain = event_time_domain(schema, self.column)
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
        keep, nulls0, nbehind = None, self.null_rows, 0
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
                self._set_aside(frame, behind)
                keep = ~behind if keep is None else keep & ~behind
        if keep is not None:
            idx = mask_index(xp, keep, table.num_rows - self.null_rows + nulls0 - nbehind)
            frame, ts = frame.take(idx), ts[idx]
        if frame.num_rows == 0:
            return
        self._add_run(frame, ts, self._next_run)
        self._next_run += 1

    def _add_run(self, frame: Frame, ts: Any, rid: int, base: int = 0, saved: int | None = None) -> None:
        xp = self._backend.xp
        keys = [c.encode(xp, frame.columns[c.name], self._backend) for c in self._codecs]
        order, (sts, *skeys) = sort_rows(xp, [ts, *keys])
        self._runs.append(_Run(frame.take(order, self._known(frame, sts, skeys)), sts, skeys, rid, base, saved))

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
        return self._release(w, self.profile.release_inclusive)

    def flush(self) -> pa.Table:
        """Release every buffered row, in ``(ts, key...)`` order: the end of
        the input, as a drain at the newest buffered event time (rows pushed
        later at or before it are late).

        >>> import pyarrow as pa, gpuwm
        >>> s = gpuwm.StreamSort("ts", key=["pk"])
        >>> s.push(pa.table({"pk": [1, 2, 3], "ts": [7, 2, 7]}))
        >>> s.flush().to_pydict()
        {'pk': [2, 1, 3], 'ts': [2, 7, 7]}
        """
        if self._schema is None:
            return pa.table({})
        if not self._runs:
            return self._schema.empty_table()
        top = max(int(r.ts[-1]) for r in self._runs)  # each run is sorted
        self._drained = top if self.profile.release_inclusive else top + 1
        return self._release(top, True)

    def range_parts(self, table: pa.Table, low: Any, high: Any, parts: int) -> Any:
        """For rows a drain at ``high`` released after a drain at ``low``
        (watermarks, as given to :meth:`drain`; ``low`` None: no drain
        before): which of ``parts`` equal event-time ranges of
        ``[low, high)`` each row falls in, as a host int32 array. Ordered
        rows get non-decreasing ranges, so several sorts' outputs cut this
        way and merged range by range form one ordered stream."""
        from kernels import range_parts

        if self._domain is None:
            return np.zeros(table.num_rows, dtype=np.int32)
        ts = table.column(self.column).cast(pa.int64()).to_numpy(zero_copy_only=False)
        lo = None if low is None else self._domain.to_raw(low)
        return range_parts(np, ts, lo, self._domain.to_raw(high), parts)

    def _release(self, w: int, inclusive: bool) -> pa.Table:
        """Release the buffered rows below ``w`` (``<= w`` when inclusive), ordered."""
        xp = self._backend.xp
        released: list[_Run] = []
        kept: list[_Run] = []
        for run in self._runs:
            c = cut(xp, run.ts, w, inclusive)
            if c:
                released.append(run.head(c))
            if c < run.frame.num_rows:
                kept.append(run.cut_front(c) if c else run)
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
    def snapshot(self, rows: bool = True) -> pa.Table:
        """Buffered rows, oldest run first, with the sort's counters in metadata.

        With ``rows=False`` the table has the columns, counters and the list of
        runs but no rows: a store that saves the runs one by one
        (:meth:`state_parts`, :meth:`snapshot_part`) hands them back to
        :meth:`restore` beside it."""
        meta = {**self._drained_meta(), "next_run": self._next_run,
                "runs": [[r.id, r.base] for r in self._runs]}
        if self._schema is None:
            return pa.table({}).replace_schema_metadata({"gpuwm.sort": json.dumps(meta)})
        if self._runs and rows:
            table = Frame.concat([r.frame for r in self._runs]).to_arrow()
        else:
            table = self._schema.empty_table()
        md = dict(table.schema.metadata or {})
        md[b"gpuwm.sort"] = json.dumps(meta).encode()
        return table.replace_schema_metadata(md)

    def state_parts(self) -> dict[str, bool]:
        """The runs as parts of an incremental state store, oldest first:
        ``{name: must_write}``. A run saved before keeps its part (the store
        links the previous version's file) until more of that part has been
        drained than is left, when it is written again, trimmed: each batch
        writes its new rows plus at most as many rows as drains released."""
        return {f"run.{r.id}": r.saved is None or r.base - r.saved > r.frame.num_rows for r in self._runs}

    def snapshot_part(self, name: str) -> pa.Table:
        """The rows of one run (:meth:`state_parts`), as they are now."""
        run = self._run(name)
        table = run.frame.to_arrow()
        return table.replace_schema_metadata({b"gpuwm.run": json.dumps({"id": run.id, "base": run.base}).encode()})

    def mark_saved(self, written: Sequence[str] = ()) -> None:
        """The store wrote these parts (:meth:`snapshot_part`) and linked the rest."""
        for name in written:
            run = self._run(name)
            run.saved = run.base

    def _run(self, name: str) -> _Run:
        rid = int(name.removeprefix("run."))
        for r in self._runs:
            if r.id == rid:
                return r
        raise StateError(f"the sort holds no buffered run {name!r}")

    def state_tables(self) -> dict[str, pa.Table]:
        return {"sort": self.snapshot(rows=False)}

    def rescale_rows(self) -> pa.Table | None:
        """The buffered rows, for a rescale (:func:`gpuwm.partition.rescale`)."""
        if self._schema is None or not self._runs:
            return None
        return Frame.concat([r.frame for r in self._runs]).to_arrow()

    def rescale_absorb(self, rows: pa.Table) -> None:
        self.push(rows)

    def load_state(self, tables: dict[str, pa.Table], parts: dict[str, pa.Table]) -> "StreamSort":
        if "sort" not in tables:
            raise StateError(f"sort state has no 'sort' table (found {sorted(tables)})")
        return self.restore(tables["sort"], parts)

    def restore(self, snapshot: pa.Table, parts: dict[str, pa.Table] | None = None) -> "StreamSort":
        """Continue exactly where the snapshotted sort stopped: from
        ``snapshot()``, or from ``snapshot(rows=False)`` and its parts."""
        if self._schema is not None:
            raise WatermarkError("restore() must be called on a fresh StreamSort")
        md = dict(snapshot.schema.metadata or {})
        meta = json.loads(md.pop(b"gpuwm.sort"))
        schema = snapshot.schema.with_metadata(md or None)
        if snapshot.num_columns:
            self._bind(schema)
        if parts is not None:
            for rid, base in meta["runs"]:
                name = f"run.{rid}"
                if name not in parts:
                    raise StateError(f"sort state is missing its part {name!r}")
                t = parts[name]
                saved = json.loads(t.schema.metadata[b"gpuwm.run"])["base"]
                live = t.slice(base - saved).replace_schema_metadata(md or None)
                frame = Frame.of(live, self._backend)
                ts = frame.values(self.column)[0].astype(self._backend.xp.int64, copy=False)
                self._add_run(frame, ts, rid, base, saved)  # stored sorted: a stable sort keeps it
        elif snapshot.num_rows:  # rows in the snapshot were accepted already: no drain yet
            self.push(snapshot.replace_schema_metadata(md or None))
        self._load_drained_meta(meta)
        self._next_run = max([meta.get("next_run", 0)] + [r.id + 1 for r in self._runs])
        return self
