"""The rule for Spark's stream-stream ``Join``: its sides, and the join stage."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Sequence

from ...catalyst.plans import TRANSPARENT, conjuncts_of, expr_id, node_kind, peel, quoted
from ...executor.plan import graph_text
from ...jvm.objects import jvm_class, scala_iter
from ...jvm.versions import join_helper
from ..registry import register
from ..translation import (
    NO_LATE_ROWS,
    WINDOW_STRUCT,
    Refused,
    Translation,
    aggregated,
    bounds_struct,
    kind_of,
    last_kind,
)
from .join_condition import JoinCondition, comparisons, read_condition
from .join_graph import join_graph, joined_side, unused_name
from .windowing import read_window, windowing

_HOWS = {"Inner": "inner", "LeftOuter": "left", "RightOuter": "right", "FullOuter": "full"}


def _join_side(ctx, node) -> tuple[Translation, Any, str, set[int], list[tuple[str, str, int]]]:
    """A join's side: a watermarked source (:func:`_input`), or one that
    selects and renames its columns after ``withWatermark``, and may select
    ``window(ts, ...)`` there too (for Spark's join with the window among
    its keys): (its translation, the gpuwm window or None, its text for
    explain, Spark's ids of the window column as the side outputs it, its
    columns' names there for :func:`_rename`)."""
    from ....session import Session

    renamed: dict[int, int] = {}  # Spark's id of a renamed column -> the id it renames

    def resolved(i: int) -> int:
        while i in renamed:
            i = renamed[i]
        return i

    at = _through_renames(node, renamed)
    try:
        made, out, below = windowing(at, "Join")
    except Refused:
        made = out = None
    win, shown, window_id = None, "", None
    if out is not None and str(out.name()) == "window":
        t = ctx.input(_through_renames(below, renamed))
        if t.stages or t.inputs or t.time is None:
            raise Refused("JOIN_WINDOW", "Join", "a window(...) in a join's side over rows that are not a watermarked source")
        ts = next((str(a.name()) for a in scala_iter(below.output()) if t.columns.get(resolved(expr_id(a))) == t.time[1]),
                  None)
        if ts is None:
            raise Refused("JOIN_WINDOW", "Join", "a window(...) of a column that is not the side's watermark column")
        win, shown = read_window(ctx, at, made, out, below, ts, None, t.time[1])
        if isinstance(win, Session):
            raise Refused("JOIN_WINDOW", "Join", f"{shown} in a join's keys: gpuwm joins in tumbling or hopping windows")
        window_id = expr_id(out)
    elif node_kind(at) == "EventTimeWatermark" and renamed:
        t = ctx.input(at)
    else:
        return ctx.input(node), None, "", set(), []
    ids, picks = set(), []  # picks: (gpuwm's column, Spark's name of it here, Spark's id here)
    for a in scala_iter(node.output()):
        i = resolved(expr_id(a))
        if i == window_id:
            ids.add(expr_id(a))
        elif i in t.columns:
            picks.append((t.columns[i], str(a.name()), expr_id(a)))
    return t, win, shown, ids, picks


def _through_renames(node, renamed: dict[int, int]):
    """The node below ``node``'s selects of columns (renamed or not) and
    nodes that pass rows on unchanged; each renamed column's Spark id goes
    to ``renamed`` with the id it renames."""
    while True:
        kind = node_kind(node)
        if kind in TRANSPARENT:
            node = node.child()
            continue
        entries = list(scala_iter(node.projectList())) if kind == "Project" else None
        if entries is None or not all(node_kind(e) == "AttributeReference" or (
                node_kind(e) == "Alias" and node_kind(e.child()) == "AttributeReference") for e in entries):
            return node
        renamed.update({expr_id(e): expr_id(e.child()) for e in entries if node_kind(e) == "Alias"})
        node = node.child()


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
    of its own (:func:`unused_name`): the join's output step names it as
    Spark does."""
    from pyspark.sql import functions as F

    if not picks and taken & set(t.columns.values()):  # the source as it is, its names the other side's too
        picks = [(g, g, i) for i, g in t.columns.items()]
    # a name the left side has already: kept apart here (Spark tells them apart by id; so does the step after)
    picks = [(g, unused_name(n, taken, side) if n in taken else n, i) for g, n, i in picks]
    t.columns.update({i: g for g, _, i in picks})
    name = next((n for g, n, _ in picks if g == t.time[1]), None)
    if not picks or (all(g == n for g, n, _ in picks) and not clash):
        return
    cols = [F.col(quoted(g)).alias(n) for g, n, _ in picks]
    if name is None:  # the time column is not selected (a window's side)
        name = f"__gpuwm_{side}_time" if t.time[1] in clash else t.time[1]
        cols.append(F.col(quoted(t.time[1])).alias(name))
        t.shown_time = t.time[0] if name != t.time[1] else None
    t.source, t.column, t.time = t.source.select(*cols), name, (name, name)
    t.columns = {i: n for _, n, i in picks}


def comma_join(filter_node) -> tuple[Any, list, list] | None:
    """``FROM a, b WHERE ...`` (Nexmark's SQL: q4, q9): a filter right above
    an inner join with no condition of its own. (The join, the conjuncts
    that are its condition — a comparison or equality of a column of each
    side —, the rest: a filter of the joined rows.) None for another
    shape."""
    node = peel(filter_node.child(), kinds=(), through=TRANSPARENT)[0]
    if node_kind(node) != "Join" or node.condition().isDefined() or node_kind(node.joinType()).rstrip("$") != "Inner":
        return None
    sides = [{expr_id(a) for a in scala_iter(c.output())} for c in (node.left(), node.right())]
    fold, rest = [], []
    for e in conjuncts_of(filter_node.condition()):
        refs = {expr_id(a) for a in scala_iter(e.references())}
        cross = refs <= sides[0] | sides[1] and all(refs & side for side in sides)
        simple = (node_kind(e) == "EqualTo" and all(node_kind(x) == "AttributeReference" for x in (e.left(), e.right()))
                  or bool(comparisons(e)))
        (fold if cross and simple else rest).append(e)
    return node, fold, rest


@register("Join")
def translate_join(ctx, node, extra: Sequence[Any] = ()) -> Translation:
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
    :func:`comma_join`)."""
    static = [name for name, child in (("left", node.left()), ("right", node.right())) if not child.isStreaming()]
    if static:
        raise Refused("JOIN_STATIC", "Join", f"a stream–static join (its {static[0]} side is a table, not a stream): it keeps no "
                              "state and Spark runs it as written; for a window or a dedup over its rows, join "
                              "before withWatermark (the watermark then sees the joined rows, in Spark and gpuwm "
                              "alike) and gpuwm runs the rest")
    jt = node_kind(node.joinType()).rstrip("$")
    if jt not in _HOWS:
        raise Refused("JOIN_TYPE", "Join", f"a {jt} join: gpuwm joins streams inner, left, right or full outer")
    how = _HOWS[jt]
    sides, windows, picks = _sides(ctx, node)
    # sides an aggregation makes: their window column (a dedup's side keeps its source's columns and time)
    derived = {n: t.window_id for n, t in sides.items() if aggregated(t)}
    graph, wcols = None, {}
    if any(t.stages for t in sides.values()):  # a graph: each side's stages over its source, the same subtree once
        for name, t in sides.items():
            t.columns.update({i: g for g, _, i in picks[name]})  # a source side's columns as it names them
            if t.time is not None:
                t.time = next((n for g, n, _ in picks[name] if g == t.time[1]), t.time[0]), t.time[1]
        graph, inputs, wcols, joined = join_graph(sides)
    else:
        clash = set(sides["left"].source.columns) & set(sides["right"].source.columns)
        _rename(sides["left"], picks["left"], "left", clash)
        _rename(sides["right"], picks["right"], "right", clash, set(sides["left"].source.columns))
        inputs = sides
    c = read_condition(node, extra, sides, windows, derived, wcols)
    between, window, time, shown = _join_kind(how, c, sides, windows)
    step, ids, columns, windows = _output_step(node, how, c, sides, wcols)
    left, right = sides["left"], sides["right"]
    unbounded = between is not None and between[2] is None and between[3] is None
    opts = {"left": "left", "right": "right", "on": c.on, "how": how}  # (its output lag: consumed)
    opts.update({k: v for k, v in (("between", between), ("window", window), ("where", list(c.where) or None))
                 if v is not None})
    stage = {"join": opts}
    if graph is None:
        return Translation(None, left.column, left.delay, [stage], [step], left.shown + right.shown + [shown], ids,
                           columns, time=None if unbounded else time, inputs=inputs,
                           other_times=[] if time is None or unbounded else [right.time])
    *body, (_, (_, feeds)) = graph
    stages = [st for st, _ in body] + [{"join": {**opts, "left": feeds[0], "right": feeds[1]}}]
    wiring = [w for _, w in body] + [("join", feeds)]
    shown_graph = "graph      " + graph_text(wiring)
    return Translation(None, left.column, left.delay, stages, [step],  # (a shared stage's line once)
                       left.shown + [x for x in right.shown if x not in left.shown] + [shown, shown_graph], ids, columns,
                       time=None if unbounded else time, inputs=inputs,
                       other_times=[] if time is None or unbounded else
                       [*left.other_times, right.time, *right.other_times], graph=wiring,
                       derived=tuple(derived), joined=joined, windows=windows,
                       lag=(lambda: _output_lag(ctx, node, c.conjuncts)) if derived else None)


def _sides(ctx, node) -> tuple[dict[str, Translation], dict[str, tuple], dict[str, list]]:
    """The join ``node``'s two sides (:func:`_join_side`), each checked to
    be one gpuwm joins: their translations, their ``window(...)`` (gpuwm's
    window, its text, Spark's ids of its column) and their columns as
    they name them (:func:`_rename`), by side."""
    sides, windows, picks = {}, {}, {}
    for name, child in (("left", node.left()), ("right", node.right())):
        t, win, shown_win, ids, picks[name] = _join_side(ctx, child)
        if t.inputs:
            joined_side(name, t)
        if t.time is None and not t.stages:
            raise Refused("NO_EVENT_TIME", "Join", f"its {name} side has no event time")
        last = last_kind(t)  # (projects over a stage's rows pass its rows on)
        if last is not None and last not in ("window", "dedup", "join"):
            raise Refused("JOIN_SIDE", "Join", f"its {name} side is a {last}'s rows: gpuwm joins a watermarked "
                                  "source, a window aggregation's rows, a dedup's or a join's")
        below = [kind_of(st) for st in t.stages if kind_of(st) not in ("dedup", "project")]
        if last == "dedup" and below:
            raise Refused("JOIN_SIDE", "Join", f"its {name} side is a dedup of a {below[-1]}'s rows: gpuwm joins a dedup of "
                                  "a watermarked source")
        if t.stages and win is not None:
            raise Refused("JOIN_WINDOW", "Join", f"a window(...) in its {name} side over a stage's rows")
        sides[name], windows[name] = t, (win, shown_win, ids)
    return sides, windows, picks


def _join_kind(how: str, c: JoinCondition, sides: dict[str, Translation], windows: dict[str, tuple]) -> tuple:
    """What the join is, from its condition ``c``: in the same window,
    on equal event times, with no time bound, or between time bounds —
    (the interval join's ``between``, the window join's ``window``, the
    joined rows' event time, its ``explain`` line)."""
    on, bounds, equal, where, by_window = c.on, c.bounds, c.equal, c.where, c.by_window
    left, right = sides["left"], sides["right"]
    if not on and not equal:
        raise Refused("JOIN_KEYS", "Join", "gpuwm's join needs equal keys (column = column), equal event times or equal "
                              "windows besides a time range")
    (lwin, lshown, _), (rwin, rshown, _) = windows["left"], windows["right"]
    between, window, time = None, None, left.time
    if lwin is not None or rwin is not None:
        if "window" not in equal or lwin is None or rwin is None or (lwin.size, lwin.slide) != (rwin.size, rwin.slide):
            raise Refused("JOIN_WINDOW", "Join", f"a window in a join's side ({lshown or rshown}) that is not a key equal to the "
                                  f"same window of the other side ({rshown or lshown})")
        if bounds or "time" in equal or where:
            raise Refused("JOIN_WINDOW", "Join", "a join in the same window with a time condition or another comparison as well")
        from ....window import Tumble

        window = {"tumble": lwin.size} if isinstance(lwin, Tumble) else {"hop": lwin.size, "slide": lwin.slide}
        shown = f"join       {how} on {on} in the same {lshown}"
        time = None  # its rows' event time is their window
    elif "time" in equal:
        if bounds:
            raise Refused("JOIN_BOUNDS", "Join", "a join on equal event times with a time range as well")
        on.append([left.time[1], right.time[1]])
        shown = f"join       {how} on {on} (equal event times)"
    elif not bounds and how == "inner":  # no time bound (Nexmark q3 as written): every pair, state kept forever
        if any(t.inputs for t in sides.values()):
            raise Refused("JOIN_BOUNDS", "Join", "a join with no time bound over a join's rows: gpuwm joins a join's rows within "
                                  "a time range of its event time")
        between = [right.time[1], left.time[1], None, None]
        shown = f"join       {how} on {on}, no time bound: every row kept in state (as Spark keeps it)"
    else:
        if set(bounds) != {"lower", "upper"} and how != "inner":
            raise Refused("JOIN_BOUNDS", "Join", f"a {how} outer join needs both a lower and an upper bound of one side's event "
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
    return between, window, time, shown


def _output_step(node, how: str, c: JoinCondition, sides: dict[str, Translation],
                 wcols: dict[str, tuple[str, str]]) -> tuple[list, dict[int, str], dict[int, str], dict]:
    """The join's output columns as the step that names them as Spark's
    join outputs them: (the step, Spark's id -> its name, Spark's id ->
    gpuwm's column, the aggregation sides' windows among them)."""
    left, right, outs, wins, dwins = sides["left"], sides["right"], c.outs, c.wins, c.dwins
    columns = {**left.columns, **right.columns}
    absent = {"left": how in ("right", "full"), "right": how in ("left", "full")}  # sides an output row may lack
    output = list(scala_iter(node.output()))
    seen = [str(a.name()) for a in output]
    # Spark's names, but a name both sides give (Spark tells them apart by id): gpuwm's own for that column
    ids = {expr_id(a): str(a.name()) if seen.count(str(a.name())) == 1 or expr_id(a) not in columns else columns[expr_id(a)]
           for a in output}
    step, windows = [], {}
    for a in output:
        side = wins.get(expr_id(a))
        if dwins.get(expr_id(a)) is not None:  # an aggregation's window: the struct of its side's columns
            start, end = wcols[dwins[expr_id(a)]]
            step.append([ids[expr_id(a)], bounds_struct(start, end)])
            windows[expr_id(a)] = start, end, sides[dwins[expr_id(a)]].time[1]
        elif side is None:
            if expr_id(a) not in columns:  # (a join's rows' window, a struct its output step makes)
                raise Refused("WINDOW_STRUCT", "Join", f"its {'left' if expr_id(a) in outs['left'] else 'right'} side's column {a.name()}, "
                                      "a window of a join's rows: gpuwm's rows carry its bounds, not the struct "
                                      "(select window.start and window.end)")
            step.append([ids[expr_id(a)], {"col": columns[expr_id(a)]}])
        elif absent[side]:  # null where the side is absent, as Spark's
            step.append([ids[expr_id(a)], {"when": [{"is_not_null": {"col": sides[side].time[1]}}, WINDOW_STRUCT]}])
        else:
            step.append([ids[expr_id(a)], WINDOW_STRUCT])
    return step, ids, columns, windows


def _output_lag(ctx, node, conjuncts: list) -> timedelta:
    """How far the output watermark of Spark's join ``node`` (its condition:
    ``conjuncts``) trails its input watermark, as Spark derives it
    (``StreamingSymmetricHashJoinExec.produceOutputWatermark``: the least of
    the sides' state watermarks and the input's, each side's from Spark's
    own ``StreamingSymmetricHashJoinHelper.getStateWatermark``). Asked of
    a join with an aggregation's rows as a side once an operator reads its
    rows (:func:`consumed`). Where the condition bounds a side by an
    aggregation's window bounds (Nexmark q7's ``ts >= wstart AND ts <
    wend``), they carry no watermark in Spark, so a side of them alone has
    no state watermark and makes the other's none either — the output
    watermark is the input's, where gpuwm's own is its least state
    watermark; keyed by the windows (q8's ``aw = bw``), the input's too. Asked of the
    join as Spark's optimizer leaves it (:func:`_as_optimized`): a side's
    column no operator reads is pruned, and its watermark with it."""
    jvm = ctx.jvm
    node, conjuncts = _as_optimized(ctx, node, conjuncts)
    cond = conjuncts[0]
    for c in conjuncts[1:]:
        cond = jvm.org.apache.spark.sql.catalyst.expressions.And(cond, c)
    lefts, rights = ({expr_id(a) for a in scala_iter(side.output())} for side in (node.left(), node.right()))
    keys: tuple[list, list] = ([], [])  # the equal keys of a column of each side (a watermark's: key-based)
    for c in conjuncts:
        if node_kind(c) == "EqualTo" and all(node_kind(x) == "AttributeReference" for x in (c.left(), c.right())):
            a, b = c.left(), c.right()
            if expr_id(a) in rights and expr_id(b) in lefts:
                a, b = b, a
            if expr_id(a) in lefts and expr_id(b) in rights:
                keys[0].append(a)
                keys[1].append(b)
    w = 10 ** 12  # an input watermark (ms): each state watermark is it plus a constant
    helper = jvm_class(jvm, join_helper())
    try:
        got = helper.getStateWatermark(node.left().output(), node.right().output(), jvm.PythonUtils.toSeq(keys[0]),
                                       jvm.PythonUtils.toSeq(keys[1]), jvm.scala.Option.apply(cond),
                                       jvm.scala.Option.apply(jvm.java.lang.Long(w)), False)
    except Exception as e:  # (py4j's: Spark's own check of the sides' event-time columns)
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise Refused("JOIN_WATERMARK", "Join", f"Spark's join output watermark could not be derived ({first})") from None
    lags = [0] + [w - int(x.get()) for x in (got._1(), got._2()) if x.isDefined()]
    return timedelta(milliseconds=max(lags))


def _as_optimized(ctx, node, conjuncts: list) -> tuple[Any, list]:
    """The join ``node`` (its condition: ``conjuncts``) in the optimized
    plan of the query (:func:`optimized_plan`): the join there whose
    condition reads columns of this one's alone, the most of them, and
    whose columns are this one's; its conjuncts. ``node`` as it is where
    none is."""
    want = {expr_id(a) for c in conjuncts for a in scala_iter(c.references())}
    outs = {expr_id(a) for a in scala_iter(node.output())}
    best, most, todo = None, 0, [ctx.optimized] if ctx.optimized is not None else []
    while todo:
        n = todo.pop()
        todo.extend(scala_iter(n.children()))
        if node_kind(n) != "Join" or not n.condition().isDefined():
            continue
        refs = {expr_id(a) for a in scala_iter(n.condition().get().references())}
        if refs <= want and len(refs) > most and {expr_id(a) for a in scala_iter(n.output())} <= outs:
            best, most = n, len(refs)
    return (node, conjuncts) if best is None else (best, conjuncts_of(best.condition().get()))


def unbounded_lateness(ctx, t: Translation) -> None:
    """An inner join without a time bound drops a side's rows behind the
    watermark only where its input still has the side's event-time column:
    Spark's optimizer prunes the column when nothing above reads it (Nexmark
    q3 selects no time), and its join then finds no watermark column and
    drops no row. gpuwm does as Spark's plan does: with both times pruned,
    no row is late (a delay of :data:`NO_LATE_ROWS`); with one pruned and
    not the other, it refuses."""
    plan, join = ctx.optimized, None  # (the query's plan as Spark's optimizer leaves it)
    stack = [plan]
    while stack and join is None:
        node = stack.pop()
        if node_kind(node) == "Join":
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
        raise Refused("JOIN_LATENESS", "Join", "a join with no time bound whose query does not read its source side's event time: "
                              "Spark then drops none of its rows as late, gpuwm's join would")
    if all(kept):
        return
    if any(kept):
        raise Refused("JOIN_LATENESS", "Join", "a join with no time bound whose query reads one side's event time and not the "
                              "other's: Spark drops one side's late rows and keeps the other's")
    for side in t.inputs.values():
        side.delay = NO_LATE_ROWS
    t.shown.append("late rows  none: the query reads neither event time, so Spark's join finds no watermark "
                   "column and drops no row")
