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
nothing (an outer join emits them with nulls when they leave the state);
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

from kernels.join import interval_pairs

from .backend import Backend, get_backend
from .drained import Drained
from .errors import ConfigError, SchemaError, StateError, WatermarkError
from .frame import Frame
from .keys import KeyCodec
from .operator import Operator, OperatorSpec, Released
from .profiles import Profile, resolve
from .timecol import TimeDomain, event_time_domain, parse_interval
from .watermark import same_schema, schema_from_text, schema_to_text

HOWS = ("inner", "left", "right", "full")
MATCHED = "__matched"


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
class IntervalJoinSpec(OperatorSpec):
    """``left ⋈ right`` on ``on`` (pairs of left and right key columns) and
    ``right_time BETWEEN left_time + lower AND left_time + upper``.

    >>> s = IntervalJoinSpec("a", "b", (("id", "aid"),), "ts", "bts", "0 seconds", "20 seconds")
    >>> s.how, s.upper
    ('inner', datetime.timedelta(seconds=20))
    """

    left: str
    right: str
    on: tuple[tuple[str, str], ...]
    left_time: str
    right_time: str
    lower: Any
    upper: Any
    how: str = "inner"

    kind: ClassVar[str] = "join"

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

    def inputs(self) -> tuple[str, str]:
        return self.left, self.right

    def event_time(self, upstream: str) -> str:
        return self.left_time

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        return self._check(schema)[2]

    def _check(self, schema: pa.Schema) -> tuple[pa.Schema, pa.Schema, pa.Schema, TimeDomain]:
        named = input_schemas(schema)
        for name in (self.left, self.right):
            if name not in named:
                raise ConfigError(f"join input {name!r} is not an input of the pipeline; inputs are {list(named)}")
        ls, rs = named[self.left], named[self.right]
        for side, s, cols in (("left", ls, [p[0] for p in self.on] + [self.left_time]),
                              ("right", rs, [p[1] for p in self.on] + [self.right_time])):
            name = self.left if side == "left" else self.right
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
        for v, what in ((self.lower, "lower"), (self.upper, "upper")):
            dom.duration(v, f"join bound {what}", signed=True)
        dup = sorted(set(ls.names) & set(rs.names))
        if dup:
            raise SchemaError(f"inputs {self.left!r} and {self.right!r} share column name(s) {dup}; the join's "
                              "output keeps both sides' columns: rename one side's first (a 'select')")
        lnull, rnull = self.how in ("right", "full"), self.how in ("left", "full")
        out = pa.schema([f.with_nullable(True) if lnull else f for f in ls] +
                        [f.with_nullable(True) if rnull else f for f in rs])
        return ls, rs, out, dom


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


class IntervalJoin(Operator, Drained):
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

    late_reason = "join late"

    def __init__(self, spec: IntervalJoinSpec, *, profile: str | Profile = "risingwave", backend: str | None = None):
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
    def bind(self, schema: pa.Schema) -> "IntervalJoin":
        """Fix the inputs' schema (:func:`inputs_schema`) before any row."""
        if self._schema is not None:
            same_schema(self._schema, schema, "IntervalJoin.bind")
            return self
        ls, rs, out, dom = self.spec._check(schema)
        self._in = {self.spec.left: ls, self.spec.right: rs}
        self._out = out
        self._domain = dom
        self._lo = dom.duration(self.spec.lower, "lower", signed=True)
        self._hi = dom.duration(self.spec.upper, "upper", signed=True)
        self._margin = dom.one_ms()
        self._codecs = [KeyCodec(lc, ls.field(lc).type) for lc, _ in self.spec.on]
        self._keycols = {self.spec.left: [p[0] for p in self.spec.on], self.spec.right: [p[1] for p in self.spec.on]}
        self._tcol = {self.spec.left: self.spec.left_time, self.spec.right: self.spec.right_time}
        self._schema = schema
        for name in (self.spec.left, self.spec.right):
            self._sides[name] = self._side(name, Frame.empty(self._in[name], self._backend))
        self._bind_pending_drain()
        return self

    def _side(self, name: str, frame: Frame, matched: Any = None) -> _Side:
        """Rows of input ``name`` as a side: key codes and event times computed."""
        xp = self._backend.xp
        codes = [c.encode(xp, frame.columns[k], self._backend) for c, k in zip(self._codecs, self._keycols[name])]
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
            raise SchemaError("IntervalJoin.push before bind(inputs_schema({...}))")
        b = self._backend
        xp = b.xp
        for name, table in rows.items():
            if name not in self._new:
                raise ConfigError(f"join input {name!r} is not one of {list(self._new)}")
            if isinstance(table, pa.RecordBatch):
                table = pa.Table.from_batches([table])
            same_schema(self._in[name], table.schema, f"IntervalJoin.push({name!r})")
            self.rows_in += table.num_rows
            if not table.num_rows:
                continue
            frame = Frame.of(table, b)
            ts, valid = frame.values(self._tcol[name])
            ts = ts.astype(xp.int64, copy=False)
            keep = valid
            if valid is not None:
                self.null_rows += int(valid.shape[0] - xp.count_nonzero(valid))
            if self._drained is not None:  # behind the last drain: late
                fresh = ts > self._drained if self.profile.late_inclusive else ts >= self._drained
                late = ~fresh if valid is None else ~fresh & valid
                self.late_rows += int(xp.count_nonzero(late))
                keep = fresh if valid is None else fresh & valid
            if keep is not None:
                frame = frame.filter(keep)
            if frame.num_rows:
                self._new[name].append(self._side(name, frame))

    def take_late(self) -> pa.Table | None:
        """None: the late rows of two inputs have two schemas, and a join
        keeps none aside (a pipeline's watermark filters keep its inputs'
        late rows, which are all the rows a join would find late there)."""
        return None

    # -- drain -----------------------------------------------------------------
    def release(self, watermark: Any) -> Released:
        return Released(self.drain(watermark), self.output_watermark(watermark))

    def output_watermark(self, watermark: Any) -> Any:
        if watermark is None or self._domain is None:
            return None
        w = self._domain.to_raw(watermark)
        return self._domain.from_raw(w - max(self._hi, 0) - self._margin)

    def drain(self, watermark: Any) -> pa.Table:
        """Join the rows pushed since the last drain, then delete (and, in an
        outer join, emit unmatched) state rows no future row can match at
        ``watermark`` (None: no watermark yet, nothing is deleted)."""
        if self._schema is None:
            self._drain_to(watermark)
            return pa.table({})
        w = self._drain_to(watermark)
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
            if self.spec.how in ("left", "full"):
                lone = gone_l & ~all_l.matched
                if bool(xp.any(lone)):
                    out.append(self._pairs(all_l.frame.filter(lone), None))
            if self.spec.how in ("right", "full"):
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
        self._compact_keys()
        if not out:
            return self._out.empty_table()
        res = out[0] if len(out) == 1 else pa.concat_tables(out)
        self.rows_out += res.num_rows
        return res

    def _pairs(self, left: Frame | None, right: Frame | None) -> pa.Table:
        """Joined rows: left columns then right columns (nulls for a missing side)."""
        n = (left if left is not None else right).num_rows
        cols = []
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
            raise StateError("IntervalJoin.snapshot between push and drain: drain the batch first")
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
        return t.append_column(MATCHED, pa.array(self._backend.to_numpy(side.matched), pa.bool_()))

    def mark_saved(self, written: Sequence[str] = ()) -> None:
        for n in self._saved:
            self._saved[n] = True

    def restore(self, snapshot: dict[str, pa.Table], parts: dict[str, pa.Table] | None = None) -> "IntervalJoin":
        """Continue exactly where the snapshotted operator stopped."""
        if self.rows_in or self.state_rows:
            raise WatermarkError("restore() must be called on a fresh IntervalJoin")
        md = snapshot["state"].schema.metadata or {}
        if b"gpuwm.join" not in md:
            raise StateError("this snapshot is not of an IntervalJoin")
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
                matched = self._backend.asarray(t.column(MATCHED).to_numpy(zero_copy_only=False).astype(bool))
                frame = Frame.from_arrow(t.drop_columns([MATCHED]), self._backend)
                self._sides[n] = self._side(n, frame, matched)
                self._saved[n] = True
        self._load_drained_meta(meta)
        self.matches = meta["matches"]
        return self
