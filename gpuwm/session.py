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

State is columns — key codes, session start and end, the accumulators —
sorted by (keys, start) and kept on the backend's device. With one key
column they are two levels (see ``SessionAggregate.__init__``): a push finds
the open sessions of its chunk's keys by binary search, merges them with the
chunk's sessions (a packed sort plus a segmented running maximum) into the
small recent level, and only marks them dead in the older one; a drain marks
what it emits. Its cost is O(chunk log chunk + recent level), plus a fold of
the recent level into the older one every few batches; never per row in
Python. Several key columns (or none) keep one level, merged with each chunk
by one sort.
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

# state-store parts: the older level's sessions, its alive marks (a bitmap in
# Arrow, rows / 8 bytes), the recent level; "sessions" is the one-part layout
# of earlier versions, still read by restore()
_MAIN, _ALIVE, _RECENT, _OLD_PART = "sessions.main", "sessions.alive", "sessions.recent", "sessions"
_PARTS = (_MAIN, _ALIVE, _RECENT)


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
        # The open sessions, once bound, in two levels (one key column; else all
        # in ``_live``), so that a push or drain does not copy every open session:
        # - ``_live``: the recent sessions, sorted by (key, start), rebuilt by
        #   every push and drain (it holds at most ~1/8 of the state);
        # - ``_main``: the older ones, sorted the same, with ``_alive`` marks
        #   (None: all alive): a push marks the sessions it merges dead, a drain
        #   the ones it emits; it is compacted once half of it is dead.
        # A key's open sessions are all in one level (a push moves every open
        # session of its keys to ``_live``). ``_live`` is folded into ``_main``
        # when it outgrows max(DELTA_MIN, alive main >> DELTA_SHIFT).
        self._live: _Sessions | None = None
        self._main: _Sessions | None = None
        self._alive: Any = None
        self._main_rows = 0  # alive sessions in _main
        self._dirty: set[str] = set()  # parts changed since mark_saved()

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
            self._main = self._live.take(slice(0, 0))
            self._dirty = set(_PARTS)

    #: ``_live`` is folded into ``_main`` once it has more rows than this and
    #: more than the alive rows of ``_main`` >> DELTA_SHIFT
    DELTA_MIN = 1 << 16
    DELTA_SHIFT = 3

    def _all(self) -> _Sessions:
        """Every open session, sorted by (keys, start), in one level."""
        if not self._main.rows:
            return self._live
        main = self._main if self._alive is None else self._main.take(self._alive)
        return _interleave(self._backend.xp, main, self._live)

    def _fold(self) -> None:
        self._main = self._all()
        self._alive, self._main_rows = None, self._main.rows
        self._live = self._main.take(slice(0, 0))
        self._dirty = set(_PARTS)

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
        if len(self.by) == 1:  # only the keys the chunk has: the others' sessions are not touched
            rest, merged = self._merge_touched(xp, new)
        elif not state.rows:
            merged = new
        else:  # no key (one session list) or several key columns: merge everything
            merged = self._sessions(xp, state.concat(xp, new))
        if self._drained is not None:  # only sessions of chunk rows alone can be late
            late = merged.end - self._close <= self._drained
            if bool(late.any()):
                self.late_rows += int(merged.vals[-1][late].sum())  # the __rows accumulator
                merged = merged.take(~late)
        self._live = merged if rest is None else _interleave(xp, rest, merged)
        self._dirty.add(_RECENT)
        if len(self.by) == 1 and self._live.rows > max(self.DELTA_MIN, self._main_rows >> self.DELTA_SHIFT):
            self._fold()

    def _merge_touched(self, xp: Any, chunk: _Sessions) -> tuple[_Sessions, _Sessions]:
        """One key column: the open sessions of the chunk's keys (found by
        binary search in both levels) merged with the chunk's sessions, and
        ``_live``'s other sessions as they are; the merged ones are marked
        dead in ``_main``. Costs O(chunk log state + touched + _live), not a
        copy of the state."""
        ckey = chunk.keys[0]
        first = xp.ones(ckey.shape[0], dtype=bool)
        first[1:] = ckey[1:] != ckey[:-1]
        uk = ckey[first]  # chunk sessions are sorted by key
        parts = []
        if self._main_rows:
            tm = _touched(xp, self._main.keys[0], uk)
            if self._alive is not None:
                tm = tm[self._alive[tm]]
            if tm.shape[0]:
                if self._alive is None:
                    self._alive = xp.ones(self._main.rows, dtype=bool)
                self._alive[tm] = False
                self._main_rows -= int(tm.shape[0])
                self._dirty.add(_ALIVE)
                parts.append(self._main.take(tm))
        live = self._live
        tl = _touched(xp, live.keys[0], uk)
        if tl.shape[0]:
            parts.append(live.take(tl))
            keep = xp.ones(live.rows, dtype=bool)
            keep[tl] = False
            live = live.take(keep)
        if not parts:
            return live, chunk
        for p in parts:
            chunk = p.concat(xp, chunk)
        return live, self._sessions(xp, chunk)

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
        shut = None  # positions of the closed alive sessions in _main
        if self._main_rows:
            cm = self._main.end - self._close <= w
            shut = xp.flatnonzero(cm if self._alive is None else cm & self._alive)
        if not bool(closed.any()) and (shut is None or not shut.shape[0]):
            return self._empty_out()
        done = self._live.take(closed)
        if shut is not None and shut.shape[0]:
            done = self._main.take(shut).concat(xp, done)
            if self._alive is None:
                self._alive = xp.ones(self._main.rows, dtype=bool)
            self._alive[shut] = False
            self._main_rows -= int(shut.shape[0])
            self._dirty.add(_ALIVE)
            if 2 * self._main_rows <= self._main.rows:  # half of _main is dead: compact it
                self._main = self._main.take(self._alive)
                self._alive = None
                self._dirty.add(_MAIN)
        # output order (window_start, then by): key codes sort like values, except
        # dictionary-coded ones, which _finalize orders with Arrow
        done = done.take(order_indices(xp, [done.start, *done.keys]))
        out = self._finalize(done.start, done.keys, done.vals, ends=done.end)
        if bool(closed.any()):
            self._live = self._live.take(~closed)
            self._dirty.add(_RECENT)
        for i, c in enumerate(self._codecs):  # forget dictionary keys no session of either level references
            new = c.compact_codes(xp, [self._main.keys[i], self._live.keys[i]], self.state_rows,
                                  self._backend.to_numpy)
            if new is not None:
                self._main.keys[i], self._live.keys[i] = new
                self._dirty.update((_MAIN, _RECENT))
        self.rows_out += out.num_rows
        return out

    # -- state -----------------------------------------------------------------
    @property
    def state_rows(self) -> int:
        return 0 if self._live is None else self._main_rows + self._live.rows

    @property
    def state_bytes(self) -> int:
        if self._live is None:
            return 0
        marks = 0 if self._alive is None else self._alive.nbytes
        return int(sum(a.nbytes for a in self._live.columns() + self._main.columns())) + marks

    @property
    def open_windows(self) -> int:
        return self.state_rows

    def _state_columns(self, rows: bool = True, level: _Sessions | None = None) -> dict[str, Any]:
        """Columns of every open session (of ``level`` if given; none without
        ``rows``)."""
        to_np = self._backend.to_numpy
        s = level if level is not None else self._all() if rows else self._live.take(slice(0, 0))
        cols: dict[str, Any] = {"session_start": to_np(s.start), "session_end": to_np(s.end)}
        for k, codes in zip(self.by, s.keys):
            cols[f"key.{k}"] = to_np(codes)
        for acc, v in zip(self._accs, s.vals):
            cols[f"acc.{acc.agg}.{acc.role}"] = to_np(v)
        return cols

    def snapshot(self, rows: bool = True) -> dict[str, pa.Table]:
        """``{"state": every open session, "dict.<col>": key dictionaries}``;
        with ``rows=False`` the sessions are left to the parts (:meth:`state_parts`)."""
        return self._snapshot_tables("gpuwm.session", "session_start", lambda: self._state_columns(rows))

    def state_parts(self) -> dict[str, bool]:
        """Three parts, each written again only when a push or drain changed
        it since :meth:`mark_saved`: ``sessions.main`` (the older sessions:
        rewritten when the recent ones are folded in or half of it has been
        emitted or merged away), ``sessions.alive`` (its alive marks, one bit
        a session) and ``sessions.recent`` (at most ~1/8 of the state once
        it is large). So a batch writes O(its sessions + state / 8 bits), not
        every open session."""
        return {} if self._schema is None else {n: n in self._dirty for n in _PARTS}

    def snapshot_part(self, name: str) -> pa.Table:
        if name == _MAIN:
            return pa.table(self._state_columns(level=self._main))
        if name == _ALIVE:
            alive = self._alive
            return pa.table({"alive": pa.array([] if alive is None else self._backend.to_numpy(alive), pa.bool_())})
        if name == _RECENT:
            return pa.table(self._state_columns(level=self._live))
        raise KeyError(name)

    def mark_saved(self, written: Sequence[str] = ()) -> None:
        self._dirty.difference_update(written)

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
        parts = parts or {}
        if self._restore_bind(meta, snapshot):
            b = self._backend

            def level(t: pa.Table) -> _Sessions:
                col = lambda name: b.asarray(t.column(name).to_numpy())  # noqa: E731
                return _Sessions([col(f"key.{k}") for k in self.by], col("session_start"), col("session_end"),
                                 [col(f"acc.{a.agg}.{a.role}") for a in self._accs])

            if _MAIN in parts:  # the incremental store's three parts, as they were saved
                self._main, self._live = level(parts[_MAIN]), level(parts[_RECENT])
                alive = parts[_ALIVE].column("alive")
                self._alive = b.asarray(alive.to_numpy(zero_copy_only=False)) if len(alive) else None
                self._main_rows = self._main.rows if self._alive is None else int(b.xp.count_nonzero(self._alive))
                self._dirty = set()
            else:  # one table of every open session (snapshot(), or the old one-part layout)
                self._live = level(parts.get(_OLD_PART, state))
                self._main, self._alive, self._main_rows = self._live.take(slice(0, 0)), None, 0
                self._dirty = set(_PARTS)
        self._load_drained_meta(meta)
        return self


def _touched(xp: Any, keys: Any, uk: Any) -> Any:
    """Positions in ``keys`` (sorted) of every row whose key is in ``uk``
    (sorted, distinct): the ranges found by binary search, concatenated."""
    lo = xp.searchsorted(keys, uk, side="left")
    cnt = xp.searchsorted(keys, uk, side="right") - lo
    total = int(cnt.sum())
    offs = xp.cumsum(cnt) - cnt
    return xp.arange(total, dtype=xp.int64) + xp.repeat(lo - offs, cnt)


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
