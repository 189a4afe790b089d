"""A join whose sides are stages' rows, as a graph of stages."""

from __future__ import annotations

from ..translation import (
    Refused,
    Translation,
    added_columns,
    aggregated,
    kind_of,
    last_stage,
    options_of,
    unbounded_join,
)


def unused_name(name: str, taken: set[str], side: str) -> str:
    """``name`` made apart from ``taken`` for ``side``'s input: ``name__right``, then numbered."""
    got, n = f"{name}__{side}", 1
    while got in taken:
        got, n = f"{name}__{side}{n}", n + 1
    return got


def join_graph(sides: dict[str, Translation]) -> tuple[list, dict[str, Translation], dict[str, tuple[str, str]],
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
    from ....aggregates import WINDOW_TIME

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
            raise Refused("JOIN_SOURCE_NAMES", "Join", "one watermarked source read by two joins under other column names: gpuwm "
                                  "reads a source once; rename its columns before withWatermark")
        return by_origin[t.origin]

    def columns(t: Translation) -> list[str]:  # the stream's columns: a window's or a join's output, or the source's
        if aggregated(t):  # (with the columns projects over its rows add)
            keys, aggs = options_of(last_stage(t))["by"], options_of(last_stage(t))["aggs"]
            return ["window_start", "window_end", *keys, *aggs, WINDOW_TIME, *added_columns(t)]
        if t.graph is not None:  # a graph's join
            return list(t.joined) + added_columns(t)
        if t.inputs:  # (an interval join's rows: its left side's columns, then its right side's)
            return [c for n in ("left", "right") for c in t.inputs[n].source.columns] + added_columns(t)
        return list(t.source.columns) + added_columns(t)  # (a dedup's rows are its source's)

    for name, t in sides.items():
        if t.graph is not None:  # a graph's join: its stages over its inputs, each under its own name; a window
            ren = {n: source(i) for n, i in t.inputs.items()}  # its names -> this graph's
            for st, (own, ins) in zip(t.stages, t.graph):
                ins = tuple(ren[i] for i in ins)
                st = _joining(st, ins) if kind_of(st) == "join" else st
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
            if aggregated(t):
                t.time, t.other_times = ("window_time", WINDOW_TIME), []
            feeds.append(feed)
            continue
        if t.inputs:  # a join's rows (:func:`joined_side`): its two sources, then its stage, once; a window over them
            ins = tuple(source(t.inputs[n]) for n in ("left", "right"))
            feed = None
            for k, st in enumerate(t.stages):
                key = (ins, repr(t.stages[:k + 1]))
                if key not in made:
                    made[key] = f"{name}{k}"
                    graph.append((_joining(st, ins), (made[key], ins)) if k == 0 else
                                 (st, (made[key], (feed,))))
                feed = made[key]
            if aggregated(t):  # (its rows' event time: the window's; the join's times are gone)
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
        if aggregated(t):
            t.time = ("window_time", WINDOW_TIME)
        feeds.append(feed)

    # the columns both sides have renamed apart (Spark tells them apart by id) by a select over a stage's rows: the
    # right side's, or the left's where the right is a source (a select of an input would cost an exchange)
    cols = {n: columns(t) for n, t in sides.items()}
    n, other = ("left", "right") if not sides["right"].stages else ("right", "left")
    t, taken = sides[n], set(cols["left"]) | set(cols["right"])
    new = {c: unused_name(c, taken, n) if c in cols[other] else c for c in cols[n]}
    if any(new[c] != c for c in cols[n]):
        k = 0 if n == "left" else 1
        graph.append(({"select": {"columns": [[new[c], c] for c in cols[n]]}}, (f"{n}{len(t.stages)}", (feeds[k],))))
        feeds[k] = graph[-1][1][0]
        t.columns = {i: new[c] for i, c in t.columns.items()}
        t.time = (t.time[0], new[t.time[1]])
        t.other_times = [(shown, new.get(c, c)) for shown, c in t.other_times]
    wcols = {s: tuple(new.get(c, c) if s == n else c for c in t.window_of[1:])
             for s, t in sides.items() if aggregated(t)}
    graph.append((None, ("join", tuple(feeds))))
    joined = [new.get(c, c) if s == n else c for s in ("left", "right") for c in cols[s]]
    return graph, inputs, wcols, joined


def _joining(st: dict, ins: tuple[str, ...]) -> dict:
    """A join stage's record reading the streams ``ins`` (its left, its right)."""
    return {"join": {**options_of(st), "left": ins[0], "right": ins[1]}}


def joined_side(name: str, t: Translation) -> None:
    """A join's side that is a join's rows: an interval join (or one on
    equal event times) of two watermarked sources — or a graph's join of
    them, dedups' and aggregations' rows (its output watermark as Spark's:
    :func:`consumed`) —, its rows carrying its left side's event time or
    the ``window_time`` of an aggregation side's window (Spark's join needs
    one event-time column on each side: the query selects one); refused,
    in one line, otherwise."""
    at = 0 if t.graph is None else len(t.graph) - 1  # the join's stage (a graph's: its last)
    if kind_of(t.stages[-1]) not in ("join", "window") or len(t.stages) > at + 2:
        raise Refused("JOIN_SIDE", "Join", f"its {name} side is a {kind_of(t.stages[-1])}'s rows over a join: gpuwm joins a join's "
                              "own rows, or a window aggregation's over them")
    if options_of(t.stages[at]).get("window") is not None:
        raise Refused("JOIN_SIDE", "Join", f"its {name} side is a join in the same window, whose rows carry a window, not an "
                              "event time")
    if kind_of(t.stages[-1]) == "join" and (unbounded_join(t) or t.time is None):
        raise Refused("JOIN_SIDE", "Join", f"its {name} side is a join with no time bound, whose rows carry no watermark")
