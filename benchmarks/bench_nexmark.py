"""Nexmark-like queries on the embedded source, Spark local mode.

Run:  .venv/bin/python benchmarks/bench_nexmark.py [--events 3000000] [--batch 500000] [--queries q5,q7,q11]
      .venv/bin/python benchmarks/bench_nexmark.py --queries q15,q16,q17,q19w,hot,q9,q18,q19 [--files 6] [--batch 500000]
      (beyond Spark, from Parquet files: :data:`BEYOND`, :func:`beyond`; results/nexmark-beyond/)
      .venv/bin/python benchmarks/bench_nexmark.py --queries q5g,q7g,q8g [--files 6] [--batch 500000]
      (the real q5, q7, q8 as Spark runs them, graphs of stages: :data:`GRAPHS`, :func:`graphs`;
      results/nexmark-graphs/; ``jjg``: a join of a join's rows, results/join-of-join/)

Q5-like: hopping 10 s / 2 s bid count per auction (watermark 4 s, profile
``spark``; beside it Spark's own ``withWatermark`` + ``window`` + append
query on the same source, and the floor: the source into a count-only
``mapInArrow``). Q7-like: tumbling 10 s
max price (and count) per auction. Q11-like: bids per bidder in session
windows with a 10 s gap (Spark native: ``session_window``). Events/s = events per batch / median
Spark ``triggerExecution`` (first batch left out), per core = / cores. The
published figures are printed beside ours for orientation only: different
hardware, engines and setups (Flink Nexmark V2 q5 ~74.5 k/s/core, q7 ~22.9
k/s/core; RisingWave q7 ~20.4 k/s/core; no q11 figure is quoted), and our source generates bids only
(46 of every 50 events), so the figures are not a like-for-like comparison.
Each query runs twice: the task generating its micro-batch's splits itself
from the offsets Spark logged (``read="auto"``, see
``gpuwm/spark/driver/direct.py``), and the source's rows through the JVM
(``read="spark"``); their outputs must be equal. Writes
``results/nexmark/results.{json,md}``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import data_progress, write_results  # noqa: E402

PUBLISHED = {"q5": {"Flink Nexmark V2": 74_500}, "q7": {"Flink Nexmark V2": 22_900, "RisingWave": 20_400},
             "q11": {}}
#: (window, group key, aggregates) per query; session windows emit [first bid, last bid + gap)
QUERIES = {
    "q5": (("hop", "10 seconds", "2 seconds"), "auction", {"bids": ("*", "count")}),
    "q7": (("tumble", "10 seconds"), "auction", {"bids": ("*", "count"), "max_price": ("price", "max")}),
    "q11": (("session", "10 seconds"), "bidder", {"bids": ("*", "count")}),
}


def gpuwm_window(q: str):
    import gpuwm

    (kind, *args), _, _ = QUERIES[q]
    if kind == "hop":
        return gpuwm.Hop("date_time", size=args[0], slide=args[1])
    return (gpuwm.Tumble if kind == "tumble" else gpuwm.Session)("date_time", args[0])


def _run_row(sq, q: str, label: str, args) -> dict:
    """Run a Spark-fed query to the end; its row of the results (first batch left out)."""
    sq.processAllAvailable()
    sq.stop()
    prog = [x for x in sq.recentProgress if x["numInputRows"] > 0][1:]
    times = [x["durationMs"]["triggerExecution"] / 1000 for x in prog]
    med = statistics.median(times)
    return {"query": q, "read": label, "events_per_s": args.batch / med,
            "events_per_s_per_core": args.batch / med / args.cores,
            "bids_per_batch": statistics.median([x["numInputRows"] for x in prog]), "median_batch_s": med,
            "min_s": min(times), "max_s": max(times), "published_per_core": PUBLISHED[q]}


def native_and_floor(spark, q: str, args, ours) -> list[dict]:
    """Spark's own withWatermark + window + append query on the same source,
    and the floor: the source's rows into a mapInArrow that only counts.
    Checks that every window gpuwm emitted is one of native's, and that
    native's others are windows gpuwm had not closed yet (native flushes them
    in its final no-data batch; a foreachBatch query gets none)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from gpuwm.spark import read_nexmark

    out = []
    work = tempfile.mkdtemp(prefix="gpuwm-nex-native-")
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    df = read_nexmark(spark, f"{work}/nck", totalEvents=args.events, eventsPerBatch=args.batch, splits=4,
                      eventsPerSecond=50_000).withWatermark("date_time", "4 seconds")
    (kind, *wargs), by, aggs = QUERIES[q]
    win = F.session_window("date_time", wargs[0]) if kind == "session" else F.window("date_time", *wargs)
    exprs = [F.count("*").alias(n) if fn == "count" else getattr(F, fn)(c).alias(n) for n, (c, fn) in aggs.items()]
    agg = df.groupBy(win.alias("w"), by).agg(*exprs)
    agg = agg.selectExpr("w.start as window_start", "w.end as window_end", "*").drop("w")
    sq = (agg.writeStream.format("parquet").option("path", f"{work}/native").option("checkpointLocation", f"{work}/nck")
          .outputMode("append").start())
    out.append(_run_row(sq, q, "spark native", args))
    nat = spark.read.parquet(f"{work}/native").toArrow()

    def key(t):
        us = lambda c: t.column(c).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()  # noqa: E731
        return set(zip(us("window_end"), us("window_start"), *[t.column(c).to_pylist() for c in [by, *aggs]]))

    got, exp = key(ours), key(nat)
    last = max(e for e, *_ in got)
    assert got <= exp and all(e > last for e, *_ in exp - got), f"{q}: gpuwm and Spark native disagree"

    def count_rows(batches):
        yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]})

    fl = read_nexmark(spark, f"{work}/fck", totalEvents=args.events, eventsPerBatch=args.batch, splits=4,
                      eventsPerSecond=50_000)
    sq = (fl.writeStream.foreachBatch(lambda d, i: d.mapInArrow(count_rows, "n long").collect())
          .option("checkpointLocation", f"{work}/fck").start())
    out.append(_run_row(sq, q, "floor: source through Spark, count", args))
    for r in out:
        print(f"{q}, {r['read']:34s}: {r['events_per_s'] / 1e3:8.1f} k events/s "
              f"(median batch {r['median_batch_s']:.2f} s)", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return out


#: beyond Spark: queries Spark refuses on a stream (or, q17, runs), in Spark's form, over bids written as Parquet;
#: {bids} is the view. Windows of 10 s so that they close during the run (the published q15-q17 use a day).
BEYOND = {
    "q15": "SELECT date_format(window.start, 'yyyy-MM-dd HH:mm:ss') AS slot, count(*) AS total_bids, "
           "count(*) FILTER (WHERE price < 10000) AS rank1_bids, "
           "count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, "
           "count(DISTINCT bidder) AS total_bidders, count(DISTINCT bidder) FILTER (WHERE price < 10000) AS "
           "rank1_bidders, count(DISTINCT auction) AS total_auctions FROM {bids} GROUP BY window(date_time, "
           "'10 seconds')",
    # q16: q15 per channel ({bidsc}: the bids with Nexmark's channel; its max(date_format(date_time, 'HH:mm'))
    # left out: an expression inside an aggregate, not gpuwm's)
    "q16": "SELECT channel, date_format(window.start, 'yyyy-MM-dd HH:mm:ss') AS slot, count(*) AS total_bids, "
           "count(*) FILTER (WHERE price < 10000) AS rank1_bids, "
           "count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, "
           "count(DISTINCT bidder) AS total_bidders, count(DISTINCT bidder) FILTER (WHERE price < 10000) AS "
           "rank1_bidders, count(DISTINCT auction) AS total_auctions FROM {bidsc} GROUP BY channel, "
           "window(date_time, '10 seconds')",
    "q17": "SELECT auction, window.start AS slot, count(*) AS total_bids, "
           "count(*) FILTER (WHERE price < 10000) AS rank1_bids, sum(price) FILTER (WHERE price >= 1000000) "
           "AS rank3_sum, min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, "
           "sum(price) AS sum_price FROM {bids} GROUP BY auction, window(date_time, '10 seconds')",
    "q19w": "SELECT * FROM (SELECT auction, bidder, price, date_time, ROW_NUMBER() OVER (PARTITION BY "
            "window(date_time, '10 seconds'), auction ORDER BY price DESC) AS rank_number FROM {bids}) "
            "WHERE rank_number <= 10",
    "hot": "SELECT * FROM (SELECT *, RANK() OVER (PARTITION BY window ORDER BY bids DESC) AS r FROM (SELECT "
           "window(date_time, '10 seconds') AS window, auction, count(*) AS bids FROM {bids} GROUP BY "
           "window(date_time, '10 seconds'), auction)) WHERE r <= 3",
    # Nexmark q18 and q19 as published: a rank with no window, run with a state TTL (STATE_TTL)
    "q18": "SELECT auction, bidder, price, date_time FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, "
           "auction ORDER BY date_time DESC) AS rank_number FROM {bids}) WHERE rank_number <= 1",
    "q19": "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number "
           "FROM {bids}) WHERE rank_number <= 10",
    # Nexmark q9 as published (each auction's winning bid): the join of auctions and bids as FROM A, B WHERE
    "q9": "SELECT id, item_name, seller, category, expires, auction, bidder, price, bid_date_time FROM (SELECT A.*, "
          "B.auction, B.bidder, B.price, B.date_time AS bid_date_time, ROW_NUMBER() OVER (PARTITION BY A.id "
          "ORDER BY B.price DESC, B.date_time ASC) AS rownum FROM {auctions} A, {bids} B WHERE A.id = B.auction "
          "AND B.date_time BETWEEN A.date_time AND A.expires) WHERE rownum <= 1",
}
#: the column whose closed values gpuwm's output holds all of (default: slot, window or date_time, whichever it has)
SLOT = {"q9": "expires"}
#: the queries that read the auctions as well
WITH_AUCTIONS = {"q9"}
#: Nexmark's channels (the generator makes none: a bid's is CHANNELS[bidder % 4])
CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
#: accelerate()'s state_ttl, and the partition keys: the oracle is Spark's batch run over the keys whose bids are
#: never further apart than the ttl (one partition each) and that gpuwm closed
STATE_TTL = {"q18": ("10 seconds", ["bidder", "auction"]), "q19": ("10 seconds", ["auction"])}


def spark_read_s(spark, path: str, cols: list[str]) -> float:
    """The floor: seconds for Spark to read ``cols`` of the Parquet files at
    ``path`` into Arrow (a Python worker) and count them, its second run."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    def count_rows(batches):
        yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]})

    floor = spark.read.parquet(path).select(*[F.col(c) for c in cols])
    floor.mapInArrow(count_rows, "n long").collect()
    t0 = time.perf_counter()
    floor.mapInArrow(count_rows, "n long").collect()
    return time.perf_counter() - t0


#: the real Nexmark q5, q7, q8 in Spark's DataFrame form, as Spark runs them on a stream (gpuwm: graphs of stages)
def _q5(s):
    from pyspark.sql import functions as F

    c = s["bids"].groupBy(F.window("date_time", "10 seconds", "2 seconds").alias("w"), "auction").agg(
        F.count("*").alias("num"))
    m = c.groupBy(F.col("w").alias("mw")).agg(F.max("num").alias("maxn"))
    return c.join(m, F.expr("w = mw AND num >= maxn")).select(F.col("w.end").alias("until"), "auction", "num")


def _q7(s):
    from pyspark.sql import functions as F

    m = s["bids"].groupBy(F.window("date_time", "10 seconds")).agg(F.max("price").alias("maxprice")).select(
        F.col("window.start").alias("wstart"), F.col("window.end").alias("wend"), "maxprice")
    return s["bids"].join(m, F.expr("price = maxprice AND date_time >= wstart AND date_time < wend")).select(
        "auction", "price", "bidder", "date_time")


def _q8(s):
    from pyspark.sql import functions as F

    p = s["persons"].groupBy(F.window("date_time", "10 seconds").alias("pw"), "id", "name").agg(
        F.count("*").alias("n"))
    a = s["auctions"].groupBy(F.window("date_time", "10 seconds").alias("aw"), "seller").agg(
        F.count("*").alias("na"))
    return p.join(a, F.expr("id = seller AND pw = aw")).select("id", "name", F.col("pw.start").alias("starttime"))


def _jj(s):
    """Not a Nexmark query: a join of a join's rows (#47). Each auction with
    its bids of its first 10 s, joined with its seller registered in the
    10 s before it opened."""
    from pyspark.sql import functions as F

    a, b, p = s["auctions"], s["bids"], s["persons"]
    ten = F.expr("interval 10 seconds")
    j = a.join(b, (a["id"] == b["auction"]) & b["date_time"].between(a["date_time"], a["date_time"] + ten)).select(
        a["id"], a["seller"], a["date_time"].alias("a_time"), b["price"])
    return j.join(p, (j["seller"] == p["id"]) & p["date_time"].between(j["a_time"] - ten, j["a_time"])).select(
        j["id"], "a_time", "price", p["name"])


GRAPHS = {"q5g": (_q5, ("bids",)), "q7g": (_q7, ("bids",)), "q8g": (_q8, ("persons", "auctions")),
          "jjg": (_jj, ("auctions", "bids", "persons"))}


def graphs(spark, args) -> list[dict]:
    """The GRAPHS queries from Parquet files (one per micro-batch), each run
    as Spark runs it (its file sink, append) and through ``accelerate``
    (profile spark): events/s over the summed time of the micro-batches with
    data (the first left out), the outputs equal as multisets; the floor:
    the files read by Spark and counted."""
    import os

    import pyarrow.parquet as pq

    from gpuwm.nexmark import NexmarkConfig, auctions, bids, persons
    from gpuwm.spark import accelerate

    work = tempfile.mkdtemp(prefix="gpuwm-nex-graphs-")
    cfg = NexmarkConfig(events_per_second=50_000)
    base = time.time() - 10_000
    makers = {"bids": bids, "auctions": auctions, "persons": persons}
    for i in range(args.files):
        for d, make in makers.items():
            t = make(cfg, i * args.batch, (i + 1) * args.batch).drop(["split", "event_id"])
            path = f"{work}/{d}/part-{i:04d}.parquet"
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(t, path)
            os.utime(path, (base + i, base + i))
    events = args.files * args.batch
    schemas = {d: pq.read_schema(f"{work}/{d}/part-0000.parquet") for d in makers}
    spark_schemas = {d: spark.read.parquet(f"{work}/{d}").schema for d in makers}

    def streams():
        return {d: spark.readStream.schema(spark_schemas[d]).option("maxFilesPerTrigger", 1).parquet(
            f"{work}/{d}").withWatermark("date_time", "4 seconds") for d in makers}

    rows = []
    for q in [q for q in args.queries.split(",") if q in GRAPHS]:
        make, reads = GRAPHS[q]
        history: list[dict] = []
        acc = accelerate(make(streams()), fallback="error", vnodes=args.vnodes, on_batch=history.append)
        run = acc.writeStream.option("checkpointLocation", f"{work}/ck-{q}").trigger(availableNow=True).start(
            f"{work}/out-{q}")
        run.awaitTermination()
        # both engines timed alike: Spark's triggerExecution of each micro-batch with data (the first left out),
        # which holds Spark's own work a batch (offsets, planning, commits) beside the sink's
        ran = [x for x in run.recentProgress if x["numInputRows"] > 0][1:]
        ours = events * len(ran) / args.files / sum(x["durationMs"]["triggerExecution"] / 1000 for x in ran)
        data = [m for m in history if m["input_rows"]][1:]
        inside = events * len(data) / args.files / sum(m["wall_s"] for m in data)
        native = make(streams()).writeStream.format("parquet").option("path", f"{work}/native-{q}").option(
            "checkpointLocation", f"{work}/nck-{q}").trigger(availableNow=True).start()
        native.awaitTermination()
        prog = [x for x in native.recentProgress if x["numInputRows"] > 0][1:]
        theirs = events * len(prog) / args.files / sum(x["durationMs"]["triggerExecution"] / 1000 for x in prog)
        got = pq.read_table(f"{work}/out-{q}").drop(["batch_id"])
        want = spark.read.parquet(f"{work}/native-{q}").collect()
        assert got.num_rows > 0 and sorted(map(_plain, got.to_pylist()), key=repr) == \
            sorted((_plain(r.asDict(recursive=True)) for r in want), key=repr), f"{q}: gpuwm and Spark differ"

        floor_s = sum(spark_read_s(spark, f"{work}/{d}", schemas[d].names) for d in reads)
        rows += _runs(q, args, (("gpuwm (accelerate, stream)", ours), ("spark native (stream)", theirs),
                                ("gpuwm's batch function alone (its wall_s)", inside),
                                ("floor: files read by Spark, counted", events / floor_s)))
    shutil.rmtree(work, ignore_errors=True)
    return rows


def _plain(row: dict) -> tuple:
    """A row's values as both sides compare them: naive UTC datetimes, structs as tuples, floats to 9 places."""
    from datetime import timezone

    def one(v):
        if isinstance(v, dict):
            return tuple(one(x) for x in v.values())
        if hasattr(v, "tzinfo") and v.tzinfo is not None:
            return v.astimezone(timezone.utc).replace(tzinfo=None)
        return round(v, 9) if isinstance(v, float) else v

    return tuple(one(v) for v in row.values())


def beyond(spark, args) -> list[dict]:
    """The BEYOND queries from the same Parquet files (one per micro-batch):
    gpuwm (``accelerate``, profile spark), Spark's batch run of the same SQL
    over all the files (the oracle: every window gpuwm closed must equal
    its), and the floor (the files' columns read by Spark and counted)."""
    import os

    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpuwm.nexmark import NexmarkConfig, auctions, bids
    from gpuwm.spark import accelerate

    work = tempfile.mkdtemp(prefix="gpuwm-nex-beyond-")
    cfg, n = NexmarkConfig(events_per_second=50_000), {"in": 0, "auctions": 0}
    base = time.time() - 10_000
    for i in range(args.files):
        for d, make in (("in", bids), ("auctions", auctions)):
            t = make(cfg, i * args.batch, (i + 1) * args.batch).drop(["split", "event_id"])
            if d == "in":
                t = t.append_column("channel", pa.array(np.array(CHANNELS)[t.column("bidder").to_numpy() % 4]))
            path = f"{work}/{d}/part-{i:04d}.parquet"
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(t, path)
            os.utime(path, (base + i, base + i))
            n[d] += t.num_rows
    events = args.files * args.batch
    schema = "auction bigint, bidder bigint, price bigint, date_time timestamp"
    a_schema = ("id bigint, item_name string, initial_bid bigint, reserve bigint, date_time timestamp, "
                "expires timestamp, seller bigint, category bigint")
    c_schema = schema + ", channel string"
    for d, view, sch in (("in", "bids", schema), ("in", "bidsc", c_schema), ("auctions", "auctions", a_schema)):
        spark.readStream.schema(sch).option("maxFilesPerTrigger", 1).parquet(f"{work}/{d}").withWatermark(
            "date_time", "4 seconds").createOrReplaceTempView(f"{view}_s")
        spark.read.schema(sch).parquet(f"{work}/{d}").createOrReplaceTempView(f"{view}_b")
    rows = []
    for q in [q for q in args.queries.split(",") if q in BEYOND]:
        history: list[dict] = []
        acc = accelerate(spark.sql(BEYOND[q].format(bids="bids_s", bidsc="bidsc_s", auctions="auctions_s")),
                         fallback="error",
                         vnodes=args.vnodes, on_batch=history.append, state_ttl=STATE_TTL.get(q, (None,))[0])
        acc.writeStream.option("checkpointLocation", f"{work}/ck-{q}").trigger(availableNow=True).start(
            f"{work}/out-{q}").awaitTermination()
        data = [m for m in history if m["input_rows"]][1:]  # the first batch left out (start-up)
        ours = sum(m["wall_s"] for m in data)
        read_rows = n["in"] + (n["auctions"] if q in WITH_AUCTIONS else 0)
        eps = sum(m["input_rows"] for m in data) / ours * events / read_rows
        batch = spark.sql(BEYOND[q].format(bids="bids_b", bidsc="bidsc_b", auctions="auctions_b"))
        batch.collect()  # warm
        t0 = time.perf_counter()
        want = batch.collect()
        spark_s = time.perf_counter() - t0
        got = pq.read_table(f"{work}/out-{q}").drop(["batch_id"])
        slot = SLOT.get(q) or next(c for c in ("slot", "window", "date_time") if c in got.column_names)
        if q in STATE_TTL:
            keys = STATE_TTL[q][1]
            bids_t = pq.read_table(f"{work}/in", columns=keys + ["date_time"]).to_pandas().sort_values(
                keys + ["date_time"])
            gap = bids_t.groupby(keys)["date_time"].diff().groupby([bids_t[k] for k in keys]).max().fillna(
                pd.Timedelta(0))
            one = {k if isinstance(k, tuple) else (k,) for k, g in gap.items() if g < pd.Timedelta(STATE_TTL[q][0])}
            closed = {tuple(r[k] for k in keys) for r in got.select(keys).to_pylist()} & one
            got = got.filter(pa.array([tuple(r[k] for k in keys) in closed for r in got.select(keys).to_pylist()]))
            keep = [r for r in want if tuple(r[k] for k in keys) in closed]
            assert len(closed) > 10 and sorted(map(_plain, got.to_pylist()), key=repr) == sorted(
                (_plain(r.asDict(recursive=True)) for r in keep), key=repr), f"{q}: gpuwm and Spark batch differ"
        elif slot == "slot" and pa.types.is_string(got.schema.field(slot).type):
            last = max(got.column(slot).to_pylist())
            keep = [r for r in want if r[slot] <= last]
        else:
            key = (lambda v: v["start"]) if slot == "window" else (lambda v: v)
            last = max(key(v) for v in got.column(slot).to_pylist())
            keep = [r for r in want if key(r[slot]).replace(tzinfo=last.tzinfo) <= last]
        assert got.num_rows > 0 and sorted(map(_plain, got.to_pylist()), key=repr) == \
            sorted((_plain(r.asDict(recursive=True)) for r in keep), key=repr), f"{q}: gpuwm and Spark batch differ"

        floor_s = arrow_s = 0.0
        for d, sch in (("in", c_schema if "{bidsc}" in BEYOND[q] else schema),
                       ("auctions", a_schema))[:2 if q in WITH_AUCTIONS else 1]:
            cols = [c.split()[0] for c in sch.split(", ")]
            floor_s += spark_read_s(spark, f"{work}/{d}", cols)
            t0 = time.perf_counter()
            for f in sorted(Path(f"{work}/{d}").iterdir()):  # what gpuwm's tasks read, file after file
                pq.read_table(f, columns=cols)
            arrow_s += time.perf_counter() - t0
        rows += _runs(q, args, (("gpuwm (stream, per batch)", eps), ("spark batch, whole input", events / spark_s),
                                ("floor: files read by Spark, counted", events / floor_s),
                                ("floor: files read by pyarrow (gpuwm's read)", events / arrow_s)))
    shutil.rmtree(work, ignore_errors=True)
    return rows


def _runs(q: str, args, runs) -> list[dict]:
    """Result rows of query ``q``'s ``(label, events/s)`` runs, each printed."""
    out = []
    for label, eps in runs:
        out.append({"query": q, "read": label, "events_per_s": eps, "events_per_s_per_core": eps / args.cores,
                    "median_batch_s": None, "published_per_core": {}})
        print(f"{q}, {label:36s}: {eps / 1e3:8.1f} k events/s", flush=True)
    return out


def _file_results(args, suffix: str, rows: list[dict], head: list[str]) -> None:
    """The rows of a from-files run (:func:`beyond`, :func:`graphs`) under
    ``<out><suffix>``: JSON, and Markdown with ``head`` above its table."""
    md = head + ["", "| query | run | k events/s | k events/s/core |", "|---|---|---|---|"]
    md += [f"| {r['query']} | {r['read']} | {r['events_per_s'] / 1e3:.1f} | {r['events_per_s_per_core'] / 1e3:.1f} |"
           for r in rows]
    write_results(args.out + suffix, {"date": time.strftime("%Y-%m-%d"), "cores": args.cores, "files": args.files,
                                      "batch": args.batch, "results": rows}, md)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=3_000_000)
    ap.add_argument("--batch", type=int, default=500_000)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--vnodes", type=int, default=1)
    ap.add_argument("--queries", default=",".join(QUERIES), help="comma-separated, from " + ", ".join(QUERIES)
                    + " and, beyond Spark (from Parquet files), " + ", ".join(BEYOND))
    ap.add_argument("--files", type=int, default=6, help="Parquet files (micro-batches of --batch events) for "
                    + ", ".join(BEYOND))
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "nexmark"))
    ap.add_argument("--driver-memory", default="6g", help="Spark's driver (and, in local mode, executor) heap: "
                    "Spark's own q7 keeps every bid in its join's state")
    args = ap.parse_args()
    from gpuwm.spark import Pipeline, local_session, read_nexmark

    spark = local_session(app="gpuwm-nexmark", cores=args.cores, conf={"spark.driver.memory": args.driver_memory})
    rows = []
    import pyarrow.parquet as pq

    asked = args.queries.split(",")
    unknown = [q for q in asked if q not in QUERIES and q not in BEYOND and q not in GRAPHS]
    if unknown:
        ap.error(f"unknown queries {unknown}")
    if any(q in GRAPHS for q in asked):
        _file_results(args, "-graphs", graphs(spark, args), [
              f"# {', '.join(q for q in asked if q in GRAPHS)} as Spark runs them (graphs of stages), from "
              f"Parquet files, Spark local[{args.cores}] "
              f"({time.strftime('%Y-%m-%d')})", "",
              f"{args.files} files of {args.batch:,} Nexmark events each (one file a micro-batch of each input; "
              f"watermark 4 s, profile spark, vnodes {args.vnodes}). gpuwm: `accelerate()` of the query, a graph of stages; "
              "Spark: the same query on its own, parquet sink, append. Events over the summed time of the "
              "micro-batches with data, the first left out, both timed alike by Spark's `triggerExecution`; "
              "beside it, gpuwm's batch function alone (its `wall_s`, without Spark's offsets, planning and "
              "commits); both outputs equal (checked). Floor: the input files read by Spark into Arrow and "
              "counted."])
        asked = [q for q in asked if q not in GRAPHS]
        if not asked:
            spark.stop()
            return 0
    if any(q in BEYOND for q in asked):
        _file_results(args, "-beyond", beyond(spark, args), [f"# Beyond Spark, from Parquet files, Spark local[{args.cores}] ({time.strftime('%Y-%m-%d')})", "",
              f"{args.files} files of {args.batch:,} Nexmark events each (the bids of them, and for q9 the "
              "auctions too; one file a micro-batch; "
              "10 s windows, watermark 4 s, profile spark). gpuwm: events over the summed wall time of its "
              "micro-batches with data, the first left out. Spark batch: the same SQL over all the files at once "
              "(Spark refuses q15's DISTINCT and the ranks on a stream), its second run; every window gpuwm closed "
              "equals it (checked). Floors: the files' four columns read by Spark into Arrow (a Python worker) and "
              "counted; the same read by pyarrow in one process, file after file (what gpuwm's tasks do)."])
        asked = [q for q in asked if q in QUERIES]
        if not asked:
            spark.stop()
            return 0
    for q in asked:
        outs = {}
        for read in ("auto", "spark"):  # the task generates its splits itself / the source's rows through the JVM
            work = tempfile.mkdtemp(prefix="gpuwm-nex-")
            df = read_nexmark(spark, f"{work}/ck", totalEvents=args.events, eventsPerBatch=args.batch, splits=4,
                              eventsPerSecond=50_000)
            p = Pipeline(df, f"{work}/ck", vnodes=args.vnodes, read=read).watermark(
                "date_time", delay="4 seconds", split="split", profile="spark")
            _, by, aggs = QUERIES[q]
            p.window(gpuwm_window(q), by=[by], aggs=aggs)
            sq = p.write_parquet(f"{work}/out").start()
            sq.processAllAvailable()
            sq.stop()
            full = {m["batch_id"]: m["input_rows"] for m in p.history}
            prog = data_progress(sq, p)[1:]
            times = [x["durationMs"]["triggerExecution"] / 1000 for x in prog]
            n = statistics.median([full[x["batchId"]] for x in prog])
            med = statistics.median(times)
            emitted = sum(m["rows_emitted"] for m in p.history)
            assert emitted > 0 and {m["read"] for m in p.history if m["input_rows"]} == \
                {"direct" if read == "auto" else "spark"}
            out = pq.read_table(f"{work}/out").drop(["batch_id"])
            outs[read] = out.sort_by([(c, "ascending") for c in out.column_names])
            eps = args.batch / med  # events (bids + the persons/auctions not generated) per second
            name = f"{q}, {'task generates' if read == 'auto' else 'source through Spark'}"
            rows.append({"query": q, "read": read, "events_per_s": eps, "events_per_s_per_core": eps / args.cores,
                         "bids_per_batch": n, "median_batch_s": med, "min_s": min(times), "max_s": max(times),
                         "rows_emitted": emitted, "published_per_core": PUBLISHED[q]})
            pub = ", ".join(f"{k} {v / 1e3:.1f} k" for k, v in PUBLISHED[q].items()) or "none quoted"
            print(f"{name:30s}: {eps / 1e3:8.1f} k events/s on {args.cores} cores = {eps / args.cores / 1e3:.1f} "
                  f"k/s/core (median batch {med:.2f} s)   published, other setups: {pub} /s/core", flush=True)
            shutil.rmtree(work, ignore_errors=True)
        assert outs["auto"].equals(outs["spark"]), f"{q}: generated in the task and read from the source differ"
        rows.extend(native_and_floor(spark, q, args, outs["auto"]))
    spark.stop()
    md = [f"# Nexmark-like queries, embedded source, Spark local[{args.cores}] ({time.strftime('%Y-%m-%d')})", "",
          "| query | input | k events/s | k events/s/core | median batch s | "
          "published k/s/core (other hardware and setups) |",
          "|---|---|---|---|---|---|"]
    label = {"auto": "gpuwm, task generates", "spark": "gpuwm, source through Spark"}
    md += [f"| {r['query']} | {label.get(r['read'], r['read'])} | {r['events_per_s'] / 1e3:.1f} | {r['events_per_s_per_core'] / 1e3:.1f} | "
           f"{r['median_batch_s']:.2f} | " + (", ".join(f"{k}: {v / 1e3:.1f}" for k, v in r["published_per_core"].items())
                                               or "—")
           + " |" for r in rows]
    md += ["", "Events count persons and auctions that the source skips (it generates the 46/50 that are bids). "
           "Both gpuwm inputs give the same output, and every window gpuwm emitted is one of Spark native's (checked)."]
    write_results(args.out, {"date": time.strftime("%Y-%m-%d"), "cores": args.cores, "events": args.events,
                             "batch": args.batch, "results": rows}, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
