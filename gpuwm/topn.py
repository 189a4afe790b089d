"""Top-N per event-time window (Flink's Window Top-N): ``row_number()``,
``rank()`` or ``dense_rank()`` ``OVER (PARTITION BY <a window>, <keys> ORDER
BY ...)``, filtered to ranks ``<= n``, emitted when the watermark closes the
partition's window.

Every partition holds an event-time window, so its state is cleaned: a
tumbling window of the input's event time (``window(ts, '10 seconds')`` over
a stream's rows), or, after a windowed aggregation, the aggregation's own
windows (each ``window_time`` is ``window_end - 1``: a tumbling window of the
aggregation's slide holds exactly one of them). A push keeps only the rows
that can still rank ``<= n`` — a row's rank only grows as rows arrive — so
the state is at most ``n`` rows per partition (more with ties under
``rank`` / ``dense_rank``). A drain emits the closed windows' rows with
their rank (the partition's rows ordered by ``order``; ties under
``row_number`` by arrival); rows of a window a drain closed are late.

Or a partition closes by a column of its rows (``until``, no window): the
rows with equal keys and an equal ``until`` close once the watermark
reaches it. This is for a stream whose rows all have their event time at
or below ``until`` — a join whose condition bounds one side's time by a
column of the other, Nexmark q9's ``b_ts BETWEEN a_ts AND expires``: once
the watermark passes an auction's ``expires``, no bid can join it.

Or a partition closes once idle (``ttl=(column, duration)``, no window): the
rows with equal keys form one partition, which closes once the watermark
passes its latest event time by ``duration`` — Flink's state TTL, on event
time. This is for a rank whose partition has no time bound at all (Nexmark
q18's last bid per bidder and auction, q19's top 10 bids per auction): it
equals the rank over the whole input where no partition's rows are more
than ``duration`` apart; a row of keys whose partition closed starts a new
one (emitted again when it closes), and a row whose own time plus
``duration`` the watermark passed is late.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np
import pyarrow as pa

from kernels import group_starts, order_indices
from kernels.over import ranks, segments
from kernels.xp import reduceat

from .backend import Backend, get_backend
from .drained import Drained
from .errors import ConfigError, SchemaError, WatermarkError
from .frame import Frame, _fixed_dtype
from .keys import NULL_CODE, KeyCodec
from .operator import Capabilities, Operator, OperatorSpec, StageContext, json_options, snapshot_meta
from .profiles import Profile, resolve
from .schema import same_schema, schema_from_text, schema_to_text
from .timecol import TimeDomain, event_time_domain

RANKS = ("row_number", "rank", "dense_rank")


def _check_order(order: Any) -> tuple[tuple[str, bool, bool], ...]:
    """``order`` as ``((column, descending, nulls_first), ...)``: a column
    name alone is ascending; ``"-col"`` or ``[col, "desc"]`` descending;
    nulls first when ascending, last when descending (SQL's default), or
    as ``[col, "asc" | "desc", "nulls_first" | "nulls_last"]`` says."""
    out = []
    for o in (order,) if isinstance(order, str) else order:
        if isinstance(o, str):
            col, desc = (o[1:], True) if o.startswith("-") else (o, False)
            out.append((col, desc, not desc))
            continue
        o = tuple(o)
        if len(o) == 3 and isinstance(o[1], bool):  # the checked form back
            out.append((str(o[0]), o[1], bool(o[2])))
            continue
        if not (2 <= len(o) <= 3 and isinstance(o[0], str) and o[1] in ("asc", "desc")
                and (len(o) == 2 or o[2] in ("nulls_first", "nulls_last"))):
            raise ConfigError(f"top-n order {o!r}: expected a column, '-column', or [column, 'asc' | 'desc', "
                              "'nulls_first' | 'nulls_last']")
        desc = o[1] == "desc"
        out.append((o[0], desc, not desc if len(o) == 2 else o[2] == "nulls_first"))
    if not out:
        raise ConfigError("top-n needs an order, e.g. order=['-price']")
    return tuple(out)


@dataclass(frozen=True)
class TopNSpec(OperatorSpec):
    """The rows ranked ``<= n`` by ``order`` in each partition of a
    tumbling ``window`` (of the input's event-time column) and keys ``by``,
    ranked by ``fn``; ``output`` names the rank column (None: not output).

    >>> from gpuwm import Tumble
    >>> TopNSpec(Tumble("ts", 10), ("k",), ["-price", "ts"], 3).order
    (('price', True, False), ('ts', False, True))
    """

    window: Any
    by: tuple[str, ...] = ()
    order: Any = ()
    n: int = 1
    fn: str = "row_number"
    output: str | None = None
    #: instead of a window: the column whose value closes a partition (the rows' event times are at or below it)
    until: str | None = None
    #: instead of a window: (event-time column, duration): a partition closes once idle that long
    ttl: tuple | None = None

    capabilities: ClassVar[Capabilities] = Capabilities()
    kind: ClassVar[str] = "topn"

    def __post_init__(self) -> None:
        from .window import Tumble

        if (self.window is not None) + (self.until is not None) + (self.ttl is not None) > 1:
            raise ConfigError("top-n partitions close by a window, by an 'until' column or after a 'ttl', "
                              "one of them")
        if self.ttl is not None:
            if not (isinstance(self.ttl, (tuple, list)) and len(self.ttl) == 2 and isinstance(self.ttl[0], str)):
                raise ConfigError(f"top-n ttl is (event-time column, duration), got {self.ttl!r}")
            object.__setattr__(self, "ttl", tuple(self.ttl))
        elif self.until is None and not isinstance(self.window, Tumble):
            raise ConfigError(f"top-n partitions by a tumbling window (gpuwm.Tumble), closes them by an 'until' "
                              f"column or after a 'ttl', got {self.window!r}")
        object.__setattr__(self, "by", (self.by,) if isinstance(self.by, str) else tuple(self.by))
        object.__setattr__(self, "order", _check_order(self.order))
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ConfigError(f"top-n keeps ranks <= n with n >= 1, got n={self.n!r}")
        if self.fn not in RANKS:
            raise ConfigError(f"top-n ranks with one of {RANKS}, got {self.fn!r}")

    @classmethod
    def from_json(cls, options: dict, ctx: StageContext) -> "TopNSpec":
        """``{"topn": {"window": size, "by": [...], "order": ["-price"], "n": 3,
        "fn": "rank", "output": "rn"}}``: a tumbling window of the input's
        event time (after a window stage, omit it: the stage's windows);
        ``"on"``: the event-time column a ``window`` or ``ttl`` is of, where
        not the input's (a join's rows' other side's time)."""
        from .window import Tumble

        o = json_options("topn", options, {"window", "by", "order", "n", "fn", "output", "until", "ttl", "on"},
                         ("order", "n"),
                         '{"topn": {"window": "10 seconds", "by": ["k"], "order": ["-price"], "n": 3}}')
        if ctx.event_time is None:
            raise ConfigError("a topn stage needs a watermark (its partitions close by it)")
        size = o.get("window")
        if o.get("ttl") is not None:
            if size is not None or o.get("until") is not None:
                raise ConfigError("a topn stage takes 'window', 'until' or 'ttl', one of them")
            return cls(None, o.get("by", ()), o["order"], o["n"], o.get("fn", "row_number"), o.get("output"),
                       ttl=(o.get("on") or ctx.event_time, o["ttl"]))
        if o.get("until") is not None:
            if size is not None:
                raise ConfigError("a topn stage takes 'window' or 'until', not both")
            return cls(None, o.get("by", ()), o["order"], o["n"], o.get("fn", "row_number"), o.get("output"),
                       o["until"])
        if size is None:
            prev = ctx.previous
            window = getattr(prev, "window", None)
            if prev is None or prev.kind != "window" or not hasattr(window, "raw") or hasattr(window, "gap"):
                raise ConfigError("a topn stage without 'window' ranks a tumbling or hopping window stage's "
                                  "rows; give its window otherwise ('window': '10 seconds')")
            return cls.after_window(window, ctx.event_time, o.get("by", ()), o["order"], o["n"],
                                    o.get("fn", "row_number"), o.get("output"))
        return cls(Tumble(o.get("on") or ctx.event_time, size), o.get("by", ()), o["order"], o["n"],
                   o.get("fn", "row_number"),
                   o.get("output"))

    @classmethod
    def after_window(cls, window: Any, column: str, *args: Any) -> "TopNSpec":
        """Partitions that are a window stage's windows, on its ``window_time``
        ``column``: each window's ``window_time`` (its end - 1) alone in a
        tumbling window of the stage's slide."""
        from .window import Tumble

        return cls(Tumble(column, window.slide), *args)

    def filter_lateness(self, profile: Any) -> Any:
        """As a first stage: under ``window_lateness="window"`` (Spark) a row
        behind the watermark still counts while its window is open (rows of a
        closed window are late here), as in a windowed aggregation."""
        if self.window is None:
            return None
        return self.window.size if profile.window_lateness == "window" else None

    def describe(self) -> dict:
        """The dataclass's fields; ``until`` and ``ttl`` only when set (a checkpoint from before them still
        matches)."""
        d = super().describe()
        for k in ("until", "ttl"):
            if getattr(self, k) is None:
                del d[k]
        return d

    def build(self, profile: Any, backend: str | None = None) -> "TopN":
        return TopN(self.window, self.by, self.order, self.n, self.fn, self.output, profile, backend=backend,
                    until=self.until, ttl=self.ttl)

    def keys(self) -> tuple[str, ...]:
        return self.by

    def check(self, ctx: StageContext) -> None:
        col = self.window.column if self.window is not None else self.ttl[0] if self.ttl is not None else None
        if col is not None and col != ctx.event_time and col not in ctx.also_times:
            raise ConfigError(f"top-n {'window' if self.window is not None else 'ttl'} column {col!r} differs from "
                              f"the event-time column of its input, {ctx.event_time!r}")

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        if self.until is not None:
            event_time_domain(schema, self.until)
        elif self.ttl is not None:
            event_time_domain(schema, self.ttl[0]).duration(self.ttl[1], "ttl", allow_zero=False)
        else:
            self.window.raw(event_time_domain(schema, self.window.column))
        for k in self.by:
            if k not in schema.names:
                raise SchemaError(f"top-n partition column {k!r} not found; the table has columns {schema.names}")
        for col, _, _ in self.order:
            if col not in schema.names:
                raise SchemaError(f"top-n order column {col!r} not found; the table has columns {schema.names}")
            t = schema.field(col).type
            if _fixed_dtype(t) is None:
                raise SchemaError(f"top-n orders by numbers and times; {col!r} is {t}")
        if self.output is None:
            return schema
        if self.output in schema.names:
            raise ConfigError(f"top-n rank column {self.output!r} collides with an input column")
        return schema.append(pa.field(self.output, pa.int32()))  # Spark's row_number / rank: int


class TopN(Operator, Drained):
    """Top-N rows per (tumbling window, keys), emitted when the window closes.

    Parameters
    ----------
    window : :class:`~gpuwm.Tumble` on the event-time column: the
        partitions' windows.
    by : the other partition keys (may be empty).
    order : the ranking order (``"col"``, ``"-col"``: descending; or
        ``(col, "asc" | "desc", "nulls_first" | "nulls_last")``); numbers
        and times.
    n : rows ranked ``<= n`` are emitted.
    fn : ``row_number`` (ties by arrival), ``rank`` or ``dense_rank``.
    output : the rank column's name (int32), or None.
    profile : the window-close boundary (``flink`` closes at ``W >= end - 1``).

    Examples
    --------
    >>> import pyarrow as pa, gpuwm
    >>> t = gpuwm.TopN(gpuwm.Tumble("ts", 10), ["k"], ["-v"], 2, output="rn")
    >>> t.push(pa.table({"ts": [1, 2, 3, 4, 12], "k": [1, 1, 1, 2, 1], "v": [5, 9, 7, 1, 3]}))
    >>> t.drain(10).to_pydict()
    {'ts': [2, 3, 4], 'k': [1, 1, 2], 'v': [9, 7, 1], 'rn': [1, 2, 1]}
    """

    late_reason = "window closed"

    def __init__(self, window: Any, by: Sequence[str] = (), order: Any = (), n: int = 1, fn: str = "row_number",
                 output: str | None = None, profile: str | Profile = "risingwave", *,
                 close_minus_one: bool | None = None, backend: str | None = None, until: str | None = None,
                 ttl: tuple | None = None):
        self.spec = TopNSpec(window, by, order, n, fn, output, until, ttl)
        self.window, self.by, self.order = window, list(self.spec.by), self.spec.order
        self.n, self.fn, self.output = n, fn, output
        self.profile = resolve(profile, close_minus_one=close_minus_one)
        self._backend: Backend = get_backend(backend)
        self._schema: pa.Schema | None = None
        self._domain: TimeDomain | None = None
        self._init_drained()

    def bind(self, schema: pa.Schema) -> "TopN":
        """Fix the input schema before any row (checked on every push)."""
        if self._schema is not None:
            same_schema(self._schema, schema, "TopN.push")
            return self
        self._out_schema = self.spec.output_schema(schema)
        self._until = self.spec.until if self.spec.ttl is None else self.spec.ttl[0]
        self._ttl = None
        if self._until is not None:  # a partition's "window" is its close time: a column's value, or its
            self._domain = event_time_domain(schema, self._until)  # latest row's time + ttl
            self._size, self._close = 1, 0
            self._bucket = 1000 * self._domain.one_ms()  # state parts: one per second of close times
            if self.spec.ttl is not None:
                self._ttl = self._domain.duration(self.spec.ttl[1], "ttl", allow_zero=False)
                self._close = 1 if self.profile.close_minus_one else 0
        else:
            self._bucket = 1  # state parts: one per window
            self._domain = event_time_domain(schema, self.window.column)
            self._size = self.window.raw(self._domain)[0]
            self._close = 1 if self.profile.close_minus_one else 0
        self._schema = schema
        self._rows = Frame.empty(schema, self._backend)  # sorted by (window, keys, order)
        self._widx = self._backend.xp.zeros(0, dtype=self._backend.xp.int64)
        self._dirty: set[int] = set()  # windows changed since mark_saved()
        self._bind_pending_drain()
        return self

    # -- push ------------------------------------------------------------------
    def push(self, table: pa.Table | Frame) -> None:
        """Take rows into their windows' partitions, keeping those that can
        still rank ``<= n``; rows of a closed window are late."""
        table = self._chunk(table)
        frame, ts, rows = self._event_times(table, self.window.column if self._until is None else self._until)
        if rows is not None:
            frame = frame.take(rows)
        xp = self._backend.xp
        # a row's partition closes at the end of its window — or, closed by a column, at its value (as a
        # "window" index that ends there: (until - 1 + 1) * 1)
        widx = ts // self._size if self._until is None else ts - 1 if self._ttl is None else ts + (self._ttl - 1)
        if self._drained is not None and widx.shape[0]:
            open_ = (widx + 1) * self._size > self._drained + self._close
            nlate = int(widx.shape[0] - xp.count_nonzero(open_))
            if nlate:
                self.late_rows += nlate
                self._set_aside(frame, ~open_)
                frame, widx = frame.filter(open_), widx[open_]
        if not frame.num_rows:
            return None
        rows_, widx_ = Frame.concat([self._rows, frame]), xp.concatenate([self._widx, widx])
        if self._ttl is not None:  # a partition closes by its latest row: every row of it takes that close time
            before, widx_ = widx_, self._latest(rows_, widx_)
            moved = before != widx_
            self._dirty.update(self._backend.to_numpy(xp.unique(before[moved] // self._bucket)).tolist())
            widx = widx_[self._widx.shape[0]:]
            widx = xp.concatenate([widx, widx_[moved]])
        self._dirty.update(self._backend.to_numpy(xp.unique(widx // self._bucket)).tolist())
        rows_, widx_, rank = self._ranked(rows_, widx_)
        keep = rank <= self.n
        self._rows, self._widx = rows_.filter(keep), widx_[keep]
        return None

    def _latest(self, frame: Frame, widx: Any) -> Any:
        """Each row's partition's greatest ``widx`` (the partition: the rows
        of equal keys)."""
        b = self._backend
        xp = b.xp
        if not self.by:
            return xp.full(widx.shape, xp.max(widx), dtype=widx.dtype)
        keys = [KeyCodec(k, self._schema.field(k).type).encode(xp, frame.columns[k], b) for k in self.by]
        perm = order_indices(xp, keys)
        first = group_starts(xp, [k[perm] for k in keys])
        top = reduceat(xp, "max", widx[perm], xp.flatnonzero(first))
        out = xp.empty_like(widx)
        out[perm] = top[xp.cumsum(first) - 1]
        return out

    def _ranked(self, frame: Frame, widx: Any) -> tuple[Frame, Any, Any]:
        """``frame`` sorted by (window, keys, order) — stably: ties keep
        their order — its windows, and each row's rank."""
        b = self._backend
        xp = b.xp
        if not frame.num_rows:
            return frame, widx, xp.zeros(0, dtype=xp.int64)
        part = [widx] + [KeyCodec(k, self._schema.field(k).type).encode(xp, frame.columns[k], b) for k in self.by]
        ords = []
        for col, desc, nulls_first in self.order:
            code = KeyCodec(col, self._schema.field(col).type).encode(xp, frame.columns[col], b)
            null = code == NULL_CODE
            ords.append(null.astype(xp.int64) if not nulls_first else (~null).astype(xp.int64))
            ords.append(~code if desc else code)
        perm = order_indices(xp, part + ords)
        part, ords = [k[perm] for k in part], [k[perm] for k in ords]
        first = group_starts(xp, part)
        return frame.take(perm), widx[perm], ranks(xp, segments(xp, first), group_starts(xp, part + ords), self.fn)

    # -- drain -----------------------------------------------------------------
    def drain(self, watermark: Any) -> pa.Table:
        """The rows ranked ``<= n`` of every window ``watermark`` closes, with
        their rank, in (window, keys, rank) order; their state is dropped."""
        w = self._drain_to(watermark)
        if w is None:
            return pa.table({}) if self._schema is None else self._out_schema.empty_table()
        xp = self._backend.xp
        closed = (self._widx + 1) * self._size <= w + self._close
        n = int(xp.count_nonzero(closed))
        if not n:
            return self._out_schema.empty_table()
        out, widx, rank = self._ranked(self._rows.filter(closed, n), self._widx[closed])
        self._rows, self._widx = self._rows.filter(~closed), self._widx[~closed]
        if self._bucket > 1:  # a part still held may have lost closed partitions: written again
            self._dirty.update(self._backend.to_numpy(xp.unique(widx // self._bucket)).tolist())
        table = out.to_arrow()
        if self.output is not None:
            table = table.append_column(self.output, pa.array(self._backend.to_numpy(rank).astype(np.int32)))
        self.rows_out += table.num_rows
        return table

    def output_watermark(self, watermark: Any) -> Any:
        return watermark

    # -- state -----------------------------------------------------------------
    @property
    def state_rows(self) -> int:
        return 0 if self._schema is None else self._rows.num_rows

    @property
    def state_bytes(self) -> int:
        return 0 if self._schema is None else self._rows.nbytes() + int(self._widx.nbytes)

    def snapshot(self, rows: bool = True) -> dict[str, pa.Table]:
        """``{"state": the held rows with their window (``__widx``), the counters as metadata}``;
        ``rows=False``: no rows (the parts, one per window, hold them)."""
        meta = {**self._drained_meta(), "schema": schema_to_text(self._schema)}
        if self._schema is None:
            state = pa.table({"__widx": pa.array([], pa.int64())})
        else:
            state = self._table(None if rows else [])
        return {"state": state.replace_schema_metadata({"gpuwm.topn": json.dumps(meta)})}

    def _table(self, windows: list[int] | None) -> pa.Table:
        """The held rows of ``windows`` (None: all), with ``__widx``."""
        xp = self._backend.xp
        if windows is None:
            rows, widx = self._rows, self._widx
        else:
            sel = xp.isin(self._widx // self._bucket, xp.asarray(windows, dtype=xp.int64))
            rows, widx = self._rows.filter(sel), self._widx[sel]
        return rows.to_arrow().append_column("__widx", pa.array(self._backend.to_numpy(widx), pa.int64()))

    def state_parts(self) -> dict[str, bool]:
        """One part per open window (closed by a column: per second of close
        times), written again only when it changed."""
        if self._schema is None:
            return {}
        held = sorted(set(self._backend.to_numpy(self._backend.xp.unique(self._widx // self._bucket)).tolist()))
        return {f"win.{w}": w in self._dirty for w in held}

    def snapshot_part(self, name: str) -> pa.Table:
        return self._table([int(name.removeprefix("win."))])

    def mark_saved(self, written: Sequence[str] = ()) -> None:
        self._dirty = set()

    def restore(self, snapshot: dict[str, pa.Table], parts: dict[str, pa.Table] | None = None) -> "TopN":
        """Continue exactly where the snapshotted operator stopped: from
        ``snapshot()``, or from ``snapshot(rows=False)`` and its parts."""
        if self._schema is not None:
            raise WatermarkError("restore() must be called on a fresh TopN")
        state = snapshot["state"]
        meta = snapshot_meta(snapshot, "topn", "a TopN")
        schema = schema_from_text(meta["schema"])
        if schema is not None:
            self.bind(schema)
            tables = [state.replace_schema_metadata(None)] + [parts[n] for n in sorted(parts or {})]
            t = pa.concat_tables(tables)
            frame = Frame.from_arrow(t.drop_columns(["__widx"]), self._backend)
            widx = self._backend.asarray(t.column("__widx").to_numpy())
            self._rows, self._widx, _ = self._ranked(frame, widx)  # (parts in name order: sorted again)
        self._load_drained_meta(meta)
        return self
