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
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import pyarrow as pa

from kernels import order_indices, reduce_runs, sessionize

from .errors import ConfigError, SchemaError, WatermarkError
from .frame import Frame
from .timecol import TimeDomain
from .watermark import same_schema
from .window import WindowAggregate, _positive

_PART = "sessions"


class _Sessions(NamedTuple):
    """Sessions as columns on the backend, sorted by (keys, start)."""

    keys: list  # key codes, one array per ``by`` column
    start: Any
    end: Any
    vals: list  # accumulators, one array per accumulator

    def columns(self) -> list:
        return [*self.keys, self.start, self.end, *self.vals]

    def map(self, f: Callable[..., Any], other: "_Sessions | None" = None) -> "_Sessions":
        """``f`` applied to every column (with the same column of ``other``)."""
        cols = [f(c) for c in self.columns()] if other is None else \
            [f(a, b) for a, b in zip(self.columns(), other.columns())]
        nk = len(self.keys)
        return _Sessions(cols[:nk], cols[nk], cols[nk + 1], cols[nk + 2:])

    def take(self, ix: Any) -> "_Sessions":
        return self.map(lambda a: a[ix])

    def concat(self, xp: Any, other: "_Sessions") -> "_Sessions":
        return self.map(lambda a, b: xp.concatenate([a, b]), other)

    @property
    def rows(self) -> int:
        return int(self.start.shape[0])


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
        self._live: _Sessions | None = None  # the open sessions, once bound
        self._changed = False  # state changed since mark_saved()

    @staticmethod
    def _session_window(window: Any) -> bool:
        return isinstance(window, Session)

    def _bind(self, schema: pa.Schema) -> None:
        fresh = self._schema is None
        super()._bind(schema)
        if fresh:
            xp = self._backend.xp
            z = xp.zeros(0, xp.int64)
            self._live = _Sessions([z for _ in self.by], z, z, [xp.zeros(0, a.dtype) for a in self._accs])

    # -- push ------------------------------------------------------------------
    def push(self, table: pa.Table | Frame) -> None:
        """Merge a chunk's rows into the open sessions of their keys."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        self.rows_in += table.num_rows
        chunk = self._chunk_sessions(table)
        if chunk is not None:
            self._merge(chunk, sorted_=True)  # one chunk's sessions are disjoint already
        return None

    def _chunk_sessions(self, table: pa.Table | Frame) -> _Sessions | None:
        """The chunk's own sessions, ordered by (keys, start); None without a
        non-null event time."""
        frame, ts, rows = self._event_times(table)
        b = self._backend
        xp = b.xp
        if ts.shape[0] == 0:
            return None
        codes = [c.encode(xp, frame.columns[c.name], b) for c in self._codecs]
        keys = codes if rows is None else [c[rows] for c in codes]
        accs = self._acc_inputs(xp, frame, rows)
        return self._sessions(xp, _Sessions(keys, ts, None, accs))

    def _sessions(self, xp: Any, s: _Sessions) -> _Sessions:
        """The sessions of intervals ``[start, end]`` (rows: ``end`` None, the
        gap after ``start``), with their accumulators reduced."""
        order, starts, skeys, sstart, send = sessionize(xp, s.keys, s.start, self._size if s.end is None else s.end)
        return _Sessions(skeys, sstart, send, reduce_runs(xp, s.vals, [a.op for a in self._accs], order, starts))

    def _merge(self, new: _Sessions, sorted_: bool = False) -> None:
        """Merge sessions (of a chunk, or partials) into the state; sessions
        left ending at or before the last drain are late."""
        xp = self._backend.xp
        if not sorted_:  # partials of several chunks: merge them with each other first
            new = self._sessions(xp, new)
        state = self._live
        rest = None
        if not state.rows:
            merged = new
        elif len(self.by) == 1:  # only the keys the chunk has: the others' sessions are copied, not sorted
            rest, merged = self._merge_touched(xp, state, new)
        else:  # no key (one session list) or several key columns: merge everything
            merged = self._sessions(xp, state.concat(xp, new))
        if self._drained is not None:  # only sessions of chunk rows alone can be late
            late = merged.end - self._close <= self._drained
            if bool(late.any()):
                self.late_rows += int(merged.vals[-1][late].sum())  # the __rows accumulator
                merged = merged.take(~late)
        self._live = merged if rest is None else _interleave(xp, rest, merged)
        self._changed = True

    def _merge_touched(self, xp: Any, state: _Sessions, chunk: _Sessions) -> tuple[_Sessions, _Sessions]:
        """One key column: the open sessions of the chunk's keys (found by
        binary search in the state, sorted by key) merged with the chunk's
        sessions, and the state's other sessions as they are. Costs
        O(chunk log state + touched) plus one copy of the state, not a sort."""
        skey = state.keys[0]
        ckey = chunk.keys[0]
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
        return state.take(keep), self._sessions(xp, state.take(touched).concat(xp, chunk))

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
        to_np = self._backend.to_numpy
        cols = [pa.array(to_np(chunk.start)), pa.array(to_np(chunk.end))]
        cols += [c.decode(to_np(k)) for c, k in zip(self._codecs, chunk.keys)]
        cols += [pa.array(to_np(a)) for a in chunk.vals]
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
        self._merge(_Sessions(keys, frame.values("__start")[0], frame.values("__end")[0], vals))
        return None

    # -- drain -----------------------------------------------------------------
    def drain(self, watermark: Any) -> pa.Table:
        """Emit and delete every session closed by ``watermark`` (end <= W)."""
        w = self._drain_to(watermark)
        if w is None:
            return pa.table({}) if self._schema is None else self._empty_out()
        xp = self._backend.xp
        closed = self._live.end - self._close <= w
        if not bool(closed.any()):
            return self._empty_out()
        done = self._live.take(closed)
        # output order (window_start, then by): key codes sort like values, except
        # dictionary-coded ones, which _finalize orders with Arrow
        done = done.take(order_indices(xp, [done.start, *done.keys]))
        out = self._finalize(done.start, done.keys, done.vals, ends=done.end)
        self._live = self._live.take(~closed)
        self._changed = True
        for i, c in enumerate(self._codecs):  # forget dictionary keys no open session references
            new = c.compact_codes(xp, [self._live.keys[i]], self.state_rows, self._backend.to_numpy)
            if new is not None:
                self._live.keys[i] = new[0]
        self.rows_out += out.num_rows
        return out

    # -- state -----------------------------------------------------------------
    @property
    def state_rows(self) -> int:
        return 0 if self._live is None else self._live.rows

    @property
    def state_bytes(self) -> int:
        return 0 if self._live is None else int(sum(a.nbytes for a in self._live.columns()))

    @property
    def open_windows(self) -> int:
        return self.state_rows

    def _state_columns(self, rows: bool = True) -> dict[str, Any]:
        to_np = self._backend.to_numpy
        s = self._live if rows else self._live.take(slice(0, 0))
        cols: dict[str, Any] = {"session_start": to_np(s.start), "session_end": to_np(s.end)}
        for k, codes in zip(self.by, s.keys):
            cols[f"key.{k}"] = to_np(codes)
        for acc, v in zip(self._accs, s.vals):
            cols[f"acc.{acc.agg}.{acc.role}"] = to_np(v)
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
            self._live = _Sessions([col(f"key.{k}") for k in self.by], col("session_start"), col("session_end"),
                                   [col(f"acc.{a.agg}.{a.role}") for a in self._accs])
        self._load_drained_meta(meta)
        return self


def _interleave(xp: Any, rest: _Sessions, merged: _Sessions) -> _Sessions:
    """Insert the merged sessions (sorted by key, start; keys absent from
    ``rest``) into the other sessions (sorted too), keeping (key, start) order:
    one pass over each column, no sort."""
    m, r = merged.rows, rest.rows
    if m == 0:
        return rest
    at = xp.searchsorted(rest.keys[0], merged.keys[0], side="left") + xp.arange(m, dtype=xp.int64)
    slot = xp.zeros(r + m, dtype=bool)
    slot[at] = True

    def mix(a: Any, b: Any) -> Any:
        out = xp.empty(r + m, dtype=a.dtype)
        out[slot] = b
        out[~slot] = a
        return out

    return rest.map(mix, merged)
