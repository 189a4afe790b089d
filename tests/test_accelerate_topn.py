"""``accelerate`` of ranks: top-N per window, over an aggregation's rows, a
source's and a join's, Nexmark q9, q18 and q19 — against Spark's batch run
of the same query over the whole input (Spark refuses them on a stream)."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from gpuwm.spark import accelerate

from .oracle import _batches, _late_free_auctions_and_bids, _norm, _source, _sql_spec, module_session
from .test_spark import SCHEMA_TKP, T0, _random_batches, _write_batches

spark = module_session("gpuwm-accelerate-topn")


def _topn_queries(spark, s, view: str) -> dict:
    """Top-N per window as users write them over ``s`` (a watermarked stream,
    or the same rows as a batch): over a windowed aggregation (Flink's
    Window Top-N after a window aggregation; also after a filter and a new
    column over its rows, by which it ranks), over the rows with a window
    column (DataFrame), and Nexmark q19 with an event-time window (SQL)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    agg = s.groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"), F.max("price").alias("mx"))
    s.createOrReplaceTempView(view)
    return {
        "aggregation": agg.withColumn("rn", F.dense_rank().over(Window.partitionBy("window").orderBy(F.desc("n"))))
        .filter("rn <= 2"),
        "computed": agg.filter("n > 1 AND mx % 3 <> 0").withColumn("score", F.col("mx") * 2 - F.col("n")).withColumn(
            "rn", F.dense_rank().over(Window.partitionBy("window").orderBy(F.desc("score")))).filter("rn <= 2"),
        "rows": s.withColumn("w", F.window("ts", "10 seconds")).withColumn(
            "rn", F.rank().over(Window.partitionBy("w", "k").orderBy(F.desc("price"), "ts"))).filter(F.col("rn") < 3),
        "q19": spark.sql("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window(ts, '10 seconds'), k "
                         f"ORDER BY price DESC, ts) AS rownum FROM {view}) WHERE rownum <= 3")}


def test_top_n_per_window_equals_spark_batch(spark, tmp_path):
    """Top-N per window — row_number, rank and dense_rank under a filter on
    the rank — over an aggregation's windows and over a source's rows
    partitioned by window(ts, ...): Spark refuses them on a stream
    (NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING); its batch run of the same
    query over the whole input (no row late) is the oracle for every window
    the stream closed (all but the last batch's); the aggregation's at
    vnodes 1, the rows' (a shuffle by the partition keys) and the filtered
    aggregation's at vnodes 2."""
    from pyspark.sql import functions as F

    src = f"{tmp_path}/in"
    _write_batches(src, _random_batches(np.random.default_rng(19), 5, 40, step=6, behind=8, keys=3)
                   + [[(600, 0, 1)]])  # closes every window before it
    stream = _topn_queries(spark, _source(spark, src).withWatermark("ts", "10 seconds"), "bid19s")
    batch = _topn_queries(spark, spark.read.schema(SCHEMA_TKP).parquet(src), "bid19b")
    last = T0 + timedelta(seconds=600)
    for name, df in stream.items():
        acc = accelerate(df, vnodes=1 if name == "aggregation" else 2, fallback="error")
        assert "top-n " in acc.explained() and ("compute    score" in acc.explained()) == (name == "computed")
        acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck-{name}").trigger(availableNow=True).start(
            f"{tmp_path}/out-{name}").awaitTermination()
        got = sorted((r for rows in _batches(f"{tmp_path}/out-{name}").values() for r in rows), key=repr)
        first = batch[name].columns[0]  # the window's start, or the event time
        when = F.col("window.start") if first == "window" else F.col("ts")
        want = sorted((tuple(_norm(v) for v in r) for r in batch[name].filter(when < F.lit(last)).collect()),
                      key=repr)
        assert len(want) > 5 and got == want, name


_Q18 = ("SELECT auction, bidder, price, date_time FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction "
        "ORDER BY date_time DESC) AS rank_number FROM {}) WHERE rank_number <= 1")


_Q19 = ("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number "
        "FROM {}) WHERE rank_number <= 10")


@pytest.mark.parametrize("vnodes", [1, 2])
def test_nexmark_q18_q19_as_written_run_with_a_state_ttl(spark, tmp_path, vnodes):
    """Nexmark q18 (each bidder's last bid per auction) and q19 (each
    auction's 10 highest bids) in their published SQL: a rank with no
    window among its partition keys. With ``state_ttl`` a partition closes
    once the watermark passes its latest bid by that long, and its rows go
    out then. Spark refuses both on a stream; its batch run of the same SQL
    over the whole input (no row late, no partition's bids further apart
    than the ttl) is the oracle for every partition the stream closed (a
    last bid at 600 s, of an auction of its own, closes all others), at
    vnodes 1 and 2. ``spark.gpuwm.stateTtl`` is the same setting."""
    from pyspark.sql import functions as F

    rng = np.random.default_rng(18 + vnodes)
    prices = iter(rng.permutation(10_000).tolist())  # no ties: row_number's order is the oracle's
    batches = []
    for i in range(5):  # within 4 s of the newest: none late under a 10 s delay; distinct times
        secs = i * 5 + rng.integers(-4, 5, 40) + rng.permutation(1000)[:40] / 1000
        batches.append([(float(t), int(k), next(prices)) for t, k in zip(secs.clip(0), rng.integers(0, 4, 40))])
    _write_batches(f"{tmp_path}/in", batches + [[(600, 99, 1)]])
    bid = "k AS auction", "price % 3 AS bidder", "price", "ts AS date_time"
    _source(spark, f"{tmp_path}/in").selectExpr(*bid).withWatermark("date_time", "10 seconds") \
        .createOrReplaceTempView(f"bid18s{vnodes}")
    spark.read.schema(SCHEMA_TKP).parquet(f"{tmp_path}/in").selectExpr(*bid).createOrReplaceTempView("bid18b")
    for name, sql in (("q18", _Q18), ("q19", _Q19)):
        df = spark.sql(sql.format(f"bid18s{vnodes}"))
        if name == "q19":
            spark.conf.set("spark.gpuwm.stateTtl", "1 minute")
        try:
            acc = accelerate(df, vnodes=vnodes, fallback="error", **({"state_ttl": "1 minute"} if name == "q18"
                                                                       else {}))
        finally:
            spark.conf.unset("spark.gpuwm.stateTtl")
        assert "per partition (closed when the watermark passes its latest date_time by 1 minute: state_ttl)" \
            in acc.explained(), acc.explained()
        acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck-{name}").trigger(availableNow=True).start(
            f"{tmp_path}/out-{name}").awaitTermination()
        got = sorted((r for rows in _batches(f"{tmp_path}/out-{name}").values() for r in rows), key=repr)
        want = sorted((tuple(_norm(v) for v in r) for r in spark.sql(sql.format("bid18b")).filter(
            F.col("auction") != 99).collect()), key=repr)
        assert len(want) > (10 if name == "q18" else 30) and got == want, name
    if vnodes == 1:  # a "sql" spec's "state_ttl": the same q19 over the source's own columns
        from gpuwm.spark.front.spec import run

        sql = _Q19.replace("auction", "k").format("bids")
        run(spark, _sql_spec(tmp_path, f"{tmp_path}/in", sql, "spec", state_ttl="1 minute", fallback="error"),
            verbose=False)
        spark.read.schema(SCHEMA_TKP).parquet(f"{tmp_path}/in").createOrReplaceTempView("bids_batch")
        got = sorted((r for rows in _batches(f"{tmp_path}/spec").values() for r in rows), key=repr)
        want = sorted((tuple(_norm(v) for v in r) for r in spark.sql(sql.replace("FROM bids", "FROM bids_batch"))
                       .filter("k != 99").collect()), key=repr)
        assert len(want) > 30 and got == want


@pytest.mark.parametrize("on", ["a_ts", "b_ts"])
def test_top_n_per_window_of_a_joins_rows_equals_spark_batch(spark, tmp_path, on):
    """A rank over an interval join's rows (auctions and their bids of the
    next 3 s), partitioned by a tumbling window of either side's time and
    the seller: each seller's two highest bids per window. Spark refuses
    it on a stream; its batch run over the whole input (no row late) is
    the oracle for every window the stream closed, at vnodes 2."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from .test_spark_join import A_SCHEMA, B_SCHEMA

    _late_free_auctions_and_bids(tmp_path, 23)

    def query(reader, delay):
        def side(name, schema, ts):
            got = reader.schema(schema).parquet(f"{tmp_path}/{name}")
            return got if delay is None else got.withWatermark(ts, delay)

        j = side("a", A_SCHEMA, "a_ts").join(side("b", B_SCHEMA, "b_ts"), F.expr(
            "a_id = b_aid AND b_ts BETWEEN a_ts AND a_ts + interval 3 seconds"))
        rank = F.row_number().over(Window.partitionBy("w", "seller").orderBy(F.desc("price"), "b_ts"))
        return j.withColumn("w", F.window(on, "4 seconds")).withColumn("rn", rank).filter("rn <= 2")

    acc = accelerate(query(spark.readStream.option("maxFilesPerTrigger", 1), "1 second"), vnodes=2,
                     fallback="error")
    assert f"top-n      row_number() <= 2 per window({on}, 0:00:04)" in acc.explained(), acc.explained()
    acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck").trigger(availableNow=True).start(
        f"{tmp_path}/out").awaitTermination()
    got = sorted((r for rows in _batches(f"{tmp_path}/out").values() for r in rows), key=repr)
    last = T0 + timedelta(seconds=600)
    want = sorted((tuple(_norm(v) for v in r) for r in query(spark.read, None).filter(
        F.col("w.end") < F.lit(last)).collect()), key=repr)
    assert len(want) > 20 and got == want


def test_nexmark_q9_as_published_equals_spark_batch(spark, tmp_path):
    """Nexmark q9 (each auction's winning bid) in its published SQL: ``FROM
    auction A, bid B WHERE A.id = B.auction AND B.dateTime BETWEEN
    A.dateTime AND A.expires``, ``ROW_NUMBER() OVER (PARTITION BY A.id
    ORDER BY B.price DESC, B.dateTime)``, ``rownum <= 1``. Spark refuses it
    on a stream; gpuwm joins (bids cleaned by the watermark, auctions
    kept), then ranks each auction's bids and emits the winner once the
    watermark passes its ``expires`` (no bid can join it after). Equal to
    Spark's batch run of the same SQL over the whole input (no row late)
    for every auction that expired (a last batch at 600 s expires all),
    at vnodes 2."""
    from pyspark.sql import functions as F

    from .test_spark_join import A_SCHEMA, B_SCHEMA

    _late_free_auctions_and_bids(tmp_path, 9)
    expires = F.expr("date_time + INTERVAL '3' SECOND * (seller % 3) + INTERVAL '1' SECOND")
    # both sides' times named date_time, as Nexmark's: B.date_time, only in ORDER BY, is a second date_time below
    q9 = ("SELECT a_id, seller, expires, auction, price, bid_ts FROM (SELECT A.*, B.b_aid AS auction, B.price, "
          "B.date_time AS bid_ts, ROW_NUMBER() OVER (PARTITION BY A.a_id ORDER BY B.price DESC, B.date_time ASC) "
          "AS rownum FROM {a} A, {b} B WHERE A.a_id = B.b_aid AND B.date_time BETWEEN A.date_time AND A.expires) "
          "WHERE rownum <= 1")

    def read(reader, name, schema):
        got = reader.schema(schema).parquet(f"{tmp_path}/{name}").withColumnRenamed(f"{name}_ts", "date_time")
        return got.withColumn("expires", expires) if name == "a" else got

    read(spark.readStream.option("maxFilesPerTrigger", 1), "a", A_SCHEMA).withWatermark(
        "date_time", "1 second").createOrReplaceTempView("auction9s")  # tight: a winner closes soon
    read(spark.readStream.option("maxFilesPerTrigger", 1), "b", B_SCHEMA).withWatermark(
        "date_time", "1 second").createOrReplaceTempView("bid9s")
    read(spark.read, "a", A_SCHEMA).createOrReplaceTempView("auction9b")
    read(spark.read, "b", B_SCHEMA).createOrReplaceTempView("bid9b")
    acc = accelerate(spark.sql(q9.format(a="auction9s", b="bid9s")), vnodes=2, fallback="error")
    assert "top-n      row_number() <= 1 per partition (closed when the watermark passes expires" in acc.explained()
    acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck").trigger(availableNow=True).start(
        f"{tmp_path}/out").awaitTermination()
    got = sorted((r for rows in _batches(f"{tmp_path}/out").values() for r in rows), key=repr)
    want = sorted((tuple(_norm(v) for v in r) for r in spark.sql(q9.format(a="auction9b", b="bid9b")).filter(
        F.col("expires") < F.lit(T0 + timedelta(seconds=600))).collect()), key=repr)
    assert len(want) > 20 and got == want
