"""``accelerate`` of stream-stream joins: interval joins, joins in the same
window or on equal event times, joins of joins' rows, graphs of stages
(Nexmark q5, q7, q8), joins of dedups' rows — against Spark running the
same query on the same micro-batch files, batch for batch."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

import gpuwm
from gpuwm.spark import accelerate, explain

from .oracle import _auctions_and_bids, _batches, _equals_spark, _native, _source, module_session
from .test_spark import SCHEMA_TKP, _random_batches, _write_batches

spark = module_session("gpuwm-accelerate-join")


def test_a_stream_stream_join_equals_spark_running_it(spark, tmp_path):
    """Spark's stream-stream join of two watermarked file streams on equal
    keys and a time range (a left outer join, its unmatched rows emitted
    when the watermark passes them, the last in Spark's final no-data
    batch): through ``accelerate``, gpuwm's interval join writes the same
    rows in the same micro-batches (vnodes 2, both inputs' files read
    by gpuwm's tasks); the range's other spellings are read the same."""
    from pyspark.sql import functions as F

    from gpuwm.spark.front.translate import translate

    from .test_spark_join import COND

    a, b = _auctions_and_bids(spark, str(tmp_path))
    df = a.join(b, F.expr(COND), "leftOuter")
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    _native(df, f"{tmp_path}/native", f"{tmp_path}/nck")
    want = _batches(f"{tmp_path}/native")
    rows = [r for b in want.values() for r in b]
    assert len(rows) > 50 and sum(r[3] is None for r in rows) > 5  # matched pairs and unmatched auctions
    text = explain(df)
    assert "  join       left on [['a_id', 'b_aid']], b_ts between a_ts + 0:00:00 and a_ts + 0:00:20" in text
    vnodes = 2  # vnodes 1 runs in the joins test below
    history: list = []
    acc = accelerate(df, vnodes=vnodes, on_batch=history.append)
    assert acc.translation is not None, acc.refused
    acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck{vnodes}").trigger(availableNow=True).start(
        f"{tmp_path}/out{vnodes}").awaitTermination()
    assert _batches(f"{tmp_path}/out{vnodes}") == want, vnodes
    assert {m["read"] for m in history if m["input_rows"]} == {"direct"}
    # the same range spelled otherwise (BETWEEN, the sides swapped, strict bounds one microsecond inside)
    for cond, bounds in (("a_id = b_aid AND b_ts BETWEEN a_ts - interval 3 seconds AND a_ts + interval '1' minute",
                          (-3_000_000, 60_000_000)),
                         ("b_aid = a_id AND a_ts > b_ts - interval 20 seconds AND a_ts < b_ts", (1, 19_999_999))):
        stage, = translate(a.join(b, F.expr(cond))).stages
        j = stage["join"]
        assert (j["on"], j["between"][:2], j["how"]) == ([["a_id", "b_aid"]], ["b_ts", "a_ts"], "inner")
        assert not {"where", "window", "output_behind"} & set(j)
        assert [d // timedelta(microseconds=1) for d in j["between"][2:]] == list(bounds)


def test_joins_in_the_same_window_or_on_equal_event_times_equal_spark_running_them(spark, tmp_path):
    """Spark's stream-stream join with the window among its keys (a full
    outer join of two sides that select ``window(ts, '10 seconds')``) and
    its join on equal event times (``ts = ts2`` among the keys, left outer),
    the first at vnodes 2, the second at 1: through ``accelerate``, gpuwm's window join
    emits each pair as it matches and each unmatched row as its window
    closes (the other side's window column null, as Spark's), and its
    interval join with the times as a key drops state at the watermark
    itself — the same rows in the same micro-batches as Spark's. Both sources have the same column
    names; the right side renames its columns after ``withWatermark``
    (gpuwm renames them in its source)."""
    from pyspark.sql import functions as F

    rng = np.random.default_rng(41)
    for side in ("l", "r"):
        _write_batches(f"{tmp_path}/{side}", _random_batches(rng, 6, 40, step=4, behind=12, keys=40))
    left = _source(spark, f"{tmp_path}/l").withWatermark("ts", "6 seconds")
    # the right side's columns renamed after withWatermark (gpuwm renames them in its source)
    right = _source(spark, f"{tmp_path}/r").withWatermark("ts", "3 seconds") \
        .selectExpr("ts as ts2", "k as k2", "price as p2")
    queries = {
        "window": left.select("k", "price", F.window("ts", "10 seconds").alias("w")).join(
            right.select(F.col("k2").alias("rk"), "p2", F.window("ts2", "10 seconds").alias("w2")),
            F.expr("k = rk AND w = w2"), "fullOuter"),
        "time": left.join(right, F.expr("k = k2 AND ts = ts2"), "leftOuter"),
        # no key besides the times (Spark's MultiStatefulOperatorsSuite: an equi-join on the event times,
        # then a window on the left time), or besides the window
        "time-alone": left.join(right, F.expr("ts = ts2")).groupBy(F.window("ts", "5 seconds")).agg(
            F.count("*").alias("n"), F.max("p2").alias("p")),
        "window-alone": left.select("k", "price", F.window("ts", "2 seconds").alias("w")).join(
            right.select("p2", F.window("ts2", "2 seconds").alias("w2")), F.expr("w = w2"), "leftOuter"),
    }
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    for name, df in queries.items():
        _native(df, f"{tmp_path}/native-{name}", f"{tmp_path}/nck-{name}")
        want = _batches(f"{tmp_path}/native-{name}")
        rows = [r for b in want.values() for r in b]
        if name == "time-alone":
            assert len(want) > 2 and sum(r[1] for r in rows) > 30
        elif name == "window-alone":  # each row of one side with all of the other's in its window
            assert len(rows) > 500
        else:  # pairs, and rows without a partner
            assert len(rows) > 30 and sum(r[3] is None for r in rows) > 3, name
        vnodes = 2 if name in ("window", "time-alone") else 1
        acc = accelerate(df, vnodes=vnodes)
        assert acc.translation is not None, acc.refused
        acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck-{name}{vnodes}").trigger(
            availableNow=True).start(f"{tmp_path}/out-{name}{vnodes}").awaitTermination()
        assert _batches(f"{tmp_path}/out-{name}{vnodes}") == want, (name, vnodes)
    text = explain(queries["window"])
    assert "join       full on [['k', 'rk']] in the same window(ts, 0:00:10)" in text
    # both sides' time columns are named ts: gpuwm's inner names for them are not shown
    assert "  watermark  ts, delay 0:00:06 (left)\n  watermark  ts, delay 0:00:03 (right)" in text, text
    assert "join       left on [['k', 'k2'], ['ts', 'ts2']] (equal event times)" in explain(queries["time"])
    # the SQL forms, over the two watermarked streams as views, translate as their DataFrame twins
    from gpuwm.spark.front.translate import translate

    left.createOrReplaceTempView("l")
    right.createOrReplaceTempView("r")
    sqls = {"window": "SELECT * FROM (SELECT k, price, window(ts, '10 seconds') AS w FROM l) FULL OUTER JOIN "
                      "(SELECT k2 AS rk, p2, window(ts2, '10 seconds') AS w2 FROM r) ON k = rk AND w = w2",
            "time": "SELECT * FROM l LEFT JOIN r ON k = k2 AND ts = ts2"}
    for name, sql in sqls.items():
        got, want = translate(spark.sql(sql)), translate(queries[name])
        assert (got.stages, got.shown) == (want.stages, want.shown), name  # (SELECT * adds a select of all)
        assert [n for n, _ in got.output[-1]] == [n for n, _ in want.output[-1]] == queries[name].columns


def test_a_join_of_sides_with_the_same_column_names_equals_spark_running_it(spark, tmp_path):
    """Nexmark q3/q20 as written: both sides have columns of the same
    names (``id``, ``ts``), told apart by the side they come from (Spark's
    expression ids), the join's output names as Spark's: translated — in
    SQL with table aliases too, to the same stages —, and equal to Spark
    batch for batch, each side's files read by gpuwm's tasks through the
    select that renames its columns."""
    from pyspark.sql import functions as F

    from gpuwm.spark.front.translate import translate

    a, b = _auctions_and_bids(spark, str(tmp_path), batches=11)
    a = a.select(F.col("a_id").alias("id"), F.col("a_ts").alias("ts"), "seller")
    b = b.select(F.col("b_aid").alias("id"), F.col("b_ts").alias("ts"), "price")
    df = a.join(b, (a["id"] == b["id"]) & (b["ts"] >= a["ts"]) & (b["ts"] <= a["ts"] + F.expr("interval 20 seconds"))) \
        .select(a["id"], a["ts"], "seller", "price", b["ts"].alias("bid_ts"))
    history: list = []
    acc = accelerate(df, on_batch=history.append)
    assert acc.translation is not None, acc.refused
    a.createOrReplaceTempView("auction")
    b.createOrReplaceTempView("bid")
    sql = spark.sql("SELECT A.id, A.ts, A.seller, B.price, B.ts AS bid_ts FROM auction A JOIN bid B ON A.id = B.id "
                    "AND B.ts BETWEEN A.ts AND A.ts + INTERVAL 20 SECONDS")  # q20's form: aliases, one of each
    got, frame = translate(sql), acc.translation
    assert (got.stages, got.output) == (frame.stages, frame.output) and sql.columns == df.columns
    _equals_spark(spark, df, acc, tmp_path)
    # each side's columns renamed by a select over its source: its files read by gpuwm's tasks, the select applied
    assert {m["read"] for m in history if m["input_rows"]} == {"direct"}


def test_a_window_on_the_right_sides_time_after_a_join_equals_spark_running_it(spark, tmp_path):
    """A window over a join's rows on the right side's event time, the
    range wider behind the left time than ahead of it: the window drains
    with Spark's join output watermark — the watermark less the larger of
    the two sides' state margins (here the right's 25 s, not the left's 5
    s) — and emits the same rows in the same micro-batches as Spark."""
    from pyspark.sql import functions as F

    a, b = _auctions_and_bids(spark, str(tmp_path), batches=16)
    df = a.join(b, F.expr("a_id = b_aid AND b_ts BETWEEN a_ts - interval 25 seconds AND a_ts + interval 5 seconds")) \
        .groupBy(F.window("b_ts", "4 seconds")).agg(F.count("*").alias("n"), F.sum("price").alias("s"))
    acc = accelerate(df)
    assert acc.translation is not None, acc.refused
    assert "  aggregate  window(b_ts, 0:00:04) by []: n = count(*), s = sum(price)" in explain(df)
    _equals_spark(spark, df, acc, tmp_path, batches=4)


def test_a_join_of_a_joins_rows_equals_spark_running_it(spark, tmp_path):
    """A join whose left side is a join's rows (auctions and their bids,
    the select keeping the auction's time, Spark's one event time per
    side), joined with a third stream, a second read of the bids: a graph
    of two joins — the inner over two sources, the outer over its rows
    renamed apart from the third source's — equal to Spark batch for
    batch at vnodes 2, each batch's files read by gpuwm's tasks. The third
    stream read from the bids' own directory (two inputs, one directory)
    is read by Spark's reader, never by the first input alone, and equal
    at vnodes 1. A condition on the inner join's right time is refused."""
    import shutil

    from pyspark.sql import functions as F

    from .test_spark_join import B_SCHEMA

    a, b = _auctions_and_bids(spark, str(tmp_path), batches=8)
    shutil.copytree(f"{tmp_path}/b", f"{tmp_path}/c")

    def query(c_dir: str, keep: str = "a_ts", cond: str = "c_ts BETWEEN a_ts AND a_ts + interval 10 seconds"):
        c = spark.readStream.schema(B_SCHEMA).option("maxFilesPerTrigger", 1).parquet(c_dir) \
            .withWatermark("b_ts", "5 seconds") \
            .select(F.col("b_aid").alias("c_aid"), F.col("b_ts").alias("c_ts"), F.col("price").alias("c_price"))
        j = a.join(b, F.expr("a_id = b_aid AND b_ts BETWEEN a_ts AND a_ts + interval 20 seconds")) \
            .select("a_id", keep, "seller", "price")
        return j.join(c, F.expr(f"a_id = c_aid AND {cond}"))

    df = query(f"{tmp_path}/c")
    text = explain(df, vnodes=2)
    assert "  join       inner on [['a_id', 'b_aid']], c_ts between a_ts + 0:00:00 and a_ts + 0:00:10" in text
    assert "  graph      left0 <- in0, in1; left1 <- left0; join <- left1, in2" in text, text
    assert "read by gpuwm's tasks" in text, text
    history: list = []
    _equals_spark(spark, df, accelerate(df, vnodes=2, fallback="error", on_batch=history.append), tmp_path)
    assert {m["read"] for m in history if m["input_rows"]} == {"direct"}  # the renamed sources' files too
    same = query(f"{tmp_path}/b")
    assert "two inputs read one" in explain(same)
    acc = accelerate(same, fallback="error")
    acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck1").trigger(availableNow=True).start(
        f"{tmp_path}/out1").awaitTermination()
    assert _batches(f"{tmp_path}/out1") == _batches(f"{tmp_path}/native")
    refused = accelerate(query(f"{tmp_path}/c", "b_ts", "c_ts BETWEEN b_ts AND b_ts + interval 10 seconds"))
    assert refused.translation is None and refused.refused.code == "JOIN_CONDITION", refused.refused


def test_a_window_on_the_left_sides_time_after_a_join_is_read_as_written(spark, tmp_path):
    """Nexmark q4's interval form: a window on the left side's time after
    a join whose select drops the right side's time. The window's own
    expression names the time it reads (not the plan's whole text, which
    names both): translated as ``window(a_ts)`` — not ``window(b_ts)``,
    which made Spark's UNRESOLVED_COLUMN escape ``accelerate``, ``explain``
    and ``start`` —, and equal to Spark batch for batch."""
    from pyspark.sql import functions as F

    a, b = _auctions_and_bids(spark, str(tmp_path), batches=12)
    df = a.join(b, F.expr("a_id = b_aid AND b_ts BETWEEN a_ts AND a_ts + interval 20 seconds")) \
        .select("a_id", "a_ts", "price") \
        .groupBy(F.window("a_ts", "4 seconds")).agg(F.count("*").alias("n"), F.max("price").alias("mx"))
    text = explain(df)
    acc = accelerate(df)
    assert acc.translation is not None, acc.refused
    assert "  aggregate  window(a_ts, 0:00:04) by []: n = count(*), mx = max(price)" in text, text
    _equals_spark(spark, df, acc, tmp_path)


def test_a_stream_static_join_is_named_as_such_and_runs_where_gpuwm_can(spark, tmp_path):
    """Nexmark q13 (the stream joined with a side table): refused as a
    stream–static join Spark runs — not blamed on another operator —
    alone, below a window and after one; joined before withWatermark, the
    window over its rows runs in gpuwm and equals Spark batch for batch."""
    from pyspark.sql import functions as F

    src = f"{tmp_path}/in"
    _write_batches(src, _random_batches(np.random.default_rng(13), 7, 20, step=5, behind=12, keys=4))
    side = spark.createDataFrame([(0, "a"), (1, "b"), (2, "c")], "k long, name string")
    s = _source(spark, src).withWatermark("ts", "10 seconds")
    for df in (s.join(side, "k"), s.join(side, "k").groupBy(F.window("ts", "5 seconds"), "name").count(),
               s.groupBy(F.window("ts", "5 seconds"), "k").count().join(side, "k")):
        acc = accelerate(df)
        assert acc.refused.code == "JOIN_STATIC" and "its right side is a table" in acc.refused.reason, acc.refused
    df = _source(spark, src).join(side, "k").withWatermark("ts", "10 seconds").groupBy(
        F.window("ts", "5 seconds"), "name").agg(F.count("*").alias("n"), F.max("price").alias("mx"))
    _equals_spark(spark, df, accelerate(df, fallback="error"), tmp_path, batches=2)


def test_a_join_bounded_by_a_column_of_one_side_equals_spark_running_it(spark, tmp_path):
    """Nexmark q4's join as written: ``b_ts BETWEEN a_ts AND expires``,
    where ``expires`` is a column of the auctions (not a watermark column).
    Spark derives a state watermark from ``b_ts >= a_ts`` alone — bids
    leave the state once the watermark passes them, auctions never do —
    and applies ``b_ts <= expires`` to the pairs. gpuwm's interval join
    with no upper bound and that comparison as its residual condition:
    equal batch for batch (vnodes 2), ``explain`` saying which side is
    kept; and a window over its rows (q4's per-window maximum, on the
    auctions' time) drains with Spark's join output watermark, the bids'
    state watermark."""
    from pyspark.sql import functions as F

    from gpuwm.spark.front.translate import translate

    from .test_spark_join import A_SCHEMA

    _, b = _auctions_and_bids(spark, str(tmp_path), batches=7)
    a = spark.readStream.schema(A_SCHEMA).option("maxFilesPerTrigger", 1).parquet(f"{tmp_path}/a").withColumn(
        "expires", F.expr("a_ts + INTERVAL '4' SECOND * (seller % 3) + INTERVAL '2' SECOND")).withWatermark(
        "a_ts", "10 seconds")
    q4 = a.join(b, F.expr("a_id = b_aid AND b_ts BETWEEN a_ts AND expires"))
    acc = accelerate(q4, vnodes=2, fallback="error")
    a.createOrReplaceTempView("auction4")
    b.createOrReplaceTempView("bid4")
    sql = spark.sql("SELECT A.*, B.* FROM auction4 A, bid4 B WHERE A.a_id = B.b_aid AND B.b_ts BETWEEN A.a_ts AND "
                    "A.expires AND (A.seller < 3 OR B.price > 10)")  # Nexmark's SQL: FROM a, b WHERE ...
    got = translate(sql)
    assert got.stages == acc.translation.stages and "filter     ((A.seller < CAST(3 AS BIGINT)) OR (B.price > CAST(10 AS BIGINT)))" in got.shown, got.shown
    text = acc.explained()
    assert "b_ts >= a_ts + 0:00:00; no bound cleans a_ts's side: its rows are kept in state" in text, text
    assert "where expires >= b_ts" in text, text
    _equals_spark(spark, q4, acc, tmp_path / "join")
    per_window = q4.groupBy(F.window("a_ts", "5 seconds"), "seller").agg(F.max("price").alias("top"),
                                                                       F.count("*").alias("bids"))
    _equals_spark(spark, per_window, accelerate(per_window, fallback="error"), tmp_path / "window", batches=1)


def test_an_inner_join_without_a_time_bound_equals_spark_and_says_its_state_is_kept(spark, tmp_path):
    """Nexmark q3 as written: an inner join on keys alone (``a_id =
    b_aid``, no time range), Spark's filter above it. Spark runs it keeping
    every row in state; its join drops a side's rows behind the watermark
    only where the query reads that side's event time (else its optimizer
    prunes the column, and the join finds no watermark: q3 selects no
    time). gpuwm's interval join with no bound does the same in both forms
    — equal batch for batch — and ``explain`` says the state is kept. A
    window or a dedup over it, and an outer join without a bound (Spark
    refuses it), fall back with their reason."""
    from pyspark.sql import functions as F

    a, b = _auctions_and_bids(spark, str(tmp_path), batches=6)
    joined = a.join(b, F.expr("a_id = b_aid")).filter("seller IN (1, 3, 5) OR price > 500")
    for name, cols in [("q3", ["a_id", "seller", "price"]), ("times", ["a_id", "seller", "price", "a_ts", "b_ts"])]:
        df = joined.select(*cols)
        acc = accelerate(df, fallback="error")
        text = acc.explained()
        assert "join       inner on [['a_id', 'b_aid']], no time bound: every row kept in state" in text
        assert ("late rows  none: the query reads neither event time" in text) == (name == "q3"), text
        _equals_spark(spark, df, acc, tmp_path / name)
    one = joined.select("a_id", "price", "b_ts")  # one side's time read, not the other's
    assert accelerate(one).refused.code == "JOIN_LATENESS"
    for q, code in [(a.join(b, F.expr("a_id = b_aid"), "leftOuter"), "JOIN_BOUNDS"),
                    (a.join(b, F.expr("a_id = b_aid")).groupBy(F.window("b_ts", "10 seconds")).count(),
                     "NO_EVENT_TIME"),
                    (a.join(b, F.expr("a_id = b_aid")).dropDuplicatesWithinWatermark(["a_id"]), "DEDUP_UNBOUNDED")]:
        got = accelerate(q)
        assert got.translation is None and got.refused.code == code, got.refused


def _q7_graph(src: str, tmp) -> dict:
    """Nexmark q7 as a graph of stages in a JSON spec: the bids' maximum
    price per 5 s tumble (stage ``maxp``, reading the input ``bids``), then
    the bids joined with it (reading ``bids`` and ``maxp``) on the price,
    within the window."""
    return {"inputs": {"bids": {"source": {"format": "parquet", "schema": SCHEMA_TKP, "path": src,
                                           "options": {"maxFilesPerTrigger": 1}},
                                "watermark": {"column": "ts", "delay": "10 seconds", "profile": "spark"}}},
            "stages": [{"name": "maxp", "input": "bids",
                        "window": {"tumble": "5 seconds", "aggs": {"maxprice": ["price", "max"]}}},
                       {"join": {"left": "bids", "right": "maxp", "on": [["price", "maxprice"]],
                                 "between": ["ts", "window_time", None, None],
                                 "where": [["ts", ">=", "window_start"], ["ts", "<", "window_end"]]}}],
            "checkpoint": f"{tmp}/ck", "sink": {"parquet": f"{tmp}/out"}, "trigger": {"availableNow": True}}


def test_nexmark_q7_as_a_graph_of_stages_equals_spark_batch_for_batch(spark, tmp_path):
    """Nexmark q7 as Spark runs it — the bids joined with their window's
    maximum, one stream feeding an aggregation and a join, the join's other
    side the aggregation's output —, through ``accelerate`` and written as
    a graph of stages in a JSON spec: the same rows in the same
    micro-batches as Spark's own query — which keeps every row of its join in
    state (its window's bounds carry no watermark), while gpuwm's reads them
    as a range of the window's time and cleans it; the builder's form names
    the same graph."""
    from pyspark.sql import functions as F

    from gpuwm.spark import Pipeline
    from gpuwm.spark.front.spec import build as build_spec

    rng = np.random.default_rng(77)
    batches = _random_batches(rng, 8, 40, step=6, behind=14, keys=3)
    for b in batches:  # ties at the maximum price: several bids pair with one window
        b[:] = [(t, k, p if p < 900 else 999) for t, k, p in b]
    src = f"{tmp_path}/in"
    _write_batches(src, batches)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    bids = _source(spark, src).withWatermark("ts", "10 seconds")
    m = (bids.groupBy(F.window("ts", "5 seconds")).agg(F.max("price").alias("maxprice"))
         .select(F.col("window.start").alias("wstart"), F.col("window.end").alias("wend"), "maxprice"))
    q7 = bids.join(m, F.expr("price = maxprice AND ts >= wstart AND ts < wend"))
    acc = accelerate(q7, fallback="error")
    text = acc.explained()  # gpuwm reads the window's bounds as a time range, and cleans its join's state
    assert "graph      right0 <- in0; join <- in0, right0" in text and \
        "window_time between ts + 0:00:00 and ts + 0:00:04.999999 (its window's bounds" in text, text
    _equals_spark(spark, q7, acc, tmp_path)
    want = _batches(f"{tmp_path}/native")
    assert sum(map(len, want.values())) > 20

    p = build_spec(spark, _q7_graph(src, tmp_path / "spec"))
    assert "maxp <- bids: window" in p.explain() and "stage1 <- bids, maxp: join" in p.explain()
    p.start(trigger={"availableNow": True}).awaitTermination()
    got = {}
    for n, rows in _batches(f"{tmp_path}/spec/out").items():  # ts, k, price, window_start, window_end, maxprice,
        got[n] = sorted((r[:6] for r in rows), key=repr)
    assert got == want

    b = (Pipeline({"bids": _source(spark, src)}, f"{tmp_path}/ck3")
         .watermark("ts", "10 seconds", input="bids", profile="spark")
         .window(gpuwm.Tumble("ts", "5 seconds"), aggs={"maxprice": ("price", "max")}, name="maxp", input="bids")
         .join("bids", "maxp", on=[["price", "maxprice"]], between=["ts", "window_time", None, None],
               where=[["ts", ">=", "window_start"], ["ts", "<", "window_end"]], name="q7")
         .write_parquet(f"{tmp_path}/out2"))
    assert b._plan().graph == (("maxp", ("bids",)), ("q7", ("bids", "maxp")))


def test_a_filter_after_q7s_join_keeps_the_aggregated_bids_whole(spark, tmp_path):
    """Nexmark q7 with a filter on the bids' key after its join: Spark's
    optimizer moves it below the joined read of the bids' watermark, not
    below the aggregated read (one ``withWatermark`` node, read twice,
    read once by gpuwm). gpuwm's read keeps what both reads keep: the
    window's maximum is still over every bid. Key 0's bids hold every
    other batch's highest prices (and never its newest time): Spark joins
    those maxima with key 0's bids, which the filter drops, and writes no
    row — gpuwm, had it dropped them from the maximum too, wrote 7.

    Then each read with its own filters: the maximum per key with ``k <>
    1`` (a HAVING on the key, below the aggregated read), joined with the
    bids, ``k = 2`` after the join (below the joined read), key 1's bids
    15 s ahead. Spark keeps one watermark per ``withWatermark`` node,
    raised by each read's rows: over the rows either read keeps, ``k <> 1
    OR k = 2``. gpuwm's read keeps those (once a read of what both reads
    had, ``k IS NOT NULL``: key 1's bids moved its watermark, the rows came
    in other batches than Spark's). And a filter of one read's own
    (``bids.filter("price >= 200")`` aggregated, the bids joined as they
    are, the cheaper bids 15 s ahead): two inputs for gpuwm, one watermark
    for Spark, the higher of the two reads' (``Pipeline.shared_watermark``;
    gpuwm's minimum of two came later than Spark's)."""
    from pyspark.sql import functions as F

    rng = np.random.default_rng(77)
    batches = [[(max(t - 3, 0) if k == 0 else t, k, 2000 + p if k == 0 and i % 2 else p) for t, k, p in b]
               for i, b in enumerate(_random_batches(rng, 8, 40, step=6, behind=14, keys=3))]
    _write_batches(f"{tmp_path}/in", batches)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    bids = _source(spark, f"{tmp_path}/in").withWatermark("ts", "10 seconds")
    m = (bids.groupBy(F.window("ts", "5 seconds")).agg(F.max("price").alias("maxprice"))
         .select(F.col("window.start").alias("wstart"), F.col("window.end").alias("wend"), "maxprice"))
    q7 = bids.join(m, F.expr("price = maxprice AND ts >= wstart AND ts < wend")).filter("k > 0")
    acc = accelerate(q7, fallback="error")
    assert "graph      right0 <- in0; join <- in0, right0" in acc.explained()
    _native(q7, f"{tmp_path}/native", f"{tmp_path}/nck")
    acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck").trigger(availableNow=True).start(
        f"{tmp_path}/out").awaitTermination()
    assert _batches(f"{tmp_path}/out") == _batches(f"{tmp_path}/native")  # (Spark writes no row here)

    batches = [[(t + 15 if k == 1 else t, k, p) for t, k, p in b]
               for b in _random_batches(np.random.default_rng(77), 8, 40, step=6, behind=14, keys=3)]
    _write_batches(f"{tmp_path}/in2", batches)
    bids = _source(spark, f"{tmp_path}/in2").withWatermark("ts", "10 seconds")
    m = (bids.groupBy(F.window("ts", "5 seconds"), "k").agg(F.max("price").alias("maxprice")).filter("k <> 1")
         .select(F.col("window.start").alias("wstart"), F.col("window.end").alias("wend"), F.col("k").alias("mk"),
                 "maxprice"))
    q = bids.join(m, F.expr("price = maxprice AND ts >= wstart AND ts < wend")).filter("k = 2")
    acc = accelerate(q, fallback="error")
    assert "    of rows  where (k IS NOT NULL) AND ((NOT (k = 1L)) OR ((k = 2L) AND (price IS NOT NULL)))" \
        in acc.explained(), acc.explained()
    _equals_spark(spark, q, acc, tmp_path / "two", batches=4)

    _write_batches(f"{tmp_path}/in3", [[(t + 15 if p < 200 else t, k, p) for t, k, p in b] for b in batches])
    bids = _source(spark, f"{tmp_path}/in3").withWatermark("ts", "10 seconds")
    m = (bids.filter("price >= 200").groupBy(F.window("ts", "5 seconds"), "k").agg(F.max("price").alias("maxprice"))
         .select(F.col("window.start").alias("wstart"), F.col("window.end").alias("wend"), F.col("k").alias("mk"),
                 "maxprice"))
    q = bids.join(m, F.expr("price = maxprice AND ts >= wstart AND ts < wend"))
    acc = accelerate(q, fallback="error")
    assert acc.pipeline(f"{tmp_path}/x")._plan().watermark.shared == (("in0", "in1"),)
    _equals_spark(spark, q, acc, tmp_path / "three", batches=4)


def test_nexmark_q5_fan_out_as_a_graph_of_stages_equals_spark_batch_for_batch(spark, tmp_path):
    """Nexmark q5 (hot items) as Spark runs it: the hop window counts feed
    two stages — their maximum per window (grouped by Spark's window
    column), and the join of the counts back to that maximum on the window
    (Spark's window struct as the join key: equal event times) with ``num
    >= maxn`` —, through ``accelerate``: a graph whose counts are computed
    once, a select renaming the maximum's columns apart; the same rows in
    the same micro-batches as Spark's own query, over 2 vnodes (the counts
    keyed, their maximum on one task, the join keyed on the window). The
    maximum's stage computes expressions too (over its aggregates, of its
    rows, of its window), which the join reads as columns."""
    from pyspark.sql import functions as F

    rng = np.random.default_rng(55)
    batches = _random_batches(rng, 8, 40, step=6, behind=14, keys=4)
    src = f"{tmp_path}/in"
    _write_batches(src, batches)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    bids = _source(spark, src).withWatermark("ts", "10 seconds")
    c = bids.groupBy(F.window("ts", "10 seconds", "5 seconds").alias("w"), "k").agg(F.count("*").alias("num"))
    # the maximum with more outputs: an expression over aggregates, an aggregate of an expression, the window's
    # start — computed on each row of the maximum, which the join then reads
    m = c.groupBy(F.col("w").alias("mw")).agg(F.max("num").alias("maxn"), (F.max("num") * 2 - F.count("*")).alias("x"),
                                              F.sum(F.col("num") * 10).alias("s10"), F.col("w.start").alias("ws"))
    q5 = c.join(m, F.expr("w = mw AND num >= maxn")).select("w", "k", "num", "maxn", "x", "s10", "ws")
    acc = accelerate(q5, vnodes=2, fallback="error")  # the counts once, read by the maximum's stages and the join
    assert "graph      left0 <- in0; right1 <- left0; right2 <- right1; right3 <- right2; right4 <- right3; " \
           "right5 <- right4; join <- left0, right5" in acc.explained(), acc.explained()
    assert "maxn = max(num), x = ((max(num) * CAST(2 AS BIGINT)) - count(1)), s10 = sum((num * CAST(10 AS BIGINT)))" \
        in acc.explained()
    _equals_spark(spark, q5, acc, tmp_path)
    want = _batches(f"{tmp_path}/native")
    assert sum(map(len, want.values())) > 5  # a window's hot items: one, or a tie


def test_sql_with_clauses_translate_as_their_dataframe_twins(spark, tmp_path):
    """SQL's ``WITH`` (Spark's ``WithCTE``; it was refused as an operator
    gpuwm does not translate): Nexmark q5 with its counts a relation of
    the ``WITH``, read twice (by their maximum and by the join), inlined
    as Spark's optimizer inlines it — the same stages, graph and output
    as the DataFrame form, whose rows equal Spark's
    (``test_nexmark_q5_fan_out...``); a ``WITH`` read once, too."""
    from pyspark.sql import functions as F

    from gpuwm.spark.front.translate import translate

    src = f"{tmp_path}/in"
    _write_batches(src, _random_batches(np.random.default_rng(55), 2, 10, step=6, behind=14, keys=4))
    bids = _source(spark, src).withWatermark("ts", "10 seconds")
    bids.createOrReplaceTempView("cte_bids")
    c = bids.groupBy(F.window("ts", "10 seconds", "5 seconds").alias("w"), "k").agg(F.count("*").alias("num"))
    m = c.groupBy(F.col("w").alias("mw")).agg(F.max("num").alias("maxn"))
    counts = ("c AS (SELECT window(ts, '10 seconds', '5 seconds') AS w, k, count(*) AS num FROM cte_bids "
              "GROUP BY window(ts, '10 seconds', '5 seconds'), k)")
    pairs = {f"WITH {counts}, m AS (SELECT w AS mw, max(num) AS maxn FROM c GROUP BY w) SELECT c.w, c.k, c.num, "
             "m.maxn FROM c JOIN m ON c.w = m.mw AND c.num >= m.maxn":
             c.join(m, F.expr("w = mw AND num >= maxn")).select("w", "k", "num", "maxn"),
             f"WITH {counts} SELECT w AS mw, max(num) AS maxn FROM c GROUP BY w": m}
    graphs = []
    for sql, df in pairs.items():
        got, want = translate(spark.sql(sql)), translate(df)
        assert (got.stages, got.graph, got.output) == (want.stages, want.graph, want.output), sql
        graphs.append(got.shown[-1])
    assert graphs[0] == "graph      left0 <- in0; right1 <- left0; right2 <- right1; right3 <- right2; " \
                        "join <- left0, right3", graphs  # (the counts once)


def test_a_join_of_a_dedup_s_rows_equals_spark_batch_for_batch(spark, tmp_path):
    """A join whose side is ``dropDuplicatesWithinWatermark``'s rows (the
    first bid of each auction joined to its auction; the first auction of
    each seller, left outer, to its bids) — a graph of a dedup stage and
    the join —, through ``accelerate``: the same rows in the same
    micro-batches as Spark's own query (the first over 2 vnodes: the bids'
    rows reach the dedup's vnodes in an order that does not depend on
    Spark's shuffle). The dedups drop rows here (Spark's
    inner join gives 186 pairs without the bids' dedup, 78 with it). The
    builder's ``name=``/``input=`` form names the same graph."""
    from pyspark.sql import functions as F

    a, b = _auctions_and_bids(spark, str(tmp_path), batches=8)
    cond = F.expr("a_id = b_aid AND b_ts BETWEEN a_ts AND a_ts + interval 20 seconds")
    queries = {"bids": a.join(b.dropDuplicatesWithinWatermark(["b_aid"]), cond),
               "auctions": a.dropDuplicatesWithinWatermark(["seller"]).join(b, cond, "leftOuter")}
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    for name, q in queries.items():
        acc = accelerate(q, vnodes=2 if name == "bids" else 1, fallback="error")
        graph = "right0 <- in1; join <- in0, right0" if name == "bids" else "left0 <- in0; join <- left0, in1"
        assert f"graph      {graph}" in acc.explained()
        _native(q, f"{tmp_path}/native-{name}", f"{tmp_path}/nck-{name}")
        want = _batches(f"{tmp_path}/native-{name}")
        rows = [r for rs in want.values() for r in rs]
        assert len(want) >= 3 and 10 < len(rows) < 100, (name, len(rows))
        acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck-{name}").trigger(availableNow=True).start(
            f"{tmp_path}/out-{name}").awaitTermination()
        assert _batches(f"{tmp_path}/out-{name}") == want, name
    # the builder's form of the first: a named dedup stage over one input, joined to the other
    from gpuwm.spark import Pipeline

    from .test_spark_join import A_SCHEMA, B_SCHEMA

    def side(name, schema):
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(f"{tmp_path}/{name}")

    p = (Pipeline({"auctions": side("a", A_SCHEMA), "bids": side("b", B_SCHEMA)}, f"{tmp_path}/ck")
         .watermark("a_ts", "10 seconds", input="auctions", profile="spark")
         .watermark("b_ts", "5 seconds", input="bids", profile="spark")
         .add("dedup", key=["b_aid"], input="bids", name="bd")
         .join("auctions", "bd", on=[["a_id", "b_aid"]], between=["b_ts", "a_ts", "0 seconds", "20 seconds"])
         .write_parquet(f"{tmp_path}/out"))
    assert p._plan().graph == (("bd", ("bids",)), ("stage1", ("auctions", "bd")))
    # a dedup of a window's rows as a side: refused in one line (its rows are the window's, not the source's)
    bw = b.groupBy(F.window("b_ts", "10 seconds").alias("bw"), "b_aid").agg(F.count("*").alias("n"))
    acc = accelerate(a.join(bw.dropDuplicatesWithinWatermark(["b_aid"]), F.expr("a_id = b_aid")))
    assert acc.translation is None and acc.refused.code == "JOIN_SIDE", acc.refused


def test_nexmark_q8_a_join_of_two_window_aggregations_equals_spark_batch_for_batch(spark, tmp_path):
    """Nexmark q8's shape as Spark runs it: two inputs each grouped per
    10 s window (auctions by id, bids by auction), the two aggregations'
    rows joined on the key and the window — a join whose sides are both
    stages —, through ``accelerate`` over 2 vnodes: the same rows in the
    same micro-batches as Spark's own query; and the same graph as
    ``Pipeline``'s ``name=``/``input=`` build it."""
    from pyspark.sql import functions as F

    from gpuwm.spark import Pipeline

    from .test_spark_join import A_SCHEMA, B_SCHEMA

    a, b = _auctions_and_bids(spark, str(tmp_path), batches=10)
    aw = a.groupBy(F.window("a_ts", "10 seconds").alias("aw"), "a_id").agg(F.max("seller").alias("seller"))
    bw = b.groupBy(F.window("b_ts", "10 seconds").alias("bw"), "b_aid").agg(F.count("*").alias("nb"))
    q8 = aw.join(bw, F.expr("a_id = b_aid AND aw = bw"))
    acc = accelerate(q8, vnodes=2, fallback="error")
    assert "graph      left0 <- in0; right0 <- in1; right1 <- right0; join <- left0, right1" in acc.explained()
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    _native(q8, f"{tmp_path}/native", f"{tmp_path}/nck")
    want = _batches(f"{tmp_path}/native")
    assert len(want) > 1 and sum(map(len, want.values())) > 20, want
    acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck-acc").trigger(availableNow=True).start(
        f"{tmp_path}/out-acc").awaitTermination()
    assert _batches(f"{tmp_path}/out-acc") == want

    def side(name, schema):
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(f"{tmp_path}/{name}")

    p = (Pipeline({"auctions": side("a", A_SCHEMA), "bids": side("b", B_SCHEMA)}, f"{tmp_path}/ck")
         .watermark("a_ts", "10 seconds", input="auctions", profile="spark")
         .watermark("b_ts", "5 seconds", input="bids", profile="spark")
         .window(gpuwm.Tumble("a_ts", "10 seconds"), by=["a_id"], aggs={"seller": ("seller", "max")},
                 name="aw", input="auctions")
         .window(gpuwm.Tumble("b_ts", "10 seconds"), by=["b_aid"], aggs={"nb": ("*", "count")}, input="bids")
         .add("select", columns=["b_aid", ["bs", "window_start"], ["be", "window_end"], "nb", ["bt", "window_time"]],
              name="bw")
         .join("aw", "bw", on=[["a_id", "b_aid"], ["window_time", "bt"]])
         .write_parquet(f"{tmp_path}/out"))
    assert p._plan().graph == (("aw", ("auctions",)), ("stage1", ("bids",)), ("bw", ("stage1",)),
                               ("stage3", ("aw", "bw")))


def test_operators_over_q8s_join_rows_equal_spark_batch_for_batch(spark, tmp_path):
    """Nexmark q8's join (two window aggregations joined on the key and
    the window) read by another operator, over ``window_time`` of either
    side's window: a window per seller on the right side's (``bw``) — a
    filter before it, and one of its aggregates, reading fields of the
    sides' window structs —, and a join with the bids on the left side's
    (``aw``, renamed). The join's
    output watermark is Spark's (its key-based state watermark: the
    input's); each equal to Spark batch for batch."""
    from pyspark.sql import functions as F

    a, b = _auctions_and_bids(spark, str(tmp_path), batches=10)
    aw = a.groupBy(F.window("a_ts", "10 seconds").alias("aw"), "a_id").agg(F.max("seller").alias("seller"))
    bw = b.groupBy(F.window("b_ts", "10 seconds").alias("bw"), "b_aid").agg(F.count("*").alias("nb"))
    q8 = aw.join(bw, F.expr("a_id = b_aid AND aw = bw"))
    # a filter and an aggregate reading the sides' window structs (bw.end, aw.start: each the struct of its
    # side's bounds in the join's rows)
    q = q8.filter("(date_format(aw.start, 'ss') <> '10' OR seller <> 2) AND bw.end > aw.start").groupBy(
        F.window(F.window_time("bw"), "10 seconds"), "seller").agg(
        F.sum("nb").alias("n"), F.count("*").alias("auctions"), F.max(F.col("aw.start")).alias("opened"))
    acc = accelerate(q, fallback="error")
    assert "(equal event times); output watermark: the input's, as Spark's" in acc.explained(), acc.explained()
    assert "aggregate  window(window_time(bw), 0:00:10) by ['seller']" in acc.explained(), acc.explained()
    assert "opened = max(aw.`start`)" in acc.explained(), acc.explained()
    _equals_spark(spark, q, acc, tmp_path / "win", batches=1)
    c = b.selectExpr("b_ts AS c_ts", "b_aid AS c_aid", "price AS c_p")
    q = q8.select(F.window_time("aw").alias("t"), "a_id", "seller", "nb").join(
        c, F.expr("a_id = c_aid AND c_ts BETWEEN t AND t + interval 10 seconds"))
    _equals_spark(spark, q, accelerate(q, fallback="error"), tmp_path / "join", batches=1)
    assert sum(map(len, _batches(f"{tmp_path}/join/native").values())) > 20


def test_a_join_of_a_graphs_join_equals_spark_batch_for_batch(spark, tmp_path):
    """A join whose side is a graph's join (itself of a dedup's rows and a
    source), the three sources' columns renamed apart: one graph, each
    stage once, equal to Spark batch for batch at vnodes 2."""
    from pyspark.sql import functions as F

    src = {}
    for i, n in enumerate("abc"):
        src[n] = f"{tmp_path}/{n}"
        _write_batches(src[n], _random_batches(np.random.default_rng(10 + i), 6, 20, step=6, behind=8, keys=4))
    a = _source(spark, src["a"]).withWatermark("ts", "10 seconds").dropDuplicatesWithinWatermark(["k", "price"])
    b, c = (_source(spark, src[n]).withWatermark("ts", "10 seconds").selectExpr(
        f"ts AS {n}_ts", f"k AS {n}_k", f"price AS {n}_p") for n in "bc")
    ab = a.join(b, F.expr("k = b_k AND b_ts BETWEEN ts AND ts + interval 4 seconds"))
    q = ab.select("ts", "k", "price", "b_p").join(c, F.expr("k = c_k AND c_ts BETWEEN ts AND ts + interval 3 seconds"))
    acc = accelerate(q, vnodes=2, fallback="error")
    assert "graph      left_left0 <- in0; left_left1 <- left_left0; left_join <- left_left1, in1; left3 <- " \
           "left_join; join <- left3, in2" in acc.explained(), acc.explained()
    _equals_spark(spark, q, acc, tmp_path / "abc")
    assert sum(map(len, _batches(f"{tmp_path}/abc/native").values())) > 500


def test_operators_over_q7s_join_rows_equal_spark_batch_for_batch(spark, tmp_path):
    """Nexmark q7's join (the bids with their window's maximum, bounded by
    the window's bounds) read by another operator: Spark's output
    watermark for that join is its input's — the window's bounds carry no
    watermark, so neither side has a state watermark —, not gpuwm's own
    least state watermark (the window's size behind), and gpuwm's join
    gives Spark's (Spark's ``getStateWatermark`` asked, of the join as the
    optimizer leaves it). A window per key over q7's rows, the maximum
    keeping its ``window`` and the bound ``ts < wend + 2 s`` (on the
    analyzed plan a state watermark 2 s behind; the optimizer prunes the
    window, and with it the watermark); a join of q7's rows with another
    stream. Each equal to Spark batch for batch (with gpuwm's own output
    watermark, the first one's rows came in other batches than Spark's); a
    window struct of q7's rows read by the join is refused in one line."""
    from pyspark.sql import functions as F

    src = {}
    for i, n in enumerate("ac"):
        src[n] = f"{tmp_path}/{n}"
        _write_batches(src[n], _random_batches(np.random.default_rng(10 + i), 8, 30, step=6, behind=8, keys=4))
    a = _source(spark, src["a"]).withWatermark("ts", "10 seconds")
    c = _source(spark, src["c"]).withWatermark("ts", "10 seconds").selectExpr("ts AS c_ts", "k AS c_k",
                                                                              "price AS c_p")
    m = (a.groupBy(F.window("ts", "5 seconds")).agg(F.max("price").alias("maxprice"))
         .select("window", F.col("window.start").alias("wstart"), F.col("window.end").alias("wend"), "maxprice"))
    q7 = a.join(m, F.expr("price = maxprice AND ts >= wstart AND ts < wend + interval 2 seconds")).select(
        "ts", "k", "price")
    q = q7.groupBy(F.window("ts", "10 seconds"), "k").agg(F.count("*").alias("n"), F.max("price").alias("mp"))
    acc = accelerate(q, fallback="error")
    assert "; output watermark: the input's, as Spark's" in acc.explained(), acc.explained()
    _equals_spark(spark, q, acc, tmp_path / "win", batches=2)

    q7 = a.join(m, F.expr("price = maxprice AND ts >= wstart AND ts < wend"))
    q = q7.select("ts", "k", "price").join(c, F.expr("k = c_k AND c_ts BETWEEN ts AND ts + interval 3 seconds"))
    _equals_spark(spark, q, accelerate(q, fallback="error"), tmp_path / "join")
    assert sum(map(len, _batches(f"{tmp_path}/join/native").values())) > 20
    got = accelerate(q7.select("ts", "k", "window").join(c, F.expr("k = c_k AND c_ts BETWEEN ts AND ts + "
                                                                    "interval 3 seconds")))
    assert got.translation is None and got.refused.code == "WINDOW_STRUCT", got.refused


def test_a_window_over_a_joins_rows_as_a_join_side_equals_spark_batch_for_batch(spark, tmp_path):
    """A join side that is a window aggregation over a join's rows (each
    seller's bids per 5 s window of its auctions' time, over auctions
    joined with their bids), joined with another window aggregation of
    the same auctions stream on the seller (renamed by its grouping) and
    the window: one graph of three stateful levels, the auctions read once
    (Spark's self-join copy of the source, with new ids, is the same
    ``withWatermark``), equal to Spark batch for batch at vnodes 2, the
    files read by gpuwm's tasks."""
    from pyspark.sql import functions as F

    a, b = _auctions_and_bids(spark, str(tmp_path), batches=11)
    j = a.join(b, F.expr("a_id = b_aid AND b_ts BETWEEN a_ts AND a_ts + interval 20 seconds")) \
        .select("a_id", "a_ts", "seller", "price")
    jw = j.groupBy(F.window("a_ts", "5 seconds").alias("jw"), "seller").agg(F.count("*").alias("nbids"),
                                                                             F.max("price").alias("top"))
    aw = a.groupBy(F.window("a_ts", "5 seconds").alias("aw"), F.col("seller").alias("s2")).agg(
        F.count("*").alias("nauctions"))  # (a key renamed in the aggregation's output: its own id)
    q = jw.join(aw, F.expr("seller = s2 AND jw = aw")).select("jw", "seller", "nbids", "top", "nauctions")
    text = explain(q, vnodes=2)
    assert "graph      left0 <- in0, in1; left1 <- left0; right0 <- in0; right1 <- right0; join <- left1, right1" \
        in text, text
    assert "(its input read by gpuwm's tasks)" in text, text
    history: list = []
    _equals_spark(spark, q, accelerate(q, vnodes=2, fallback="error", on_batch=history.append), tmp_path, batches=1)
    assert {m["read"] for m in history if m["input_rows"]} == {"direct"}


def test_a_graph_query_as_its_spec_runs_as_accelerate_runs_it(spark, tmp_path):
    """``explain(df, spec=True)`` of Nexmark q7 and q5 (graphs of stages:
    the bids' maximum per window joined back to the bids; the hop counts
    joined to their per-window maximum) is a JSON spec — its input, its
    stages as the records ``gpuwm run`` reads, the sink's projection — and
    ``gpuwm run`` of it writes what ``accelerate(df)`` writes, batch for
    batch; a query Spark runs has no spec, said in one line."""
    import json

    from pyspark.sql import functions as F

    from gpuwm.spark.front.spec import run

    src = f"{tmp_path}/in"
    _write_batches(src, _random_batches(np.random.default_rng(75), 8, 30, step=6, behind=8, keys=4))
    bids = _source(spark, src).withWatermark("ts", "10 seconds")
    m = bids.groupBy(F.window("ts", "5 seconds")).agg(F.max("price").alias("maxprice")).select(
        F.col("window.start").alias("wstart"), F.col("window.end").alias("wend"), "maxprice")
    bids.createOrReplaceTempView("bid_spec")
    q5 = spark.sql("WITH CountBids AS (SELECT window(ts, '10 seconds', '5 seconds') AS w, k, count(*) AS num "
                   "FROM bid_spec GROUP BY window(ts, '10 seconds', '5 seconds'), k) "
                   "SELECT C.k, C.num, C.w.end AS endtime FROM CountBids C JOIN (SELECT w AS mw, max(num) AS maxn "
                   "FROM CountBids GROUP BY w) M ON C.w = M.mw AND C.num >= M.maxn")
    queries = {"q7": bids.join(m, F.expr("price = maxprice AND ts >= wstart AND ts < wend")), "q5": q5}
    for name, df in queries.items():
        spec = json.loads(explain(df, spec=True))
        assert [next(iter(st)) for st in spec["stages"]][-1] == "join" and "inputs" in spec, spec
        spec.update(checkpoint=f"{tmp_path}/{name}/ck-spec", sink={"parquet": f"{tmp_path}/{name}/spec"},
                    trigger={"availableNow": True})
        spec["inputs"]["in0"]["source"]["options"] = {"maxFilesPerTrigger": "1"}
        run(spark, spec, verbose=False)
        accelerate(df, fallback="error").writeStream.option("checkpointLocation", f"{tmp_path}/{name}/ck").trigger(
            availableNow=True).start(f"{tmp_path}/{name}/acc").awaitTermination()
        want = _batches(f"{tmp_path}/{name}/acc")
        assert len(want) > 2 and _batches(f"{tmp_path}/{name}/spec") == want, name
    with pytest.raises(gpuwm.ConfigError, match=r"Spark runs the whole query \(\[AGG_FUNCTION\] Aggregate"):
        explain(bids.groupBy(F.window("ts", "5 seconds")).agg(F.collect_list("price")), spec=True)


def test_an_inner_join_in_update_mode_runs_as_the_running_spark_runs_it(spark, tmp_path):
    """Spark 4.2 on runs an inner stream–stream join in update mode, its
    rows append mode's (SPARK-56384): through ``accelerate`` gpuwm writes
    the same rows in the same micro-batches (``foreachBatch``: Spark's file
    sink has no update mode). Spark 4.0 and 4.1 refuse the query, and so
    does gpuwm (``OUTPUT_MODE``, saying from which Spark it runs)."""
    from pyspark.sql import functions as F

    from gpuwm.errors import ConfigError
    from gpuwm.spark.jvm import versions

    from .test_spark_join import COND

    a, b = _auctions_and_bids(spark, str(tmp_path))
    df = a.join(b, F.expr(COND))
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")

    def each(out):
        return lambda batch, batch_id: batch.write.mode("overwrite").parquet(f"{out}/batch_id={batch_id}")

    if not versions.update_joins():
        with pytest.raises(Exception, match="not supported in Update output mode, only in Append output mode"):
            _native(df, f"{tmp_path}/native", f"{tmp_path}/nck", mode="update")
        with pytest.raises(ConfigError, match=r"\[OUTPUT_MODE\].*'update' with join: .*an inner join beside Spark "
                                              r"4\.2 on, as Spark"):
            accelerate(df, fallback="error").writeStream.outputMode("update").foreachBatch(each(tmp_path)).option(
                "checkpointLocation", f"{tmp_path}/ck").start()
        return
    _native(df, f"{tmp_path}/native", f"{tmp_path}/nck", mode="update")
    want = _batches(f"{tmp_path}/native")
    assert len(want) >= 3 and sum(map(len, want.values())) > 50, want
    acc = accelerate(df, vnodes=2, fallback="error")
    acc.writeStream.outputMode("update").foreachBatch(each(f"{tmp_path}/out")).option(
        "checkpointLocation", f"{tmp_path}/ck").trigger(availableNow=True).start().awaitTermination()
    assert _batches(f"{tmp_path}/out") == want
