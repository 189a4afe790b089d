"""The front's rule registry (``gpuwm.spark.front.registry``): a rule for
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
    assert "  aggregate  window(ts, 0:00:05) by ['k']: n = count(*), mx = max(price)" in acc.explain()
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
