"""The watermarked source: ``withWatermark`` over Spark's source, the filters
and new columns between it and the operator, and the filters Spark's
optimizer moves below it."""

from __future__ import annotations

from typing import Any

from ...catalyst.plans import (
    TRANSPARENT,
    canonical,
    conjuncts_of,
    expr_id,
    no_ids,
    node_kind,
    of_rows,
    peel,
    unary_chain,
)
from ...jvm.objects import scala_iter
from ...jvm.versions import inline_cte_args
from ..translation import Refused, Translation, interval


def inlined(spark, plan):
    """The analyzed ``plan`` with the relations of SQL's ``WITH`` clauses
    (``WithCTE``) put where they are read, as Spark's optimizer puts them
    (its own ``InlineCTE``, every one inlined): a relation read twice
    becomes two copies with new ids, as a self-join's sides are."""
    if not plan.containsPattern(spark._jvm.org.apache.spark.sql.catalyst.trees.TreePattern.CTE()):
        return plan
    return spark._jvm.org.apache.spark.sql.catalyst.optimizer.InlineCTE(*inline_cte_args()).apply(plan)


def optimized_plan(spark, plan):
    """The analyzed ``plan`` as Spark's optimizer makes it, as a
    micro-batch's is (filters pushed down, columns no operator reads
    pruned)."""
    try:
        return spark._jsparkSession.sessionState().optimizer().execute(plan)
    except Exception as e:  # (py4j's error; the query's optimizer failing is Spark's to report)
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise Refused("OPTIMIZER_FAILED", "the query", f"Spark's optimizer failed on its plan ({first}), so gpuwm cannot tell which "
                                   "filters its watermarks see") from None


def below_watermarks(spark, plan, optimized: Any = None) -> dict[int, list]:
    """The filters Spark's optimizer puts below each ``withWatermark`` of
    the analyzed ``plan`` (by its event time's expression id): filters
    the query writes after a stateful operator (``HAVING k > 0`` on a
    grouping key, a filter on one side's columns after a join, a join
    condition's conjunct of one side) that ``PushDownPredicates`` moves down
    through aggregations, joins and the watermark, and ``isnotnull`` of a
    join's keys that ``InferFiltersFromConstraints`` adds. The watermark
    sees only the rows they keep, so gpuwm's source applies them too
    (:func:`under_watermark`). Spark's own optimizer says where they go,
    run on the analyzed plan as a micro-batch's is. A ``withWatermark``
    the plan reads twice (one node, q7's bids joined and aggregated; gpuwm
    reads it once) gets the rows either read keeps (:func:`_either`), as
    Spark's watermark for that node sees them. (``optimized``: the plan
    optimized, where it is at hand.)"""
    optimized = optimized_plan(spark, plan) if optimized is None else optimized
    reads: dict[int, list[list]] = {}
    todo = [optimized]
    while todo:
        node = todo.pop()
        todo.extend(scala_iter(node.children()))
        if node_kind(node) == "EventTimeWatermark":  # the filters down its source's nodes (to another watermark)
            chain = unary_chain(node.child())
            chain = chain[:next((k for k, n in enumerate(chain) if node_kind(n) == "EventTimeWatermark"), len(chain))]
            conds = [c for n in chain if node_kind(n) == "Filter" for c in conjuncts_of(n.condition()) if c.deterministic()]
            reads.setdefault(expr_id(node.eventTime()), []).append(conds)
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
    common = [c for c in reads[0] if all(canonical(c) in {canonical(x) for x in r} for r in reads[1:])]
    shared = {canonical(c) for c in common}
    rest = [[c for c in r if canonical(c) not in shared] for r in reads]
    if any(not r for r in rest):  # a read that keeps whatever the common conjuncts keep
        return common
    if len({tuple(sorted(canonical(c) for c in r)) for r in rest}) == 1:  # the same conjuncts on every read
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


def _pushed_below(ctx, at, top):
    """``withWatermark``'s child (``at`` the watermark, ``top`` the
    operator's input over it) with the filters Spark's optimizer places
    below ``at`` (:func:`below_watermarks`) that the query writes above
    its operator, over it, each where the columns it reads are (above a
    select of the source that renames them, below it); the text of those
    filters. What the optimizer places there from ``top``'s own nodes (a
    filter before ``withWatermark``, or between it and the operator) is
    ``top``'s already, in gpuwm's source: not added twice (the optimizer
    run on ``top`` alone says which, in its own spelling: ``price < 950``
    and ``isnotnull(price)`` for ``price < CAST(950 AS BIGINT)``)."""
    jvm = ctx.jvm
    logical = jvm.org.apache.spark.sql.catalyst.plans.logical
    base, i = at.child(), expr_id(at.eventTime())
    conds = ctx.pushed.get(i, [])
    if conds:
        own = {canonical(c) for c in below_watermarks(ctx.spark, top).get(i, [])}
        conds = [c for c in conds if canonical(c) not in own]
    if not conds:
        return base, ""

    def place(node, c):  # ``node`` with ``c`` over the highest node (of its unary chain) that gives what c reads
        refs = {expr_id(a) for a in scala_iter(c.references().toSeq())}
        if refs <= {expr_id(a) for a in scala_iter(node.output())}:
            return logical.Filter(c, node)
        kids = list(scala_iter(node.children()))
        if len(kids) != 1:
            raise Refused("PUSHED_FILTER", "EventTimeWatermark", f"Spark's optimizer puts the filter `{no_ids(str(c.sql()))}` below "
                                                "the watermark, where gpuwm cannot place it")
        return node.withNewChildren(jvm.PythonUtils.toSeq([place(kids[0], c)]))

    for c in conds:
        base = place(base, c)
    return base, " AND ".join(no_ids(str(c.sql())) for c in conds)


def _node_id(at) -> str:
    """Spark's id of ``withWatermark`` node ``at`` (its ``WatermarkTracker``
    keeps one watermark per id; a self-join's copy of the node keeps it),
    or its event time's expression id where Spark has no node ids."""
    try:
        return str(at.nodeId().toString())
    except Exception:  # noqa: BLE001  (Spark 3.x: no nodeId)
        return f"#{expr_id(at.eventTime())}"


def under_watermark(ctx, node) -> Translation:
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
    filters and selects are a project stage, :func:`project_stage`; after the
    last operator, the sink's projection.)"""
    at, chain = peel(node, through=TRANSPARENT)
    if node_kind(at) != "EventTimeWatermark":  # (a stateful operator's rows: _input makes a project stage of them)
        raise Refused("NO_WATERMARK", node_kind(node), f"no withWatermark below it, but a {node_kind(at)}")
    ts = at.eventTime()
    if str(ts.dataType().simpleString()) != "timestamp":
        raise Refused("WATERMARK_TYPE", "EventTimeWatermark", f"its column {ts.name()} is {ts.dataType().simpleString()}, "
                                            "not a timestamp")
    timed = {expr_id(ts)}  # Spark's ids of the event time and the columns computed from it
    same = {expr_id(ts)}  # Spark's ids of the event time and its renames: gpuwm's watermark reads one of them
    plan, pushed = _pushed_below(ctx, at, node)
    jvm = ctx.jvm
    for n in reversed(chain):
        exprs = [n.condition()] if node_kind(n) == "Filter" else list(scala_iter(n.projectList()))
        shaky = next((e for e in exprs if not e.deterministic()), None)
        if shaky is not None:
            raise Refused("NOT_DETERMINISTIC", node_kind(n), f"`{no_ids(str(shaky.sql()))}` between withWatermark and the operator is not "
                                    "deterministic: Spark keeps it above the watermark")
        if node_kind(n) == "Filter":
            on_time = [c for c in conjuncts_of(n.condition())
                       if {expr_id(a) for a in scala_iter(c.references().toSeq())} & timed]
            if on_time:
                raise Refused("TIME_FILTER", "Filter", f"a filter on the event time (`{no_ids(str(on_time[0].sql()))}`) between "
                                        "withWatermark and the operator: Spark's watermark sees the rows before it, "
                                        "gpuwm's would see those after; filter before withWatermark")
        else:
            for e in exprs:
                if node_kind(e) == "AttributeReference":
                    continue
                if node_kind(e) == "Alias" and node_kind(e.child()) == "AttributeReference" and expr_id(e.child()) in same:
                    same.add(expr_id(e))
                if {expr_id(a) for a in scala_iter(e.references().toSeq())} & timed:
                    timed.add(expr_id(e))
            if not same & {expr_id(a) for a in scala_iter(n.output())}:
                raise Refused("TIME_DROPPED", "Project", f"a select drops the event time {ts.name()} between withWatermark and the "
                                         "operator")
        plan = n.withNewChildren(jvm.PythonUtils.toSeq([plan]))
    names = [str(a.name()) for a in scala_iter(node.output())]
    if chain and len(set(names)) != len(names):
        raise Refused("DUPLICATE_NAMES", "Project", f"a select gives two columns one name ({names})")
    time = next(str(a.name()) for a in scala_iter(node.output()) if expr_id(a) in same)
    return Translation(of_rows(ctx.spark, plan), time, interval(at.delay()),
                       columns={expr_id(a): str(a.name()) for a in scala_iter(node.output())},
                       time=(time, time),
                       origin=ctx.source_name(plan, at),
                       pushed=pushed, node=_node_id(at))
