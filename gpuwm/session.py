"""Session windows: per group key, rows closer than a gap form one session.

Semantics (Spark's ``session_window`` and Flink's ``EventTimeSessionWindows``):
a row at ``ts`` opens the interval ``[ts, ts + gap)``; intervals of the same
key that overlap or touch merge, so a session is ``[min ts, max ts + gap)``
over its rows. ``drain(W)`` emits and deletes every session with
``end <= W`` (``end - 1 <= W`` under ``flink``) — no later row can reach it,
since a row behind the watermark is late. Rows are merged in batches:

* ``push`` merges the chunk's rows with each other and with the open
  sessions of their keys. A session that this leaves ending at or before
  the last drain's watermark could only join sessions already emitted: its
  rows are late — dropped and counted in ``late_rows``. (Spark tests each
  row's own ``[ts, ts + gap)`` instead; behind a watermark filter, as in a
  gpuwm pipeline, no row reaches the operator that either rule drops.)
* An emitted session is final: a later row within the gap of it starts a
  new session (as in Spark).

``emit="on-update"`` is not offered: an update would have to retract the
sessions a merge absorbs.

State is one set of columns — key codes, session start and end, the
accumulators — sorted by (keys, start) and kept on the backend's device. A
push sorts its chunk, then merges its sessions with the state in one pass
over both (a packed sort of already sorted runs plus a segmented running
maximum); its cost is O(chunk log chunk + open sessions), the state moved at
memory speed, never per row in Python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pyarrow as pa

from kernels import order_indices, reduce_runs, sessionize

from .errors import ConfigError, SchemaError, WatermarkError
from .frame import Frame
from .timecol import TimeDomain
from .watermark import same_schema
from .window import WindowAggregate, _positive

_PART = "sessions"


@dataclass(frozen=True)
class Session:
    """Session windows on ``column``: rows of one key less than ``gap`` apart
    (``ts2 <= ts1 + gap``) share a session ``[first ts, last ts + gap)``.

    >>> Session("ts", 10)
    Session('ts', gap=10)
    """

    column: str
    gap: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "gap", _positive(self.gap, "gap"))

    def raw(self, dom: TimeDomain) -> tuple[int, int]:
        g = dom.duration(self.gap, "gap", allow_zero=False)
        return g, g

    def __repr__(self) -> str:
        return f"Session({self.column!r}, gap={self.gap!r})"


class SessionAggregate(WindowAggregate):
    """:class:`~gpuwm.WindowAggregate` over :class:`Session` windows (built
    by ``WindowAggregate(Session(...), ...)``). Output: ``window_start``,
    ``window_end``, the ``by`` columns, the aggregates; ordered by
    window_start, then by.

    >>> import pyarrow as pa, gpuwm
    >>> a = gpuwm.WindowAggregate(gpuwm.Session("ts", 10), by=["k"], aggs={"n": ("*", "count")})
    >>> a.push(pa.table({"ts": [1, 8, 30, 18], "k": [1, 1, 1, 1]}))
    >>> a.drain(30).to_pydict()
    {'window_start': [1], 'window_end': [28], 'k': [1], 'n': [3]}
    """

    def __init__(self, window: Session, by: Sequence[str] = (), aggs: Mapping[str, tuple[str, str]] | None = None,
                 emit: str = "on-window-close", profile: Any = "risingwave", *,
                 close_minus_one: bool | None = None, backend: str | None = None):
        if emit == "on-update":
            raise ConfigError("session windows emit on window close only (emit='on-window-close'): a later row "
                              "can merge sessions, which an update stream would have to retract")
        super().__init__(window, by=by, aggs=aggs, emit=emit, profile=profile, close_minus_one=close_minus_one,
                         backend=backend)
        self._keys: list[Any] = []
        self._start: Any = None
        self._end: Any = None
        self._vals: list[Any] = []
        self._changed = False  # state changed since mark_saved()

    @staticmethod
    def _session_window(window: Any) -> bool:
        return isinstance(window, Session)

    def _bind(self, schema: pa.Schema) -> None:
        fresh = self._schema is None
        super()._bind(schema)
        if fresh:
            self._gap = self._size
            xp = self._backend.xp
            self._keys = [xp.zeros(0, xp.int64) for _ in self.by]
            self._start = xp.zeros(0, xp.int64)
            self._end = xp.zeros(0, xp.int64)
            self._vals = [xp.zeros(0, a.dtype) for a in self._accs]

    # -- push ------------------------------------------------------------------
    def push(self, table: pa.Table | Frame) -> None:
        """Merge a chunk's rows into the open sessions of their keys."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        self.rows_in += table.num_rows
        chunk = self._chunk_sessions(table)
        if chunk is not None:
            self._merge(*chunk, sorted_=True)  # one chunk's sessions are disjoint already
        return None

    def _chunk_sessions(self, table: pa.Table | Frame) -> tuple[list[Any], Any, Any, list[Any]] | None:
        """The chunk's own sessions: (key codes, start, end, accumulators),
        ordered by (keys, start); None without a non-null event time."""
        frame, ts, rows = self._event_times(table)
        b = self._backend
        xp = b.xp
        if ts.shape[0] == 0:
            return None
        codes = [c.encode(xp, frame.columns[c.name], b) for c in self._codecs]
        keys = codes if rows is None else [c[rows] for c in codes]
        accs = self._acc_inputs(xp, frame, rows)
        return self._sessions(xp, keys, ts, self._gap, accs)

    def _sessions(self, xp: Any, keys: list[Any], start: Any, end: Any | int, accs: list[Any]):
        """Sessions of intervals ``[start, end]`` (``end`` an int: the gap)
        with their accumulators reduced."""
        order, starts, skeys, sstart, send = sessionize(xp, keys, start, end)
        return skeys, sstart, send, reduce_runs(xp, accs, [a.op for a in self._accs], order, starts)

    def _merge(self, keys: list[Any], start: Any, end: Any, vals: list[Any], sorted_: bool = False) -> None:
        """Merge sessions (of a chunk, or partials) into the state; sessions
        left ending at or before the last drain are late."""
        xp = self._backend.xp
        if not sorted_:  # partials of several chunks: merge them with each other first
            keys, start, end, vals = self._sessions(xp, keys, start, end, vals)
        state = (self._keys, self._start, self._end, self._vals)
        if not self._start.shape[0]:
            rest, merged = None, (keys, start, end, vals)
        elif len(self.by) == 1:  # only the keys the chunk has: the others' sessions are copied, not sorted
            rest, merged = self._merge_touched(xp, state, (keys, start, end, vals))
        else:  # no key (one session list) or several key columns: merge everything
            both = [[xp.concatenate([a, b]) for a, b in zip(x, y)] if isinstance(x, list) else
                    xp.concatenate([x, y]) for x, y in zip(state, (keys, start, end, vals))]
            rest, merged = None, self._sessions(xp, *both)
        keys, start, end, vals = merged
        if self._drained is not None:  # only sessions of chunk rows alone can be late
            late = end - self._close <= self._drained
            if bool(late.any()):
                self.late_rows += int(vals[-1][late].sum())  # the __rows accumulator
                keep = ~late
                keys, start, end, vals = [k[keep] for k in keys], start[keep], end[keep], [v[keep] for v in vals]
        if rest is not None:
            keys, start, end, vals = _interleave(xp, rest, (keys, start, end, vals))
        self._keys, self._start, self._end, self._vals = keys, start, end, vals
        self._changed = True

    def _merge_touched(self, xp: Any, state: tuple, chunk: tuple) -> tuple[tuple, tuple]:
        """One key column: the open sessions of the chunk's keys (found by
        binary search in the state, sorted by key) merged with the chunk's
        sessions, and the state's other sessions as they are. Costs
        O(chunk log state + touched) plus one copy of the state, not a sort."""
        skey = state[0][0]
        ckey = chunk[0][0]
        first = xp.ones(ckey.shape[0], dtype=bool)
        first[1:] = ckey[1:] != ckey[:-1]
        uk = ckey[first]  # chunk sessions are sorted by key
        lo = xp.searchsorted(skey, uk, side="left")
        cnt = xp.searchsorted(skey, uk, side="right") - lo
        total = int(cnt.sum())
        if total == 0:
            return state, chunk
        # the touched rows: the ranges [lo, lo + cnt) concatenated
        offs = xp.cumsum(cnt) - cnt
        touched = xp.arange(total, dtype=xp.int64) + xp.repeat(lo - offs, cnt)
        keep = xp.ones(skey.shape[0], dtype=bool)
        keep[touched] = False
        pick = lambda t, ix: ([a[ix] for a in t[0]], t[1][ix], t[2][ix], [a[ix] for a in t[3]])  # noqa: E731
        old = pick(state, touched)
        both = [[xp.concatenate([a, b]) for a, b in zip(x, y)] if isinstance(x, list) else xp.concatenate([x, y])
                for x, y in zip(old, chunk)]
        return pick(state, keep), self._sessions(xp, *both)

    # -- partial sessions (merged before the shuffle) --------------------------
    def partial_schema(self) -> pa.Schema:
        """Columns of :meth:`partials`: ``__start``, ``__end``, the ``by``
        columns, ``__acc<i>``."""
        if self._schema is None:
            raise SchemaError("partial_schema() needs the input schema: call bind(schema) first")
        fields = [pa.field("__start", pa.int64()), pa.field("__end", pa.int64())]
        fields += [self._schema.field(k) for k in self.by]
        fields += [pa.field(f"__acc{j}", pa.from_numpy_dtype(a.dtype)) for j, a in enumerate(self._accs)]
        return pa.schema(fields)

    def partials(self, table: pa.Table | Frame) -> pa.Table:
        """This chunk's sessions, without touching the state: what
        :meth:`push_partials` merges, possibly elsewhere. Merging is
        associative, so partial sessions of any split of the rows give the
        sessions of all of them."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        chunk = self._chunk_sessions(table)
        if chunk is None:
            return self.partial_schema().empty_table()
        keys, start, end, vals = chunk
        to_np = self._backend.to_numpy
        cols = [pa.array(to_np(start)), pa.array(to_np(end))]
        cols += [c.decode(to_np(k)) for c, k in zip(self._codecs, keys)]
        cols += [pa.array(to_np(a)) for a in vals]
        return pa.Table.from_arrays(cols, schema=self.partial_schema())

    def push_partials(self, partials: pa.Table) -> None:
        """Merge partial sessions from :meth:`partials` (of any chunks, in any
        order) into the state: the same result as pushing their rows."""
        if self._schema is None:
            raise SchemaError("push_partials() needs the input schema: call bind(schema) first")
        same_schema(self.partial_schema(), partials.schema, "WindowAggregate.push_partials")
        if partials.num_rows == 0:
            return None
        b = self._backend
        xp = b.xp
        frame = Frame.from_arrow(partials, b)
        keys = [c.encode(xp, frame.columns[c.name], b) for c in self._codecs]
        vals = [frame.values(f"__acc{j}")[0] for j in range(len(self._accs))]
        self._merge(keys, frame.values("__start")[0], frame.values("__end")[0], vals)
        return None

    # -- drain -----------------------------------------------------------------
    def drain(self, watermark: Any) -> pa.Table:
        """Emit and delete every session closed by ``watermark`` (end <= W)."""
        w = self._drain_to(watermark)
        if w is None:
            return pa.table({}) if self._schema is None else self._empty_out()
        xp = self._backend.xp
        closed = self._end - self._close <= w
        if not bool(closed.any()):
            return self._empty_out()
        keep = ~closed
        idx = xp.nonzero(closed)[0]
        # output order (window_start, then by): key codes sort like values, except
        # dictionary-coded ones, which _finalize orders with Arrow
        idx = idx[order_indices(xp, [self._start[idx]] + [k[idx] for k in self._keys])]
        out = self._finalize(self._start[idx], [k[idx] for k in self._keys], [v[idx] for v in self._vals],
                             ends=self._end[idx])
        if int(idx.shape[0]) == self.state_rows:  # every session closed
            keep = xp.zeros(0, xp.int64)
        self._keys = [k[keep] for k in self._keys]
        self._start, self._end = self._start[keep], self._end[keep]
        self._vals = [v[keep] for v in self._vals]
        self._changed = True
        for i, c in enumerate(self._codecs):  # forget dictionary keys no open session references
            new = c.compact_codes(xp, [self._keys[i]], self.state_rows, self._backend.to_numpy)
            if new is not None:
                self._keys[i] = new[0]
        self.rows_out += out.num_rows
        return out

    # -- state -----------------------------------------------------------------
    @property
    def state_rows(self) -> int:
        return 0 if self._start is None else int(self._start.shape[0])

    @property
    def state_bytes(self) -> int:
        if self._start is None:
            return 0
        return int(sum(a.nbytes for a in [*self._keys, self._start, self._end, *self._vals]))

    @property
    def open_windows(self) -> int:
        return self.state_rows

    def _state_columns(self, rows: bool = True) -> dict[str, Any]:
        to_np = self._backend.to_numpy
        take = (lambda a: to_np(a)) if rows else (lambda a: to_np(a[:0]))
        cols: dict[str, Any] = {"session_start": take(self._start), "session_end": take(self._end)}
        for k, codes in zip(self.by, self._keys):
            cols[f"key.{k}"] = take(codes)
        for acc, v in zip(self._accs, self._vals):
            cols[f"acc.{acc.agg}.{acc.role}"] = take(v)
        return cols

    def snapshot(self, rows: bool = True) -> dict[str, pa.Table]:
        """``{"state": every open session, "dict.<col>": key dictionaries}``;
        with ``rows=False`` the sessions are left to the part ``"sessions"``."""
        return self._snapshot_tables("gpuwm.session", "session_start", lambda: self._state_columns(rows))

    def state_parts(self) -> dict[str, bool]:
        """One part, every open session: written again when a push or drain
        changed it since :meth:`mark_saved`."""
        return {} if self._schema is None else {_PART: self._changed}

    def snapshot_part(self, name: str) -> pa.Table:
        if name != _PART:
            raise KeyError(name)
        return pa.table(self._state_columns())

    def mark_saved(self, written: Sequence[str] = ()) -> None:
        self._changed = False

    def restore(self, snapshot: Mapping[str, pa.Table],
                parts: Mapping[str, pa.Table] | None = None) -> "SessionAggregate":
        """Continue exactly where the snapshotted operator stopped: from
        ``snapshot()``, or from ``snapshot(rows=False)`` and its part."""
        if self._schema is not None:
            raise WatermarkError("restore() must be called on a fresh WindowAggregate")
        state = snapshot["state"]
        if b"gpuwm.session" not in (state.schema.metadata or {}):
            raise ConfigError("this snapshot is not of a session-window aggregate")
        meta = json.loads(state.schema.metadata[b"gpuwm.session"])
        if parts and _PART in parts:
            state = parts[_PART]
        if self._restore_bind(meta, snapshot):
            b = self._backend
            col = lambda name: b.asarray(state.column(name).to_numpy())  # noqa: E731
            self._start, self._end = col("session_start"), col("session_end")
            self._keys = [col(f"key.{k}") for k in self.by]
            self._vals = [col(f"acc.{a.agg}.{a.role}") for a in self._accs]
        self._load_drained_meta(meta)
        return self


def _interleave(xp: Any, rest: tuple, merged: tuple) -> tuple:
    """Insert the merged sessions (sorted by key, start; keys absent from
    ``rest``) into the other sessions (sorted too), keeping (key, start) order:
    one pass over each column, no sort."""
    rk, mk = rest[0][0], merged[0][0]
    m, r = int(mk.shape[0]), int(rk.shape[0])
    if m == 0:
        return rest
    at = xp.searchsorted(rk, mk, side="left") + xp.arange(m, dtype=xp.int64)
    slot = xp.zeros(r + m, dtype=bool)
    slot[at] = True

    def mix(a: Any, b: Any) -> Any:
        out = xp.empty(r + m, dtype=a.dtype)
        out[slot] = b
        out[~slot] = a
        return out

    return ([mix(a, b) for a, b in zip(rest[0], merged[0])], mix(rest[1], merged[1]), mix(rest[2], merged[2]),
            [mix(a, b) for a, b in zip(rest[3], merged[3])])
