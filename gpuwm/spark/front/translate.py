"""Your Spark query, accelerated: a streaming DataFrame written with
PySpark's own API (or ``spark.sql`` over streaming temp views) run by
gpuwm's operators, unchanged.

:func:`accelerate` reads the query's analyzed plan (py4j:
``df._jdf.queryExecution().analyzed()``) and builds the
:class:`~gpuwm.spark.Pipeline` that computes the same thing: what lies
below ``withWatermark`` (the source, its projections and filters) stays
Spark's; the watermark and the stateful operator above it become gpuwm's;
the projections after it become the sink's output columns
(:mod:`gpuwm.project`), so the rows written have Spark's columns —
``window`` a ``struct<start, end>``, the query's names and types::

    q = (accelerate(df)                      # df: withWatermark + groupBy(window(...), k).agg(...)
         .writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", ck).trigger(availableNow=True).start())

What it translates today: one ``withWatermark`` over a source, then
``groupBy(window(ts, size[, slide]) | session_window(ts, gap), keys...)
.agg(count/sum/min/max/avg ...)``, ``dropDuplicatesWithinWatermark(keys)``
or ``dropDuplicates(keys)`` with the watermark's column among the keys —
or a chain of them as Spark chains stateful operators (a window over a
window's rows by ``window_time(window)``, an aggregation after a dedup;
filters and new columns between them a project stage: :func:`_project`) —,
or a stream-stream join of two watermarked sources on equal keys and a
time range between their event times, equal event times, or the same
window (``window(ts, ...)`` selected on each side; inner, left, right, full
outer) — a side may be a window aggregation's rows or a dedup's, the query then a graph
of stages (Nexmark q5, q7, q8: :func:`_join_graph`) —,
then projections (columns, struct fields, renames, casts) and filters
(``HAVING``: comparisons, ``AND``/``OR``/``NOT``, ``IS [NOT] NULL``),
evaluated as the sink writes (:mod:`gpuwm.project`). The window's
parameters are read from the plan Spark's analyzer made of them and
checked: the same call on the same input must give the same plan, or the
query is not translated. Anything else — another operator, an aggregate
gpuwm lacks, a filter on the event time between ``withWatermark`` and the
operator (Spark's watermark sees the rows it drops; other filters and new
columns there join the source, as Spark's optimizer places them:
:func:`_under_watermark`), an output mode other than append, a
sink option gpuwm's Parquet sink does not apply, output types that would
differ — falls back, by ``spark.gpuwm.fallback``: ``spark`` (default) runs
the query in Spark as written, with one warning line naming the operator
and the reason; ``error`` fails in one line. Never a different answer.
:func:`explain` prints the split.

gpuwm's Parquet sink writes ``<path>/batch_id=<N>/part-<P>.parquet``
(``spark.read.parquet(path)`` reads it, with a ``batch_id`` column), not
Spark's file-sink log.
"""

from __future__ import annotations

import contextvars
import re
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Mapping, Sequence

from ...errors import ConfigError, GpuwmError, SchemaError
from ...join import FLIP
from ..executor.plan import graph_text
from ..jvm.objects import scala_iter

FALLBACKS = ("spark", "error")
_AGGS = {"Count": "count", "Sum": "sum", "Min": "min", "Max": "max", "Average": "mean", "First": "first",
         "Last": "last"}
_SHOWN = {"count": "count", "sum": "sum", "min": "min", "max": "max", "mean": "avg", "first": "first",
          "last": "last"}
#: the column types gpuwm's first / last take (its accumulators are numbers)
_POSITIONAL_TYPES = ("byte", "short", "integer", "long", "float", "double", "timestamp", "timestamp_ntz", "date")
def _bounds_struct(start: str, end: str) -> dict:
    """Spark's window struct as gpuwm's rows make it: the struct of the columns of its bounds."""
    return {"struct": [["start", {"col": start}], ["end", {"col": end}]]}


_WINDOW_STRUCT = _bounds_struct("window_start", "window_end")
# nodes that pass their child's rows on unchanged (a temp view, a subquery's name)
_TRANSPARENT = ("SubqueryAlias", "View")


class Refused(Exception):
    """What gpuwm cannot run: ``operator`` (Spark's name for it) and why."""

    def __init__(self, operator: str, reason: str):
        super().__init__(f"{operator}: {reason}")
        self.operator, self.reason = operator, reason


def refusal(e: Exception) -> Refused:
    """``e`` met while translating or planning a query as the reason Spark
    runs it: a :class:`Refused` as it is, any other exception (not gpuwm's
    own errors, which the user is to see) named as gpuwm's bug, so that the
    query still runs in Spark instead of failing in neither."""
    if isinstance(e, Refused):
        return e
    if isinstance(e, GpuwmError):
        raise e
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return Refused("the query", f"gpuwm failed to translate it ({type(e).__name__}: {first}) — a gpuwm bug, "
                                "please report it with the query")


@dataclass
class Translation:
    """A query as gpuwm runs it: Spark's ``source`` DataFrame (below
    ``withWatermark``), the watermark, the stages in order, and the
    projection steps from the last stage's output to the query's columns."""

    source: Any
    column: str
    delay: timedelta
    stages: list[tuple] = field(default_factory=list)  # ("window", window, keys, aggs) | ("dedup", keys)
    output: list = field(default_factory=list)
    shown: list[str] = field(default_factory=list)  # the operators, for explain
    output_ids: dict[int, str] = field(default_factory=dict)  # Spark's expression id -> output column
    columns: dict[int, str] = field(default_factory=dict)  # Spark's id -> gpuwm's column, of the last stage's rows
    window_id: int | None = None  # the last stage's window column (a struct in Spark; start/end in gpuwm)
    time: tuple[str, str] | None = None  # the rows' event-time column: (Spark's name, gpuwm's); None: a window's
    #                                      rows without window_time(window)
    inputs: dict[str, Translation] | None = None  # a join's two inputs ("left", "right"), each a watermarked source
    other_times: list[tuple[str, str]] = field(default_factory=list)  # more event-time columns (a join's right time)
    shown_time: str | None = None  # the watermark's column as the query names it, where gpuwm's name is its own
    origin: str = ""  # Spark's withWatermark node (its node id; no expression ids) the rows come from: one input
    graph: list[tuple[str, tuple[str, ...]]] | None = None  # a graph of stages: each one's name and what it reads
    derived: tuple[str, ...] = ()  # a graph's join: its sides ("left", "right") that are a stage's rows
    window_of: tuple | None = None  # a window stage's rows: (the window they are in, its start column, its end's)
    joined: list[str] | None = None  # a graph's join: its rows' columns (its left feed's, then its right's)
    pushed: str = ""  # the filters Spark's optimizer puts below the watermark, written above it (explain)
    node: str | None = None  # a watermarked source's withWatermark (Spark's node id): reads of one share it
    computed: list[int] = field(default_factory=list)  # Spark's ids of output columns computed on each output row
    #                                                    (an aggregation's max(price) * 2): no column of gpuwm's yet
    lag: Callable[[], timedelta] | None = None  # a graph's join: its output watermark behind its input's, as
    #                                             Spark's (:func:`_output_lag`), set on its stage once an operator
    #                                             reads its rows (:func:`_consumed`)
    windows: dict[int, tuple[str, str, str]] = field(default_factory=dict)  # a join's rows: Spark's id of an
    #                                      aggregation side's window column -> gpuwm's start, end and window_time


def _kind(node) -> str:
    return str(node.getClass().getSimpleName())


def _id(e) -> int:
    return int(e.exprId().id())


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _no_ids(text: str) -> str:
    return re.sub(r"#\d+", "#", text)


def _interval(iv) -> timedelta:
    """A CalendarInterval (a watermark's delay, a gap) as a timedelta; months refused."""
    from py4j.java_gateway import get_field

    if get_field(iv, "months"):
        raise Refused("EventTimeWatermark", f"an interval with months ({iv.toString()}): its length varies")
    return timedelta(days=get_field(iv, "days"), microseconds=get_field(iv, "microseconds"))


def _of_rows(spark, plan):
    """A DataFrame over an (analyzed) logical plan of ``spark``'s."""
    from pyspark.sql import DataFrame

    jvm = spark._jvm
    try:
        jdf = jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, plan)
    except Exception:  # Spark 3.x
        jdf = jvm.org.apache.spark.sql.Dataset.ofRows(spark._jsparkSession, plan)
    return DataFrame(jdf, spark)


#: accelerate()'s ``state_ttl`` while a plan is translated (None: not given)
_STATE_TTL: contextvars.ContextVar = contextvars.ContextVar("gpuwm_state_ttl", default=None)
#: while a plan is translated: the conjuncts Spark's optimizer places below each withWatermark (by its event
#: time's expression id), :func:`_below_watermarks`
_PUSHED: contextvars.ContextVar = contextvars.ContextVar("gpuwm_pushed", default=None)
# the query's plan as Spark's optimizer makes it (:func:`_optimized`), while it is translated
_OPTIMIZED: contextvars.ContextVar = contextvars.ContextVar("gpuwm_optimized", default=None)


def _inlined(spark, plan):
    """The analyzed ``plan`` with the relations of SQL's ``WITH`` clauses
    (``WithCTE``) put where they are read, as Spark's optimizer puts them
    (its own ``InlineCTE``, every one inlined): a relation read twice
    becomes two copies with new ids, as a self-join's sides are."""
    if not plan.containsPattern(spark._jvm.org.apache.spark.sql.catalyst.trees.TreePattern.CTE()):
        return plan
    return spark._jvm.org.apache.spark.sql.catalyst.optimizer.InlineCTE(True, False).apply(plan)


def _optimized(spark, plan):
    """The analyzed ``plan`` as Spark's optimizer makes it, as a
    micro-batch's is (filters pushed down, columns no operator reads
    pruned)."""
    try:
        return spark._jsparkSession.sessionState().optimizer().execute(plan)
    except Exception as e:  # (py4j's error; the query's optimizer failing is Spark's to report)
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise Refused("the query", f"Spark's optimizer failed on its plan ({first}), so gpuwm cannot tell which "
                                   "filters its watermarks see") from None


def _below_watermarks(spark, plan, optimized: Any = None) -> dict[int, list]:
    """The filters Spark's optimizer puts below each ``withWatermark`` of
    the analyzed ``plan`` (by its event time's expression id): filters
    the query writes after a stateful operator (``HAVING k > 0`` on a
    grouping key, a filter on one side's columns after a join, a join
    condition's conjunct of one side) that ``PushDownPredicates`` moves down
    through aggregations, joins and the watermark, and ``isnotnull`` of a
    join's keys that ``InferFiltersFromConstraints`` adds. The watermark
    sees only the rows they keep, so gpuwm's source applies them too
    (:func:`_under_watermark`). Spark's own optimizer says where they go,
    run on the analyzed plan as a micro-batch's is. A ``withWatermark``
    the plan reads twice (one node, q7's bids joined and aggregated; gpuwm
    reads it once) gets the rows either read keeps (:func:`_either`), as
    Spark's watermark for that node sees them. (``optimized``: the plan
    optimized, where it is at hand.)"""
    optimized = _optimized(spark, plan) if optimized is None else optimized
    reads: dict[int, list[list]] = {}
    todo = [optimized]
    while todo:
        node = todo.pop()
        todo.extend(scala_iter(node.children()))
        if _kind(node) == "EventTimeWatermark":  # the filters down its source's nodes (to another watermark)
            chain = _unary_chain(node.child())
            chain = chain[:next((k for k, n in enumerate(chain) if _kind(n) == "EventTimeWatermark"), len(chain))]
            conds = [c for n in chain if _kind(n) == "Filter" for c in _conjuncts(n.condition()) if c.deterministic()]
            reads.setdefault(_id(node.eventTime()), []).append(conds)
    return {i: _either(spark, r) for i, r in reads.items()}


def _either(spark, reads: list[list]) -> list:
    """The conjuncts that keep the rows any of ``reads`` (one
    ``withWatermark`` node read several times, each read's conjuncts) keeps:
    Spark's watermark for that node is over them all (WatermarkTracker keeps
    one watermark per node id, raised by each of its reads'). What every
    read has, and the others' OR: ``k = 2`` on one read and ``k <> 1`` on
    another keep the rows ``k = 2 OR k <> 1``; a read with none keeps every
    row."""
    if len(reads) == 1:
        return reads[0]
    common = [c for c in reads[0] if all(_canonical(c) in {_canonical(x) for x in r} for r in reads[1:])]
    shared = {_canonical(c) for c in common}
    rest = [[c for c in r if _canonical(c) not in shared] for r in reads]
    if any(not r for r in rest):  # a read that keeps whatever the common conjuncts keep
        return common
    if len({tuple(sorted(_canonical(c) for c in r)) for r in rest}) == 1:  # the same conjuncts on every read
        return common + rest[0]
    exprs = spark._jvm.org.apache.spark.sql.catalyst.expressions

    def all_of(r):
        out = r[0]
        for c in r[1:]:
            out = exprs.And(out, c)
        return out

    anyone = all_of(rest[0])
    for r in rest[1:]:
        anyone = exprs.Or(anyone, all_of(r))
    return common + [anyone]


def _pushed_below(spark, at, top):
    """``withWatermark``'s child (``at`` the watermark, ``top`` the
    operator's input over it) with the filters Spark's optimizer places
    below ``at`` (:func:`_below_watermarks`) that the query writes above
    its operator, over it, each where the columns it reads are (above a
    select of the source that renames them, below it); the text of those
    filters. What the optimizer places there from ``top``'s own nodes (a
    filter before ``withWatermark``, or between it and the operator) is
    ``top``'s already, in gpuwm's source: not added twice (the optimizer
    run on ``top`` alone says which, in its own spelling: ``price < 950``
    and ``isnotnull(price)`` for ``price < CAST(950 AS BIGINT)``)."""
    jvm = spark._jvm
    logical = jvm.org.apache.spark.sql.catalyst.plans.logical
    base, i = at.child(), _id(at.eventTime())
    conds = (_PUSHED.get() or {}).get(i, [])
    if conds:
        own = {_canonical(c) for c in _below_watermarks(spark, top).get(i, [])}
        conds = [c for c in conds if _canonical(c) not in own]
    if not conds:
        return base, ""

    def place(node, c):  # ``node`` with ``c`` over the highest node (of its unary chain) that gives what c reads
        refs = {_id(a) for a in scala_iter(c.references().toSeq())}
        if refs <= {_id(a) for a in scala_iter(node.output())}:
            return logical.Filter(c, node)
        kids = list(scala_iter(node.children()))
        if len(kids) != 1:
            raise Refused("EventTimeWatermark", f"Spark's optimizer puts the filter `{_no_ids(str(c.sql()))}` below "
                                                "the watermark, where gpuwm cannot place it")
        return node.withNewChildren(jvm.PythonUtils.toSeq([place(kids[0], c)]))

    for c in conds:
        base = place(base, c)
    return base, " AND ".join(_no_ids(str(c.sql())) for c in conds)


def _node_id(at) -> str:
    """Spark's id of ``withWatermark`` node ``at`` (its ``WatermarkTracker``
    keeps one watermark per id; a self-join's copy of the node keeps it),
    or its event time's expression id where Spark has no node ids."""
    try:
        return str(at.nodeId().toString())
    except Exception:  # noqa: BLE001  (Spark 3.x: no nodeId)
        return f"#{_id(at.eventTime())}"


def _canonical(e) -> str:
    """Spark's canonical form of expression ``e`` (its ids normalized), to tell two spellings apart."""
    return str(e.canonicalized().toString())


def _unary_chain(node) -> list:
    """``node`` and the nodes under it while each has one child."""
    out = [node]
    while len(kids := list(scala_iter(out[-1].children()))) == 1:
        out.append(kids[0])
    return out


def translate(df, state_ttl: Any = None) -> Translation:
    """``df``'s plan as gpuwm runs it, or :class:`Refused` saying why not.
    ``state_ttl``: how long a rank's partition with no time bound stays
    open after its latest row (by event time; see :func:`accelerate`)."""
    token, pushed, optimized = _STATE_TTL.set(state_ttl), _PUSHED.set({}), _OPTIMIZED.set(None)
    try:
        return _translate(df)
    finally:
        _STATE_TTL.reset(token)
        _PUSHED.reset(pushed)
        _OPTIMIZED.reset(optimized)


def _translate(df) -> Translation:
    if not getattr(df, "isStreaming", False):
        raise ConfigError("accelerate() takes a streaming DataFrame (spark.readStream...)")
    try:
        plan = df._jdf.queryExecution().analyzed()
    except Exception as e:  # Spark Connect: no py4j plan
        raise Refused("query", f"its plan cannot be read ({type(e).__name__}: Spark Connect?)") from None
    plan = _inlined(df.sparkSession, plan)
    _OPTIMIZED.set(_optimized(df.sparkSession, plan))
    _PUSHED.get().update(_below_watermarks(df.sparkSession, plan, _OPTIMIZED.get()))
    tops, node = [], plan
    while _kind(node) in ("Project", "Filter") + _TRANSPARENT:
        if _kind(node) in ("Project", "Filter"):
            tops.append(node)
        node = node.child()
    kind = _kind(node)
    comma = _comma_join(tops[-1]) if kind == "Join" and tops and _kind(tops[-1]) == "Filter" else None
    if comma is not None:  # FROM a, b WHERE ...: the WHERE's comparisons of the sides are the join's condition
        node, fold, rest = comma
        tops[-1] = _filter(df.sparkSession, rest, tops[-1].child()) if rest else None
        tops = [p for p in tops if p is not None]
        t = _join(df.sparkSession, node, fold)
    elif kind in _STATEFUL:
        t = _STATEFUL[kind](df.sparkSession, node)
    elif kind in ("EventTimeWatermark", "StreamingRelation", "StreamingRelationV2"):
        raise Refused("a stateless query", "no stateful operator (an aggregation, a dedup, a join) is above "
                                           f"{'withWatermark' if kind == 'EventTimeWatermark' else 'the source'}, "
                                           "only projections and filters: Spark runs it as written, and gpuwm has "
                                           "nothing of its own to run")
    elif kind == "Window":
        t = _topn(df.sparkSession, node, tops)
    elif kind in ("Expand", "Generate", "Sort", "Limit"):
        raise Refused(kind, "gpuwm runs the operators after a windowed aggregation or a dedup as projections "
                            "and filters only (columns, struct fields, renames, casts, comparisons)")
    else:
        raise Refused(kind, "gpuwm translates one withWatermark, then groupBy(window | session_window, "
                            "keys).agg(...) or dropDuplicatesWithinWatermark (chained), then projections")
    if _unbounded_join(t):
        _unbounded_lateness(t)
    from ..driver.kafka import Untranslatable
    from ..driver.kafka import translate as expr

    ids = t.output_ids
    for p in reversed(tops):
        if _kind(p) == "Filter":  # a filter of the operator's rows (HAVING): a step of the sink's projection
            try:
                t.output.append({"where": expr(p.condition(), ids)})
                t.shown.append(f"filter     {p.condition().sql()}")
            except Untranslatable as e:
                raise Refused("Filter", f"gpuwm does not evaluate `{e}` after the {t.shown[-1].split()[0]}") \
                    from None
            continue
        step, names = [], {}
        for ne in scala_iter(p.projectList()):
            if _kind(ne) == "AttributeReference" and _id(ne) in names:  # Spark's Window adds its column twice
                continue
            name = str(ne.name())
            if p is not tops[0] and any(n == name for n, _ in step):  # (a select below the last: a name of its own)
                name = f"{name}#{_id(ne)}"
            try:
                step.append([name, expr(ne.child() if _kind(ne) == "Alias" else ne, ids)])
            except Untranslatable as e:
                raise Refused("Project", f"gpuwm does not evaluate `{e}` after the {t.shown[-1].split()[0]}") \
                    from None
            names[_id(ne)] = name
        if len(names) != len(step) or len({n for n, _ in step}) != len(step):
            raise Refused("Project", f"a select gives two columns one name ({[n for n, _ in step]})")
        t.output.append(step)
        ids = names
    return t


_WINDOW_TIME = re.compile(r"precisetimestampconversion\(\(precisetimestampconversion\([^()#]+#(\d+)(?:-T\d+ms)?"
                          r"\.end, TimestampType, LongType\) - 1\), LongType, TimestampType\)")


def _input(spark, node) -> Translation:
    """What an operator reads, down from ``node`` through nodes that pass
    rows on unchanged (a view, a subquery, a select of columns): either
    ``withWatermark`` over the source (a translation with no stages yet),
    or another stateful operator's output — the stages that make it, with
    Spark's ``window_time(window)`` of a window stage as gpuwm's
    ``window_time`` column (a chain, as Spark runs one since SPARK-40925)."""
    from ...aggregates import WINDOW_TIME

    while True:
        kind = _kind(node)
        if kind == "EventTimeWatermark":  # (no filters or selects over it)
            return _under_watermark(spark, node)
        if kind in _STATEFUL:
            return _consumed(_STATEFUL[kind](spark, node))
        if kind == "Project":  # columns, renames, window.start / .end and window_time(window) of a window below;
            # columns computed over a stateful operator's rows: a project stage
            made, renamed, fields, computed = {}, {}, {}, []
            for e in scala_iter(node.projectList()):
                if _kind(e) == "AttributeReference":
                    continue
                if _kind(e) == "Alias" and _kind(e.child()) == "AttributeReference":
                    renamed[_id(e)] = (_id(e.child()), str(e.name()))
                    continue
                if _kind(e) == "Alias" and _kind(e.child()) == "GetStructField" and \
                        _kind(e.child().child()) == "AttributeReference" and \
                        str(e.child().extractFieldName()) in ("start", "end"):
                    fields[_id(e)] = (_id(e.child().child()), f"window_{e.child().extractFieldName()}")
                    continue
                m = _WINDOW_TIME.fullmatch(str(e.child().toString())) if _kind(e) == "Alias" else None
                if m is None:
                    computed.append(e)
                    continue
                made[_id(e)] = int(m.group(1))
            if not (computed and _watermarked(node)):  # (over withWatermark: the source computes them)
                if made or renamed or fields or computed:
                    below = _input(spark, node.child())
                    wins = {**({below.window_id: ("window_start", "window_end", WINDOW_TIME)}
                               if below.window_id is not None else {}), **below.windows}
                    if any(w not in wins for w in made.values()):
                        raise Refused("Project", "window_time() of a column that is not the window of the "
                                                 "aggregation below (or of an aggregation's rows a join reads)")
                    if any(w not in wins for w, _ in fields.values()):
                        raise Refused("Project", "a field of a struct that is not the window of the aggregation "
                                                 "below (or of an aggregation's rows a join reads)")
                    below.columns.update({i: wins[w][("window_start", "window_end").index(c)]
                                         for i, (w, c) in fields.items()})
                    if made:
                        below.columns.update({i: wins[w][2] for i, w in made.items()})
                        named = {wins[made[_id(e)]][2]: str(e.name()) for e in scala_iter(node.projectList())
                                 if _id(e) in made}  # (a join's rows: the time of either side's window)
                        first = next(e for e in scala_iter(node.projectList()) if _id(e) in made)
                        below.time = str(first.name()), wins[made[_id(first)]][2]
                        below.other_times = [(named.get(c, n), c) for n, c in below.other_times]
                    for new, (old, name) in renamed.items():  # the same column of gpuwm's under another name
                        if old in below.columns:
                            below.columns[new] = below.columns[old]
                            if below.time is not None and below.columns[old] == below.time[1]:
                                below.time = name, below.time[1]
                    if computed:
                        _project(below, node, computed)
                    return below
                node = node.child()
                continue
        if kind in _TRANSPARENT:
            node = node.child()
            continue
        comma = _comma_join(node) if kind == "Filter" else None
        if comma is not None and not comma[2]:  # FROM a, b WHERE <the join's condition>
            return _consumed(_join(spark, comma[0], comma[1]))
        if kind == "Filter" and not _watermarked(node):  # over a stateful operator's rows: a project stage
            below = _input(spark, node.child())
            _project(below, node, None)
            return below
        if kind in ("Filter", "Project"):
            return _under_watermark(spark, node)
        if kind in ("StreamingRelation", "StreamingRelationV2", "StreamingExecutionRelation"):
            raise Refused("query", "no withWatermark: gpuwm's operators drain by the watermark")
        raise Refused(kind, "an operator below the aggregation (a join, a union ...): gpuwm translates "
                            "windowed aggregations and dedups over one watermarked source, chained")


def _consumed(t: Translation) -> Translation:
    """``t``, a stateful operator's rows read by another operator: its
    output columns computed on each output row (:attr:`Translation.computed`)
    become a project stage's columns, for the operator over them to read;
    a join's output watermark becomes Spark's where gpuwm's own is not
    (:attr:`Translation.lag`; a join that ends the query keeps gpuwm's,
    which no operator reads, and its checkpoints from before this match)."""
    if t.lag is not None:
        lag = t.lag()
        k = max(i for i, st in enumerate(t.stages) if st[0] == "join")
        t.stages[k] = t.stages[k][:8] + (lag,)
        at = max(i for i, line in enumerate(t.shown) if line.startswith("join "))
        t.shown[at] += f"; output watermark: the input's{f' less {lag}' if lag else ''}, as Spark's"
        t.lag = None
    if t.computed:
        names = {n: x for n, x in t.output[0]}
        n = len(t.stages)
        step = [[f"__gpuwm_c{n}_{k}", names[t.output_ids[i]]] for k, i in enumerate(t.computed)]
        t.stages.append(("project", [step]))
        t.columns.update({i: c for i, (c, _) in zip(t.computed, step)})
        t.computed = []
    return t


def _watermarked(node) -> bool:
    """``node``, a filter or a select, is over ``withWatermark`` through
    filters and selects alone (else over another operator's rows)."""
    while _kind(node) in ("Project", "Filter") + _TRANSPARENT:
        node = node.child()
    return _kind(node) == "EventTimeWatermark"


def _project(t: Translation, node, computed: list | None) -> None:
    """A filter (``computed`` None: ``node``'s condition) or columns a
    select computes (``computed``: its aliases) over the rows of ``t``'s
    last stage, before another operator: a project stage
    (:class:`gpuwm.select.ProjectSpec`), evaluated as Spark evaluates them
    (:mod:`gpuwm.project`). The computed columns take names of gpuwm's
    own beside the stage's; the watermark passes on as it is, as Spark
    propagates it past a filter or a select."""
    kind, over = _kind(node), _over(t)
    exprs = [node.condition()] if computed is None else [e.child() for e in computed]
    for e in exprs:
        if not e.deterministic():
            raise Refused(kind, f"`{_no_ids(str(e.sql()))}` over {over} is not deterministic")
    cols, structs = _struct_columns(t, exprs, kind)
    n = len(t.stages)
    if computed is None:
        _project_step(t, kind, "", lambda expr: {"where": _with_window(expr(node.condition(), cols), structs)})
        t.shown.append(f"filter     {_no_ids(str(node.condition().sql()))}")
        return
    step = _project_step(t, kind, "", lambda expr: [[f"__gpuwm_c{n}_{k}", _with_window(expr(e.child(), cols),
                                                                                       structs)]
                                                    for k, e in enumerate(computed)])
    t.columns.update({_id(e): c for e, (c, _) in zip(computed, step)})
    t.shown.append("compute    " + ", ".join(f"{e.name()} = {_no_ids(str(e.child().sql()))}" for e in computed))


def _struct_columns(t: Translation, exprs: list, kind: str) -> tuple[dict[int, str], dict[str, dict]]:
    """``t``'s columns for expressions ``exprs`` over its rows, with each
    window struct they read as a column of its own (``\\0window...``), and
    what :func:`_with_window` makes of those: the struct of the window's
    bounds as gpuwm's rows carry them — the window of the aggregation the
    rows come from, and over a join's rows each aggregation side's window
    (``aw.start``, ``window_time(aw)``, ``aw`` itself, of q8's join)."""
    refs = {_id(a) for e in exprs for a in scala_iter(e.references().toSeq())}
    cols, structs = dict(t.columns), {}
    if t.window_id is not None and t.window_id in refs:
        struct = _window_struct(t)
        if struct is None:
            raise Refused(kind, f"`{_no_ids(str(exprs[0].sql()))}` over {_over(t)} reads a window struct gpuwm's "
                                "rows do not carry")
        cols[t.window_id], structs["\0window"] = "\0window", struct
    for i, (start, end, _) in t.windows.items():
        if i in refs and i not in cols:
            cols[i] = f"\0window{i}"
            structs[cols[i]] = _bounds_struct(start, end)
    return cols, structs


def _window_struct(t: Translation) -> dict | None:
    """Spark's window column of ``t``'s rows as gpuwm's rows make it (the
    struct of its bounds its window stage's output step writes), or None."""
    name = t.output_ids.get(t.window_id) if t.window_id is not None else None
    step = t.output[-1] if t.output and isinstance(t.output[-1], list) else []
    return next((x for n, x in step if n == name), None) if name is not None else None


def _over(t: Translation) -> str:
    """What ``t``'s rows are, for a refusal: its last stage's (a project's
    passes them on), or a join's."""
    last = _last(t)
    return f"a {last[0]}'s rows" if last is not None else "a join's rows"


def _project_step(t: Translation, kind: str, what: str, build) -> Any:
    """The step ``build(expr)`` makes of Spark's expressions over ``t``'s
    rows (``expr``: :func:`gpuwm.spark.driver.kafka.translate`), appended to
    ``t`` as a project stage; refused, naming ``kind`` (and ``what``, the
    refusal's start), where gpuwm does not evaluate one of them."""
    from ..driver.kafka import Untranslatable
    from ..driver.kafka import translate as expr

    try:
        step = build(expr)
    except Untranslatable as err:
        raise Refused(kind, f"{what}gpuwm does not evaluate `{_no_ids(str(err))}` over {_over(t)}") from None
    t.stages.append(("project", [step]))
    return step


def _under_watermark(spark, node) -> Translation:
    """``withWatermark`` over the source (``node``), or filters and new
    columns between it and the operator (``node`` the top one),
    read as Spark's optimizer places them (``PushPredicateThroughNonJoin``):
    a deterministic conjunct that does not read the event time (nor a
    column computed from it) goes below the watermark, which then sees only
    the rows it keeps, in Spark and in gpuwm alike; a select keeps every row,
    so its columns may be computed below the watermark too. Both become part
    of gpuwm's source (Spark's, or the direct read's). A conjunct on the event
    time stays above Spark's watermark (which sees the rows it drops): refused,
    as a select that drops the event time (renamed, it is gpuwm's watermark
    column), and anything not deterministic. (Over another operator's rows,
    filters and selects are a project stage, :func:`_project`; after the
    last operator, the sink's projection.)"""
    chain, at = [], node
    while _kind(at) in ("Project", "Filter") + _TRANSPARENT:
        if _kind(at) not in _TRANSPARENT:
            chain.append(at)
        at = at.child()
    if _kind(at) != "EventTimeWatermark":  # (a stateful operator's rows: _input makes a project stage of them)
        raise Refused(_kind(node), f"no withWatermark below it, but a {_kind(at)}")
    ts = at.eventTime()
    if str(ts.dataType().simpleString()) != "timestamp":
        raise Refused("EventTimeWatermark", f"its column {ts.name()} is {ts.dataType().simpleString()}, "
                                            "not a timestamp")
    timed = {_id(ts)}  # Spark's ids of the event time and the columns computed from it
    same = {_id(ts)}  # Spark's ids of the event time and its renames: gpuwm's watermark reads one of them
    plan, pushed = _pushed_below(spark, at, node)
    jvm = spark._jvm
    for n in reversed(chain):
        exprs = [n.condition()] if _kind(n) == "Filter" else list(scala_iter(n.projectList()))
        shaky = next((e for e in exprs if not e.deterministic()), None)
        if shaky is not None:
            raise Refused(_kind(n), f"`{_no_ids(str(shaky.sql()))}` between withWatermark and the operator is not "
                                    "deterministic: Spark keeps it above the watermark")
        if _kind(n) == "Filter":
            on_time = [c for c in _conjuncts(n.condition())
                       if {_id(a) for a in scala_iter(c.references().toSeq())} & timed]
            if on_time:
                raise Refused("Filter", f"a filter on the event time (`{_no_ids(str(on_time[0].sql()))}`) between "
                                        "withWatermark and the operator: Spark's watermark sees the rows before it, "
                                        "gpuwm's would see those after; filter before withWatermark")
        else:
            for e in exprs:
                if _kind(e) == "AttributeReference":
                    continue
                if _kind(e) == "Alias" and _kind(e.child()) == "AttributeReference" and _id(e.child()) in same:
                    same.add(_id(e))
                if {_id(a) for a in scala_iter(e.references().toSeq())} & timed:
                    timed.add(_id(e))
            if not same & {_id(a) for a in scala_iter(n.output())}:
                raise Refused("Project", f"a select drops the event time {ts.name()} between withWatermark and the "
                                         "operator")
        plan = n.withNewChildren(jvm.PythonUtils.toSeq([plan]))
    names = [str(a.name()) for a in scala_iter(node.output())]
    if chain and len(set(names)) != len(names):
        raise Refused("Project", f"a select gives two columns one name ({names})")
    time = next(str(a.name()) for a in scala_iter(node.output()) if _id(a) in same)
    return Translation(_of_rows(spark, plan), time, _interval(at.delay()),
                       columns={_id(a): str(a.name()) for a in scala_iter(node.output())},
                       time=(time, time),
                       origin=re.sub(r"#\d+L?", "", str(node.toString()) + pushed),  # (a self-join's copy: new ids)
                       pushed=pushed, node=_node_id(at))


_NO_WINDOW = "its grouping has no window(...) or session_window(...) of the event time"


def _time_read_by(t: Translation, made) -> None:
    """``t``'s event time made the one ``made`` (the node that makes a
    window column) reads: a join's right time instead of its left where
    the window's own expressions read it (the node's, not its children's:
    the plan below names both times)."""
    text = " ".join(str(e.toString()) for e in scala_iter(made.expressions())
                    if _kind(e) != "AttributeReference")  # (not the columns it passes on)
    for other in t.other_times:
        ids = [i for i, c in t.columns.items() if c == other[1]]
        if any(re.search(rf"#{i}\b", text) for i in ids):
            t.time = other
            break


def _windowing(upper, operator: str = "Aggregate") -> tuple[Any, Any, Any]:
    """The two nodes Spark's analyzer makes of ``window(...)``, ``upper``
    the higher (tumble: Project over Filter; hop: Filter over Expand;
    session: Filter over Project): (the one that makes the window column,
    that column, the node below them)."""
    lower = upper.child() if _kind(upper) in ("Project", "Filter") else None
    if lower is None or (_kind(upper), _kind(lower)) not in (("Project", "Filter"), ("Filter", "Expand"),
                                                             ("Filter", "Project")):
        raise Refused(operator, _NO_WINDOW)
    made = upper if _kind(upper) == "Project" else lower
    if _kind(made) == "Project" and _kind(lower.child()) != "Expand" and \
            _kind(next(iter(scala_iter(made.projectList())), made)) != "Alias":
        raise Refused(operator, _NO_WINDOW)  # (a select over a filter that passes its first column on)
    return made, list(scala_iter(made.output()))[0], lower.child()


def _window(spark, upper, made, out, below, ts: str, keys: list[str] | None, on: str):
    """The window ``made`` computes into ``out`` over ``below``, on the
    event-time column Spark names ``ts`` and gpuwm ``on``: (gpuwm window,
    text for explain). Checked by making the same
    ``window``/``session_window`` over ``below`` (grouped by Spark's
    ``keys``; ``None``: selected, as a join's side does): the same plan
    from ``upper`` down, or refused."""
    operator = "Aggregate" if keys is not None else "Join"
    from pyspark.sql import functions as F

    from ...session import Session
    from ...window import Hop, Tumble

    text = str(made.toString())
    col = F.col(_time_reference(below, made, ts, operator))
    if " as interval)" in text:
        m = re.search(r"cast\(([^()]+?) as interval\)", text)
        gap = m.group(1) if m else None
        if not gap or gap.count("(") != gap.count(")"):
            raise Refused(operator, "a session_window whose gap is not a constant")
        iv = spark._jvm.org.apache.spark.sql.catalyst.util.IntervalUtils.stringToInterval(
            spark._jvm.org.apache.spark.unsafe.types.UTF8String.fromString(gap))
        made_by, win, shown = F.session_window(col, gap), Session(on, _interval(iv)), f"session_window({ts}, {gap})"
    else:
        slide = re.search(r" % (\d+)\)", text)
        start = re.search(r"LongType\) - (-?\d+)\) % ", text)
        size = re.search(r"\) \+ (\d+)\), LongType, TimestampType\)", text)
        if not (slide and start and size):
            raise Refused(operator, "its window(...) is not one gpuwm reads")
        size_us, slide_us, start_us = int(size.group(1)), int(slide.group(1)), int(start.group(1))
        made_by = F.window(col, f"{size_us} microseconds", f"{slide_us} microseconds", f"{start_us} microseconds")
        if start_us:
            raise Refused(operator, f"a window with a start offset ({timedelta(microseconds=start_us)}): gpuwm's "
                                       "windows start at the epoch")
        size_td, slide_td = timedelta(microseconds=size_us), timedelta(microseconds=slide_us)
        shown = f"window({ts}, {size_td}" + (f", {slide_td})" if size_us != slide_us else ")")
        try:
            win = Tumble(on, size_td) if size_us == slide_us else Hop(on, size=size_td, slide=slide_td)
        except ConfigError as e:  # a hop whose slide does not divide its size
            raise Refused(operator, f"{shown}: {e}") from None
    again = _of_rows(spark, below)
    again = again.select(made_by.alias(str(out.name()))) if keys is None else \
        again.groupBy(made_by.alias(str(out.name())), *[F.col(_quoted(k)) for k in keys]).count()
    mine = again._jdf.queryExecution().analyzed().child()
    if _no_ids(str(mine.toString())) != _no_ids(str(upper.toString())):
        raise Refused(operator, f"its window is not {shown} as gpuwm read it")
    return win, shown


def _time_reference(below, made, ts: str, operator: str) -> str:
    """How to name the time column ``ts`` of the rows ``below`` in a
    DataFrame over them: its name, or — a join's two sides both have a
    column of that name (Spark tells them apart by id) — its side's alias
    and name (``left.eventTime``), the one ``made`` (the window) reads."""
    same = [a for a in scala_iter(below.output()) if str(a.name()) == ts]
    if len(same) <= 1:
        return _quoted(ts)
    first = re.search(rf"{re.escape(ts)}#(\d+)", str(made.toString()))  # (the window's expression comes first)
    read = [a for a in same if first is not None and _id(a) == int(first.group(1))]
    qualifier = [str(q) for q in scala_iter(read[0].qualifier())] if len(read) == 1 else []
    if not qualifier or sum(1 for a in same if [str(q) for q in scala_iter(a.qualifier())] == qualifier) > 1:
        raise Refused(operator, f"its window's time column {ts} is one of {len(same)} columns of that name below "
                                "it: alias the join's sides (df.alias('left')) or rename one")
    return ".".join(_quoted(q) for q in qualifier[-1:]) + "." + _quoted(ts)


def _positional(e, fn, win) -> None:
    """Refuse Spark's ``first`` / ``last`` where gpuwm's differ: ignoring
    nulls, over a session (Spark sorts a session's rows by time), of a type
    gpuwm's accumulators do not hold."""
    from ...session import Session

    why = None
    if fn.ignoreNulls():
        why = "ignoring nulls: gpuwm's takes the first / last row's value, null or not"
    elif isinstance(win, Session):
        why = "over a session window: Spark takes a session's rows in event-time order, gpuwm's in arrival order"
    elif str(fn.child().dataType().typeName()) not in _POSITIONAL_TYPES:
        why = f"of a {fn.child().dataType().simpleString()} column: gpuwm's are of numbers and times"
    if why:
        raise Refused("Aggregate", f"the aggregate {e.sql()} {why}")


def _aggregate(spark, agg) -> Translation:
    groups = list(scala_iter(agg.groupingExpressions()))
    if any(_kind(g) != "AttributeReference" for g in groups):
        bad = next(g for g in groups if _kind(g) != "AttributeReference")
        raise Refused("Aggregate", f"a grouping expression ({bad.sql()}): group by columns (add them before "
                                   "withWatermark)")
    try:
        made, out, below = _windowing(agg.child())  # the window is the grouping attribute the node under it makes
    except Refused:
        made = out = below = None
    t = _input(spark, agg.child()) if made is None else None
    by_window = t is not None and t.window_id is not None and t.window_id in {_id(g) for g in groups}
    if made is None and not by_window:
        raise Refused("Aggregate", _NO_WINDOW)
    win_id = t.window_id if by_window else _id(out)
    named = {_id(g): str(g.name()) for g in groups if _id(g) != win_id}  # Spark's names of the keys
    if len(groups) - len(named) != 1:
        raise Refused("Aggregate", _NO_WINDOW)
    if len(set(named.values())) != len(named):
        raise Refused("Aggregate", f"two grouping columns share a name ({list(named.values())})")
    if by_window:  # grouped by the window of the aggregation below (Nexmark q5's maximum per window)
        return _by_window(t, agg, named)
    t = _input(spark, below)
    if t.time is None:
        raise Refused("Aggregate", "a window over the rows of a stage that gives no event time (window a window's "
                                   "rows by window_time(window))")
    _time_read_by(t, made)
    cols = t.columns
    if any(i not in cols for i in named):
        raise Refused("Aggregate", "a grouping column the stage below does not give as a column (its window?)")
    keys = [cols[i] for i in named]  # gpuwm's names of the keys
    win, shown_win = _window(spark, agg.child(), made, out, below, t.time[0], list(named.values()), t.time[1])
    if not keys and shown_win.startswith("session_window("):  # Spark's planner refuses it when the query starts
        raise Refused("Aggregate", f"{shown_win} without grouping keys: Spark does not run it on a stream either "
                                   "('Global aggregation with session window in streaming query is not "
                                   "supported'), and gpuwm runs what Spark runs")
    stage, aggs = len(t.stages), {}  # (the index before any project stage an aggregate's expression adds)
    step, ids, shown_aggs, columns, window_out, computed = _outputs(
        t, agg, win_id, named, _WINDOW_STRUCT, lambda e: _one_aggregate(t, e, aggs, stage, win))
    _groups_only(aggs, shown_aggs, stage)
    t.stages.append(("window", win, keys, aggs))
    t.output, t.output_ids, t.columns, t.window_id, t.time = [step], ids, columns, window_out, None
    t.computed = computed
    t.window_of = (win, "window_start", "window_end")
    t.shown.append(f"aggregate  {shown_win} by {list(named.values())}: {', '.join(shown_aggs)}")
    return t


def _one_aggregate(t: Translation, e, aggs: dict, stage: int, win) -> tuple[str, str]:
    """The aggregate ``e`` (Spark's ``AggregateExpression``) of an
    aggregation over ``t``'s rows, added to ``aggs`` (gpuwm's: its column's
    name → what it aggregates, the function) for the window stage at index
    ``stage`` (its columns' suffix): that column's name, and how ``explain`` shows it. ``win``:
    the stage's window; None over the windows of an aggregation below
    (:func:`_by_window`), where Spark's first / last take that
    aggregation's rows in no set order."""
    fn = e.aggregateFunction()
    fk = _kind(fn)
    if fk not in _AGGS:
        raise Refused("Aggregate", f"the aggregate {e.sql()}: gpuwm has count, sum, min, max, avg, first "
                                   "and last")
    if fk in ("First", "Last"):
        if win is None:
            raise Refused("Aggregate", f"the aggregate {e.sql()} in an aggregation by a window column: Spark's "
                                       "takes the rows of the aggregation below in no set order")
        _positional(e, fn, win)
    args = list(scala_iter(fn.children()))
    if fk in ("Sum", "Average", "Min", "Max") and args and \
            str(args[0].dataType().typeName()) not in _POSITIONAL_TYPES:  # (a decimal: Spark's sum widens it)
        raise Refused("Aggregate", f"the aggregate {e.sql()} of a {args[0].dataType().simpleString()} "
                                   "column: gpuwm's are of numbers (integers, doubles) and times")
    fn_name = _AGGS[fk]
    if e.isDistinct() and fk not in ("Min", "Max"):  # min / max of the distinct values: of all
        if fk not in ("Count", "Sum", "Average") or len(args) != 1:
            raise Refused("Aggregate", f"the aggregate {e.sql()}: gpuwm's DISTINCT aggregates are count, "
                                       "sum and avg of one column")
        fn_name += "_distinct"
    star = fk == "Count" and len(args) == 1 and _kind(args[0]) == "Literal" and args[0].value() is not None
    cols = t.columns
    if e.filter().isDefined():
        what = _filtered(t, e, fk, None if star else args[0], len(aggs))
    elif star:
        what = "*"
    elif len(args) == 1 and _kind(args[0]) == "AttributeReference" and _id(args[0]) in cols:
        what = cols[_id(args[0])]
    elif len(args) == 1:  # of an expression (sum(price * quantity)): a column the source gains
        what = _on_source(t, e, args[0], f"__gpuwm_arg{len(aggs)}")
    else:
        raise Refused("Aggregate", f"the aggregate {e.sql()}: gpuwm aggregates a column (or count(*))")
    inner = f"__gpuwm_agg{len(aggs)}" + (f"_s{stage}" if stage else "")
    aggs[inner] = (what, fn_name)
    return inner, (f"{_SHOWN[_AGGS[fk]]}({'DISTINCT ' if e.isDistinct() else ''}"
                   f"{'*' if star else args[0].name() if _kind(args[0]) == 'AttributeReference' else args[0].sql()})"
                   + (f" FILTER (WHERE {e.filter().get().sql()})" if e.filter().isDefined() else ""))


def _groups_only(aggs: dict, shown_aggs: list[str], stage: int) -> None:
    """An aggregation with no aggregate (``GROUP BY id, name, window(...)``
    alone: Nexmark q8's sides as published) outputs its groups: gpuwm's
    window stage counts each group's rows into a column no output reads."""
    if not aggs:
        aggs["__gpuwm_rows" + (f"_s{stage}" if stage else "")] = ("*", "count")
        shown_aggs.append("no aggregate: the groups alone")


def _outputs(t: Translation, agg, win_id: int, named: dict[int, str], struct: dict, one) -> tuple:
    """The output of the aggregation ``agg`` over ``t``'s rows, grouped by
    the window ``win_id`` (gpuwm's rows make it as ``struct``) and the keys
    ``named``: its step (a name and an expression each), Spark's id → name,
    the aggregates as ``explain`` shows them, Spark's id → gpuwm's column,
    the window's id as output (None where it is not), and the ids of the
    columns computed on each output row (:func:`_consumed`). ``one(e)`` adds
    the aggregate ``e`` (:func:`_one_aggregate`)."""
    cols = t.columns
    keys = {i: cols[i] for i in named}
    step, ids, shown_aggs, columns, window_out, computed = [], {}, [], dict(keys), None, []
    for ne in scala_iter(agg.aggregateExpressions()):
        name = str(ne.name())
        e = ne.child() if _kind(ne) == "Alias" else ne
        k = _kind(e)
        if k == "AttributeReference" and _id(e) == win_id:
            step.append([name, struct])
            window_out = _id(ne)  # the window as the aggregation outputs it (an alias has its own id)
        elif k == "AttributeReference" and _id(e) in named:
            step.append([name, {"col": cols[_id(e)]}])
            columns[_id(ne)] = cols[_id(e)]  # (a key renamed in the output, `groupBy(col("k").alias("k2"))`: its id)
        elif k == "AggregateExpression":
            inner, shown = one(e)
            step.append([name, {"col": inner}])
            shown_aggs.append(f"{name} = {shown}")
            columns[_id(ne)] = inner
        elif any(_kind(a) == "AggregateExpression" for a in _descendants(e)):  # max(price) * 0.908: on each row out
            made = {}
            for a in _descendants(e):
                if _kind(a) == "AggregateExpression" and int(a.resultId().id()) not in made:
                    made[int(a.resultId().id())] = one(a)[0]
            step.append([name, _of_groups(e, win_id, {**keys, **made}, struct)])
            shown_aggs.append(f"{name} = {_no_ids(str(e.sql()))}")
            computed.append(_id(ne))
        else:
            step.append([name, _of_groups(e, win_id, keys, struct)])
            computed.append(_id(ne))
        ids[_id(ne)] = name
    if len({n for n, _ in step}) != len(step):
        raise Refused("Aggregate", f"two output columns share a name ({[n for n, _ in step]})")
    return step, ids, shown_aggs, columns, window_out, computed


def _by_window(t: Translation, agg, named: dict[int, str]) -> Translation:
    """An aggregation grouped by the window column of the window
    aggregation ``t`` below it (and keys): each group is one of its
    windows, which closes when the watermark passes the window's end, as
    Spark's aggregation keyed by that window evicts it. gpuwm's form: the
    window's bounds kept as keys (a select renames them apart), then a
    tumbling window of the window's slide on ``window_time`` — exactly one
    per window below (the windows end a slide apart)."""
    from ...aggregates import WINDOW_TIME
    from ...session import Session
    from ...window import Tumble

    _, below, bkeys, baggs = _last(t)  # (projects over its rows: filters, and columns they add)
    added = _added(t)
    if isinstance(below, Session) or t.window_of is None:
        raise Refused("Aggregate", "grouped by a session window's column: gpuwm groups by a tumbling or hopping "
                                   "window's")
    if any(i not in t.columns for i in named):
        raise Refused("Aggregate", "a grouping column the stage below does not give as a column")
    n = len(t.stages)
    start, end = f"__gpuwm_ws{n}", f"__gpuwm_we{n}"
    kept = [*bkeys, *baggs, WINDOW_TIME, *added]
    t.stages.append(("select", [[start, "window_start"], [end, "window_end"], *[[c, c] for c in kept]]))
    keys = [start, end, *(t.columns[i] for i in named)]
    aggs: dict[str, tuple[str, str]] = {}
    struct = _bounds_struct(start, end)
    step, ids, shown_aggs, columns, window_out, t.computed = _outputs(
        t, agg, t.window_id, named, struct, lambda e: _one_aggregate(t, e, aggs, n + 1, None))
    _groups_only(aggs, shown_aggs, n + 1)
    t.stages.append(("window", Tumble(WINDOW_TIME, below.slide), keys, aggs))
    t.output, t.output_ids, t.columns, t.window_id, t.time = [step], ids, columns, window_out, None
    t.window_of = (t.window_of[0], start, end)
    t.shown.append(f"aggregate  by the window of the aggregation below, {list(named.values())}: "
                   f"{', '.join(shown_aggs)}")
    return t


def _of_groups(e, win_id: int, keys: dict[int, str], struct: dict) -> dict:
    """An output expression of an aggregation over its window and keys (and
    aggregates, ``keys`` holding their ids) alone (``window.start``,
    ``date_format(window.start, 'yyyy-MM-dd')``, ``k + 1``): evaluated on
    each output row, as the select Spark puts it in; the window as gpuwm's
    rows make it, ``struct``."""
    from ..driver.kafka import Untranslatable
    from ..driver.kafka import translate as expr

    if any(_kind(a) == "AggregateExpression" and int(a.resultId().id()) not in keys for a in _descendants(e)):
        raise Refused("Aggregate", f"the output expression {e.sql()}: gpuwm outputs aggregates as they are "
                                   "(compute on them in a select after)")
    try:
        return _with_window(expr(e, {win_id: "\0window", **keys}), {"\0window": struct})
    except Untranslatable as u:
        raise Refused("Aggregate", f"the output expression {e.sql()}: gpuwm does not evaluate `{u}`") from None


def _with_window(x: Any, structs: dict[str, dict]) -> Any:
    """Expression ``x`` (gpuwm's form) with each window column, read as
    ``{"col": "\\0window..."}``, as the struct gpuwm's rows make of it
    (``structs``: that column → the struct)."""
    if isinstance(x, dict):
        col = x.get("col") if len(x) == 1 else None
        if isinstance(col, str) and col in structs:
            return structs[col]
        return {k: _with_window(v, structs) for k, v in x.items()}
    return [_with_window(v, structs) for v in x] if isinstance(x, list) else x


def _descendants(e) -> list:
    """``e`` and every expression under it."""
    out, todo = [], [e]
    while todo:
        x = todo.pop()
        out.append(x)
        todo.extend(scala_iter(x.children()))
    return out


def _filtered(t: Translation, e, fk: str, arg, j: int) -> str:
    """``agg(x) FILTER (WHERE cond)`` as ``agg(CASE WHEN cond THEN x END)``
    (``count(*)``'s: of ``1``), the same rows for count, sum, min, max and
    avg, which skip nulls: a column computed for it (:func:`_on_source`);
    its name."""
    if fk in ("First", "Last"):
        raise Refused("Aggregate", f"the aggregate {e.sql()}: first / last with FILTER (they take nulls too)")
    return _on_source(t, e, e.filter().get(), f"__gpuwm_filter{j}", where=True, then=arg)


def _on_source(t: Translation, e, x, name: str, where: bool = False, then=None) -> str:
    """The column ``name`` computed for the aggregate ``e``: the expression
    ``x`` (``where``: ``CASE WHEN x THEN then END``, ``then`` None for a
    ``1``). Over the source's columns, the source gains it: Spark computes
    it under ``withWatermark``, a projection the watermark does not read
    (or the direct read does, where it evaluates it). Over a stage's or a
    join's rows, a project stage computes it (:func:`_project`). The
    aggregate then takes the column. Refused when ``x`` reads a column
    renamed or computed after withWatermark, or is not deterministic."""
    from pyspark.sql import functions as F

    both = [x] if then is None else [x, then]
    if not all(y.deterministic() for y in both):
        raise Refused("Aggregate", f"the aggregate {e.sql()} is not deterministic")
    if t.stages:
        cols, structs = _struct_columns(t, both, "Aggregate")

        def column(expr) -> list:
            got = _with_window(expr(x, cols), structs)
            return [[name, {"when": [got, {"lit": [1, "int"]} if then is None else
                                     _with_window(expr(then, cols), structs)]}
                     if where else got]]

        _project_step(t, "Aggregate", f"the aggregate {e.sql()}: ", column)
        return name
    if t.inputs:
        raise Refused("Aggregate", f"the aggregate {e.sql()}: gpuwm computes an aggregate's expression on the "
                                   "source or over a stage's rows")
    refs = [a for y in both for a in scala_iter(y.references().toSeq())]
    if any(_kind(a) != "AttributeReference" or t.columns.get(_id(a)) != str(a.name()) for a in refs):
        raise Refused("Aggregate", f"the aggregate {e.sql()}: it reads a column renamed or computed after "
                                   "withWatermark")
    c = _column(t.source, x)
    if where:
        c = F.when(c, F.lit(1) if then is None else _column(t.source, then))
    t.source = t.source.withColumn(name, c)
    return name


def _column(df, e):
    """A Catalyst expression of ``df``'s plan's attributes as a PySpark Column."""
    from pyspark.sql.classic.column import Column

    return Column(df.sparkSession._jvm.org.apache.spark.sql.classic.ExpressionUtils.column(e))


_RANKS = {"RowNumber": "row_number", "Rank": "rank", "DenseRank": "dense_rank"}
_NO_RANK_FILTER = ("a rank needs a filter on it right above (rank <= N, rank < N or rank = 1): gpuwm runs top-N "
                   "per window, emitted when the window closes")
_RANK_COLUMN = "__gpuwm_rank"


def _topn(spark, node, tops: list) -> Translation:
    """``row_number()`` / ``rank()`` / ``dense_rank()`` ``OVER (PARTITION BY
    <window>, keys ORDER BY ...)`` under a filter ``rank <= N``: the filter
    (taken out of ``tops``) and the ranking are a top-N stage
    (:class:`gpuwm.topn.TopNSpec`) over a windowed aggregation's rows (its
    window among the partition keys; project stages, filters and new
    columns, between them and the rank), over a watermarked source's rows
    (a tumbling ``window(ts, ...)`` of its event time among them) or a
    join's (of either side's time; or closed by a column that bounds the
    joined rows' time), or, with ``state_ttl``, over a source's rows
    partitioned by keys alone. Spark's
    analyzer makes these plans; its streaming checker refuses them
    (``NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING``)."""
    from ...aggregates import WINDOW_TIME
    from ...session import Session
    from ...topn import TopNSpec
    from ...window import Tumble

    exprs = list(scala_iter(node.windowExpressions()))
    if len(exprs) != 1:
        raise Refused("Window", f"{len(exprs)} window functions: gpuwm ranks by one (row_number, rank or "
                                "dense_rank)")
    ne = exprs[0]
    we = ne.child() if _kind(ne) == "Alias" else ne
    fk = _kind(we.windowFunction()) if _kind(we) == "WindowExpression" else _kind(we)
    if fk not in _RANKS:
        raise Refused("Window", f"the window function {we.sql()}: gpuwm ranks (row_number, rank, dense_rank) "
                                "for a top-N per window; other window functions on a stream are not gpuwm's")
    fn, rank_id = _RANKS[fk], _id(ne)
    n = _rank_limit(tops, rank_id)
    part = list(scala_iter(node.partitionSpec()))
    if any(_kind(p) != "AttributeReference" for p in part):
        raise Refused("Window", "a PARTITION BY expression: partition by columns (a window column among them)")
    probe, above = node.child(), None
    while _kind(probe) in ("Project", "Filter") + _TRANSPARENT and not _expanded(above, probe):
        above, probe = probe, probe.child()
    source = _kind(probe) not in _STATEFUL  # else a stage's rows: a source's, with a window column made over them
    win_stage = until = None
    if not source:
        t = _input(spark, node.child())
        win_stage = _last(t) if _aggregated(t) else None  # (projects over its rows: filters, new columns)
        until = _until(t)
    if until is not None:  # over a join's rows whose condition bounds their time by a column: closed by it
        cols = t.columns
    elif win_stage is not None:  # over an aggregation: its window is one of the partition keys
        if not any(_id(p) == t.window_id for p in part):
            raise Refused("Window", "a rank over an aggregation's rows not partitioned by its window: its state "
                                    "would never be cleaned (add the window to PARTITION BY)")
        if isinstance(win_stage[1], Session):
            raise Refused("Window", "a rank over session windows: gpuwm's top-N partitions by tumbling and hopping "
                                    "windows")
        cols = t.columns
        ts = WINDOW_TIME
    elif source:
        found = _topn_source(spark, node, part)
        if found is None:  # no window: a partition closes once idle for state_ttl, when given
            t, ts, win_attr, shown_win = _topn_ttl(spark, node)
        else:
            t, ts, win_attr, shown_win = found
        cols = t.columns
    else:
        raise Refused("Window", "a rank over a dedup's or a join's rows: gpuwm's top-N partitions by a window, or "
                                "closes them by a column that bounds a join's event time (b_ts <= expires)")
    by = []
    for p in part:
        if win_stage is not None and _id(p) == t.window_id or source and _id(p) == win_attr[0]:
            continue
        if _id(p) not in cols:
            raise Refused("Window", f"the partition column {p.name()}: not a column of the rows below")
        by.append(cols[_id(p)])
    order, shown_order = [], []
    for so in scala_iter(node.orderSpec()):
        c = so.child()
        if _kind(c) != "AttributeReference" or _id(c) not in cols:
            raise Refused("Window", f"the ORDER BY expression {so.sql()}: gpuwm orders by columns")
        desc = _kind(so.direction()).startswith("Descending")
        nulls_first = _kind(so.nullOrdering()).startswith("NullsFirst")
        order.append((cols[_id(c)], "desc" if desc else "asc", "nulls_first" if nulls_first else "nulls_last"))
        shown_order.append(str(so.sql()))
    if win_stage is not None and until is None:
        spec = TopNSpec.after_window(win_stage[1], ts, by, order, n, fn, _RANK_COLUMN)
        step = t.output[-1]
        for a in scala_iter(node.child().output()):  # columns a project stage added (or renamed) on the way
            if _id(a) not in t.output_ids and _id(a) in cols:
                step.append([str(a.name()), {"col": cols[_id(a)]}])
                t.output_ids[_id(a)] = str(a.name())
        shown_win = "the aggregation's window"
    else:
        if until is not None:
            spec = TopNSpec(None, by, order, n, fn, _RANK_COLUMN, until)
            shown_win = f"partition (closed when the watermark passes {until}, which bounds the joined rows' time)"
            win_attr = (None, None)
        elif win_attr[0] is None:
            spec = TopNSpec(None, by, order, n, fn, _RANK_COLUMN, ttl=(ts, _STATE_TTL.get()))
        else:
            spec = TopNSpec(Tumble(ts, win_attr[1]), by, order, n, fn, _RANK_COLUMN)
        step = []  # the columns below the ranking, by their names there
        for a in scala_iter(node.child().output()):
            name = str(a.name())
            if _id(a) in cols and any(n == name for n, _ in step):
                # two of one name (a join's sides' date_time, one only for ORDER BY): gpuwm's own for the second
                name = cols[_id(a)]
            if _id(a) == win_attr[0]:
                step.append([name, {"tumble": [{"col": ts}, win_attr[1] // timedelta(microseconds=1)]}])
            elif _id(a) in cols:
                step.append([name, {"col": cols[_id(a)]}])
            else:
                raise Refused("Window", f"the column {a.name()}: computed after withWatermark")
            t.output_ids[_id(a)] = name
        t.output = [step]
    step.append([str(ne.name()), {"col": _RANK_COLUMN}])
    t.output_ids[rank_id] = str(ne.name())
    if len({name for name, _ in step}) != len(step):
        raise Refused("Window", f"two output columns share a name ({[name for name, _ in step]})")
    t.stages.append(("topn", spec))
    t.shown.append(f"top-n      {fn}() <= {n} per {shown_win}"
                   + (f", {[str(p.name()) for p in part if _id(p) in cols]}" if by else "")
                   + f" ORDER BY {', '.join(shown_order)}: emitted when the "
                   + ("partition" if until is not None or spec.ttl is not None else "window") + " closes")
    return t


def _expanded(above, node) -> bool:
    """Whether ``node`` is the filter of Spark's window expansion under
    ``above`` (a rank's partition by ``window(ts, ...)`` over a source's or
    a join's rows), not a filter of a stage's rows."""
    if _kind(node) != "Filter" or _kind(above) != "Project":
        return False
    try:
        _windowing(above, "Window")
    except Refused:
        return False
    return True


def _topn_ttl(spark, node) -> tuple:
    """A rank over a source's rows with no window among its partition keys,
    run only with ``state_ttl`` given: each partition (its keys) closes once
    the watermark passes its latest row's event time by that long."""
    ttl = _STATE_TTL.get()
    if ttl is None:
        raise Refused("Window", "a rank over a source's rows with no window(ts, ...) of its event time among the "
                                "partition keys: its state would never be cleaned (add the window, or give "
                                "state_ttl — spark.gpuwm.stateTtl — to close a partition once the watermark "
                                "passes its latest row by that long)")
    t = _input(spark, node.child())
    if t.time is None:
        raise Refused("Window", "a rank over a source's rows needs withWatermark on the source: state_ttl closes "
                                "a partition by the watermark")
    return t, t.time[0], (None, None), \
        f"partition (closed when the watermark passes its latest {t.time[0]} by {ttl}: state_ttl)"


def _until(t: Translation) -> str | None:
    """The column that closes a top-N's partitions over ``t``'s rows: where
    ``t`` ends with an inner join whose residual condition bounds one side's
    event time by a column of the other (``b_ts <= expires``: every joined
    row has its time at or below that column) and a range bound cleans
    that side's state (``b_ts >= a_ts``): a later joined row's time is then
    above the join's output watermark, the one the top-N drains with — so
    once it reaches the column's value no row with it comes. None
    otherwise."""
    if not t.stages or t.stages[-1][0] != "join" or t.stages[-1][4] is None:
        return None
    left, right = t.inputs["left"].time[1], t.inputs["right"].time[1]
    _, _, lower, upper = t.stages[-1][4]
    for a, op, b in t.stages[-1][7]:
        if b == right and op in (">=", ">") and lower is not None:
            return a
        if a == left and op in ("<=", "<") and upper is not None:
            return b
    return None


def _rank_limit(tops: list, rank_id: int) -> int:
    """N of the filter ``rank <= N`` (``< N``, ``= 1``, ``N >= rank``) right
    above the ranking (only selects of columns between): taken out of
    ``tops``."""
    below = [i for i, p in enumerate(tops) if _kind(p) == "Filter"]
    if not below:
        raise Refused("Window", _NO_RANK_FILTER)
    i = below[-1]
    if any(_kind(e) != "AttributeReference" for p in tops[i + 1:] for e in scala_iter(p.projectList())):
        raise Refused("Window", _NO_RANK_FILTER)
    cond = tops[i].condition()
    k = _kind(cond)
    flip = {"GreaterThanOrEqual": "LessThanOrEqual", "GreaterThan": "LessThan", "EqualTo": "EqualTo"}
    if k not in ("LessThanOrEqual", "LessThan", *flip):
        raise Refused("Window", _NO_RANK_FILTER + f" (the filter is {cond.sql()})")
    left, right = cond.left(), cond.right()
    if k in ("GreaterThanOrEqual", "GreaterThan") or (k == "EqualTo" and _kind(left) == "Literal"):
        left, right, k = right, left, flip[k]
    if _kind(left) != "AttributeReference" \
            or _id(left) != rank_id or _kind(right) != "Literal" or right.value() is None \
            or str(right.dataType().simpleString()) not in ("int", "bigint"):
        raise Refused("Window", _NO_RANK_FILTER + f" (the filter is {cond.sql()})")
    v = int(right.value())
    n = v if k == "LessThanOrEqual" else v - 1 if k == "LessThan" else (1 if v == 1 else 0)
    if n < 1:
        raise Refused("Window", f"the filter {cond.sql()}: gpuwm keeps ranks 1 to N, N >= 1")
    del tops[i]
    return n


def _topn_source(spark, node, part: list) -> tuple[Translation, str, tuple[int, timedelta], str] | None:
    """The rows of a watermarked source with a tumbling ``window(ts, size)``
    column among the partition keys: (the source's translation, gpuwm's
    event-time column, (the window column's id, size), its text); None
    when no window of its event time is among them."""
    from ...window import Tumble

    below, renamed = node.child(), {}  # an alias's id -> the id it renames
    while _kind(below) in ("Project",) + _TRANSPARENT:  # down to the Project that makes the window
        if _kind(below) == "Project":
            for e in scala_iter(below.projectList()):
                if _kind(e) == "Alias" and _kind(e.child()) == "AttributeReference":
                    renamed[_id(e)] = _id(e.child())
            if _kind(below.child()) == "Filter":
                break
        below = below.child()
    if _kind(below) != "Project":
        return None
    made, out, under = _windowing(below, "Window")
    if _kind(under) == "Expand":
        raise Refused("Window", "a hopping window in PARTITION BY: gpuwm's top-N partitions a source's rows by a "
                                "tumbling window")
    t = _input(spark, under)
    _time_read_by(t, made)  # over a join's rows: either side's time

    def root(i: int) -> int:  # the column an alias (of an alias ...) renames
        while i in renamed:
            i = renamed[i]
        return i

    hit = [_id(p) for p in part if root(_id(p)) == _id(out)]
    if not hit or t.time is None:
        return None
    win, shown = _window(spark, below, made, out, under, t.time[0], None, t.time[1])
    for i in renamed:  # a source column renamed on the way up is that column
        if root(i) in t.columns:
            t.columns[i] = t.columns[root(i)]
    if not isinstance(win, Tumble):
        raise Refused("Window", f"{shown}: gpuwm's top-N partitions a source's rows by a tumbling window")
    return t, t.time[1], (hit[0], win.size), shown


def _dedup(spark, node) -> Translation:
    """``dropDuplicatesWithinWatermark(keys)``, or ``dropDuplicates(keys)``
    with the watermark's column among the keys: Spark keeps such a key
    until the watermark passes its event time and drops rows behind the
    watermark as late, so a duplicate can only come while the key is in
    state or as a late row — gpuwm's dedup, which keeps each key longer
    (its event time + the delay) and drops the same late rows, gives the
    same rows. ``dropDuplicates(keys)`` without the event time among the
    keys: Spark never forgets a key (its state grows with the distinct
    keys) but still drops the rows behind the watermark; gpuwm's dedup
    with no delay keeps every key, as ``explain`` says."""
    t = _input(spark, node.child())
    if _unbounded_join(t):
        raise Refused(_kind(node), "a dedup over a join with no time bound (its rows have no watermark to drain by)")
    if any(_id(a) not in t.columns for a in scala_iter(node.keys())):
        raise Refused(_kind(node), "a key the stage below does not give as a column")
    keys = [t.columns[_id(a)] for a in scala_iter(node.keys())]
    forever = _kind(node) == "Deduplicate" and (t.time is None or t.time[1] not in keys)
    if forever and (t.time is None or t.stages):
        over = f"a {t.stages[-1][0]}'s rows" if t.stages else "rows with no event time"
        raise Refused("Deduplicate", f"dropDuplicates without the event-time column among its keys over {over}: "
                                     "gpuwm keeps every key forever over a watermarked source only")
    out = [a for a in scala_iter(node.output()) if _id(a) in t.columns]
    t.stages.append(("dedup", keys, True) if forever else ("dedup", keys))
    t.output = [[[str(a.name()), {"col": t.columns[_id(a)]}] for a in out]]
    t.output_ids = {_id(a): str(a.name()) for a in out}
    call = "dropDuplicates" if _kind(node) == "Deduplicate" else "dropDuplicatesWithinWatermark"
    t.shown.append(f"dedup      {call}({[str(a.name()) for a in scala_iter(node.keys())]})" + (
        ": no event time among the keys, every key kept in state (as Spark keeps it)" if forever else ""))
    return t


#: the watermark delay of a join's inputs whose rows Spark never drops as late: a century (the watermark stays a
#: time pandas holds, from 1678 on)
NO_LATE_ROWS = timedelta(days=36_525)
_HOWS = {"Inner": "inner", "LeftOuter": "left", "RightOuter": "right", "FullOuter": "full"}
#: Spark's comparisons as a join condition's ops; each op as a bound on a time (not strict, and how far inside)
_SYMBOLS_OF = {"GreaterThanOrEqual": ">=", "GreaterThan": ">", "LessThanOrEqual": "<=", "LessThan": "<"}
_BOUND = {">=": (">=", 0), ">": (">=", 1), "<=": ("<=", 0), "<": ("<=", 1)}


def _join_side(spark, node) -> tuple[Translation, Any, str, set[int], list[tuple[str, str, int]]]:
    """A join's side: a watermarked source (:func:`_input`), or one that
    selects and renames its columns after ``withWatermark``, and may select
    ``window(ts, ...)`` there too (for Spark's join with the window among
    its keys): (its translation, the gpuwm window or None, its text for
    explain, Spark's ids of the window column as the side outputs it, its
    columns' names there for :func:`_rename`)."""
    from ...session import Session

    renamed: dict[int, int] = {}  # Spark's id of a renamed column -> the id it renames

    def resolved(i: int) -> int:
        while i in renamed:
            i = renamed[i]
        return i

    at = _through_renames(node, renamed)
    try:
        made, out, below = _windowing(at, "Join")
    except Refused:
        made = out = None
    win, shown, window_id = None, "", None
    if out is not None and str(out.name()) == "window":
        t = _input(spark, _through_renames(below, renamed))
        if t.stages or t.inputs or t.time is None:
            raise Refused("Join", "a window(...) in a join's side over rows that are not a watermarked source")
        ts = next((str(a.name()) for a in scala_iter(below.output()) if t.columns.get(resolved(_id(a))) == t.time[1]),
                  None)
        if ts is None:
            raise Refused("Join", "a window(...) of a column that is not the side's watermark column")
        win, shown = _window(spark, at, made, out, below, ts, None, t.time[1])
        if isinstance(win, Session):
            raise Refused("Join", f"{shown} in a join's keys: gpuwm joins in tumbling or hopping windows")
        window_id = _id(out)
    elif _kind(at) == "EventTimeWatermark" and renamed:
        t = _input(spark, at)
    else:
        return _input(spark, node), None, "", set(), []
    ids, picks = set(), []  # picks: (gpuwm's column, Spark's name of it here, Spark's id here)
    for a in scala_iter(node.output()):
        i = resolved(_id(a))
        if i == window_id:
            ids.add(_id(a))
        elif i in t.columns:
            picks.append((t.columns[i], str(a.name()), _id(a)))
    return t, win, shown, ids, picks


def _through_renames(node, renamed: dict[int, int]):
    """The node below ``node``'s selects of columns (renamed or not) and
    nodes that pass rows on unchanged; each renamed column's Spark id goes
    to ``renamed`` with the id it renames."""
    while True:
        kind = _kind(node)
        if kind in _TRANSPARENT:
            node = node.child()
            continue
        entries = list(scala_iter(node.projectList())) if kind == "Project" else None
        if entries is None or not all(_kind(e) == "AttributeReference" or (
                _kind(e) == "Alias" and _kind(e.child()) == "AttributeReference") for e in entries):
            return node
        renamed.update({_id(e): _id(e.child()) for e in entries if _kind(e) == "Alias"})
        node = node.child()


def _unused(name: str, taken: set[str], side: str) -> str:
    """``name`` made apart from ``taken`` for ``side``'s input: ``name__right``, then numbered."""
    got, n = f"{name}__{side}", 1
    while got in taken:
        got, n = f"{name}__{side}{n}", n + 1
    return got


def _rename(t: Translation, picks: list[tuple[str, str, int]], side: str, clash: set[str],
            taken: set[str] = frozenset()) -> None:
    """A watermarked source's columns as a join's side selects and names
    them after ``withWatermark`` (``picks``: gpuwm's column, its name there,
    Spark's id there; none: the side is the source): selected in the source
    below the watermark instead — the same rows, the watermark on the time
    column's new name — so the join's inputs have the names the query gives
    them, not the ones both sources have (``clash``). The source is kept as
    it is (and read by gpuwm's tasks where it can be) when nothing is
    renamed and no name clashes; a time column not selected (a window's
    side) whose name clashes is kept as ``__gpuwm_<side>_time``. A column
    named as one of ``taken`` (the left side's, for the right) gets a name
    of its own (:func:`_unused`): the join's output step names it as
    Spark does."""
    from pyspark.sql import functions as F

    if not picks and taken & set(t.columns.values()):  # the source as it is, its names the other side's too
        picks = [(g, g, i) for i, g in t.columns.items()]
    # a name the left side has already: kept apart here (Spark tells them apart by id; so does the step after)
    picks = [(g, _unused(n, taken, side) if n in taken else n, i) for g, n, i in picks]
    t.columns.update({i: g for g, _, i in picks})
    name = next((n for g, n, _ in picks if g == t.time[1]), None)
    if not picks or (all(g == n for g, n, _ in picks) and not clash):
        return
    cols = [F.col(_quoted(g)).alias(n) for g, n, _ in picks]
    if name is None:  # the time column is not selected (a window's side)
        name = f"__gpuwm_{side}_time" if t.time[1] in clash else t.time[1]
        cols.append(F.col(_quoted(t.time[1])).alias(name))
        t.shown_time = t.time[0] if name != t.time[1] else None
    t.source, t.column, t.time = t.source.select(*cols), name, (name, name)
    t.columns = {i: n for _, n, i in picks}


def _comma_join(filter_node) -> tuple[Any, list, list] | None:
    """``FROM a, b WHERE ...`` (Nexmark's SQL: q4, q9): a filter right above
    an inner join with no condition of its own. (The join, the conjuncts
    that are its condition — a comparison or equality of a column of each
    side —, the rest: a filter of the joined rows.) None for another
    shape."""
    node = filter_node.child()
    while _kind(node) in _TRANSPARENT:
        node = node.child()
    if _kind(node) != "Join" or node.condition().isDefined() or _kind(node.joinType()).rstrip("$") != "Inner":
        return None
    sides = [{_id(a) for a in scala_iter(c.output())} for c in (node.left(), node.right())]
    fold, rest = [], []
    for e in _conjuncts(filter_node.condition()):
        refs = {_id(a) for a in scala_iter(e.references())}
        cross = refs <= sides[0] | sides[1] and all(refs & side for side in sides)
        simple = (_kind(e) == "EqualTo" and all(_kind(x) == "AttributeReference" for x in (e.left(), e.right()))
                  or bool(_comparisons(e)))
        (fold if cross and simple else rest).append(e)
    return node, fold, rest


def _join(spark, node, extra: Sequence[Any] = ()) -> Translation:
    """A stream-stream join of two watermarked sources (Spark's symmetric
    hash join) on equal keys and either

    - a time range between their event times (``a.join(b, "k = k2 AND ts2
      BETWEEN ts AND ts + interval 20 seconds", how)``): gpuwm's interval
      join, ``right.time`` between ``left.time + lower`` and ``left.time +
      upper`` (a strict bound one microsecond inside);
    - equal event times (``ts = ts2`` among the keys): the interval join
      with bounds 0 and 0 and Spark's key-based state watermark
      (``time_key``);
    - the same window (``window(ts, ...)`` selected on each side, ``w =
      w2`` among the keys): gpuwm's window join, which under profile
      ``spark`` emits each pair as it matches, as Spark's does.

    Inner, left, right or full outer. A join with a static table (Nexmark
    q13's side input) is refused with its own reason. ``extra``: more
    conjuncts of its condition (a ``WHERE`` over ``FROM a, b``:
    :func:`_comma_join`)."""
    static = [name for name, child in (("left", node.left()), ("right", node.right())) if not child.isStreaming()]
    if static:
        raise Refused("Join", f"a stream–static join (its {static[0]} side is a table, not a stream): it keeps no "
                              "state and Spark runs it as written; for a window or a dedup over its rows, join "
                              "before withWatermark (the watermark then sees the joined rows, in Spark and gpuwm "
                              "alike) and gpuwm runs the rest")
    jt = _kind(node.joinType()).rstrip("$")
    if jt not in _HOWS:
        raise Refused("Join", f"a {jt} join: gpuwm joins streams inner, left, right or full outer")
    how = _HOWS[jt]
    sides, windows, picks = {}, {}, {}
    for name, child in (("left", node.left()), ("right", node.right())):
        t, win, shown_win, ids, picks[name] = _join_side(spark, child)
        if t.inputs:
            _joined_side(name, t)
        if t.time is None and not t.stages:
            raise Refused("Join", f"its {name} side has no event time")
        last = _last(t)  # (projects over a stage's rows pass its rows on)
        if last is not None and last[0] not in ("window", "dedup", "join"):
            raise Refused("Join", f"its {name} side is a {last[0]}'s rows: gpuwm joins a watermarked "
                                  "source, a window aggregation's rows, a dedup's or a join's")
        below = [st[0] for st in t.stages if st[0] not in ("dedup", "project")]
        if last is not None and last[0] == "dedup" and below:
            raise Refused("Join", f"its {name} side is a dedup of a {below[-1]}'s rows: gpuwm joins a dedup of "
                                  "a watermarked source")
        if t.stages and win is not None:
            raise Refused("Join", f"a window(...) in its {name} side over a stage's rows")
        sides[name], windows[name] = t, (win, shown_win, ids)
    # sides an aggregation makes: their window column (a dedup's side keeps its source's columns and time)
    derived = {n: t.window_id for n, t in sides.items() if _aggregated(t)}
    graph, wcols = None, {}
    if any(t.stages for t in sides.values()):  # a graph: each side's stages over its source, the same subtree once
        for name, t in sides.items():
            t.columns.update({i: g for g, _, i in picks[name]})  # a source side's columns as it names them
            if t.time is not None:
                t.time = next((n for g, n, _ in picks[name] if g == t.time[1]), t.time[0]), t.time[1]
        graph, inputs, wcols, joined = _join_graph(sides)
    else:
        clash = set(sides["left"].source.columns) & set(sides["right"].source.columns)
        _rename(sides["left"], picks["left"], "left", clash)
        _rename(sides["right"], picks["right"], "right", clash, set(sides["left"].source.columns))
        inputs = sides
    # each side's columns by Spark's ids of the columns it outputs (a self-join's sides may share the ids below)
    outs = {n: {_id(a) for a in scala_iter(c.output())} for n, c in (("left", node.left()), ("right", node.right()))}
    cols = {n: {i: c for i, c in t.columns.items() if i in outs[n]} for n, t in sides.items()}
    times = {}  # Spark's id of each side's watermark column -> the side
    for name, t in sides.items():
        times.update({i: name for i, c in cols[name].items() if c == t.time[1]})
    # an aggregation side's window bounds as its event time (window_time, the end less 1 µs) shifted: a comparison
    # of the other side's time with them is a time bound (q7's ``ts >= wstart AND ts < wend``), which cleans state
    shifted: dict[int, int] = {}
    for name in derived:
        t = sides[name]
        size = t.window_of[0].size // timedelta(microseconds=1)
        start, end = wcols[name]
        for i, c in cols[name].items():
            if c in (start, end):
                shifted[i], times[i] = (1 - size if c == start else 1), name
    wins = {i: name for name, (_, _, ids) in windows.items() for i in ids}
    # a join side's other event times (its own right side's): gpuwm's join rows carry their left side's time alone
    others = {i: name for name, t in sides.items() for i, c in cols[name].items()
              if t.inputs and c in {o[1] for o in t.other_times} and c != t.time[1]}
    dwins = {i: name for name, i in derived.items() if i is not None}  # a window aggregation's window column
    cond = node.condition()
    conjuncts = (_conjuncts(cond.get()) if cond.isDefined() else []) + list(extra)
    if not conjuncts:
        raise Refused("Join", "no join condition: gpuwm joins on equal keys within a time range")
    on, bounds, equal, where = [], {}, set(), []  # equal: "time" (ts = ts2), "window" (w = w2)
    by_window = False  # a bound read from an aggregation side's window bounds
    for e in conjuncts:
        k = _kind(e)
        read = {_id(a) for a in scala_iter(e.references())} & set(others)
        if read:
            side = others[min(read)]
            raise Refused("Join", f"the condition {e.sql()} reads the time of its {side} side's own right side: a "
                                  f"join's rows carry its left side's event time ({sides[side].time[0]}); "
                                  "select that one")
        if k == "EqualTo" and all(_kind(x) == "AttributeReference" for x in (e.left(), e.right())):
            a, b = _id(e.left()), _id(e.right())
            if a in outs["right"]:
                a, b = b, a
            if wins.get(a) == "left" and wins.get(b) == "right":
                equal.add("window")
                continue
            if dwins.get(a) == "left" and dwins.get(b) == "right":  # two aggregations' windows: equal windows
                lw, rw = (sides[n].window_of[0] for n in ("left", "right"))
                if (lw.size, lw.slide) != (rw.size, rw.slide):
                    raise Refused("Join", f"{e.sql()}: windows of two sizes are never equal")
                equal.add("time")
                continue
            if times.get(a) == "left" and times.get(b) == "right" and a not in shifted and b not in shifted:
                equal.add("time")
                continue
            if a in cols["left"] and b in cols["right"] and a not in times and b not in times:
                on.append([cols["left"][a], cols["right"][b]])
                continue
            raise Refused("Join", f"the condition {e.sql()}: gpuwm joins on equal keys (a column of each side), equal "
                                  "event times or equal windows")
        if not _comparisons(e):
            raise Refused("Join", f"the condition {e.sql()}: gpuwm joins on equal keys (a column of each side), "
                                  "comparisons of a column of each side, and time bounds")
        for sym, a, b in _comparisons(e):
            got = _range_of(*_BOUND[sym], a, b, times, shifted)
            if got is None:  # the rest of the condition: Spark's post-join filter, one column of each side
                ia, ib = (_id(x) if _kind(x) == "AttributeReference" else None for x in (a, b))
                if ib in cols["left"] and ia in cols["right"]:
                    ia, ib, sym = ib, ia, FLIP[sym]
                if ia not in cols["left"] or ib not in cols["right"] or ia in wins or ib in wins \
                        or ia in dwins or ib in dwins:
                    raise Refused("Join", f"the condition {e.sql()}: gpuwm joins on equal keys (column = column), "
                                          "bounds between the two sides' watermark columns, equal event times or "
                                          "equal windows, and compares a column of each side")
                where.append([cols["left"][ia], sym, cols["right"][ib]])
                continue
            for which, value in got:
                if which in bounds:
                    raise Refused("Join", f"two {which} bounds on the time between the sides")
                bounds[which] = value
            if any(x in shifted for x in (_time_term(a)[0], _time_term(b)[0])):
                by_window = True
    left, right = sides["left"], sides["right"]
    if not on and not equal:
        raise Refused("Join", "gpuwm's join needs equal keys (column = column), equal event times or equal "
                              "windows besides a time range")
    (lwin, lshown, _), (rwin, rshown, _) = windows["left"], windows["right"]
    between, window, time = None, None, left.time
    if lwin is not None or rwin is not None:
        if "window" not in equal or lwin is None or rwin is None or (lwin.size, lwin.slide) != (rwin.size, rwin.slide):
            raise Refused("Join", f"a window in a join's side ({lshown or rshown}) that is not a key equal to the "
                                  f"same window of the other side ({rshown or lshown})")
        if bounds or "time" in equal or where:
            raise Refused("Join", "a join in the same window with a time condition or another comparison as well")
        from ...window import Tumble

        window = {"tumble": lwin.size} if isinstance(lwin, Tumble) else {"hop": lwin.size, "slide": lwin.slide}
        shown = f"join       {how} on {on} in the same {lshown}"
        time = None  # its rows' event time is their window
    elif "time" in equal:
        if bounds:
            raise Refused("Join", "a join on equal event times with a time range as well")
        on.append([left.time[1], right.time[1]])
        shown = f"join       {how} on {on} (equal event times)"
    elif not bounds and how == "inner":  # no time bound (Nexmark q3 as written): every pair, state kept forever
        if any(t.inputs for t in sides.values()):
            raise Refused("Join", "a join with no time bound over a join's rows: gpuwm joins a join's rows within "
                                  "a time range of its event time")
        between = [right.time[1], left.time[1], None, None]
        shown = f"join       {how} on {on}, no time bound: every row kept in state (as Spark keeps it)"
    else:
        if set(bounds) != {"lower", "upper"} and how != "inner":
            raise Refused("Join", f"a {how} outer join needs both a lower and an upper bound of one side's event "
                                  "time around the other's, equal event times or equal windows (Spark refuses it "
                                  "too: an outer row goes out once nothing can match it)")
        between = [right.time[1], left.time[1], *(None if b not in bounds else timedelta(microseconds=bounds[b])
                                                  for b in ("lower", "upper"))]

        def signed(td: timedelta) -> str:
            return ("- " if td < timedelta(0) else "+ ") + str(abs(td))

        lt, rt = left.time[0], right.time[0]
        if None not in between:
            shown = f"join       {how} on {on}, {rt} between {lt} {signed(between[2])} and {lt} {signed(between[3])}"
        else:
            op, b, kept = (">=", between[2], lt) if between[3] is None else ("<=", between[3], rt)
            shown = f"join       {how} on {on}, {rt} {op} {lt} {signed(b)}; no bound cleans {kept}'s side: its " \
                    "rows are kept in state (as Spark keeps them)"
    if by_window:
        shown += " (its window's bounds as its window_time's: state cleaned by the watermark; Spark keeps every row)"
    if where:
        shown += f", where {' and '.join(' '.join(w) for w in where)}"
    columns = {**left.columns, **right.columns}
    absent = {"left": how in ("right", "full"), "right": how in ("left", "full")}  # sides an output row may lack
    output = list(scala_iter(node.output()))
    seen = [str(a.name()) for a in output]
    # Spark's names, but a name both sides give (Spark tells them apart by id): gpuwm's own for that column
    ids = {_id(a): str(a.name()) if seen.count(str(a.name())) == 1 or _id(a) not in columns else columns[_id(a)]
           for a in output}
    step, windows = [], {}
    for a in output:
        side = wins.get(_id(a))
        if dwins.get(_id(a)) is not None:  # an aggregation's window: the struct of its side's columns
            start, end = wcols[dwins[_id(a)]]
            step.append([ids[_id(a)], _bounds_struct(start, end)])
            windows[_id(a)] = start, end, sides[dwins[_id(a)]].time[1]
        elif side is None:
            if _id(a) not in columns:  # (a join's rows' window, a struct its output step makes)
                raise Refused("Join", f"its {'left' if _id(a) in outs['left'] else 'right'} side's column {a.name()}, "
                                      "a window of a join's rows: gpuwm's rows carry its bounds, not the struct "
                                      "(select window.start and window.end)")
            step.append([ids[_id(a)], {"col": columns[_id(a)]}])
        elif absent[side]:  # null where the side is absent, as Spark's
            step.append([ids[_id(a)], {"when": [{"is_not_null": {"col": sides[side].time[1]}}, _WINDOW_STRUCT]}])
        else:
            step.append([ids[_id(a)], _WINDOW_STRUCT])
    unbounded = between is not None and between[2] is None and between[3] is None
    stage = ("join", "left", "right", on, between, how, window, where, None)  # (its output lag: _consumed)
    if graph is None:
        return Translation(None, left.column, left.delay, [stage], [step], left.shown + right.shown + [shown], ids,
                           columns, time=None if unbounded else time, inputs=inputs,
                           other_times=[] if time is None or unbounded else [right.time])
    *body, (_, (_, feeds)) = graph
    stages = [st for st, _ in body] + [("join", *feeds) + stage[3:]]
    wiring = [w for _, w in body] + [("join", feeds)]
    shown_graph = "graph      " + graph_text(wiring)
    return Translation(None, left.column, left.delay, stages, [step],  # (a shared stage's line once)
                       left.shown + [x for x in right.shown if x not in left.shown] + [shown, shown_graph], ids, columns,
                       time=None if unbounded else time, inputs=inputs,
                       other_times=[] if time is None or unbounded else
                       [*left.other_times, right.time, *right.other_times], graph=wiring,
                       derived=tuple(derived), joined=joined, windows=windows,
                       lag=(lambda: _output_lag(spark, node, conjuncts)) if derived else None)


def _output_lag(spark, node, conjuncts: list) -> timedelta:
    """How far the output watermark of Spark's join ``node`` (its condition:
    ``conjuncts``) trails its input watermark, as Spark derives it
    (``StreamingSymmetricHashJoinExec.produceOutputWatermark``: the least of
    the sides' state watermarks and the input's, each side's from Spark's
    own ``StreamingSymmetricHashJoinHelper.getStateWatermark``). Asked of
    a join with an aggregation's rows as a side once an operator reads its
    rows (:func:`_consumed`). Where the condition bounds a side by an
    aggregation's window bounds (Nexmark q7's ``ts >= wstart AND ts <
    wend``), they carry no watermark in Spark, so a side of them alone has
    no state watermark and makes the other's none either — the output
    watermark is the input's, where gpuwm's own is its least state
    watermark; keyed by the windows (q8's ``aw = bw``), the input's too. Asked of the
    join as Spark's optimizer leaves it (:func:`_as_optimized`): a side's
    column no operator reads is pruned, and its watermark with it."""
    jvm = spark._jvm
    node, conjuncts = _as_optimized(node, conjuncts)
    cond = conjuncts[0]
    for c in conjuncts[1:]:
        cond = jvm.org.apache.spark.sql.catalyst.expressions.And(cond, c)
    lefts, rights = ({_id(a) for a in scala_iter(side.output())} for side in (node.left(), node.right()))
    keys: tuple[list, list] = ([], [])  # the equal keys of a column of each side (a watermark's: key-based)
    for c in conjuncts:
        if _kind(c) == "EqualTo" and all(_kind(x) == "AttributeReference" for x in (c.left(), c.right())):
            a, b = c.left(), c.right()
            if _id(a) in rights and _id(b) in lefts:
                a, b = b, a
            if _id(a) in lefts and _id(b) in rights:
                keys[0].append(a)
                keys[1].append(b)
    w = 10 ** 12  # an input watermark (ms): each state watermark is it plus a constant
    helper = getattr(jvm.org.apache.spark.sql.execution.streaming.operators.stateful.join,
                     "StreamingSymmetricHashJoinHelper")
    try:
        got = helper.getStateWatermark(node.left().output(), node.right().output(), jvm.PythonUtils.toSeq(keys[0]),
                                       jvm.PythonUtils.toSeq(keys[1]), jvm.scala.Option.apply(cond),
                                       jvm.scala.Option.apply(jvm.java.lang.Long(w)), False)
    except Exception as e:  # (py4j's: Spark's own check of the sides' event-time columns)
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise Refused("Join", f"Spark's join output watermark could not be derived ({first})") from None
    lags = [0] + [w - int(x.get()) for x in (got._1(), got._2()) if x.isDefined()]
    return timedelta(milliseconds=max(lags))


def _as_optimized(node, conjuncts: list) -> tuple[Any, list]:
    """The join ``node`` (its condition: ``conjuncts``) in the optimized
    plan of the query (:func:`_optimized`): the join there whose
    condition reads columns of this one's alone, the most of them, and
    whose columns are this one's; its conjuncts. ``node`` as it is where
    none is."""
    want = {_id(a) for c in conjuncts for a in scala_iter(c.references())}
    outs = {_id(a) for a in scala_iter(node.output())}
    best, most, todo = None, 0, [_OPTIMIZED.get()] if _OPTIMIZED.get() is not None else []
    while todo:
        n = todo.pop()
        todo.extend(scala_iter(n.children()))
        if _kind(n) != "Join" or not n.condition().isDefined():
            continue
        refs = {_id(a) for a in scala_iter(n.condition().get().references())}
        if refs <= want and len(refs) > most and {_id(a) for a in scala_iter(n.output())} <= outs:
            best, most = n, len(refs)
    return (node, conjuncts) if best is None else (best, _conjuncts(best.condition().get()))


def _join_graph(sides: dict[str, Translation]) -> tuple[list, dict[str, Translation], dict[str, tuple[str, str]],
                                                        list[str]]:
    """A join whose sides are stages' rows as a graph: each side's source
    one named input (the same ``withWatermark`` subtree, one input), each
    side's stages over it (the same stages over the same input, once), a
    join side's two sources and its join (a graph's join side: its stages,
    named after the side, over its inputs made this graph's), and a select renaming one
    side's columns apart from the other's (the right side's; the left's
    where the right is a source). Each
    side's translation then names its columns as the join reads them, and
    its time is its event time (a window's ``window_time``). Returns the
    stages with their wiring — ``[(stage, (name, feeds)), ...]``, ending
    with a placeholder whose feeds are the join's —, the inputs, each
    aggregation side's window columns (start, end) as the join reads them,
    and the join's rows' columns."""
    from ...aggregates import WINDOW_TIME

    inputs: dict[str, Translation] = {}
    by_origin: dict[str, str] = {}
    made: dict[tuple, str] = {}  # (origin, the stages so far) -> the stage's name
    graph: list = []
    feeds = []

    def source(t: Translation) -> str:  # a watermarked source's input: one per withWatermark subtree
        if t.origin not in by_origin:
            by_origin[t.origin] = f"in{len(by_origin)}"
            inputs[by_origin[t.origin]] = t
        elif list(inputs[by_origin[t.origin]].source.columns) != list(t.source.columns):
            raise Refused("Join", "one watermarked source read by two joins under other column names: gpuwm "
                                  "reads a source once; rename its columns before withWatermark")
        return by_origin[t.origin]

    def columns(t: Translation) -> list[str]:  # the stream's columns: a window's or a join's output, or the source's
        if _aggregated(t):  # (with the columns projects over its rows add)
            _, _, keys, aggs = _last(t)
            return ["window_start", "window_end", *keys, *aggs, WINDOW_TIME, *_added(t)]
        if t.graph is not None:  # a graph's join
            return list(t.joined) + _added(t)
        if t.inputs:  # (an interval join's rows: its left side's columns, then its right side's)
            return [c for n in ("left", "right") for c in t.inputs[n].source.columns] + _added(t)
        return list(t.source.columns) + _added(t)  # (a dedup's rows are its source's)

    for name, t in sides.items():
        if t.graph is not None:  # a graph's join: its stages over its inputs, each under its own name; a window
            ren = {n: source(i) for n, i in t.inputs.items()}  # its names -> this graph's
            for st, (own, ins) in zip(t.stages, t.graph):
                ins = tuple(ren[i] for i in ins)
                st = ("join", *ins) + tuple(st[3:]) if st[0] == "join" else st
                key = (ins, repr(st))
                if key not in made:
                    made[key] = f"{name}_{own}"
                    graph.append((st, (made[key], ins)))
                ren[own] = made[key]
            feed = ren["join"]
            for st in t.stages[len(t.graph):]:
                key = ((feed,), repr(st))
                if key not in made:
                    made[key] = f"{name}{len(made)}"
                    graph.append((st, (made[key], (feed,))))
                feed = made[key]
            if _aggregated(t):
                t.time, t.other_times = ("window_time", WINDOW_TIME), []
            feeds.append(feed)
            continue
        if t.inputs:  # a join's rows (:func:`_joined_side`): its two sources, then its stage, once; a window over them
            ins = tuple(source(t.inputs[n]) for n in ("left", "right"))
            feed = None
            for k, st in enumerate(t.stages):
                key = (ins, repr(t.stages[:k + 1]))
                if key not in made:
                    made[key] = f"{name}{k}"
                    graph.append((("join", *ins) + tuple(st[3:]), (made[key], ins)) if k == 0 else
                                 (st, (made[key], (feed,))))
                feed = made[key]
            if _aggregated(t):  # (its rows' event time: the window's; the join's times are gone)
                t.time, t.other_times = ("window_time", WINDOW_TIME), []
            feeds.append(feed)
            continue
        feed = source(t)
        for k, st in enumerate(t.stages):
            key = (t.origin, repr(t.stages[:k + 1]))
            if key not in made:
                made[key] = f"{name}{k}"
                graph.append((st, (made[key], (feed,))))
            feed = made[key]
        if _aggregated(t):
            t.time = ("window_time", WINDOW_TIME)
        feeds.append(feed)

    # the columns both sides have renamed apart (Spark tells them apart by id) by a select over a stage's rows: the
    # right side's, or the left's where the right is a source (a select of an input would cost an exchange)
    cols = {n: columns(t) for n, t in sides.items()}
    n, other = ("left", "right") if not sides["right"].stages else ("right", "left")
    t, taken = sides[n], set(cols["left"]) | set(cols["right"])
    new = {c: _unused(c, taken, n) if c in cols[other] else c for c in cols[n]}
    if any(new[c] != c for c in cols[n]):
        k = 0 if n == "left" else 1
        graph.append((("select", [[new[c], c] for c in cols[n]]), (f"{n}{len(t.stages)}", (feeds[k],))))
        feeds[k] = graph[-1][1][0]
        t.columns = {i: new[c] for i, c in t.columns.items()}
        t.time = (t.time[0], new[t.time[1]])
        t.other_times = [(shown, new.get(c, c)) for shown, c in t.other_times]
    wcols = {s: tuple(new.get(c, c) if s == n else c for c in t.window_of[1:])
             for s, t in sides.items() if _aggregated(t)}
    graph.append((None, ("join", tuple(feeds))))
    joined = [new.get(c, c) if s == n else c for s in ("left", "right") for c in cols[s]]
    return graph, inputs, wcols, joined


def _joined_side(name: str, t: Translation) -> None:
    """A join's side that is a join's rows: an interval join (or one on
    equal event times) of two watermarked sources — or a graph's join of
    them, dedups' and aggregations' rows (its output watermark as Spark's:
    :func:`_consumed`) —, its rows carrying its left side's event time or
    the ``window_time`` of an aggregation side's window (Spark's join needs
    one event-time column on each side: the query selects one); refused,
    in one line, otherwise."""
    at = 0 if t.graph is None else len(t.graph) - 1  # the join's stage (a graph's: its last)
    if t.stages[-1][0] not in ("join", "window") or len(t.stages) > at + 2:
        raise Refused("Join", f"its {name} side is a {t.stages[-1][0]}'s rows over a join: gpuwm joins a join's "
                              "own rows, or a window aggregation's over them")
    if t.stages[at][6] is not None:
        raise Refused("Join", f"its {name} side is a join in the same window, whose rows carry a window, not an "
                              "event time")
    if t.stages[-1][0] == "join" and (_unbounded_join(t) or t.time is None):
        raise Refused("Join", f"its {name} side is a join with no time bound, whose rows carry no watermark")


def _last_at(t: Translation) -> int:
    """The index of ``t``'s last stage that is not a project (which passes
    that stage's rows on, with columns added and rows filtered), or -1."""
    return next((k for k in range(len(t.stages) - 1, -1, -1) if t.stages[k][0] != "project"), -1)


def _last(t: Translation) -> tuple | None:
    """``t``'s last stage that is not a project (:func:`_last_at`), or None."""
    at = _last_at(t)
    return t.stages[at] if at >= 0 else None


def _added(t: Translation) -> list[str]:
    """The columns the project stages after ``t``'s last other stage add."""
    return [c for st in t.stages[_last_at(t) + 1:] for step in st[1] if isinstance(step, list) for c, _ in step]


def _aggregated(t: Translation) -> bool:
    """Whether ``t``'s rows are a window aggregation's (its last stage, but
    for projects over them)."""
    return (_last(t) or ("",))[0] == "window"


def _unbounded_join(t: Translation) -> bool:
    """Whether ``t``'s last stage is an inner join without a time bound."""
    return bool(t.stages) and t.stages[-1][0] == "join" and t.stages[-1][4] is not None \
        and t.stages[-1][4][2] is None and t.stages[-1][4][3] is None


def _comparisons(e) -> list[tuple[str, Any, Any]]:
    """A conjunct as comparisons ``(op, a, b)`` (:data:`_SYMBOLS_OF`): a
    ``BETWEEN`` as its two; anything else none."""
    k = _kind(e)
    if k == "Between":  # input >= lower AND input <= upper
        return [(">=", e.input(), e.lower()), ("<=", e.input(), e.upper())]
    return [(_SYMBOLS_OF[k], e.left(), e.right())] if k in _SYMBOLS_OF else []


def _unbounded_lateness(t: Translation) -> None:
    """An inner join without a time bound drops a side's rows behind the
    watermark only where its input still has the side's event-time column:
    Spark's optimizer prunes the column when nothing above reads it (Nexmark
    q3 selects no time), and its join then finds no watermark column and
    drops no row. gpuwm does as Spark's plan does: with both times pruned,
    no row is late (a delay of :data:`NO_LATE_ROWS`); with one pruned and
    not the other, it refuses."""
    plan, join = _OPTIMIZED.get(), None  # (the query's plan as Spark's optimizer leaves it)
    stack = [plan]
    while stack and join is None:
        node = stack.pop()
        if _kind(node) == "Join":
            join = node
        stack.extend(scala_iter(node.children()))
    if join is None:
        return
    kept = [any(a.metadata().contains("spark.watermarkDelayMs") for a in scala_iter(c.output()))
            for c in (join.left(), join.right())]
    if t.derived:  # a stage's rows: Spark drops none as late where its columns carry no watermark; nor does
        #            gpuwm's join: a window's rows come out above the watermark it drained with (their time ends
        #            in 999 µs, Spark's watermark in whole ms)
        if all(k for k, side in zip(kept, ("left", "right")) if side not in t.derived):
            return
        raise Refused("Join", "a join with no time bound whose query does not read its source side's event time: "
                              "Spark then drops none of its rows as late, gpuwm's join would")
    if all(kept):
        return
    if any(kept):
        raise Refused("Join", "a join with no time bound whose query reads one side's event time and not the "
                              "other's: Spark drops one side's late rows and keeps the other's")
    for side in t.inputs.values():
        side.delay = NO_LATE_ROWS
    t.shown.append("late rows  none: the query reads neither event time, so Spark's join finds no watermark "
                   "column and drops no row")


def _filter(spark, conjuncts: list, child):
    """Spark's ``Filter`` of the ``conjuncts`` (ANDed) over ``child``."""
    jvm = spark._jvm.org.apache.spark.sql.catalyst
    cond = conjuncts[0]
    for e in conjuncts[1:]:
        cond = jvm.expressions.And(cond, e)
    return jvm.plans.logical.Filter(cond, child)


def _conjuncts(e) -> list:
    if _kind(e) == "And":
        return _conjuncts(e.left()) + _conjuncts(e.right())
    return [e]


def _time_term(e) -> tuple[int, int] | None:
    """``attr [+/- interval]`` as (Spark's id of attr, the interval in microseconds), or None."""
    k = _kind(e)
    if k == "AttributeReference":
        return _id(e), 0
    if k == "Cast" and str(e.dataType().simpleString()) == "timestamp":
        return _time_term(e.child())
    if k == "DatetimeSub":
        return _time_term(e.replacement())
    if k == "TimestampAddInterval":
        base, iv = _time_term(e.start()), e.interval()
        sign = 1
        if _kind(iv) == "UnaryMinus":
            sign, iv = -1, iv.child()
        if base is None or _kind(iv) != "Literal":
            return None
        typ = str(iv.dataType().simpleString())
        if typ.startswith(("interval day", "interval hour", "interval minute", "interval second")):
            us = int(iv.value())
        elif typ == "interval":
            try:
                us = _interval(iv.value()) // timedelta(microseconds=1)
            except Refused:
                return None
        else:
            return None
        return base[0], base[1] + sign * us
    return None


def _range_of(op: str, strict: int, a, b, times: dict[int, str],
              shifted: Mapping[int, int] = {}) -> list[tuple[str, int]] | None:
    """``a op b`` (``strict``: one µs inside) as a bound of the right side's
    time less the left's, where ``a`` and ``b`` are the sides' times
    (``times``: Spark's id -> side; ``shifted``: ids that are a side's time
    plus so many µs) plus intervals; None for another comparison."""
    ta, tb = _time_term(a), _time_term(b)
    if ta is None or tb is None or {times.get(ta[0]), times.get(tb[0])} != {"left", "right"}:
        return None
    ta, tb = (ta[0], ta[1] + shifted.get(ta[0], 0)), (tb[0], tb[1] + shifted.get(tb[0], 0))
    if times[ta[0]] == "left":  # a op b  <=>  b (reversed op) a: the right side's time first
        ta, tb, op = tb, ta, {">=": "<=", "<=": ">="}[op]
    # right + ra  op  left + lb   <=>   right - left  op  lb - ra
    d = tb[1] - ta[1]
    return [("lower", d + strict)] if op == ">=" else [("upper", d - strict)]


_STATEFUL = {"Aggregate": _aggregate, "DeduplicateWithinWatermark": _dedup, "Deduplicate": _dedup, "Join": _join}


def _conf(spark, key: str, given: Any, default: Any) -> Any:
    return given if given is not None else spark.conf.get(f"spark.gpuwm.{key}", default)


class Accelerated:
    """What :func:`accelerate` returns: ``.writeStream`` as on a DataFrame;
    ``.translation`` (None when Spark runs the query) and ``.refused``
    (what kept it in Spark, or None)."""

    def __init__(self, df, *, vnodes: int | None = None, profile: str | None = None, fallback: str | None = None,
                 read: str | None = None, backend: str | None = None, verbose: bool = False,
                 on_batch: Any = None, state_ttl: Any = None):
        spark = df.sparkSession
        self.df = df
        self.fallback = _conf(spark, "fallback", fallback, "spark")
        if self.fallback not in FALLBACKS:
            raise ConfigError(f"spark.gpuwm.fallback must be one of {FALLBACKS}, got {self.fallback!r}")
        self.profile = _conf(spark, "profile", profile, "spark")
        vn = _conf(spark, "vnodes", vnodes, None)
        try:
            self.vnodes = None if vn is None else int(vn)
        except ValueError:
            raise ConfigError(f"spark.gpuwm.vnodes must be an integer, got {vn!r}") from None
        self.read, self.backend, self.verbose, self.on_batch = read, backend, verbose, on_batch
        self.translation: Translation | None = None
        self.refused: Refused | None = None
        try:
            self.translation = translate(df, _conf(spark, "stateTtl", state_ttl, None))
        except Exception as e:  # (an exception escaping translation is a bug: Spark still runs the query)
            self._refuse(refusal(e))

    def _refuse(self, r: Refused) -> None:
        """Spark runs the query (one warning line), or the error the user asked for."""
        self.translation, self.refused = None, r
        if self.fallback == "error":
            raise ConfigError(f"gpuwm cannot run {r.operator}: {r.reason} (spark.gpuwm.fallback=error)")
        print(f"gpuwm: warning: the query runs in Spark, not gpuwm: {r.operator}: {r.reason}", file=sys.stderr,
              flush=True)

    @property
    def writeStream(self) -> "AcceleratedWriter":
        return AcceleratedWriter(self)

    def pipeline(self, checkpoint: str, sink: tuple = ("console",), name: str | None = None, mode: str = "append"):
        """The gpuwm :class:`~gpuwm.spark.Pipeline` of the translated query
        in output ``mode`` (its output columns checked against Spark's:
        :class:`Refused` if they would differ, or if gpuwm does not run the
        query in that mode)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        from ..driver.kafka import same_columns
        from .pipeline import Pipeline

        t = self.translation
        _check_mode(mode, t.stages)
        src = {n: i.source for n, i in t.inputs.items()} if t.inputs else t.source
        p = Pipeline(src, checkpoint, vnodes=self.vnodes, backend=self.backend, read=self.read,
                     on_batch=self.on_batch, verbose=self.verbose, name=name)
        for n, i in (t.inputs or {None: t}).items():
            p.watermark(i.column, delay=i.delay, profile=self.profile, input=n)
        reads: dict[str, list[str]] = {}
        for n, i in (t.inputs or {}).items():  # reads of one withWatermark under other filters: one watermark
            if i.node is not None:
                reads.setdefault(i.node, []).append(n)
        for names in reads.values():
            if len(names) > 1:
                p.shared_watermark(*names)
        try:
            for k, st in enumerate(t.stages):
                # a graph's stage: its name, and what it reads (a join names its own)
                graphed = t.graph is not None and k < len(t.graph)  # (a stage after a graph reads the one before)
                named = {"name": t.graph[k][0]} if graphed else {}
                wired = {**named, "input": t.graph[k][1][0]} if graphed and st[0] != "join" else named
                if st[0] == "window":  # update / complete: each batch's changed / all (window, key) rows, as Spark's
                    p.window(st[1], by=st[2], aggs=st[3], emit={"update": "on-update", "complete": "complete"}.get(
                        mode, "on-window-close"), **wired)
                elif st[0] == "join":
                    p.join(st[1], st[2], on=st[3], between=st[4], how=st[5], window=st[6], where=st[7],
                           output_behind=st[8], **named)
                elif st[0] == "topn":
                    p.stage(st[1], **wired)
                elif st[0] == "select":
                    p.add("select", columns=st[1], **wired)
                elif st[0] == "project":
                    p.add("project", steps=st[1], **wired)
                else:
                    p.add("dedup", key=st[1], **({"forever": True} if st[2:] else {}), **wired)
        except (ConfigError, SchemaError) as e:  # a chain or a join gpuwm's stages cannot make
            raise Refused("query", str(e)) from None
        if sink[0] == "parquet":
            p.write_parquet(sink[1])
        elif sink[0] == "foreachBatch":  # the function gets the query's own columns and types
            p.foreach_batch(sink[1], self.df.schema)
        else:
            p.write_console(*sink[1:])
        p.output(t.output)
        got, want = p.output_schema(), to_arrow_schema(self.df.schema)
        if not same_columns(got, want):
            raise Refused("query", f"gpuwm's output columns ({_schema_text(got)}) would not be Spark's "
                                   f"({_schema_text(want)})")
        return p

    def runner(self, checkpoint: str, sink: tuple = ("console",), name: str | None = None):
        """What runs the query: gpuwm's :class:`~gpuwm.spark.Pipeline`, or
        — where gpuwm cannot run it (``spark.gpuwm.fallback=spark``, the
        warning said once) — :class:`SparkRun`, Spark's own query as
        written. Both take ``start(trigger=..., query_name=...)``."""
        if self.translation is not None:
            try:
                return self.pipeline(checkpoint, sink, name=name)
            except Exception as e:
                self._refuse(refusal(e))
        return SparkRun(self.df, checkpoint, sink)

    def explain(self, checkpoint: str | None = None) -> str:
        """Which operators gpuwm runs and which Spark does, and why (with
        the query's ``checkpoint`` where known: a Nexmark source's tasks
        read by it)."""
        if self.translation is None:
            r = self.refused
            return f"Spark runs the whole query: {r.operator}: {r.reason}"
        t = self.translation
        try:
            p = self.pipeline(checkpoint or f"{tempfile.gettempdir()}/gpuwm-explain")
        except Exception as e:
            r = refusal(e)
            return f"Spark runs the whole query: {r.operator}: {r.reason}"
        from ..driver.direct import direct_reason
        from ..driver.kafka import read_path

        ins = t.inputs or {None: t}
        why, _, kafka = direct_reason(t.source, {n: i.source for n, i in t.inputs.items()} if t.inputs else None,
                                      p.checkpoint) if (self.read or "auto") != "spark" else ("read='spark'", [], None)
        src = " and ".join(_describe_source(i.source._jdf.queryExecution().analyzed()) for i in ins.values())
        lines = [f"gpuwm runs (profile {self.profile}, vnodes {self.vnodes or 1}):"]
        for n, i in ins.items():
            lines.append(f"  watermark  {i.shown_time or i.column}, delay {i.delay}" + (f" ({n})" if n else ""))
            if i.pushed:
                lines.append(f"    of rows  where {i.pushed} (Spark's optimizer filters them below the watermark)")
        lines += [f"  {s}" for s in t.shown]
        lines.append(f"  output     {', '.join(self.df.columns)}")  # pipeline() checked they are gpuwm's
        read = read_path(kafka) if kafka is not None else "its input read by gpuwm's tasks"
        lines.append(f"Spark runs: the source, {src}" + (
            f" ({read})" if why is None else f" (its rows handed to gpuwm: {why})"))
        return "\n".join(lines)


def _check_mode(mode: str, stages: Sequence[tuple]) -> None:
    """Refuse an output mode gpuwm does not run the query in: append; update
    for one tumbling or hopping window alone (each batch's changed rows, as
    Spark's update mode gives them; Spark allows no other stateful operator
    beside an aggregation in update mode) or a dedup alone (its rows are
    final: update is append); complete for one window alone (every
    window's values each batch, none closing; no row late, a session's as
    late as in append mode).
    Update over a session window is refused in one line, as Spark's
    checker refuses it."""
    from ...aggregates import DISTINCT
    from ...session import Session

    if mode == "append":
        return
    kinds = [st[0] for st in stages]
    if mode == "complete":
        if kinds == ["window"]:
            return
        raise Refused("writeStream", f"output mode 'complete' with {' then '.join(kinds)}: gpuwm runs complete "
                                     "for one window")
    if mode == "update":
        if any(st[0] == "window" and any(fn in DISTINCT for _, fn in st[3].values()) for st in stages):
            raise ConfigError("output mode 'update' with a DISTINCT aggregate: Spark refuses DISTINCT on a stream, "
                              "and gpuwm emits it when its window closes; use append (or complete)")
        if kinds == ["window"] and not isinstance(stages[0][1], Session) or kinds == ["dedup"]:
            return
        if "window" in kinds and any(st[0] == "window" and isinstance(st[1], Session) for st in stages):
            raise ConfigError("output mode 'update' over a session window: Spark refuses it too "
                              "(STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION); use append")
        raise Refused("writeStream", f"output mode 'update' with {' then '.join(kinds)}: gpuwm runs one window "
                                     "or one dedup in update mode")
    raise Refused("writeStream", f"output mode {mode!r}: gpuwm runs append, update and complete")


class SparkRun:
    """A query Spark runs as written (what :func:`accelerate` did not
    translate), with the calls ``gpuwm run`` makes on a Pipeline:
    :meth:`start`, :meth:`explain`, ``history`` (gpuwm's batch metrics:
    none) and ``checkpoint``."""

    def __init__(self, df, checkpoint: str, sink: tuple):
        from ..storage.checkpoint import Checkpoint, Location, spark_fs_options

        self.df, self.sink = df, sink
        self.checkpoint = Checkpoint(Location.of(checkpoint, spark_fs_options(df.sparkSession), "checkpoint"))
        self.history: list[dict] = []
        self.interrupted = False

    def start(self, *, trigger: Any = None, query_name: str | None = None):
        """Spark's ``writeStream`` of the query, in append mode, to the sink;
        returns its ``StreamingQuery`` (over Kafka: :func:`~gpuwm.spark.front.pipeline.restarting`)."""
        w = self.df.writeStream.outputMode("append").option("checkpointLocation", self.checkpoint.loc.uri)
        if self.sink[0] == "parquet":
            w = w.format("parquet").option("path", self.sink[1])
        elif self.sink[0] == "foreachBatch":
            w = w.foreachBatch(self.sink[1])
        else:
            w = w.format("console").option("numRows", str(self.sink[1] if len(self.sink) > 1 else 20))
        if trigger:
            w = w.trigger(**trigger)
        if query_name:
            w = w.queryName(query_name)
        from ..driver.kafka import source_options
        from .pipeline import restarting

        return restarting(w.start, self.checkpoint) if source_options(self.df) else w.start()

    def explain(self, trigger: Any = None) -> str:
        return "Spark runs the whole query (as written, its own sink and checkpoint)"


def _describe_source(plan) -> str:
    """A source plan in a few words: its top node, and the source it reads."""
    stack, leaf = [plan], None
    while stack:
        node = stack.pop()
        if _kind(node) == "StreamingRelation":
            leaf = f"{node.dataSource().className()} {node.sourceName()}"
        elif _kind(node) == "StreamingRelationV2":
            leaf = str(node.sourceName())
        stack.extend(scala_iter(node.children()))
    top = _kind(plan)
    return (leaf or top) if top.startswith("StreamingRelation") else f"{top} over {leaf or 'a source'}"


def _schema_text(schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


class _DriverSink:
    """A sink of gpuwm's own that the driver runs for each batch with rows,
    before gpuwm commits the batch, marked with the query's id and the
    batch id so that a batch replayed after a crash lands once."""

    skip_empty = True  # (the driver does not call it for a batch that staged no rows)

    def __init__(self, checkpoint: str):
        self.checkpoint = checkpoint
        self._app: str | None = None

    def app_id(self, spark) -> str:
        """The query's id, as Spark keeps it in ``<checkpoint>/metadata`` across restarts."""
        if self._app is None:
            from ..storage.checkpoint import Location, spark_fs_options

            meta = Location.of(self.checkpoint, spark_fs_options(spark), "checkpoint").read_json("metadata") or {}
            self._app = meta.get("id") or self.checkpoint
        return self._app

    def __call__(self, batch_df, batch_id: int) -> None:
        """As a ``foreachBatch`` function: the batch's rows through :meth:`write_arrow`."""
        self.write_arrow(batch_df.toArrow(), batch_id, batch_df.sparkSession)


class KafkaAppend(_DriverSink):
    """``format("kafka")`` as gpuwm runs it, exactly once: each micro-batch's
    rows — Spark's Kafka sink columns: ``value``, and ``key``, ``topic``,
    ``partition``, ``headers`` where the query has them, as its last select
    made them (``CAST(k AS STRING)``, ``to_json(struct(*))``,
    ``array(struct(...))``: evaluated by gpuwm) — produced in one Kafka
    transaction (confluent-kafka's transactional producer,
    ``transactional.id`` ``gpuwm-<query id>``), which also commits, as the
    consumer group ``gpuwm-<query id>``'s offset of partition 0 of the
    marker topic (the ``topic`` option, else the batch's first topic by
    name), the batch id + 1: the durable marker of the last batch written.
    A batch replayed after a crash between Kafka's commit and gpuwm's finds
    its marker and is skipped; one that crashed inside its transaction is
    aborted when the restarted producer fences it. A ``read_committed``
    consumer sees every row once (Spark's own Kafka sink is at least once).
    As Spark's: the ``topic`` option overrides a ``topic`` column, a row
    without a topic fails the batch, a row without a ``partition`` goes
    where Java's producer puts it (librdkafka's ``murmur2_random``
    partitioner: a key's murmur2 hash, as Java's). The ``kafka.*`` options
    are the producer's and the marker's consumer's settings (TLS and SASL
    as librdkafka takes them). The marker lives as long as the broker keeps
    the group's offsets (``offsets.retention.minutes``)."""

    OPTIONS = ("topic", "checkpointlocation")
    COLUMNS = {"key": ("string", "binary"), "value": ("string", "binary"), "topic": ("string",),
               "partition": ("int",), "headers": ("array<struct<key:string,value:binary>>",)}
    CHUNK = 20_000  # messages handed to librdkafka per produce_batch call

    def __init__(self, options: Mapping[str, str], checkpoint: str, columns: Sequence[str] = ("value",)):
        super().__init__(checkpoint)
        self.topic = next((v for k, v in options.items() if k.lower() == "topic"), None)
        self.conf = {k[6:]: v for k, v in options.items() if k.lower().startswith("kafka.")}
        if not (self.topic or "topic" in columns) or "bootstrap.servers" not in self.conf:
            raise ConfigError("the kafka sink needs option('kafka.bootstrap.servers', ...), and option('topic', "
                              "...) or a topic column")
        self._producer = None
        self._known: set[str] = set()  # topics the broker has

    def write_arrow(self, table, batch_id: int, spark) -> None:
        import pyarrow.compute as pc
        from confluent_kafka import Consumer, Producer, TopicPartition

        first = self.topic or pc.min(table.column("topic")).as_py()
        if first is None:
            raise ValueError(_NULL_TOPIC)
        group = f"gpuwm-{self.app_id(spark)}"
        marker = TopicPartition(first, 0)
        consumer = Consumer({**self.conf, "group.id": group, "enable.auto.commit": False,
                             "isolation.level": "read_committed"})
        try:
            self._check_topics(consumer, [self.topic] if self.topic else pc.unique(table.column("topic")).to_pylist())
            done = _committed(consumer, marker)
            if done >= batch_id + 1:  # written before a crash that gpuwm's commit did not outlive
                return
            if self._producer is None:
                self._producer = Producer({"partitioner": "murmur2_random", **self.conf, "transactional.id": group,
                                           "enable.idempotence": True})
                self._producer.init_transactions(60)  # fences (aborts) an earlier attempt's open transaction
            p = self._producer
            p.begin_transaction()
            try:
                for (topic, part), some in _messages(table, self.topic).items():
                    for lo in range(0, len(some), self.CHUNK):
                        _produce_all(p, topic, part, some[lo:lo + self.CHUNK])
                p.send_offsets_to_transaction([TopicPartition(marker.topic, 0, batch_id + 1)],
                                              consumer.consumer_group_metadata(), 60)
                p.commit_transaction(120)
            except BaseException:
                p.abort_transaction(60)
                raise
        finally:
            consumer.close()

    def _check_topics(self, consumer, topics: list) -> None:
        """Each of ``topics`` exists (a topic the broker does not have fails
        the batch in one line, before its transaction), asked once a topic."""
        from confluent_kafka import KafkaError

        for t in topics:
            if t is None or t in self._known:
                continue
            meta = consumer.list_topics(t, timeout=30).topics.get(t)
            if meta is None or meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise ValueError(f"topic {t!r} does not exist on {self.conf['bootstrap.servers']} (create it; "
                                 "gpuwm's Kafka sink does not)")
            self._known.add(t)

    def close(self) -> None:
        """Once the query stopped: send what is queued and let the producer go."""
        p, self._producer = self._producer, None
        if p is not None:
            p.flush(30)


_NULL_TOPIC = "null topic present in the data: use the topic option for setting a topic (as Spark's Kafka sink)"


def _messages(table, topic: str | None) -> dict[tuple[str, int | None], list[dict]]:
    """A batch's rows as confluent-kafka's messages, by topic (``topic``,
    else each row's) and partition (None: the partitioner's; librdkafka
    2.16's ``produce_batch`` does not take one per message)."""
    n, cols = table.num_rows, table.column_names
    fields = {"value": _bytes(table.column("value"))}
    if "key" in cols:
        fields["key"] = _bytes(table.column("key"))
    if "headers" in cols:
        fields["headers"] = [None if h is None else [(e["key"], e["value"]) for e in h]
                             for h in table.column("headers").to_pylist()]
    topics = [topic] * n if topic else table.column("topic").to_pylist()
    if None in topics:
        raise ValueError(_NULL_TOPIC)
    parts = table.column("partition").to_pylist() if "partition" in cols else [None] * n
    out: dict[tuple[str, int | None], list[dict]] = {}
    names = list(fields)
    for t, part, *vals in zip(topics, parts, *fields.values()):
        out.setdefault((t, part), []).append({k: v for k, v in zip(names, vals) if v is not None or k == "value"})
    return out


def _produce_all(p, topic: str, part: int | None, msgs: list[dict]) -> None:
    """Queue every message (to ``part``, else where the partitioner puts it): with ``produce_batch`` (one call for many: the
    per-message ``produce`` call was 3-5 us a message), or one ``produce``
    a message where they have headers (which ``produce_batch`` does not
    take); those the full local queue refused are queued again once it
    drained; any other refusal is raised."""
    from confluent_kafka import KafkaError, KafkaException

    to = {} if part is None else {"partition": part}
    if any("headers" in m for m in msgs):
        for m in msgs:
            while True:
                try:
                    p.produce(topic, **m, **to)
                    break
                except BufferError:
                    p.poll(0.05)  # let the queue drain
        p.poll(0)
        return
    while msgs:
        if p.produce_batch(topic, msgs, **to) == len(msgs):
            p.poll(0)
            return
        failed = [m for m in msgs if "_error" in m]
        other = next((m["_error"] for m in failed if m["_error"].code() != KafkaError._QUEUE_FULL), None)
        if other is not None:
            raise KafkaException(other)
        msgs = [{k: v for k, v in m.items() if k != "_error"} for m in failed]
        p.poll(0.05)  # let the queue drain


def _committed(consumer, tp, timeout: float = 60) -> int:
    """The group's committed offset of ``tp`` (negative: none), retried
    while the group's coordinator is still being chosen or loaded (a new
    group, a broker just started)."""
    import time

    from confluent_kafka import KafkaError, KafkaException

    choosing = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                KafkaError.COORDINATOR_NOT_AVAILABLE)
    until = time.monotonic() + timeout
    while True:
        try:
            return consumer.committed([tp], timeout=30)[0].offset
        except KafkaException as e:
            err = e.args[0]
            if not (err.retriable() or err.code() in choosing) or time.monotonic() > until:
                raise
            time.sleep(0.5)


def _bytes(col) -> list:
    """A string or binary column's values as bytes (null: None)."""
    import pyarrow as pa

    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary())
    return col.to_pylist()


class DeltaAppend(_DriverSink):
    """``format("delta")`` as gpuwm runs it: each micro-batch's rows
    appended to the Delta table at ``options['path']`` in the driver, before
    gpuwm commits the batch, as one Delta commit marked with Delta's
    application transaction (app id: the streaming query's id from its
    checkpoint; version: the batch id), as Spark's own Delta sink marks
    them — so a batch replayed after a crash between Delta's commit and
    gpuwm's is found committed and skipped: each row lands once.

    The writer (:attr:`writer`): delta-rs (``deltalake``, the ``delta``
    extra) from the batch's Arrow, read straight from the staged Parquet —
    no Spark job; where it is not installed, Delta's Spark writer (the
    session needs Delta Lake, ``io.delta:delta-spark``), which skips a
    marked batch itself. bench_sinks.py: 0.017-0.096 s a batch with
    delta-rs, 2.0-2.4 s with Delta's Spark writer. ``mergeSchema`` is the one writer
    option taken. Batches without rows write nothing."""

    OPTIONS = ("path", "checkpointlocation", "mergeschema")
    #: "delta-rs", "spark", or None: delta-rs where ``deltalake`` imports
    writer: str | None = None

    def __init__(self, options: Mapping[str, str], checkpoint: str):
        super().__init__(checkpoint)
        opts = {k.lower(): v for k, v in options.items()}
        self.path = opts["path"]
        self.merge = opts.get("mergeschema", "false").lower() == "true"
        if self.writer is None:
            try:
                import deltalake  # noqa: F401
            except ImportError:
                self.writer = "spark"
            else:
                self.writer = "delta-rs"
        if self.writer == "delta-rs":
            self.write_arrow = self._write_arrow  # the driver hands the batch over as Arrow

    def __call__(self, batch_df, batch_id: int) -> None:
        """Delta's Spark writer: it skips a batch whose (app id, version) it committed."""
        (batch_df.write.format("delta").option("mergeSchema", str(self.merge).lower())
         .option("txnAppId", self.app_id(batch_df.sparkSession)).option("txnVersion", batch_id)
         .mode("append").save(self.path))

    def _write_arrow(self, table, batch_id: int, spark) -> None:
        """delta-rs: skip a batch the table's transaction for this query already holds, else append it."""
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
        from deltalake.exceptions import TableNotFoundError

        app = self.app_id(spark)
        try:
            done = DeltaTable(self.path).transaction_version(app)
        except TableNotFoundError:
            done = None
        if done is not None and done >= batch_id:  # committed before a crash that gpuwm's commit did not outlive
            return
        write_deltalake(self.path, table, mode="append", schema_mode="merge" if self.merge else None,
                        commit_properties=CommitProperties(app_transactions=[Transaction(app, batch_id)]))


class AcceleratedWriter:
    """Every call of PySpark's ``DataStreamWriter``, on a gpuwm query.
    gpuwm runs ``format`` ``parquet``, ``console``, ``delta``
    (:class:`DeltaAppend`) or ``kafka`` (:class:`KafkaAppend`) and ``foreachBatch``
    (:meth:`gpuwm.spark.Pipeline.foreach_batch`), with ``option``/
    ``options`` ``checkpointLocation`` (``path`` for Parquet, ``numRows``
    for the console), ``outputMode`` ``append`` (``update`` for one window
    or dedup alone, ``complete`` for one window alone), any ``trigger`` but a
    continuous one, ``queryName``, ``start``, and ``toTable`` of a Delta
    table. Any other call —
    ``foreach``, ``toTable`` of another table, ``partitionBy`` or ``clusterBy`` with
    columns, another format, mode or option — makes Spark run the query
    (``spark.gpuwm.fallback``: one warning line saying why, or the error),
    its writer given every call as it was written."""

    def __init__(self, acc: Accelerated):
        self._acc = acc
        self._calls: list[tuple[str, tuple, dict]] = []  # as written: replayed on Spark's writer by a fallback
        self._format = "parquet"
        self._options: dict[str, str] = {}
        self._mode = "append"
        self._trigger: dict[str, Any] = {}
        self._name: str | None = None
        self._other: list[str] = []  # calls gpuwm does not run, as the user wrote them
        self._func: Any = None  # foreachBatch's function

    def _called(self, name: str, *args: Any, **kwargs: Any) -> "AcceleratedWriter":
        self._calls.append((name, args, kwargs))
        return self

    def format(self, source: str) -> "AcceleratedWriter":
        self._format = source
        return self._called("format", source)

    def _set(self, options: dict[str, Any]) -> None:
        """Options as Spark's writer reads them: text, booleans as ``true``/``false``."""
        self._options.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()})

    def option(self, key: str, value: Any) -> "AcceleratedWriter":
        self._set({key: value})
        return self._called("option", key, value)

    def options(self, **options: Any) -> "AcceleratedWriter":
        self._set(options)
        return self._called("options", **options)

    def outputMode(self, outputMode: str) -> "AcceleratedWriter":
        self._mode = outputMode
        return self._called("outputMode", outputMode)

    def trigger(self, *, processingTime: str | None = None, once: bool | None = None,
                continuous: str | None = None, availableNow: bool | None = None) -> "AcceleratedWriter":
        given = {"processingTime": processingTime, "once": once, "continuous": continuous,
                 "availableNow": availableNow}
        self._trigger = {k: v for k, v in given.items() if v is not None}
        return self._called("trigger", **self._trigger)

    def queryName(self, queryName: str) -> "AcceleratedWriter":
        self._name = queryName
        return self._called("queryName", queryName)

    def partitionBy(self, *cols: Any) -> "AcceleratedWriter":
        if cols and cols != ([],):
            self._other.append(f"partitionBy({', '.join(map(repr, cols))}): gpuwm's parquet sink writes "
                               "batch_id=<N>/part-<P>.parquet")
        return self._called("partitionBy", *cols)

    def clusterBy(self, *cols: Any) -> "AcceleratedWriter":
        if cols and cols != ([],):
            self._other.append(f"clusterBy({', '.join(map(repr, cols))}): gpuwm's sinks do not cluster")
        return self._called("clusterBy", *cols)

    def foreachBatch(self, func: Any) -> "AcceleratedWriter":
        self._format, self._func = "foreachBatch", func  # as Spark: the sink until another format()
        return self._called("foreachBatch", func)

    def foreach(self, f: Any) -> "AcceleratedWriter":
        self._other.append("foreach: gpuwm's sinks are parquet, console and foreachBatch")
        return self._called("foreach", f)

    def _why_not(self) -> Refused | None:
        if self._other:
            return Refused("writeStream", self._other[0])
        if self._format not in ("parquet", "console", "foreachBatch", "delta", "kafka"):
            return Refused("writeStream", f"format {self._format!r}: gpuwm writes parquet, console, delta, kafka "
                                          "and foreachBatch")
        allowed = {"checkpointlocation"} | {"parquet": {"path"}, "console": {"numrows"},
                                            "delta": set(DeltaAppend.OPTIONS),
                                            "kafka": set(KafkaAppend.OPTIONS)}.get(self._format, set())
        other = sorted(k for k in self._options if k.lower() not in allowed
                       and not (self._format == "kafka" and k.lower().startswith("kafka.")))
        if other:
            return Refused("writeStream", f"option(s) {other}: gpuwm's {self._format} sink does not apply them")
        if "continuous" in self._trigger:
            return Refused("writeStream", "a continuous trigger: gpuwm runs micro-batches")
        if self._format == "kafka":
            types = {f.name: f.dataType.simpleString() for f in self._acc.df.schema}
            bad = [f"{c} {t}" for c, t in types.items() if t not in KafkaAppend.COLUMNS.get(c, ())]
            if bad or "value" not in types:
                return Refused("writeStream", f"format 'kafka' with columns {', '.join(bad) or 'without value'}: "
                                              "gpuwm writes Spark's Kafka sink columns (value, key: string or "
                                              "binary; topic string; partition int; headers "
                                              "array<struct<key:string,value:binary>>)")
        return None

    def _start_args(self, path: str | None, format: str | None, outputMode: str | None, partitionBy: Any,
                    queryName: str | None, options: dict) -> None:
        """``start``'s and ``toTable``'s own arguments, as the calls they stand for."""
        if format is not None:
            self.format(format)
        if outputMode is not None:
            self.outputMode(outputMode)
        if partitionBy is not None:
            self.partitionBy(*([partitionBy] if isinstance(partitionBy, str) else partitionBy))
        if queryName is not None:
            self.queryName(queryName)
        if options:
            self.options(**options)
        if path is not None:
            self.option("path", path)

    def start(self, path: str | None = None, format: str | None = None, outputMode: str | None = None,
              partitionBy: Any = None, queryName: str | None = None, **options: Any):
        """Start the query (gpuwm's, or Spark's as written); returns Spark's ``StreamingQuery``."""
        self._start_args(path, format, outputMode, partitionBy, queryName, options)
        acc = self._acc
        if acc.translation is not None:
            why = self._why_not()
            if why is None:
                opts = {k.lower(): v for k, v in self._options.items()}
                ck = opts.get("checkpointlocation")
                if ck is None and self._format != "console":
                    raise ConfigError(f"a streaming query's {self._format} sink needs "
                                      "option('checkpointLocation', ...)")
                ck = ck or tempfile.mkdtemp(prefix="gpuwm-console-")
                if self._format in ("parquet", "delta") and not opts.get("path"):
                    raise ConfigError(f"the {self._format} sink needs a path: option('path', ...) or start(path)")
                try:
                    p = acc.pipeline(ck, self._sink(opts, ck), name=self._name, mode=self._mode.lower())
                except Exception as e:  # Spark runs it, with every call as written
                    acc._refuse(refusal(e))
                else:
                    return p.start(trigger=self._trigger or None, query_name=self._name)
            else:
                acc._refuse(why)
        return self._spark_writer().start()

    def _sink(self, opts: Mapping[str, str], ck: str) -> tuple:
        """The sink :meth:`Accelerated.pipeline` takes for this writer's format."""
        if self._format == "foreachBatch":
            return ("foreachBatch", self._func)
        return sink_tuple(self._format, self._options, ck, self._acc.df.columns)

    def toTable(self, tableName: str, format: str | None = None, outputMode: str | None = None,
                partitionBy: Any = None, queryName: str | None = None, **options: Any):
        """As Spark's ``toTable``: the catalog table ``tableName`` made if it
        does not exist (the query's columns, nullable; ``format``'s provider,
        else ``spark.sql.sources.default``; ``option('path')`` its location),
        then written as ``format(<provider>).start(<its location>)``. gpuwm
        runs a Delta table's (:class:`DeltaAppend` at its location); a table
        of another provider (gpuwm's Parquet sink writes ``batch_id=<N>``
        folders, not Spark's file sink log) or a view, Spark writes, after
        the fallback's one line, with every call as written."""
        self._start_args(None, format, outputMode, partitionBy, queryName, options)
        acc = self._acc
        if acc.translation is not None:
            why = Refused("writeStream", self._other[0]) if self._other else None
            if why is None:
                table, why = _table(acc.df, tableName, self._format if self._formatted() else None, self._options)
            if why is None:
                saved = self._calls, self._format, dict(self._options)
                self.format("delta").option("path", table)  # Spark's own toTable of a file table
                why = self._why_not()
                try:
                    if why is None:
                        return self.start()
                finally:
                    self._calls, self._format, self._options = saved
            acc._refuse(why)
        return self._spark_writer().toTable(tableName)

    def _formatted(self) -> bool:
        return any(name in ("format", "foreachBatch") for name, _, _ in self._calls)

    def _spark_writer(self):
        """Spark's own writer of the query, given every call as the user wrote it."""
        w = self._acc.df.writeStream
        for name, args, kwargs in self._calls:
            w = getattr(w, name)(*args, **kwargs)
        return w


def sink_tuple(fmt: str, options: Mapping[str, str], ck: str, columns: Sequence[str]) -> tuple:
    """The sink :meth:`Accelerated.pipeline` takes for ``format(fmt)`` with
    ``options`` (a ``writeStream``'s or a spec's), on checkpoint ``ck``, of
    rows with ``columns``: a path gpuwm's tasks write, the console, or a
    driver sink (:class:`DeltaAppend`, :class:`KafkaAppend`)."""
    if fmt == "parquet":
        return ("parquet", next(v for k, v in options.items() if k.lower() == "path"))
    if fmt == "delta":
        return ("foreachBatch", DeltaAppend(options, ck))
    if fmt == "kafka":
        if "value" not in columns:
            raise ConfigError(f"a kafka sink writes a value column (and key, topic, partition, headers: Spark's "
                              f"Kafka sink columns); the query's are {list(columns)}: name them in a select")
        return ("foreachBatch", KafkaAppend(options, ck, columns))
    return ("console", int(next((v for k, v in options.items() if k.lower() == "numrows"), 20)))


def _table(df, name: str, fmt: str | None, options: Mapping[str, str]) -> tuple[str | None, Refused | None]:
    """The location of the Delta table ``name`` that ``df``'s ``toTable``
    writes, made as Spark's ``toTable`` makes it where it does not exist
    (``fmt``, else Spark's default source; ``options``' ``path``: an
    external table there); or why gpuwm does not write it (Spark does)."""
    spark = df.sparkSession
    said = f"toTable({name!r})"
    if spark.catalog._jcatalog.tableExists(name):
        info = {r[0].strip(): (r[1] or "").strip() for r in spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()}
        provider = info.get("Provider", "").lower()
        if info.get("Type", "").upper() == "VIEW" or not info.get("Location"):
            return None, Refused("writeStream", f"{said}: a view, or a table without a location")
        if provider != "delta" or fmt not in (None, "delta"):
            return None, Refused("writeStream", f"{said}: a {provider or 'catalog'} table; gpuwm writes Delta "
                                                "tables (a Parquet table is Spark's file sink's, with its log)")
        return _local(info["Location"]), None
    provider = (fmt or spark.conf.get("spark.sql.sources.default", "parquet")).lower()
    if provider != "delta":
        return None, Refused("writeStream", f"{said}: a new {provider} table; gpuwm writes Delta tables "
                                            "(a Parquet table is Spark's file sink's, with its log)")
    from pyspark.sql.types import StructType

    path = next((v for k, v in options.items() if k.lower() == "path"), None)
    spark.catalog.createTable(name, path=path, source="delta",
                              schema=StructType.fromJson(_nullable(df.schema.jsonValue())))
    return _table(df, name, fmt, options)


def _nullable(t: Any) -> Any:
    """A Spark type's JSON with every field, element and value nullable (Scala's ``asNullable``)."""
    if isinstance(t, dict):
        return {k: True if k in ("nullable", "containsNull", "valueContainsNull") else _nullable(v)
                for k, v in t.items()}
    if isinstance(t, list):
        return [_nullable(v) for v in t]
    return t


def _local(uri: str) -> str:
    """A catalog location as delta-rs takes it: a ``file:`` URI as a path."""
    from urllib.parse import unquote, urlparse

    u = urlparse(uri)
    return unquote(u.path) if u.scheme == "file" else uri


def accelerate(df, **settings: Any) -> Accelerated:
    """``df`` (a streaming DataFrame: PySpark's API or ``spark.sql``) run by
    gpuwm where it can be, else by Spark; use the result as ``df``:
    ``accelerate(df).writeStream.format("parquet")...start()``.

    Settings, as keywords or Spark conf: ``vnodes`` (``spark.gpuwm.vnodes``,
    default 1), ``profile`` (``spark.gpuwm.profile``, default ``spark``:
    Spark's results), ``fallback`` (``spark.gpuwm.fallback``: ``spark``,
    the default, or ``error``), ``state_ttl`` (``spark.gpuwm.stateTtl``,
    e.g. ``"1 hour"``: a rank with no window among its partition keys —
    Nexmark q18, q19 — closes each partition once the watermark passes its
    latest row's event time by that long, and emits its rows then; without
    it such a rank is refused: its state would never be cleaned); ``read``,
    ``backend``, ``verbose``, ``on_batch`` as :class:`~gpuwm.spark.Pipeline`
    takes them."""
    return Accelerated(df, **settings)


def explain(df, **settings: Any) -> str:
    """Print (and return) which operators of ``df`` gpuwm runs and which
    Spark does, with the reason for each it does not."""
    settings.setdefault("fallback", "spark")
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):  # the fallback's warning: the text says it
        text = Accelerated(df, **settings).explain()
    print(text)
    return text
