"""``window(...)`` and ``session_window(...)`` as Spark's analyzer writes them,
read back into gpuwm's windows and checked by making them again."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from ....errors import ConfigError
from ...catalyst.plans import expr_id, no_ids, node_kind, of_rows, quoted
from ...jvm.objects import scala_iter
from ..translation import Refused, Translation, interval

NO_WINDOW = "its grouping has no window(...) or session_window(...) of the event time"


def time_read_by(t: Translation, made) -> None:
    """``t``'s event time made the one ``made`` (the node that makes a
    window column) reads: a join's right time instead of its left where
    the window's own expressions read it (the node's, not its children's:
    the plan below names both times)."""
    text = " ".join(str(e.toString()) for e in scala_iter(made.expressions())
                    if node_kind(e) != "AttributeReference")  # (not the columns it passes on)
    for other in t.other_times:
        ids = [i for i, c in t.columns.items() if c == other[1]]
        if any(re.search(rf"#{i}\b", text) for i in ids):
            t.time = other
            break


def windowing(upper, operator: str = "Aggregate") -> tuple[Any, Any, Any]:
    """The two nodes Spark's analyzer makes of ``window(...)``, ``upper``
    the higher (tumble: Project over Filter; hop: Filter over Expand;
    session: Filter over Project): (the one that makes the window column,
    that column, the node below them)."""
    lower = upper.child() if node_kind(upper) in ("Project", "Filter") else None
    if lower is None or (node_kind(upper), node_kind(lower)) not in (("Project", "Filter"), ("Filter", "Expand"),
                                                             ("Filter", "Project")):
        raise Refused("NO_WINDOW", operator, NO_WINDOW)
    made = upper if node_kind(upper) == "Project" else lower
    if node_kind(made) == "Project" and node_kind(lower.child()) != "Expand" and \
            node_kind(next(iter(scala_iter(made.projectList())), made)) != "Alias":
        raise Refused("NO_WINDOW", operator, NO_WINDOW)  # (a select over a filter that passes its first column on)
    return made, list(scala_iter(made.output()))[0], lower.child()


def read_window(ctx, upper, made, out, below, ts: str, keys: list[str] | None, on: str):
    """The window ``made`` computes into ``out`` over ``below``, on the
    event-time column Spark names ``ts`` and gpuwm ``on``: (gpuwm window,
    text for explain). Checked by making the same
    ``window``/``session_window`` over ``below`` (grouped by Spark's
    ``keys``; ``None``: selected, as a join's side does): the same plan
    from ``upper`` down, or refused."""
    operator = "Aggregate" if keys is not None else "Join"
    from pyspark.sql import functions as F

    from ....session import Session
    from ....window import Hop, Tumble

    text = str(made.toString())
    col = F.col(_time_reference(below, made, ts, operator))
    if " as interval)" in text:
        m = re.search(r"cast\(([^()]+?) as interval\)", text)
        gap = m.group(1) if m else None
        if not gap or gap.count("(") != gap.count(")"):
            raise Refused("WINDOW_FORM", operator, "a session_window whose gap is not a constant")
        iv = ctx.jvm.org.apache.spark.sql.catalyst.util.IntervalUtils.stringToInterval(
            ctx.jvm.org.apache.spark.unsafe.types.UTF8String.fromString(gap))
        made_by, win, shown = F.session_window(col, gap), Session(on, interval(iv)), f"session_window({ts}, {gap})"
    else:
        slide = re.search(r" % (\d+)\)", text)
        start = re.search(r"LongType\) - (-?\d+)\) % ", text)
        size = re.search(r"\) \+ (\d+)\), LongType, TimestampType\)", text)
        if not (slide and start and size):
            raise Refused("WINDOW_FORM", operator, "its window(...) is not one gpuwm reads")
        size_us, slide_us, start_us = int(size.group(1)), int(slide.group(1)), int(start.group(1))
        made_by = F.window(col, f"{size_us} microseconds", f"{slide_us} microseconds", f"{start_us} microseconds")
        if start_us:
            raise Refused("WINDOW_OFFSET", operator, f"a window with a start offset ({timedelta(microseconds=start_us)}): gpuwm's "
                                       "windows start at the epoch")
        size_td, slide_td = timedelta(microseconds=size_us), timedelta(microseconds=slide_us)
        shown = f"window({ts}, {size_td}" + (f", {slide_td})" if size_us != slide_us else ")")
        try:
            win = Tumble(on, size_td) if size_us == slide_us else Hop(on, size=size_td, slide=slide_td)
        except ConfigError as e:  # a hop whose slide does not divide its size
            raise Refused("WINDOW_SLIDE", operator, f"{shown}: {e}") from None
    again = of_rows(ctx.spark, below)
    again = again.select(made_by.alias(str(out.name()))) if keys is None else \
        again.groupBy(made_by.alias(str(out.name())), *[F.col(quoted(k)) for k in keys]).count()
    mine = again._jdf.queryExecution().analyzed().child()
    if no_ids(str(mine.toString())) != no_ids(str(upper.toString())):
        raise Refused("WINDOW_FORM", operator, f"its window is not {shown} as gpuwm read it")
    return win, shown


def _time_reference(below, made, ts: str, operator: str) -> str:
    """How to name the time column ``ts`` of the rows ``below`` in a
    DataFrame over them: its name, or — a join's two sides both have a
    column of that name (Spark tells them apart by id) — its side's alias
    and name (``left.eventTime``), the one ``made`` (the window) reads."""
    same = [a for a in scala_iter(below.output()) if str(a.name()) == ts]
    if len(same) <= 1:
        return quoted(ts)
    first = re.search(rf"{re.escape(ts)}#(\d+)", str(made.toString()))  # (the window's expression comes first)
    read = [a for a in same if first is not None and expr_id(a) == int(first.group(1))]
    qualifier = [str(q) for q in scala_iter(read[0].qualifier())] if len(read) == 1 else []
    if not qualifier or sum(1 for a in same if [str(q) for q in scala_iter(a.qualifier())] == qualifier) > 1:
        raise Refused("WINDOW_TIME_AMBIGUOUS", operator, f"its window's time column {ts} is one of {len(same)} columns of that name below "
                                "it: alias the join's sides (df.alias('left')) or rename one")
    return ".".join(quoted(q) for q in qualifier[-1:]) + "." + quoted(ts)
