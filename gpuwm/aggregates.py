"""What windows and sessions share: the aggregate descriptors (a table of
accumulators, how they combine and how they finalize), the spec fields
and checks of a windowed aggregation, and the operator plumbing around them
(binding the input schema, event times, output rows, state tables).

:class:`~gpuwm.WindowAggregate` (tumbling, hopping) and
:class:`~gpuwm.session.SessionAggregate` each keep their own state and
merge rule, and compose these pieces: neither derives from the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np
import pyarrow as pa

from kernels import group_reduce
from kernels.xp import mask_index

from . import staging
from .backend import Backend, get_backend
from .drained import Drained
from .errors import ConfigError, SchemaError
from .frame import Frame, _fixed_dtype, numpy_to_arrow, sort_table
from .keys import NULL_CODE, KeyCodec, dictionary_tables, load_dictionaries
from .operator import Capabilities, Operator, OperatorSpec, StageContext
from .profiles import Profile, resolve
from .schema import same_schema, schema_from_text, schema_to_text
from .timecol import event_time_domain

#: exact distinct aggregates (SQL's ``count(DISTINCT x)``, ``sum(DISTINCT x)``, ``avg(DISTINCT x)``): tumbling and
#: hopping windows keep each (window, key)'s distinct values in their state (:meth:`AggregateOperator._distinct_keys`)
DISTINCT = ("count_distinct", "sum_distinct", "mean_distinct")
AGG_FUNCS = ("count", "sum", "min", "max", "mean", "first", "last", *DISTINCT)
#: the value of the first / last row in input order (Spark's ``first``/``last``; a row whose value is null counts:
#: ``ignoreNulls`` false): tumbling and hopping windows, not sessions (Spark orders a session's rows by time)
POSITIONAL = ("first", "last")
EMIT_MODES = ("on-window-close", "on-update", "complete")
_I64 = np.iinfo(np.int64)

#: the output column a window adds when another stage follows it: Spark's
#: ``window_time``, window_end - 1 unit of the event-time column, the event
#: time of the window's row downstream
WINDOW_TIME = "window_time"


def _zero_nulls(v: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``v`` with 0 where not ``valid`` (an output's null slots hold 0), copied
    only when there is a null: a drain's million groups rarely have one."""
    return v if valid.all() else np.where(valid, v, 0).astype(v.dtype, copy=False)


@dataclass(frozen=True)
class Acc:
    """One accumulator column: the aggregate it serves, its role (n: a count,
    s: a sum, nn: non-null values, v: a min / max), dtype and combine op."""

    agg: str  # output name
    role: str  # n, s, nn, v
    dtype: np.dtype
    op: str  # add, min, max


def check_aggs(aggs: Mapping[str, tuple[str, str]] | None) -> tuple[tuple[str, str, str], ...]:
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
    if any(fn in DISTINCT for _, _, fn in out) and any(fn in POSITIONAL for _, _, fn in out):
        raise ConfigError("first / last beside a distinct aggregate are not gpuwm's (a window's rows are kept once "
                          "per distinct value, out of arrival order); use min / max")
    return tuple(out)


def distinct_columns(aggs: Mapping[str, tuple[str, str]]) -> list[str]:
    """The columns the distinct aggregates of ``aggs`` read, once each, in order."""
    return list(dict.fromkeys(col for col, fn in aggs.values() if fn in DISTINCT))


def plan_aggs(aggs: Mapping[str, tuple[str, str]], schema: pa.Schema) -> tuple[list[Acc], list[pa.Field]]:
    """The accumulators of ``aggs`` over ``schema`` and their output fields
    (the column types are checked here)."""
    accs: list[Acc] = []
    out_fields: list[pa.Field] = []
    for name, (col, fn) in aggs.items():
        if col != "*" and col not in schema.names:
            raise SchemaError(f"aggregate {name!r}: column {col!r} not found; the table has columns {schema.names}")
        t = None if col == "*" else schema.field(col).type
        if fn in DISTINCT:  # no accumulator: the distinct values are state keys
            if fn != "count_distinct" and not (pa.types.is_integer(t) or pa.types.is_floating(t)):
                raise SchemaError(f"aggregate {name!r}: {fn} needs a numeric column, {col!r} is {t}")
            if fn == "count_distinct" and _fixed_dtype(t) is None and not (pa.types.is_string(t)
                                                                           or pa.types.is_large_string(t)
                                                                           or pa.types.is_binary(t)):
                raise SchemaError(f"aggregate {name!r}: count_distinct needs a key-like column (numbers, times, "
                                  f"strings, binary), {col!r} is {t}")
            isf = t is not None and pa.types.is_floating(t)
            out_t = pa.int64() if fn == "count_distinct" else (
                pa.float64() if fn == "mean_distinct" or isf else pa.int64())
            out_fields.append(pa.field(name, out_t))
            continue
        if fn == "count":
            accs.append(Acc(name, "n", np.dtype(np.int64), "add"))
            out_fields.append(pa.field(name, pa.int64()))
            continue
        numeric = t is not None and (pa.types.is_integer(t) or pa.types.is_floating(t))
        ordered = numeric or (t is not None and (pa.types.is_timestamp(t) or pa.types.is_date(t)
                                                 or pa.types.is_duration(t)))
        if fn in ("sum", "mean") and not numeric:
            raise SchemaError(f"aggregate {name!r}: {fn} needs a numeric column, {col!r} is {t}")
        if fn in ("min", "max", *POSITIONAL) and not ordered:
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
        role = "v" if fn in ("min", "max", *POSITIONAL) else "s"
        op = fn if fn in ("min", "max", *POSITIONAL) else "add"
        accs.append(Acc(name, role, dt, op))
        # nn: non-null rows (first / last: whether the row the value came from had one, 0 or 1)
        accs.append(Acc(name, "nn", np.dtype(np.int64), op if fn in POSITIONAL else "add"))
        out_fields.append(pa.field(name, out_t))
    accs.append(Acc("__rows", "n", np.dtype(np.int64), "add"))  # (row, window) pairs: late counts
    return accs, out_fields


@dataclass(frozen=True)
class AggregateSpec(OperatorSpec):
    """The spec of a windowed aggregation: ``window``, group keys ``by``,
    ``aggs`` as ``((output, column, fn), ...)`` (or a ``{output: (column,
    fn)}`` dict), ``emit``, and ``window_time``: add the ``window_time``
    column (a stage follows). Subclasses name the window kinds they take
    (``windows``) and build their operator."""

    window: Any
    by: tuple[str, ...] = ()
    aggs: Any = None
    emit: str = "on-window-close"
    window_time: bool = False

    capabilities: ClassVar[Capabilities] = Capabilities(partials=True, rescale=True)
    kind: ClassVar[str] = "window"
    #: the window descriptor types this spec takes
    windows: ClassVar[tuple[type, ...]] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.window, self.windows):
            raise ConfigError(f"window must be gpuwm.Tumble, gpuwm.Hop or gpuwm.Session, got {self.window!r}")
        if self.emit not in EMIT_MODES:
            raise ConfigError(f"emit must be one of {EMIT_MODES}, got {self.emit!r}")
        by = (self.by,) if isinstance(self.by, str) else tuple(self.by)
        aggs = self.aggs
        if aggs is None or isinstance(aggs, Mapping):
            aggs = check_aggs(aggs)
        else:
            aggs = check_aggs({name: (col, fn) for name, col, fn in aggs})
        object.__setattr__(self, "by", by)
        object.__setattr__(self, "aggs", aggs)
        distinct = [f"{name} = {fn}({col})" for name, col, fn in aggs if fn in DISTINCT]
        if distinct and self.emit == "on-update":
            raise ConfigError(f"{', '.join(distinct)}: a distinct aggregate is emitted on window close or "
                              "complete, not on update")
        names = [n for n, _, _ in aggs]
        clash = ({"window_start", "window_end", WINDOW_TIME} & (set(names) | set(by))) | (set(names) & set(by))
        if clash:
            raise ConfigError(f"output column names collide: {sorted(clash)}")

    @property
    def agg_dict(self) -> dict[str, tuple[str, str]]:
        return {name: (col, fn) for name, col, fn in self.aggs}

    def keys(self) -> tuple[str, ...]:
        return self.by

    def check(self, ctx: StageContext) -> None:
        if self.window.column != ctx.event_time and self.window.column not in ctx.also_times:
            raise ConfigError(f"window column {self.window.column!r} differs from the event-time column of its "
                              f"input, {ctx.event_time!r}" + (" (after a window stage: 'window_time')"
                                                               if ctx.previous is not None else
                                                               " (the watermark's column)"))

    def event_time(self, upstream: str) -> str:
        return WINDOW_TIME

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        dom = event_time_domain(schema, self.window.column)
        self.window.raw(dom)  # sizes fit the column (ints for an integer column)
        for k in self.by:
            if k not in schema.names:
                raise SchemaError(f"group key column {k!r} not found; the table has columns {schema.names}")
        _, agg_fields = plan_aggs(self.agg_dict, schema)
        fields = [pa.field("window_start", dom.type), pa.field("window_end", dom.type)]
        fields += [schema.field(k) for k in self.by] + agg_fields
        if self.window_time:
            fields.append(pa.field(WINDOW_TIME, dom.type))
        return pa.schema(fields)

    def with_next(self, nxt: OperatorSpec) -> "AggregateSpec":
        if self.emit != "on-window-close":
            raise ConfigError(f"a stage cannot follow a window with emit={self.emit!r}: its rows are not final "
                              "values (use emit='on-window-close')")
        return self if self.window_time else type(self)(self.window, self.by, self.aggs, self.emit, True)


class AggregateOperator(Operator, Drained):
    """The plumbing windows and sessions share around their own state: the
    spec, profile and backend, binding the input schema (event-time domain,
    window sizes, key codecs, the accumulator table), per-row accumulator
    inputs, output rows, and the state tables beside the parts."""

    def __init__(self, spec: AggregateSpec, profile: str | Profile = "risingwave", *,
                 close_minus_one: bool | None = None, backend: str | None = None):
        self.spec = spec
        self.window = spec.window
        self.by = list(spec.by)
        self.aggs = spec.agg_dict
        self.emit = spec.emit
        self.profile = resolve(profile, close_minus_one=close_minus_one)
        self._backend: Backend = get_backend(backend)
        self._schema: pa.Schema | None = None
        self._init_drained()

    # -- set-up ----------------------------------------------------------------
    def bind(self, schema: pa.Schema) -> "AggregateOperator":
        """Fix the input schema without pushing rows (checked on every push)."""
        self._bind(schema)
        return self

    def _bind(self, schema: pa.Schema) -> None:
        if self._schema is not None:
            same_schema(self._schema, schema, f"{type(self).__name__}.push")
            return
        self._out_schema = self.spec.output_schema(schema)  # checks every column
        dom = event_time_domain(schema, self.window.column)
        self._size, self._slide = self.window.raw(dom)
        self._close = 1 if self.profile.close_minus_one else 0
        self._codecs = [KeyCodec(k, schema.field(k).type) for k in self.by]
        #: one state key per distinct aggregate's column (``__distinct_<column>``), after the group keys
        self._dcols = distinct_columns(self.aggs)
        self._dcodecs = [KeyCodec(f"__distinct_{c}", schema.field(c).type) for c in self._dcols]
        self._accs = plan_aggs(self.aggs, schema)[0]
        self._domain = dom
        self._schema = schema
        self._bind_pending_drain()

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
                if ok is None and acc.op in POSITIONAL:  # (a None accumulator counts rows)
                    ok = xp.ones(int(take(values).shape[0]), dtype=bool)
                out.append(None if ok is None else ok.astype(xp.int64))
                continue
            v = take(values).astype(acc.dtype, copy=False)
            if ok is not None:
                ident = 0 if acc.op in ("add", *POSITIONAL) else self._identity(acc)
                v = xp.where(ok, v, ident)
            out.append(v)
        return out

    @property
    def _keys(self) -> list:
        """The codecs of the state's keys: the group keys, then one per
        distinct aggregate's column (:meth:`_distinct_keys`)."""
        return self._codecs + self._dcodecs

    def _distinct_keys(self, xp: Any, keys: list[Any], dcodes: list[Any], accs: list[Any]) -> tuple[list, list]:
        """The rows of a chunk grouped with their distinct values: each row once
        with every distinct key null (it carries the accumulators), and once
        per distinct column whose value is not null, with that key set and
        identity accumulators (SQL's Expand, as Spark rewrites distinct
        aggregates). A (window, key)'s state rows then hold its distinct
        values once each; :meth:`_collapse` folds them back into one row."""
        n = int(keys[0].shape[0])
        nulls = xp.full(n, NULL_CODE, dtype=xp.int64)
        sels = [mask_index(xp, d != NULL_CODE, int(xp.count_nonzero(d != NULL_CODE))) for d in dcodes]
        out_k = [xp.concatenate([k] + [k[s] for s in sels]) for k in keys]
        out_k += [xp.concatenate([nulls] + [d[s] if i == j else nulls[s] for j, s in enumerate(sels)])
                  for i, d in enumerate(dcodes)]
        out_a = []
        for acc, a in zip(self._accs, accs):
            first = xp.ones(n, dtype=xp.int64) if a is None else a
            ident = 0 if acc.op == "add" else self._identity(acc)
            out_a.append(xp.concatenate([first] + [xp.full(int(s.shape[0]), ident, dtype=first.dtype)
                                                  for s in sels]))
        return out_k, out_a

    def _collapse(self, wins: Any, keys: list[Any], accs: list[Any], ends: Any) -> tuple:
        """State rows with distinct keys (:meth:`_distinct_keys`) folded into
        one row per (window, group key): the accumulators reduced (the extra
        rows hold identities), and per distinct column the count of its
        non-null values and (for sum / mean) their sum. Returns (wins, keys,
        accs, ends, {column: (count, sum or None)})."""
        xp = self._backend.xp
        nby = len(self.by)
        summed = {col for col, fn in self.aggs.values() if fn in ("sum_distinct", "mean_distinct")}
        extra = []
        for col, c, d in zip(self._dcols, self._dcodecs, keys[nby:]):
            has = d != NULL_CODE
            extra.append(has.astype(xp.int64))
            if col in summed:
                extra.append(xp.where(has, c.device_values(xp, d), 0))
        # (a session's end after its keys: one session of a key starts at a time, and rows stay in (start, keys) order)
        group = [wins] + keys[:nby] + ([] if ends is None else [ends])
        gk, ga, _, _ = group_reduce(xp, group, list(accs) + extra, [a.op for a in self._accs] + ["add"] * len(extra))
        it = iter(ga[len(accs):])
        dist = {col: (next(it), next(it) if col in summed else None) for col in self._dcols}
        return gk[0], gk[1:1 + nby], ga[:len(accs)], (None if ends is None else gk[-1]), dist

    @staticmethod
    def _identity(acc: Acc) -> Any:
        if acc.dtype.kind == "f":
            return np.inf if acc.op == "min" else -np.inf
        return _I64.max if acc.op == "min" else _I64.min

    def _columns_needed(self, column: str) -> list[str]:
        srcs = [c for c, _ in self.aggs.values() if c != "*"]
        return list(dict.fromkeys([column, *self.by, *srcs]))

    # -- output ----------------------------------------------------------------
    def _empty_out(self) -> pa.Table:
        return self._out_schema.empty_table()

    def _finalize(self, wins: Any, keys: list[Any], accs: list[Any], ends: Any = None) -> pa.Table:
        """Output rows from window starts (``ends``: start + size when None),
        key codes and accumulators."""
        b = self._backend
        t = self._domain.type
        wdt = np.dtype(np.int64) if self._domain.is_timestamp else np.dtype(t.to_pandas_dtype())
        dist: dict[str, tuple[Any, Any]] = {}
        if self._dcodecs:
            wins, keys, accs, ends, dist = self._collapse(wins, keys, accs, ends)
        dnames = list(dist)
        # every output array to the host in one copy
        w, e, *host = staging.download_arrays(b, [wins, ends, *keys, *accs, *(a for c in dnames for a in dist[c])])
        hkeys, host = host[:len(keys)], host[len(keys):]
        hdist = {c: (host[len(accs) + 2 * i], host[len(accs) + 2 * i + 1]) for i, c in enumerate(dnames)}
        e = w + self._size if ends is None else e
        cols = [numpy_to_arrow(t, w.astype(wdt, copy=False), None), numpy_to_arrow(t, e.astype(wdt, copy=False), None)]
        cols += [c.decode(k) for c, k in zip(self._codecs, hkeys)]
        j = 0
        for name, (col, fn) in self.aggs.items():
            field = self._out_schema.field(name)
            if fn in DISTINCT:
                n, total = hdist[col]
                if fn == "count_distinct":
                    cols.append(pa.array(n, pa.int64()))
                    continue
                valid = n > 0
                v = total / np.where(valid, n, 1) if fn == "mean_distinct" else total
                v = v.astype(field.type.to_pandas_dtype(), copy=False)
                cols.append(numpy_to_arrow(field.type, _zero_nulls(v, valid), valid))
                continue
            if fn == "count":
                cols.append(pa.array(host[j], pa.int64()))
                j += 1
                continue
            v, nn = host[j], host[j + 1]
            j += 2
            valid = nn > 0
            if fn == "mean":
                v = v / np.where(valid, nn, 1)
            if fn in ("min", "max", *POSITIONAL) and v.dtype.kind != "f":
                v = v.astype(_fixed_dtype(field.type), copy=False)
            cols.append(numpy_to_arrow(field.type, _zero_nulls(v, valid), valid))
        if self.spec.window_time:
            cols.append(numpy_to_arrow(t, (e - 1).astype(wdt, copy=False), None))
        out = pa.Table.from_arrays(cols, schema=self._out_schema)
        if any(not c.ordered for c in self._codecs):
            out = sort_table(out, ["window_start", *self.by])
        return out

    # -- state -----------------------------------------------------------------
    def _restore_bind(self, meta: dict, snapshot: Mapping[str, pa.Table]) -> bool:
        """Bind the snapshotted input schema and reload the key dictionaries;
        False when the snapshot was taken before any row."""
        if meta["schema"] is None:
            return False
        self._bind(schema_from_text(meta["schema"]))
        load_dictionaries(self._codecs + self._dcodecs, snapshot)
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
            out.update(dictionary_tables(self._codecs + self._dcodecs))
        out["state"] = pa.table(cols).replace_schema_metadata({tag: json.dumps(meta)})
        return out
