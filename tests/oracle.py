"""What the ``accelerate`` tests share: the query run by Spark to the end,
each micro-batch's rows read back, the same query run by gpuwm compared
batch for batch, and the streams they run over."""

from __future__ import annotations

import glob
import json
import os
from datetime import datetime, timedelta, timezone
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .test_spark import SCHEMA_TKP, T0, TEST_CONF


def _norm(v):
    """A value as Spark's and gpuwm's Parquet files both give it: naive UTC datetimes, structs as tuples."""
    if isinstance(v, dict):
        return tuple(_norm(x) for x in v.values())
    if isinstance(v, tuple):  # a collected Row
        return tuple(_norm(x) for x in v)
    if hasattr(v, "to_pydatetime"):  # Spark's INT96 timestamps come back as pandas' nanosecond Timestamps
        v = v.to_pydatetime()
    if isinstance(v, datetime):
        return v.astimezone(timezone.utc).replace(tzinfo=None) if v.tzinfo else v
    if isinstance(v, float):
        return round(v, 9)
    return v


def _batches(path: str) -> dict[int, list]:
    """``{batch id: sorted rows}`` of a sink written ``<path>/batch_id=<N>/``,
    or in Spark's file-sink layout (:func:`logged_files`)."""
    out: dict[int, list] = {}
    by_batch = logged_files(path) if os.path.isdir(f"{path}/_spark_metadata") else {
        int(d.rsplit("=", 1)[1]): glob.glob(f"{d}/*.parquet") for d in glob.glob(f"{path}/batch_id=*")}
    for b, files in by_batch.items():
        rows = [tuple(_norm(v) for v in r.values()) for f in files for r in pq.read_table(f).to_pylist()]
        if rows:
            out[b] = sorted(rows, key=repr)
    return out


def logged_files(path: str) -> dict[int, list[str]]:
    """``{batch id: its data files}`` of a sink in Spark's file-sink layout,
    read from its ``_spark_metadata`` log as Spark's format has it (read
    here, not by gpuwm's code): a file per batch, ``<N>`` or ``<N>.compact``
    (every file up to N), each ``v1`` and a JSON line per file; a batch's
    files are those first named by its own."""
    logs = {int(n.split(".")[0]): n for n in os.listdir(f"{path}/_spark_metadata") if n.split(".")[0].isdigit()}
    seen: set[str] = set()
    out: dict[int, list[str]] = {}
    for b in sorted(logs):
        with open(f"{path}/_spark_metadata/{logs[b]}", encoding="utf-8") as f:
            head, *lines = f.read().split("\n")
        assert head == "v1", head
        named = [json.loads(line)["path"] for line in lines if line]
        out[b] = [unquote(urlparse(p).path) for p in named if p not in seen]
        seen.update(named)
    return out


def _native(df, path: str, ck: str, mode: str = "append"):
    """Spark runs ``df`` to the end (availableNow), each micro-batch's rows to
    ``<path>/batch_id=<N>/``; its ``StreamingQuery``, ended."""
    def each(batch, batch_id):
        batch.write.mode("overwrite").parquet(f"{path}/batch_id={batch_id}")

    q = df.writeStream.foreachBatch(each).option("checkpointLocation", ck).outputMode(mode).trigger(
        availableNow=True).start()
    q.awaitTermination()
    return q


def _source(spark, src):
    return spark.readStream.schema(SCHEMA_TKP).option("maxFilesPerTrigger", 1).parquet(src)


def _query(spark, src, shape):
    from pyspark.sql import functions as F

    w = _source(spark, src).withWatermark("ts", "10 seconds")
    if shape == "tumble":  # a filter and a new column between withWatermark and the window, as users write them:
        # Spark's optimizer moves the filter below its watermark (which then does not see the rows it drops: here
        # the ones 15 s ahead, which would move it; the test's data), gpuwm reads it so
        w = w.filter("price < 950 AND price % 7 <> 3 AND price * 0.908 <> 45.4") \
            .withColumn("p2", F.col("price") * 2 + F.col("k"))  # (SQL's 0.908: decimal arithmetic)
        return w.groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"), F.max("price").alias("mx"),
                                                               F.sum("p2").alias("s2"))
    if shape == "hop":  # Spark's own column names, avg and sum (of an expression: the source computes it)
        return w.groupBy(F.window("ts", "10 seconds", "5 seconds"), "k").agg(
            F.count("*"), F.avg("price"), F.sum(F.col("price") * 2 + F.col("k")), F.min("price"),
            F.expr("max(price % 10) FILTER (WHERE price * 3 > 900)"))
    if shape == "session":
        return w.groupBy(F.session_window("ts", "4 seconds"), "k").agg(F.count("price").alias("n"))
    if shape == "first-last":  # the value of a window's first / last row as it arrived, a null too
        return w.groupBy(F.window("ts", "10 seconds", "5 seconds"), "k").agg(
            F.first("price"), F.last("price").alias("l"), F.count("price").alias("n"))
    if shape == "select":  # a filter and projections after the aggregation: struct fields, renames, a cast,
        # arithmetic (Spark 4's ANSI mode: no overflow or zero divisor here); its conjunct on the grouping key
        # alone Spark's optimizer moves below the watermark, which then does not see key 2's rows (15 s ahead)
        return (w.groupBy(F.window("ts", "5 seconds").alias("w"), F.col("k").alias("key"))
                .agg(F.max("price").alias("mx"), F.avg("price").alias("p"),
                     (F.max("price") * 2 - F.count("*")).alias("mx2"))  # (over aggregates: on each row out)
                .filter("(p >= 450.5 OR mx < 990) AND (NOT key = 1 OR p IS NULL) AND key <> 2 "
                        "AND (key IN (0, 2, NULL) OR mx IN (5, 990)) AND mx * 0.908 > 0.9")  # IN: SQL's nulls too
                .select(F.col("w.end").alias("until"), "key", F.col("mx").cast("double").alias("mx"),
                        F.expr("mx * 0.908 - 0.5").alias("eur"), "mx2",  # eur: decimal(24,3), SQL's literals
                        (F.col("mx") * 2 - F.col("key")).alias("m2"), (F.col("key") % 2).alias("odd"),
                        (F.col("p") / (F.col("mx") + 1)).alias("ratio"), (-F.col("p")).alias("neg")))
    if shape == "chain":  # a window over a window's rows (window_time), as Spark chains them (SPARK-40925)
        a = w.groupBy(F.window("ts", "10 seconds", "5 seconds").alias("w"), "k").agg(F.count("*").alias("n"),
                                                                                    F.max("price").alias("mx"))
        return a.groupBy(F.window(F.window_time("w"), "10 seconds"), "k").agg(
            F.sum("n").alias("total"), F.count("*").alias("groups"), F.max("mx").alias("mx"))
    if shape == "dedup-window":  # a dedup, then a window over its rows, keyed by Spark's own `window` column
        return w.dropDuplicatesWithinWatermark(["k", "price"]).groupBy(F.window("ts", "5 seconds"), "k").count()
    if shape == "dropdup":  # dropDuplicates with the event time among the keys (Spark drains it by the watermark)
        return w.dropDuplicates(["k", "ts"])
    if shape == "dropdup-forever":  # without the event time: every key kept forever, late rows dropped
        return w.dropDuplicates(["k"])
    if shape == "kafka":  # a Kafka sink's key and value: a cast to string, to_json of every column (a double
        # too, with this JVM's Double.toString digits), a text field
        a = w.groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"), F.max("price").alias("mx"),
                                                            F.avg("price").alias("p"))
        return a.select(F.col("k").cast("string").alias("key"), F.to_json(F.struct(
            "*", F.col("window.end").cast("string").alias("until"),
            F.lit('hi "q"\\\n\u00e9\u0001').alias("note"))).alias("value"))
    raise AssertionError(shape)


def _equals_spark(spark, df, acc, tmp_path, batches: int = 3) -> None:
    """``df`` run by Spark (no-data batches on) and ``acc`` (its
    ``accelerate``) by gpuwm on the same files: the same rows in the same
    micro-batches, more than ``batches`` of them."""
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    _native(df, f"{tmp_path}/native", f"{tmp_path}/nck")
    want = _batches(f"{tmp_path}/native")
    assert len(want) > batches
    acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck").trigger(availableNow=True).start(
        f"{tmp_path}/out").awaitTermination()
    assert _batches(f"{tmp_path}/out") == want


def _auctions_and_bids(spark, tmp: str, batches: int = 12, ahead=None):
    """test_spark_join's auction and bid streams (seed 31), one file per
    micro-batch each, as two watermarked streams (10 s and 5 s); ``ahead``:
    a mask of an auction table's rows to move 15 s ahead."""
    import pyarrow.compute as pc

    from .test_spark_join import A_SCHEMA, B_SCHEMA, _streams
    from .test_spark_join import _write as write_streams

    auctions, bids = _streams(seed=31, batches=batches)
    if ahead is not None:
        auctions = [a.set_column(1, "a_ts", pc.if_else(ahead(a), pc.add(a["a_ts"], pa.scalar(timedelta(seconds=15))),
                                                       a["a_ts"])) for a in auctions]
    write_streams(f"{tmp}/a", auctions)
    write_streams(f"{tmp}/b", bids)

    def side(name, schema, ts, delay):
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(f"{tmp}/{name}") \
            .withWatermark(ts, delay)

    return side("a", A_SCHEMA, "a_ts", "10 seconds"), side("b", B_SCHEMA, "b_ts", "5 seconds")


def _late_free_auctions_and_bids(tmp_path, seed: int) -> None:
    """Auctions ``(a_id, a_ts, seller)`` and bids ``(b_aid, b_ts, price)``,
    a file per micro-batch each under ``a/`` and ``b/``: bids of recent
    auctions, every row within 1 s of its input's newest (none late under
    a 1 s delay), times distinct to the millisecond; a last row of each at
    600 s closes all before it."""
    from .test_spark_join import TS
    from .test_spark_join import _write as write_streams

    rng = np.random.default_rng(seed)
    auctions, bids, nid = [], [], 0
    for i in range(6):  # every row within its input's delay of the newest: none late
        ids = np.arange(nid, nid + 12)
        nid += 12
        a_sec = i * 4 + rng.integers(0, 3, 12)
        auctions.append(pa.table({"a_id": ids, "a_ts": pa.array([T0 + timedelta(seconds=int(x)) for x in a_sec], TS),
                                  "seller": rng.integers(0, 4, 12)}))
        aid = rng.integers(max(0, nid - 16), nid, 30)  # bids close behind the watermark (1 s late at most)
        b_sec = i * 4 + rng.integers(-3, 4, 30) + rng.integers(1, 1000, 30) / 1000
        bids.append(pa.table({"b_aid": aid, "b_ts": pa.array([T0 + timedelta(seconds=float(x)) for x in b_sec], TS),
                              "price": (b_sec * 4).astype(int)}))  # the later bid wins, ties: the earlier
    end = pa.array([T0 + timedelta(seconds=600)], TS)
    auctions.append(pa.table({"a_id": [10**6], "a_ts": end, "seller": [0]}))
    bids.append(pa.table({"b_aid": [10**6 + 1], "b_ts": end, "price": [1]}))
    write_streams(f"{tmp_path}/a", auctions)
    write_streams(f"{tmp_path}/b", bids)


def _sql_spec(tmp_path, src: str, sql: str, name: str, **more) -> dict:
    """A ``gpuwm run`` spec of ``sql`` over the Parquet stream ``src`` named ``bids``, loaded as the CLI loads it."""
    import json

    from gpuwm.spark.front.spec import load_spec

    spec = {"sources": {"bids": {"format": "parquet", "schema": SCHEMA_TKP, "path": src,
                                 "options": {"maxFilesPerTrigger": 1},
                                 "watermark": {"column": "ts", "delay": "10 seconds"}}},
            "sql": sql, "checkpoint": f"{tmp_path}/{name}-ck", "sink": {"parquet": f"{tmp_path}/{name}"},
            "trigger": {"availableNow": True}, **more}
    (tmp_path / f"{name}.json").write_text(json.dumps(spec))
    return load_spec(str(tmp_path / f"{name}.json"))


def module_session(app: str):
    """A test module's Spark session, as a fixture (``spark =
    module_session("gpuwm-...")``): local mode, two cores, the tests'
    conf, stopped after the module's tests."""
    from gpuwm.spark import local_session

    @pytest.fixture(scope="module")
    def spark():
        s = local_session(app=app, cores=2, conf=TEST_CONF)
        yield s
        s.stop()

    return spark
