"""The stream-stream interval join: two named inputs, equal keys, and
``right.time BETWEEN left.time + lower AND left.time + upper``.

Each drain runs one micro-batch of the join (Spark's symmetric hash join,
``StreamingSymmetricHashJoinExec``, as of Spark 4):

1. the rows pushed since the last drain (each input's new rows) are matched
   against the other side's state and against each other: every pair of
   rows that satisfies the condition is emitted exactly once, in the batch
   where its later row arrives;
2. the new rows join their side's state, with a flag saying whether they
   matched;
3. each side's state rows that no future row of the other side can match
   are deleted — a left row once ``left.time <= W - upper - 1 ms`` (1 unit
   for integer times), a right row once ``right.time <= W + lower - 1 ms``,
   where ``W`` is the drain's watermark (the minimum over both inputs: the
   other side's rows at or below it are late) and the 1 ms is Spark's state
   watermark margin — and, in a left / right / full outer join, those that
   never matched are emitted with nulls for the other side.

So state is bounded by the watermark and the bounds, and the output equals
Spark's stream-stream join append output. Rows with a null key match
nothing: an outer side keeps them until they leave the state and emits
them with nulls, another side drops them at once (as Spark's inferred
``IS NOT NULL`` filters do);
rows with a null event time can match nothing and are dropped (counted in
``null_rows``), as are rows at or behind the last drain's watermark (``<``
under a profile with ``late_inclusive=False``), counted in ``late_rows``.

The inputs' schema is one :class:`pyarrow.Schema` with one struct field per
named input (:func:`inputs_schema`); the output has the left input's columns
and then the right's (names must differ; the other side's columns are
nullable in an outer join). The output's event time is the left time
column, with watermark ``W - max(upper, 0) - 1 ms``: no later output row has
a left time at or below it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Mapping, Sequence

import pyarrow as pa

from kernels.join import interval_pairs, known_keys

from .backend import Backend, get_backend
from .drained import Drained
from .errors import ConfigError, SchemaError, StateError, WatermarkError
from .frame import Frame
from .keys import KeyCodec
from .operator import Operator, OperatorSpec
from .profiles import Profile, resolve
from .timecol import TimeDomain, event_time_domain, parse_interval
from .watermark import same_schema, schema_from_text, schema_to_text

HOWS = ("inner", "left", "right", "full")
MATCHED = "__matched"
TIME = "__time"  # a state row's join time (a window join's: its window start)


def inputs_schema(schemas: Mapping[str, pa.Schema]) -> pa.Schema:
    """Named inputs as one schema: a struct field per input.

    >>> s = inputs_schema({"a": pa.schema([("x", pa.int64())]), "b": pa.schema([("y", pa.int64())])})
    >>> list(input_schemas(s))
    ['a', 'b']
    """
    return pa.schema([pa.field(name, pa.struct(list(s))) for name, s in schemas.items()])


def input_schemas(schema: pa.Schema) -> dict[str, pa.Schema]:
    """The named inputs of :func:`inputs_schema`, back."""
    return {f.name: pa.schema(list(f.type)) for f in schema}


def _signed(value: Any, what: str) -> Any:
    value = parse_interval(value)
    if isinstance(value, bool) or not isinstance(value, (int, timedelta)):
        raise ConfigError(f"join time bound {what} must be a duration (e.g. '20 seconds', '-5 seconds', a "
                          f"timedelta) or an int for integer event times, got {value!r}")
    return value


@dataclass(frozen=True)
class _JoinSpec(OperatorSpec):
    """What both joins' specs share: the inputs, the key pairs, the time
    columns (the inputs' watermark columns), and the checks."""

    left: str
    right: str
    on: tuple[tuple[str, str], ...]
    left_time: str
    right_time: str

    kind: ClassVar[str] = "join"
    #: columns the output has before the left input's
    _prefix: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        if self.how not in HOWS:
            raise ConfigError(f"join how must be one of {HOWS}, got {self.how!r}")
        if self.left == self.right:
            raise ConfigError(f"a join needs two different inputs, got {self.left!r} twice")
        on = tuple(tuple(p) for p in self.on)
        if not on or not all(len(p) == 2 and all(isinstance(c, str) for c in p) for p in on):
            raise ConfigError(f"join 'on' must be pairs [left column, right column], e.g. [['a_id', 'b_aid']], "
                              f"got {self.on!r}")
        object.__setattr__(self, "on", on)

    def inputs(self) -> tuple[str, str]:
        return self.left, self.right

    def input_keys(self, name: str) -> tuple[str, ...]:
        """Input ``name``'s join key columns: its rows reach the vnodes by their
        values (both inputs' keys have one type, so equal keys meet)."""
        return tuple(p[0] if name == self.left else p[1] for p in self.on)

    def vnode_keys(self, vnodes: int) -> tuple[str, ...]:
        return tuple(f"{lc}={rc}" for lc, rc in self.on)

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        return self._check(schema)[2]

    def _check(self, schema: pa.Schema) -> tuple[pa.Schema, pa.Schema, pa.Schema, TimeDomain]:
        named = input_schemas(schema)
        for name in (self.left, self.right):
            if name not in named:
                raise ConfigError(f"join input {name!r} is not an input of the pipeline; inputs are {list(named)}")
        ls, rs = named[self.left], named[self.right]
        for name, s, cols in ((self.left, ls, [p[0] for p in self.on] + [self.left_time]),
                              (self.right, rs, [p[1] for p in self.on] + [self.right_time])):
            for c in cols:
                if c not in s.names:
                    raise SchemaError(f"join column {c!r} not found in input {name!r}; it has columns {s.names}")
        for lc, rc in self.on:
            lt, rt = ls.field(lc).type, rs.field(rc).type
            if lt != rt:
                raise SchemaError(f"join key types differ: {self.left}.{lc} is {lt} but {self.right}.{rc} is {rt}; "
                                  "cast one side first")
        dom = event_time_domain(ls, self.left_time)
        rdom = event_time_domain(rs, self.right_time)
        if dom.type != rdom.type:
            raise SchemaError(f"join time columns differ in type: {self.left}.{self.left_time} is {dom.type} but "
                              f"{self.right}.{self.right_time} is {rdom.type}")
        self._check_times(dom)
        dup = sorted(set(ls.names) & set(rs.names))
        if dup:
            raise SchemaError(f"inputs {self.left!r} and {self.right!r} share column name(s) {dup}; the join's "
                              "output keeps both sides' columns: rename one side's first (a 'select')")
        taken = sorted(set(self._prefix) & (set(ls.names) | set(rs.names)))
        if taken:
            raise SchemaError(f"the join's output adds column(s) {taken}, which an input has already: rename it")
        lnull, rnull = self.how in ("right", "full"), self.how in ("left", "full")
        out = pa.schema([pa.field(c, dom.type) for c in self._prefix] +
                        [f.with_nullable(True) if lnull else f for f in ls] +
                        [f.with_nullable(True) if rnull else f for f in rs])
        return ls, rs, out, dom

    def _check_times(self, dom: TimeDomain) -> None:
        """The spec's durations in the time columns' unit (raises when they do not fit)."""


@dataclass(frozen=True)
class IntervalJoinSpec(_JoinSpec):
    """``left ⋈ right`` on ``on`` (pairs of left and right key columns) and
    ``right_time BETWEEN left_time + lower AND left_time + upper``.

    >>> s = IntervalJoinSpec("a", "b", (("id", "aid"),), "ts", "bts", "0 seconds", "20 seconds")
    >>> s.how, s.upper
    ('inner', datetime.timedelta(seconds=20))
    """

    lower: Any
    upper: Any
    how: str = "inner"

    def __post_init__(self) -> None:
        super().__post_init__()
        lo, hi = _signed(self.lower, "lower"), _signed(self.upper, "upper")
        if type(lo) is not type(hi):
            raise ConfigError(f"join time bounds must both be durations or both ints, got {lo!r} and {hi!r}")
        if hi < lo:
            raise ConfigError(f"join time bounds: lower {self.lower!r} is above upper {self.upper!r}; no row could "
                              "ever match")
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)

    @classmethod
    def between(cls, left: str, right: str, on: Sequence[Sequence[str]], between: Sequence[Any],
                schemas: Mapping[str, pa.Schema], how: str = "inner") -> "IntervalJoinSpec":
        """From the JSON form ``between: [t1, t2, lower, upper]`` (``t1 BETWEEN
        t2 + lower AND t2 + upper``), with ``t1`` a column of either input."""
        if not (isinstance(between, (list, tuple)) and len(between) == 4):
            raise ConfigError(f"join 'between' must be [time, other time, lower, upper], e.g. "
                              f"['b_ts', 'a_ts', '0 seconds', '20 seconds'], got {between!r}")
        t1, t2, lo, hi = between
        ls, rs = schemas[left], schemas[right]
        if t1 in rs.names and t2 in ls.names:
            return cls(left, right, tuple(on), t2, t1, lo, hi, how)
        if t1 in ls.names and t2 in rs.names:  # t1 - hi <= t2 <= t1 - lo: right's time around left's
            neg = (lambda v: -parse_interval(v))
            return cls(left, right, tuple(on), t1, t2, neg(hi), neg(lo), how)
        raise SchemaError(f"join 'between' needs one time column of {left!r} (columns {ls.names}) and one of "
                          f"{right!r} (columns {rs.names}), got {t1!r} and {t2!r}")

    def build(self, profile: Any = None, backend: str | None = None) -> "IntervalJoin":
        return IntervalJoin(self, profile=profile or "risingwave", backend=backend)

    def event_time(self, upstream: str) -> str:
        return self.left_time

    def _check_times(self, dom: TimeDomain) -> None:
        for v, what in ((self.lower, "lower"), (self.upper, "upper")):
            dom.duration(v, f"join bound {what}", signed=True)


@dataclass(frozen=True)
class WindowJoinSpec(_JoinSpec):
    """``left ⋈ right`` on ``on`` within the same tumbling (``slide ==
    size``) or hopping window of their time columns (Flink's window join):
    each window's pairs go out when the watermark closes it.

    >>> WindowJoinSpec("p", "a", (("id", "seller"),), "pt", "at", "10 seconds", "10 seconds").slide
    datetime.timedelta(seconds=10)
    """

    size: Any
    slide: Any
    how: str = "inner"

    _prefix: ClassVar[tuple[str, ...]] = ("window_start", "window_end")

    def __post_init__(self) -> None:
        from .timecol import positive_interval

        super().__post_init__()
        size, slide = positive_interval(self.size, "window size"), positive_interval(self.slide, "window slide")
        if type(size) is not type(slide):
            raise ConfigError(f"window size and slide must both be durations or both ints, got {size!r}, {slide!r}")
        if size % slide:
            raise ConfigError(f"window size {self.size!r} must be a multiple of its slide {self.slide!r}")
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "slide", slide)

    def build(self, profile: Any = None, backend: str | None = None) -> "WindowJoin":
        return WindowJoin(self, profile=profile or "risingwave", backend=backend)

    def event_time(self, upstream: str) -> str:
        return "window_start"

    def _check_times(self, dom: TimeDomain) -> None:
        dom.duration(self.size, "window size", allow_zero=False)
        dom.duration(self.slide, "window slide", allow_zero=False)


class _Side:
    """One input's rows in state (or pushed in this batch): the rows, their
    key codes and event times on the backend, and whether each matched."""

    __slots__ = ("frame", "codes", "ts", "matched")

    def __init__(self, frame: Frame, codes: list[Any], ts: Any, matched: Any):
        self.frame, self.codes, self.ts, self.matched = frame, codes, ts, matched

    @property
    def rows(self) -> int:
        return self.frame.num_rows

    @staticmethod
    def concat(parts: Sequence["_Side"], xp: Any) -> "_Side":
        parts = [p for p in parts if p.rows] or list(parts[:1])
        if len(parts) == 1:
            return parts[0]
        return _Side(Frame.concat([p.frame for p in parts]),
                     [xp.concatenate(c) for c in zip(*(p.codes for p in parts))],
                     xp.concatenate([p.ts for p in parts]), xp.concatenate([p.matched for p in parts]))

    def keep(self, mask: Any) -> "_Side":
        return _Side(self.frame.filter(mask), [c[mask] for c in self.codes], self.ts[mask], self.matched[mask])


class _Join(Operator, Drained):
    """What both joins share: two named inputs bound and encoded, rows
    pushed per input, a side of rows in state per input, the joined rows'
    columns, and the state as one part per side."""

    late_reason = "join late"

    def __init__(self, spec: Any, *, profile: str | Profile = "risingwave", backend: str | None = None):
        self.spec = spec
        self.profile = resolve(profile)
        self._backend: Backend = get_backend(backend)
        self._schema: pa.Schema | None = None
        self._domain: TimeDomain | None = None
        self._sides: dict[str, _Side] = {}
        self._new: dict[str, list[_Side]] = {spec.left: [], spec.right: []}
        self._saved = {spec.left: False, spec.right: False}
        self.matches = 0
        self._init_drained()

    # -- set-up ----------------------------------------------------------------
    def bind(self, schema: pa.Schema) -> "_Join":
        """Fix the inputs' schema (:func:`inputs_schema`) before any row."""
        if self._schema is not None:
            same_schema(self._schema, schema, f"{type(self).__name__}.bind")
            return self
        ls, rs, out, dom = self.spec._check(schema)
        self._in = {self.spec.left: ls, self.spec.right: rs}
        self._out = out
        self._domain = dom
        self._bind_times(dom)
        self._codecs = [KeyCodec(lc, ls.field(lc).type) for lc, _ in self.spec.on]
        self._tcol = {self.spec.left: self.spec.left_time, self.spec.right: self.spec.right_time}
        how = self.spec.how
        self._outer = {n for n, keep in ((self.spec.left, how in ("left", "full")),
                                         (self.spec.right, how in ("right", "full"))) if keep}
        self._schema = schema
        for name in (self.spec.left, self.spec.right):
            self._sides[name] = self._side(name, Frame.empty(self._in[name], self._backend))
        self._bind_pending_drain()
        return self

    def _side(self, name: str, frame: Frame, matched: Any = None, ts: Any = None) -> _Side:
        """Rows of input ``name`` as a side: key codes computed, and the time
        the join matches on (default: the row's event time)."""
        xp = self._backend.xp
        codes = [c.encode(xp, frame.columns[k], self._backend) for c, k in zip(self._codecs, self.spec.input_keys(name))]
        if ts is None:
            ts = frame.values(self._tcol[name])[0].astype(xp.int64, copy=False)
        if matched is None:
            matched = xp.zeros(frame.num_rows, dtype=bool)
        return _Side(frame, codes, ts, matched)

    # -- push ------------------------------------------------------------------
    def push(self, rows: Mapping[str, Any]) -> None:
        """New rows of one or both inputs (``{input name: Arrow table or
        Frame}``), joined at the next drain. Rows with a null event time,
        and rows at or behind the last drain's watermark, are dropped and
        counted."""
        if self._schema is None:
            raise SchemaError(f"{type(self).__name__}.push before bind(inputs_schema({{...}}))")
        b = self._backend
        xp = b.xp
        for name, table in rows.items():
            if name not in self._new:
                raise ConfigError(f"join input {name!r} is not one of {list(self._new)}")
            if isinstance(table, pa.RecordBatch):
                table = pa.Table.from_batches([table])
            same_schema(self._in[name], table.schema, f"{type(self).__name__}.push({name!r})")
            self.rows_in += table.num_rows
            if not table.num_rows:
                continue
            frame = Frame.of(table, b)
            ts, valid = frame.values(self._tcol[name])
            ts = ts.astype(xp.int64, copy=False)
            if valid is not None:
                self.null_rows += int(valid.shape[0] - xp.count_nonzero(valid))
                frame, ts = frame.filter(valid), ts[valid]
            side = self._accept(name, frame, ts) if frame.num_rows else None
            if side is not None and name not in self._outer:  # a null key matches nothing: only an outer side keeps it
                known = known_keys(xp, side.codes)
                if not bool(xp.all(known)):
                    side = side.keep(known)
            if side is not None and side.rows:
                self._new[name].append(side)

    def _accept(self, name: str, frame: Frame, ts: Any) -> "_Side | None":
        """The state rows a batch's rows of ``name`` (no null time) become,
        without the late ones (counted)."""
        raise NotImplementedError

    def output_watermark(self, watermark: Any) -> Any:
        """``W - behind`` on the output's event time: no later output row is
        at or below it (``_behind`` from :meth:`_bind_times`)."""
        if watermark is None or self._domain is None:
            return None
        return self._domain.from_raw(self._domain.to_raw(watermark) - self._behind)

    def _emit(self, out: list[pa.Table]) -> pa.Table:
        """End a drain: compact the key dictionaries, count and return its rows."""
        self._compact_keys()
        if not out:
            return self._out.empty_table()
        res = out[0] if len(out) == 1 else pa.concat_tables(out)
        self.rows_out += res.num_rows
        return res

    def take_late(self) -> pa.Table | None:
        """None: the late rows of two inputs have two schemas, and a join
        keeps none aside (a pipeline's watermark filters keep its inputs'
        late rows, which are all the rows a join would find late there)."""
        return None

    def _pairs(self, left: Frame | None, right: Frame | None, prefix: Sequence[pa.Array] = ()) -> pa.Table:
        """Joined rows: ``prefix`` columns, left columns, then right columns
        (nulls for a missing side)."""
        n = (left if left is not None else right).num_rows
        cols = list(prefix)
        for part, name in ((left, self.spec.left), (right, self.spec.right)):
            if part is None:
                cols += [pa.nulls(n, f.type) for f in self._in[name]]
            else:
                t = part.to_arrow()
                cols += [t.column(i) for i in range(t.num_columns)]
        return pa.Table.from_arrays(cols, schema=self._out)

    def _compact_keys(self) -> None:
        b = self._backend
        L, R = self.spec.left, self.spec.right
        for i, c in enumerate(self._codecs):
            new = c.compact_codes(b.xp, [self._sides[L].codes[i], self._sides[R].codes[i]], self.state_rows,
                                  b.to_numpy)
            if new is not None:
                self._sides[L].codes[i], self._sides[R].codes[i] = new

    # -- state -----------------------------------------------------------------
    @property
    def state_rows(self) -> int:
        """Rows held, both sides."""
        return sum(s.rows for s in self._sides.values())

    @property
    def state_bytes(self) -> int:
        return sum(s.frame.nbytes() + s.matched.nbytes + s.ts.nbytes + sum(c.nbytes for c in s.codes)
                   for s in self._sides.values())

    def side_rows(self, name: str) -> int:
        """Rows of input ``name`` held."""
        return self._sides[name].rows if name in self._sides else 0

    def counters(self) -> dict[str, int]:
        return {**super().counters(), "matches": self.matches,
                **{f"state_rows_{n}": self.side_rows(n) for n in (self.spec.left, self.spec.right)}}

    def snapshot(self, rows: bool = True) -> dict[str, pa.Table]:
        """``{"state": counters, and with ``rows`` "left.<input>" / "right.<input>"
        parts}``; the key dictionaries are rebuilt from the rows on restore."""
        if any(self._new.values()):
            raise StateError(f"{type(self).__name__}.snapshot between push and drain: drain the batch first")
        meta = {**self._drained_meta(), "schema": schema_to_text(self._schema), "matches": self.matches}
        out = {"state": pa.table({"x": pa.array([], pa.int8())}).replace_schema_metadata(
            {"gpuwm.join": json.dumps(meta)})}
        if rows:
            out.update({p: self.snapshot_part(p) for p in self.state_parts()})
        return out

    def state_parts(self) -> dict[str, bool]:
        """One part per side, written again when the side changed."""
        if self._schema is None:
            return {}
        return {f"side.{n}": not self._saved[n] for n in (self.spec.left, self.spec.right)}

    def snapshot_part(self, name: str) -> pa.Table:
        side = self._sides.get(name.removeprefix("side."))
        if side is None:
            raise StateError(f"the join state holds no part {name!r}")
        t = side.frame.to_arrow()
        t = t.append_column(MATCHED, pa.array(self._backend.to_numpy(side.matched), pa.bool_()))
        return t.append_column(TIME, pa.array(self._backend.to_numpy(side.ts), pa.int64()))

    def mark_saved(self, written: Sequence[str] = ()) -> None:
        for n in self._saved:
            self._saved[n] = True

    def restore(self, snapshot: dict[str, pa.Table], parts: dict[str, pa.Table] | None = None) -> "_Join":
        """Continue exactly where the snapshotted operator stopped."""
        if self.rows_in or self.state_rows:
            raise WatermarkError(f"restore() must be called on a fresh {type(self).__name__}")
        md = snapshot["state"].schema.metadata or {}
        if b"gpuwm.join" not in md:
            raise StateError(f"this snapshot is not of a {type(self).__name__}")
        meta = json.loads(md[b"gpuwm.join"])
        schema = schema_from_text(meta["schema"])
        parts = snapshot if parts is None else parts
        if schema is not None:
            self._schema = None
            self.bind(schema)
            for n in (self.spec.left, self.spec.right):
                t = parts.get(f"side.{n}")
                if t is None:
                    raise StateError(f"join state is missing its part 'side.{n}'")
                b = self._backend
                matched = b.asarray(t.column(MATCHED).to_numpy(zero_copy_only=False).astype(bool))
                ts = b.asarray(t.column(TIME).to_numpy().astype("int64"))
                frame = Frame.from_arrow(t.drop_columns([MATCHED, TIME]), b)
                self._sides[n] = self._side(n, frame, matched, ts)
                self._saved[n] = True
        self._load_drained_meta(meta)
        self.matches = meta["matches"]
        return self


class IntervalJoin(_Join):
    """Join two inputs on equal keys and an event-time interval, with state
    bounded by the watermark (see the module docstring).

    ``push({input: rows, ...})`` takes a batch's new rows of either or both
    inputs; ``drain(W)`` runs the batch and returns the joined rows.

    Examples
    --------
    >>> import pyarrow as pa, gpuwm
    >>> from gpuwm.join import IntervalJoinSpec, inputs_schema
    >>> a = pa.schema([("id", pa.int64()), ("ts", pa.int64())])
    >>> b = pa.schema([("aid", pa.int64()), ("bts", pa.int64())])
    >>> j = IntervalJoinSpec("a", "b", [("id", "aid")], "ts", "bts", 0, 20, how="left").build("spark", "cpu")
    >>> _ = j.bind(inputs_schema({"a": a, "b": b}))
    >>> j.push({"a": pa.table({"id": [1, 2], "ts": [10, 10]}, schema=a),
    ...         "b": pa.table({"aid": [1], "bts": [25]}, schema=b)})
    >>> j.drain(None).to_pydict()
    {'id': [1], 'ts': [10], 'aid': [1], 'bts': [25]}
    >>> j.drain(25).num_rows, j.state_rows   # an a row at 6 or later could still come for b 25
    (0, 3)
    >>> j.drain(31).to_pydict()              # no b row after 31 can match a row 10: id 2 goes, unmatched
    {'id': [2], 'ts': [10], 'aid': [None], 'bts': [None]}
    >>> j.state_rows
    0
    """

    def _bind_times(self, dom: TimeDomain) -> None:
        self._lo = dom.duration(self.spec.lower, "lower", signed=True)
        self._hi = dom.duration(self.spec.upper, "upper", signed=True)
        self._margin = dom.one_ms()
        self._behind = max(self._hi, 0) + self._margin  # the output's left time trails W by this

    def _accept(self, name: str, frame: Frame, ts: Any) -> "_Side | None":
        if self._drained is not None:  # at or behind the last drain: late
            xp = self._backend.xp
            fresh = ts > self._drained if self.profile.late_inclusive else ts >= self._drained
            nlate = int(frame.num_rows - xp.count_nonzero(fresh))
            if nlate:
                self.late_rows += nlate
                frame = frame.filter(fresh)
        return self._side(name, frame)

    # -- drain -----------------------------------------------------------------
    def drain(self, watermark: Any) -> pa.Table:
        """Join the rows pushed since the last drain, then delete (and, in an
        outer join, emit unmatched) state rows no future row can match at
        ``watermark`` (None: no watermark yet, nothing is deleted)."""
        w = self._drain_to(watermark)
        if self._schema is None:
            return pa.table({})
        xp = self._backend.xp
        L, R = self.spec.left, self.spec.right
        left, right = self._sides[L], self._sides[R]
        new_l = _Side.concat(self._new[L] or [self._side(L, Frame.empty(self._in[L], self._backend))], xp)
        new_r = _Side.concat(self._new[R] or [self._side(R, Frame.empty(self._in[R], self._backend))], xp)
        self._new = {L: [], R: []}
        nl0, nr0 = left.rows, right.rows
        all_r = _Side.concat([right, new_r], xp)
        # new left rows x (right state + new right rows); left state x new right rows
        pl, pr = interval_pairs(xp, all_r.codes, all_r.ts, new_l.codes, new_l.ts + self._lo, new_l.ts + self._hi)
        qr, ql = interval_pairs(xp, left.codes, left.ts, new_r.codes, new_r.ts - self._hi, new_r.ts - self._lo)
        all_l = _Side.concat([left, new_l], xp)
        li = xp.concatenate([pl + nl0, ql])
        ri = xp.concatenate([pr, qr + nr0])
        if li.shape[0]:
            all_l.matched = all_l.matched.copy()
            all_r.matched = all_r.matched.copy()
            all_l.matched[li] = True
            all_r.matched[ri] = True
        out = [self._pairs(all_l.frame.take(li), all_r.frame.take(ri))] if li.shape[0] else []
        self.matches += int(li.shape[0])
        changed_l, changed_r = new_l.rows > 0 or bool(li.shape[0]), new_r.rows > 0 or bool(li.shape[0])
        if w is not None:
            gone_l = all_l.ts <= w - self._hi - self._margin
            gone_r = all_r.ts <= w + self._lo - self._margin
            if L in self._outer:
                lone = gone_l & ~all_l.matched
                if bool(xp.any(lone)):
                    out.append(self._pairs(all_l.frame.filter(lone), None))
            if R in self._outer:
                lone = gone_r & ~all_r.matched
                if bool(xp.any(lone)):
                    out.append(self._pairs(None, all_r.frame.filter(lone)))
            if bool(xp.any(gone_l)):
                all_l, changed_l = all_l.keep(~gone_l), True
            if bool(xp.any(gone_r)):
                all_r, changed_r = all_r.keep(~gone_r), True
        self._sides[L], self._sides[R] = all_l, all_r
        self._saved[L] &= not changed_l
        self._saved[R] &= not changed_r
        return self._emit(out)



class WindowJoin(_Join):
    """Join two inputs on equal keys within the same tumbling or hopping
    window (Flink's window join, Nexmark Q8): a row is kept once per window
    it falls in; when the watermark closes a window (``end <= W``; ``end -
    1 <= W`` under a profile with ``close_minus_one``) its pairs go out with
    ``window_start`` and ``window_end`` before the left and right columns —
    in an outer join its rows without a partner too, with nulls — and its
    rows leave the state. A row whose window had closed at the last drain
    is late there (counted once per such window).

    Examples
    --------
    >>> import pyarrow as pa
    >>> from gpuwm.join import WindowJoinSpec, inputs_schema
    >>> p = pa.schema([("id", pa.int64()), ("pt", pa.int64())])
    >>> a = pa.schema([("seller", pa.int64()), ("at", pa.int64())])
    >>> j = WindowJoinSpec("p", "a", [("id", "seller")], "pt", "at", 10, 10).build("spark", "cpu")
    >>> _ = j.bind(inputs_schema({"p": p, "a": a}))
    >>> j.push({"p": pa.table({"id": [1, 2], "pt": [3, 4]}, schema=p),
    ...         "a": pa.table({"seller": [1, 2], "at": [8, 12]}, schema=a)})
    >>> j.drain(9).num_rows                  # [0, 10) still open
    0
    >>> j.drain(10).to_pydict()              # closed: id 1 opened an auction in it, id 2 in the next one
    {'window_start': [0], 'window_end': [10], 'id': [1], 'pt': [3], 'seller': [1], 'at': [8]}
    """

    def _bind_times(self, dom: TimeDomain) -> None:
        self._size = dom.duration(self.spec.size, "window size", allow_zero=False)
        self._slide = dom.duration(self.spec.slide, "window slide", allow_zero=False)
        self._cm = 1 if self.profile.close_minus_one else 0
        self._behind = self._size  # windows still open start after W - size

    def _closed(self, ws: Any, w: int) -> Any:
        return ws + (self._size - self._cm) <= w

    def _accept(self, name: str, frame: Frame, ts: Any) -> "_Side | None":
        from kernels import assign_windows

        xp = self._backend.xp
        rows, widx = assign_windows(xp, ts, self._size, self._slide)
        ws = widx * self._slide
        if self._drained is not None:
            open_ = ~self._closed(ws, self._drained)
            nlate = int(ws.shape[0] - xp.count_nonzero(open_))
            if nlate:
                self.late_rows += nlate
                rows, ws = rows[open_], ws[open_]
        if not rows.shape[0]:
            return None
        return self._side(name, frame.take(rows), ts=ws)

    def drain(self, watermark: Any) -> pa.Table:
        """Close the windows ``watermark`` closes: their pairs (and, outer,
        unmatched rows) go out and their rows leave the state."""
        w = self._drain_to(watermark)
        if self._schema is None:
            return pa.table({})
        xp = self._backend.xp
        L, R = self.spec.left, self.spec.right
        for n in (L, R):
            if self._new[n]:
                self._sides[n] = _Side.concat([self._sides[n]] + self._new[n], xp)
                self._saved[n] = False
            self._new[n] = []
        if w is None:
            return self._out.empty_table()
        left, right = self._sides[L], self._sides[R]
        cl, cr = self._closed(left.ts, w), self._closed(right.ts, w)
        if not (bool(xp.any(cl)) or bool(xp.any(cr))):
            return self._out.empty_table()
        lc, rc = left.keep(cl), right.keep(cr)
        self._sides[L], self._sides[R] = left.keep(~cl), right.keep(~cr)
        self._saved[L] = self._saved[R] = False
        pl, pr = interval_pairs(xp, rc.codes, rc.ts, lc.codes, lc.ts, lc.ts)
        out = []
        if pl.shape[0]:
            out.append(self._pairs(lc.frame.take(pl), rc.frame.take(pr), self._windows(lc.ts[pl])))
            self.matches += int(pl.shape[0])
        for side, idx, name, which in ((lc, pl, L, "left"), (rc, pr, R, "right")):
            if name not in self._outer or not side.rows:
                continue
            alone = xp.ones(side.rows, dtype=bool)
            alone[idx] = False
            if bool(xp.any(alone)):
                f = side.frame.filter(alone)
                out.append(self._pairs(f if which == "left" else None, f if which == "right" else None,
                                       self._windows(side.ts[alone])))
        return self._emit(out)

    def _windows(self, ws: Any) -> list[pa.Array]:
        """``window_start`` and ``window_end`` columns for raw window starts."""
        from .frame import numpy_to_arrow

        t = self._domain.type
        start = self._backend.to_numpy(ws)
        return [numpy_to_arrow(t, start, None), numpy_to_arrow(t, start + self._size, None)]
