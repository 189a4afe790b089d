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
sorted by (keys, start) and kept on the backend's device, as levels (sorted
runs, see ``SessionAggregate.__init__``): a push finds the open sessions of
its chunk's keys in each level by binary search, marks them dead there, and
appends their merge with the chunk's sessions (a packed sort plus a
segmented running maximum) as a new level; a drain marks what it emits.
Levels merge by size, so a session is copied O(log state) times in its life
rather than once per batch; never per row in Python. Several key columns (or
none) keep one level, merged with each chunk by one sort.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, NamedTuple, Sequence

import pyarrow as pa

from kernels import (
    group_reduce,
    group_starts,
    in_intervals,
    key_filter,
    key_filter_probe,
    order_indices,
    reduce_runs,
    sessionize,
)
from kernels.join import Ranges, expand
from kernels.xp import INT64_MAX, mask_index

from . import staging
from .aggregates import POSITIONAL, AggregateOperator, AggregateSpec
from .errors import ConfigError, SchemaError, StateError, WatermarkError
from .frame import Frame
from .schema import same_schema
from .timecol import TimeDomain, positive_interval

# state-store parts: each level's sessions ("sessions.<id>") and its alive
# marks ("sessions.<id>.alive", a bitmap in Arrow: rows / 8 bytes);
# "sessions" is the one-part layout of earlier versions, still read by restore()
_OLD_PART = "sessions"


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

    @staticmethod
    def join(xp: Any, parts: Sequence["_Sessions"]) -> "_Sessions":
        """The rows of ``parts`` one after another: one concatenation a column."""
        first = parts[0]
        if len(parts) == 1:
            return first
        cols = [xp.concatenate(c) for c in zip(*(p.columns() for p in parts))]
        nk = len(first.keys)
        return _Sessions(cols[:nk], cols[nk], cols[nk + 1], cols[nk + 2:])

    @property
    def rows(self) -> int:
        return int(self.start.shape[0])


@dataclass(eq=False)
class _Level:
    """One level of open sessions: sorted by (keys, start), with alive marks."""

    id: int
    s: _Sessions
    alive: Any = None  #: bool array on the backend; None: every session is alive
    rows: int = -1  #: alive sessions (-1: all of ``s``)
    saved: bool = False  #: the part "sessions.<id>" holds ``s`` (since mark_saved)
    saved_alive: bool = False  #: the part "sessions.<id>.alive" holds ``alive``
    filter: Any = None  #: kernels.KeyFilter of the first key column, built on first search (big levels)

    def __post_init__(self) -> None:
        if self.rows < 0:
            self.rows = self.s.rows if self.alive is None else int(self.alive.sum())

    def live(self, xp: Any) -> _Sessions:
        """The alive sessions (``rows`` of them: gathered, no count read back)."""
        return self.s if self.alive is None else self.s.take(mask_index(xp, self.alive, self.rows))

    def kill(self, xp: Any, ix: Any) -> None:
        """Mark the sessions at positions ``ix`` (alive ones) dead."""
        if self.alive is None:
            self.alive = xp.ones(self.s.rows, dtype=bool)
        self.alive[ix] = False
        self.rows -= int(ix.shape[0])
        self.saved_alive = False


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
        object.__setattr__(self, "gap", positive_interval(self.gap, "gap"))

    def raw(self, dom: TimeDomain) -> tuple[int, int]:
        g = dom.duration(self.gap, "gap", allow_zero=False)
        return g, g

    def __repr__(self) -> str:
        return f"Session({self.column!r}, gap={self.gap!r})"


@dataclass(frozen=True)
class SessionSpec(AggregateSpec):
    """A session-window aggregation (see :class:`~gpuwm.aggregates.AggregateSpec`).

    >>> SessionSpec(Session("ts", 10), by=("k",)).aggs
    (('count', '*', 'count'),)
    """

    windows: ClassVar[tuple[type, ...]] = (Session,)

    def filter_lateness(self, profile: Any) -> Any:
        """A row behind the watermark whose own session ``[ts, ts + gap)`` is open can still join one (as Spark)."""
        return self.window.gap

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.emit == "on-update":
            raise ConfigError("session windows emit on window close (emit='on-window-close') or every session "
                              "each drain (emit='complete'), not on update: a later row can merge sessions, which "
                              "an update stream would have to retract")
        positional = [f"{name} = {fn}({col})" for name, col, fn in self.aggs if fn in POSITIONAL]
        if positional:
            raise ConfigError(f"{', '.join(positional)}: first / last over a session window are not gpuwm's "
                              "(Spark takes them in its sort by event time, not in arrival order); use min / max")

    def build(self, profile: Any, backend: str | None = None) -> "SessionAggregate":
        return SessionAggregate(self.window, by=self.by, aggs=self.agg_dict, emit=self.emit, profile=profile,
                                backend=backend, window_time=self.window_time)


class SessionAggregate(AggregateOperator):
    """Aggregation over :class:`Session` windows (also built by
    ``gpuwm.WindowAggregate(Session(...), ...)``). Output: ``window_start``,
    ``window_end``, the ``by`` columns, the aggregates; ordered by
    window_start, then by.

    >>> import pyarrow as pa, gpuwm
    >>> a = gpuwm.WindowAggregate(gpuwm.Session("ts", 10), by=["k"], aggs={"n": ("*", "count")})
    >>> a.push(pa.table({"ts": [1, 8, 30, 18], "k": [1, 1, 1, 1]}))
    >>> a.drain(30).to_pydict()
    {'window_start': [1], 'window_end': [28], 'k': [1], 'n': [3]}
    """

    late_reason = "session closed"

    def __init__(self, window: Session, by: Sequence[str] = (), aggs: Mapping[str, tuple[str, str]] | None = None,
                 emit: str = "on-window-close", profile: Any = "risingwave", *,
                 close_minus_one: bool | None = None, backend: str | None = None, window_time: bool = False):
        if isinstance(aggs, Mapping):
            aggs = {k: tuple(v) if isinstance(v, list) else v for k, v in aggs.items()}
        super().__init__(SessionSpec(window, by, aggs, emit, window_time), profile, close_minus_one=close_minus_one,
                         backend=backend)
        # The open sessions are levels (an LSM tree of sorted runs), oldest
        # first, so that a push or drain does not copy every open session:
        # - a push finds the open sessions of its chunk's keys in every level
        #   by binary search, marks them dead there, and appends their merge
        #   with the chunk's sessions as a new level; so a key's open sessions
        #   are all in one level, and levels never share a key;
        # - a drain marks the sessions it emits dead;
        # - the newest level is merged into the one before while that one is
        #   at most MERGE_RATIO times larger (sizes fall geometrically: a
        #   session is copied O(log state) times in its life) and not frozen:
        #   a level of max(FREEZE_MIN, state / FREEZE_PARTS) sessions takes no
        #   more merges — sessions close roughly oldest first, so rewriting an
        #   old level to add new sessions to it would copy it again and again;
        #   it only shrinks, and is compacted once half of it is dead;
        # - a level of FILTER_MIN sessions or more gets a key filter
        #   (kernels.key_filter, ~1 byte a session) on its first search: a
        #   chunk key the filter rules out (most of them: a key's open
        #   sessions are in one level) skips that level's binary search.
        # Several key columns (or none) keep one level, merged with each chunk.
        self._levels: list[_Level] = []
        self._next_id = 0
        self._empty: _Sessions | None = None

    def _bind(self, schema: pa.Schema) -> None:
        fresh = self._schema is None
        super()._bind(schema)
        if fresh:
            xp = self._backend.xp
            z = xp.zeros(0, xp.int64)
            self._empty = _Sessions([z for _ in self._keys], z, z, [xp.zeros(0, a.dtype) for a in self._accs])

    #: the newest level is merged into the one before while that one has at
    #: most MERGE_RATIO times its alive sessions and fewer than
    #: max(FREEZE_MIN, state rows // FREEZE_PARTS)
    MERGE_RATIO = 4
    FREEZE_MIN = 1 << 20
    FREEZE_PARTS = 8
    #: levels of at least this many sessions get a key filter (kernels.key_filter)
    FILTER_MIN = 1 << 18

    def _all(self) -> _Sessions:
        """Every open session, sorted by (keys, start), in one level."""
        xp = self._backend.xp
        out = self._empty
        for lv in self._levels:
            out = lv.live(xp) if not out.rows else _interleave(xp, out, lv.live(xp))
        return out

    def _add_level(self, s: _Sessions) -> None:
        if s.rows:
            self._levels.append(_Level(self._next_id, s))
            self._next_id += 1
        self._tidy()

    def _tidy(self) -> None:
        """Compact half-dead levels, drop empty ones, merge the newest into the
        one before while that is at most MERGE_RATIO times larger and not
        frozen."""
        xp = self._backend.xp
        levels = []
        for lv in self._levels:
            if not lv.rows:
                continue
            if 2 * lv.rows <= lv.s.rows:
                lv = _Level(self._next_id, lv.live(xp))
                self._next_id += 1
            levels.append(lv)
        cap = max(self.FREEZE_MIN, sum(lv.rows for lv in levels) // self.FREEZE_PARTS)
        while len(levels) > 1 and levels[-2].rows <= self.MERGE_RATIO * levels[-1].rows and levels[-2].rows < cap:
            new = levels.pop()
            old = levels.pop()
            levels.append(_Level(self._next_id, _interleave(xp, old.live(xp), new.live(xp))))
            self._next_id += 1
        self._levels = levels

    # -- push ------------------------------------------------------------------
    def push(self, table: pa.Table | Frame) -> None:
        """Merge a chunk's rows into the open sessions of their keys."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        self.rows_in += table.num_rows
        chunk = self._chunk_sessions(table)
        if chunk is not None:
            sessions, (frame, keys, ts, rows) = chunk
            late = self._merge(sessions, sorted_=True)  # one chunk's sessions are disjoint already
            if late is not None and self._late_kept is not None:  # their rows, for a side output
                xp = self._backend.xp
                mine = in_intervals(xp, keys, ts, late.keys[:len(self.by)], late.start, late.end - 1)
                self._set_aside(frame, mine if rows is None else rows[mine])
        return None

    def _chunk_sessions(self, table: pa.Table | Frame) -> tuple[_Sessions, tuple] | None:
        """The chunk's own sessions, ordered by (keys, start), and its rows
        (frame, key codes, event times, their rows in the frame: None for
        all); None without a non-null event time."""
        frame, ts, rows = self._event_times(table, self.window.column)
        b = self._backend
        xp = b.xp
        if ts.shape[0] == 0:
            return None
        codes = [c.encode(xp, frame.columns[c.name], b) for c in self._codecs]
        keys = codes if rows is None else [c[rows] for c in codes]
        accs = self._acc_inputs(xp, frame, rows)
        skeys, sts = keys, ts
        if self._dcodecs:  # each row once more per distinct value it has (its event time with it)
            dcodes = [c.encode(xp, frame.columns[col], b) for col, c in zip(self._dcols, self._dcodecs)]
            got, accs = self._distinct_keys(xp, [*keys, ts], [d if rows is None else d[rows] for d in dcodes], accs)
            nby = len(keys)
            skeys, sts = got[:nby] + got[nby + 1:], got[nby]
        return self._sessions(xp, _Sessions(skeys, sts, None, accs)), (frame, keys, ts, rows)

    def _sessions(self, xp: Any, s: _Sessions) -> _Sessions:
        """The sessions of intervals ``[start, end]`` (rows: ``end`` None, the
        gap after ``start``), with their accumulators reduced. With distinct
        aggregates a session is several rows of the same keys, start and
        end: one per distinct value it holds (the value's key set,
        identity accumulators) besides the one with every distinct key
        null — the rows merging sessions brings together are grouped by
        (session, distinct keys), so each value stays once a session."""
        nby = len(self.by)
        order, starts, skeys, sstart, send = sessionize(xp, s.keys[:nby], s.start,
                                                        self._size if s.end is None else s.end)
        ops = [a.op for a in self._accs]
        if not self._dcodecs:
            return _Sessions(skeys, sstart, send, reduce_runs(xp, s.vals, ops, order, starts))
        first = xp.zeros(int(order.shape[0]), dtype=xp.int64)
        first[starts] = 1
        sid = xp.empty_like(first)
        sid[order] = xp.cumsum(first) - 1  # each row's session (sessions in (keys, start) order)
        gk, vals, _, _ = group_reduce(xp, [sid, *s.keys[nby:]], s.vals, ops)
        at = gk[0]
        return _Sessions([k[at] for k in skeys] + gk[1:], sstart[at], send[at], vals)

    def _merge(self, new: _Sessions, sorted_: bool = False) -> _Sessions | None:
        """Merge sessions (of a chunk, or partials) into the state; sessions
        left ending at or before the last drain are late (returned, or None)."""
        xp = self._backend.xp
        if not sorted_:  # partials of several chunks: merge them with each other first
            new = self._sessions(xp, new)
        if len(self.by) == 1:  # only the sessions of the chunk's keys: found by binary search
            touched = self._take_touched(xp, new.keys[0])
        else:  # no key (one session list) or several key columns: merge everything
            touched = [lv.live(xp) for lv in self._levels]
            self._levels = []
        if touched:
            new = self._sessions(xp, _Sessions.join(xp, [*touched, new]))
        gone = None
        if self._drained is not None:  # only sessions of chunk rows alone can be late
            late = new.end - self._close <= self._drained
            nlate = int(xp.count_nonzero(late))
            if nlate:
                gone = new.take(mask_index(xp, late, nlate))
                new = new.take(mask_index(xp, ~late, new.rows - nlate))
                self.late_rows += int(gone.vals[-1].sum())  # the __rows accumulator
        self._add_level(new)
        return gone

    def _take_touched(self, xp: Any, ckey: Any) -> list[_Sessions]:
        """One key column: the open sessions of the chunk's keys (``ckey``,
        sorted), found by binary search in every level and marked dead there.
        Costs O(chunk log state + touched) per level, no copy of a level; the
        sizes the levels need are read in one copy a step, whatever the
        number of levels."""
        b = self._backend
        starts = group_starts(xp, [ckey])
        uk = ckey[mask_index(xp, starts, int(xp.count_nonzero(starts)))]
        levels = self._levels
        # 1. each level's candidate keys: most chunk keys are in no given level, and the filter skips their search
        probes = []
        for lv in levels:
            if lv.s.rows < self.FILTER_MIN:
                probes.append(None)
                continue
            if lv.filter is None:
                lv.filter = key_filter(xp, lv.s.keys[0])
            probes.append(key_filter_probe(xp, lv.filter, uk))
        cands = [uk if ix is None else uk[ix] for ix in staging.mask_indexes(b, probes)]
        # 2. the rows of those keys in each level
        ranges = [_key_ranges(xp, lv.s.keys[0], c) for lv, c in zip(levels, cands)]
        totals = staging.read_ints(b, [r.count.sum() for r in ranges])
        rows = [expand(xp, r, total)[1] for r, total in zip(ranges, totals)]
        # 3. those still alive
        alive = [None if lv.alive is None else lv.alive[t] for lv, t in zip(levels, rows)]
        out = []
        for lv, t, ix in zip(levels, rows, staging.mask_indexes(b, alive)):
            if ix is not None:
                t = t[ix]
            if t.shape[0]:
                out.append(lv.s.take(t))
                lv.kill(xp, t)
        return out

    # -- partial sessions (merged before the shuffle) --------------------------
    def partial_schema(self) -> pa.Schema:
        """Columns of :meth:`partials`: ``__start``, ``__end``, the ``by``
        columns, ``__acc<i>``."""
        if self._schema is None:
            raise SchemaError("partial_schema() needs the input schema: call bind(schema) first")
        fields = [pa.field("__start", pa.int64()), pa.field("__end", pa.int64())]
        fields += [pa.field(c.name, c.type) for c in self._keys]
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
        return self._as_partials(chunk[0])

    def _as_partials(self, s: _Sessions) -> pa.Table:
        """Sessions as :meth:`partial_schema` rows (keys decoded)."""
        to_np = self._backend.to_numpy
        cols = [pa.array(to_np(s.start)), pa.array(to_np(s.end))]
        cols += [c.decode(to_np(k)) for c, k in zip(self._keys, s.keys)]
        cols += [pa.array(to_np(v)) for v in s.vals]
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
        keys = [c.encode(xp, frame.columns[c.name], b) for c in self._keys]
        vals = [frame.values(f"__acc{j}")[0] for j in range(len(self._accs))]
        self._merge(_Sessions(keys, frame.values("__start")[0], frame.values("__end")[0], vals))
        return None

    # -- drain -----------------------------------------------------------------
    def drain(self, watermark: Any) -> pa.Table:
        """Emit and delete every session closed by ``watermark`` (end <= W);
        under ``emit="complete"`` (Spark's complete mode) emit every session
        and keep them (none closes: a row the watermark filter let through
        merges with any)."""
        if self.emit == "complete":
            return self._everything()
        w = self._drain_to(watermark)
        if w is None:
            return pa.table({}) if self._schema is None else self._empty_out()
        xp = self._backend.xp
        done = []
        bound = min(w + self._close, INT64_MAX)  # end - close <= w, without a temporary column
        closed = [lv.s.end <= bound if lv.alive is None else (lv.s.end <= bound) & lv.alive for lv in self._levels]
        for lv, ix in zip(self._levels, staging.mask_indexes(self._backend, closed)):
            if ix.shape[0]:
                done.append(lv.s.take(ix))
                lv.kill(xp, ix)
        if not done:
            return self._empty_out()
        done = _Sessions.join(xp, done)
        self._tidy()
        # output order (window_start, then by): key codes sort like values, except
        # dictionary-coded ones, which _finalize orders with Arrow
        done = done.take(order_indices(xp, [done.start, *done.keys]))
        out = self._finalize(done.start, done.keys, done.vals, ends=done.end)
        for i, c in enumerate(self._keys):  # forget dictionary keys no session of any level references
            new = c.compact_codes(xp, [lv.s.keys[i] for lv in self._levels], self.state_rows,
                                  self._backend.to_numpy)
            if new is not None:
                for lv, k in zip(self._levels, new):
                    lv.s.keys[i] = k
                    lv.saved = False
                    lv.filter = None
        self.rows_out += out.num_rows
        return out

    def _everything(self) -> pa.Table:
        """Every open session's values, the state kept."""
        if self._schema is None:
            return pa.table({})
        xp = self._backend.xp
        s = self._all()
        if not s.rows:
            return self._empty_out()
        s = s.take(order_indices(xp, [s.start, *s.keys]))
        out = self._finalize(s.start, s.keys, s.vals, ends=s.end)
        self.rows_out += out.num_rows
        return out

    # -- state -----------------------------------------------------------------
    @property
    def state_rows(self) -> int:
        return sum(lv.rows for lv in self._levels)

    @property
    def state_bytes(self) -> int:
        return int(sum(sum(a.nbytes for a in lv.s.columns()) + (0 if lv.alive is None else lv.alive.nbytes)
                       for lv in self._levels))

    @property
    def open_windows(self) -> int:
        return self.state_rows

    def _state_columns(self, s: _Sessions) -> dict[str, Any]:
        to_np = self._backend.to_numpy
        cols: dict[str, Any] = {"session_start": to_np(s.start), "session_end": to_np(s.end)}
        for c, codes in zip(self._keys, s.keys):
            cols[f"key.{c.name}"] = to_np(codes)
        for acc, v in zip(self._accs, s.vals):
            cols[f"acc.{acc.agg}.{acc.role}"] = to_np(v)
        return cols

    def rescale_rows(self) -> pa.Table | None:
        """The open sessions as partials (:meth:`push_partials`' input, keys
        by value), for a rescale (:func:`gpuwm.partition.rescale`)."""
        return None if self._schema is None else self._as_partials(self._all())

    def rescale_absorb(self, rows: pa.Table) -> None:
        self.push_partials(rows)

    def snapshot(self, rows: bool = True) -> dict[str, pa.Table]:
        """``{"state": every open session, "dict.<col>": key dictionaries}``;
        with ``rows=False`` the sessions are left to the parts
        (:meth:`state_parts`), and the metadata lists the levels."""
        levels = {"levels": None if rows else [lv.id for lv in self._levels], "next_level": self._next_id}
        return self._snapshot_tables("gpuwm.session", "session_start",
                                     lambda: self._state_columns(self._all() if rows else self._empty), levels)

    def state_parts(self) -> dict[str, bool]:
        """Two parts a level, each written again only when it changed since
        :meth:`mark_saved`: ``sessions.<id>`` (its sessions: new levels,
        merged or compacted ones) and ``sessions.<id>.alive`` (its alive
        marks, one bit a session: flipped by pushes that merge its sessions
        and drains that emit them). So a batch writes its new sessions, the
        levels it merged, and bits — not every open session."""
        out = {}
        for lv in self._levels:
            out[f"sessions.{lv.id}"] = not lv.saved
            out[f"sessions.{lv.id}.alive"] = not lv.saved_alive
        return out

    def _level(self, name: str) -> _Level:
        lid = int(name.removeprefix("sessions.").removesuffix(".alive"))
        for lv in self._levels:
            if lv.id == lid:
                return lv
        raise StateError(f"the session state holds no level {name!r}")

    def snapshot_part(self, name: str) -> pa.Table:
        lv = self._level(name)
        if name.endswith(".alive"):
            alive = [] if lv.alive is None else self._backend.to_numpy(lv.alive)
            return pa.table({"alive": pa.array(alive, pa.bool_())})
        return pa.table(self._state_columns(lv.s))

    def mark_saved(self, written: Sequence[str] = ()) -> None:
        for name in written:
            lv = self._level(name)
            if name.endswith(".alive"):
                lv.saved_alive = True
            else:
                lv.saved = True

    def restore(self, snapshot: Mapping[str, pa.Table],
                parts: Mapping[str, pa.Table] | None = None) -> "SessionAggregate":
        """Continue exactly where the snapshotted operator stopped: from
        ``snapshot()``, or from ``snapshot(rows=False)`` and its parts."""
        if self._schema is not None:
            raise WatermarkError("restore() must be called on a fresh WindowAggregate")
        state = snapshot["state"]
        if b"gpuwm.session" not in (state.schema.metadata or {}):
            raise StateError("this snapshot is not of a session-window aggregate")
        meta = json.loads(state.schema.metadata[b"gpuwm.session"])
        parts = parts or {}
        if self._restore_bind(meta, snapshot):
            b = self._backend

            def sessions(t: pa.Table) -> _Sessions:
                col = lambda name: b.asarray(t.column(name).to_numpy())  # noqa: E731
                return _Sessions([col(f"key.{c.name}") for c in self._keys], col("session_start"), col("session_end"),
                                 [col(f"acc.{a.agg}.{a.role}") for a in self._accs])

            self._next_id = meta.get("next_level", 0)
            if meta.get("levels") is not None:  # the incremental store's parts, as they were saved
                missing = [f"sessions.{lid}" for lid in meta["levels"] if f"sessions.{lid}" not in parts]
                if missing:
                    raise StateError(f"snapshot(rows=False) leaves the sessions to its parts: {missing} not given")
                for lid in meta["levels"]:
                    alive = parts[f"sessions.{lid}.alive"].column("alive")
                    alive = b.asarray(alive.to_numpy(zero_copy_only=False)) if len(alive) else None
                    self._levels.append(_Level(lid, sessions(parts[f"sessions.{lid}"]), alive,
                                               saved=True, saved_alive=True))
            else:  # one table of every open session (snapshot(), or the old one-part layout)
                self._add_level(sessions(parts.get(_OLD_PART, state)))
        self._load_drained_meta(meta)
        return self


def _key_ranges(xp: Any, keys: Any, uk: Any) -> Ranges:
    """Where each key of ``uk`` (sorted, distinct) is in ``keys`` (sorted):
    its first position and count (0 where absent), for :func:`expand`."""
    lo = xp.searchsorted(keys, uk, side="left")
    return Ranges(lo, xp.searchsorted(keys, uk, side="right") - lo, None)


def _interleave(xp: Any, rest: _Sessions, merged: _Sessions) -> _Sessions:
    """Insert the merged sessions (sorted by key, start; keys absent from
    ``rest``) into the other sessions (sorted too), keeping (key, start) order:
    one pass over each column, no sort."""
    m, r = merged.rows, rest.rows
    if m == 0:
        return rest
    ins = xp.searchsorted(rest.keys[0], merged.keys[0], side="left")  # sorted: merged is
    at = ins + xp.arange(m, dtype=xp.int64)  # each merged session's slot in the result
    rank = xp.arange(r, dtype=xp.int64)
    keep = rank + xp.searchsorted(ins, rank, side="right")  # each other one's: after the merged ones before it

    def mix(a: Any, b: Any) -> Any:  # two scatters by position (no mask: no count read back)
        out = xp.empty(r + m, dtype=a.dtype)
        out[at] = b
        out[keep] = a
        return out

    return rest.map(mix, merged)
