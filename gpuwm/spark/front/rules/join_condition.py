"""A join's condition read as time bounds: comparisons of the sides' event
times plus intervals."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping, Sequence

from ....join import FLIP
from ...catalyst.plans import conjuncts_of, expr_id, node_kind
from ...jvm.objects import scala_iter
from ..translation import Refused, interval

#: Spark's comparisons as a join condition's ops; each op as a bound on a time (not strict, and how far inside)
SYMBOLS_OF = {"GreaterThanOrEqual": ">=", "GreaterThan": ">", "LessThanOrEqual": "<=", "LessThan": "<"}


BOUND = {">=": (">=", 0), ">": (">=", 1), "<=": ("<=", 0), "<": ("<=", 1)}


def comparisons(e) -> list[tuple[str, Any, Any]]:
    """A conjunct as comparisons ``(op, a, b)`` (:data:`SYMBOLS_OF`): a
    ``BETWEEN`` as its two; anything else none."""
    k = node_kind(e)
    if k == "Between":  # input >= lower AND input <= upper
        return [(">=", e.input(), e.lower()), ("<=", e.input(), e.upper())]
    return [(SYMBOLS_OF[k], e.left(), e.right())] if k in SYMBOLS_OF else []


def time_term(e) -> tuple[int, int] | None:
    """``attr [+/- interval]`` as (Spark's id of attr, the interval in microseconds), or None."""
    k = node_kind(e)
    if k == "AttributeReference":
        return expr_id(e), 0
    if k == "Cast" and str(e.dataType().simpleString()) == "timestamp":
        return time_term(e.child())
    if k == "DatetimeSub":
        return time_term(e.replacement())
    if k == "TimestampAddInterval":
        base, iv = time_term(e.start()), e.interval()
        sign = 1
        if node_kind(iv) == "UnaryMinus":
            sign, iv = -1, iv.child()
        if base is None or node_kind(iv) != "Literal":
            return None
        typ = str(iv.dataType().simpleString())
        if typ.startswith(("interval day", "interval hour", "interval minute", "interval second")):
            us = int(iv.value())
        elif typ == "interval":
            try:
                us = interval(iv.value()) // timedelta(microseconds=1)
            except Refused:
                return None
        else:
            return None
        return base[0], base[1] + sign * us
    return None


def range_of(op: str, strict: int, a, b, times: dict[int, str],
              shifted: Mapping[int, int] = {}) -> list[tuple[str, int]] | None:
    """``a op b`` (``strict``: one µs inside) as a bound of the right side's
    time less the left's, where ``a`` and ``b`` are the sides' times
    (``times``: Spark's id -> side; ``shifted``: ids that are a side's time
    plus so many µs) plus intervals; None for another comparison."""
    ta, tb = time_term(a), time_term(b)
    if ta is None or tb is None or {times.get(ta[0]), times.get(tb[0])} != {"left", "right"}:
        return None
    ta, tb = (ta[0], ta[1] + shifted.get(ta[0], 0)), (tb[0], tb[1] + shifted.get(tb[0], 0))
    if times[ta[0]] == "left":  # a op b  <=>  b (reversed op) a: the right side's time first
        ta, tb, op = tb, ta, {">=": "<=", "<=": ">="}[op]
    # right + ra  op  left + lb   <=>   right - left  op  lb - ra
    d = tb[1] - ta[1]
    return [("lower", d + strict)] if op == ">=" else [("upper", d - strict)]


@dataclass
class JoinCondition:
    """A join's condition as gpuwm reads it: the equal keys ``on`` (a
    column of each side), the time ``bounds`` (``lower`` / ``upper``, µs
    of the right side's time less the left's), ``equal`` (``time``: equal
    event times; ``window``: the same window), the comparisons of a
    column of each side left over (``where``), whether a bound is read
    from an aggregation side's window (``by_window``), its ``conjuncts``;
    and what it was read by: each side's columns by Spark's ids
    (``cols``), the ids each side outputs (``outs``), the ids of each
    side's ``window(...)`` (``wins``) and of an aggregation side's window
    (``dwins``)."""

    on: list
    bounds: dict[str, int]
    equal: set[str]
    where: list
    by_window: bool
    conjuncts: list
    cols: dict[str, dict[int, str]]
    outs: dict[str, set[int]]
    wins: dict[int, str]
    dwins: dict[int, str]


def read_condition(node, extra: Sequence[Any], sides: dict, windows: dict, derived: dict,
                   wcols: dict) -> JoinCondition:
    """The condition of the join ``node`` (with ``extra`` conjuncts: a
    ``WHERE`` over ``FROM a, b``) over its ``sides`` (their ``windows``,
    the aggregation sides' window columns ``derived`` and ``wcols``), or
    :class:`Refused` naming the conjunct gpuwm does not join on."""
    # each side's columns by Spark's ids of the columns it outputs (a self-join's sides may share the ids below)
    outs = {n: {expr_id(a) for a in scala_iter(c.output())} for n, c in (("left", node.left()), ("right", node.right()))}
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
    conjuncts = (conjuncts_of(cond.get()) if cond.isDefined() else []) + list(extra)
    if not conjuncts:
        raise Refused("JOIN_CONDITION", "Join", "no join condition: gpuwm joins on equal keys within a time range")
    on, bounds, equal, where = [], {}, set(), []  # equal: "time" (ts = ts2), "window" (w = w2)
    by_window = False  # a bound read from an aggregation side's window bounds
    for e in conjuncts:
        k = node_kind(e)
        read = {expr_id(a) for a in scala_iter(e.references())} & set(others)
        if read:
            side = others[min(read)]
            raise Refused("JOIN_CONDITION", "Join", f"the condition {e.sql()} reads the time of its {side} side's own right side: a "
                                  f"join's rows carry its left side's event time ({sides[side].time[0]}); "
                                  "select that one")
        if k == "EqualTo" and all(node_kind(x) == "AttributeReference" for x in (e.left(), e.right())):
            a, b = expr_id(e.left()), expr_id(e.right())
            if a in outs["right"]:
                a, b = b, a
            if wins.get(a) == "left" and wins.get(b) == "right":
                equal.add("window")
                continue
            if dwins.get(a) == "left" and dwins.get(b) == "right":  # two aggregations' windows: equal windows
                lw, rw = (sides[n].window_of[0] for n in ("left", "right"))
                if (lw.size, lw.slide) != (rw.size, rw.slide):
                    raise Refused("JOIN_CONDITION", "Join", f"{e.sql()}: windows of two sizes are never equal")
                equal.add("time")
                continue
            if times.get(a) == "left" and times.get(b) == "right" and a not in shifted and b not in shifted:
                equal.add("time")
                continue
            if a in cols["left"] and b in cols["right"] and a not in times and b not in times:
                on.append([cols["left"][a], cols["right"][b]])
                continue
            raise Refused("JOIN_CONDITION", "Join", f"the condition {e.sql()}: gpuwm joins on equal keys (a column of each side), equal "
                                  "event times or equal windows")
        if not comparisons(e):
            raise Refused("JOIN_CONDITION", "Join", f"the condition {e.sql()}: gpuwm joins on equal keys (a column of each side), "
                                  "comparisons of a column of each side, and time bounds")
        for sym, a, b in comparisons(e):
            got = range_of(*BOUND[sym], a, b, times, shifted)
            if got is None:  # the rest of the condition: Spark's post-join filter, one column of each side
                ia, ib = (expr_id(x) if node_kind(x) == "AttributeReference" else None for x in (a, b))
                if ib in cols["left"] and ia in cols["right"]:
                    ia, ib, sym = ib, ia, FLIP[sym]
                if ia not in cols["left"] or ib not in cols["right"] or ia in wins or ib in wins \
                        or ia in dwins or ib in dwins:
                    raise Refused("JOIN_CONDITION", "Join", f"the condition {e.sql()}: gpuwm joins on equal keys (column = column), "
                                          "bounds between the two sides' watermark columns, equal event times or "
                                          "equal windows, and compares a column of each side")
                where.append([cols["left"][ia], sym, cols["right"][ib]])
                continue
            for which, value in got:
                if which in bounds:
                    raise Refused("JOIN_BOUNDS", "Join", f"two {which} bounds on the time between the sides")
                bounds[which] = value
            if any(x in shifted for x in (time_term(a)[0], time_term(b)[0])):
                by_window = True
    return JoinCondition(on, bounds, equal, where, by_window, conjuncts, cols, outs, wins, dwins)
