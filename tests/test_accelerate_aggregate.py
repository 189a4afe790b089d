"""``accelerate`` of aggregations as Nexmark and Spark's own suites write them —
filter and DISTINCT aggregates, chains of stateful operators, filters and
columns between them — against Spark (or its batch run where Spark refuses
the query on a stream), batch for batch."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpuwm.errors import ConfigError
from gpuwm.spark import accelerate, explain

from .oracle import _auctions_and_bids, _batches, _equals_spark, _native, _norm, _source, module_session
from .test_spark import SCHEMA_TKP, T0, _random_batches, _write_batches

spark = module_session("gpuwm-accelerate-aggregate")


def test_filter_aggregates_of_nexmark_q17_equal_spark_batch_for_batch(spark, tmp_path):
    """Nexmark q17's ``agg(...) FILTER (WHERE ...)`` in a window, as Spark
    runs it (count(*), sum, max, each with its own condition; one reading
    a key): translated — each FILTER a column of the source, ``CASE WHEN
    cond THEN x END`` — and equal to Spark batch for batch, late rows too.
    first/last with FILTER, and DISTINCT, fall back, each with its reason."""
    src = f"{tmp_path}/in"
    _write_batches(src, _random_batches(np.random.default_rng(47), 6, 30, step=6, behind=14, keys=3))
    _source(spark, src).withWatermark("ts", "10 seconds").createOrReplaceTempView("bid17")
    df = spark.sql("SELECT window(ts, '5 seconds') AS window, k, count(*) AS total_bids, "
                   "count(*) FILTER (WHERE price < 300) AS rank1_bids, "
                   "count(*) FILTER (WHERE price >= 300 AND price < 700) AS rank2_bids, "
                   "sum(price) FILTER (WHERE price >= 700) AS rank3_sum, "
                   "max(price) FILTER (WHERE k = 1) AS key1_max, avg(price) AS avg_price, "
                   "sum(price) / count(*) AS mean2 "  # (over aggregates: on each row out)
                   "FROM bid17 GROUP BY window(ts, '5 seconds'), k")
    acc = accelerate(df, fallback="error")
    assert "rank2_bids = count(*) FILTER (WHERE ((bid17.price >= CAST(300 AS BIGINT)) AND" in acc.explained()
    _equals_spark(spark, df, acc, tmp_path)
    for sql, code in [("first(price) FILTER (WHERE price > 5)", "AGG_FILTER"), ("count(DISTINCT k, price)",
                                                                             "AGG_DISTINCT"),
                      ("abs(count(*))", "EXPRESSION")]:
        acc = accelerate(spark.sql(f"SELECT k, {sql} AS x FROM bid17 GROUP BY window(ts, '5 seconds'), k"))
        assert acc.translation is None and acc.refused.code == code, acc.refused


_Q15 = ("SELECT date_format(window.start, 'yyyy-MM-dd HH:mm:ss') AS day, {keys}count(*) AS total_bids, "
        "count(*) FILTER (WHERE price < 300) AS rank1_bids, "
        "count(DISTINCT k) AS total_bidders, count(DISTINCT k) FILTER (WHERE price < 300) AS rank1_bidders, "
        "count(DISTINCT price) AS total_prices, sum(DISTINCT price) FILTER (WHERE price >= 700) AS rank3_sum, "
        "avg(DISTINCT price) AS avg_price, max(price) AS top "
        "FROM {view} GROUP BY window(ts, '{size}'){group}")


@pytest.mark.parametrize("vnodes,keys,size", [(1, False, "5 seconds"), (2, True, "10 seconds")])
def test_distinct_aggregates_of_nexmark_q15_q16_equal_spark_batch(spark, tmp_path, vnodes, keys, size):
    """Nexmark q15 / q16 in Spark's form (a window, not a day's text, in the
    grouping; the day's text from ``window.start`` in the SELECT):
    ``count(DISTINCT x)``, with ``FILTER``, ``sum`` / ``avg(DISTINCT x)``
    beside plain aggregates. Spark refuses DISTINCT on a stream; its batch
    run of the same SQL over the whole input (no row late) is the oracle:
    every window the stream closed (all but the last batch's, which only
    moves the watermark) equals it, at vnodes 1 and 2. In update mode it
    is refused in one line (gpuwm emits DISTINCT on window close)."""
    src = f"{tmp_path}/in"
    batches = _random_batches(np.random.default_rng(15), 5, 40, step=6, behind=8, keys=4)
    _write_batches(src, batches + [[(600, 0, 1)]])  # closes every window before it
    view = f"bid15_{vnodes}"
    _source(spark, src).withWatermark("ts", "10 seconds").createOrReplaceTempView(view)
    spark.read.schema(SCHEMA_TKP).parquet(src).createOrReplaceTempView(f"{view}_batch")
    sql = _Q15.format(keys="k AS channel, " if keys else "", size=size, group=", k" if keys else "", view="{}")
    history: list[dict] = []
    acc = accelerate(spark.sql(sql.format(view)), vnodes=vnodes, fallback="error", on_batch=history.append)
    assert "total_bidders = count(DISTINCT k)" in acc.explained()
    assert "(its input read by gpuwm's tasks)" in acc.explained()
    acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck").trigger(availableNow=True).start(
        f"{tmp_path}/out").awaitTermination()
    # the FILTER columns (CASE WHEN cond THEN x END over the source) are computed in gpuwm's tasks, which read
    # the files themselves
    assert {m["read"] for m in history if m["input_rows"]} == {"direct"}
    got = sorted((r for rows in _batches(f"{tmp_path}/out").values() for r in rows), key=repr)
    last = (T0 + timedelta(seconds=600)).strftime("%Y-%m-%d %H:%M:%S")
    want = sorted((tuple(_norm(v) for v in r) for r in spark.sql(sql.format(f"{view}_batch")).collect()
                   if r["day"] < last), key=repr)
    assert len(want) > 5 and got == want
    with pytest.raises(ConfigError, match="^output mode 'update' with a DISTINCT aggregate: Spark refuses DISTINCT "
                                          "on a stream"):
        acc.writeStream.outputMode("update").option("checkpointLocation", f"{tmp_path}/ck2").start(f"{tmp_path}/o2")


def test_distinct_aggregates_over_session_windows_equal_spark_batch(spark, tmp_path):
    """``count`` / ``sum`` / ``avg(DISTINCT price)`` per session of each key
    (few distinct prices, sessions merging across micro-batches): Spark
    refuses DISTINCT on a stream; its batch run of the same SQL over the
    whole input (no row late) is the oracle for every session the stream
    closed (all but the last batch's, which only moves the watermark)."""
    src = f"{tmp_path}/in"
    batches = _random_batches(np.random.default_rng(16), 6, 12, step=6, behind=8, keys=2)
    batches = [[(t, k, p % 5) for t, k, p in b] for b in batches]  # a session sees a price more than once
    _write_batches(src, batches + [[(600, 0, 1)]])  # closes every session before it
    _source(spark, src).withWatermark("ts", "10 seconds").createOrReplaceTempView("bid_sessions")
    spark.read.schema(SCHEMA_TKP).parquet(src).createOrReplaceTempView("bid_sessions_batch")
    sql = ("SELECT session_window, k, count(*) AS n, count(DISTINCT price) AS dp, sum(DISTINCT price) AS sp, "
           "avg(DISTINCT price) AS ap FROM {} GROUP BY session_window(ts, '2 seconds'), k")
    acc = accelerate(spark.sql(sql.format("bid_sessions")), fallback="error")
    assert "dp = count(DISTINCT price)" in acc.explained(), acc.explained()
    acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck").trigger(availableNow=True).start(
        f"{tmp_path}/out").awaitTermination()
    got = sorted((r for rows in _batches(f"{tmp_path}/out").values() for r in rows), key=repr)
    last = _norm(T0 + timedelta(seconds=600))
    want = sorted((r for r in (tuple(_norm(v) for v in r) for r in spark.sql(sql.format("bid_sessions_batch")).collect())
                   if r[0][0] < last), key=repr)
    assert len(want) > 5 and any(r[2] > r[3] for r in want) and got == want  # (prices seen twice in a session)


def test_multi_stateful_operators_suite_chains_equal_spark_batch_for_batch(spark, tmp_path):
    """Spark's own ``MultiStatefulOperatorsSuite`` chains, with its data
    (integers as seconds, watermark 0 s or 10 s), each micro-batch a file:
    a window over the window column of a window aggregation, three windows
    chained by ``window_time``, and ``dropDuplicates`` on the value and the
    event time before a window — their ``CAST(window.start AS BIGINT)``
    (whole seconds, floored) evaluated by gpuwm —, and a window on the left
    side's time after a left outer join of two sides with the same column
    names, told apart by the sides' aliases, through ``accelerate``: the
    same rows in the same micro-batches as Spark's own queries."""
    from pyspark.sql import functions as F

    def src(name, batches, delay):
        os.makedirs(f"{tmp_path}/{name}")
        for i, b in enumerate(batches):
            f = f"{tmp_path}/{name}/part-{i:03d}.parquet"
            pq.write_table(pa.table({"value": pa.array(b, pa.int64())}), f)
            os.utime(f, (1_000_000 + i, 1_000_000 + i))
        return spark.readStream.schema("value bigint").option("maxFilesPerTrigger", 1).parquet(
            f"{tmp_path}/{name}").withColumn("eventTime", F.timestamp_seconds("value")).withWatermark(
            "eventTime", delay)

    def start():
        return F.col("window.start").cast("long")

    five = F.window("eventTime", "5 seconds").alias("window")
    queries = {  # (the suite's test name)
        "window agg -> window agg": src("a", [list(range(10, 22)), list(range(10, 30)), [30, 31]], "0 seconds")
        .groupBy(five).agg(F.count("*").alias("count")).groupBy(F.window("window", "10 seconds"))
        .agg(F.count("*").alias("count"), F.sum("count").alias("sum")).select(start(), "count", "sum"),
        "agg -> agg -> agg": src("b", [list(range(0, 38)), list(range(30, 61))], "0 seconds").groupBy(five)
        .agg(F.count("*").alias("count")).groupBy(F.window(F.window_time("window"), "10 seconds"))
        .agg(F.count("*").alias("count"), F.sum("count").alias("sum"))
        .groupBy(F.window(F.window_time("window"), "20 seconds"))
        .agg(F.count("*").alias("count"), F.sum("sum").alias("sum"))
        .select(start(), F.col("window.end").cast("long"), "count", "sum"),
        "stream deduplication -> aggregation": src("c", [list(range(1, 16)), [16, 30]], "10 seconds")
        .dropDuplicates(["value", "eventTime"]).groupBy(five).agg(F.count("*").alias("count"),
                                                                   F.sum("value").alias("sum"))
        .select(start(), "count"),
    }
    # "stream-stream time interval left outer join -> aggregation": both sides' columns named alike (eventTime,
    # id), told apart by the sides' aliases; the window on left.eventTime
    day = datetime(2020, 1, 2)
    sides = {"l": [[(day - timedelta(days=1), "abc", "has no join partner"), (day, "abc", "joined with A"),
                    (day + timedelta(hours=1), "abc", "joined with B")], [(day + timedelta(days=3), "abc", "D")]],
             "r": [[(day + timedelta(seconds=10), "abc", "A"), (day + timedelta(minutes=59, seconds=59), "abc", "B"),
                    (day + timedelta(hours=2), "abc", "C")], [(day + timedelta(days=3, seconds=10), "abc", "D")]]}
    for name, batches in sides.items():
        os.makedirs(f"{tmp_path}/{name}")
        for i, b in enumerate(batches):
            f = f"{tmp_path}/{name}/part-{i:03d}.parquet"
            pq.write_table(pa.table({"eventTime": pa.array([r[0] for r in b], pa.timestamp("us")),
                                     "id": [r[1] for r in b], "comment": [r[2] for r in b]}), f)
            os.utime(f, (1_000_000 + i, 1_000_000 + i))

    def side(name, delay):
        return spark.readStream.schema("eventTime timestamp, id string, comment string").option(
            "maxFilesPerTrigger", 1).parquet(f"{tmp_path}/{name}").withWatermark("eventTime", delay)

    joined = side("l", "2 minutes").alias("left").join(side("r", "4 minutes").alias("right"), F.expr(
        "left.id = right.id AND left.eventTime BETWEEN right.eventTime - INTERVAL 40 seconds AND "
        "right.eventTime + INTERVAL 30 seconds"), "leftOuter")
    queries["join -> aggregation"] = joined.groupBy(F.window(F.col("left.eventTime"), "30 seconds")).agg(
        F.count("*").alias("cnt")).selectExpr("window.start AS window_start", "window.end AS window_end", "cnt")
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    for name, q in queries.items():
        acc = accelerate(q, fallback="error")
        d = f"{tmp_path}/{name.split()[0]}{len(name)}"
        _native(q, f"{d}/native", f"{d}/nck")
        want = _batches(f"{d}/native")
        acc.writeStream.option("checkpointLocation", f"{d}/ck").trigger(availableNow=True).start(
            f"{d}/out").awaitTermination()
        assert _batches(f"{d}/out") == want, name
        if name.startswith("stream"):  # the suite's first answer, then on
            assert want == {1: [(0, 4)], 2: [(10, 5), (15, 2), (5, 5)]}
    assert [len(want[b]) for b in sorted(want)] == [2, 1]  # the suite's answers: the join's two windows, then one


def test_filters_and_columns_between_two_operators_equal_spark_batch_for_batch(spark, tmp_path):
    """``filter`` and ``withColumn`` over a stateful operator's rows before
    another operator, as Spark users write them: a project stage
    (``gpuwm.select.ProjectSpec``, Spark's expressions evaluated as Spark
    evaluates them), the watermark passed on as Spark propagates it. Over
    a window's rows, then a window over its ``window_time`` (vnodes 2, an
    aggregate of an expression of its columns and a FILTER among them);
    Nexmark q5's graph with a HAVING and a new column over its counts,
    which feed both their maximum per window and the join back to it
    (vnodes 1); over an interval join's rows, then a window on the right
    side's time (vnodes 2; its filter's conjunct of the auctions' seller
    alone Spark's optimizer moves below their watermark, which then does
    not see the rows it drops). Each equal to Spark batch for batch, the files read by
    gpuwm's tasks."""
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    rng = np.random.default_rng(43)
    _write_batches(f"{tmp_path}/in", _random_batches(rng, 7, 120, step=6, behind=14, keys=5))
    w = _source(spark, f"{tmp_path}/in").withWatermark("ts", "10 seconds")
    per = w.groupBy(F.window("ts", "5 seconds").alias("w"), "k").agg(F.count("*").alias("n"),
                                                                    F.max("price").alias("mx"))
    kept = per.filter("n > 2 AND mx % 3 <> 1").withColumn("score", F.col("mx") * 2 + F.col("n")) \
        .filter(F.date_format("w.start", "ss") != "15")  # (an expression of the window struct)
    # the auctions the filter after the join drops run 15 s ahead: Spark's optimizer moves it below their watermark
    a, b = _auctions_and_bids(spark, f"{tmp_path}/j", batches=9, ahead=lambda t: pc.equal(t["seller"], 2))
    joined = a.join(b, F.expr("a_id = b_aid AND b_ts BETWEEN a_ts AND a_ts + interval 8 seconds"))
    queries = {
        "chain": (kept.groupBy(F.window(F.window_time("w"), "10 seconds"), "k").agg(
            F.sum("score").alias("s"), F.count("*").alias("groups"), F.sum(F.col("n") * 3).alias("n3"),
            F.expr("max(n) FILTER (WHERE score % 4 = 0)").alias("big")), 2),
        "q5": (kept.join(kept.groupBy(F.col("w").alias("mw")).agg(F.max("score").alias("top")),
                         F.expr("w = mw AND score >= top")).select(F.col("w.end").alias("until"), "k", "score"), 1),
        "join": (joined.filter("price % 3 <> 0 AND seller <> 2").withColumn("p2", F.col("price") * 3 - F.col("seller"))
                 .groupBy(F.window("b_ts", "5 seconds"), "seller").agg(F.sum("p2").alias("s"),
                                                                      F.count("*").alias("n")), 2),
    }
    text = explain(queries["chain"][0])
    assert "  filter     ((n > CAST(2 AS BIGINT)) AND (NOT ((mx % CAST(3 AS BIGINT)) = CAST(1 AS BIGINT))))\n" \
           "  compute    score = ((mx * CAST(2 AS BIGINT)) + n)\n  filter     (NOT (date_format(w.`start`, 'ss') = " \
           "'15'))\n  aggregate  window(window_time(w)" in text, text
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    for name, (q, vnodes) in queries.items():
        _native(q, f"{tmp_path}/native-{name}", f"{tmp_path}/nck-{name}")
        want = _batches(f"{tmp_path}/native-{name}")
        rows = [r for rs in want.values() for r in rs]
        assert len(want) > 2 and len(rows) > (4 if name == "q5" else 8), (name, want)  # q5: a row a window
        if name == "chain":  # the FILTER kept some groups' maximum and not others'
            assert {r[-1] is None for r in rows} == {True, False}
        history: list = []
        acc = accelerate(q, vnodes=vnodes, fallback="error", on_batch=history.append)
        acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck-{name}").trigger(availableNow=True).start(
            f"{tmp_path}/out-{name}").awaitTermination()
        assert _batches(f"{tmp_path}/out-{name}") == want, name
        assert {m["read"] for m in history if m["input_rows"]} == {"direct"}, name
