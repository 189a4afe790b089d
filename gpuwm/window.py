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
from kernels.xp import mask_index

from . import staging
from .aggregates import _I64, AGG_FUNCS, EMIT_MODES, WINDOW_TIME, AggregateOperator, AggregateSpec
from .errors import ConfigError, SchemaError, WatermarkError
from .frame import Frame
from .operator import Capabilities, StageContext, json_options
from .profiles import Profile
from .schema import same_schema
from .session import Session, SessionAggregate, SessionSpec
from .timecol import TimeDomain
from .timecol import positive_interval as _positive

__all__ = ["AGG_FUNCS", "EMIT_MODES", "WINDOW_TIME", "Hop", "Session", "Tumble", "WindowAggregate", "WindowSpec"]


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
class WindowSpec(AggregateSpec):
    """A tumbling or hopping window aggregation (see :class:`AggregateSpec`).

    >>> WindowSpec(Tumble("ts", 10), by=("k",), aggs={"n": ("*", "count")}).keys()
    ('k',)
    """

    windows: ClassVar[tuple[type, ...]] = ()  # (Tumble, Hop): set below, once they exist
    capabilities: ClassVar[Capabilities] = Capabilities(partials=True, rescale=True, late_groups=True)

    def __new__(cls, window: Any = None, *args: Any, **kwargs: Any) -> Any:
        if cls is WindowSpec and isinstance(window, Session):  # WindowSpec(Session(...)) is a SessionSpec
            return SessionSpec(window, *args, **kwargs)
        return super().__new__(cls)

    @classmethod
    def from_json(cls, options: dict, ctx: StageContext) -> AggregateSpec:
        """``{"window": {"tumble": size | "hop": size, "slide": s | "session":
        gap, "by": [...], "aggs": {out: [column, fn]}, "emit": ..., "on":
        column}}`` (``on``: default the input's event-time column; ``aggs``:
        default a row count, ``count``)."""
        o = json_options("window", options, {"tumble", "hop", "slide", "session", "by", "aggs", "emit", "on"})
        col = o.get("on") or ctx.event_time
        given = [k for k in ("tumble", "hop", "session") if k in o]
        if len(given) != 1:
            raise ConfigError("window needs one of 'tumble': size, 'hop': size with 'slide', or 'session': gap"
                              + (f"; got {given}" if given else ""))
        if ("slide" in o) != ("hop" in o):
            raise ConfigError("a 'hop' window needs 'slide'" if "hop" in o else
                              "'slide' goes with 'hop': a tumbling window's slide is its size")
        window = Tumble(col, o["tumble"]) if "tumble" in o else Hop(col, size=o["hop"], slide=o["slide"]) \
            if "hop" in o else Session(col, o["session"])
        aggs = o.get("aggs", {"count": ["*", "count"]})
        if not isinstance(aggs, dict):
            raise ConfigError(f"window 'aggs' must be {{output: [column, function]}}, got {aggs!r}")
        return WindowSpec(window, by=o.get("by", ()), aggs={k: tuple(v) for k, v in aggs.items()},
                          emit=o.get("emit", "on-window-close"))

    def filter_lateness(self, profile: Any) -> Any:
        """Spark drops a (row, window) pair once the window closed, so rows up
        to a window behind still count; under ``emit="complete"`` no window
        closes and no row is late (Spark's complete mode)."""
        if self.emit == "complete":
            return NEVER_LATE
        return self.window.size if profile.window_lateness == "window" else None

    def build(self, profile: Any, backend: str | None = None) -> "WindowAggregate":
        return WindowAggregate(self.window, by=self.by, aggs=self.agg_dict, emit=self.emit, profile=profile,
                               backend=backend, window_time=self.window_time)


WindowSpec.windows = (Tumble, Hop)

#: the watermark filter's allowed lateness where no row is late (``emit="complete"``): 2,700 years
NEVER_LATE = timedelta(days=1_000_000)


class WindowAggregate(AggregateOperator):
    """Aggregate rows per (window, group key); emit and forget closed windows.

    Parameters
    ----------
    window : :class:`Tumble` or :class:`Hop`.
    by : group key columns (may be empty).
    aggs : ``{output: (column, fn)}`` with fn in count, sum, min, max, mean,
        first, last, count_distinct, sum_distinct, mean_distinct;
        ``("*", "count")`` counts rows, ``(col, "count")``
        non-null values. Nulls are ignored; an aggregate over no non-null
        value is null — but ``first`` / ``last`` are the value of the
        window's first / last row as the rows arrived (Spark's ``first`` and
        ``last``: a null too; numbers and times; not over sessions). The
        ``_distinct`` ones (SQL's ``count(DISTINCT x)``...) are exact: a
        window's state keeps each key's distinct values once, until it
        closes; not with ``first`` / ``last``, not on update.
    emit : ``"on-window-close"`` (``drain`` returns final rows),
        ``"on-update"`` (``push`` returns the changed windows' current values;
        ``drain`` only evicts) or ``"complete"`` (Spark's complete mode: no
        window closes, no row is late, and ``drain`` returns every window's
        current values and keeps them).
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

    def __new__(cls, window: Any = None, *args: Any, **kwargs: Any) -> Any:
        if cls is WindowAggregate and isinstance(window, Session):  # WindowAggregate(Session(...)) is a session aggregate
            return SessionAggregate(window, *args, **kwargs)
        return super().__new__(cls)

    late_reason = "window closed"

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
        super().__init__(WindowSpec(window, by, aggs, emit, window_time), profile, close_minus_one=close_minus_one,
                         backend=backend)
        self._blocks: dict[int, tuple[list[Any], list[Any]]] = {}
        self._dirty: set[int] = set()  # window starts changed since mark_saved()
        # Spark's state figures (its StateStoreSaveExec's metrics), since this object was made: the (window,
        # key) groups written to the state, removed from it, and dropped as late (each group of a push once)
        self.groups_updated = self.groups_removed = self.late_groups = 0
        self._late_keys: list[list[Any]] = []  # the late groups' keys until counted (:meth:`_count_late`)

    # -- push ------------------------------------------------------------------
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
        frame, ts, base = self._event_times(table, self.window.column)
        b = self._backend
        xp = b.xp
        rows, widx = assign_windows(xp, ts, self._size, self._slide)
        late = None
        if drop_closed and self._drained is not None and rows.shape[0]:
            # open: start + size > W + close, with start = widx * slide
            open_ = self._open(widx)
            nlate = int(rows.shape[0] - xp.count_nonzero(open_))
            if nlate:
                self.late_rows += nlate
                sel = mask_index(xp, ~open_, nlate)
                gone = rows[sel]
                self._set_aside(frame, gone if base is None else base[gone])
                late = (widx[sel], gone if base is None else base[gone])
                idx = mask_index(xp, open_, int(rows.shape[0]) - nlate)
                rows, widx = rows[idx], widx[idx]
        identity = base is None and self._size == self._slide and rows.shape[0] == table.num_rows
        if base is not None:
            rows = base[rows]
        if rows.shape[0] == 0:
            return None
        codes = [c.encode(xp, frame.columns[c.name], b) for c in self._codecs]
        if late is not None:
            self._count_late_groups(xp, [late[0]] + [c[late[1]] for c in codes])
        # windows are keyed by index (start // slide): a narrow key packs into
        # one sort word with the group keys
        keys = [widx] + [c if identity else c[rows] for c in codes]
        accs = self._acc_inputs(xp, frame, None if identity else rows)
        if self._dcodecs:
            dcodes = [c.encode(xp, frame.columns[col], b) for col, c in zip(self._dcols, self._dcodecs)]
            keys, accs = self._distinct_keys(xp, keys, [d if identity else d[rows] for d in dcodes], accs)
        gkeys, gaccs, _, _ = group_reduce(xp, keys, accs, [a.op for a in self._accs])
        return gkeys, gaccs


    def _count_late_groups(self, xp: Any, keys: list[Any]) -> None:
        """Keep the (window index, key codes) of late pairs ``keys``; their
        distinct groups are counted in ``late_groups`` by :meth:`_count_late`
        when the counters are read (a Spark task reads them once a batch; a
        drain counts them too past a million pairs): Spark drops a
        micro-batch's late input as groups (``numRowsDroppedByWatermark`` of
        its aggregation), each once."""
        self._late_keys.append(keys)

    def _count_late(self, over: int = 0) -> None:
        """Count the late groups kept (:meth:`_count_late_groups`), when
        they are more than ``over`` pairs: on the host, one copy."""
        if self._late_keys and sum(int(k[0].shape[0]) for k in self._late_keys) > over:
            xp = self._backend.xp
            keys = [xp.concatenate([k[i] for k in self._late_keys]) for i in range(len(self._late_keys[0]))]
            self._late_keys = []
            host = staging.download_arrays(self._backend, keys)  # (one synchronisation)
            self.late_groups += int(group_reduce(np, host, [None], ["add"])[0][0].shape[0])

    def count_late(self, rows: pa.Table) -> None:
        """Count the groups of ``rows``, input the watermark filter dropped
        before this stage (each behind every window it falls in), with the
        late groups of this micro-batch's pushes: they change nothing else."""
        if rows is None or not rows.num_rows or self._schema is None:
            return
        frame, ts, base = self._event_times(rows, self.window.column)
        xp = self._backend.xp
        at, widx = assign_windows(xp, ts, self._size, self._slide)
        if base is not None:
            at = base[at]
        codes = [c.encode(xp, frame.columns[c.name], self._backend) for c in self._codecs]
        self._count_late_groups(xp, [widx] + [c[at] for c in codes])

    def _groups(self, xp: Any, sorted_keys: list[Any], rows: int) -> int:
        """How many distinct (window, group key) groups ``rows`` state rows
        sorted by ``sorted_keys`` hold: each row is one (no device sync),
        but where a distinct aggregate keeps its values as rows after them;
        without key columns, one group where there are rows."""
        if not self._dcodecs:
            return int(rows)
        if not sorted_keys:
            return int(rows > 0)
        return int(xp.count_nonzero(group_starts(xp, sorted_keys)))

    def _open(self, widx: Any) -> Any:
        """Which window indexes the last drain left open: start + size > W + close,
        with start = widx * slide."""
        return widx > (self._drained + self._close - self._size) // self._slide

    def _ingest(self, xp: Any, gkeys: list[Any], gaccs: list[Any]) -> pa.Table | None:
        self.groups_updated += self._groups(xp, gkeys[: 1 + len(self._codecs)], gkeys[0].shape[0])  # (each once)
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
        fields = [pa.field("__widx", pa.int64())] + [pa.field(c.name, c.type) for c in self._keys]
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
        cols += [c.decode(to_np(k)) for c, k in zip(self._keys, gkeys[1:])]
        cols += [pa.array(to_np(a)) for a in gaccs]
        return pa.Table.from_arrays(cols, schema=self.partial_schema())

    def ghost_partials(self, rows: pa.Table) -> pa.Table:
        """:meth:`partials` of ``rows`` the watermark filter dropped before
        this stage, marked by a row count of -1 (a real partial counts one
        row or more, or none for a distinct value's): :meth:`push_partials`
        counts their groups as late (:meth:`count_late`) and merges nothing."""
        got = self.partials(rows)
        last = f"__acc{len(self._accs) - 1}"
        return got.set_column(got.schema.get_field_index(last), last, pa.array(np.full(got.num_rows, -1, np.int64)))

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
        codes = [c.encode(xp, frame.columns[c.name], b) for c in self._keys]
        if widx.shape[0]:
            # a count of -1: the groups of rows the filter dropped (:meth:`ghost_partials`): counted as late
            # here too and never merged, whatever this stage's own close says (under a profile whose filter
            # drops a row whose window is still open here, or before this stage's first drain)
            real = accs[-1] >= 0
            open_ = real & self._open(widx) if self._drained is not None else real
            ndrop = int(xp.count_nonzero(~open_))  # (one synchronisation, as the late count was)
            if ndrop:
                self.late_rows += int(xp.where(real & ~open_, accs[-1], 0).sum())
                sel = mask_index(xp, ~open_, ndrop)
                self._count_late_groups(xp, [widx[sel]] + [c[sel] for c in codes[: len(self._codecs)]])
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
            for i in range(len(self._keys)):
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
        """Emit (``on-window-close``) and delete every window closed by
        ``watermark``; under ``complete``, emit every window (none closes)."""
        if self.emit == "complete":
            return self._everything()
        self._count_late(over=1 << 20)
        w = self._drain_to(watermark)
        if w is None:
            return pa.table({}) if self._schema is None else self._empty_out()
        closed = sorted(s for s in self._blocks if s + self._size <= w + self._close)
        if not closed:
            return self._empty_out()
        blocks = [self._blocks.pop(s) for s in closed]
        self.groups_removed += sum(self._groups(self._backend.xp, blk[0][: len(self._codecs)], blk[1][0].shape[0])
                                   for blk in blocks)
        if self.emit == "on-update":
            self._compact_keys()
            return self._empty_out()
        out = self._finalize(*self._stacked(closed, blocks))  # decodes the keys: compact after
        self._compact_keys()
        self.rows_out += out.num_rows
        return out

    def counters(self) -> dict[str, int]:
        self._count_late()
        return {**super().counters(), "groups_updated": self.groups_updated, "groups_removed": self.groups_removed,
                "late_groups": self.late_groups}

    def _everything(self) -> pa.Table:
        """Every window's current values, the state kept."""
        if self._schema is None:
            return pa.table({})
        starts = sorted(self._blocks)
        if not starts:
            return self._empty_out()
        out = self._finalize(*self._stacked(starts, [self._blocks[s] for s in starts]))
        self.rows_out += out.num_rows
        return out

    def _stacked(self, starts: list[int], blocks: list) -> tuple[Any, list[Any], list[Any]]:
        """The windows' blocks (of the windows starting at ``starts``) as one
        set of rows: window starts, key codes, accumulators."""
        xp = self._backend.xp
        wins = xp.concatenate([xp.full(blk[1][0].shape[0], s, dtype=xp.int64) for s, blk in zip(starts, blocks)])
        keys = [xp.concatenate([blk[0][i] for blk in blocks]) for i in range(len(self._keys))]
        accs = [xp.concatenate([blk[1][j] for blk in blocks]) for j in range(len(self._accs))]
        return wins, keys, accs

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
        for i, c in enumerate(self._keys):
            new = c.compact_codes(b.xp, [self._blocks[s][0][i] for s in starts], rows, b.to_numpy)
            if new is not None:  # every window's key codes changed
                self._dirty.update(starts)
            for s, codes in zip(starts, new or ()):
                self._blocks[s][0][i] = codes

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



    def state_parts(self) -> dict[str, bool]:
        """The open windows as parts of an incremental state store, in window
        order: ``{name: must_write}`` — a window is written again only when
        its state changed since :meth:`mark_saved` (or since the operator was
        built or restored); the store links the others' previous files."""
        return {f"win.{s}": s in self._dirty for s in sorted(self._blocks)}

    def snapshot_part(self, name: str) -> pa.Table:
        """The state rows of one open window (:meth:`state_parts`), as in :meth:`snapshot`."""
        return self.snapshot_parts([name])[name]

    def snapshot_parts(self, names: Sequence[str]) -> dict[str, pa.Table]:
        """Several open windows' state rows, fetched from the device in one
        copy, as slices of one table (a table built per window cost ~20 us a window)."""
        starts = [int(n.removeprefix("win.")) for n in names]
        rows, out, lo = pa.table(self._state_columns(starts)), {}, 0
        for name, s in zip(names, starts):
            n = self._blocks[s][1][0].shape[0]
            out[name] = rows.slice(lo, n)
            lo += n
        return out

    def mark_saved(self, written: Sequence[str] = ()) -> None:
        """The store saved every part (writing ``written``, linking the rest)."""
        self._dirty = set()

    def rescale_rows(self) -> pa.Table | None:
        """The open windows as partials (:meth:`push_partials`' input, keys
        by value), for a rescale (:func:`gpuwm.partition.rescale`)."""
        if self._schema is None:
            return None
        cols = self._state_columns(sorted(self._blocks))
        arrays = [pa.array(np.asarray(cols["window_start"]) // self._slide, pa.int64())]
        arrays += [c.decode(np.asarray(cols[f"key.{c.name}"])) for c in self._keys]
        arrays += [pa.array(np.asarray(cols[f"acc.{a.agg}.{a.role}"])) for a in self._accs]
        return pa.Table.from_arrays(arrays, schema=self.partial_schema())

    def rescale_absorb(self, rows: pa.Table) -> None:
        self.push_partials(rows)

    def _state_columns(self, starts: list[int]) -> dict[str, Any]:
        b = self._backend
        xp = b.xp
        blocks = [self._blocks[s] for s in starts]
        n = [blk[1][0].shape[0] for blk in blocks]
        cols: dict[str, Any] = {"window_start": np.repeat(np.asarray(starts, dtype=np.int64), n)}
        names = [f"key.{c.name}" for c in self._keys] + [f"acc.{acc.agg}.{acc.role}" for acc in self._accs]
        if not blocks:
            dtypes = [np.int64] * len(self._keys) + [acc.dtype for acc in self._accs]
            return {**cols, **{c: np.zeros(0, d) for c, d in zip(names, dtypes)}}
        dev = [xp.concatenate([blk[0][i] for blk in blocks]) for i in range(len(self._keys))]
        dev += [xp.concatenate([blk[1][j] for blk in blocks]) for j in range(len(self._accs))]
        return {**cols, **dict(zip(names, staging.download_arrays(b, dev)))}  # one copy, one synchronisation

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
            keys = [b.asarray(state.column(f"key.{c.name}").to_numpy()) for c in self._keys]
            accs = [b.asarray(state.column(f"acc.{a.agg}.{a.role}").to_numpy()) for a in self._accs]
            starts, first = np.unique(wins, return_index=True)
            bounds = list(first) + [wins.shape[0]]
            for i, s in enumerate(starts.tolist()):
                lo, hi = int(bounds[i]), int(bounds[i + 1])
                self._blocks[s] = ([k[lo:hi] for k in keys], [a[lo:hi] for a in accs])
        self._load_drained_meta(meta)
        return self
