"""Stream-stream joins in Spark (local mode): gpuwm's interval join under
profile ``spark`` against Spark's own stream-stream join append query over
the same two file streams, run to the end; and bad join input refused
before the first micro-batch."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpuwm

pytestmark = pytest.mark.spark
pyspark = pytest.importorskip("pyspark")

from gpuwm.spark import Pipeline, local_session  # noqa: E402
from gpuwm.spark.front.spec import build as build_spec  # noqa: E402

from .test_spark import TEST_CONF, finished, kill_after_batches, read_out, started  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
TS = pa.timestamp("us", tz="UTC")
A_SCHEMA = "a_id bigint, a_ts timestamp, seller bigint"
B_SCHEMA = "b_aid bigint, b_ts timestamp, price bigint"
COND = "a_id = b_aid AND b_ts >= a_ts AND b_ts <= a_ts + interval 20 seconds"


@pytest.fixture(scope="module")
def spark():
    s = local_session(app="gpuwm-join-tests", cores=2, conf=TEST_CONF)
    yield s
    s.stop()


def _write(d: str, batches: list[pa.Table]) -> None:
    """One Parquet file per batch, increasing mtimes (Spark takes the oldest first)."""
    os.makedirs(d, exist_ok=True)
    base = time.time() - 1000
    for i, t in enumerate(batches):
        p = os.path.join(d, f"part-{i:04d}.parquet")
        pq.write_table(t, p)
        os.utime(p, (base + i, base + i))


def _streams(seed: int, batches: int = 12):
    """Auctions and bids, batch by batch: batch i's times spread over a few
    seconds around i * 4 s, some rows well behind (late at either input),
    bids on auctions of the last ~30 s, a few null keys; every bid timestamp
    has a microsecond part (Spark's watermark is in whole ms), some exactly on a bound."""
    rng = np.random.default_rng(seed)
    auctions, bids, nid = [], [], 0
    for i in range(batches):
        n = 25
        ids = np.arange(nid, nid + n)
        nid += n
        secs = (i * 4 + rng.integers(-6, 4, n)).clip(0).astype(float)
        secs[rng.random(n) < 0.1] -= 30  # late
        auctions.append(pa.table({
            "a_id": pa.array(ids, pa.int64()),
            "a_ts": pa.array([T0 + timedelta(seconds=max(s, 0)) for s in secs.tolist()], TS),
            "seller": pa.array(rng.integers(0, 5, n), pa.int64())}))
        m = 40
        aid = rng.integers(max(0, nid - 60), nid, m)
        bsec = i * 4 + rng.integers(-8, 4, m) + rng.integers(0, 1_000_000, m) / 1e6
        bsec[rng.random(m) < 0.1] -= 25
        on_bound = rng.random(m) < 0.15
        bsec[on_bound] = np.floor(bsec[on_bound])
        keys = pa.array([None if rng.random() < 0.05 else int(a) for a in aid], pa.int64())
        bids.append(pa.table({
            "b_aid": keys,
            "b_ts": pa.array([T0 + timedelta(seconds=max(float(s), 0.0)) for s in bsec.tolist()], TS),
            "price": pa.array(rng.integers(1, 1000, m), pa.int64())}))
    return auctions, bids


def _native(spark, tmp, how: str) -> list[tuple]:
    from pyspark.sql import functions as F

    a = (spark.readStream.schema(A_SCHEMA).option("maxFilesPerTrigger", 1).parquet(f"{tmp}/a")
         .withWatermark("a_ts", "10 seconds"))
    b = (spark.readStream.schema(B_SCHEMA).option("maxFilesPerTrigger", 1).parquet(f"{tmp}/b")
         .withWatermark("b_ts", "5 seconds"))
    j = a.join(b, F.expr(COND), how)
    q = (j.writeStream.format("parquet").option("path", f"{tmp}/native-{how}")
         .option("checkpointLocation", f"{tmp}/nck-{how}").outputMode("append").trigger(availableNow=True).start())
    q.awaitTermination()
    return _rows(spark.read.parquet(f"{tmp}/native-{how}").toArrow())


def _rows(t: pa.Table | None) -> list[tuple]:
    if t is None:
        return []
    cols = ["a_id", "a_ts", "seller", "b_aid", "b_ts", "price"]
    def norm(v):
        if isinstance(v, datetime):
            return v.replace(tzinfo=timezone.utc) if v.tzinfo is None else v.astimezone(timezone.utc)
        return v
    return sorted((tuple(norm(r[c]) for c in cols) for r in t.select(cols).to_pylist()), key=repr)


def _spec(tmp, how: str) -> dict:
    def inp(name, schema, col, delay):
        return {"source": {"format": "parquet", "schema": schema, "path": f"{tmp}/{name}",
                           "options": {"maxFilesPerTrigger": 1}},
                "watermark": {"column": col, "delay": delay, "profile": "spark"}}
    return {"inputs": {"auctions": inp("a", A_SCHEMA, "a_ts", "10 seconds"),
                       "bids": inp("b", B_SCHEMA, "b_ts", "5 seconds")},
            "checkpoint": f"{tmp}/ck-{how}",
            "stages": [{"join": {"left": "auctions", "right": "bids", "on": [["a_id", "b_aid"]],
                                 "between": ["b_ts", "a_ts", "0 seconds", "20 seconds"],
                                 "how": {"inner": "inner", "leftOuter": "left"}[how]}}],
            "sink": {"parquet": f"{tmp}/out-{how}"}, "trigger": {"availableNow": True}}


@pytest.mark.parametrize("how,vnodes", [("inner", None), ("leftOuter", None), ("leftOuter", 2)])
def test_spark_profile_join_equals_spark_native(spark, tmp_path, how, vnodes):
    """Two bounded file streams, one file per micro-batch each, watermark
    delays 10 s and 5 s: gpuwm's interval join equals Spark's stream-stream
    join, including the outer rows Spark emits at the end (its last no-data
    batch; gpuwm's drain) — on one vnode, and on two (both inputs exchanged
    by join key in the batch's one job)."""
    auctions, bids = _streams(seed=11)
    _write(f"{tmp_path}/a", auctions)
    _write(f"{tmp_path}/b", bids)
    want = _native(spark, tmp_path, how)
    hist = []
    spec = _spec(tmp_path, how)
    spec["vnodes"] = vnodes
    spec["read"] = "spark" if vnodes else "auto"  # auto: the tasks read both inputs' files themselves
    p = build_spec(spark, spec, verbose=False)
    p.on_batch = hist.append
    q = p.start(trigger={"availableNow": True})
    q.awaitTermination()
    got = _rows(read_out(f"{tmp_path}/out-{how}"))
    if not vnodes:  # read directly, Spark's scans skipped: its progress still counts each input's rows
        progress = {pr["batchId"]: [s["numInputRows"] for s in pr["sources"]] for pr in q.recentProgress}
        by = [m["input_rows_by_input"] for m in hist if m["input_rows"]]
        assert [progress[m["batch_id"]][:2] for m in hist if m["input_rows"]] == \
            [[b["auctions"], b["bids"]] for b in by] and sum(b["bids"] for b in by) > 0
    assert len(want) > 100
    if how == "leftOuter":
        assert sum(r[3] is None for r in want) > 10  # unmatched auctions, emitted at the end too
    assert got == want
    assert {m["read"] for m in hist if m["input_rows"]} == {"spark" if vnodes else "direct"}
    assert sum(m["late_rows"] for m in hist) > 0
    state = [m["state_rows"] for m in hist]  # cleaned by the watermark: it shrinks
    assert any(b < a for a, b in zip(state, state[1:])) and state[-1] < sum(t.num_rows for t in auctions + bids) / 2


@pytest.mark.parametrize("how", ["inner", "fullOuter"])
def test_spark_profile_window_join_equals_spark_native(spark, tmp_path, how):
    """A tumbling window join against Spark's stream-stream join with the
    10 s window in its join keys, batch for batch: under profile ``spark``
    each pair goes out in the micro-batch where its later row arrives (not
    when its window closes, as Flink's window join and the other profiles
    do), and in a full outer join each side's rows that never matched go out
    as their window closes — the last ones in Spark's final no-data batch."""
    from pyspark.sql import functions as F

    from .oracle import _batches, _native

    auctions, bids = _streams(seed=23)
    _write(f"{tmp_path}/a", auctions)
    _write(f"{tmp_path}/b", bids)
    a = (spark.readStream.schema(A_SCHEMA).option("maxFilesPerTrigger", 1).parquet(f"{tmp_path}/a")
         .withWatermark("a_ts", "10 seconds")  # one event-time column per stream: the window's
         .selectExpr("a_id", "timestamp_micros(unix_micros(a_ts)) as a_ts", "seller",
                     "window(a_ts, '10 seconds') as aw"))
    b = (spark.readStream.schema(B_SCHEMA).option("maxFilesPerTrigger", 1).parquet(f"{tmp_path}/b")
         .withWatermark("b_ts", "5 seconds")
         .selectExpr("b_aid", "timestamp_micros(unix_micros(b_ts)) as b_ts", "price", "window(b_ts, '10 seconds') as bw"))
    j = a.join(b, F.expr("a_id = b_aid AND aw = bw"), how).selectExpr(
        "coalesce(aw.start, bw.start) as window_start", "coalesce(aw.end, bw.end) as window_end",
        "a_id", "a_ts", "seller", "b_aid", "b_ts", "price")
    _native(j, f"{tmp_path}/native", f"{tmp_path}/nck")
    want = _batches(f"{tmp_path}/native")
    spec = _spec(tmp_path, "inner")
    join = spec["stages"][0]["join"]
    del join["between"]
    join["window"] = {"tumble": "10 seconds"}
    join["how"] = {"inner": "inner", "fullOuter": "full"}[how]
    spec["late"] = {"parquet": f"{tmp_path}/late"}
    hist = []
    p = build_spec(spark, spec, verbose=False)
    p.on_batch = hist.append
    p.start(trigger={"availableNow": True}).awaitTermination()
    got = _batches(f"{tmp_path}/out-inner")
    rows = [r for b in want.values() for r in b]
    assert len(rows) > 50 and len(want) > 5
    final = max(want)
    # pairs go out as they match: a window's pairs spread over several batches
    assert max(Counter(s for s, _ in {(r[0], k) for k, b in want.items() for r in b}).values()) > 1
    if how == "fullOuter":
        alone = [r for b in want.values() for r in b if r[2] is None or r[5] is None]
        assert {r[2] is None for r in alone} == {True, False} and final in {k for k, b in want.items()
                                                                            if any(r[5] is None for r in b)}
    assert got == want
    if how != "inner":
        return
    # the late rows, kept aside per input in its own schema: the filters' and
    # the window join's (a row whose window had closed), as many as counted
    late = {n: read_out(f"{tmp_path}/late/{n}") for n in ("auctions", "bids")}
    assert late["auctions"].column_names == ["a_id", "a_ts", "seller", "late_reason"]
    assert late["bids"].column_names == ["b_aid", "b_ts", "price", "late_reason"]
    reasons = [r for t in late.values() for r in t.column("late_reason").to_pylist()]
    assert reasons.count("filter") == sum(m["late_rows"] for m in hist) > 0
    assert reasons.count("window closed") == sum(m["stages"][0]["late_rows"] for m in hist)
    assert len(reasons) == reasons.count("filter") + reasons.count("window closed")
    ids = {i for t in auctions for i in t.column("a_id").to_pylist()}
    assert late["auctions"].num_rows > 0 and set(late["auctions"].column("a_id").to_pylist()) <= ids


def test_bad_join_input_is_refused_before_the_first_batch(spark, tmp_path):
    auctions, bids = _streams(seed=1, batches=1)
    _write(f"{tmp_path}/a", auctions)
    _write(f"{tmp_path}/b", bids)
    a = spark.readStream.schema(A_SCHEMA).parquet(f"{tmp_path}/a")
    b = spark.readStream.schema(B_SCHEMA).parquet(f"{tmp_path}/b")
    bi = spark.readStream.schema("b_aid int, b_ts timestamp, price bigint").parquet(f"{tmp_path}/b")

    def pipe(bdf=b):
        return (Pipeline({"auctions": a, "bids": bdf}, f"{tmp_path}/ck")
                .watermark("a_ts", "10 seconds", input="auctions", profile="spark")
                .watermark("b_ts", "5 seconds", input="bids", profile="spark"))

    on, between = [["a_id", "b_aid"]], ["b_ts", "a_ts", "0 seconds", "20 seconds"]
    with pytest.raises(gpuwm.ConfigError, match="unknown input 'bidz'; the inputs are \\['auctions', 'bids'\\]"):
        pipe().join("auctions", "bidz", on, between)
    with pytest.raises(gpuwm.SchemaError, match="join key types differ: auctions.a_id is int64 but bids.b_aid is int32"):
        pipe(bi).join("auctions", "bids", on, between)
    with pytest.raises(gpuwm.ConfigError, match="cannot parse interval '20 parsecs'"):
        pipe().join("auctions", "bids", on, ["b_ts", "a_ts", "0 seconds", "20 parsecs"])
    with pytest.raises(gpuwm.ConfigError, match="join time bound upper must be a duration"):
        pipe().join("auctions", "bids", on, ["b_ts", "a_ts", "0 seconds", 2.5])
    with pytest.raises(gpuwm.ConfigError, match="join bound lower must be a timedelta"):
        pipe().join("auctions", "bids", on, ["b_ts", "a_ts", 0, 20])
    with pytest.raises(gpuwm.ConfigError, match="both be durations or both ints"):
        pipe().join("auctions", "bids", on, ["b_ts", "a_ts", 0, "20 seconds"])
    with pytest.raises(gpuwm.ConfigError, match="is not input 'auctions'\\'s watermark column"):
        Pipeline({"auctions": a.withColumn("t2", a.a_ts), "bids": b}, f"{tmp_path}/ck") \
            .watermark("a_ts", "10 seconds", input="auctions").watermark("b_ts", "5 seconds", input="bids") \
            .join("auctions", "bids", on, ["b_ts", "t2", "0 seconds", "20 seconds"])
    with pytest.raises(gpuwm.ConfigError, match="say whose watermark this is"):
        Pipeline({"auctions": a, "bids": b}, f"{tmp_path}/ck").watermark("a_ts", "10 seconds")
    with pytest.raises(gpuwm.ConfigError, match="input 'bids' has no watermark"):
        Pipeline({"auctions": a, "bids": b}, f"{tmp_path}/ck").watermark("a_ts", "10 seconds", input="auctions") \
            .join("auctions", "bids", on, between)
    with pytest.raises(gpuwm.ConfigError, match="same profile"):
        Pipeline({"auctions": a, "bids": b}, f"{tmp_path}/ck").watermark("a_ts", "1 second", input="auctions") \
            .watermark("b_ts", "1 second", input="bids", profile="spark").join("auctions", "bids", on, between) \
            .write_parquet(f"{tmp_path}/o").explain()
    with pytest.raises(gpuwm.ConfigError, match="a join takes named inputs: give Pipeline"):
        Pipeline(a, f"{tmp_path}/ck").watermark("a_ts", "1 second").join("x", "y", on, between)
    spec = _spec(tmp_path, "inner")
    spec["stages"][0]["join"]["left"] = "nope"
    with pytest.raises(gpuwm.ConfigError, match="unknown input 'nope'"):
        build_spec(spark, spec, verbose=False)
    spec = _spec(tmp_path, "inner")
    del spec["stages"][0]["join"]["between"]
    spec["stages"][0]["join"]["on"] = [["a_ts", "b_ts"]]  # the event times alone (Spark's a_ts = b_ts): no key
    joined = build_spec(spark, spec, verbose=False)._plan().stages[0]
    assert (joined.on, joined.time_key) == ((), True)
    spec = _spec(tmp_path, "inner")
    spec["stages"][0]["join"]["window"] = {"tumble": "10 seconds"}
    with pytest.raises(gpuwm.ConfigError, match="either between=.*, window=.*, or the inputs. watermark columns"):
        build_spec(spark, spec, verbose=False)
    del spec["stages"][0]["join"]["between"]
    spec["stages"][0]["join"]["window"] = {"tumble": "10 seconds", "slide": "5 seconds"}
    with pytest.raises(gpuwm.ConfigError, match="join window must be"):
        build_spec(spark, spec, verbose=False)
    ai = spark.readStream.schema("a_id bigint, a_ts bigint, seller bigint").parquet(f"{tmp_path}/a")
    with pytest.raises(gpuwm.SchemaError, match="join time columns differ in type: auctions.a_ts is int64 but bids.b_ts is timestamp"):
        Pipeline({"auctions": ai, "bids": b}, f"{tmp_path}/ck").watermark("a_ts", 10, input="auctions") \
            .watermark("b_ts", "5 seconds", input="bids").join("auctions", "bids", on, window={"tumble": 10}) \
            .write_parquet(f"{tmp_path}/o").explain()
    assert not os.path.exists(f"{tmp_path}/ck/gpuwm")
    json.dumps(spec)


def test_a_graph_is_built_only_where_a_stage_reads_other_than_the_stage_before(spark, tmp_path):
    """A join of the inputs in either order, then a window, is a chain (at
    vnodes 2 too); a stage that names its input, or a join of a stage's
    rows, makes a graph (over 2 vnodes: a segment per keyed stage); a bad
    input or name is refused in one line."""
    auctions, bids = _streams(seed=1, batches=1)
    _write(f"{tmp_path}/a", auctions)
    _write(f"{tmp_path}/b", bids)
    a = spark.readStream.schema(A_SCHEMA).parquet(f"{tmp_path}/a")
    b = spark.readStream.schema(B_SCHEMA).parquet(f"{tmp_path}/b")

    def pipe(vnodes=2):
        return (Pipeline({"auctions": a, "bids": b}, f"{tmp_path}/ck", vnodes=vnodes)
                .watermark("a_ts", "10 seconds", input="auctions", profile="spark")
                .watermark("b_ts", "5 seconds", input="bids", profile="spark"))

    on, between = [["b_aid", "a_id"]], ["a_ts", "b_ts", "-20 seconds", "0 seconds"]
    chain = pipe().join("bids", "auctions", on, between).window(gpuwm.Tumble("b_ts", "10 seconds"),
                                                                 aggs={"n": ("*", "count")})
    plan = chain.write_parquet(f"{tmp_path}/o").explain()
    assert "stage 0      join" in plan and "<-" not in plan
    graph = (pipe(1).window(gpuwm.Tumble("a_ts", "10 seconds"), by=["a_id"], aggs={"n": ("*", "count")},
                            name="per_auction", input="auctions")
             .join("bids", "per_auction", [["b_aid", "a_id"]], ["b_ts", "window_time", None, None]))
    assert "per_auction <- auctions: window" in graph.write_parquet(f"{tmp_path}/o").explain()
    over2 = pipe().window(gpuwm.Tumble("a_ts", "10 seconds"), by=["a_id"], aggs={"n": ("*", "count")},
                          input="auctions").join("bids", "stage0", [["b_aid", "a_id"]],
                                                 ["b_ts", "window_time", None, None]).write_parquet(
        f"{tmp_path}/o").explain()  # over 2 vnodes: the inputs' segment, the window's, the join's
    assert "stage0 <- auctions: window" in over2 and "[segment 1: 2 task(s), keys ['a_id']]" in over2 and \
        "[segment 2: 2 task(s), keys ['b_aid=a_id']]" in over2, over2
    with pytest.raises(gpuwm.ConfigError, match="input='nope' is neither an input nor a stage before"):
        pipe().window(gpuwm.Tumble("a_ts", "10 seconds"), input="nope")
    with pytest.raises(gpuwm.ConfigError, match="stage name 'bids' is taken"):
        pipe().window(gpuwm.Tumble("a_ts", "10 seconds"), input="auctions", name="bids")
    with pytest.raises(gpuwm.ConfigError, match=r"\['bids'\] feed no stage"):
        pipe(1).window(gpuwm.Tumble("a_ts", "10 seconds"), input="auctions").write_parquet(f"{tmp_path}/o").explain()


NEX = {"totalEvents": 90_000, "eventsPerBatch": 15_000, "splits": 2, "eventsPerSecond": 1_000, "maxDelayMs": 3_000,
       "outOfOrderFraction": 0.2, "seed": 5}


def q3_like(ck: str, out: str, nex: dict = NEX, how: str = "inner") -> dict:
    """Persons ⋈ auctions of one Nexmark generator (Q3-like): each seller's
    auctions opened within 30 s after the seller's person record."""
    def inp(kind, select, col):
        return {"source": {"format": "nexmark", "options": {**nex, "kind": kind}, "select": select},
                "watermark": {"column": col, "delay": "2 seconds", "profile": "spark"}}
    return {"inputs": {"persons": inp("person", ["id as p_id", "name", "state", "date_time as p_time"], "p_time"),
                       "auctions": inp("auction", ["id as a_id", "seller", "category", "date_time as a_time"],
                                       "a_time")},
            "checkpoint": ck,
            "stages": [{"join": {"left": "persons", "right": "auctions", "on": [["p_id", "seller"]],
                                 "between": ["a_time", "p_time", "0 seconds", "30 seconds"], "how": how}}],
            "sink": {"parquet": out}}


CRASH = """
import json, sys
sys.path.insert(0, {root!r})
from gpuwm.spark import local_session
from gpuwm.spark.front.spec import build
spark = local_session(app="crash-join", cores=2)
p = build(spark, json.loads({spec!r}), verbose=False)
p.on_batch = lambda m: print("BATCH", m["batch_id"], flush=True)
q = p.start()
q.processAllAvailable()
q.stop()
print("DONE", flush=True)
"""


@pytest.mark.slow
def test_killed_driver_restarts_to_the_uninterrupted_join(tmp_path):
    """A left outer Q3-like join on two Nexmark inputs: the driver is
    SIGKILLed after its third batch and restarted on its checkpoint; the
    output equals an uninterrupted run's, row for row (nothing lost or
    written twice)."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def script(name):
        spec = q3_like(f"{tmp_path}/{name}/ck", f"{tmp_path}/{name}/out", how="left")
        path = f"{tmp_path}/{name}.py"
        with open(path, "w") as fh:
            fh.write(CRASH.format(root=root, spec=json.dumps(spec)))
        return path

    def rows(name):
        t = read_out(f"{tmp_path}/{name}/out")
        cols = ["p_id", "p_time", "a_id", "a_time"]
        return sorted((tuple(r[c] for c in cols) for r in t.select(cols).to_pylist()), key=repr)

    uninterrupted = started(script("clean"))
    path = script("killed")
    kill_after_batches(path, 3)
    r = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=600)
    assert "DONE" in r.stdout, r.stdout + r.stderr[-3000:]
    r = finished(uninterrupted)
    assert "DONE" in r.stdout, r.stdout + r.stderr[-3000:]
    clean = rows("clean")
    assert len(clean) > 1000 and any(r[2] is None for r in clean)
    assert rows("killed") == clean


def test_union_then_window_equals_spark_native(spark, tmp_path):
    """Two inputs with one schema and their own watermark delays, unioned,
    then a 10 s tumbling count per seller: Spark's union of two watermarked
    streams + groupBy(window) append, to the end."""
    from pyspark.sql import functions as F

    auctions, _ = _streams(seed=5)
    more, _ = _streams(seed=6)
    _write(f"{tmp_path}/a", auctions)
    _write(f"{tmp_path}/b", more)

    def src(d, delay):
        return (spark.readStream.schema(A_SCHEMA).option("maxFilesPerTrigger", 1).parquet(f"{tmp_path}/{d}")
                .withWatermark("a_ts", delay))
    native = (src("a", "10 seconds").union(src("b", "4 seconds"))
              .groupBy(F.window("a_ts", "10 seconds").alias("w"), "seller").agg(F.count("*").alias("n"))
              .selectExpr("w.start as window_start", "seller", "n"))
    q = (native.writeStream.format("parquet").option("path", f"{tmp_path}/native")
         .option("checkpointLocation", f"{tmp_path}/nck").outputMode("append").trigger(availableNow=True).start())
    q.awaitTermination()
    want = sorted((r["window_start"].astimezone(timezone.utc), r["seller"], r["n"])
                  for r in spark.read.parquet(f"{tmp_path}/native").toArrow().to_pylist())

    def inp(d, delay):
        return {"source": {"format": "parquet", "schema": A_SCHEMA, "path": f"{tmp_path}/{d}",
                           "options": {"maxFilesPerTrigger": 1}},
                "watermark": {"column": "a_ts", "delay": delay, "profile": "spark"}}
    spec = {"inputs": {"a": inp("a", "10 seconds"), "b": inp("b", "4 seconds")}, "checkpoint": f"{tmp_path}/ck",
            "stages": [{"union": {}}, {"window": {"tumble": "10 seconds", "by": ["seller"],
                                                 "aggs": {"n": ["*", "count"]}}}],
            "sink": {"parquet": f"{tmp_path}/out"}}
    build_spec(spark, spec, verbose=False).start(trigger={"availableNow": True}).awaitTermination()
    got = sorted((r["window_start"], r["seller"], r["n"]) for r in read_out(f"{tmp_path}/out").to_pylist())
    assert len(want) > 10
    assert got == want


def test_run_ends_a_spec_of_bounded_nexmark_inputs(spark, tmp_path):
    """`gpuwm run` of a spec whose inputs are all bounded Nexmark streams
    runs to their end and returns, without a trigger (as for one input)."""
    import threading

    from gpuwm.spark.front.spec import run

    spec = q3_like(f"{tmp_path}/ck", f"{tmp_path}/out", dict(NEX, totalEvents=30_000))
    got: list = []
    t = threading.Thread(target=lambda: got.append(run(spark, spec, verbose=False)), daemon=True)
    t.start()
    t.join(timeout=300)
    assert not t.is_alive(), "run() did not return at the end of its bounded inputs"
    assert sum(m["input_rows"] for m in got[0].history) > 0 and read_out(f"{tmp_path}/out") is not None


@pytest.mark.parametrize("vnodes", [1, 2])
def test_two_inputs_are_one_alignment_group(spark, tmp_path, vnodes):
    """Two inputs with max_drift, one running 40 s ahead of the other,
    unioned into a 10 s tumbling count: the input ahead is held back against
    the group's slowest split, and the output equals the operators'
    (InputFilters, then the window) over the same micro-batches."""
    from gpuwm.inputs import InputFilters

    rng = np.random.default_rng(3)
    files = {"a": [], "b": []}
    for name, ahead in (("a", 0), ("b", 40)):
        os.makedirs(f"{tmp_path}/{name}")
        for i in range(6):
            secs = i * 10 + rng.integers(0, 10, 120) + ahead
            t = pa.table({"ts": pa.array([datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=int(s))
                                          for s in secs], pa.timestamp("us", tz="UTC")),
                          "k": pa.array(rng.integers(0, 4, 120), pa.int64())})
            files[name].append(t)
            pq.write_table(t, f"{tmp_path}/{name}/part-{i:04d}.parquet")
            os.utime(f"{tmp_path}/{name}/part-{i:04d}.parquet", (time.time() - 1000 + i,) * 2)
    dfs = {n: spark.readStream.schema("ts timestamp, k bigint").option("maxFilesPerTrigger", 1)
           .parquet(f"{tmp_path}/{n}") for n in ("a", "b")}
    kw = dict(profile="risingwave", max_drift="15 seconds")
    p = Pipeline(dfs, f"{tmp_path}/ck", vnodes=vnodes, verbose=False)
    for n in ("a", "b"):
        p = p.watermark("ts", "2 seconds", input=n, **kw)
    p = (p.union().window(gpuwm.Tumble("ts", "10 seconds"), by=["k"], aggs={"n": ("*", "count")})
         .write_parquet(f"{tmp_path}/out"))
    p.start(trigger={"availableNow": True}).awaitTermination()
    f = InputFilters({n: gpuwm.WatermarkFilter("ts", timedelta(seconds=2), **kw) for n in ("a", "b")})
    w = gpuwm.WindowAggregate(gpuwm.Tumble("ts", "10 seconds"), by=["k"], aggs={"n": ("*", "count")},
                              profile="risingwave")
    it = {n: iter(files[n]) for n in files}
    want = []
    for m in p.history:
        if m["end_of_input"]:
            kept = f.flush()
            f.end_input()
        else:
            kept = f.process({n: next(it[n]) for n, c in m["input_rows_by_input"].items() if c})
        got = [t for t in kept.values() if t.num_rows]
        if got:
            w.push(pa.concat_tables(got))
        want.append(w.drain(f.output_watermark))
        assert m["held_rows"] == f.held_rows
    assert max(m["held_rows"] for m in p.history) > 100 and f.held_rows == 0
    cols = ["window_start", "k", "n"]
    rows = lambda t: sorted(tuple(r[c] for c in cols) for r in t.to_pylist())  # noqa: E731
    assert rows(read_out(f"{tmp_path}/out")) == rows(pa.concat_tables([x for x in want if x is not None]))
