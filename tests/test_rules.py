"""The front's rule registry (``gpuwm.spark.front.registry``) and its
reader's memo (``Context.input``): a rule for
a Catalyst node kind registered from outside gpuwm's package — as a
plugin would, without editing the registry's module — is what
``accelerate`` runs for that node, and its query equals Spark's own."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwm.spark import accelerate, explain

from .oracle import _equals_spark, _source, module_session
from .test_spark import _random_batches, _write_batches

spark = module_session("gpuwm-rules")


@pytest.fixture
def repartition_rule():
    """A toy rule for Spark's ``Repartition`` (``df.repartition(n)``), which
    gpuwm has none for: a repartition moves rows between partitions and
    changes no row, so what an operator over it reads is what it reads.
    Registered with the registry's own decorator, taken away after."""
    from gpuwm.spark.front.registry import RULES, register

    assert "Repartition" not in RULES

    @register("Repartition")
    def passed_through(ctx, node):
        return ctx.input(node.child())

    yield passed_through
    del RULES["Repartition"]


def test_a_rule_registered_from_outside_runs_through_accelerate(spark, tmp_path, repartition_rule):
    from pyspark.sql import functions as F

    src = f"{tmp_path}/in"
    _write_batches(src, _random_batches(np.random.default_rng(71), 9, 20, step=6, behind=8, keys=3))
    df = _source(spark, src).withWatermark("ts", "10 seconds").repartition(3) \
        .groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"), F.max("price").alias("mx"))
    acc = accelerate(df, fallback="error")
    assert "  aggregate  window(ts, 0:00:05) by ['k']: n = count(*), mx = max(price)" in acc.explained()
    _equals_spark(spark, df, acc, tmp_path)


def test_without_the_rule_the_node_is_refused(spark, tmp_path):
    """The same query without the toy rule: ``Repartition`` below the
    window is a node no rule translates."""
    from pyspark.sql import functions as F

    _write_batches(f"{tmp_path}/in", _random_batches(np.random.default_rng(72), 1, 5, step=6, behind=0, keys=2))
    df = _source(spark, f"{tmp_path}/in").withWatermark("ts", "10 seconds").repartition(3) \
        .groupBy(F.window("ts", "5 seconds"), "k").count()
    assert accelerate(df).refused.code == "NODE_BELOW"
    assert explain(df).startswith("Spark runs the whole query: [NODE_BELOW] Repartition: ")


@pytest.fixture
def reads(monkeypatch):
    """The nodes the front's reader (``rules.inputs.input_of``) is run on,
    in order: what :meth:`Context.input` did not find in its memo."""
    import gpuwm.spark.front.translate as tr

    got, real = [], tr.input_of

    def counting(ctx, node):
        got.append(str(node.getClass().getSimpleName()))
        return real(ctx, node)

    monkeypatch.setattr(tr, "input_of", counting)
    return got


def test_a_subtree_read_twice_is_translated_once(spark, tmp_path, reads):
    """``Context.input`` is memoized by Spark's canonical plan: the two
    sides of a self-join of an aggregation are one subtree (Spark's copy of
    it has new ids), translated once, one aggregate stage in the graph."""
    from pyspark.sql import functions as F

    from gpuwm.spark.front.translate import translate

    _write_batches(f"{tmp_path}/in", _random_batches(np.random.default_rng(73), 1, 5, step=6, behind=0, keys=2))
    g = _source(spark, f"{tmp_path}/in").withWatermark("ts", "10 seconds") \
        .groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"))
    df = g.alias("l").join(g.alias("r"), F.expr("l.window = r.window AND l.k = r.k"))
    t = translate(df)
    assert reads == ["SubqueryAlias", "EventTimeWatermark"]  # the left side, and its aggregation's input
    assert [name for st, (name, _) in zip(t.stages, t.graph) if "window" in st] == ["left0"]
    assert t.graph[-1] == ("join", ("left0", "right1"))  # (right1: the left's rows, renamed apart)


def test_sides_the_optimizer_filters_apart_are_two_inputs(spark, tmp_path, reads):
    """The memo's key holds the filters Spark's optimizer puts below each
    watermark: a self-join whose left side alone is filtered reads the
    source twice, as two inputs, each with its own filters."""
    from pyspark.sql import functions as F

    from gpuwm.spark.front.translate import translate

    _write_batches(f"{tmp_path}/in", _random_batches(np.random.default_rng(74), 1, 5, step=6, behind=0, keys=2))
    w = _source(spark, f"{tmp_path}/in").withWatermark("ts", "10 seconds")
    cond = F.expr("a.k = b.k AND b.ts BETWEEN a.ts AND a.ts + INTERVAL 5 SECONDS")
    same = translate(w.alias("a").join(w.alias("b"), cond))
    assert reads == ["SubqueryAlias"] and same.inputs["left"].origin == same.inputs["right"].origin
    reads.clear()
    apart = translate(w.alias("a").join(w.alias("b"), cond).where("a.price > 10"))
    assert reads == ["SubqueryAlias", "SubqueryAlias"]
    assert apart.inputs["left"].origin != apart.inputs["right"].origin
    assert "a.price > 10" in apart.inputs["left"].pushed and "price" not in apart.inputs["right"].pushed
