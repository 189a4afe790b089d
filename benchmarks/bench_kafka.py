"""Reading from Kafka: gpuwm and Spark's own query on the same topic, events/s.

Run:  .venv/bin/python benchmarks/bench_kafka.py [--events 2000000] [--partitions 4] [--batches 8]
      [--compression none,gzip,snappy,lz4,zstd]

A real broker (KRaft, one node on loopback: ``tests/kafka_broker.py``)
holds Nexmark bids (``gpuwm.nexmark``: auction, bidder, price, date_time as
epoch ms), one JSON message each, the generator's split as the Kafka
partition. Three queries read the whole topic in ``--batches`` micro-batches
(``maxOffsetsPerTrigger``), Spark local mode, each from the start of the
topic with a fresh checkpoint, and parse the value with the same
``from_json``:

- **floor, Spark's reader** (Spark's cost of fetching and parsing the rows
  and handing them to Python): ``foreachBatch`` running a ``mapInArrow``
  that only counts them;
- **floor, direct** (gpuwm's own read: each task fetches its partitions'
  planned offset ranges and parses the values,
  :func:`gpuwm.spark.io.sources.read_kafka`): ``foreachBatch`` taking the
  batch's ranges from its scan and counting the rows in one task, as gpuwm
  with one vnode reads them (a thread per range); fetched by gpuwm's own Fetch requests
  (:mod:`gpuwm.spark.io.kafkawire`), and again by confluent-kafka
  (``GPUWM_KAFKA_FETCH=client``);
- **gpuwm**: a Q7-like tumbling 10 s count and max price per auction,
  watermark 4 s per partition (profile ``spark``), Parquet out, through
  Spark's reader (``read: spark``) and direct (``read: direct``), with one
  vnode (one task reads every partition: both fetches) and with one per core;
- **Spark native**: the same query written with ``withWatermark`` and
  ``groupBy(window, auction)``, append mode, Parquet out.

``--compression`` with more than one codec: the same events in one topic
per codec (librdkafka's producer, ``compression.type``), and per topic the
direct floor, gpuwm direct (one vnode) and Spark native, and the last
codec's topic once more over TLS with a SCRAM-SHA-512 login; the codec's
cost (``kafka_codec_s``: inflating the batches in the tasks) per batch.

events/s = rows / the query's wall time from start to the end of its last
batch (start-up included; ``processingTime`` 0 until ``processAllAvailable``
returns; gpuwm with ``availableNow``), in the last of ``--rounds`` rounds
(the first warms the JVM up). Writes ``results/kafka/results.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import write_results  # noqa: E402

SCHEMA = "auction BIGINT, bidder BIGINT, price BIGINT, date_time BIGINT"
SELECT = [[f"from_json(CAST(value AS STRING), '{SCHEMA}') AS e", "partition"],
          ["e.auction AS auction", "e.bidder AS bidder", "e.price AS price",
           "timestamp_millis(e.date_time) AS date_time", "partition"]]


def fill(bootstrap: str, topic: str, events: int, partitions: int, compression: str = "none") -> float:
    """Produce ``events`` Nexmark bids, split = partition, batches
    compressed with ``compression``; seconds taken."""
    import pyarrow as pa

    from gpuwm.nexmark import NexmarkConfig, bids
    from tests.kafka_broker import create_topic, produce

    create_topic(bootstrap, topic, partitions)
    cfg = NexmarkConfig(events_per_second=20_000, splits=partitions, out_of_order_fraction=0.1, max_delay_ms=3_000)
    t0 = time.perf_counter()
    step = 500_000
    for a in range(0, events, step):
        t = pa.concat_tables([bids(cfg, a, min(a + step, events), s) for s in range(partitions)])
        t = t.select(["auction", "bidder", "price", "date_time", "split"]).rename_columns(
            ["auction", "bidder", "price", "date_time", "partition"])
        produce(bootstrap, topic, t, **{"compression.type": compression})
    return time.perf_counter() - t0


def _servers(bootstrap: str | dict) -> dict:
    """The source's ``kafka.*`` options: the bootstrap servers, or (a dict) a secure listener's whole options."""
    return dict(bootstrap) if isinstance(bootstrap, dict) else {"kafka.bootstrap.servers": bootstrap}


def _kafka(spark, bootstrap: str | dict, topic: str, per_trigger: int):
    df = (spark.readStream.format("kafka").options(**_servers(bootstrap)).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", per_trigger).load())
    for step in SELECT:
        df = df.selectExpr(*step)
    return df


def _timed(q) -> tuple[float, list[dict]]:
    t = time.perf_counter()
    q.processAllAvailable()
    wall = time.perf_counter() - t
    q.stop()
    return wall, sorted({p["batchId"]: p for p in q.recentProgress}.values(), key=lambda p: p["batchId"])


def run_floor(spark, bootstrap, topic, per_trigger, work) -> dict:
    import pyarrow as pa

    def count_rows(batches):
        n = 0
        for b in batches:
            n += b.num_rows
        yield pa.RecordBatch.from_pydict({"n": [n]})

    counted = []
    t = time.perf_counter()
    q = (_kafka(spark, bootstrap, topic, per_trigger).writeStream
         .foreachBatch(lambda df, i: counted.append(sum(r["n"] for r in df.mapInArrow(count_rows, "n long").collect())))
         .option("checkpointLocation", f"{work}/floor-ck").trigger(processingTime="0 seconds").start())
    _timed(q)
    return {"wall_s": time.perf_counter() - t, "rows": sum(counted), "batches": len([c for c in counted if c])}


def run_direct_floor(spark, bootstrap, topic, per_trigger, work) -> dict:
    import pyarrow as pa

    from gpuwm.spark.driver.kafka import batch_source, kafka_source
    from gpuwm.spark.io.sources import read_kafka

    df = _kafka(spark, bootstrap, topic, per_trigger)
    src, why = kafka_source(df)
    assert why is None, why

    def count_rows(source, ids):
        yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in read_kafka(source, ids))]})

    counted = []

    def each(bdf, i):
        source, why = batch_source(src, bdf)
        assert why is None, why
        if not source["parts"]:
            return
        n = len(source["parts"])
        counted.append(sum(r["n"] for r in spark.range(0, n, 1, 1).mapInArrow(
            partial(count_rows, source), "n long").collect()))

    t = time.perf_counter()
    q = (df.writeStream.foreachBatch(each).option("checkpointLocation", f"{work}/dfloor-ck")
         .trigger(processingTime="0 seconds").start())
    _timed(q)
    return {"wall_s": time.perf_counter() - t, "rows": sum(counted), "batches": len(counted)}


def run_gpuwm(spark, bootstrap, topic, per_trigger, work, vnodes: int = 1, read: str = "direct") -> dict:
    from gpuwm.spark.front.spec import build

    spec = {"source": {"format": "kafka", "select": SELECT,
                       "options": {**_servers(bootstrap), "subscribe": topic,
                                   "startingOffsets": "earliest", "maxOffsetsPerTrigger": per_trigger}},
            "checkpoint": f"{work}/gpuwm-ck",
            "watermark": {"column": "date_time", "delay": "4 seconds", "split": "partition", "profile": "spark"},
            "stages": [{"window": {"tumble": "10 seconds", "by": ["auction"],
                                   "aggs": {"bids": ["*", "count"], "max_price": ["price", "max"]}}}],
            "sink": {"parquet": f"{work}/gpuwm-out"}, "vnodes": vnodes, "read": read}
    p = build(spark, spec, verbose=False)
    t = time.perf_counter()
    p.start(trigger={"availableNow": True}).awaitTermination()
    wall = time.perf_counter() - t
    h = [m for m in p.history if m["input_rows"]]
    return {"wall_s": wall, "rows": sum(m["input_rows"] for m in h), "batches": len(h),
            "emitted": sum(m["rows_emitted"] for m in p.history),
            "batch_s": [m["wall_s"] for m in h], "job_s": [m["job_s"] for m in h],
            "kernel_s": [m["kernel_s"] for m in h], "codec_s": [m.get("kafka_codec_s", 0) for m in h],
            "codec_bytes": sum(m.get("kafka_codec_bytes", 0) for m in h),
            "codec_out_bytes": sum(m.get("kafka_codec_out_bytes", 0) for m in h),
            "client_ranges": sum(m.get("kafka_client_ranges", 0) for m in h)}


def run_native(spark, bootstrap, topic, per_trigger, work) -> dict:
    from pyspark.sql import functions as F

    df = (_kafka(spark, bootstrap, topic, per_trigger).withWatermark("date_time", "4 seconds")
          .groupBy(F.window("date_time", "10 seconds"), "auction")
          .agg(F.count("*").alias("bids"), F.max("price").alias("max_price")))
    t = time.perf_counter()
    q = (df.writeStream.format("parquet").option("path", f"{work}/native-out")
         .option("checkpointLocation", f"{work}/native-ck").outputMode("append")
         .trigger(processingTime="0 seconds").start())
    _, prog = _timed(q)
    data = [p for p in prog if p["numInputRows"]]
    return {"wall_s": time.perf_counter() - t, "rows": sum(p["numInputRows"] for p in data), "batches": len(data),
            "batch_s": [p["durationMs"].get("triggerExecution", 0) / 1000 for p in data]}


def _client(fn, *args) -> dict:
    """``fn`` with every range fetched by confluent-kafka (``GPUWM_KAFKA_FETCH=client``), not gpuwm's own fetch."""
    from gpuwm.spark.driver.kafka import FETCH_ENV

    os.environ[FETCH_ENV] = "client"
    try:
        return fn(*args)
    finally:
        del os.environ[FETCH_ENV]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="run every query this many times; report the last")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "kafka"))
    ap.add_argument("--only", default="", help="run only the queries whose names hold one of these (separated by |)"
                    "; results are then not written")
    ap.add_argument("--compression", default="none",
                    help="the topics' codecs, comma-separated (none, gzip, snappy, lz4, zstd): the same events each")
    args = ap.parse_args()
    codecs = args.compression.split(",")
    if len(codecs) > 1:
        return by_codec(args, codecs)

    from gpuwm.spark import local_session
    from gpuwm.spark.jvm.jars import KAFKA
    from tests.kafka_broker import Broker

    root = tempfile.mkdtemp(prefix="gpuwm-kafka-")
    runs = []
    with Broker(f"{root}/broker", heap="1g") as broker:
        produce_s = fill(broker.bootstrap, "bids", args.events, args.partitions)
        print(f"produced {args.events:,} events in {produce_s:.1f} s", flush=True)
        spark = local_session(app="gpuwm-kafka", cores=args.cores, conf={"spark.jars.packages": KAFKA})
        per = -(-args.events // args.batches)
        queries = [("floor, Spark's reader: read + parse, mapInArrow count", run_floor),
                   ("floor, direct: fetch + parse in the task, count", run_direct_floor),
                   ("floor, direct, confluent-kafka's fetch", partial(_client, run_direct_floor)),
                   ("gpuwm through Spark's reader, vnodes 1", partial(run_gpuwm, read="spark")),
                   ("gpuwm direct, vnodes 1", run_gpuwm),
                   ("gpuwm direct, confluent-kafka's fetch, vnodes 1", partial(_client, run_gpuwm)),
                   (f"gpuwm direct, vnodes {args.cores}", partial(run_gpuwm, vnodes=args.cores)),
                   ("Spark native", run_native)]
        if args.only:
            queries = [q for q in queries if any(w and w in q[0] for w in args.only.split("|"))]
        for rnd in range(args.rounds):  # the first round warms the JVM up; the last one is reported
            runs = []
            for name, fn in queries:
                work = tempfile.mkdtemp(prefix="q-", dir=root)
                r = fn(spark, broker.bootstrap, "bids", per, work)
                r.update(query=name, events_per_s=r["rows"] / r["wall_s"], round=rnd)
                print({k: v for k, v in r.items() if not isinstance(v, list)}, flush=True)
                runs.append(r)
        spark.stop()
    shutil.rmtree(root, ignore_errors=True)

    if args.only:
        return 0
    floor, dfloor = runs[0], runs[1]
    native = runs[-1]
    md = [f"# Kafka source, Spark local[{args.cores}] ({time.strftime('%Y-%m-%d')}; {args.events:,} Nexmark events, "
          f"{floor['rows']:,} bids, in {args.partitions} partitions, {args.batches} batches; produced in {produce_s:.1f} s; "
          f"round {args.rounds} of {args.rounds})", "",
          "| query | input rows | batches | wall s | events/s | × Spark native | of Spark reader's floor | "
          "of the direct floor |", "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        md.append(f"| {r['query']} | {r['rows']:,} | {r['batches']} | {r['wall_s']:.1f} | {r['events_per_s']:,.0f} | "
                  f"{r['events_per_s'] / native['events_per_s']:.2f} | {r['events_per_s'] / floor['events_per_s']:.2f} | "
                  f"{r['events_per_s'] / dfloor['events_per_s']:.2f} |")
    write_results(args.out, {"date": time.strftime("%Y-%m-%d"), "cores": args.cores, "events": args.events,
                             "partitions": args.partitions, "batches": args.batches, "produce_s": produce_s,
                             "runs": runs}, md)
    print("\n".join(md))
    return 0


def by_codec(args, codecs: list[str]) -> int:
    """``--compression a,b,...``: per codec the direct floor, gpuwm direct and Spark native on its own topic."""
    from gpuwm.spark import local_session
    from gpuwm.spark.jvm.jars import KAFKA
    from tests.kafka_broker import Broker

    root = tempfile.mkdtemp(prefix="gpuwm-kafka-")
    # (gpuwm with one vnode: one task reads every range, as the floor does; the fastest on local[2] above)
    queries = [("floor, direct", run_direct_floor), ("gpuwm direct, vnodes 1", run_gpuwm), ("Spark native", run_native)]
    with Broker(f"{root}/broker", heap="1g") as broker:
        produced = {}
        for c in codecs:
            produced[c] = fill(broker.bootstrap, f"bids-{c}", args.events, args.partitions, c)
            print(f"produced {args.events:,} events ({c}) in {produced[c]:.1f} s", flush=True)
        # the last codec's topic again, over TLS with a SCRAM-SHA-512 login (the broker's SASL_SSL listener)
        secure = f"{codecs[-1]}, TLS + SCRAM-SHA-512"
        servers = {**{c: broker.bootstrap for c in codecs}, secure: broker.options("SASL_SSL", "SCRAM-SHA-512")}
        topics = {**{c: f"bids-{c}" for c in codecs}, secure: f"bids-{codecs[-1]}"}
        spark = local_session(app="gpuwm-kafka", cores=args.cores, conf={"spark.jars.packages": KAFKA})
        per = -(-args.events // args.batches)
        for rnd in range(args.rounds):  # the first round warms the JVM up; the last one is reported
            runs = []
            for c in topics:
                for name, fn in queries:
                    work = tempfile.mkdtemp(prefix="q-", dir=root)
                    r = fn(spark, servers[c], topics[c], per, work)
                    r.update(query=name, codec=c, events_per_s=r["rows"] / r["wall_s"], round=rnd)
                    print({k: v for k, v in r.items() if not isinstance(v, list)}, flush=True)
                    runs.append(r)
        spark.stop()
    shutil.rmtree(root, ignore_errors=True)
    md = [f"# Kafka source by codec, Spark local[{args.cores}] ({time.strftime('%Y-%m-%d')}; {args.events:,} Nexmark "
          f"events in {args.partitions} partitions, {args.batches} batches; round {args.rounds} of {args.rounds})", "",
          "| codec | query | input rows | wall s | events/s | × Spark native | of the direct floor | "
          "codec s a batch | bytes in → out | client ranges |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in topics:
        mine = {r["query"]: r for r in runs if r["codec"] == c}
        native, floor = mine["Spark native"], mine["floor, direct"]
        for r in mine.values():
            codec = (f"{sum(r['codec_s']) / max(len(r['codec_s']), 1):.3f}" if "codec_s" in r else "")
            sizes = (f"{r['codec_bytes'] / 1e6:.1f} → {r['codec_out_bytes'] / 1e6:.1f} MB"
                     if r.get("codec_bytes") else "")
            md.append(f"| {c} | {r['query']} | {r['rows']:,} | {r['wall_s']:.1f} | {r['events_per_s']:,.0f} | "
                      f"{r['events_per_s'] / native['events_per_s']:.2f} | "
                      f"{r['events_per_s'] / floor['events_per_s']:.2f} | {codec} | {sizes} | "
                      f"{r.get('client_ranges', '')} |")
    if not args.only:
        write_results(args.out + "-codecs", {"date": time.strftime("%Y-%m-%d"), "cores": args.cores,
                                             "events": args.events, "partitions": args.partitions,
                                             "batches": args.batches, "produce_s": produced, "runs": runs}, md)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
