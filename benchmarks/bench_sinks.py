"""What a ``foreachBatch`` sink costs beside gpuwm's own Parquet sink (#48).

Run:  .venv/bin/python benchmarks/bench_sinks.py [--events 2000000] [--batch 250000]

The embedded Nexmark bid source (4 splits), watermark 4 s (profile
``spark``), one vnode, two queries: a tumbling 10 s count / max price per
auction (a few thousand rows out a batch) and the event-time-ordered
stream (``sort``, every row out). Each runs with three sinks:

* ``parquet``: gpuwm's sink, the tasks write the batch's files (the floor:
  the same query with nothing after it);
* ``foreachBatch(count)``: the function counts its DataFrame — the cost of
  handing a batch over alone (the tasks stage Parquet under the checkpoint,
  the driver reads it back as a DataFrame, one more Spark job);
* ``foreachBatch(write)``: the function writes its DataFrame with Spark's
  Parquet writer (what a user does with it, JDBC or Delta alike);
* with ``--delta``: gpuwm's ``format("delta")`` with each of its writers
  (one Delta commit a batch, marked with the batch id): delta-rs
  (``deltalake`` from PyPI) appending the staged Parquet's Arrow from the
  driver, no Spark job — the default — and Delta's Spark writer, what it
  uses where delta-rs is not installed;
* with ``--kafka``: gpuwm's exactly-once Kafka sink (key: the auction as
  text, value: the row as JSON; a transaction and its marker a batch) on a
  broker started here.

Per run: median Spark ``triggerExecution`` per batch with input (the first
left out), and the median time in the function (``foreach_batch_s``).
Checked: each foreachBatch run handed over as many rows, batch for batch,
as the Parquet sink wrote. Writes ``results/sinks/results.{json,md}``.
"""

from __future__ import annotations

import argparse
import glob
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import data_progress, write_results  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=250_000)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--delta", action="store_true",
                    help="also Delta sinks: Delta's Spark writer (gpuwm's format('delta')) and delta-rs (deltalake)")
    ap.add_argument("--kafka", action="store_true",
                    help="also gpuwm's exactly-once Kafka sink (a broker started here: tests/kafka_broker.py)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "sinks"))
    args = ap.parse_args()
    broker = None
    if args.kafka:
        from tests.kafka_broker import Broker, create_topic

        broker = Broker(tempfile.mkdtemp(prefix="gpuwm-sinks-broker-"), heap="1g").start()
    import gpuwm
    from gpuwm.spark import Pipeline, local_session, read_nexmark

    conf = {}
    sinks = ["parquet", "foreachBatch(count)", "foreachBatch(write)"]
    if args.delta:
        from gpuwm.spark.jvm.jars import DELTA, resolve

        conf = {"spark.jars": ",".join(resolve(DELTA)),
                "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
                "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"}
        sinks += ["delta (delta-rs)", "delta (Delta's Spark writer)"]
    if args.kafka:
        sinks += ["kafka (exactly once)"]
    spark = local_session(app="gpuwm-sinks", cores=args.cores, conf=conf)
    rows = []
    for query in ("tumble", "sort"):
        per_batch: dict[str, dict[int, int]] = {}
        for sink in sinks:
            work = tempfile.mkdtemp(prefix="gpuwm-sinks-")
            df = read_nexmark(spark, f"{work}/ck", totalEvents=args.events, eventsPerBatch=args.batch, splits=4,
                              eventsPerSecond=50_000)
            p = Pipeline(df, f"{work}/ck").watermark("date_time", delay="4 seconds", split="split", profile="spark")
            p = p.window(gpuwm.Tumble("date_time", "10 seconds"), by=["auction"],
                         aggs={"n": ("*", "count"), "hi": ("price", "max")}) if query == "tumble" else \
                p.sort(key=["bidder"])
            seen: dict[int, int] = {}

            def count(batch, batch_id, seen=seen):
                seen[batch_id] = batch.count()

            def write(batch, batch_id, seen=seen, work=work):
                batch.write.mode("overwrite").parquet(f"{work}/spark-out/batch_id={batch_id}")
                seen[batch_id] = pq.ParquetDataset(f"{work}/spark-out/batch_id={batch_id}").read().num_rows

            if sink == "parquet":
                p.write_parquet(f"{work}/out")
            elif sink.startswith("kafka"):  # each row as key (auction) and value (its columns as JSON)
                from gpuwm.spark.io.driver_sinks import KafkaAppend

                topic = f"t{len(rows)}"
                create_topic(broker.bootstrap, topic, 4)
                p.foreach_batch(KafkaAppend({"topic": topic, "kafka.bootstrap.servers": broker.bootstrap,
                                             "kafka.linger.ms": "5"}, f"{work}/ck"))
                cols = [c.name for c in p.output_schema()]
                p.output([[["key", {"cast": [{"col": "auction"}, "string"]}],
                           ["value", {"to_json": [[c, {"col": c}] for c in cols]}]]])
            elif sink.startswith("delta"):  # gpuwm's format("delta"), with each writer
                from gpuwm.spark.io.driver_sinks import DeltaAppend

                DeltaAppend.writer = "spark" if "Spark" in sink else "delta-rs"
                p.foreach_batch(DeltaAppend({"path": f"{work}/delta"}, f"{work}/ck"))
            else:
                p.foreach_batch(count if sink.endswith("(count)") else write)
            sq = p.start()
            sq.processAllAvailable()
            sq.stop()
            if sink.startswith("kafka"):
                p._foreach[0].close()  # (the query's watcher would, within its beat)
            if sink == "parquet":
                seen = {b: sum(pq.read_metadata(f).num_rows for f in glob.glob(f"{work}/out/batch_id={b}/*.parquet"))
                        for b in (m["batch_id"] for m in p.history)}
            elif sink.startswith("kafka"):  # what a read_committed consumer sees, by the marker's batches
                seen = _committed_rows(broker.bootstrap, topic, p.history)
            elif sink.startswith("delta"):  # each batch one Delta commit, marked with its id
                import json

                seen = {}
                for f in sorted(glob.glob(f"{work}/delta/_delta_log/*.json")):
                    acts = [json.loads(line) for line in open(f)]
                    txn = next(a["txn"]["version"] for a in acts if "txn" in a)
                    seen[txn] = sum(a["add"]["stats"] and json.loads(a["add"]["stats"])["numRecords"]
                                    for a in acts if "add" in a)
            per_batch[sink] = {b: n for b, n in seen.items() if n}
            assert per_batch[sink] == per_batch["parquet"], f"{query}, {sink}: not the Parquet sink's rows"
            full = {m["batch_id"]: m for m in p.history}
            prog = data_progress(sq, p)[1:]
            times = [x["durationMs"]["triggerExecution"] / 1000 for x in prog]
            fn = [full[x["batchId"]].get("foreach_batch_s", 0.0) for x in prog]
            rows.append({"query": query, "sink": sink, "median_batch_s": statistics.median(times),
                         "min_s": min(times), "max_s": max(times), "median_fn_s": statistics.median(fn),
                         "rows_out_per_batch": statistics.median(per_batch[sink].values())})
            r = rows[-1]
            print(f"{query:6s} {sink:20s}: median batch {r['median_batch_s']:.3f} s ({r['min_s']:.3f}.."
                  f"{r['max_s']:.3f}), in the function {r['median_fn_s']:.3f} s, "
                  f"{r['rows_out_per_batch']:,.0f} rows out a batch", flush=True)
            shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    if broker is not None:
        broker.stop()
    base = {r["query"]: r["median_batch_s"] for r in rows if r["sink"] == "parquet"}
    md = [f"# foreachBatch vs gpuwm's Parquet sink, Spark local[{args.cores}] ({time.strftime('%Y-%m-%d')})", "",
          f"{args.events:,} Nexmark events, {args.batch:,} a batch, one vnode.", "",
          "| query | sink | median batch s (min..max) | in the function, s | rows out a batch | batch / Parquet sink's |",
          "|---|---|---|---|---|---|"]
    md += [f"| {r['query']} | {r['sink']} | {r['median_batch_s']:.3f} ({r['min_s']:.3f}..{r['max_s']:.3f}) | "
           f"{r['median_fn_s']:.3f} | {r['rows_out_per_batch']:,.0f} | "
           f"{r['median_batch_s'] / base[r['query']]:.2f} |" for r in rows]
    write_results(args.out, {"date": time.strftime("%Y-%m-%d"), "cores": args.cores, "events": args.events,
                             "batch": args.batch, "results": rows}, md)
    return 0


def _committed_rows(bootstrap: str, topic: str, history: list[dict]) -> dict[int, int]:
    """Rows per batch on ``topic`` as a read_committed consumer sees them:
    the total must be the batches' rows; they are attributed to the batches
    that emitted rows, in order (a transaction a batch)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, i, 0) for i in range(4)])
    n, ended = 0, set()
    while len(ended) < 4:
        msgs = c.consume(100_000, 10)
        assert msgs, f"no end of {topic} within 10 s"
        for m in msgs:
            if m.error():
                ended.add(m.partition())
            else:
                n += 1
    c.close()
    emitted = {m["batch_id"]: m["rows_emitted"] for m in history if m["rows_emitted"]}
    assert n == sum(emitted.values()), f"{n} rows on {topic}, {sum(emitted.values())} emitted"
    return emitted


if __name__ == "__main__":
    sys.exit(main())
