"""The rule for Spark's ``Window`` under a filter on its rank: a top-N."""

from __future__ import annotations

from datetime import timedelta

from ...catalyst.plans import TRANSPARENT, expr_id, node_kind
from ...jvm.objects import scala_iter
from ..registry import register, rule_for
from ..translation import Refused, Translation, aggregated, ends_in_join, last_stage, options_of, stage_window
from .windowing import read_window, time_read_by, windowing

_RANKS = {"RowNumber": "row_number", "Rank": "rank", "DenseRank": "dense_rank"}


_NO_RANK_FILTER = ("a rank needs a filter on it right above (rank <= N, rank < N or rank = 1): gpuwm runs top-N "
                   "per window, emitted when the window closes")


_RANK_COLUMN = "__gpuwm_rank"


@register("Window", top_only=True)
def translate_topn(ctx, node) -> Translation:
    """``row_number()`` / ``rank()`` / ``dense_rank()`` ``OVER (PARTITION BY
    <window>, keys ORDER BY ...)`` under a filter ``rank <= N``: the filter
    (taken out of the selects and filters above, ``ctx.above``) and the ranking are a top-N stage
    (:class:`gpuwm.topn.TopNSpec`) over a windowed aggregation's rows (its
    window among the partition keys; project stages, filters and new
    columns, between them and the rank), over a watermarked source's rows
    (a tumbling ``window(ts, ...)`` of its event time among them) or a
    join's (of either side's time; or closed by a column that bounds the
    joined rows' time), or, with ``state_ttl``, over a source's rows
    partitioned by keys alone. Spark's
    analyzer makes these plans; its streaming checker refuses them
    (``NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING``)."""
    from ....aggregates import WINDOW_TIME

    exprs = list(scala_iter(node.windowExpressions()))
    if len(exprs) != 1:
        raise Refused("RANK_FUNCTIONS", "Window", f"{len(exprs)} window functions: gpuwm ranks by one (row_number, rank or "
                                "dense_rank)")
    ne = exprs[0]
    we = ne.child() if node_kind(ne) == "Alias" else ne
    fk = node_kind(we.windowFunction()) if node_kind(we) == "WindowExpression" else node_kind(we)
    if fk not in _RANKS:
        raise Refused("RANK_FUNCTION", "Window", f"the window function {we.sql()}: gpuwm ranks (row_number, rank, dense_rank) "
                                "for a top-N per window; other window functions on a stream are not gpuwm's")
    fn, rank_id = _RANKS[fk], expr_id(ne)
    n = _rank_limit(ctx.above, rank_id)
    part = list(scala_iter(node.partitionSpec()))
    if any(node_kind(p) != "AttributeReference" for p in part):
        raise Refused("RANK_PARTITION", "Window", "a PARTITION BY expression: partition by columns (a window column among them)")
    probe, above = node.child(), None
    while node_kind(probe) in ("Project", "Filter") + TRANSPARENT and not _expanded(above, probe):
        above, probe = probe, probe.child()
    source = rule_for(node_kind(probe)) is None  # else a stage's rows: a source's, with a window column made over them
    win_stage = until = None
    if not source:
        t = ctx.input(node.child())
        win_stage = last_stage(t) if aggregated(t) else None  # (projects over its rows: filters, new columns)
        until = _until(t)
    if until is not None:  # over a join's rows whose condition bounds their time by a column: closed by it
        cols = t.columns
    elif win_stage is not None:  # over an aggregation: its window is one of the partition keys
        if not any(expr_id(p) == t.window_id for p in part):
            raise Refused("RANK_STATE", "Window", "a rank over an aggregation's rows not partitioned by its window: its state "
                                    "would never be cleaned (add the window to PARTITION BY)")
        if "session" in options_of(win_stage):
            raise Refused("RANK_WINDOW", "Window", "a rank over session windows: gpuwm's top-N partitions by tumbling and hopping "
                                    "windows")
        cols = t.columns
        ts = WINDOW_TIME
    elif source:
        found = _topn_source(ctx, node, part)
        if found is None:  # no window: a partition closes once idle for state_ttl, when given
            t, ts, win_attr, shown_win = _topn_ttl(ctx, node)
        else:
            t, ts, win_attr, shown_win = found
        cols = t.columns
    else:
        raise Refused("RANK_INPUT", "Window", "a rank over a dedup's or a join's rows: gpuwm's top-N partitions by a window, or "
                                "closes them by a column that bounds a join's event time (b_ts <= expires)")
    by = []
    for p in part:
        if win_stage is not None and expr_id(p) == t.window_id or source and expr_id(p) == win_attr[0]:
            continue
        if expr_id(p) not in cols:
            raise Refused("RANK_PARTITION", "Window", f"the partition column {p.name()}: not a column of the rows below")
        by.append(cols[expr_id(p)])
    order, shown_order = [], []
    for so in scala_iter(node.orderSpec()):
        c = so.child()
        if node_kind(c) != "AttributeReference" or expr_id(c) not in cols:
            raise Refused("RANK_ORDER", "Window", f"the ORDER BY expression {so.sql()}: gpuwm orders by columns")
        desc = node_kind(so.direction()).startswith("Descending")
        nulls_first = node_kind(so.nullOrdering()).startswith("NullsFirst")
        order.append((cols[expr_id(c)], "desc" if desc else "asc", "nulls_first" if nulls_first else "nulls_last"))
        shown_order.append(str(so.sql()))
    if win_stage is not None and until is None:
        # (TopNSpec.after_window: each window's window_time alone in a tumbling window of the stage's slide)
        closed = {"window": stage_window(win_stage).slide, "on": ts}
        step = t.output[-1]
        for a in scala_iter(node.child().output()):  # columns a project stage added (or renamed) on the way
            if expr_id(a) not in t.output_ids and expr_id(a) in cols:
                step.append([str(a.name()), {"col": cols[expr_id(a)]}])
                t.output_ids[expr_id(a)] = str(a.name())
        shown_win = "the aggregation's window"
    else:
        if until is not None:
            closed = {"until": until}
            shown_win = f"partition (closed when the watermark passes {until}, which bounds the joined rows' time)"
            win_attr = (None, None)
        elif win_attr[0] is None:
            closed = {"ttl": ctx.state_ttl, "on": ts}
        else:
            closed = {"window": win_attr[1], "on": ts}
        step = []  # the columns below the ranking, by their names there
        for a in scala_iter(node.child().output()):
            name = str(a.name())
            if expr_id(a) in cols and any(n == name for n, _ in step):
                # two of one name (a join's sides' date_time, one only for ORDER BY): gpuwm's own for the second
                name = cols[expr_id(a)]
            if expr_id(a) == win_attr[0]:
                step.append([name, {"tumble": [{"col": ts}, win_attr[1] // timedelta(microseconds=1)]}])
            elif expr_id(a) in cols:
                step.append([name, {"col": cols[expr_id(a)]}])
            else:
                raise Refused("RANK_COLUMN", "Window", f"the column {a.name()}: computed after withWatermark")
            t.output_ids[expr_id(a)] = name
        t.output = [step]
    step.append([str(ne.name()), {"col": _RANK_COLUMN}])
    t.output_ids[rank_id] = str(ne.name())
    if len({name for name, _ in step}) != len(step):
        raise Refused("DUPLICATE_NAMES", "Window", f"two output columns share a name ({[name for name, _ in step]})")
    t.stages.append({"topn": {**closed, "by": by, "order": [list(o) for o in order], "n": n, "fn": fn,
                              "output": _RANK_COLUMN}})
    t.shown.append(f"top-n      {fn}() <= {n} per {shown_win}"
                   + (f", {[str(p.name()) for p in part if expr_id(p) in cols]}" if by else "")
                   + f" ORDER BY {', '.join(shown_order)}: emitted when the "
                   + ("partition" if until is not None or "ttl" in closed else "window") + " closes")
    return t


def _expanded(above, node) -> bool:
    """Whether ``node`` is the filter of Spark's window expansion under
    ``above`` (a rank's partition by ``window(ts, ...)`` over a source's or
    a join's rows), not a filter of a stage's rows."""
    if node_kind(node) != "Filter" or node_kind(above) != "Project":
        return False
    try:
        windowing(above, "Window")
    except Refused:
        return False
    return True


def _topn_ttl(ctx, node) -> tuple:
    """A rank over a source's rows with no window among its partition keys,
    run only with ``state_ttl`` given: each partition (its keys) closes once
    the watermark passes its latest row's event time by that long."""
    ttl = ctx.state_ttl
    if ttl is None:
        raise Refused("RANK_STATE", "Window", "a rank over a source's rows with no window(ts, ...) of its event time among the "
                                "partition keys: its state would never be cleaned (add the window, or give "
                                "state_ttl — spark.gpuwm.stateTtl — to close a partition once the watermark "
                                "passes its latest row by that long)")
    t = ctx.input(node.child())
    if t.time is None:
        raise Refused("RANK_STATE", "Window", "a rank over a source's rows needs withWatermark on the source: state_ttl closes "
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
    j = ends_in_join(t)
    if j is None or j.get("between") is None:
        return None
    left, right = t.inputs["left"].time[1], t.inputs["right"].time[1]
    _, _, lower, upper = j["between"]
    for a, op, b in j.get("where", ()):
        if b == right and op in (">=", ">") and lower is not None:
            return a
        if a == left and op in ("<=", "<") and upper is not None:
            return b
    return None


def _rank_limit(tops: list, rank_id: int) -> int:
    """N of the filter ``rank <= N`` (``< N``, ``= 1``, ``N >= rank``) right
    above the ranking (only selects of columns between): taken out of
    ``tops``."""
    below = [i for i, p in enumerate(tops) if node_kind(p) == "Filter"]
    if not below:
        raise Refused("RANK_FILTER", "Window", _NO_RANK_FILTER)
    i = below[-1]
    if any(node_kind(e) != "AttributeReference" for p in tops[i + 1:] for e in scala_iter(p.projectList())):
        raise Refused("RANK_FILTER", "Window", _NO_RANK_FILTER)
    cond = tops[i].condition()
    k = node_kind(cond)
    flip = {"GreaterThanOrEqual": "LessThanOrEqual", "GreaterThan": "LessThan", "EqualTo": "EqualTo"}
    if k not in ("LessThanOrEqual", "LessThan", *flip):
        raise Refused("RANK_FILTER", "Window", _NO_RANK_FILTER + f" (the filter is {cond.sql()})")
    left, right = cond.left(), cond.right()
    if k in ("GreaterThanOrEqual", "GreaterThan") or (k == "EqualTo" and node_kind(left) == "Literal"):
        left, right, k = right, left, flip[k]
    if node_kind(left) != "AttributeReference" \
            or expr_id(left) != rank_id or node_kind(right) != "Literal" or right.value() is None \
            or str(right.dataType().simpleString()) not in ("int", "bigint"):
        raise Refused("RANK_FILTER", "Window", _NO_RANK_FILTER + f" (the filter is {cond.sql()})")
    v = int(right.value())
    n = v if k == "LessThanOrEqual" else v - 1 if k == "LessThan" else (1 if v == 1 else 0)
    if n < 1:
        raise Refused("RANK_FILTER", "Window", f"the filter {cond.sql()}: gpuwm keeps ranks 1 to N, N >= 1")
    del tops[i]
    return n


def _topn_source(ctx, node, part: list) -> tuple[Translation, str, tuple[int, timedelta], str] | None:
    """The rows of a watermarked source with a tumbling ``window(ts, size)``
    column among the partition keys: (the source's translation, gpuwm's
    event-time column, (the window column's id, size), its text); None
    when no window of its event time is among them."""
    from ....window import Tumble

    below, renamed = node.child(), {}  # an alias's id -> the id it renames
    while node_kind(below) in ("Project",) + TRANSPARENT:  # down to the Project that makes the window
        if node_kind(below) == "Project":
            for e in scala_iter(below.projectList()):
                if node_kind(e) == "Alias" and node_kind(e.child()) == "AttributeReference":
                    renamed[expr_id(e)] = expr_id(e.child())
            if node_kind(below.child()) == "Filter":
                break
        below = below.child()
    if node_kind(below) != "Project":
        return None
    made, out, under = windowing(below, "Window")
    if node_kind(under) == "Expand":
        raise Refused("RANK_WINDOW", "Window", "a hopping window in PARTITION BY: gpuwm's top-N partitions a source's rows by a "
                                "tumbling window")
    t = ctx.input(under)
    time_read_by(t, made)  # over a join's rows: either side's time

    def root(i: int) -> int:  # the column an alias (of an alias ...) renames
        while i in renamed:
            i = renamed[i]
        return i

    hit = [expr_id(p) for p in part if root(expr_id(p)) == expr_id(out)]
    if not hit or t.time is None:
        return None
    win, shown = read_window(ctx, below, made, out, under, t.time[0], None, t.time[1])
    for i in renamed:  # a source column renamed on the way up is that column
        if root(i) in t.columns:
            t.columns[i] = t.columns[root(i)]
    if not isinstance(win, Tumble):
        raise Refused("RANK_WINDOW", "Window", f"{shown}: gpuwm's top-N partitions a source's rows by a tumbling window")
    return t, t.time[1], (hit[0], win.size), shown
