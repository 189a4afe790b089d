"""gpuwm's stateful stages in Spark's own progress (``stateOperators``):
the same entries, batch for batch, as Spark's native query over the same
micro-batch files — names, ``numRowsTotal``, ``numRowsUpdated``,
``numRowsRemoved`` and ``numRowsDroppedByWatermark`` (late rows in each
query) — through ``recentProgress`` and a Python ``StreamingQueryListener``,
and Spark's ``state-metadata`` reader listing the stages, and the UI's statistics page drawing Spark's
state charts for the accelerated query (``gpuwm/spark/driver/state_ops.py``)."""

from __future__ import annotations

import time
import urllib.request

import numpy as np
import pytest
from pyspark.sql.streaming import StreamingQueryListener

from gpuwm.spark import accelerate

from .test_spark import TEST_CONF, _random_batches, _write_batches

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    """The module's session, with Spark's UI on (a free port): its
    Structured Streaming tab is one of the places the state must reach."""
    from gpuwm.spark import local_session

    s = local_session(app="gpuwm-state-progress", cores=2,
                      conf={**TEST_CONF, "spark.ui.enabled": "true", "spark.ui.port": "0"})
    yield s
    s.stop()

#: Spark's figures a dashboard reads, each equal to Spark's own
SAME = ("operatorName", "numRowsTotal", "numRowsUpdated", "numRowsRemoved", "numRowsDroppedByWatermark")


class _Listener(StreamingQueryListener):
    """Each progress event's state entries, by run id and batch."""

    def __init__(self):
        self.got: dict = {}

    def onQueryStarted(self, event):
        pass

    def onQueryProgress(self, event):
        p = event.progress
        self.got[(str(p.runId), p.batchId)] = [{k: getattr(so, k) for k in SAME} for so in p.stateOperators]

    def onQueryIdle(self, event):
        pass

    def onQueryTerminated(self, event):
        pass


def _query(spark, src, kind):
    from pyspark.sql import functions as F

    df = (spark.readStream.schema("ts TIMESTAMP, k BIGINT, price BIGINT").option("maxFilesPerTrigger", 1)
          .parquet(src).withWatermark("ts", "10 seconds"))
    if kind == "tumble":
        return df.groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"))
    if kind == "hop":
        return df.groupBy(F.window("ts", "10 seconds", "5 seconds"), "k").agg(F.max("price").alias("m"))
    return df.dropDuplicatesWithinWatermark(["k", "price"])


@pytest.mark.parametrize("kind,vnodes", [("tumble", 1), ("hop", 2), ("dedup", 2)])
def test_state_operators_equal_spark_s_batch_for_batch(spark, tmp_path, kind, vnodes):
    """Rows behind the watermark in most batches, some a window or more
    behind (the watermark filter drops those before gpuwm's stage: their
    groups still count, as Spark counts them in its stage)."""
    src = f"{tmp_path}/in"
    _write_batches(src, _random_batches(np.random.default_rng(11), 6, 150, 10, 40, 5))
    listener = _Listener()
    spark.streams.addListener(listener)
    got = {}
    try:
        for name, df in (("spark", _query(spark, src, kind)),
                         ("gpuwm", accelerate(_query(spark, src, kind), fallback="error", vnodes=vnodes))):
            q = (df.writeStream.format("memory").queryName(f"state_{kind}_{name}").outputMode("append")
                 .option("checkpointLocation", f"{tmp_path}/ck-{name}").trigger(availableNow=True).start())
            q.awaitTermination()
            got[name] = [(p["batchId"], [{k: so[k] for k in SAME} for so in p["stateOperators"]])
                         for p in q.recentProgress]
            if name == "gpuwm":
                last = q.lastProgress["stateOperators"][0]
                rows_in = sum(p["stateOperators"][0]["customMetrics"]["gpuwmRowsIn"] for p in q.recentProgress)
                run = str(q.runId)
        for _ in range(100):  # (the listener bus is asynchronous)
            if sum(r == run for r, _ in listener.got) >= len(got["gpuwm"]):
                break
            time.sleep(0.1)
    finally:
        spark.streams.removeListener(listener)
    assert got["gpuwm"] == got["spark"]
    assert len(got["spark"]) == 7 and sum(s[0]["numRowsDroppedByWatermark"] for _, s in got["spark"]) > 0
    assert all(s[0]["numRowsRemoved"] for _, s in got["spark"][3:])
    # gpuwm's own figures beside Spark's: its vnodes as the state's partitions and instances, its counts
    assert last["numShufflePartitions"] == last["numStateStoreInstances"] == vnodes
    assert last["memoryUsedBytes"] > 0 and last["customMetrics"]["gpuwmOnGpu"] == 0
    assert rows_in > 0
    # a listener gets what the handle holds
    heard = {b: s for (r, b), s in listener.got.items() if r == run}
    assert sorted(heard.items()) == got["gpuwm"]
    # Spark's state-metadata reader lists gpuwm's stage as it lists Spark's operator
    meta = {name: [(r.operatorId, r.operatorName, r.stateStoreName)
                   for r in spark.read.format("state-metadata").load(f"{tmp_path}/ck-{name}").collect()]
            for name in ("spark", "gpuwm")}
    assert meta["gpuwm"] == meta["spark"] == [(0, got["spark"][0][1][0]["operatorName"], "default")]
    # the UI's statistics page draws its state charts only when the last progress has state entries
    url = f"{spark.sparkContext.uiWebUrl}/StreamingQuery/statistics/?id={run}"
    with urllib.request.urlopen(url, timeout=30) as r:
        page = r.read().decode()
    for chart in ("Total State Rows", "Updated State Rows", "Removed State Rows", "Late Rows Dropped By Watermark"):
        assert f"Aggregated Number Of {chart}" in page, chart
