"""What an operator reads: the walk down from its child through views,
selects and filters to ``withWatermark`` or another operator's rule."""

from __future__ import annotations

import re

from ...catalyst.plans import TRANSPARENT, expr_id, node_kind, peel
from ...jvm.objects import scala_iter
from ..registry import BELOW, rule_for
from ..translation import Refused, Translation, kind_of, options_of
from .join import comma_join, translate_join
from .project import project_stage
from .source import under_watermark

_WINDOW_TIME = re.compile(r"precisetimestampconversion\(\(precisetimestampconversion\([^()#]+#(\d+)(?:-T\d+ms)?"
                          r"\.end, TimestampType, LongType\) - 1\), LongType, TimestampType\)")


def input_of(ctx, node) -> Translation:
    """What an operator reads, down from ``node`` through nodes that pass
    rows on unchanged (a view, a subquery, a select of columns): either
    ``withWatermark`` over the source (a translation with no stages yet),
    or another stateful operator's output — the stages that make it, with
    Spark's ``window_time(window)`` of a window stage as gpuwm's
    ``window_time`` column (a chain, as Spark runs one since SPARK-40925)."""
    from ....aggregates import WINDOW_TIME

    while True:
        kind = node_kind(node)
        if kind == "EventTimeWatermark":  # (no filters or selects over it)
            return under_watermark(ctx, node)
        rule = rule_for(kind)
        if rule is not None:
            return consumed(rule.translate(ctx, node))
        if kind == "Project":  # columns, renames, window.start / .end and window_time(window) of a window below;
            # columns computed over a stateful operator's rows: a project stage
            made, renamed, fields, computed = {}, {}, {}, []
            for e in scala_iter(node.projectList()):
                if node_kind(e) == "AttributeReference":
                    continue
                if node_kind(e) == "Alias" and node_kind(e.child()) == "AttributeReference":
                    renamed[expr_id(e)] = (expr_id(e.child()), str(e.name()))
                    continue
                if node_kind(e) == "Alias" and node_kind(e.child()) == "GetStructField" and \
                        node_kind(e.child().child()) == "AttributeReference" and \
                        str(e.child().extractFieldName()) in ("start", "end"):
                    fields[expr_id(e)] = (expr_id(e.child().child()), f"window_{e.child().extractFieldName()}")
                    continue
                m = _WINDOW_TIME.fullmatch(str(e.child().toString())) if node_kind(e) == "Alias" else None
                if m is None:
                    computed.append(e)
                    continue
                made[expr_id(e)] = int(m.group(1))
            if not (computed and watermarked(node)):  # (over withWatermark: the source computes them)
                if made or renamed or fields or computed:
                    below = ctx.input(node.child())
                    wins = {**({below.window_id: ("window_start", "window_end", WINDOW_TIME)}
                               if below.window_id is not None else {}), **below.windows}
                    if any(w not in wins for w in made.values()):
                        raise Refused("WINDOW_STRUCT", "Project", "window_time() of a column that is not the window of the "
                                                 "aggregation below (or of an aggregation's rows a join reads)")
                    if any(w not in wins for w, _ in fields.values()):
                        raise Refused("WINDOW_STRUCT", "Project", "a field of a struct that is not the window of the aggregation "
                                                 "below (or of an aggregation's rows a join reads)")
                    below.columns.update({i: wins[w][("window_start", "window_end").index(c)]
                                         for i, (w, c) in fields.items()})
                    if made:
                        below.columns.update({i: wins[w][2] for i, w in made.items()})
                        named = {wins[made[expr_id(e)]][2]: str(e.name()) for e in scala_iter(node.projectList())
                                 if expr_id(e) in made}  # (a join's rows: the time of either side's window)
                        first = next(e for e in scala_iter(node.projectList()) if expr_id(e) in made)
                        below.time = str(first.name()), wins[made[expr_id(first)]][2]
                        below.other_times = [(named.get(c, n), c) for n, c in below.other_times]
                    for new, (old, name) in renamed.items():  # the same column of gpuwm's under another name
                        if old in below.columns:
                            below.columns[new] = below.columns[old]
                            if below.time is not None and below.columns[old] == below.time[1]:
                                below.time = name, below.time[1]
                    if computed:
                        project_stage(below, node, computed)
                    return below
                node = node.child()
                continue
        if kind in TRANSPARENT:
            node = node.child()
            continue
        comma = comma_join(node) if kind == "Filter" else None
        if comma is not None and not comma[2]:  # FROM a, b WHERE <the join's condition>
            return consumed(translate_join(ctx, comma[0], comma[1]))
        if kind == "Filter" and not watermarked(node):  # over a stateful operator's rows: a project stage
            below = ctx.input(node.child())
            project_stage(below, node, None)
            return below
        if kind in ("Filter", "Project"):
            return under_watermark(ctx, node)
        if kind in ("StreamingRelation", "StreamingRelationV2", "StreamingExecutionRelation"):
            raise Refused("NO_WATERMARK", "query", "no withWatermark: gpuwm's operators drain by the watermark")
        raise Refused("NODE_BELOW", kind, BELOW)


def consumed(t: Translation) -> Translation:
    """``t``, a stateful operator's rows read by another operator: its
    output columns computed on each output row (:attr:`Translation.computed`)
    become a project stage's columns, for the operator over them to read;
    a join's output watermark becomes Spark's where gpuwm's own is not
    (:attr:`Translation.lag`; a join that ends the query keeps gpuwm's,
    which no operator reads, and its checkpoints from before this match)."""
    if t.lag is not None:
        lag = t.lag()
        k = max(i for i, st in enumerate(t.stages) if kind_of(st) == "join")
        t.stages[k] = {"join": {**options_of(t.stages[k]), "output_behind": lag}}
        at = max(i for i, line in enumerate(t.shown) if line.startswith("join "))
        t.shown[at] += f"; output watermark: the input's{f' less {lag}' if lag else ''}, as Spark's"
        t.lag = None
    if t.computed:
        names = {n: x for n, x in t.output[0]}
        n = len(t.stages)
        step = [[f"__gpuwm_c{n}_{k}", names[t.output_ids[i]]] for k, i in enumerate(t.computed)]
        t.stages.append({"project": {"steps": [step]}})
        t.columns.update({i: c for i, (c, _) in zip(t.computed, step)})
        t.computed = []
    return t


def watermarked(node) -> bool:
    """``node``, a filter or a select, is over ``withWatermark`` through
    filters and selects alone (else over another operator's rows)."""
    return node_kind(peel(node, through=TRANSPARENT)[0]) == "EventTimeWatermark"
