"""A streaming query's analyzed plan translated into gpuwm's stages.

:func:`translate` reads the query's analyzed plan (py4j:
``df._jdf.queryExecution().analyzed()``), with SQL's ``WITH`` clauses
inlined as Spark's optimizer inlines them, and hands its top operator —
under the selects and filters the query ends with — to the rule
registered for its Catalyst node kind (:mod:`gpuwm.spark.front.registry`;
gpuwm's rules: :mod:`gpuwm.spark.front.rules`). A rule asks for what its
operator reads with :meth:`Context.input
<gpuwm.spark.front.context.Context.input>`, which walks down to the
watermarked source or to the rule of the operator below (a chain, a
graph of joins). What lies below ``withWatermark`` stays Spark's; the
watermark and the stateful operators above it become gpuwm's stages; the
selects and filters the query ends with become the sink's projection
(:mod:`gpuwm.project`), so the rows written have Spark's columns.

What translates and what is refused, with each reason: the front's
README (``gpuwm/spark/front/README.md``). A refusal is
:class:`~gpuwm.spark.front.translation.Refused`; ``accelerate``
(:mod:`gpuwm.spark.front.accelerate`) then runs the query in Spark as
written, or fails in one line under ``spark.gpuwm.fallback=error``.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from ..catalyst.expressions import DuplicateNames, Untranslatable, node_step
from ..catalyst.plans import TRANSPARENT, filter_of, node_kind, peel
from ..jvm.versions import unsupported
from . import rules  # noqa: F401  (gpuwm's rules, registered on import)
from .context import Context
from .registry import OTHER, REFUSED, rule_for
from .rules.inputs import input_of
from .rules.join import comma_join, translate_join, unbounded_lateness
from .rules.source import below_watermarks, inlined, optimized_plan
from .translation import Refused, Translation, unbounded_join

#: why a Spark Connect DataFrame runs in Spark, and what the user can do
CONNECT = ("a Spark Connect DataFrame: gpuwm reads a query's plan and starts its stages in the driver's JVM, which a "
           "Connect client does not reach, so Spark runs it as written; for gpuwm, run it in a classic session on "
           "the driver (SparkSession.builder without remote(), pyspark, spark-submit), or as a spec with `gpuwm run` "
           "(explain(df, spec=True) in a classic session writes one)")


def translate(df, state_ttl: Any = None) -> Translation:
    """``df``'s plan as gpuwm runs it, or :class:`Refused` saying why not.
    ``state_ttl``: how long a rank's partition with no time bound stays
    open after its latest row (by event time; see
    :func:`~gpuwm.spark.front.accelerate.accelerate`)."""
    if type(df).__module__.startswith("pyspark.sql.connect."):
        raise Refused("PLAN_UNREADABLE", "query", CONNECT)
    if not getattr(df, "isStreaming", False):
        raise ConfigError("accelerate() takes a streaming DataFrame (spark.readStream...)")
    why = unsupported()
    if why is not None:
        raise Refused("SPARK_VERSION", "the query", why)
    try:
        plan = df._jdf.queryExecution().analyzed()
    except Exception as e:  # (not a DataFrame of classic PySpark's: a stand-in, a wrapper)
        raise Refused("PLAN_UNREADABLE", "query", f"its plan cannot be read over py4j ({type(e).__name__}: {e})") from None
    spark = df.sparkSession
    plan = inlined(spark, plan)
    ctx = Context(spark, input_of, optimized=optimized_plan(spark, plan), state_ttl=state_ttl)
    ctx.pushed = below_watermarks(spark, plan, ctx.optimized)
    node, tops = peel(plan, through=TRANSPARENT)
    ctx.above = tops
    kind = node_kind(node)
    comma = comma_join(tops[-1]) if kind == "Join" and tops and node_kind(tops[-1]) == "Filter" else None
    rule = rule_for(kind, top=True)
    if comma is not None:  # FROM a, b WHERE ...: the WHERE's comparisons of the sides are the join's condition
        node, fold, rest = comma
        tops[-1] = filter_of(spark, rest, tops[-1].child()) if rest else None
        tops[:] = [p for p in tops if p is not None]
        t = translate_join(ctx, node, fold)
    elif rule is not None:
        t = rule.translate(ctx, node)
    elif kind in REFUSED:
        where = "withWatermark" if kind == "EventTimeWatermark" else "the source"
        code, why = REFUSED[kind]
        raise Refused(code, "a stateless query" if code == "STATELESS" else kind, why.format(where=where))
    else:
        raise Refused("NODE_KIND", kind, OTHER)
    if unbounded_join(t):
        unbounded_lateness(ctx, t)
    _sink_projection(t, tops)
    return t


def _sink_projection(t: Translation, tops: list) -> None:
    """The selects and filters ``tops`` (top first) the query ends with, over
    its last stage's rows, as the sink's projection steps of ``t``; each
    filter (a ``HAVING``) a line of ``explain``."""
    ids = t.output_ids
    for p in reversed(tops):
        kind = node_kind(p)
        try:
            step, ids = node_step(p, ids, inner=p is not tops[0])
        except Untranslatable as e:
            raise Refused("EXPRESSION", kind, f"gpuwm does not evaluate `{e}` after the {t.shown[-1].split()[0]}") from None
        except DuplicateNames as e:
            raise Refused("DUPLICATE_NAMES", "Project", str(e)) from None
        t.output.append(step)
        if kind == "Filter":
            t.shown.append(f"filter     {p.condition().sql()}")
