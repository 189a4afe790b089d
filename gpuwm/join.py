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
Spark's stream-stream join append output. An inner join may lack a bound
(``lower`` or ``upper`` None): the side it would clean keeps its rows, as
Spark keeps a side no range condition gives a state watermark. ``where``
holds the rest of Spark's condition: comparisons of a left and a right
column each pair must pass before it is emitted or flags a row matched
(Spark's post-join filter). Rows with a null key match
nothing: an outer side keeps them until they leave the state and emits
them with nulls, another side drops them at once (as Spark's inferred
``IS NOT NULL`` filters do);
rows with a null event time can match nothing and are dropped (counted in
``null_rows``), as are rows at or behind the last drain's watermark (``<``
under a profile with ``late_inclusive=False``), counted in ``late_rows``.

A batch's cost does not grow with the state. Each side's state is a list of
*runs*: a batch's new rows sorted by (key codes, time) — one sort of the
batch —, merged in size tiers (:mod:`gpuwm.runs`, as the dedup's runs), so a
row is copied O(log state) times while held and there are few runs. The new
rows find their matches in each run by binary search
(:func:`kernels.join.run_ranges`); a run wholly above the cut is not read,
one wholly below it goes, and the one or two across it have their times
scanned, and are rewritten once more than half gone. Each run is a part of the
state store written once; an outer side's rows of a saved run that match
later go to small *hit* parts (their first match only), so a batch writes
its new rows, its merges and its hits — not the state. The window join
keeps its runs in arrival order (only its closed rows are ever matched) and
finds them with the same cut — or, where it emits pairs as they match
(profile knob ``window_join="match"``, Spark's), sorted and probed as the
interval join's, by (keys, window start).

The inputs' schema is one :class:`pyarrow.Schema` with one struct field per
named input (:func:`inputs_schema`); the output has the left input's columns
and then the right's (names must differ; the other side's columns are
nullable in an outer join). The output's event time is the left time
column — or the right one: the watermark, ``W - max(upper, -lower) - 1
ms`` (Spark's join output watermark, the smaller of the two sides' state
watermarks), covers both: no later output row has a left or a right time at
or below it.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kernels import sort_rows
from kernels.join import expand, interval_pairs, known_keys, run_ranges
from kernels.order import merge_order
from kernels.xp import mask_index

from . import staging
from .backend import Backend, get_backend
from .drained import Drained
from .errors import ConfigError, SchemaError, StateError, WatermarkError
from .frame import Frame
from .inputs import input_schemas, inputs_schema  # noqa: F401  (inputs_schema: the join's input form)
from .keys import KeyCodec
from .operator import Operator, OperatorSpec, StageContext, json_options, snapshot_meta
from .profiles import Profile, resolve
from .runs import Tiers
from .schema import same_schema, schema_from_text, schema_to_text
from .timecol import TimeDomain, event_time_domain, parse_interval

HOWS = ("inner", "left", "right", "full")
#: the comparisons a join's residual condition (``where``) may make between a left and a right column
WHERE_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "=": operator.eq,
             "!=": operator.ne}
#: each comparison with its sides swapped (``a < b`` is ``b > a``)
FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
#: a missing time bound, in the time columns' unit: far enough that no row is ever cut, near enough that
#: ``time ± UNBOUNDED_RAW`` fits in 64 bits for nanosecond timestamps too
UNBOUNDED_RAW = 2 ** 62
MATCHED = "__matched"
TIME = "__time"  # a state row's join time (a window join's: its window start)


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
    takes_inputs: ClassVar[bool] = True
    #: columns the output has before the left input's
    _prefix: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        if self.how not in HOWS:
            raise ConfigError(f"join how must be one of {HOWS}, got {self.how!r}")
        if self.left == self.right:
            raise ConfigError(f"a join needs two different inputs, got {self.left!r} twice")
        on = tuple(tuple(p) for p in self.on)
        if not all(len(p) == 2 and all(isinstance(c, str) for c in p) for p in on):
            raise ConfigError(f"join 'on' must be pairs [left column, right column], e.g. [['a_id', 'b_aid']], "
                              f"got {self.on!r}")
        object.__setattr__(self, "on", on)

    @classmethod
    def from_json(cls, options: dict, ctx: StageContext) -> "_JoinSpec":
        """``{"join": {"left": name, "right": name, "on": [[left col, right
        col], ...], "between": [t1, t2, lower, upper] | "window": {"tumble":
        size} | {"hop": size, "slide": s}, "how": ..., "where": [...],
        "output_behind": duration}}``: an interval join
        (:meth:`IntervalJoinSpec.between`) or a window join on the inputs'
        watermark columns — or, with neither, a join on equal event times:
        the two watermark columns as a pair in ``on`` (Spark's ``a.ts =
        b.ts``; ``time_key``)."""
        o = json_options("join", options, {"left", "right", "on", "between", "how", "window", "where",
                                            "output_behind"},
                         ("left", "right", "on"),
                         '{"left": "auctions", "right": "bids", "on": [["a_id", "b_aid"]], "between": ["b_ts", '
                         '"a_ts", "0 seconds", "20 seconds"], "how": "inner"}')
        left, right, how = o["left"], o["right"], o.get("how", "inner")
        lt, rt = ctx.time_column(left), ctx.time_column(right)
        between, window = o.get("between"), o.get("window")
        on = [list(p) if isinstance(p, (list, tuple)) else p for p in o["on"]] \
            if isinstance(o["on"], (list, tuple)) else o["on"]
        if between is None and window is None and isinstance(on, list) and [lt, rt] in on:
            keys = [p for p in on if p != [lt, rt]]
            ts = ctx.inputs[left].field(lt).type if lt in ctx.inputs[left].names else None
            zero = timedelta(0) if ts is not None and pa.types.is_timestamp(ts) else 0
            return IntervalJoinSpec.between(left, right, keys, [rt, lt, zero, zero], ctx.inputs, how,
                                            o.get("where", ())).with_time_key()
        if (between is None) == (window is None):
            raise ConfigError("a join needs either between=[t1, t2, lower, upper] (an interval join), "
                              "window={'tumble': size} / {'hop': size, 'slide': slide} (a window join), or the "
                              "inputs' watermark columns as a pair in 'on' (a join on equal event times)")
        if between is not None:
            return IntervalJoinSpec.between(left, right, o["on"], between, ctx.inputs, how, o.get("where", ()),
                                            o.get("output_behind"))
        if o.get("output_behind") is not None:
            raise ConfigError("join 'output_behind' is an interval join's ('between'): a window join's output "
                              "watermark is Spark's for its windows")
        if o.get("where"):
            raise ConfigError("a window join takes no 'where': its pairs are the rows of one window with equal keys")
        w = dict(window) if isinstance(window, Mapping) else {}
        if set(w) == {"tumble"}:
            size = slide = w["tumble"]
        elif set(w) == {"hop", "slide"}:
            size, slide = w["hop"], w["slide"]
        else:
            raise ConfigError(f"join window must be {{'tumble': size}} or {{'hop': size, 'slide': slide}}, "
                              f"got {window!r}")
        return WindowJoinSpec(left, right, tuple(tuple(p) for p in o["on"]), lt, rt, size, slide, how)

    def check(self, ctx: StageContext) -> None:
        for name, col in ((self.left, self.left_time), (self.right, self.right_time)):
            want = ctx.time_column(name)
            if col != want:
                what = "stage {!r}'s event-time" if name in ctx.times else "input {!r}'s watermark"
                raise ConfigError(f"join time column {name}.{col} is not {what.format(name)} column "
                                  f"({want!r}): the join's state is cleaned by the watermark on it")

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

    #: None: no bound on that side (the other side's state is then kept: Spark's join with a one-sided
    #: range, or with none, Nexmark q3 and q4 as written)
    lower: Any
    upper: Any
    how: str = "inner"
    #: the event times are a join key (Spark's ``a.ts = b.ts`` among the equal
    #: keys; bounds 0 and 0): a row leaves the state once its time is at or
    #: below the watermark, without the range's 1 ms margin (Spark's
    #: key-based state watermark instead of its range-based one; under a
    #: profile whose rows at the watermark are on time, below it)
    time_key: bool = False
    #: the rest of the join condition, Spark's post-join filter: ``(left column, op, right column)``
    #: comparisons (:data:`WHERE_OPS`) every emitted pair satisfies — an outer side's row whose pairs all
    #: fail them goes out with nulls — and that clean no state (``b.ts <= a.expires``, Nexmark q4)
    where: tuple[tuple[str, str, str], ...] = ()
    #: how far the output's watermark trails the input's, where Spark's join output watermark is not the least
    #: of gpuwm's state watermarks: a bound by an aggregation's window bounds (Nexmark q7's ``ts < wend``),
    #: which carry no watermark in Spark, so that neither side has a state watermark there and the output's
    #: is the input's (Spark's ``getStateWatermark``, which translate asks, for every join of an aggregation's
    #: rows another operator reads); None: the least of the sides' state watermarks
    output_behind: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.output_behind is not None:
            behind = parse_interval(self.output_behind)
            if behind < type(behind)(0):
                raise ConfigError(f"join output_behind must be >= 0, got {self.output_behind!r}")
            object.__setattr__(self, "output_behind", behind)
        if self.time_key and (parse_interval(self.lower), parse_interval(self.upper)) not in (
                (0, 0), (timedelta(0), timedelta(0))):
            raise ConfigError("a join on equal event times (time_key) has bounds 0 and 0, got "
                              f"{self.lower!r} and {self.upper!r}")
        lo = None if self.lower is None else _signed(self.lower, "lower")
        hi = None if self.upper is None else _signed(self.upper, "upper")
        if lo is not None and hi is not None:
            if type(lo) is not type(hi):
                raise ConfigError(f"join time bounds must both be durations or both ints, got {lo!r} and {hi!r}")
            if hi < lo:
                raise ConfigError(f"join time bounds: lower {self.lower!r} is above upper {self.upper!r}; no row "
                                  "could ever match")
        if (lo is None or hi is None) and self.how != "inner":
            raise ConfigError(f"a {self.how} outer join needs both time bounds: an outer side's row goes out with "
                              "nulls once no row of the other side can match it, which a missing bound never says "
                              "(Spark refuses it too)")
        where = tuple(tuple(w) if isinstance(w, (list, tuple)) else (w,) for w in self.where)
        bad = [w for w in where if len(w) != 3 or w[1] not in WHERE_OPS or not all(isinstance(c, str) for c in w)]
        if bad:
            raise ConfigError(f"join 'where' must be [left column, op, right column] comparisons with op one of "
                              f"{list(WHERE_OPS)}, got {bad[0]!r}")
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)
        object.__setattr__(self, "where", where)

    @classmethod
    def between(cls, left: str, right: str, on: Sequence[Sequence[str]], between: Sequence[Any],
                schemas: Mapping[str, pa.Schema], how: str = "inner",
                where: Sequence[Sequence[str]] = (), output_behind: Any = None) -> "IntervalJoinSpec":
        """From the JSON form ``between: [t1, t2, lower, upper]`` (``t1 BETWEEN
        t2 + lower AND t2 + upper``; a bound null: none on that side), with
        ``t1`` a column of either input; ``where``: ``[column, op, column]``
        comparisons, one column of each input, in either order;
        ``output_behind``: :attr:`output_behind`."""
        if not (isinstance(between, (list, tuple)) and len(between) == 4):
            raise ConfigError(f"join 'between' must be [time, other time, lower, upper], e.g. "
                              f"['b_ts', 'a_ts', '0 seconds', '20 seconds'], got {between!r}")
        t1, t2, lo, hi = between
        ls, rs = schemas[left], schemas[right]
        cond = []  # each comparison with its left input's column first (a malformed one as it is: refused below)
        for w in where:
            if isinstance(w, (list, tuple)) and len(w) == 3 and w[1] in FLIP and w[0] in rs.names \
                    and w[2] in ls.names and not (w[0] in ls.names and w[2] in rs.names):
                w = (w[2], FLIP[w[1]], w[0])
            cond.append(w)
        if t1 in rs.names and t2 in ls.names:
            return cls(left, right, tuple(on), t2, t1, lo, hi, how, where=tuple(cond), output_behind=output_behind)
        if t1 in ls.names and t2 in rs.names:  # t1 - hi <= t2 <= t1 - lo: right's time around left's
            def neg(v):
                return None if v is None else -parse_interval(v)
            return cls(left, right, tuple(on), t1, t2, neg(hi), neg(lo), how, where=tuple(cond),
                       output_behind=output_behind)
        raise SchemaError(f"join 'between' needs one time column of {left!r} (columns {ls.names}) and one of "
                          f"{right!r} (columns {rs.names}), got {t1!r} and {t2!r}")

    def with_time_key(self) -> "IntervalJoinSpec":
        """The same join on equal event times (bounds 0 and 0)."""
        from dataclasses import replace

        return replace(self, time_key=True)

    def build(self, profile: Any = None, backend: str | None = None) -> "IntervalJoin":
        return IntervalJoin(self, profile=profile or "risingwave", backend=backend)

    def describe(self) -> dict:
        """The dataclass's fields; ``time_key``, ``where`` and
        ``output_behind`` only when set, so a checkpoint of an interval join
        from before them still matches."""
        d = super().describe()
        for k in ("time_key", "where"):
            if not d[k]:
                del d[k]
        if d["output_behind"] is None:  # (0 is one: the output watermark is the input's)
            del d["output_behind"]
        return d

    def event_time(self, upstream: str) -> str:
        return self.left_time

    def other_times(self, upstream: tuple[str, ...] = ()) -> tuple[str, ...]:
        return (self.right_time,)

    def _check_times(self, dom: TimeDomain) -> None:
        for v, what in ((self.lower, "lower"), (self.upper, "upper")):
            if v is not None:
                dom.duration(v, f"join bound {what}", signed=True)

    def _check(self, schema: pa.Schema) -> tuple[pa.Schema, pa.Schema, pa.Schema, TimeDomain]:
        ls, rs, out, dom = super()._check(schema)
        for a, op, b in self.where:
            if a not in ls.names or b not in rs.names:
                raise SchemaError(f"join 'where' [{a!r}, {op!r}, {b!r}] needs a column of {self.left!r} (columns "
                                  f"{ls.names}) and one of {self.right!r} (columns {rs.names})")
            at, bt = ls.field(a).type, rs.field(b).type
            if at != bt or not (pa.types.is_integer(at) or pa.types.is_floating(at) or pa.types.is_temporal(at)):
                raise SchemaError(f"join 'where' compares {self.left}.{a} ({at}) with {self.right}.{b} ({bt}): gpuwm "
                                  "compares numbers and times of one type; cast one side first")
        return ls, rs, out, dom


@dataclass(frozen=True)
class WindowJoinSpec(_JoinSpec):
    """``left ⋈ right`` on ``on`` within the same tumbling (``slide ==
    size``) or hopping window of their time columns (Flink's window join):
    each window's pairs go out when the watermark closes it — or, under a
    profile whose ``window_join`` is ``match`` (Spark's join with the window
    among its keys), as they match.

    >>> WindowJoinSpec("p", "a", (("id", "seller"),), "pt", "at", "10 seconds", "10 seconds").slide
    datetime.timedelta(seconds=10)
    """

    size: Any
    slide: Any
    how: str = "inner"

    def filter_lateness(self, profile: Any) -> Any:
        """Spark drops a (row, window) pair once the window closed, so rows up to a window behind still count."""
        return self.size if profile.window_lateness == "window" else None

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

    def keep(self, mask: Any, count: int, xp: Any) -> "_Side":
        """The rows where ``mask`` is True, ``count`` of them (known: no read)."""
        return self.take(mask_index(xp, mask, count))

    def take(self, idx: Any) -> "_Side":
        return _Side(self.frame.take(idx), [c[idx] for c in self.codes], self.ts[idx], self.matched[idx])


class _Run(_Side):
    """A side's rows in state as one run: the interval join's sorted by key
    codes, then time (the window join's in arrival order: it is searched
    only by time), ``lo`` and ``hi`` their least and greatest time, and
    ``cut`` the last time at or below which rows left the state (None:
    none did), ``live`` the rows above it. ``saved``: the run's part holds
    it (its rows, and its matched flags as of then; later first matches are
    in hit parts)."""

    __slots__ = ("id", "cut", "live", "lo", "hi", "saved")

    def __init__(self, side: _Side, rid: int, cut: int | None, saved: bool, lo: int, hi: int, live: int):
        super().__init__(side.frame, side.codes, side.ts, side.matched)
        self.id, self.cut, self.saved = rid, cut, saved
        self.lo, self.hi, self.live = lo, hi, live  # lo, hi: bounds on the times (exact when read)

    def held(self, xp: Any) -> _Side:
        """The rows still held, in run order."""
        return self if self.cut is None or self.lo > self.cut else self.keep(self.ts > self.cut, self.live, xp)


class _Hits:
    """Rows of saved runs that matched after their part was written: a
    part ``hits.<seq>`` of (run, row) pairs, kept while one of its runs is."""

    __slots__ = ("seq", "table", "rids", "saved")

    def __init__(self, seq: int, table: pa.Table, saved: bool = False):
        self.seq, self.table, self.saved = seq, table, saved
        self.rids = set(pc.unique(table.column("run")).to_pylist())


class _Join(Operator, Drained, Tiers):
    """What both joins share: two named inputs bound and encoded, rows
    pushed per input, each input's rows in state as sorted runs (size tiers
    of :mod:`gpuwm.runs`; a part each, written once, so a batch writes its
    new rows and what merges rewrote, not the state), the joined rows'
    columns."""

    #: runs are sorted by (key codes, time) (the interval join's: probed by binary search)
    _sorted_runs = True

    late_reason = "join late"

    def __init__(self, spec: Any, *, profile: str | Profile = "risingwave", backend: str | None = None):
        self.spec = spec
        self.profile = resolve(profile)
        self._backend: Backend = get_backend(backend)
        self._schema: pa.Schema | None = None
        self._domain: TimeDomain | None = None
        self._runs: dict[str, list[_Run]] = {spec.left: [], spec.right: []}
        self._new: dict[str, list[_Side]] = {spec.left: [], spec.right: []}
        self._hits: list[_Hits] = []
        self._fresh_hits: list[tuple[int, Any]] = []
        self._late_by: dict[str, list[pa.Table]] | None = None
        self._next_run = self._next_hit = 0
        self._where: list = []  # the residual condition (an interval join's ``where``)
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

    def _run(self, side: _Side, sorted_: bool = False, rid: int | None = None, cut: int | None = None,
             saved: bool = False, bounds: tuple[int, int, int] | None = None) -> _Run:
        """``side``'s rows as a run, put in probe order first unless
        ``sorted_`` (one sort, of these rows only). ``bounds``: (lo, hi,
        live) where the caller knows them; else read, in one copy."""
        b = self._backend
        xp = b.xp
        if self._sorted_runs and not sorted_ and side.rows > 1:
            side = side.take(sort_rows(xp, [*side.codes, side.ts])[0])
        if rid is None:
            rid, self._next_run = self._next_run, self._next_run + 1
        n = side.rows
        if bounds is None and not n:
            bounds = (0, 0, 0)
        if bounds is None:
            held = [] if cut is None else [xp.count_nonzero(side.ts > cut)]
            bounds = (*staging.read_ints(b, [side.ts.min(), side.ts.max(), *held]), n)[:3]
        lo, hi, live = bounds
        return _Run(side, rid, cut, saved, lo, hi, live if cut is not None and lo <= cut else n)

    def _merge(self, a: _Run, b: _Run) -> _Run:
        """Two runs' held rows as one run (sorted runs: merged in order by
        binary searches, not sorted again)."""
        xp = self._backend.xp
        lo = min(r.lo if r.cut is None else max(r.lo, r.cut + 1) for r in (a, b))  # what is held is above the cut
        hi, live = max(a.hi, b.hi), a.live + b.live
        a, b = a.held(xp), b.held(xp)
        both = _Side.concat([a, b], xp)
        if self._sorted_runs and a.rows and b.rows:
            both = both.take(merge_order(xp, [*a.codes, a.ts], [*b.codes, b.ts]))
        return self._run(both, sorted_=True, bounds=(lo, hi, live))

    def _cut(self, runs: list[_Run], t: int) -> tuple[list[_Run], list[tuple[_Run, Any]]]:
        """Rows with time ``<= t`` leave the state: the runs still holding
        rows, and the rows that left now as ``(run, row positions)``. A run
        wholly above ``t`` is not read, one wholly at or below it goes, one
        across it is scanned (its times only) and rewritten with the rows it
        holds once more than half of it left."""
        b = self._backend
        xp = b.xp
        scan = [r for r in runs if not (r.lo > t or (r.cut is not None and r.cut >= t))]
        outs = [r.ts <= t for r in scan]
        fresh = [o if r.cut is None else o & (r.ts > r.cut) for r, o in zip(scan, outs)]
        # what leaves and what stays, every scanned run's counts in one copy
        counts = staging.read_ints(b, [xp.count_nonzero(m) for pair in zip(fresh, outs) for m in pair])
        left = {id(r): (f, nf, no) for r, f, nf, no in zip(scan, fresh, counts[0::2], counts[1::2])}
        kept, gone = [], []
        for run in runs:
            if id(run) not in left:
                kept.append(run)
                continue
            f, nf, nout = left[id(run)]
            gone.append((run, mask_index(xp, f, nf)))
            if run.hi <= t:
                continue
            run.cut = t
            run.live = run.rows - nout
            if 2 * run.live < run.rows:
                run = self._run(run.held(xp), sorted_=True, bounds=(max(run.lo, t + 1), run.hi, run.live))
            kept.append(run)
        return kept, gone

    def _matched(self, name: str, run: _Side, rows: Any) -> None:
        """Flag ``rows`` of ``run`` matched (an outer side's: the others'
        flags are never read); a saved run's new flags go to a hit part."""
        if name not in self._outer or not rows.shape[0]:
            return
        if isinstance(run, _Run) and run.saved:
            rows = rows[~run.matched[rows]]  # a hit part holds each row's first match only
            if rows.shape[0]:
                self._fresh_hits.append((run.id, rows))
        run.matched[rows] = True

    def _end_drain(self) -> None:
        """Merge runs in size tiers; keep this drain's hits as a part, and
        the hit parts of saved runs still held, in size tiers too."""
        for n in self._runs:
            self._runs[n] = self._tiered(self._runs[n], lambda r: r.live, self._merge)
        saved = {r.id for runs in self._runs.values() for r in runs if r.saved}
        to_np = self._backend.to_numpy
        fresh = [(rid, to_np(rows)) for rid, rows in self._fresh_hits if rid in saved]
        self._fresh_hits = []
        if fresh:
            self._hits.append(self._hit_part(pa.table({
                "run": np.concatenate([np.full(len(r), rid, dtype=np.int64) for rid, r in fresh]),
                "row": np.concatenate([r.astype(np.int64) for _, r in fresh])})))
        held = pa.array(sorted(saved), pa.int64())

        def merge(a: _Hits, b: _Hits) -> _Hits:
            t = pa.concat_tables([a.table, b.table])
            return self._hit_part(t.filter(pc.is_in(t.column("run"), held)))

        self._hits = self._tiered([h for h in self._hits if h.rids & saved], lambda h: h.table.num_rows, merge)

    def _hit_part(self, table: pa.Table) -> _Hits:
        seq, self._next_hit = self._next_hit, self._next_hit + 1
        return _Hits(seq, table)

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
                nvalid = int(xp.count_nonzero(valid))
                self.null_rows += int(valid.shape[0]) - nvalid
                idx = mask_index(xp, valid, nvalid)
                frame, ts = frame.take(idx), ts[idx]
            side = self._accept(name, frame, ts) if frame.num_rows else None
            if side is not None and name not in self._outer:  # a null key matches nothing: only an outer side keeps it
                known = known_keys(xp, side.codes)
                nknown = side.rows if known is None else int(xp.count_nonzero(known))
                if nknown < side.rows:
                    side = side.keep(known, nknown, xp)
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

    def _emit(self, out: list[tuple]) -> pa.Table:
        """End a drain: compact the key dictionaries, build its rows (from
        :meth:`_pairs`' parts, in order: each input's joined rows come to the
        host in one copy for the whole drain, however many runs matched),
        count and return them."""
        self._compact_keys()
        if not out:
            return self._out.empty_table()
        host = {}  # each input's parts as host tables, in order
        for i, name in enumerate((self.spec.left, self.spec.right)):
            parts = [p[i] for p in out if p[i] is not None]
            if self._backend.is_gpu and len(parts) > 1:  # one copy for all (the CPU's are views: no concat)
                whole, at = Frame.concat(parts).to_arrow(), 0
                host[name] = []
                for f in parts:
                    host[name].append(whole.slice(at, f.num_rows))
                    at += f.num_rows
            else:
                host[name] = [f.to_arrow() for f in parts]
            host[name].reverse()  # popped from the end, in order
        tables = []
        for left, right, prefix in out:
            n = (left if left is not None else right).num_rows
            cols = list(prefix)
            for part, name in ((left, self.spec.left), (right, self.spec.right)):
                if part is None:
                    cols += [pa.nulls(n, f.type) for f in self._in[name]]
                else:
                    t = host[name].pop()
                    cols += [t.column(i) for i in range(t.num_columns)]
            tables.append(pa.Table.from_arrays(cols, schema=self._out))
        res = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        self.rows_out += res.num_rows
        return res

    def keep_late(self, on: bool = True) -> "_Join":
        """Keep the rows :meth:`push` drops as late, per input, until :meth:`take_late`."""
        self._late_by = {self.spec.left: [], self.spec.right: []} if on else None
        return self

    def take_late(self) -> dict[str | None, pa.Table]:
        """The rows dropped as late since the last call, ``{input: rows}`` in
        each input's schema (a window join's row once per closed window it
        missed: as many as ``late_rows`` counted); ``{}`` when none (see
        :meth:`gpuwm.operator.Operator.take_late`)."""
        got = self._late_by
        if got is None:
            return {}
        self._late_by = {n: [] for n in got}
        return {n: t[0] if len(t) == 1 else pa.concat_tables(t) for n, t in got.items() if t}

    def _set_aside_input(self, name: str, frame: Frame, rows: Any) -> None:
        """Keep input ``name``'s rows ``rows`` of ``frame`` as late, when asked to."""
        if self._late_by is not None:
            self._set_aside(frame, rows, into=self._late_by[name])

    def _match_new(self, lo: int, hi: int) -> list[tuple]:
        """The rows pushed since the last drain matched against the other
        side's state and against each other (``right.time`` between
        ``left.time + lo`` and ``left.time + hi``, equal keys), each pair
        once, then added to their side's state as a run: the drain's parts
        of output so far."""
        xp = self._backend.xp
        L, R = self.spec.left, self.spec.right
        new = {n: self._run(_Side.concat(self._new[n], xp)) if self._new[n] else None for n in (L, R)}
        self._new = {L: [], R: []}
        nl, nr = new[L], new[R]
        out: list[tuple] = []
        # new left rows x (right runs + the new right run); left runs x new right rows:
        # each a binary search of the batch's rows in a run
        # (the ranges of every (batch, run) probe first; their sizes read in one copy)
        probes = []  # (left side, right side, the probe is the left one, ranges)
        if nl is not None:
            for run in self._runs[R] + ([nr] if nr is not None else []):
                probes.append((nl, run, True, run_ranges(xp, run.codes, run.ts, nl.codes, nl.ts + lo, nl.ts + hi)))
        if nr is not None:
            for run in self._runs[L]:
                probes.append((run, nr, False, run_ranges(xp, run.codes, run.ts, nr.codes, nr.ts - hi, nr.ts - lo)))
        totals = staging.read_ints(self._backend, [p[3].count.sum() for p in probes])
        for (lside, rside, left_probes, ranges), total in zip(probes, totals):
            pi, bi = expand(xp, ranges, total)
            self._pair_up(out, lside, pi if left_probes else bi, rside, bi if left_probes else pi)
        for n in (L, R):
            if new[n] is not None:
                self._runs[n].append(new[n])
        return out

    def _pair_up(self, out: list[tuple], lrun: _Side, li: Any, rrun: _Side, ri: Any) -> None:
        """Rows ``li`` of ``lrun`` joined with rows ``ri`` of ``rrun``: those
        that pass the residual condition emitted and flagged matched."""
        if self._where and li.shape[0]:
            li, ri = self._residual(lrun, li, rrun, ri)
        if not li.shape[0]:
            return
        out.append(self._pairs(lrun.frame.take(li), rrun.frame.take(ri), self._prefix_of(lrun.ts[li])))
        self.matches += int(li.shape[0])
        self._matched(self.spec.left, lrun, li)
        self._matched(self.spec.right, rrun, ri)

    def _residual(self, lrun: _Side, li: Any, rrun: _Side, ri: Any) -> tuple[Any, Any]:
        """The pairs ``(li, ri)`` whose columns satisfy every ``where``
        comparison (a null on either side satisfies none, as SQL's filter)."""
        xp = self._backend.xp
        keep = None
        for a, op, b in self._where:
            (av, avalid), (bv, bvalid) = lrun.frame.values(a), rrun.frame.values(b)
            m = op(av[li], bv[ri])
            for valid, at in ((avalid, li), (bvalid, ri)):
                if valid is not None:
                    m &= valid[at]
            keep = m if keep is None else keep & m
        n = int(xp.count_nonzero(keep))
        if n == keep.shape[0]:
            return li, ri
        idx = mask_index(xp, keep, n)
        return li[idx], ri[idx]

    def _evict(self, out: list[tuple], cuts: dict[str, int]) -> None:
        """Each side's state rows with time ``<= cuts[side]`` leave; an outer
        side's that never matched go to ``out`` with nulls for the other side."""
        for n, t in cuts.items():
            self._runs[n], gone = self._cut(self._runs[n], t)
            if n not in self._outer:
                continue
            alone = staging.mask_indexes(self._backend, [~run.matched[rows] for run, rows in gone])
            for (run, rows), ix in zip(gone, alone):
                if ix.shape[0]:
                    f, prefix = run.frame.take(rows[ix]), self._prefix_of(run.ts[rows[ix]])
                    out.append(self._pairs(f, None, prefix) if n == self.spec.left else self._pairs(None, f, prefix))

    def _prefix_of(self, ts: Any) -> Sequence[pa.Array]:
        """The columns an output row has before the inputs' (from its state time)."""
        return ()

    def _pairs(self, left: Frame | None, right: Frame | None, prefix: Sequence[pa.Array] = ()) -> tuple:
        """Joined rows, built by :meth:`_emit`: ``prefix`` columns, left
        columns, then right columns (nulls for a missing side)."""
        return left, right, list(prefix)

    def _compact_keys(self) -> None:
        """Forget dictionary keys no run references (monotone: runs stay sorted)."""
        b = self._backend
        runs = [r for rs in self._runs.values() for r in rs]
        for i, c in enumerate(self._codecs):
            new = c.compact_codes(b.xp, [r.codes[i] for r in runs], self.state_rows, b.to_numpy)
            for r, codes in zip(runs, new or ()):
                r.codes[i] = codes

    # -- state -----------------------------------------------------------------
    @property
    def state_rows(self) -> int:
        """Rows held, both sides."""
        return sum(self.side_rows(n) for n in self._runs)

    @property
    def state_bytes(self) -> int:
        return sum(r.frame.nbytes() + r.matched.nbytes + r.ts.nbytes + sum(c.nbytes for c in r.codes)
                   for runs in self._runs.values() for r in runs)

    def side_rows(self, name: str) -> int:
        """Rows of input ``name`` held."""
        return sum(r.live for r in self._runs.get(name, ()))

    def counters(self) -> dict[str, int]:
        return {**super().counters(), "matches": self.matches,
                **{f"state_rows_{n}": self.side_rows(n) for n in (self.spec.left, self.spec.right)}}

    def snapshot(self, rows: bool = True) -> dict[str, pa.Table]:
        """``{"state": counters and the runs of each input, and with ``rows``
        its parts: "run.<id>" (a run's rows) and "hits.<seq>" (rows of saved
        runs that matched since)}``. Key dictionaries are rebuilt from the
        rows on restore."""
        if any(self._new.values()):
            raise StateError(f"{type(self).__name__}.snapshot between push and drain: drain the batch first")
        meta = {**self._drained_meta(), "schema": schema_to_text(self._schema), "matches": self.matches,
                "next_run": self._next_run, "next_hit": self._next_hit, "sorted": self._sorted_runs,
                "runs": {n: [[r.id, r.cut] for r in runs] for n, runs in self._runs.items()},
                "hits": [h.seq for h in self._hits]}
        out = {"state": pa.table({"x": pa.array([], pa.int8())}).replace_schema_metadata(
            {"gpuwm.join": json.dumps(meta)})}
        if rows:
            out.update({p: self.snapshot_part(p) for p in self.state_parts()})
        return out

    def state_parts(self) -> dict[str, bool]:
        """A part per run and per hit part, written once: ``{name: must_write}``."""
        parts = {f"run.{r.id}": not r.saved for runs in self._runs.values() for r in runs}
        parts.update({f"hits.{h.seq}": not h.saved for h in self._hits})
        return parts

    def snapshot_part(self, name: str) -> pa.Table:
        kind, _, num = name.partition(".")
        if kind == "hits":
            for h in self._hits:
                if str(h.seq) == num:
                    return h.table
        for runs in self._runs.values():
            for r in runs:
                if kind == "run" and str(r.id) == num:
                    t = r.frame.to_arrow()
                    t = t.append_column(MATCHED, pa.array(self._backend.to_numpy(r.matched), pa.bool_()))
                    return t.append_column(TIME, pa.array(self._backend.to_numpy(r.ts), pa.int64()))
        raise StateError(f"the join state holds no part {name!r}")

    def mark_saved(self, written: Sequence[str] = ()) -> None:
        for runs in self._runs.values():
            for r in runs:
                r.saved = True
        for h in self._hits:
            h.saved = True

    def restore(self, snapshot: dict[str, pa.Table], parts: dict[str, pa.Table] | None = None) -> "_Join":
        """Continue exactly where the snapshotted operator stopped."""
        if self.rows_in or self.state_rows:
            raise WatermarkError(f"restore() must be called on a fresh {type(self).__name__}")
        meta = snapshot_meta(snapshot, "join", f"a {type(self).__name__}")
        schema = schema_from_text(meta["schema"])
        parts = snapshot if parts is None else parts
        self._load_drained_meta(meta)
        self.matches = meta["matches"]
        if schema is None:
            return self
        self._schema = None
        self.bind(schema)
        b = self._backend
        # a snapshot of gpuwm 0.x before runs: one part "side.<input>" per input, rows unsorted
        listed = meta.get("runs") or {n: [[f"side.{n}", None]] for n in self._runs}
        self._next_run, self._next_hit = meta.get("next_run", 0), meta.get("next_hit", 0)
        # runs saved in arrival order (a window join at close, or before its on-match mode) that are probed now
        unsorted = self._sorted_runs and not meta.get("sorted", type(self)._sorted_runs)
        resort = "runs" not in meta or unsorted or any(not c.ordered for c in self._codecs)
        for n in self._runs:
            for rid, cut in listed[n]:
                name = rid if isinstance(rid, str) else f"run.{rid}"
                t = parts.get(name)
                if t is None:
                    raise StateError(f"join state is missing its part {name!r}")
                matched = b.asarray(t.column(MATCHED).to_numpy(zero_copy_only=False).astype(bool))
                ts = b.asarray(t.column(TIME).to_numpy().astype("int64"))
                side = self._side(n, Frame.from_arrow(t.drop_columns([MATCHED, TIME]), b), matched, ts)
                self._runs[n].append(self._run(side, sorted_=True, rid=-1 if isinstance(rid, str) else rid,
                                               cut=cut, saved=True))
        by_id = {r.id: r for runs in self._runs.values() for r in runs}
        for seq in meta.get("hits", []):
            t = parts.get(f"hits.{seq}")
            if t is None:
                raise StateError(f"join state is missing its part 'hits.{seq}'")
            self._hits.append(_Hits(seq, t, saved=True))
        for h in self._hits:
            runs_col, rows_col = h.table.column("run").to_numpy(), h.table.column("row").to_numpy()
            for rid in h.rids & set(by_id):
                by_id[rid].matched[b.asarray(rows_col[runs_col == rid])] = True
        if resort:  # codes are given anew (dictionary keys) or the rows came unsorted: ordered again
            self._runs = {n: [self._run(r.held(b.xp)) for r in runs] for n, runs in self._runs.items()}
            self._hits = []
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
        lower, upper = self.spec.lower, self.spec.upper
        self._lo = -UNBOUNDED_RAW if lower is None else dom.duration(lower, "lower", signed=True)
        self._hi = UNBOUNDED_RAW if upper is None else dom.duration(upper, "upper", signed=True)
        # a time key (Spark's): a state row leaves at the watermark itself — under a profile whose rows at
        # the watermark are on time (not late_inclusive), one unit behind it, so that such a row finds its partner
        self._margin = (0 if self.profile.late_inclusive else 1) if self.spec.time_key else dom.one_ms()
        # each side's state watermark as W less how far it trails W: a left row stays while a right row
        # up to W + upper could still match it; a side no bound cleans (upper / lower None) keeps its rows
        self._trail = {n: b + self._margin for n, b, bound in ((self.spec.left, self._hi, upper),
                                                               (self.spec.right, -self._lo, lower))
                       if bound is not None}
        # the output's watermark, on either side's time: Spark's join output watermark, the least of the
        # sides' state watermarks and the input watermark (Spark's own where it derives them otherwise)
        self._behind = max([0, *self._trail.values()]) if self.spec.output_behind is None else \
            dom.duration(self.spec.output_behind, "output_behind")
        self._where = [(a, WHERE_OPS[op], b) for a, op, b in self.spec.where]

    def _accept(self, name: str, frame: Frame, ts: Any) -> "_Side | None":
        if self._drained is not None:  # at or behind the last drain: late
            xp = self._backend.xp
            fresh = ts > self._drained if self.profile.late_inclusive else ts >= self._drained
            nlate = int(frame.num_rows - xp.count_nonzero(fresh))
            if nlate:
                self.late_rows += nlate
                self._set_aside_input(name, frame, ~fresh)
                frame = frame.filter(fresh, frame.num_rows - nlate)
        return self._side(name, frame)

    # -- drain -----------------------------------------------------------------
    def drain(self, watermark: Any) -> pa.Table:
        """Join the rows pushed since the last drain, then delete (and, in an
        outer join, emit unmatched) state rows no future row can match at
        ``watermark`` (None: no watermark yet, nothing is deleted)."""
        w = self._drain_to(watermark)
        if self._schema is None:
            return pa.table({})
        out = self._match_new(self._lo, self._hi)
        if w is not None:
            self._evict(out, {n: w - trail for n, trail in self._trail.items()})
        self._end_drain()
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

    Under a profile whose ``window_join`` is ``match`` (Spark's
    stream-stream join with the window among its join keys), each pair goes
    out in the drain where its later row arrives, as the interval join's do
    — the window start a key, probed in runs sorted by (keys, window start)
    —, and only the rows of an outer side that never matched wait for the
    close.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from gpuwm.join import WindowJoinSpec, inputs_schema
    >>> p = pa.schema([("id", pa.int64()), ("pt", pa.int64())])
    >>> a = pa.schema([("seller", pa.int64()), ("at", pa.int64())])
    >>> spec = WindowJoinSpec("p", "a", [("id", "seller")], "pt", "at", 10, 10, how="left")
    >>> rows = {"p": pa.table({"id": [1, 2], "pt": [3, 4]}, schema=p),
    ...         "a": pa.table({"seller": [1, 2], "at": [8, 12]}, schema=a)}
    >>> j = spec.build("risingwave", "cpu").bind(inputs_schema({"p": p, "a": a}))
    >>> j.push(rows)
    >>> j.drain(9).num_rows                  # [0, 10) still open
    0
    >>> j.drain(10).to_pydict()              # closed: id 1 opened an auction in it, id 2 in the next one
    {'window_start': [0, 0], 'window_end': [10, 10], 'id': [1, 2], 'pt': [3, 4], 'seller': [1, None], 'at': [8, None]}
    >>> j = spec.build("spark", "cpu").bind(inputs_schema({"p": p, "a": a}))
    >>> j.push(rows)
    >>> j.drain(9).to_pydict()               # Spark's: the pair as it matches
    {'window_start': [0], 'window_end': [10], 'id': [1], 'pt': [3], 'seller': [1], 'at': [8]}
    >>> j.drain(10).to_pydict()              # and id 2, alone, when its window closes
    {'window_start': [0], 'window_end': [10], 'id': [2], 'pt': [4], 'seller': [None], 'at': [None]}
    """

    _sorted_runs = False  # at close: its runs are read by window start only (on match: probed, sorted)

    late_reason = "window closed"

    def _bind_times(self, dom: TimeDomain) -> None:
        self._size = dom.duration(self.spec.size, "window size", allow_zero=False)
        self._slide = dom.duration(self.spec.slide, "window slide", allow_zero=False)
        self._cm = 1 if self.profile.close_minus_one else 0
        self._behind = self._size  # windows still open start after W - size
        self._on_match = self.profile.window_join == "match"
        self._sorted_runs = self._on_match

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
                self._set_aside_input(name, frame, rows[~open_])
                rows, ws = rows[open_], ws[open_]
        if not rows.shape[0]:
            return None
        return self._side(name, frame.take(rows), ts=ws)

    def drain(self, watermark: Any) -> pa.Table:
        """Close the windows ``watermark`` closes: their pairs (and, outer,
        unmatched rows) go out and their rows leave the state. On match
        (profile knob ``window_join``): first the pairs the new rows make
        with the state and each other (the same window start, equal keys),
        and at close only an outer side's rows that never matched."""
        w = self._drain_to(watermark)
        if self._schema is None:
            return pa.table({})
        if self._on_match:
            out = self._match_new(0, 0)
            if w is not None:
                t = w - (self._size - self._cm)
                self._evict(out, {self.spec.left: t, self.spec.right: t})
            self._end_drain()
            return self._emit(out)
        xp = self._backend.xp
        L, R = self.spec.left, self.spec.right
        for n in (L, R):
            if self._new[n]:
                self._runs[n].append(self._run(_Side.concat(self._new[n], xp)))
            self._new[n] = []
        closed = {}
        if w is not None:  # a window starting at or before t is closed
            t = w - (self._size - self._cm)
            for n in (L, R):
                self._runs[n], gone = self._cut(self._runs[n], t)
                if gone:
                    closed[n] = _Side.concat([run.take(rows) for run, rows in gone], xp)
        self._end_drain()
        if not closed:
            return self._emit([])
        lc, rc = (closed[n] if n in closed else self._side(n, Frame.empty(self._in[n], self._backend))
                  for n in (L, R))
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

    def _prefix_of(self, ts: Any) -> Sequence[pa.Array]:
        return self._windows(ts)

    def _windows(self, ws: Any) -> list[pa.Array]:
        """``window_start`` and ``window_end`` columns for raw window starts."""
        from .frame import numpy_to_arrow

        t = self._domain.type
        start = self._backend.to_numpy(ws)
        return [numpy_to_arrow(t, start, None), numpy_to_arrow(t, start + self._size, None)]
