"""Spark's Catalyst plans and expressions read over py4j: a node's kind, an
expression's id, conjuncts, canonical forms, the peel down selects and
filters, and a DataFrame or a Column of a plan's own."""

from __future__ import annotations

import re
from typing import Any

from ..jvm.objects import scala_iter
from ..jvm.versions import catalyst_name

# nodes that pass their child's rows on unchanged (a temp view, a subquery's name)
TRANSPARENT = ("SubqueryAlias", "View")


def node_kind(node) -> str:
    """A plan node's or an expression's class name (``Project``, ``Alias``),
    by the newest Spark's name where a line renamed it
    (:func:`~gpuwm.spark.jvm.versions.catalyst_name`)."""
    return catalyst_name(str(node.getClass().getSimpleName()))


def expr_id(e) -> int:
    """A named expression's id (``#12`` of ``price#12``)."""
    return int(e.exprId().id())


def quoted(name: str) -> str:
    """A column name as Spark's parser takes it, backticked."""
    return "`" + name.replace("`", "``") + "`"


def no_ids(text: str) -> str:
    """Spark's text of a plan or an expression without its expression ids."""
    return re.sub(r"#\d+", "#", text)


def peel(node, kinds: tuple[str, ...] = ("Project", "Filter"), through: tuple[str, ...] = ()) -> tuple[Any, list]:
    """The node under the ``kinds`` (selects and filters) at the top of
    ``node``, and those nodes, top first; nodes of ``through`` (a temp
    view's name: :data:`TRANSPARENT`) are passed through and not listed."""
    above = []
    while node_kind(node) in kinds + through:
        if node_kind(node) in kinds:
            above.append(node)
        node = node.child()
    return node, above


def canonical(e) -> str:
    """Spark's canonical form of expression ``e`` (its ids normalized), to tell two spellings apart."""
    return str(e.canonicalized().toString())


def unary_chain(node) -> list:
    """``node`` and the nodes under it while each has one child."""
    out = [node]
    while len(kids := list(scala_iter(out[-1].children()))) == 1:
        out.append(kids[0])
    return out


def descendants(e) -> list:
    """``e`` and every expression under it (a plan node: every node under it)."""
    out, todo = [], [e]
    while todo:
        x = todo.pop()
        out.append(x)
        todo.extend(scala_iter(x.children()))
    return out


def conjuncts_of(e) -> list:
    """The terms of ``e``'s ``AND``s, left to right."""
    if node_kind(e) == "And":
        return conjuncts_of(e.left()) + conjuncts_of(e.right())
    return [e]


def filter_of(spark, conjuncts: list, child):
    """Spark's ``Filter`` of the ``conjuncts`` (ANDed) over ``child``."""
    jvm = spark._jvm.org.apache.spark.sql.catalyst
    cond = conjuncts[0]
    for e in conjuncts[1:]:
        cond = jvm.expressions.And(cond, e)
    return jvm.plans.logical.Filter(cond, child)


def of_rows(spark, plan):
    """A DataFrame over an (analyzed) logical plan of ``spark``'s."""
    from pyspark.sql import DataFrame

    jvm = spark._jvm
    try:
        jdf = jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, plan)
    except Exception:  # Spark 3.x
        jdf = jvm.org.apache.spark.sql.Dataset.ofRows(spark._jsparkSession, plan)
    return DataFrame(jdf, spark)


def as_column(df, e):
    """A Catalyst expression of ``df``'s plan's attributes as a PySpark Column."""
    from pyspark.sql.classic.column import Column

    return Column(df.sparkSession._jvm.org.apache.spark.sql.classic.ExpressionUtils.column(e))
