"""Windowed aggregation whose state the watermark cleans up.

Windows are aligned to the epoch (like Spark, Flink and RisingWave):
``Tumble(size)`` puts ``ts`` in ``[tumble_start(ts), +size)``; ``Hop(size,
slide)`` in the ``size // slide`` windows ``[s, s + size)`` with ``s`` a
multiple of ``slide`` and ``s <= ts < s + size``.

State is one block per open window (its group keys sorted, with accumulator
columns on the backend's device). ``push`` aggregates the chunk into
partials and merges them into the blocks of the windows it touches only, so
its cost does not grow with the number of open windows. ``drain(W)`` emits
every window with ``end <= W`` (``end - 1 <= W`` under ``flink``) and deletes
its state. A row whose window was already closed by an earlier drain is
dropped and counted in ``late_rows`` (for hopping windows: per window).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from kernels import assign_windows, derive_watermarks, group_reduce, group_starts

from .backend import Backend, get_backend
from .drained import Drained
from .errors import ConfigError, SchemaError, WatermarkError
from .frame import Frame, _fixed_dtype, numpy_to_arrow, sort_table
from .keys import KeyCodec
from .operator import Capabilities, Operator, OperatorSpec
from .profiles import Profile, resolve
from .timecol import TimeDomain, event_time_domain, parse_interval
from .watermark import same_schema, schema_from_text, schema_to_text

AGG_FUNCS = ("count", "sum", "min", "max", "mean")
EMIT_MODES = ("on-window-close", "on-update")
_I64 = np.iinfo(np.int64)


def _positive(value: Any, what: str) -> Any:
    value = parse_interval(value)
    if isinstance(value, bool) or not isinstance(value, (int, timedelta)):
        raise ConfigError(f"{what} must be a timedelta, an interval string or an int, got {value!r}")
    if (isinstance(value, int) and value <= 0) or (isinstance(value, timedelta) and value <= timedelta(0)):
        raise ConfigError(f"{what} must be > 0, got {value!r}")
    return value


def _as_ns(value: Any) -> int:
    return value // timedelta(microseconds=1) * 1000 if isinstance(value, timedelta) else value


@dataclass(frozen=True)
class _Window:
    column: str
    size: Any
    slide: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _positive(self.size, "size"))
        object.__setattr__(self, "slide", _positive(self.slide, "slide"))
        if type(self.size) is not type(self.slide):
            raise ConfigError(f"size {self.size!r} and slide {self.slide!r} must both be durations or both ints")
        if self.slide > self.size:
            raise ConfigError(f"slide {self.slide!r} must not exceed size {self.size!r}")
        if self.size % self.slide:
            raise ConfigError(f"slide {self.slide!r} must divide size {self.size!r}")

    def raw(self, dom: TimeDomain) -> tuple[int, int]:
        return dom.duration(self.size, "size", allow_zero=False), dom.duration(self.slide, "slide", allow_zero=False)

    def derive(self, watermark: Any) -> tuple[Any, Any]:
        """(window_start watermark, window_end watermark) for a watermark on
        the event-time column (RisingWave's derivation)."""
        if watermark is None:
            return None, None
        if isinstance(watermark, int) and not isinstance(watermark, bool):
            if not isinstance(self.size, int):
                raise ConfigError("an int watermark needs an int window size")
            return derive_watermarks(watermark, self.size, self.slide)
        ts = pd.Timestamp(watermark)
        tz = ts.tz
        if tz is None:
            ts = ts.tz_localize("UTC")
        s, e = derive_watermarks(ts.as_unit("ns").value, _as_ns(self.size), _as_ns(self.slide))
        conv = (lambda v: pd.Timestamp(v, unit="ns", tz="UTC")) if tz is not None else (
            lambda v: pd.Timestamp(v, unit="ns"))
        return conv(s), conv(e)


class Tumble(_Window):
    """Tumbling windows of ``size`` on ``column``.

    >>> Tumble("ts", 10).derive(47)
    (40, 50)
    """

    def __init__(self, column: str, size: Any):
        super().__init__(column, size, size)

    def __repr__(self) -> str:
        return f"Tumble({self.column!r}, {self.size!r})"


class Hop(_Window):
    """Hopping (sliding) windows of ``size`` every ``slide`` on ``column``.

    >>> Hop("ts", size=30, slide=15).derive(47)
    (30, 60)
    """

    def __init__(self, column: str, size: Any, slide: Any):
        super().__init__(column, size, slide)

    def __repr__(self) -> str:
        return f"Hop({self.column!r}, size={self.size!r}, slide={self.slide!r})"


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


@dataclass(frozen=True)
class _Acc:
    agg: str  # output name
    role: str  # n, s, nn, v
    dtype: np.dtype
    op: str  # add, min, max


def _check_aggs(aggs: Mapping[str, tuple[str, str]] | None) -> tuple[tuple[str, str, str], ...]:
    """``{output: (column, fn)}`` checked, as ``((output, column, fn), ...)``."""
    aggs = dict(aggs) if aggs is not None else {"count": ("*", "count")}
    if not aggs:
        raise ConfigError("aggs must name at least one aggregate, e.g. {'n': ('*', 'count')}")
    out = []
    for name, spec in aggs.items():
        if not (isinstance(spec, (tuple, list)) and len(spec) == 2):
            raise ConfigError(f"aggregate {name!r} must be (column, function), got {spec!r}")
        col, fn = spec
        if fn not in AGG_FUNCS:
            raise ConfigError(f"unknown aggregate function {fn!r} in {name!r}; expected one of {AGG_FUNCS}")
        if col == "*" and fn != "count":
            raise ConfigError(f"aggregate {name!r}: '*' only works with count, not {fn!r}")
        out.append((name, col, fn))
    return tuple(out)


def _plan_aggs(aggs: Mapping[str, tuple[str, str]], schema: pa.Schema) -> tuple[list[_Acc], list[pa.Field]]:
    """The accumulators of ``aggs`` over ``schema`` and their output fields
    (the column types are checked here)."""
    accs: list[_Acc] = []
    out_fields: list[pa.Field] = []
    for name, (col, fn) in aggs.items():
        if col != "*" and col not in schema.names:
            raise SchemaError(f"aggregate {name!r}: column {col!r} not found; the table has columns {schema.names}")
        t = None if col == "*" else schema.field(col).type
        if fn == "count":
            accs.append(_Acc(name, "n", np.dtype(np.int64), "add"))
            out_fields.append(pa.field(name, pa.int64()))
            continue
        numeric = t is not None and (pa.types.is_integer(t) or pa.types.is_floating(t))
        ordered = numeric or (t is not None and (pa.types.is_timestamp(t) or pa.types.is_date(t)
                                                 or pa.types.is_duration(t)))
        if fn in ("sum", "mean") and not numeric:
            raise SchemaError(f"aggregate {name!r}: {fn} needs a numeric column, {col!r} is {t}")
        if fn in ("min", "max") and not ordered:
            raise SchemaError(f"aggregate {name!r}: {fn} needs a numeric or temporal column, {col!r} is {t}")
        if fn == "mean":
            dt, out_t = np.dtype(np.float64), pa.float64()
        elif fn == "sum":
            isf = pa.types.is_floating(t)
            dt = np.dtype(np.float64 if isf else np.int64)
            out_t = pa.float64() if isf else pa.int64()
        else:
            isf = pa.types.is_floating(t)
            dt, out_t = np.dtype(np.float64 if isf else np.int64), t
        role = "v" if fn in ("min", "max") else "s"
        op = {"min": "min", "max": "max"}.get(fn, "add")
        accs.append(_Acc(name, role, dt, op))
        accs.append(_Acc(name, "nn", np.dtype(np.int64), "add"))
        out_fields.append(pa.field(name, out_t))
    accs.append(_Acc("__rows", "n", np.dtype(np.int64), "add"))  # (row, window) pairs: late counts
    return accs, out_fields


#: the output column a window adds when another stage follows it: Spark's
#: ``window_time``, window_end - 1 unit of the event-time column, the event
#: time of the window's row downstream
WINDOW_TIME = "window_time"


@dataclass(frozen=True)
class WindowSpec(OperatorSpec):
    """A windowed aggregation: ``window`` (:class:`Tumble`, :class:`Hop` or
    :class:`Session`), group keys ``by``, ``aggs`` as ``((output, column,
    fn), ...)`` (or a ``{output: (column, fn)}`` dict), ``emit``, and
    ``window_time``: add the ``window_time`` column (a stage follows).

    >>> WindowSpec(Tumble("ts", 10), by=("k",), aggs={"n": ("*", "count")}).keys()
    ('k',)
    """

    window: Any
    by: tuple[str, ...] = ()
    aggs: Any = None
    emit: str = "on-window-close"
    window_time: bool = False

    capabilities: ClassVar[Capabilities] = Capabilities(partials=True)
    kind: ClassVar[str] = "window"

    def __post_init__(self) -> None:
        if not isinstance(self.window, (_Window, Session)):
            raise ConfigError(f"window must be gpuwm.Tumble, gpuwm.Hop or gpuwm.Session, got {self.window!r}")
        if self.emit not in EMIT_MODES:
            raise ConfigError(f"emit must be one of {EMIT_MODES}, got {self.emit!r}")
        if isinstance(self.window, Session) and self.emit == "on-update":
            raise ConfigError("session windows emit on window close only (emit='on-window-close'): a later row "
                              "can merge sessions, which an update stream would have to retract")
        by = (self.by,) if isinstance(self.by, str) else tuple(self.by)
        aggs = self.aggs
        if aggs is None or isinstance(aggs, Mapping):
            aggs = _check_aggs(aggs)
        else:
            aggs = _check_aggs({name: (col, fn) for name, col, fn in aggs})
        object.__setattr__(self, "by", by)
        object.__setattr__(self, "aggs", aggs)
        names = [n for n, _, _ in aggs]
        clash = ({"window_start", "window_end", WINDOW_TIME} & (set(names) | set(by))) | (set(names) & set(by))
        if clash:
            raise ConfigError(f"output column names collide: {sorted(clash)}")

    @property
    def agg_dict(self) -> dict[str, tuple[str, str]]:
        return {name: (col, fn) for name, col, fn in self.aggs}

    def build(self, profile: Any, backend: str | None = None) -> "WindowAggregate":
        return WindowAggregate(self.window, by=self.by, aggs=self.agg_dict, emit=self.emit, profile=profile,
                               backend=backend, window_time=self.window_time)

    def keys(self) -> tuple[str, ...]:
        return self.by

    def event_time(self, upstream: str) -> str:
        return WINDOW_TIME

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        dom = event_time_domain(schema, self.window.column)
        self.window.raw(dom)  # sizes fit the column (ints for an integer column)
        for k in self.by:
            if k not in schema.names:
                raise SchemaError(f"group key column {k!r} not found; the table has columns {schema.names}")
        _, agg_fields = _plan_aggs(self.agg_dict, schema)
        fields = [pa.field("window_start", dom.type), pa.field("window_end", dom.type)]
        fields += [schema.field(k) for k in self.by] + agg_fields
        if self.window_time:
            fields.append(pa.field(WINDOW_TIME, dom.type))
        return pa.schema(fields)

    def with_next(self, nxt: OperatorSpec) -> "WindowSpec":
        if self.emit == "on-update":
            raise ConfigError("a stage cannot follow a window with emit='on-update': its rows are updates, "
                              "not final values (use emit='on-window-close')")
        return self if self.window_time else WindowSpec(self.window, self.by, self.aggs, self.emit, True)


class WindowAggregate(Operator, Drained):
    """Aggregate rows per (window, group key); emit and forget closed windows.

    Parameters
    ----------
    window : :class:`Tumble` or :class:`Hop`.
    by : group key columns (may be empty).
    aggs : ``{output: (column, fn)}`` with fn in count, sum, min, max, mean;
        ``("*", "count")`` counts rows, ``(col, "count")`` non-null values.
        Nulls are ignored; an aggregate over no non-null value is null.
    emit : ``"on-window-close"`` (``drain`` returns final rows) or
        ``"on-update"`` (``push`` returns the changed windows' current values;
        ``drain`` only evicts).
    profile : the window-close boundary (``flink`` closes at ``W >= end - 1``).
    close_minus_one : override the profile's boundary.

    Output columns: ``window_start``, ``window_end`` (the event-time column's
    type), the ``by`` columns, the aggregates; ordered by window_start, then by.

    Examples
    --------
    >>> import pyarrow as pa, gpuwm
    >>> a = gpuwm.WindowAggregate(gpuwm.Tumble("ts", 10), by=["k"],
    ...                           aggs={"n": ("*", "count"), "m": ("v", "max")})
    >>> a.push(pa.table({"ts": [1, 5, 12], "k": [1, 1, 2], "v": [3.0, 4.0, 1.0]}))
    >>> a.drain(10).to_pydict()
    {'window_start': [0], 'window_end': [10], 'k': [1], 'n': [2], 'm': [4.0]}
    """

    def __new__(cls, window: Any = None, *args: Any, **kwargs: Any) -> "WindowAggregate":
        from .session import Session, SessionAggregate  # (imports window: not at module level)

        if cls is WindowAggregate and isinstance(window, Session):
            cls = SessionAggregate
        return super().__new__(cls)

    def __init__(
        self,
        window: _Window,
        by: Sequence[str] = (),
        aggs: Mapping[str, tuple[str, str]] | None = None,
        emit: str = "on-window-close",
        profile: str | Profile = "risingwave",
        *,
        close_minus_one: bool | None = None,
        backend: str | None = None,
        window_time: bool = False,
    ):
        if isinstance(aggs, Mapping):
            aggs = {k: tuple(v) if isinstance(v, list) else v for k, v in aggs.items()}
        self.spec = WindowSpec(window, by, aggs, emit, window_time)
        self.window = window
        self.by = list(self.spec.by)
        self.aggs = self.spec.agg_dict
        self.emit = emit
        self.profile = resolve(profile, close_minus_one=close_minus_one)
        self._backend: Backend = get_backend(backend)
        self._schema: pa.Schema | None = None
        self._blocks: dict[int, tuple[list[Any], list[Any]]] = {}
        self._dirty: set[int] = set()  # window starts changed since mark_saved()
        self._init_drained()

    # -- set-up ----------------------------------------------------------------
    def bind(self, schema: pa.Schema) -> "WindowAggregate":
        """Fix the input schema without pushing rows (checked on every push)."""
        self._bind(schema)
        return self

    def _bind(self, schema: pa.Schema) -> None:
        if self._schema is not None:
            same_schema(self._schema, schema, "WindowAggregate.push")
            return
        dom = event_time_domain(schema, self.window.column)
        self._size, self._slide = self.window.raw(dom)
        self._close = 1 if self.profile.close_minus_one else 0
        for k in self.by:
            if k not in schema.names:
                raise SchemaError(f"group key column {k!r} not found; the table has columns {schema.names}")
        self._codecs = [KeyCodec(k, schema.field(k).type) for k in self.by]
        self._accs = _plan_aggs(self.aggs, schema)[0]
        self._domain = dom
        self._out_schema = self.spec.output_schema(schema)
        self._schema = schema
        self._bind_pending_drain()

    # -- push ------------------------------------------------------------------
    def _acc_inputs(self, xp: Any, frame: Frame, rows: Any | None) -> list[Any]:
        """Accumulator inputs per (row, window) pair; ``rows`` None = identity.
        A count over rows that are all non-null is None: group_reduce counts
        it from the grouping, with no column of ones."""
        out = []
        take = (lambda a: a) if rows is None else (lambda a: a[rows])
        for acc in self._accs:
            col, fn = self.aggs.get(acc.agg, ("*", "count"))
            if acc.role == "n" and col == "*":
                out.append(None)
                continue
            values, valid = frame.values(col)
            ok = None if valid is None else take(valid)
            if acc.role in ("n", "nn"):
                out.append(None if ok is None else ok.astype(xp.int64))
                continue
            v = take(values).astype(acc.dtype, copy=False)
            if ok is not None:
                ident = 0 if acc.op == "add" else self._identity(acc)
                v = xp.where(ok, v, ident)
            out.append(v)
        return out

    @staticmethod
    def _identity(acc: _Acc) -> Any:
        if acc.dtype.kind == "f":
            return np.inf if acc.op == "min" else -np.inf
        return _I64.max if acc.op == "min" else _I64.min

    def push(self, table: pa.Table | Frame) -> pa.Table | None:
        """Aggregate a chunk into the open windows. Returns None, or under
        ``emit="on-update"`` the changed (window, key) rows' current values.
        ``table``: Arrow, or a :class:`~gpuwm.frame.Frame` already on this
        operator's backend."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        self.rows_in += table.num_rows
        grouped = self._aggregate(table, drop_closed=True)
        if grouped is None:
            return self._empty_out() if self.emit == "on-update" else None
        return self._ingest(self._backend.xp, *grouped)

    def _aggregate(self, table: pa.Table | Frame, drop_closed: bool) -> tuple[list[Any], list[Any]] | None:
        """The chunk's (row, window) pairs grouped by (window index, keys) with
        their accumulators; None when no pair is left. Null event times are
        dropped and counted; with ``drop_closed``, pairs of windows an earlier
        drain closed are dropped and counted as late."""
        frame, ts, base = self._event_times(table)
        b = self._backend
        xp = b.xp
        rows, widx = assign_windows(xp, ts, self._size, self._slide)
        if drop_closed and self._drained is not None and rows.shape[0]:
            # open: start + size > W + close, with start = widx * slide
            open_ = self._open(widx)
            nlate = int(rows.shape[0] - xp.count_nonzero(open_))
            if nlate:
                self.late_rows += nlate
                rows, widx = rows[open_], widx[open_]
        identity = base is None and self._size == self._slide and rows.shape[0] == table.num_rows
        if base is not None:
            rows = base[rows]
        if rows.shape[0] == 0:
            return None
        codes = [c.encode(xp, frame.columns[c.name], b) for c in self._codecs]
        # windows are keyed by index (start // slide): a narrow key packs into
        # one sort word with the group keys
        keys = [widx] + [c if identity else c[rows] for c in codes]
        accs = self._acc_inputs(xp, frame, None if identity else rows)
        gkeys, gaccs, _, _ = group_reduce(xp, keys, accs, [a.op for a in self._accs])
        return gkeys, gaccs

    def _event_times(self, table: pa.Table | Frame) -> tuple[Frame, Any, Any]:
        """The chunk as a Frame on this backend, its non-null event times
        (int64), and the rows they come from (None: every row). Null event
        times are counted in ``null_rows``."""
        self._bind(table.schema)
        b = self._backend
        xp = b.xp
        frame = Frame.of(table, b)
        ts, valid = frame.values(self.window.column)
        ts = ts.astype(xp.int64, copy=False)
        rows = None
        if valid is not None:
            self.null_rows += int(table.num_rows - xp.count_nonzero(valid))
            rows = xp.nonzero(valid)[0]
            ts = ts[rows]
        return frame, ts, rows

    def _open(self, widx: Any) -> Any:
        """Which window indexes the last drain left open: start + size > W + close,
        with start = widx * slide."""
        return widx > (self._drained + self._close - self._size) // self._slide

    def _ingest(self, xp: Any, gkeys: list[Any], gaccs: list[Any]) -> pa.Table | None:
        changed = self._merge(xp, gkeys, gaccs)
        if self.emit == "on-update":
            out = self._finalize(*changed)
            self.rows_out += out.num_rows
            return out
        return None

    # -- partial aggregates (pre-aggregation before a shuffle) ------------------
    def partial_schema(self) -> pa.Schema:
        """Columns of :meth:`partials`: ``__widx``, the ``by`` columns, ``__acc<i>``."""
        if self._schema is None:
            raise SchemaError("partial_schema() needs the input schema: call bind(schema) first")
        fields = [pa.field("__widx", pa.int64())] + [self._schema.field(k) for k in self.by]
        fields += [pa.field(f"__acc{j}", pa.from_numpy_dtype(a.dtype)) for j, a in enumerate(self._accs)]
        return pa.schema(fields)

    def partials(self, table: pa.Table | Frame) -> pa.Table:
        """This chunk's partial aggregates per (window, key), without touching
        the state: what :meth:`push_partials` merges, possibly elsewhere (the
        Spark runtime ships partials, not rows, through the shuffle). Null
        event times are dropped (counted in ``null_rows`` here)."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        grouped = self._aggregate(table, drop_closed=False)
        if grouped is None:
            return self.partial_schema().empty_table()
        gkeys, gaccs = grouped
        to_np = self._backend.to_numpy
        cols = [pa.array(to_np(gkeys[0]))]
        cols += [c.decode(to_np(k)) for c, k in zip(self._codecs, gkeys[1:])]
        cols += [pa.array(to_np(a)) for a in gaccs]
        return pa.Table.from_arrays(cols, schema=self.partial_schema())

    def push_partials(self, partials: pa.Table) -> pa.Table | None:
        """Merge partial aggregates from :meth:`partials` (of any number of
        chunks, in any order) into the state. Same result as pushing the rows;
        partials of windows already closed are dropped and counted."""
        if self._schema is None:
            raise SchemaError("push_partials() needs the input schema: call bind(schema) first")
        same_schema(self.partial_schema(), partials.schema, "WindowAggregate.push_partials")
        b = self._backend
        xp = b.xp
        frame = Frame.from_arrow(partials, b)
        widx = frame.values("__widx")[0]
        accs = [frame.values(f"__acc{j}")[0] for j in range(len(self._accs))]
        codes = [c.encode(xp, frame.columns[c.name], b) for c in self._codecs]
        if self._drained is not None and widx.shape[0]:
            open_ = self._open(widx)
            nlate = int(accs[-1][~open_].sum())
            if nlate:
                self.late_rows += nlate
                widx, codes, accs = widx[open_], [c[open_] for c in codes], [a[open_] for a in accs]
        if widx.shape[0] == 0:
            return self._empty_out() if self.emit == "on-update" else None
        gkeys, gaccs, _, _ = group_reduce(xp, [widx] + codes, accs, [a.op for a in self._accs])
        return self._ingest(xp, gkeys, gaccs)

    def _merge(self, xp: Any, gkeys: list[Any], gaccs: list[Any]) -> tuple[Any, list[Any], list[Any]]:
        """Merge partials (sorted by window, keys) into the touched windows'
        blocks. Returns the changed groups (window, key codes, accumulators)."""
        b = self._backend
        slide = self._slide
        wins = gkeys[0]  # window index = start // slide
        # wins is sorted (the first group key): its distinct values without a
        # hash, and only those cross to the host
        touched = b.to_numpy(wins[group_starts(xp, [wins])]).tolist()  # few: one per window in the chunk
        self._dirty.update(w * slide for w in touched)
        existing = [w for w in touched if w * slide in self._blocks]
        on_update = self.emit == "on-update"
        ops = [a.op for a in self._accs]
        if existing:
            blocks = [self._blocks[w * slide] for w in existing]
            parts_k = [[xp.full(blk[1][0].shape[0], w, dtype=xp.int64) for w, blk in zip(existing, blocks)]]
            for i in range(len(self.by)):
                parts_k.append([blk[0][i] for blk in blocks])
            parts_a = [[blk[1][j] for blk in blocks] for j in range(len(self._accs))]
            allk = [xp.concatenate(p + [g]) for p, g in zip(parts_k, gkeys)]
            alla = [xp.concatenate(p + [g]) for p, g in zip(parts_a, gaccs)]
            if on_update:
                nstate = int(sum(p.shape[0] for p in parts_k[0]))
                flag = xp.concatenate([xp.zeros(nstate, xp.int64), xp.ones(gkeys[0].shape[0], xp.int64)])
                alla.append(flag)
                ops = ops + ["max"]
            gkeys, gaccs, _, _ = group_reduce(xp, allk, alla, ops)
            wins = gkeys[0]
        bounds = b.to_numpy(xp.searchsorted(wins, xp.asarray(touched + [_I64.max], dtype=xp.int64)))
        bounds[-1] = wins.shape[0]
        for i, w in enumerate(touched):
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            self._blocks[w * slide] = ([k[lo:hi] for k in gkeys[1:]], [a[lo:hi] for a in gaccs[: len(self._accs)]])
        if on_update and existing:
            sel = gaccs[-1] == 1
            return wins[sel] * slide, [k[sel] for k in gkeys[1:]], [a[sel] for a in gaccs[: len(self._accs)]]
        return wins * slide, gkeys[1:], gaccs[: len(self._accs)]

    # -- drain -----------------------------------------------------------------
    def drain(self, watermark: Any) -> pa.Table:
        """Emit (``on-window-close``) and delete every window closed by ``watermark``."""
        w = self._drain_to(watermark)
        if w is None:
            return pa.table({}) if self._schema is None else self._empty_out()
        closed = sorted(s for s in self._blocks if s + self._size <= w + self._close)
        if not closed:
            return self._empty_out()
        xp = self._backend.xp
        blocks = [self._blocks.pop(s) for s in closed]
        if self.emit == "on-update":
            self._compact_keys()
            return self._empty_out()
        nrows = [blk[1][0].shape[0] for blk in blocks]
        wins = xp.concatenate([xp.full(n, s, dtype=xp.int64) for s, n in zip(closed, nrows)])
        keys = [xp.concatenate([blk[0][i] for blk in blocks]) for i in range(len(self.by))]
        accs = [xp.concatenate([blk[1][j] for blk in blocks]) for j in range(len(self._accs))]
        out = self._finalize(wins, keys, accs)  # decodes the keys: compact after
        self._compact_keys()
        self.rows_out += out.num_rows
        return out

    def output_watermark(self, watermark: Any) -> Any:
        """The watermark on ``window_time`` after a drain at ``watermark``:
        under profiles with ``derive_watermarks`` (RisingWave), a window not
        yet emitted ends at or after the derived window_end watermark
        (:meth:`Tumble.derive`), so its ``window_time`` is at least that - 1;
        otherwise (Spark, Flink: an aggregation passes its input watermark
        on) ``watermark`` itself. Session windows pass it on."""
        if watermark is None or self._schema is None or not self.profile.derive_watermarks \
                or isinstance(self.window, Session):
            return watermark
        _, end = derive_watermarks(self._domain.to_raw(watermark), self._size, self._slide)
        return self._domain.from_raw(end - 1)

    def _compact_keys(self) -> None:
        """Forget dictionary keys no open window references any more."""
        b = self._backend
        starts = list(self._blocks)
        rows = self.state_rows
        for i, c in enumerate(self._codecs):
            new = c.compact_codes(b.xp, [self._blocks[s][0][i] for s in starts], rows, b.to_numpy)
            if new is not None:  # every window's key codes changed
                self._dirty.update(starts)
            for s, codes in zip(starts, new or ()):
                self._blocks[s][0][i] = codes

    # -- output ----------------------------------------------------------------
    def _empty_out(self) -> pa.Table:
        return self._out_schema.empty_table()

    def _finalize(self, wins: Any, keys: list[Any], accs: list[Any], ends: Any = None) -> pa.Table:
        """Output rows from window starts (``ends``: start + size when None),
        key codes and accumulators."""
        b = self._backend
        t = self._domain.type
        wdt = np.dtype(np.int64) if self._domain.is_timestamp else np.dtype(t.to_pandas_dtype())
        w = b.to_numpy(wins)
        e = w + self._size if ends is None else b.to_numpy(ends)
        cols = [numpy_to_arrow(t, w.astype(wdt), None), numpy_to_arrow(t, e.astype(wdt), None)]
        cols += [c.decode(b.to_numpy(k)) for c, k in zip(self._codecs, keys)]
        host = [b.to_numpy(a) for a in accs]
        j = 0
        for name, (col, fn) in self.aggs.items():
            field = self._out_schema.field(name)
            if fn == "count":
                cols.append(pa.array(host[j], pa.int64()))
                j += 1
                continue
            v, nn = host[j], host[j + 1]
            j += 2
            valid = nn > 0
            if fn == "mean":
                v = v / np.where(valid, nn, 1)
            if fn in ("min", "max") and v.dtype.kind != "f":
                v = v.astype(_fixed_dtype(field.type))
            cols.append(numpy_to_arrow(field.type, np.where(valid, v, 0).astype(v.dtype), valid))
        if self.spec.window_time:
            cols.append(numpy_to_arrow(t, (e - 1).astype(wdt), None))
        out = pa.Table.from_arrays(cols, schema=self._out_schema)
        if any(not c.ordered for c in self._codecs):
            out = sort_table(out, ["window_start", *self.by])
        return out

    # -- state -----------------------------------------------------------------
    @property
    def state_rows(self) -> int:
        return sum(blk[1][0].shape[0] for blk in self._blocks.values())

    @property
    def state_bytes(self) -> int:
        return sum(a.nbytes for blk in self._blocks.values() for part in blk for a in part)

    @property
    def open_windows(self) -> int:
        return len(self._blocks)

    def snapshot(self, rows: bool = True) -> dict[str, pa.Table]:
        """``{"state": rows of every open window, "dict.<col>": key dictionaries}``.
        With ``rows=False`` the state table has the columns and counters but
        no rows: a store that saves windows one by one
        (:meth:`state_parts`) hands them to :meth:`restore` beside it."""
        return self._snapshot_tables("gpuwm.window", "window_start",
                                     lambda: self._state_columns(sorted(self._blocks) if rows else []))

    def _restore_bind(self, meta: dict, snapshot: Mapping[str, pa.Table]) -> bool:
        """Bind the snapshotted input schema and reload the key dictionaries;
        False when the snapshot was taken before any row."""
        if meta["schema"] is None:
            return False
        self._bind(schema_from_text(meta["schema"]))
        for c in self._codecs:
            if f"dict.{c.name}" in snapshot:
                c.load_dictionary(snapshot[f"dict.{c.name}"].column("value"))
        return True

    def _snapshot_tables(self, tag: str, first: str, columns: Any,
                         extra: Mapping[str, Any] | None = None) -> dict[str, pa.Table]:
        """``{"state": columns() with the counters (and ``extra``) as metadata
        under tag, "dict.<col>": key dictionaries}`` (``{first: []}`` before
        any row)."""
        meta = {**self._drained_meta(), "schema": schema_to_text(self._schema), **(extra or {})}
        out: dict[str, pa.Table] = {}
        cols: dict[str, Any] = {first: pa.array([], pa.int64())}
        if self._schema is not None:
            cols = columns()
            for c in self._codecs:
                d = c.dictionary()
                if d is not None:
                    out[f"dict.{c.name}"] = pa.table({"value": d})
        out["state"] = pa.table(cols).replace_schema_metadata({tag: json.dumps(meta)})
        return out

    def state_parts(self) -> dict[str, bool]:
        """The open windows as parts of an incremental state store, in window
        order: ``{name: must_write}`` — a window is written again only when
        its state changed since :meth:`mark_saved` (or since the operator was
        built or restored); the store links the others' previous files."""
        return {f"win.{s}": s in self._dirty for s in sorted(self._blocks)}

    def snapshot_part(self, name: str) -> pa.Table:
        """The state rows of one open window (:meth:`state_parts`), as in :meth:`snapshot`."""
        return pa.table(self._state_columns([int(name.removeprefix("win."))]))

    def mark_saved(self, written: Sequence[str] = ()) -> None:
        """The store saved every part (writing ``written``, linking the rest)."""
        self._dirty = set()

    def _state_columns(self, starts: list[int]) -> dict[str, Any]:
        b = self._backend
        xp = b.xp
        blocks = [self._blocks[s] for s in starts]
        n = [blk[1][0].shape[0] for blk in blocks]
        cols: dict[str, Any] = {"window_start": np.repeat(np.asarray(starts, dtype=np.int64), n)}
        for i, k in enumerate(self.by):
            cols[f"key.{k}"] = b.to_numpy(xp.concatenate([blk[0][i] for blk in blocks])) if blocks else \
                np.zeros(0, np.int64)
        for j, acc in enumerate(self._accs):
            cols[f"acc.{acc.agg}.{acc.role}"] = b.to_numpy(xp.concatenate([blk[1][j] for blk in blocks])) \
                if blocks else np.zeros(0, acc.dtype)
        return cols

    def restore(self, snapshot: Mapping[str, pa.Table],
                parts: Mapping[str, pa.Table] | None = None) -> "WindowAggregate":
        """Continue exactly where the snapshotted operator stopped: from
        ``snapshot()``, or from ``snapshot(rows=False)`` and its parts
        (:meth:`snapshot_part`)."""
        if self._schema is not None:
            raise WatermarkError("restore() must be called on a fresh WindowAggregate")
        state = snapshot["state"]
        if parts:  # one table per window, in window order, back into the state table
            order = sorted(parts, key=lambda n: int(n.removeprefix("win.")))
            rows = pa.concat_tables([state.replace_schema_metadata(None)] + [parts[n] for n in order])
            state = rows.replace_schema_metadata(state.schema.metadata)
        meta = json.loads(state.schema.metadata[b"gpuwm.window"])
        if self._restore_bind(meta, snapshot):
            b = self._backend
            wins = state.column("window_start").to_numpy()
            keys = [b.asarray(state.column(f"key.{k}").to_numpy()) for k in self.by]
            accs = [b.asarray(state.column(f"acc.{a.agg}.{a.role}").to_numpy()) for a in self._accs]
            starts, first = np.unique(wins, return_index=True)
            bounds = list(first) + [wins.shape[0]]
            for i, s in enumerate(starts.tolist()):
                lo, hi = int(bounds[i]), int(bounds[i + 1])
                self._blocks[s] = ([k[lo:hi] for k in keys], [a[lo:hi] for a in accs])
        self._load_drained_meta(meta)
        return self
