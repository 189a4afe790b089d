"""gpuwm on Spark (local mode): the pipeline against the engine-independent
operators, against Spark's own windowed aggregation, crash and restart, and
bad input."""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpuwm
from gpuwm.nexmark import NexmarkConfig, bids

pytestmark = pytest.mark.spark
pyspark = pytest.importorskip("pyspark")

from gpuwm.spark import Pipeline, local_session, read_nexmark  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
TS = pa.timestamp("us", tz="UTC")
#: the Spark test sessions' settings: one shuffle partition, so that Spark's own stateful queries (the oracles)
#: run one state-store task a batch, not local_session's four (a join test: ~20 % less time at two than at four,
#: ~20 % less again at one; Spark's rows do not depend on it; gpuwm's tasks are its vnodes, set apart), and
#: no whole-stage code generation: a stateful batch's plan holds its watermark, so Spark compiles new code for
#: every micro-batch of a few rows (q8 as Spark runs it, 10 batches, warm: ~35 s with it, ~27 s without)
TEST_CONF = {"spark.sql.shuffle.partitions": "1", "spark.sql.codegen.wholeStage": "false"}


@pytest.fixture(scope="module")
def spark():
    s = local_session(app="gpuwm-tests", cores=2, conf=TEST_CONF)
    yield s
    s.stop()


def read_out(path: str) -> pa.Table | None:
    """A Parquet sink's rows in batch order: ``batch_id=<N>`` folders, or Spark's layout's logged files."""
    if os.path.isdir(os.path.join(path, "_spark_metadata")):
        from .oracle import logged_files

        files = [f for _, fs in sorted(logged_files(path).items()) for f in sorted(fs)]
    else:
        files = sorted(glob.glob(os.path.join(path, "batch_id=*", "*.parquet")))
    if not files:
        return None
    return pa.concat_tables([pq.read_table(f) for f in files])


def rows_of(t: pa.Table | None, cols: list[str]) -> list[tuple]:
    if t is None:
        return []
    return sorted(tuple(r[c] for c in cols) for r in t.to_pylist())


NEX = dict(totalEvents=60_000, eventsPerBatch=10_000, splits=3, eventsPerSecond=2_000, maxDelayMs=12_000,
           outOfOrderFraction=0.2, seed=7)


def nexmark_batches(opts: dict) -> list[pa.Table]:
    cfg = NexmarkConfig(events_per_second=opts["eventsPerSecond"], splits=opts["splits"],
                        out_of_order_fraction=opts["outOfOrderFraction"], max_delay_ms=opts["maxDelayMs"],
                        seed=opts["seed"])
    out = []
    for a in range(0, opts["totalEvents"], opts["eventsPerBatch"]):
        b = min(a + opts["eventsPerBatch"], opts["totalEvents"])
        out.append(pa.concat_tables([bids(cfg, a, b, s) for s in range(cfg.splits)]))
    return out


def q7_pipeline(spark, tmp, profile="spark", emit="on-batch", vnodes=None, read="auto"):
    df = read_nexmark(spark, f"{tmp}/ck", **NEX)
    return (Pipeline(df, f"{tmp}/ck", vnodes=vnodes, read=read)
            .watermark("date_time", delay="2 seconds", split="split", profile=profile, emit=emit)
            .window(gpuwm.Tumble("date_time", "2 seconds"), by=["auction"],
                    aggs={"bids": ("*", "count"), "max_price": ("price", "max")})
            .write_parquet(f"{tmp}/out"))


def run_to_end(p: Pipeline):
    q = p.start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    return q


@pytest.mark.parametrize("profile,read", [("spark", "auto"), ("risingwave", "spark")])
def test_pipeline_equals_operators_over_the_same_batches(spark, tmp_path, profile, read):
    """read='auto': each task generates its Nexmark splits itself from the
    offsets Spark logged; 'spark': rows from the source through the JVM."""
    p = q7_pipeline(spark, tmp_path, profile=profile, vnodes=3, read=read)
    run_to_end(p)
    got = read_out(f"{tmp_path}/out")
    # the engine-independent operators over the same micro-batches
    # spark: a row behind the watermark still counts in a window that is open (window_lateness="window")
    f = gpuwm.WatermarkFilter("date_time", delay=timedelta(seconds=2), split="split", profile=profile,
                              allowed_lateness=timedelta(seconds=2 if profile == "spark" else 0))
    a = gpuwm.WindowAggregate(gpuwm.Tumble("date_time", "2 seconds"), by=["auction"],
                              aggs={"bids": ("*", "count"), "max_price": ("price", "max")}, profile=profile)
    outs = []
    for b in nexmark_batches(NEX):
        a.push(f.process(b))
        outs.append(a.drain(f.output_watermark))
    outs.append(a.drain(f.finish()))  # the end of the bounded source: spark's last no-data batch
    exp = pa.concat_tables(outs)
    cols = ["window_start", "auction", "bids", "max_price"]
    assert exp.num_rows > 100 and (outs[-1].num_rows > 0) == (profile == "spark")
    assert rows_of(got, cols) == rows_of(exp, cols)
    m = p.history
    assert [x["batch_id"] for x in m] == list(range(6 + (profile == "spark")))
    assert sum(x["input_rows"] for x in m) == sum(b.num_rows for b in nexmark_batches(NEX))
    assert sum(x["late_rows"] for x in m) == f.late_rows > 0
    assert sum(x["stages"][0]["late_rows"] for x in m) == a.late_rows
    assert m[-1]["watermark"] == f.watermark_raw
    assert {x["read"] for x in m if x["input_rows"]} == {"direct" if read == "auto" else "spark"}


@pytest.mark.parametrize("vnodes", [None, 3])
def test_sorted_stream_is_ordered_and_complete(spark, tmp_path, vnodes):
    """One ordered stream: batch after batch and, with 3 vnodes, the parts
    the range exchange wrote, in order."""
    df = read_nexmark(spark, f"{tmp_path}/ck", **NEX)
    p = (Pipeline(df, f"{tmp_path}/ck", vnodes=vnodes).watermark("date_time", delay="2 seconds", split="split")
         .sort(key=["event_id"]).write_parquet(f"{tmp_path}/out"))
    run_to_end(p)
    files = sorted(glob.glob(f"{tmp_path}/out/batch_id=*/*.parquet"),
                   key=lambda x: (int(x.split("batch_id=")[1].split("/")[0]), x))
    if vnodes:
        assert max(len(glob.glob(f"{tmp_path}/out/batch_id={m['batch_id']}/*")) for m in p.history) == vnodes
        assert sum(m["merge_tasks_s"] > 0 for m in p.history) > 1
    got = pa.concat_tables([pq.read_table(x) for x in files])
    ts = got.column("date_time").cast(pa.int64()).to_numpy()
    assert np.all(np.diff(ts) >= 0)  # one ordered, append-only stream across batches
    s = gpuwm.StreamSort("date_time", key=["event_id"])
    f = gpuwm.WatermarkFilter("date_time", delay=timedelta(seconds=2), split="split")
    exp = []
    for b in nexmark_batches(NEX):
        s.push(f.process(b))
        exp.append(s.drain(f.output_watermark))
    assert got.column("event_id").to_pylist() == pa.concat_tables(exp).column("event_id").to_pylist()


def test_console_sink_prints_each_batchs_rows(spark, tmp_path, capsys):
    """The console sink over 2 vnodes and the sort's range exchange: the rows
    of each batch reach the driver as exchange pieces (not through Spark's
    rows), and it prints their count and the first of them."""
    opts = dict(NEX, totalEvents=20_000)
    df = read_nexmark(spark, f"{tmp_path}/ck", **opts)
    p = (Pipeline(df, f"{tmp_path}/ck", vnodes=2).watermark("date_time", delay="2 seconds", split="split")
         .sort(key=["event_id"]).write_console(rows=3))
    run_to_end(p)
    out = capsys.readouterr().out
    got = [int(n) for n in re.findall(r"^-------- gpuwm batch \d+: (\d+) row\(s\) --------$", out, re.M)]
    s = gpuwm.StreamSort("date_time", key=["event_id"])
    f = gpuwm.WatermarkFilter("date_time", delay=timedelta(seconds=2), split="split")
    exp = []
    for b in nexmark_batches(opts):
        s.push(f.process(b))
        exp.append(s.drain(f.output_watermark).num_rows)
    assert got[:len(exp)] == exp and sum(got) == sum(exp) > 0
    assert "event_id" in out  # the rows themselves, headed by their columns


def _write_batches(d: str, batches: list[list[tuple]], ids: bool = False) -> None:
    """One Parquet file per batch, increasing mtimes (Spark takes the oldest
    first); ``ids``: an ``id`` column numbering the rows of all batches."""
    os.makedirs(d, exist_ok=True)
    base = time.time() - 1000
    n = 0
    for i, rows in enumerate(batches):
        t = pa.table({"ts": pa.array([T0 + timedelta(seconds=s) for s, _, _ in rows], TS),
                      "k": pa.array([k for _, k, _ in rows], pa.int64()),
                      "price": pa.array([p for _, _, p in rows], pa.int64())})
        if ids:
            t = t.append_column("id", pa.array(range(n, n + len(rows)), pa.int64()))
            n += len(rows)
        p = os.path.join(d, f"part-{i:04d}.parquet")
        pq.write_table(t, p)
        os.utime(p, (base + i, base + i))


SCHEMA_TKP = "ts timestamp, k bigint, price bigint"


def _random_batches(rng, batches: int, rows: int, step: int, behind: int, keys: int) -> list[list[tuple]]:
    """(seconds, key, price) rows per batch: batch i's event times spread over
    [i * step - behind, i * step + step), clipped at 0 — out of order, some late."""
    out = []
    for i in range(batches):
        secs = (i * step + rng.integers(-behind, step, rows)).clip(0)
        out.append(list(zip(secs.tolist(), rng.integers(0, keys, rows).tolist(), rng.integers(0, 1000, rows).tolist())))
    return out


def _spark_native_append(spark, tmp_path, batches: list[list[tuple]], window) -> list[tuple]:
    """Spark's own withWatermark(10 s) + ``window`` (a window or session_window
    column) + append query over one file per batch, run to the end: sorted
    (start, end, k, count, max price) rows."""
    from pyspark.sql import functions as F

    src = f"{tmp_path}/in"
    _write_batches(src, batches)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    native = (spark.readStream.schema(SCHEMA_TKP).option("maxFilesPerTrigger", 1)
              .parquet(src).withWatermark("ts", "10 seconds")
              .groupBy(window.alias("w"), "k")
              .agg(F.count("*").alias("n"), F.max("price").alias("mx"))
              .selectExpr("w.start as ws", "w.end as we", "k", "n", "mx"))
    nq = (native.writeStream.format("parquet").option("path", f"{tmp_path}/native")
          .option("checkpointLocation", f"{tmp_path}/nck").outputMode("append")
          .trigger(availableNow=True).start())
    nq.awaitTermination()
    utc = lambda t: t.to_pydatetime().replace(tzinfo=timezone.utc) if t.tzinfo is None else t.to_pydatetime()  # noqa: E731
    exp = spark.read.parquet(f"{tmp_path}/native").toPandas()
    return sorted((utc(r.ws), utc(r.we), r.k, r.n, r.mx) for r in exp.itertuples())


def _session_batches(rng) -> list[list[tuple]]:
    """Bursts per key with pauses (seconds); 40 % of the rows arrive 1-3 batches late."""
    batches: list[list] = [[] for _ in range(13)]
    for i in range(10):
        for k in range(4):
            if rng.random() < 0.7:
                m = int(rng.integers(1, 6))
                secs = i * 10 + int(rng.integers(0, 8)) + np.cumsum(rng.integers(0, 4, m))
                for t in secs.tolist():
                    batches[i + int(rng.choice([0, 0, 0, 0, 0, 0, 1, 1, 2, 3]))].append(
                        (t, k, int(rng.integers(0, 1000))))
    batches = [rng.permutation(np.array(b, dtype=np.int64)).tolist() if b else [] for b in batches]
    return [[tuple(r) for r in b] for b in batches]


@pytest.mark.parametrize("kind", ["tumble", "hop", "session", "sort"])
def test_spark_profile_matches_spark_native_append_to_the_end(spark, tmp_path, kind):
    """gpuwm (profile spark) against Spark's own withWatermark(10 s) + append
    query on the same files, one per micro-batch, both run with
    availableNow to the end — Spark's last micro-batch has no data and emits
    what the final watermark closes; gpuwm asks Spark for the same drain
    (gpuwm.spark.driver.drain), no extra input file. vnodes 1 and 3, the task reading
    the files itself and Spark's rows through the JVM. Sort: Spark has no
    streaming sort, so its reference is every row Spark's own watermark
    keeps (dropDuplicatesWithinWatermark on a unique id), ordered."""
    from pyspark.sql import functions as F

    rng = np.random.default_rng({"tumble": 3, "hop": 4, "session": 11, "sort": 5}[kind])
    batches = _session_batches(rng) if kind == "session" else _random_batches(
        rng, 10, 40, step=6, behind=20, keys=3)
    if kind == "sort":
        exp = _spark_native_kept(spark, tmp_path, batches)
        cols = ["ts", "k", "price", "id"]
    else:
        win = {"tumble": F.window("ts", "5 seconds"), "hop": F.window("ts", "10 seconds", "5 seconds"),
               "session": F.session_window("ts", "4 seconds")}[kind]
        exp = _spark_native_append(spark, tmp_path, batches, win)
        cols = ["window_start", "window_end", "k", "n", "mx"]
    assert len(exp) > 5
    native_batches = len([f for f in os.listdir(f"{tmp_path}/nck/commits") if f.isdigit()])
    assert native_batches == len(batches) + (kind != "session")  # Spark's own last, no-data batch
    src = f"{tmp_path}/in"
    stage = {"tumble": gpuwm.Tumble("ts", "5 seconds"), "hop": gpuwm.Hop("ts", size="10 seconds", slide="5 seconds"),
             "session": gpuwm.Session("ts", "4 seconds")}.get(kind)
    for vnodes, read in ((None, "auto"), (3, "spark")):  # vnodes 1 and 3, each read
        name = f"{vnodes}-{read}"
        df = spark.readStream.schema(SCHEMA_TKP + (", id bigint" if kind == "sort" else "")).option(
            "maxFilesPerTrigger", 1).parquet(src)
        p = Pipeline(df, f"{tmp_path}/ck-{name}", vnodes=vnodes, read=read).watermark(
            "ts", delay="10 seconds", profile="spark")
        p = p.sort(key=["id"]) if kind == "sort" else p.window(
            stage, by=["k"], aggs={"n": ("*", "count"), "mx": ("price", "max")})
        p.write_parquet(f"{tmp_path}/out-{name}").start(trigger={"availableNow": True}).awaitTermination()
        got = read_out(f"{tmp_path}/out-{name}")
        h = p.history
        # as many micro-batches as Spark ran, the last without data where the watermark moved in the one before
        assert len(h) == native_batches, name
        assert h[-1]["input_rows"] == 0 and h[-1]["rows_emitted"] > 0 or kind == "session", name
        if kind == "sort":  # one ordered stream: batch after batch, part after part
            files = sorted(glob.glob(f"{tmp_path}/out-{name}/batch_id=*/*.parquet"),
                           key=lambda x: (int(x.split("batch_id=")[1].split("/")[0]), x))
            got = pa.concat_tables([pq.read_table(x) for x in files])
            w = h[-1]["watermark"]  # the final one: rows after it stay buffered (end_of_input "watermark")
            released = sorted((r for r in exp if r[0].timestamp() * 1e6 <= w), key=lambda r: (r[0], r[3]))
            assert got.column("id").to_pylist() == [r[3] for r in released], name
            assert h[-1]["state_rows"] == len(exp) - len(released) > 0, name
        else:
            assert rows_of(got, cols) == exp, name
        assert {m["read"] for m in h if m["input_rows"]} == {"direct" if read == "auto" else "spark"}
    if kind == "session":
        # Spark's timing (batch N tests with W_{N-2}, W_k = max ts so far - 10 s): 6 rows have ts <= W, but
        # 4 of them are within the gap of it (ts + 4 s > W) and may join open sessions, in Spark and here
        mx, wms, late = -1, [], 0
        for n, b in enumerate(batches):
            late += sum(t + 4 <= wms[n - 2] for t, _, _ in b) if n >= 2 else 0
            mx = max([mx] + [t for t, _, _ in b])
            wms.append(mx - 10)
        assert late == 2 and sum(m["late_rows"] for m in h) == late


def _spark_native_kept(spark, tmp_path, batches: list[list[tuple]]) -> list[tuple]:
    """The rows Spark's own withWatermark(10 s) keeps over one file per batch
    (a stateful operator drops the late ones: dropDuplicatesWithinWatermark
    on a unique id keeps all others), ordered by (ts, id): what a complete
    stream sort emits by the end. Writes the files, with ids, to ``in``."""
    src = f"{tmp_path}/in"
    _write_batches(src, batches, ids=True)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    nq = (spark.readStream.schema(SCHEMA_TKP + ", id bigint").option("maxFilesPerTrigger", 1).parquet(src)
          .withWatermark("ts", "10 seconds").dropDuplicatesWithinWatermark(["id"])
          .writeStream.format("parquet").option("path", f"{tmp_path}/native")
          .option("checkpointLocation", f"{tmp_path}/nck").outputMode("append").trigger(availableNow=True).start())
    nq.awaitTermination()
    utc = lambda t: t.to_pydatetime().replace(tzinfo=timezone.utc) if t.tzinfo is None else t.to_pydatetime()  # noqa: E731
    kept = spark.read.parquet(f"{tmp_path}/native").toPandas()
    assert 0 < len(kept) < sum(len(b) for b in batches)  # some rows are late
    return sorted((utc(r.ts), r.k, r.price, r.id) for r in kept.itertuples())


def test_spark_profile_matches_spark_native_chained_windows(spark, tmp_path):
    """Two chained stateful operators, as Spark runs them (SPARK-40925): a
    5 s tumbling count per key, then a global 10 s tumbling window over the
    first one's window_time — against Spark's withWatermark + window ->
    window(window_time(w)) + append on the same files. gpuwm runs the issue's
    JSON spec form (vnodes 2: the second, global stage gets its own exchange
    to one vnode) and the Python builder (vnodes 1: one task runs both)."""
    import json

    from pyspark.sql import functions as F

    from gpuwm.spark.front.spec import load_spec, run

    batches = _random_batches(np.random.default_rng(5), 12, 50, step=6, behind=12, keys=4)
    src = f"{tmp_path}/in"
    _write_batches(src, batches)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    first = (spark.readStream.schema(SCHEMA_TKP).option("maxFilesPerTrigger", 1).parquet(src)
             .withWatermark("ts", "10 seconds")
             .groupBy(F.window("ts", "5 seconds").alias("w"), "k").agg(F.count("*").alias("n")))
    second = (first.groupBy(F.window(F.window_time("w"), "10 seconds").alias("w2"))
              .agg(F.max("n").alias("max_n"), F.sum("n").alias("total"), F.count("*").alias("groups"))
              .selectExpr("w2.start as ws", "w2.end as we", "max_n", "total", "groups"))
    nq = (second.writeStream.format("parquet").option("path", f"{tmp_path}/native")
          .option("checkpointLocation", f"{tmp_path}/nck").outputMode("append").trigger(availableNow=True).start())
    nq.awaitTermination()
    utc = lambda t: t.to_pydatetime().replace(tzinfo=timezone.utc) if t.tzinfo is None else t.to_pydatetime()  # noqa: E731
    exp = sorted((utc(r.ws), utc(r.we), r.max_n, r.total, r.groups)
                 for r in spark.read.parquet(f"{tmp_path}/native").toPandas().itertuples())
    assert len(exp) >= 5 and any(r[4] > 1 for r in exp)  # several first-stage groups per second-stage window

    src2 = src  # the same files: gpuwm asks Spark for the last, no-data micro-batch itself
    cols = ["window_start", "window_end", "max_n", "total", "groups"]
    spec = {"source": {"format": "parquet", "schema": SCHEMA_TKP, "path": src2,
                       "options": {"maxFilesPerTrigger": 1}},
            "checkpoint": f"{tmp_path}/ck-json", "vnodes": 2, "trigger": {"availableNow": True},
            "watermark": {"column": "ts", "delay": "10 seconds", "profile": "spark"},
            "stages": [
                {"window": {"tumble": "5 seconds", "by": ["k"], "aggs": {"n": ["*", "count"]}}},
                {"window": {"tumble": "10 seconds", "on": "window_time",
                            "aggs": {"max_n": ["n", "max"], "total": ["n", "sum"], "groups": ["*", "count"]}}}],
            "sink": {"parquet": f"{tmp_path}/out-json"}}
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(spec))
    p = run(spark, load_spec(str(path)), verbose=False)
    assert rows_of(read_out(f"{tmp_path}/out-json"), cols) == exp
    assert [st["kind"] for st in p.history[-1]["stages"]] == ["window", "window"]
    assert sum(m["stages"][1]["rows_pushed"] for m in p.history) == sum(m["stages"][0]["rows_emitted"]
                                                                         for m in p.history) > 0
    df = spark.readStream.schema(SCHEMA_TKP).option("maxFilesPerTrigger", 1).parquet(src2)
    p = (Pipeline(df, f"{tmp_path}/ck-py").watermark("ts", delay="10 seconds", profile="spark")
         .window(gpuwm.Tumble("ts", "5 seconds"), by=["k"], aggs={"n": ("*", "count")})
         .window(gpuwm.Tumble("window_time", "10 seconds"),
                 aggs={"max_n": ("n", "max"), "total": ("n", "sum"), "groups": ("*", "count")})
         .write_parquet(f"{tmp_path}/out-py"))
    p.start(trigger={"availableNow": True}).awaitTermination()
    assert rows_of(read_out(f"{tmp_path}/out-py"), cols) == exp


@pytest.mark.parametrize("vnodes", [None, 2])
def test_spark_profile_matches_spark_native_dedup(spark, tmp_path, vnodes):
    """dedup against Spark's withWatermark(10 s) + dropDuplicatesWithinWatermark
    + append on the same files: keys repeat within and across batches, some
    come back after they expired, some rows are late. vnodes=2 runs the
    issue's JSON form ({"stages": [{"dedup": {"key": [...]}}]})."""
    import json

    from gpuwm.spark.front.spec import load_spec, run

    batches = _random_batches(np.random.default_rng(17), 12, 30, step=6, behind=14, keys=10)
    src = f"{tmp_path}/in"
    _write_batches(src, batches)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    nq = (spark.readStream.schema(SCHEMA_TKP).option("maxFilesPerTrigger", 1).parquet(src)
          .withWatermark("ts", "10 seconds").dropDuplicatesWithinWatermark(["k"])
          .writeStream.format("parquet").option("path", f"{tmp_path}/native")
          .option("checkpointLocation", f"{tmp_path}/nck").outputMode("append").trigger(availableNow=True).start())
    nq.awaitTermination()
    utc = lambda t: t.to_pydatetime().replace(tzinfo=timezone.utc) if t.tzinfo is None else t.to_pydatetime()  # noqa: E731
    exp = sorted((utc(r.ts), r.k, r.price) for r in spark.read.parquet(f"{tmp_path}/native").toPandas().itertuples())
    assert 20 < len(exp) < sum(len(b) for b in batches) // 2  # most rows are duplicates

    if vnodes:
        spec = {"source": {"format": "parquet", "schema": SCHEMA_TKP, "path": src,
                           "options": {"maxFilesPerTrigger": 1}},
                "checkpoint": f"{tmp_path}/ck", "vnodes": vnodes, "trigger": {"availableNow": True},
                "watermark": {"column": "ts", "delay": "10 seconds", "profile": "spark"},
                "stages": [{"dedup": {"key": ["k"]}}], "sink": {"parquet": f"{tmp_path}/out"}}
        path = tmp_path / "dedup.json"
        path.write_text(json.dumps(spec))
        p = run(spark, load_spec(str(path)), verbose=False)
    else:
        df = spark.readStream.schema(SCHEMA_TKP).option("maxFilesPerTrigger", 1).parquet(src)
        p = (Pipeline(df, f"{tmp_path}/ck").watermark("ts", delay="10 seconds", profile="spark")
             .dedup(["k"]).write_parquet(f"{tmp_path}/out"))
        p.start(trigger={"availableNow": True}).awaitTermination()
    assert rows_of(read_out(f"{tmp_path}/out"), ["ts", "k", "price"]) == exp
    h = p.history
    dups = sum(m["stages"][0]["duplicate_rows"] for m in h)
    assert dups > 0 and sum(m["input_rows"] for m in h) == sum(m["late_rows"] for m in h) + dups + len(exp)


@pytest.mark.parametrize("vnodes", [None, 2])
def test_over_window_equals_spark_window_functions(spark, tmp_path, vnodes):
    """sort -> over on the stream (profile spark) against Spark's batch
    lag/lead/row_number/running sum OVER (PARTITION BY k ORDER BY ts, id)
    over the rows the filter kept: every row gpuwm emitted has Spark's
    values. vnodes=2 runs the issue's JSON stages (the sort's rows reach the
    over's vnodes through an exchange by k)."""
    import json

    from gpuwm.spark.front.spec import load_spec, run

    rng = np.random.default_rng(23)
    src = f"{tmp_path}/in"
    os.makedirs(src)
    base, batches, rid = time.time() - 1000, [], 0
    for i in range(10):
        n = 40
        secs = (i * 5 + rng.integers(-25, 5, n)).clip(0)
        t = pa.table({"ts": pa.array([T0 + timedelta(seconds=int(x)) for x in secs], TS),
                      "k": pa.array(rng.integers(0, 4, n), pa.int64()),
                      "v": pa.array(rng.integers(-50, 50, n), pa.int64()),
                      "id": pa.array(np.arange(rid, rid + n)[::-1], pa.int64())})
        rid += n
        batches.append(t)
        path = f"{src}/part-{i:04d}.parquet"
        pq.write_table(t, path)
        os.utime(path, (base + i, base + i))
    f = gpuwm.WatermarkFilter("ts", delay=timedelta(seconds=10), profile="spark")
    kept = pa.concat_tables([f.process(b) for b in batches])
    assert 0 < f.late_rows
    pq.write_table(kept, f"{tmp_path}/kept.parquet")
    spark.read.parquet(f"{tmp_path}/kept.parquet").createOrReplaceTempView("kept")
    exp = {r["id"]: (r["prev_v"], r["next_v"], r["rn"], r["run_sum"]) for r in spark.sql(
        "SELECT id, lag(v, 1) OVER w AS prev_v, lead(v, 1) OVER w AS next_v, row_number() OVER w AS rn, "
        "sum(v) OVER (PARTITION BY k ORDER BY ts, id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS run_sum "
        "FROM kept WINDOW w AS (PARTITION BY k ORDER BY ts, id)").collect()}
    schema = "ts timestamp, k bigint, v bigint, id bigint"
    funcs = {"prev_v": ["lag", "v", 1], "next_v": ["lead", "v", 1], "rn": ["row_number"], "run_sum": ["sum", "v"]}
    if vnodes:
        spec = {"source": {"format": "parquet", "schema": schema, "path": src, "options": {"maxFilesPerTrigger": 1}},
                "checkpoint": f"{tmp_path}/ck", "vnodes": vnodes, "trigger": {"availableNow": True},
                "watermark": {"column": "ts", "delay": "10 seconds", "profile": "spark"},
                "stages": [{"sort": {"key": ["id"]}}, {"over": {"by": ["k"], "funcs": funcs}}],
                "sink": {"parquet": f"{tmp_path}/out"}}
        path = tmp_path / "over.json"
        path.write_text(json.dumps(spec))
        run(spark, load_spec(str(path)), verbose=False)
    else:
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(src)
        p = (Pipeline(df, f"{tmp_path}/ck").watermark("ts", delay="10 seconds", profile="spark")
             .sort(key=["id"]).over(by=["k"], funcs=funcs).write_parquet(f"{tmp_path}/out"))
        p.start(trigger={"availableNow": True}).awaitTermination()
    got = read_out(f"{tmp_path}/out").to_pylist()
    assert len(got) > 0.75 * kept.num_rows  # all but the rows the last watermarks have not released
    assert len({r["id"] for r in got}) == len(got)
    assert {r["id"]: (r["prev_v"], r["next_v"], r["rn"], r["run_sum"]) for r in got} == {r["id"]: exp[r["id"]]
                                                                                        for r in got}


def test_stages_that_cannot_follow_are_refused_before_the_first_batch(spark, tmp_path):
    df = read_nexmark(spark, f"{tmp_path}/ck", **NEX)
    p = Pipeline(df, f"{tmp_path}/ck").watermark("date_time", delay="2 seconds", split="split")
    with pytest.raises(gpuwm.ConfigError, match="differs from the event-time column of its input, 'window_time'"):
        p.window(gpuwm.Tumble("date_time", "2 seconds"), by=["auction"]).window(gpuwm.Tumble("date_time", "4 seconds"))
    p = Pipeline(df, f"{tmp_path}/ck").watermark("date_time", delay="2 seconds", split="split")
    with pytest.raises(gpuwm.SchemaError, match="column 'price' not found"):  # the first stage's output has no price
        p.window(gpuwm.Tumble("date_time", "2 seconds"), by=["auction"]).window(
            gpuwm.Tumble("window_time", "4 seconds"), aggs={"m": ("price", "max")})
    p = Pipeline(df, f"{tmp_path}/ck").watermark("date_time", delay="2 seconds", split="split")
    with pytest.raises(gpuwm.ConfigError, match="a second sort cannot follow a sort"):
        p.sort().sort()
    p = Pipeline(df, f"{tmp_path}/ck").watermark("date_time", delay="2 seconds", split="split")
    with pytest.raises(gpuwm.ConfigError, match="emit='on-update'"):
        p.window(gpuwm.Tumble("date_time", "2 seconds"), emit="on-update").window(
            gpuwm.Tumble("window_time", "4 seconds"))
    p = Pipeline(df, f"{tmp_path}/ck").watermark("date_time", delay="2 seconds", split="split").sort()
    with pytest.raises(gpuwm.ConfigError, match="stage 0 \\(sort\\) must be the last stage or be followed by an"):
        p.window(gpuwm.Tumble("date_time", "4 seconds"))
    p = Pipeline(df, f"{tmp_path}/ck").watermark("date_time", delay="2 seconds", split="split")
    with pytest.raises(gpuwm.ConfigError, match="over-window needs the event-time ordered stream"):
        p.over(by=["auction"], funcs={"rn": ["row_number"]})
    with pytest.raises(gpuwm.ConfigError, match="call .watermark\\(...\\) once, before the stages"):
        p.sort().watermark("date_time", delay="3 seconds")


def test_a_toy_operator_in_a_json_spec_runs_on_spark(spark, tmp_path):
    """tests/toy_operator.py's ``hold`` stage, which no file of gpuwm/ names,
    as a JSON spec's stage on Spark over 2 vnodes (its spec pickled by value:
    the Python workers do not have tests/ on their path): every row the
    filter passed is released once, in a batch whose output watermark
    reaches it, or is still held at the end (the rows model:
    test_runtime's toy test)."""
    from pyspark import cloudpickle

    from gpuwm.spark.front.spec import run

    from . import toy_operator

    cloudpickle.register_pickle_by_value(toy_operator)
    opts = dict(NEX, totalEvents=20_000, eventsPerBatch=5_000)
    spec = {"source": {"format": "nexmark", "options": opts}, "checkpoint": f"{tmp_path}/ck",
            "watermark": {"column": "date_time", "delay": "2 seconds", "split": "split", "profile": "spark"},
            "stages": [{"hold": {"by": ["auction"]}}], "sink": {"parquet": f"{tmp_path}/out"}, "vnodes": 2}
    h = run(spark, spec, verbose=False).history
    assert [m["stages"][0]["kind"] for m in h] == ["hold"] * len(h)
    released = 0
    for m in h:
        out = read_out_batch(f"{tmp_path}/out", m["batch_id"])
        if out is not None:
            ts = out.column("date_time").cast(pa.int64()).to_numpy()
            assert ts.max() <= m["output_watermark"], m["batch_id"]
            released += out.num_rows
    passed = sum(m["input_rows"] - m["late_rows"] for m in h)
    assert released == sum(m["rows_emitted"] for m in h) > 0
    assert released + h[-1]["state_rows"] == passed > 0
    assert h[-1]["state_rows"] > 0  # the last rows wait for a watermark that did not come (profile spark)
    assert max(len(glob.glob(f"{tmp_path}/out/batch_id={m['batch_id']}/*.parquet")) for m in h) == 2


def read_out_batch(path: str, batch_id: int) -> pa.Table | None:
    files = sorted(glob.glob(os.path.join(path, f"batch_id={batch_id}", "*.parquet")))
    return pa.concat_tables([pq.read_table(f) for f in files]) if files else None


def test_direct_read_falls_back_per_batch_and_refuses_when_asked(spark, tmp_path):
    """A file the task cannot read exactly (here: a column missing, which
    Spark reads as nulls) goes through Spark's reader for its batch alone;
    several files per batch and vnodes > 1 read directly give Spark's rows;
    read='direct' on an input its tasks cannot make (a select over the
    source they do not evaluate) is refused."""
    rng = np.random.default_rng(11)
    batches = [list(zip((i * 5 + rng.integers(-4, 5, 30)).clip(0).tolist(), rng.integers(0, 4, 30).tolist(),
                        rng.integers(0, 100, 30).tolist())) for i in range(6)]
    src = f"{tmp_path}/in"
    _write_batches(src, batches)
    odd = f"{src}/part-0002.parquet"
    st = os.stat(odd)
    pq.write_table(pq.read_table(odd).drop(["price"]), odd)  # price: null for Spark's reader
    os.utime(odd, (st.st_atime, st.st_mtime))  # same place in the file order
    schema = "ts timestamp, k bigint, price bigint"
    outs, hist = {}, {}
    for read, vnodes in (("spark", 1), ("auto", 1), ("auto", 2)):
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 2).parquet(src)
        name = f"{read}-{vnodes}"
        p = (Pipeline(df, f"{tmp_path}/ck-{name}", read=read, vnodes=vnodes)
             .watermark("ts", delay="3 seconds", profile="spark")
             .window(gpuwm.Tumble("ts", "5 seconds"), by=["k"], aggs={"n": ("*", "count"), "s": ("price", "sum")})
             .write_parquet(f"{tmp_path}/out-{name}"))
        p.start(trigger={"availableNow": True}).awaitTermination()
        outs[name] = rows_of(read_out(f"{tmp_path}/out-{name}"), ["window_start", "k", "n", "s"])
        hist[name] = [m["read"] for m in p.history if m["input_rows"]]
    assert len(outs["spark-1"]) > 5 and outs["auto-1"] == outs["spark-1"] and outs["auto-2"] == outs["spark-1"]
    assert hist["spark-1"] == ["spark"] * 3
    assert hist["auto-1"] == hist["auto-2"] == ["direct", "spark", "direct"]  # files 2-3 hold the odd one
    # (arithmetic it evaluates, as Spark: gpuwm.project)
    df = spark.readStream.schema(schema).parquet(src).selectExpr("ts", "k", "abs(price) AS price")
    with pytest.raises(gpuwm.ConfigError, match="the task cannot evaluate `abs\\(price\\)` of the select on the "
                                                "source"):
        (Pipeline(df, f"{tmp_path}/ck-x", read="direct").watermark("ts", delay="3 seconds")
         .sort().write_parquet(f"{tmp_path}/out-x").start())


CRASH = """
import os, sys
sys.path.insert(0, {root!r})
import gpuwm
from gpuwm.spark import Pipeline, local_session, read_nexmark
spark = local_session(app="crash", cores=2)
opts = {opts!r}
df = read_nexmark(spark, {ck!r}, **opts)
def on_batch(m):
    print("BATCH", m["batch_id"], flush=True)
    if {fail_after} >= 0 and m["batch_id"] == {fail_after}:
        raise RuntimeError("simulated crash after gpuwm committed batch %d" % m["batch_id"])
p = (Pipeline(df, {ck!r}, vnodes=2, on_batch=on_batch)
     .watermark("date_time", delay="2 seconds", split="split", profile="risingwave")
     .window(gpuwm.Hop("date_time", size="4 seconds", slide="2 seconds"), by=["auction"],
             aggs={{"bids": ("*", "count"), "max_price": ("price", "max")}}))
if {chain}:  # the busiest auction per hop window: a global second stage behind an exchange
    p = p.window(gpuwm.Tumble("window_time", "2 seconds"), aggs={{"bids": ("bids", "max"), "max_price": ("max_price", "max"),
                                                                 "auction": ("*", "count")}})
p = p.write_parquet({out!r})
q = p.start()
try:
    q.processAllAvailable()
    print("DONE", flush=True)
except Exception as e:
    print("FAILED", type(e).__name__, flush=True)
    sys.exit(3)
finally:
    q.stop()
"""


def _crash_script(tmp, name, fail_after=-1, chain=False):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = CRASH.format(root=root, opts=NEX, ck=f"{tmp}/{name}/ck", out=f"{tmp}/{name}/out", fail_after=fail_after,
                        chain=chain)
    path = f"{tmp}/{name}.py"
    with open(path, "w") as fh:
        fh.write(textwrap.dedent(code))
    return path


def kill_after_batches(path: str | list, n: int, mark: str = "BATCH") -> None:
    """Run the script ``path`` (or the command, a list) and SIGKILL it once
    it printed ``n`` lines starting with ``mark``."""
    cmd = [sys.executable, path] if isinstance(path, str) else path
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seen = 0
    for line in proc.stdout:
        if line.startswith(mark):
            seen += 1
            if seen == n:
                os.kill(proc.pid, signal.SIGKILL)
                break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


def _run(path, timeout=300):
    return subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=timeout)


def started(cmd: str | list, **popen) -> subprocess.Popen:
    """The script ``cmd`` (or the command, a list) started, its output
    piped: an uninterrupted run beside the runs a test kills, which share
    nothing with it (the suite's time: a Spark driver waits on its JVM and
    its micro-batches more than it computes). ``finished`` waits for it."""
    cmd = [sys.executable, cmd] if isinstance(cmd, str) else cmd
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def finished(proc: subprocess.Popen, timeout: float = 600) -> subprocess.CompletedProcess:
    """``proc`` (from ``started``) run to its end: its exit status and output."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow
@pytest.mark.parametrize("chain", [True])
def test_crash_and_restart_gives_the_uninterrupted_output(tmp_path, chain):
    """A hopping window per auction (vnodes 2) followed by a global window
    over its window_time (a chain with an exchange). The hopping window
    alone, killed twice, is tests/test_s3.py's SIGKILL test (on S3)."""
    uninterrupted = started(_crash_script(tmp_path, "clean", chain=chain))
    # 1. the query fails after gpuwm committed batch 2 but before Spark did; 2. its restart, which replays
    # batch 2, is killed (SIGKILL) in the middle of the run; the second restart gives the uninterrupted output
    r = _run(_crash_script(tmp_path, "failed", fail_after=2, chain=chain))
    assert "FAILED" in r.stdout, r.stdout + r.stderr[-3000:]
    path = _crash_script(tmp_path, "failed", chain=chain)
    kill_after_batches(path, 3)
    r = _run(path)
    assert "DONE" in r.stdout, r.stdout + r.stderr[-3000:]
    r = finished(uninterrupted)
    assert "DONE" in r.stdout, r.stdout + r.stderr[-3000:]
    clean = read_out(f"{tmp_path}/clean/out")
    cols = ["window_start", "auction", "bids", "max_price"]
    assert clean is not None and clean.num_rows > (10 if chain else 100)
    assert rows_of(read_out(f"{tmp_path}/failed/out"), cols) == rows_of(clean, cols)


def test_bad_input_is_refused_before_the_first_batch(spark, tmp_path):
    df = read_nexmark(spark, f"{tmp_path}/ck", **NEX)
    with pytest.raises(gpuwm.SchemaError, match="event-time column 'ts' not found"):
        Pipeline(df, f"{tmp_path}/ck").watermark("ts", delay="1 second")
    with pytest.raises(gpuwm.SchemaError, match="expected timestamp or an integer"):
        Pipeline(df.selectExpr("cast(date_time as string) as s", "split"), f"{tmp_path}/ck").watermark(
            "s", delay="1 second")
    with pytest.raises(gpuwm.SchemaError, match="TIMESTAMP_NTZ"):
        Pipeline(df.selectExpr("cast(date_time as timestamp_ntz) as t"), f"{tmp_path}/ck").watermark(
            "t", delay="1 second")
    with pytest.raises(gpuwm.SchemaError, match="group key column 'nope' not found"):
        Pipeline(df, f"{tmp_path}/ck").watermark("date_time", delay="1 second").window(
            gpuwm.Tumble("date_time", "1 second"), by=["nope"])
    with pytest.raises(gpuwm.ConfigError, match="delay must be >= 0"):
        Pipeline(df, f"{tmp_path}/ck").watermark("date_time", delay=timedelta(seconds=-1))
    # an unwritable checkpoint
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "gpuwm").write_text("a file where a folder must go")
    with pytest.raises(gpuwm.ConfigError, match=f"^checkpoint location '{ro}' cannot be used: .*non-directory entry exists"):
        Pipeline(df, str(ro)).watermark("date_time", delay="1 second").sort().write_parquet(
            f"{tmp_path}/o2").start()
    assert not os.path.exists(f"{tmp_path}/o2") or not os.listdir(f"{tmp_path}/o2")
    # a changed pipeline on an existing checkpoint
    small = dict(NEX, totalEvents=10_000)
    df = read_nexmark(spark, f"{tmp_path}/ck3", **small)
    p = (Pipeline(df, f"{tmp_path}/ck3").watermark("date_time", delay="2 seconds", split="split")
         .sort(key=["event_id"]).write_parquet(f"{tmp_path}/o3"))
    run_to_end(p)
    before = sorted(glob.glob(f"{tmp_path}/o3/*/*"))
    changed = (Pipeline(df, f"{tmp_path}/ck3").watermark("date_time", delay="3 seconds", split="split")
               .sort(key=["event_id"]).write_parquet(f"{tmp_path}/o3"))
    with pytest.raises(gpuwm.ConfigError, match=r"^checkpoint .*ck3 was written by another pipeline \(checkpoint → "
                       r"now\): \$\.watermark\.delay: 2 s → 3 s\. Use a new checkpoint location, or restore these "
                       r"\(only vnodes may change: a rescale\)$"):
        changed.start()
    assert sorted(glob.glob(f"{tmp_path}/o3/*/*")) == before
    # a checkpoint written before drain batches (no drain source), or by a gpuwm whose drain source was
    # a Python data source: Spark cannot restart it with this one's file source
    os.remove(f"{tmp_path}/ck3/gpuwm/drains/_gpuwm")
    with pytest.raises(gpuwm.ConfigError, match="without drain batches"):
        p.start()
    log = sorted(glob.glob(f"{tmp_path}/ck3/offsets/[0-9]*"), key=lambda x: int(os.path.basename(x)))[-1]
    with open(log) as fh:
        lines = fh.read().splitlines()
    assert lines[-1] == "-" or lines[-1].startswith('{"logOffset":')  # the drain source: no file yet, or some
    with open(log, "w") as fh:
        fh.write("\n".join(lines[:-1] + ['{"drain":3,"end":0}']))
    with pytest.raises(gpuwm.ConfigError, match="whose drain source was a Python data source"):
        p.start()
    shutil.rmtree(ro)


def test_gpu_choice_per_task():
    from gpuwm.spark.executor.device import choose_device

    assert choose_device(2, "1", ["1"], 5) == 0  # the manager already isolated the GPU
    assert choose_device(2, None, ["1"], 4) == 1  # the task's resource address
    assert choose_device(3, None, None, 4) == 1  # local mode: partition id modulo count
    with pytest.raises(ValueError):
        choose_device(0, None, None, 0)


def test_run_spec_file(spark, tmp_path):
    import json

    from gpuwm.spark.front.spec import load_spec, run

    spec = {"source": {"format": "nexmark", "options": dict(NEX, totalEvents=20_000)},
            "checkpoint": f"{tmp_path}/ck",
            "watermark": {"column": "date_time", "delay": "2 seconds", "split": "split", "profile": "spark"},
            "window": {"hop": "4 seconds", "slide": "2 seconds", "by": ["auction"],
                       "aggs": {"bids": ["*", "count"]}},
            "sink": {"parquet": f"{tmp_path}/out"}}
    path = tmp_path / "q.json"
    path.write_text(json.dumps(spec))
    p = run(spark, load_spec(str(path)), verbose=False)
    # two batches of data, then the one without: what the final watermark closes (profile spark)
    assert [m["input_rows"] > 0 for m in p.history] == [True, True, False] and p.history[-1]["rows_emitted"] > 0
    assert read_out(f"{tmp_path}/out").num_rows > 0
    m = p.history[-1]
    assert {"input_rows", "late_rows", "watermark", "watermark_lag", "rows_emitted", "state_rows",
            "state_bytes", "kernel_s", "state_save_s", "backend"} <= set(m)
    assert m["state_save_s"] > 0 and m["kernel_s"] > 0
    assert m["watermark_lag"] >= 2_000_000  # at least the delay, in microseconds
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(dict(spec, sorting={})))
    with pytest.raises(gpuwm.ConfigError, match="unknown key"):
        load_spec(str(bad))
    # a session window: the gap reaches the operator and, as allowed lateness, the filter
    from gpuwm.spark.front.spec import build

    sess = build(spark, dict(spec, checkpoint=f"{tmp_path}/ck2",
                             window={"session": "3 seconds", "by": ["bidder"]}), verbose=False)
    plan = sess._plan()
    op, f = plan.build(0), plan.watermark.build("cpu")
    assert isinstance(op.window, gpuwm.Session) and op.window.gap == timedelta(seconds=3)
    assert f.allowed_lateness == timedelta(seconds=3)
    with pytest.raises(gpuwm.ConfigError, match="not on update: a later row can merge sessions"):
        build(spark, dict(spec, checkpoint=f"{tmp_path}/ck3",
                          window={"session": "3 seconds", "by": ["bidder"], "emit": "on-update"}), verbose=False)


def test_on_update_emits_changed_windows_each_batch(spark, tmp_path):
    opts = dict(NEX, totalEvents=30_000)
    df = read_nexmark(spark, f"{tmp_path}/ck", **opts)
    p = (Pipeline(df, f"{tmp_path}/ck", vnodes=2).watermark("date_time", delay="2 seconds", split="split")
         .window(gpuwm.Tumble("date_time", "2 seconds"), by=["auction"], aggs={"bids": ("*", "count")},
                 emit="on-update")
         .write_parquet(f"{tmp_path}/out"))
    run_to_end(p)
    got = read_out(f"{tmp_path}/out")
    f = gpuwm.WatermarkFilter("date_time", delay=timedelta(seconds=2), split="split")
    a = gpuwm.WindowAggregate(gpuwm.Tumble("date_time", "2 seconds"), by=["auction"], aggs={"bids": ("*", "count")},
                              emit="on-update")
    exp = []
    for b in nexmark_batches(opts):
        exp.append(a.push(f.process(b)))
        a.drain(f.output_watermark)
    cols = ["window_start", "auction", "bids"]
    assert rows_of(got, cols) == rows_of(pa.concat_tables(exp), cols) and got.num_rows > 0


def test_nexmark_source_kinds_batch_and_stream(spark):
    from gpuwm.nexmark import GENERATORS

    cfg = NexmarkConfig(splits=2, seed=5)
    for kind, (gen, schema) in GENERATORS.items():
        df = (spark.read.format("nexmark").option("kind", kind).option("totalEvents", 5_000)
              .option("splits", 2).option("seed", 5).load())
        assert df.columns == schema.names
        got = sorted(r["event_id"] for r in df.select("event_id").collect())
        assert got == sorted(gen(cfg, 0, 5_000).column("event_id").to_pylist())
    with pytest.raises(Exception, match="kind='trade'"):
        spark.read.format("nexmark").option("kind", "trade").load().collect()


def test_on_event_refuses_a_split_spread_over_partitions(spark, tmp_path):
    src = f"{tmp_path}/in"
    _write_batches(src, [[(1, 0, 1), (2, 0, 2)], [(3, 0, 3)]])
    df = (spark.readStream.schema("ts timestamp, k bigint, price bigint").option("maxFilesPerTrigger", 2)
          .parquet(src))
    p = (Pipeline(df, f"{tmp_path}/ck", vnodes=2).watermark("ts", delay="1 second", split="k", profile="flink")
         .window(gpuwm.Tumble("ts", "1 second"), by=["k"]).write_parquet(f"{tmp_path}/out"))
    old = {k: spark.conf.get(k) for k in ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes")}
    for k in old:
        spark.conf.set(k, "1024")  # one partition per (tiny) file
    try:
        q = p.start(trigger={"availableNow": True})
        with pytest.raises(Exception, match="needs each split's rows in one input partition"):
            q.awaitTermination()
    finally:
        for k, v in old.items():
            spark.conf.set(k, v)
    assert read_out(f"{tmp_path}/out") is None


def test_direct_read_replays_a_failed_batch_exactly(spark, tmp_path):
    """Parquet input read by the task itself: the query fails after gpuwm
    committed batch 2 but before Spark did; the restarted query replays
    batch 2 from Spark's file log and the sorted output equals an
    uninterrupted run — no row lost, none duplicated, still in order."""
    rng = np.random.default_rng(5)
    batches = [list(zip((i * 4 + rng.integers(-3, 4, 50)).clip(0).tolist(), rng.integers(0, 1000, 50).tolist(),
                        rng.integers(0, 100, 50).tolist())) for i in range(6)]
    src = f"{tmp_path}/in"
    _write_batches(src, batches)

    def run(name, fail_at=None):
        def on_batch(m):
            assert m["read"] == "direct" or not m["input_rows"]
            if m["batch_id"] == fail_at:
                raise RuntimeError("simulated crash after gpuwm committed the batch")

        df = spark.readStream.schema("ts timestamp, k bigint, price bigint").option("maxFilesPerTrigger", 1).parquet(src)
        p = (Pipeline(df, f"{tmp_path}/ck-{name}", on_batch=on_batch).watermark("ts", delay="3 seconds")
             .sort(key=["k"]).write_parquet(f"{tmp_path}/out-{name}"))
        q = p.start(trigger={"availableNow": True})
        try:
            q.awaitTermination()
        except Exception:
            assert fail_at is not None
        return p

    run("clean")
    run("failed", fail_at=2)
    p = run("failed")
    assert p.history[0]["batch_id"] == 2  # the restart began by replaying batch 2

    def ordered(name):
        parts = sorted(glob.glob(f"{tmp_path}/out-{name}/batch_id=*"), key=lambda d: int(d.rsplit("=", 1)[1]))
        return pa.concat_tables([pq.read_table(d) for d in parts])  # one batch's directory: its rows in order

    clean, failed = ordered("clean"), ordered("failed")
    assert clean.num_rows > 100 and failed.equals(clean)
    ts = clean.column("ts").cast(pa.int64()).to_numpy()
    assert (np.diff(ts) >= 0).all()


def test_read_mode_comes_from_spark_conf_and_is_checked(spark, tmp_path):
    df = read_nexmark(spark, f"{tmp_path}/ck", **NEX)
    assert Pipeline(df, f"{tmp_path}/ck").read == "auto"
    spark.conf.set("spark.gpuwm.read", "spark")
    try:
        assert Pipeline(df, f"{tmp_path}/ck").read == "spark"
        assert Pipeline(df, f"{tmp_path}/ck", read="direct").read == "direct"
    finally:
        spark.conf.unset("spark.gpuwm.read")
    with pytest.raises(gpuwm.ConfigError, match="read must be"):
        Pipeline(df, f"{tmp_path}/ck", read="jvm")
    with pytest.raises(gpuwm.ConfigError, match="another checkpoint"):  # offsets would come from the wrong log
        (Pipeline(df, f"{tmp_path}/other", read="direct").watermark("date_time", delay="1 second")
         .sort().write_parquet(f"{tmp_path}/o").start())


STRATEGIES = {"candidate": {"candidate": "wm"}, "punctuated": {"punctuated": "mark"},
              "periodic": {"emit": "on-periodic", "every": 250},
              "expr": {"expr": "CASE WHEN src = 'live' THEN ts - INTERVAL 8 SECONDS END"}}


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_spec_watermark_strategies_equal_the_operators(spark, tmp_path, strategy):
    """A spec's watermark ``candidate`` (a column computed by the source's
    ``select``: only rows of source 'live' carry one), ``expr`` (the same as
    a Spark SQL expression in the watermark), ``punctuated`` (a boolean
    column) or periodic emission (every 250 rows): the output equals the
    operators' over the same batches."""
    from gpuwm.spark.front.spec import build

    rng = np.random.default_rng(5)
    batches = _random_batches(rng, 4, 300, 10, 6, 4)
    d = f"{tmp_path}/in"
    os.makedirs(d)
    tables = []
    for i, rows in enumerate(batches):
        n = len(rows)
        t = pa.table({"ts": pa.array([T0 + timedelta(seconds=s) for s, _, _ in rows], TS),
                      "k": pa.array([k for _, k, _ in rows], pa.int64()),
                      "price": pa.array([p for _, _, p in rows], pa.int64()),
                      "src": pa.array(rng.choice(["live", "replay"], n).tolist()),
                      "mark": pa.array([s % 10 < 3 for s, _, _ in rows])})  # punctuation early in each 10 s
        tables.append(t)
        pq.write_table(t, f"{d}/part-{i:04d}.parquet")
        os.utime(f"{d}/part-{i:04d}.parquet", (time.time() - 1000 + i,) * 2)
    select = ["*", "CASE WHEN src = 'live' THEN ts - INTERVAL 8 SECONDS END AS wm"]
    wm = {"column": "ts", "delay": "3 seconds", "profile": "risingwave", **STRATEGIES[strategy]}
    spec = {"source": {"format": "parquet", "schema": "ts timestamp, k bigint, price bigint, src string, mark boolean",
                       "path": d, "options": {"maxFilesPerTrigger": 1}, "select": select},
            "checkpoint": f"{tmp_path}/ck", "watermark": wm,
            "window": {"tumble": "5 seconds", "by": ["k"], "aggs": {"n": ["*", "count"], "mx": ["price", "max"]}},
            "sink": {"parquet": f"{tmp_path}/out"}}
    run_to_end(build(spark, spec, verbose=False))
    f = gpuwm.WatermarkFilter("ts", delay=timedelta(seconds=3), profile="risingwave",
                              **(STRATEGIES["candidate"] if strategy == "expr" else STRATEGIES[strategy]))
    a = gpuwm.WindowAggregate(gpuwm.Tumble("ts", "5 seconds"), by=["k"],
                              aggs={"n": ("*", "count"), "mx": ("price", "max")}, profile="risingwave")
    want = []
    for t in tables:
        t = t.append_column("wm", pa.array([s - timedelta(seconds=8) if src == "live" else None for s, src in
                                            zip(t["ts"].to_pylist(), t["src"].to_pylist())], TS))
        a.push(f.process(t))
        want.append(a.drain(f.output_watermark))
    cols = ["window_start", "k", "n", "mx"]
    got = rows_of(read_out(f"{tmp_path}/out"), cols)
    assert got == rows_of(pa.concat_tables([w for w in want if w is not None]), cols) and len(got) > 10
    # and the strategy mattered: ts - delay over every row closes other windows
    f0 = gpuwm.WatermarkFilter("ts", delay=timedelta(seconds=3), profile="risingwave")
    a0 = gpuwm.WindowAggregate(gpuwm.Tumble("ts", "5 seconds"), by=["k"],
                               aggs={"n": ("*", "count"), "mx": ("price", "max")}, profile="risingwave")
    plain = []
    for t in tables:
        a0.push(f0.process(t))
        plain.append(a0.drain(f0.output_watermark))
    assert got != rows_of(pa.concat_tables([w for w in plain if w is not None]), cols)
    if strategy == "expr":  # the column the expression went into stays out of the output and the late rows
        s2 = dict(spec, checkpoint=f"{tmp_path}/ck2", sink={"parquet": f"{tmp_path}/out2"},
                  late={"parquet": f"{tmp_path}/late2"}, stages=[{"sort": {"key": ["k"]}}],
                  watermark={"column": "ts", "delay": "0 seconds", "expr": "ts - INTERVAL 1 SECOND"})
        del s2["window"]
        run_to_end(build(spark, s2, verbose=False))
        sorted_rows, late = read_out(f"{tmp_path}/out2"), read_out(f"{tmp_path}/late2")
        assert sorted_rows.column_names == ["ts", "k", "price", "src", "mark", "wm"]
        assert late is not None and "__gpuwm_watermark" not in late.column_names
        with pytest.raises(gpuwm.ConfigError, match="strategy of its own"):
            build(spark, dict(spec, checkpoint=f"{tmp_path}/ck3",
                              watermark={"column": "ts", "delay": "3 seconds", "expr": "ts", "candidate": "wm"}))


def _aligned_files(tmp_path, batches: int, rows: int, ahead: int) -> tuple[str, list[pa.Table]]:
    """One file per batch: split 0 at event times 10 s per batch, split 1
    ``ahead`` seconds in front of it (out of order within a few seconds)."""
    rng = np.random.default_rng(11)
    d = f"{tmp_path}/in"
    os.makedirs(d)
    tables = []
    for i in range(batches):
        p = rng.integers(0, 2, rows)
        secs = i * 10 + rng.integers(-3, 10, rows) + p * ahead
        t = pa.table({"ts": pa.array([T0 + timedelta(seconds=int(s)) for s in secs.clip(0)], TS),
                      "p": pa.array(p, pa.int64()), "k": pa.array(rng.integers(0, 3, rows), pa.int64())})
        tables.append(t)
        pq.write_table(t, f"{d}/part-{i:04d}.parquet")
        os.utime(f"{d}/part-{i:04d}.parquet", (time.time() - 1000 + i,) * 2)
    return d, tables


@pytest.mark.parametrize("vnodes,emit", [(1, "on-event"), (2, "on-batch")])
def test_alignment_holds_a_split_ahead_equal_to_the_operators(spark, tmp_path, vnodes, emit):
    """max_drift holds the split running ahead: its rows wait in the
    filter's state (metrics ``held_rows``), are read when the other split
    catches up (gpuwm asks for batches without new data for that), and at
    the end of an availableNow run; the output equals the operators' over
    the same micro-batches, and the rows held and read add up."""
    d, tables = _aligned_files(tmp_path, 7, 200, 45)
    df = spark.readStream.schema("ts timestamp, p bigint, k bigint").option("maxFilesPerTrigger", 1).parquet(d)
    kw = dict(split="p", profile="risingwave", emit=emit, max_drift="20 seconds")
    p = (Pipeline(df, f"{tmp_path}/ck", vnodes=vnodes, verbose=False).watermark("ts", "2 seconds", **kw)
         .window(gpuwm.Tumble("ts", "5 seconds"), by=["p", "k"], aggs={"n": ("*", "count")})
         .write_parquet(f"{tmp_path}/out"))
    p.start(trigger={"availableNow": True}).awaitTermination()
    f = gpuwm.WatermarkFilter("ts", timedelta(seconds=2), **kw)
    a = gpuwm.WindowAggregate(gpuwm.Tumble("ts", "5 seconds"), by=["p", "k"], aggs={"n": ("*", "count")},
                              profile="risingwave")
    files, want = iter(tables), []
    for m in p.history:  # the same micro-batches: a file, or none (a drain)
        if m["end_of_input"]:
            kept = f.flush()
            f.end_input()
        else:
            kept = f.process(next(files) if m["input_rows"] else tables[0].schema.empty_table())
        a.push(kept)
        want.append(a.drain(f.output_watermark))
        assert m["held_rows"] == f.held_rows
    assert next(files, None) is None and f.held_rows == 0 and p.history[-1]["end_of_input"]
    held = [m["held_rows"] for m in p.history]
    assert max(held) > 100
    assert sum(m["input_rows"] for m in p.history) == 7 * 200
    assert sum(m["rows_released"] for m in p.history[:-1]) > 0  # read on before the end
    cols = ["window_start", "p", "k", "n"]
    got = rows_of(read_out(f"{tmp_path}/out"), cols)
    assert got == rows_of(pa.concat_tables([w for w in want if w is not None]), cols) and len(got) > 25


def test_alignment_with_vnodes_needs_on_batch(spark, tmp_path):
    df = spark.readStream.schema("ts timestamp, p bigint").parquet(str(tmp_path))
    p = (Pipeline(df, f"{tmp_path}/ck", vnodes=2).watermark("ts", "2 seconds", split="p", emit="on-event",
                                                           max_drift="20 seconds")
         .sort().write_parquet(f"{tmp_path}/out"))
    with pytest.raises(gpuwm.ConfigError, match="max_drift.*on-batch"):
        p.explain()


RESCALED = {
    "dedup-window": lambda p: p.dedup(["id"]).window(gpuwm.Tumble("ts", "5 seconds"), by=["k"],
                                                      aggs={"n": ("*", "count"), "mx": ("price", "max")}),
    "sort": lambda p: p.sort(key=["id"]),
    "session": lambda p: p.window(gpuwm.Session("ts", "3 seconds"), by=["k"], aggs={"n": ("*", "count")}),
}


@pytest.mark.slow
@pytest.mark.parametrize("stages", sorted(RESCALED))
def test_online_rescale_equals_a_run_that_never_rescaled(spark, tmp_path, stages):
    """vnodes 2 for three files, 3 for the next three — the first of those
    batches failing after gpuwm committed it, so Spark replays it — then 1
    for the last two: each restart re-partitions every stage's state by key,
    and the output equals one run at vnodes 2 over all eight files."""
    rng = np.random.default_rng(21)
    batches = _random_batches(rng, 8, 150, 6, 4, 40)
    schema = "ts timestamp, k bigint, price bigint, id bigint"

    def write(d, i):
        rows = batches[i]
        t = pa.table({"ts": pa.array([T0 + timedelta(seconds=s) for s, _, _ in rows], TS),
                      "k": pa.array([k for _, k, _ in rows], pa.int64()), "price": pa.array([p for _, _, p in rows]),
                      "id": pa.array([(i * 150 + j) % 400 for j in range(len(rows))], pa.int64())})  # some repeat
        pq.write_table(t, f"{d}/part-{i:04d}.parquet")
        os.utime(f"{d}/part-{i:04d}.parquet", (time.time() - 1000 + i,) * 2)

    def run(name, vnodes, on_batch=None):
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(f"{tmp_path}/{name}")
        p = (Pipeline(df, f"{tmp_path}/ck-{name}", vnodes=vnodes, on_batch=on_batch)
             .watermark("ts", "3 seconds", profile="risingwave"))
        p = RESCALED[stages](p).write_parquet(f"{tmp_path}/out-{name}")
        p.start(trigger={"availableNow": True}).awaitTermination()
        return p

    for name in ("clean", "rescaled"):
        os.makedirs(f"{tmp_path}/{name}")
    for i in range(8):
        write(f"{tmp_path}/clean", i)
    run("clean", 2)
    d = f"{tmp_path}/rescaled"
    for i in range(3):
        write(d, i)
    run("rescaled", 2)
    for i in range(3, 6):
        write(d, i)

    def fail_once(m):
        if m["batch_id"] == 3:
            raise RuntimeError("simulated crash in the first rescaled batch, after gpuwm committed it")

    with pytest.raises(Exception, match="simulated crash"):
        run("rescaled", 3, on_batch=fail_once)
    p = run("rescaled", 3)
    assert p.history[0]["batch_id"] == 3 and p.history[0]["vnodes"] == 3  # replayed, over 3 vnodes
    for i in range(6, 8):
        write(d, i)
    p = run("rescaled", 1)
    assert [m["batch_id"] for m in p.history if m["input_rows"]] == [6, 7]
    clean, got = read_out(f"{tmp_path}/out-clean"), read_out(f"{tmp_path}/out-rescaled")
    cols = clean.column_names
    assert got is not None and rows_of(got, cols) == rows_of(clean, cols) and clean.num_rows > 20
    if stages == "sort":  # one ordered stream, batch by batch
        ts = got.column("ts").cast(pa.int64()).to_numpy()
        assert (np.diff(ts) >= 0).all()


def test_rescale_is_refused_for_a_stage_that_cannot_repartition(spark, tmp_path):
    df = spark.readStream.schema("ts timestamp, k bigint, id bigint").parquet(str(tmp_path))

    def start(vnodes):
        p = (Pipeline(df, f"{tmp_path}/ck", vnodes=vnodes).watermark("ts", "3 seconds")
             .sort(key=["id"]).over(by=["k"], funcs={"rn": ["row_number"]}).write_parquet(f"{tmp_path}/out"))
        p.start().stop()

    start(1)
    with pytest.raises(gpuwm.ConfigError, match=r"vnodes=1; rescaling to vnodes=2 .*stage 1 \(over\)"):
        start(2)


def test_spark_progress_counts_the_rows_gpuwm_reads_itself(spark, tmp_path):
    """A batch gpuwm reads directly (files, the Nexmark generator, two
    inputs' files) skips Spark's scan, yet Spark's progress — what
    ``query.lastProgress`` and listeners get — counts its input rows, per
    source, as gpuwm's metrics do; a batch through Spark's reader counts as
    Spark counts it."""
    d = f"{tmp_path}/in"
    os.makedirs(d)
    for i, n in enumerate((300, 500)):
        pq.write_table(pa.table({"ts": pa.array([T0 + timedelta(seconds=s) for s in range(n)], TS),
                                 "k": pa.array(range(n), pa.int64())}), f"{d}/part-{i}.parquet")
        os.utime(f"{d}/part-{i}.parquet", (time.time() - 1000 + i,) * 2)

    def run(df, ck, read="auto"):
        p = (Pipeline(df, f"{tmp_path}/{ck}", read=read).watermark("ts", "2 seconds", profile="risingwave")
             .sort().write_parquet(f"{tmp_path}/out-{ck}"))
        q = p.start()
        try:
            q.processAllAvailable()
            progress = {pr["batchId"]: pr for pr in q.recentProgress}
        finally:
            q.stop()
        return p, progress

    df = spark.readStream.schema("ts timestamp, k bigint").option("maxFilesPerTrigger", 1).parquet(d)
    for read in ("auto", "spark"):
        p, progress = run(df, f"ck-{read}", read)
        got = [(m["read"], m["input_rows"], progress[m["batch_id"]]["numInputRows"]) for m in p.history
               if m["input_rows"]]
        assert got == [(read if read == "spark" else "direct", n, n) for n in (300, 500)]
        assert progress[1]["sources"][0]["numInputRows"] == 500  # the file source's, not the drain source's
        # gpuwm's phases in durationMs beside Spark's (issue 73): the job's parts add up to gpuwm's job time, the
        # commit is gpuwm's, addBatch keeps Spark's own part, and the keys add up to the trigger's time
        for m in p.history:
            d = progress[m["batch_id"]]["durationMs"]
            job = d["gpuwmRead"] + d["gpuwmKernels"] + d["gpuwmStateSave"] + d["gpuwmJob"]
            assert 0 <= m["job_s"] * 1000 - job < 4 and d["gpuwmCommit"] == int(m["commit_s"] * 1000), d
            assert d["gpuwmSink"] == 0 and d["addBatch"] >= 0, d  # (a Parquet sink: the tasks write it)
            assert sum(v for k, v in d.items() if k != "triggerExecution") <= d["triggerExecution"] + 2, d
        # Spark's own watermark is gpuwm's: each batch's progress shows the one the batch before left
        # (whole ms, as Spark keeps it), and its event time the newest one that watermark trails by the delay
        iso = lambda us: (T0 + timedelta(microseconds=us - int(T0.timestamp() * 1e6))).strftime(  # noqa: E731
            "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        shown = [(m["batch_id"], progress[m["batch_id"] + 1]["eventTime"]) for m in p.history
                 if m["batch_id"] + 1 in progress]
        assert shown and p.history[0]["watermark"] > int(T0.timestamp() * 1e6)
        assert [e["watermark"] for _, e in shown] == [iso(m["watermark"]) for m in p.history[:len(shown)]]
        assert progress[0]["eventTime"]["watermark"] == "1970-01-01T00:00:00.000Z"  # none yet, as Spark's
        assert shown[0][1]["max"] == iso(p.history[1]["watermark"] + 2_000_000)
    p = (Pipeline(read_nexmark(spark, f"{tmp_path}/ck-nex", **NEX), f"{tmp_path}/ck-nex")
         .watermark("date_time", "2 seconds").sort().write_parquet(f"{tmp_path}/out-nex"))
    q = p.start()
    try:
        q.processAllAvailable()
        progress = {pr["batchId"]: pr["numInputRows"] for pr in q.recentProgress}
    finally:
        q.stop()
    rows = [(m["batch_id"], m["input_rows"]) for m in p.history if m["input_rows"]]
    assert len(rows) == 6 and all(m["read"] == "direct" for m in p.history if m["input_rows"])
    assert [(b, progress[b]) for b, _ in rows] == rows


def sigkill_spec(spec: dict, path, kills: tuple = (1, 2)) -> subprocess.CompletedProcess:
    """``gpuwm run`` of ``spec`` (written to ``path``), SIGKILLed once it
    printed each of ``kills``' numbers of batch lines (a run each), then
    run to its end; that last run."""
    import json

    with open(path, "w") as fh:
        json.dump(spec, fh)
    gpuwm = [os.path.join(os.path.dirname(sys.executable), "gpuwm"), "run", str(path)]
    for n in kills:
        kill_after_batches(gpuwm, n, mark="batch ")
    r = subprocess.run(gpuwm, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r
