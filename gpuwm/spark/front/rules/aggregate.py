"""The rule for Spark's ``Aggregate``: a window aggregation (tumbling,
hopping, session), or one by the window of the aggregation below."""

from __future__ import annotations

from ...catalyst.expressions import Untranslatable, project_expr
from ...catalyst.plans import as_column, descendants, expr_id, no_ids, node_kind
from ...jvm.objects import scala_iter
from ..registry import register
from ..translation import (
    WINDOW_STRUCT,
    Refused,
    Translation,
    added_columns,
    bounds_struct,
    last_stage,
    options_of,
    stage_window,
    window_record,
)
from .project import project_step, struct_columns, with_window
from .windowing import NO_WINDOW, read_window, time_read_by, windowing

_AGGS = {"Count": "count", "Sum": "sum", "Min": "min", "Max": "max", "Average": "mean", "First": "first",
         "Last": "last"}


_SHOWN = {"count": "count", "sum": "sum", "min": "min", "max": "max", "mean": "avg", "first": "first",
          "last": "last"}


#: the column types gpuwm's first / last take (its accumulators are numbers)
_POSITIONAL_TYPES = ("byte", "short", "integer", "long", "float", "double", "timestamp", "timestamp_ntz", "date")


def _positional(e, fn, win) -> None:
    """Refuse Spark's ``first`` / ``last`` where gpuwm's differ: ignoring
    nulls, over a session (Spark sorts a session's rows by time), of a type
    gpuwm's accumulators do not hold."""
    from ....session import Session

    why = None
    if fn.ignoreNulls():
        why = "ignoring nulls: gpuwm's takes the first / last row's value, null or not"
    elif isinstance(win, Session):
        why = "over a session window: Spark takes a session's rows in event-time order, gpuwm's in arrival order"
    elif str(fn.child().dataType().typeName()) not in _POSITIONAL_TYPES:
        why = f"of a {fn.child().dataType().simpleString()} column: gpuwm's are of numbers and times"
    if why:
        raise Refused("AGG_POSITIONAL", "Aggregate", f"the aggregate {e.sql()} {why}")


@register("Aggregate")
def translate_aggregate(ctx, agg) -> Translation:
    groups = list(scala_iter(agg.groupingExpressions()))
    if any(node_kind(g) != "AttributeReference" for g in groups):
        bad = next(g for g in groups if node_kind(g) != "AttributeReference")
        raise Refused("GROUPING_EXPRESSION", "Aggregate", f"a grouping expression ({bad.sql()}): group by columns (add them before "
                                   "withWatermark)")
    try:
        made, out, below = windowing(agg.child())  # the window is the grouping attribute the node under it makes
    except Refused:
        made = out = below = None
    t = ctx.input(agg.child()) if made is None else None
    by_window = t is not None and t.window_id is not None and t.window_id in {expr_id(g) for g in groups}
    if made is None and not by_window:
        raise Refused("NO_WINDOW", "Aggregate", NO_WINDOW)
    win_id = t.window_id if by_window else expr_id(out)
    named = {expr_id(g): str(g.name()) for g in groups if expr_id(g) != win_id}  # Spark's names of the keys
    if len(groups) - len(named) != 1:
        raise Refused("NO_WINDOW", "Aggregate", NO_WINDOW)
    if len(set(named.values())) != len(named):
        raise Refused("DUPLICATE_NAMES", "Aggregate", f"two grouping columns share a name ({list(named.values())})")
    if by_window:  # grouped by the window of the aggregation below (Nexmark q5's maximum per window)
        return _by_window(t, agg, named)
    t = ctx.input(below)
    if t.time is None:
        raise Refused("NO_EVENT_TIME", "Aggregate", "a window over the rows of a stage that gives no event time (window a window's "
                                   "rows by window_time(window))")
    time_read_by(t, made)
    cols = t.columns
    if any(i not in cols for i in named):
        raise Refused("GROUPING_COLUMN", "Aggregate", "a grouping column the stage below does not give as a column (its window?)")
    keys = [cols[i] for i in named]  # gpuwm's names of the keys
    win, shown_win = read_window(ctx, agg.child(), made, out, below, t.time[0], list(named.values()), t.time[1])
    if not keys and shown_win.startswith("session_window("):  # Spark's planner refuses it when the query starts
        raise Refused("GLOBAL_SESSION", "Aggregate", f"{shown_win} without grouping keys: Spark does not run it on a stream either "
                                   "('Global aggregation with session window in streaming query is not "
                                   "supported'), and gpuwm runs what Spark runs")
    stage, aggs = len(t.stages), {}  # (the index before any project stage an aggregate's expression adds)
    step, ids, shown_aggs, columns, window_out, computed = _outputs(
        t, agg, win_id, named, WINDOW_STRUCT, lambda e: _one_aggregate(t, e, aggs, stage, win))
    _groups_only(aggs, shown_aggs, stage)
    t.stages.append(window_record(win, keys, aggs))
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
    fk = node_kind(fn)
    if fk not in _AGGS:
        raise Refused("AGG_FUNCTION", "Aggregate", f"the aggregate {e.sql()}: gpuwm has count, sum, min, max, avg, first "
                                   "and last")
    if fk in ("First", "Last"):
        if win is None:
            raise Refused("AGG_POSITIONAL", "Aggregate", f"the aggregate {e.sql()} in an aggregation by a window column: Spark's "
                                       "takes the rows of the aggregation below in no set order")
        _positional(e, fn, win)
    args = list(scala_iter(fn.children()))
    if fk in ("Sum", "Average", "Min", "Max") and args and \
            str(args[0].dataType().typeName()) not in _POSITIONAL_TYPES:  # (a decimal: Spark's sum widens it)
        raise Refused("AGG_TYPE", "Aggregate", f"the aggregate {e.sql()} of a {args[0].dataType().simpleString()} "
                                   "column: gpuwm's are of numbers (integers, doubles) and times")
    fn_name = _AGGS[fk]
    if e.isDistinct() and fk not in ("Min", "Max"):  # min / max of the distinct values: of all
        if fk not in ("Count", "Sum", "Average") or len(args) != 1:
            raise Refused("AGG_DISTINCT", "Aggregate", f"the aggregate {e.sql()}: gpuwm's DISTINCT aggregates are count, "
                                       "sum and avg of one column")
        fn_name += "_distinct"
    star = fk == "Count" and len(args) == 1 and node_kind(args[0]) == "Literal" and args[0].value() is not None
    cols = t.columns
    if e.filter().isDefined():
        what = _filtered(t, e, fk, None if star else args[0], len(aggs))
    elif star:
        what = "*"
    elif len(args) == 1 and node_kind(args[0]) == "AttributeReference" and expr_id(args[0]) in cols:
        what = cols[expr_id(args[0])]
    elif len(args) == 1:  # of an expression (sum(price * quantity)): a column the source gains
        what = _on_source(t, e, args[0], f"__gpuwm_arg{len(aggs)}")
    else:
        raise Refused("AGG_ARGUMENT", "Aggregate", f"the aggregate {e.sql()}: gpuwm aggregates a column (or count(*))")
    inner = f"__gpuwm_agg{len(aggs)}" + (f"_s{stage}" if stage else "")
    aggs[inner] = (what, fn_name)
    return inner, (f"{_SHOWN[_AGGS[fk]]}({'DISTINCT ' if e.isDistinct() else ''}"
                   f"{'*' if star else args[0].name() if node_kind(args[0]) == 'AttributeReference' else args[0].sql()})"
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
    columns computed on each output row (:func:`consumed`). ``one(e)`` adds
    the aggregate ``e`` (:func:`_one_aggregate`)."""
    cols = t.columns
    keys = {i: cols[i] for i in named}
    step, ids, shown_aggs, columns, window_out, computed = [], {}, [], dict(keys), None, []
    for ne in scala_iter(agg.aggregateExpressions()):
        name = str(ne.name())
        e = ne.child() if node_kind(ne) == "Alias" else ne
        k = node_kind(e)
        if k == "AttributeReference" and expr_id(e) == win_id:
            step.append([name, struct])
            window_out = expr_id(ne)  # the window as the aggregation outputs it (an alias has its own id)
        elif k == "AttributeReference" and expr_id(e) in named:
            step.append([name, {"col": cols[expr_id(e)]}])
            columns[expr_id(ne)] = cols[expr_id(e)]  # (a key renamed in the output, `groupBy(col("k").alias("k2"))`: its id)
        elif k == "AggregateExpression":
            inner, shown = one(e)
            step.append([name, {"col": inner}])
            shown_aggs.append(f"{name} = {shown}")
            columns[expr_id(ne)] = inner
        elif any(node_kind(a) == "AggregateExpression" for a in descendants(e)):  # max(price) * 0.908: on each row out
            made = {}
            for a in descendants(e):
                if node_kind(a) == "AggregateExpression" and int(a.resultId().id()) not in made:
                    made[int(a.resultId().id())] = one(a)[0]
            step.append([name, _of_groups(e, win_id, {**keys, **made}, struct)])
            shown_aggs.append(f"{name} = {no_ids(str(e.sql()))}")
            computed.append(expr_id(ne))
        else:
            step.append([name, _of_groups(e, win_id, keys, struct)])
            computed.append(expr_id(ne))
        ids[expr_id(ne)] = name
    if len({n for n, _ in step}) != len(step):
        raise Refused("DUPLICATE_NAMES", "Aggregate", f"two output columns share a name ({[n for n, _ in step]})")
    return step, ids, shown_aggs, columns, window_out, computed


def _by_window(t: Translation, agg, named: dict[int, str]) -> Translation:
    """An aggregation grouped by the window column of the window
    aggregation ``t`` below it (and keys): each group is one of its
    windows, which closes when the watermark passes the window's end, as
    Spark's aggregation keyed by that window evicts it. gpuwm's form: the
    window's bounds kept as keys (a select renames them apart), then a
    tumbling window of the window's slide on ``window_time`` — exactly one
    per window below (the windows end a slide apart)."""
    from ....aggregates import WINDOW_TIME
    from ....session import Session
    from ....window import Tumble

    last = last_stage(t)  # (projects over its rows: filters, and columns they add)
    below, bkeys, baggs = stage_window(last), options_of(last)["by"], options_of(last)["aggs"]
    added = added_columns(t)
    if isinstance(below, Session) or t.window_of is None:
        raise Refused("BY_SESSION_WINDOW", "Aggregate", "grouped by a session window's column: gpuwm groups by a tumbling or hopping "
                                   "window's")
    if any(i not in t.columns for i in named):
        raise Refused("GROUPING_COLUMN", "Aggregate", "a grouping column the stage below does not give as a column")
    n = len(t.stages)
    start, end = f"__gpuwm_ws{n}", f"__gpuwm_we{n}"
    kept = [*bkeys, *baggs, WINDOW_TIME, *added]
    t.stages.append({"select": {"columns": [[start, "window_start"], [end, "window_end"], *[[c, c] for c in kept]]}})
    keys = [start, end, *(t.columns[i] for i in named)]
    aggs: dict[str, tuple[str, str]] = {}
    struct = bounds_struct(start, end)
    step, ids, shown_aggs, columns, window_out, t.computed = _outputs(
        t, agg, t.window_id, named, struct, lambda e: _one_aggregate(t, e, aggs, n + 1, None))
    _groups_only(aggs, shown_aggs, n + 1)
    t.stages.append(window_record(Tumble(WINDOW_TIME, below.slide), keys, aggs))
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
    try:
        return with_window(project_expr(e, {win_id: "\0window", **keys}), {"\0window": struct})
    except Untranslatable as u:
        raise Refused("EXPRESSION", "Aggregate", f"the output expression {e.sql()}: gpuwm does not evaluate `{u}`") from None


def _filtered(t: Translation, e, fk: str, arg, j: int) -> str:
    """``agg(x) FILTER (WHERE cond)`` as ``agg(CASE WHEN cond THEN x END)``
    (``count(*)``'s: of ``1``), the same rows for count, sum, min, max and
    avg, which skip nulls: a column computed for it (:func:`_on_source`);
    its name."""
    if fk in ("First", "Last"):
        raise Refused("AGG_FILTER", "Aggregate", f"the aggregate {e.sql()}: first / last with FILTER (they take nulls too)")
    return _on_source(t, e, e.filter().get(), f"__gpuwm_filter{j}", where=True, then=arg)


def _on_source(t: Translation, e, x, name: str, where: bool = False, then=None) -> str:
    """The column ``name`` computed for the aggregate ``e``: the expression
    ``x`` (``where``: ``CASE WHEN x THEN then END``, ``then`` None for a
    ``1``). Over the source's columns, the source gains it: Spark computes
    it under ``withWatermark``, a projection the watermark does not read
    (or the direct read does, where it evaluates it). Over a stage's or a
    join's rows, a project stage computes it (:func:`project_stage`). The
    aggregate then takes the column. Refused when ``x`` reads a column
    renamed or computed after withWatermark, or is not deterministic."""
    from pyspark.sql import functions as F

    both = [x] if then is None else [x, then]
    if not all(y.deterministic() for y in both):
        raise Refused("NOT_DETERMINISTIC", "Aggregate", f"the aggregate {e.sql()} is not deterministic")
    if t.stages:
        cols, structs = struct_columns(t, both, "Aggregate")

        def column(expr) -> list:
            got = with_window(expr(x, cols), structs)
            return [[name, {"when": [got, {"lit": [1, "int"]} if then is None else
                                     with_window(expr(then, cols), structs)]}
                     if where else got]]

        project_step(t, "Aggregate", f"the aggregate {e.sql()}: ", column)
        return name
    if t.inputs:
        raise Refused("AGG_ARGUMENT", "Aggregate", f"the aggregate {e.sql()}: gpuwm computes an aggregate's expression on the "
                                   "source or over a stage's rows")
    refs = [a for y in both for a in scala_iter(y.references().toSeq())]
    if any(node_kind(a) != "AttributeReference" or t.columns.get(expr_id(a)) != str(a.name()) for a in refs):
        raise Refused("AGG_ARGUMENT", "Aggregate", f"the aggregate {e.sql()}: it reads a column renamed or computed after "
                                   "withWatermark")
    c = as_column(t.source, x)
    if where:
        c = F.when(c, F.lit(1) if then is None else as_column(t.source, then))
    t.source = t.source.withColumn(name, c)
    return name
