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
  uses where delta-rs is not installed.

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
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "sinks"))
    args = ap.parse_args()
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
            elif sink.startswith("delta"):  # gpuwm's format("delta"), with each writer
                from gpuwm.spark.front.translate import DeltaAppend

                DeltaAppend.writer = "spark" if "Spark" in sink else "delta-rs"
                p.foreach_batch(DeltaAppend({"path": f"{work}/delta"}, f"{work}/ck"))
            else:
                p.foreach_batch(count if sink.endswith("(count)") else write)
            sq = p.start()
            sq.processAllAvailable()
            sq.stop()
            if sink == "parquet":
                seen = {b: sum(pq.read_metadata(f).num_rows for f in glob.glob(f"{work}/out/batch_id={b}/*.parquet"))
                        for b in (m["batch_id"] for m in p.history)}
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


if __name__ == "__main__":
    sys.exit(main())
