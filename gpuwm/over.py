"""Over-windows on the event-time ordered stream (RisingWave's
emit-on-window-close OverAgg): per partition key, ordered by (event time,
the sort's key), ``lag(col, n)``, ``lead(col, n)``, ``row_number()`` and
running ``sum`` / ``count`` / ``min`` / ``max`` over ROWS UNBOUNDED PRECEDING.

Its input is a stream sort's output: rows come batch after batch in event
time order, so a row's predecessors have all arrived when it does. A row is
emitted as soon as it has arrived and, for ``lead``, its n-th successor has
too (:meth:`Over.flush`, at the end of the input, emits the rest with a
null lead). State per key: the row count and running aggregates, the last
``n`` rows' ``lag`` columns, and the rows still waiting for successors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np
import pyarrow as pa

from kernels import group_starts, order_indices, segmented_cummax
from kernels.dedup import lookup
from kernels.over import last_rows, segmented_cumsum, segments, shifted
from kernels.xp import _ordered_bits, mask_index

from .backend import Backend, get_backend
from .drained import Drained
from .errors import ConfigError, SchemaError, StateError, WatermarkError
from .frame import Column, Frame, _fixed_dtype, _to_cudf, sort_table
from .keys import KeyCodec, dictionary_tables, load_dictionaries
from .operator import Capabilities, Operator, OperatorSpec, StageContext, json_options, snapshot_meta
from .schema import same_schema, schema_from_text, schema_to_text
from .timecol import TimeDomain, event_time_domain

FUNCS = ("lag", "lead", "row_number", "sum", "count", "min", "max")
_I64_MIN = np.iinfo(np.int64).min


def _check_funcs(funcs: Any) -> tuple[tuple[str, str, str | None, int], ...]:
    """``{output: [fn, col?, n?]}`` (or its tuple form) checked, as
    ``((output, fn, col, n), ...)``."""
    if isinstance(funcs, dict):
        items = list(funcs.items())
    else:  # the checked form back: (output, fn, col, n)
        items = [(name, [fn] + ([col] if col is not None else []) + ([n] if fn in ("lag", "lead") else []))
                 for name, fn, col, n in funcs]
    out = []
    for name, spec in items:
        spec = list(spec) if isinstance(spec, (list, tuple)) else [spec]
        if not spec or spec[0] not in FUNCS:
            raise ConfigError(f"over function {name!r}: expected one of {FUNCS} first, got {spec!r}")
        fn = spec[0]
        if fn == "row_number":
            if len(spec) != 1:
                raise ConfigError(f"over function {name!r}: row_number takes no argument, got {spec!r}")
            out.append((name, fn, None, 0))
            continue
        if len(spec) < 2 or not isinstance(spec[1], str):
            raise ConfigError(f"over function {name!r}: {fn} needs a column, e.g. [{fn!r}, 'v']")
        n = 0
        if fn in ("lag", "lead"):
            n = spec[2] if len(spec) > 2 else 1
            if isinstance(n, bool) or not isinstance(n, int) or n < 1 or len(spec) > 3:
                raise ConfigError(f"over function {name!r}: {fn} takes (column, n >= 1), got {spec!r}")
        elif len(spec) != 2:
            raise ConfigError(f"over function {name!r}: {fn} takes one column, got {spec!r}")
        if spec[1] == "*" and fn != "count":
            raise ConfigError(f"over function {name!r}: '*' only works with count")
        out.append((name, fn, spec[1], n))
    if not out:
        raise ConfigError("an over-window needs at least one function, e.g. {'rn': ['row_number']}")
    return tuple(out)


@dataclass(frozen=True)
class OverSpec(OperatorSpec):
    """An over-window partitioned by ``by`` over the ordered stream of event
    time ``column`` (ties by ``order``, the sort's key); ``funcs`` as
    ``{output: [fn, column, n]}`` or its tuple form.

    >>> OverSpec(("k",), {"prev": ["lag", "v", 1], "rn": ["row_number"]}, "ts").funcs
    (('prev', 'lag', 'v', 1), ('rn', 'row_number', None, 0))
    """

    by: tuple[str, ...]
    funcs: Any
    column: str
    order: tuple[str, ...] = ()

    capabilities: ClassVar[Capabilities] = Capabilities(needs_order=True)
    kind: ClassVar[str] = "over"

    def __post_init__(self) -> None:
        object.__setattr__(self, "by", (self.by,) if isinstance(self.by, str) else tuple(self.by))
        object.__setattr__(self, "order", (self.order,) if isinstance(self.order, str) else tuple(self.order))
        object.__setattr__(self, "funcs", _check_funcs(self.funcs))
        names = [f[0] for f in self.funcs]
        if len(set(names)) != len(names):
            raise ConfigError(f"over function names repeat: {names}")

    @classmethod
    def from_json(cls, options: dict, ctx: StageContext) -> "OverSpec":
        """``{"over": {"by": [...], "funcs": {...}}}`` right after a sort: on its
        event time, ties in its key's order."""
        o = json_options("over", options, {"by", "funcs"}, ("funcs",),
                         '{"over": {"by": ["k"], "funcs": {"prev": ["lag", "v", 1]}}}')
        if not isinstance(o["funcs"], dict):
            raise ConfigError(f"over 'funcs' is {{output: [function, column, n]}}, got {o['funcs']!r}")
        prev = ctx.previous
        if prev is None or not prev.capabilities.range_exchange:
            raise ConfigError("an over-window needs the event-time ordered stream: call .sort(key=[...]) right "
                              "before .over(...) ({\"sort\": {...}} right before {\"over\": {...}})")
        return cls(o.get("by", ()), o["funcs"], prev.column, prev.key)

    def build(self, profile: Any = None, backend: str | None = None) -> "Over":
        return Over(self.by, self.funcs, self.column, self.order, backend=backend)

    def keys(self) -> tuple[str, ...]:
        return self.by

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        event_time_domain(schema, self.column)
        for what, cols in (("partition", self.by), ("order", self.order)):
            for c in cols:
                if c not in schema.names:
                    raise SchemaError(f"over {what} column {c!r} not found; the table has columns {schema.names}")
        fields = list(schema)
        for name, fn, col, _ in self.funcs:
            if name in schema.names:
                raise ConfigError(f"over function {name!r} collides with an input column")
            if col is not None and col != "*" and col not in schema.names:
                raise SchemaError(f"over function {name!r}: column {col!r} not found; the table has columns "
                                  f"{schema.names}")
            t = None if col in (None, "*") else schema.field(col).type
            if fn in ("row_number", "count"):
                fields.append(pa.field(name, pa.int64()))
            elif fn in ("lag", "lead"):
                fields.append(pa.field(name, t))
            else:
                numeric = pa.types.is_integer(t) or pa.types.is_floating(t)
                if fn == "sum" and not numeric:
                    raise SchemaError(f"over function {name!r}: sum needs a numeric column, {col!r} is {t}")
                if fn in ("min", "max") and (_fixed_dtype(t) is None or pa.types.is_boolean(t)):
                    raise SchemaError(f"over function {name!r}: {fn} needs a numeric or temporal column, "
                                      f"{col!r} is {t}")
                if fn == "sum":
                    t = pa.float64() if pa.types.is_floating(t) else pa.int64()
                fields.append(pa.field(name, t))
        return pa.schema(fields)


class Over(Operator, Drained):
    """Over-window functions per partition key on an event-time ordered stream.

    Parameters
    ----------
    by : partition key columns (may be empty: one partition).
    funcs : ``{output: [fn, column, n]}``: ``["lag", col, n]``,
        ``["lead", col, n]`` (n defaults to 1), ``["row_number"]``,
        ``["sum" | "count" | "min" | "max", col]`` (running, nulls ignored;
        ``["count", "*"]`` counts rows).
    column : event-time column; rows are ordered by it, then by ``order``.
    order : tie-breaking columns (the stream sort's key).

    ``push`` returns the rows that are complete, with their function
    columns, in arrival order: all of them without ``lead``; with it, the
    rows whose n-th successor in their partition has arrived.

    Examples
    --------
    >>> import pyarrow as pa, gpuwm
    >>> o = gpuwm.Over(["k"], {"prev": ["lag", "v"], "next": ["lead", "v"], "rn": ["row_number"]}, "ts")
    >>> o.push(pa.table({"ts": [1, 2, 3], "k": [1, 2, 1], "v": [10, 20, 30]})).to_pydict()
    {'ts': [1], 'k': [1], 'v': [10], 'prev': [None], 'next': [30], 'rn': [1]}
    >>> o.flush().to_pydict()
    {'ts': [2, 3], 'k': [2, 1], 'v': [20, 30], 'prev': [None, 10], 'next': [None, None], 'rn': [1, 2]}
    """

    def __init__(self, by: Sequence[str], funcs: Any, column: str, order: Sequence[str] = (), *,
                 backend: str | None = None):
        self.spec = OverSpec(by, funcs, column, order)
        self.by, self.column, self.order = list(self.spec.by), column, list(self.spec.order)
        self.funcs = self.spec.funcs
        self._backend: Backend = get_backend(backend)
        self._schema: pa.Schema | None = None
        self._domain: TimeDomain | None = None
        self._seq = 0  # rows pushed so far: each row's arrival number
        self._init_drained()

    # -- set-up ----------------------------------------------------------------
    def bind(self, schema: pa.Schema) -> "Over":
        """Fix the input schema before any row (checked on every push)."""
        if self._schema is not None:
            same_schema(self._schema, schema, "Over.push")
            return self
        self._out_schema = self.spec.output_schema(schema)
        self._domain = event_time_domain(schema, self.column)
        self._codecs = [KeyCodec(k, schema.field(k).type) for k in self.by]
        self._order_codecs = [KeyCodec(k, schema.field(k).type) for k in self.order]
        self._lags = sorted({f[2] for f in self.funcs if f[1] == "lag"})
        self._hist = max([f[3] for f in self.funcs if f[1] == "lag"], default=0)
        self._ahead = max([f[3] for f in self.funcs if f[1] == "lead"], default=0)
        self._running = [f for f in self.funcs if f[1] in ("sum", "count", "min", "max") and f[2] != "*"]
        self._pend_schema = pa.schema([f for f in self._out_schema if f.name not in
                                       {g[0] for g in self.funcs if g[1] == "lead"}])
        self._schema = schema
        xp = self._backend.xp
        z = xp.zeros(0, dtype=xp.int64)
        # per key (sorted, distinct codes): rows so far, and per running function its value and non-null count
        self._ckeys: list[Any] = [z for _ in self.by]
        self._count = z
        self._acc = {f[0]: xp.zeros(0, dtype=self._acc_dtype(f)) for f in self._running}
        self._nn = {f[0]: z for f in self._running}
        # the last `_hist` rows of each key (lag columns), and the rows waiting for successors (lead)
        self._tail = Frame.empty(pa.schema([schema.field(c) for c in self._lags]), self._backend)
        self._tkeys: list[Any] = [z for _ in self.by]
        self._pend = Frame.empty(self._pend_schema, self._backend)
        self._pkeys: list[Any] = [z for _ in self.by]
        self._pseq = z
        self._bind_pending_drain()
        return self

    def _acc_dtype(self, f: tuple) -> Any:
        """A running sum's dtype; min / max keep ordered int64 codes, counts int64."""
        t = self._out_schema.field(f[0]).type
        return np.dtype(np.float64) if f[1] == "sum" and pa.types.is_floating(t) else np.dtype(np.int64)

    # -- push ------------------------------------------------------------------
    def push(self, table: pa.Table | Frame) -> pa.Table:
        """Take the next rows of the ordered stream; returns the complete rows."""
        table = self._chunk(table)
        n = table.num_rows
        if n == 0:
            return self._out_schema.empty_table()
        b = self._backend
        xp = b.xp
        if any(not c.ordered for c in self._order_codecs):  # ties by values codes do not order: Arrow does
            table = sort_table(table if isinstance(table, pa.Table) else table.to_arrow(), [self.column, *self.order])
        frame, ts, rows = self._event_times(table, self.column)
        seq = xp.arange(self._seq, self._seq + n, dtype=xp.int64)
        self._seq += n
        if rows is not None:  # a null event time has no place in the order
            frame, seq = frame.take(rows), seq[rows]
        keys = [c.encode(xp, frame.columns[c.name], b) for c in self._codecs]
        ties = [c.encode(xp, frame.columns[c.name], b) for c in self._order_codecs if c.ordered]
        perm = order_indices(xp, [*keys, ts, *ties]) if (keys or ties) else xp.arange(frame.num_rows)
        frame, seq, keys = frame.take(perm), seq[perm], [k[perm] for k in keys]
        if not frame.num_rows:
            return self._out_schema.empty_table()
        s = segments(xp, group_starts(xp, keys) if keys else _single(xp, frame.num_rows))
        cols = dict(frame.columns)
        cols.update(self._counted(xp, frame, keys, s))
        cols.update(self._lagged(xp, frame, keys))
        new = Frame(b, self._pend_schema, {f.name: cols[f.name] for f in self._pend_schema}, frame.num_rows)
        return self._emit(xp, new, keys, seq)

    def _counted(self, xp: Any, frame: Frame, keys: list[Any], s: Any) -> dict[str, Column]:
        """row_number and the running functions, continuing each key's counters."""
        firsts = xp.flatnonzero(s.first)
        at = lookup(xp, self._ckeys, [k[firsts] for k in keys]) if keys else \
            xp.full(firsts.shape[0], 0 if self._count.shape[0] else -1, dtype=xp.int64)
        have = at >= 0
        at0 = xp.maximum(at, 0)
        base = xp.where(have, _at(xp, self._count, at0), 0)
        rn = base[s.seg] + s.pos + 1
        out: dict[str, Column] = {}
        new_acc, new_nn = {}, {}
        lasts = firsts + (s.size[firsts] - 1)
        for name, fn, col, _ in self.funcs:
            if fn == "row_number" or (fn == "count" and col == "*"):
                out[name] = Column(pa.int64(), rn, None)
        for f in self._running:
            name, fn, col, _ = f
            v, valid = frame.values(col)
            ok = xp.ones(frame.num_rows, dtype=xp.int64) if valid is None else valid.astype(xp.int64)
            nn = segmented_cumsum(xp, ok, s) + xp.where(have, _at(xp, self._nn[name], at0), 0)[s.seg]
            t = self._out_schema.field(name).type
            if fn == "count":
                out[name] = Column(t, nn, None)
                new_nn[name] = nn[lasts]
                continue
            base_acc = _at(xp, self._acc[name], at0)
            if fn == "sum":
                x = v.astype(self._acc_dtype(f), copy=False)
                x = x if valid is None else xp.where(valid, x, 0)
                acc = segmented_cumsum(xp, x, s) + xp.where(have, base_acc, 0)[s.seg]
                vals = acc
            else:  # min / max through ordered int64 codes; min as the max of their complement
                code = self._code(xp, v)
                if fn == "min":
                    code = ~code
                if valid is not None:
                    code = xp.where(valid, code, _I64_MIN)
                acc = xp.maximum(segmented_cummax(xp, code, s.first), xp.where(have, base_acc, _I64_MIN)[s.seg])
                vals = self._decode(xp, ~acc if fn == "min" else acc, t)
            out[name] = Column(t, vals, nn > 0)
            new_acc[name], new_nn[name] = acc[lasts], nn[lasts]
        self._update_counters(xp, [k[firsts] for k in keys], at, rn[lasts], new_acc, new_nn)
        return out

    @staticmethod
    def _code(xp: Any, v: Any) -> Any:
        if v.dtype.kind == "f":
            return _ordered_bits(xp, v.astype(xp.float64))
        return v.astype(xp.int64)

    @staticmethod
    def _decode(xp: Any, code: Any, t: pa.DataType) -> Any:
        if pa.types.is_floating(t):
            return _ordered_bits(xp, code).view(xp.float64).astype(_fixed_dtype(t))
        return code.astype(_fixed_dtype(t))

    def _update_counters(self, xp: Any, skeys: list[Any], at: Any, count: Any, acc: dict, nn: dict) -> None:
        """Write the batch's per-key totals: in place for known keys, and the
        new keys merged in, in key order."""
        have = at >= 0
        nhave = int(xp.count_nonzero(have))  # the one count read: the rest are gathers by position
        old = mask_index(xp, have, nhave)
        idx = at[old]
        self._count[idx] = count[old]
        for name in self._acc:
            if name in acc:
                self._acc[name][idx] = acc[name][old]
            self._nn[name][idx] = nn[name][old]
        nfresh = int(at.shape[0]) - nhave
        if not nfresh:
            return
        fresh = mask_index(xp, ~have, nfresh)
        allk = [xp.concatenate([a, k[fresh]]) for a, k in zip(self._ckeys, skeys)]
        order = order_indices(xp, allk) if allk else xp.arange(1)
        self._ckeys = [k[order] for k in allk]
        self._count = xp.concatenate([self._count, count[fresh]])[order]
        for name in self._acc:
            a = acc[name][fresh] if name in acc else xp.zeros(nfresh, self._acc[name].dtype)
            self._acc[name] = xp.concatenate([self._acc[name], a])[order]
            self._nn[name] = xp.concatenate([self._nn[name], nn[name][fresh]])[order]

    def _lagged(self, xp: Any, frame: Frame, keys: list[Any]) -> dict[str, Column]:
        """lag(col, n): the row n before in the key, from this batch or the
        key's last rows before it."""
        lags = [f for f in self.funcs if f[1] == "lag"]
        if not lags:
            return {}
        nt = self._tail.num_rows
        both = Frame.concat([self._tail, _select(frame, self._lags)])
        bkeys = [xp.concatenate([a, k]) for a, k in zip(self._tkeys, keys)]
        perm = order_indices(xp, bkeys) if bkeys else xp.arange(both.num_rows)  # per key: the tail first
        both, bkeys = both.take(perm), [k[perm] for k in bkeys]
        s = segments(xp, group_starts(xp, bkeys) if bkeys else _single(xp, both.num_rows))
        mine = perm >= nt  # this batch's rows, in their order
        out = {}
        for name, _, col, n in lags:
            src, hit = shifted(xp, s, -n)
            out[name] = _gather(both.columns[col], src[mine], hit[mine], self._backend)
        keep = last_rows(xp, s, self._hist)
        kidx = mask_index(xp, keep, int(xp.count_nonzero(keep)))
        self._tail, self._tkeys = both.take(kidx), [k[kidx] for k in bkeys]
        return out

    def _emit(self, xp: Any, new: Frame, keys: list[Any], seq: Any) -> pa.Table:
        """The rows waiting for successors and the new ones, per key in order:
        those with ``_ahead`` successors get their lead values and go out."""
        both = Frame.concat([self._pend, new])
        bkeys = [xp.concatenate([a, k]) for a, k in zip(self._pkeys, keys)]
        bseq = xp.concatenate([self._pseq, seq])
        if not self._ahead:  # no lead: every row is complete
            return self._finish(xp, both, None, xp.ones(both.num_rows, dtype=bool), bseq)
        perm = order_indices(xp, bkeys) if bkeys else xp.arange(both.num_rows)
        both, bkeys, bseq = both.take(perm), [k[perm] for k in bkeys], bseq[perm]
        s = segments(xp, group_starts(xp, bkeys) if bkeys else _single(xp, both.num_rows))
        ready = shifted(xp, s, self._ahead)[1]
        out = self._finish(xp, both, s, ready, bseq)
        wait = ~ready
        self._pend, self._pkeys, self._pseq = both.filter(wait), [k[wait] for k in bkeys], bseq[wait]
        return out

    def _finish(self, xp: Any, rows: Frame, s: Any, ready: Any, seq: Any) -> pa.Table:
        """The ``ready`` rows with their lead values (null past the end), in arrival order."""
        idx = xp.flatnonzero(ready)
        idx = idx[xp.argsort(seq[idx])]
        outcols = dict(rows.take(idx).columns)
        for name, fn, col, n in self.funcs:
            if fn == "lead":
                src, hit = shifted(xp, s, n)
                outcols[name] = _gather(rows.columns[col], src[idx], hit[idx], self._backend)
        table = Frame(self._backend, self._out_schema, {f.name: outcols[f.name] for f in self._out_schema},
                      int(idx.shape[0])).to_arrow()
        self.rows_out += table.num_rows
        return table

    # -- drain -----------------------------------------------------------------
    def drain(self, watermark: Any) -> pa.Table:
        """No rows (an over-window emits on push); records the watermark. At
        the end of the input (a watermark of +infinity,
        :meth:`~gpuwm.WatermarkFilter.end_input`) it is :meth:`flush`."""
        w = self._drain_to(watermark)
        if w is not None and w >= self._domain.end_of_time():
            return self.flush()
        return pa.table({}) if self._schema is None else self._out_schema.empty_table()

    def output_watermark(self, watermark: Any) -> Any:
        """At most the oldest event time of a row still waiting for a successor."""
        if watermark is None or self._schema is None or not self._pend.num_rows:
            return watermark
        oldest = int(self._pend.values(self.column)[0].min())
        return min(watermark, self._domain.from_raw(oldest), key=self._domain.to_raw)

    def flush(self) -> pa.Table:
        """The end of the input: every waiting row, its missing successors null."""
        if self._schema is None:
            return pa.table({})
        xp = self._backend.xp
        rows = self._pend
        s = segments(xp, group_starts(xp, self._pkeys) if self.by else _single(xp, rows.num_rows))
        out = self._finish(xp, rows, s, xp.ones(rows.num_rows, dtype=bool), self._pseq)
        z = xp.zeros(0, dtype=xp.int64)
        self._pend, self._pkeys, self._pseq = rows.slice(0, 0), [z for _ in self.by], z
        return out

    # -- state -----------------------------------------------------------------
    @property
    def state_rows(self) -> int:
        """Keys with counters, plus rows kept for lag and lead."""
        return 0 if self._schema is None else int(self._count.shape[0]) + self._tail.num_rows + self._pend.num_rows

    @property
    def state_bytes(self) -> int:
        if self._schema is None:
            return 0
        arrays = [*self._ckeys, self._count, *self._acc.values(), *self._nn.values(), *self._tkeys, *self._pkeys,
                  self._pseq]
        return sum(a.nbytes for a in arrays) + self._tail.nbytes() + self._pend.nbytes()

    def snapshot(self, rows: bool = True) -> dict[str, pa.Table]:
        """``{"state": counters as metadata, "dict.<col>": key dictionaries}``
        and, with ``rows``, the parts (:meth:`state_parts`) as ``part.<name>``."""
        meta = {**self._drained_meta(), "schema": schema_to_text(self._schema), "seq": self._seq}
        out = {"state": pa.table({"x": pa.array([], pa.int8())}).replace_schema_metadata(
            {"gpuwm.over": json.dumps(meta)})}
        out.update(dictionary_tables(getattr(self, "_codecs", [])))
        if rows:
            out.update({f"part.{p}": self.snapshot_part(p) for p in self.state_parts()})
        return out

    def state_parts(self) -> dict[str, bool]:
        """Counters, the lag tail and the waiting rows: written every batch."""
        return {} if self._schema is None else {"counters": True, "tail": True, "pending": True}

    def snapshot_part(self, name: str) -> pa.Table:
        to_np = self._backend.to_numpy
        if name == "counters":
            cols = {f"key.{k}": to_np(a) for k, a in zip(self.by, self._ckeys)}
            cols["count"] = to_np(self._count)
            for f in self._running:
                cols[f"acc.{f[0]}"], cols[f"nn.{f[0]}"] = to_np(self._acc[f[0]]), to_np(self._nn[f[0]])
            return pa.table(cols) if cols else pa.table({"count": to_np(self._count)})
        if name in ("tail", "pending"):
            frame, keys = (self._tail, self._tkeys) if name == "tail" else (self._pend, self._pkeys)
            t = frame.to_arrow()
            for k, a in zip(self.by, keys):
                t = t.append_column(f"__key.{k}", pa.array(to_np(a)))
            if name == "pending":
                t = t.append_column("__seq", pa.array(to_np(self._pseq)))
            return t
        raise StateError(f"the over-window state has no part {name!r}")

    def mark_saved(self, written: Sequence[str] = ()) -> None:
        pass

    def restore(self, snapshot: dict[str, pa.Table], parts: dict[str, pa.Table] | None = None) -> "Over":
        """Continue exactly where the snapshotted operator stopped: from
        ``snapshot()``, or from ``snapshot(rows=False)`` and its parts."""
        if self._schema is not None and self.rows_in:
            raise WatermarkError("restore() must be called on a fresh Over")
        meta = snapshot_meta(snapshot, "over", "an over-window")
        parts = {k.removeprefix("part."): v for k, v in snapshot.items() if k.startswith("part.")} \
            if parts is None else parts
        schema = schema_from_text(meta["schema"])
        if schema is not None:
            self.bind(schema)
            load_dictionaries(self._codecs, snapshot)
            missing = sorted(set(self.state_parts()) - set(parts))
            if missing:
                raise StateError(f"over-window state is missing its part(s) {missing}")
            b = self._backend
            c = parts["counters"]
            col = lambda name: b.asarray(np.array(c.column(name).to_numpy()))  # noqa: E731  writable: updated in place
            self._ckeys = [col(f"key.{k}") for k in self.by]
            self._count = col("count")
            for f in self._running:
                self._acc[f[0]], self._nn[f[0]] = col(f"acc.{f[0]}"), col(f"nn.{f[0]}")
            for name in ("tail", "pending"):
                t = parts[name]
                keys = [b.asarray(t.column(f"__key.{k}").to_numpy()) for k in self.by]
                hidden = [n for n in t.column_names if n.startswith("__")]
                frame = Frame.from_arrow(t.drop_columns(hidden), b)
                if name == "tail":
                    self._tail, self._tkeys = frame, keys
                else:
                    self._pend, self._pkeys, self._pseq = frame, keys, b.asarray(t.column("__seq").to_numpy())
        self._load_drained_meta(meta)
        self._seq = meta["seq"]
        return self


def _single(xp: Any, n: int) -> Any:
    """One segment over ``n`` rows (no partition key)."""
    first = xp.zeros(n, dtype=bool)
    if n:
        first[0] = True
    return first


def _at(xp: Any, a: Any, idx: Any) -> Any:
    return a[idx] if a.shape[0] else xp.zeros(idx.shape[0], dtype=a.dtype)


def _select(frame: Frame, names: list[str]) -> Frame:
    return Frame(frame.backend, pa.schema([frame.schema.field(n) for n in names]),
                 {n: frame.columns[n] for n in names}, frame.num_rows)


def _gather(col: Column, idx: Any, hit: Any, backend: Backend) -> Column:
    """``col`` at ``idx`` where ``hit``, null elsewhere."""
    if col.fixed:
        v = col.values[idx]
        valid = hit if col.valid is None else hit & col.valid[idx]
        return Column(col.type, v, valid)
    host_idx = pa.array(backend.to_numpy(idx), mask=~backend.to_numpy(hit))
    arr = col.to_arrow(backend).take(host_idx)
    dev = None if backend.cudf is None else _to_cudf(backend.cudf, arr)  # where Frame.from_arrow puts it
    return Column(col.type, arr, None) if dev is None else Column(col.type, dev, None, in_cudf=True)
