"""End to end on Spark (local mode): gpuwm vs Spark's native streaming
window aggregation vs the floor, on the same out-of-order Parquet input.

Run:  .venv/bin/python benchmarks/bench_spark.py [--batches 6] [--rows 1000000] [--keys 20000]

Input: ``--batches`` Parquet files of ``--rows`` events each (one file per
micro-batch, ``maxFilesPerTrigger=1``), event time advancing one minute per
file with up to 30 s of disorder, ``--keys`` random keys, a price. Three
queries read the same files, each with ``trigger(availableNow=True)``:

* native — ``withWatermark("ts", "1 minute")`` + ``groupBy(window(ts, 1 minute), k)``
  + count/max, append mode, Parquet sink;
* gpuwm  — ``Pipeline(...).watermark(profile="spark").window(Tumble 1 minute)``, Parquet sink;
* floor  — ``foreachBatch`` running a ``mapInArrow`` that only counts rows.

Time per micro-batch is Spark's own ``triggerExecution`` from the query
progress (the same measure for all three); the first batch (JVM/Python
warm-up) and no-data batches are left out; events/s = rows / median batch
time. gpuwm's output is checked against native's once per run. Writes
``results/spark-e2e/results.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BASE_US = 1_767_225_600_000_000


def make_input(d: str, batches: int, rows: int, keys: int, seed: int) -> None:
    os.makedirs(d)
    rng = np.random.default_rng(seed)
    t0 = time.time() - 10_000
    for i in range(batches):
        ts = BASE_US + i * 60_000_000 + rng.integers(0, 60_000_000, rows) - rng.integers(0, 30_000_000, rows)
        t = pa.table({"ts": pa.array(ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                      "k": rng.integers(0, keys, rows), "price": rng.integers(1, 100_000, rows)})
        p = os.path.join(d, f"part-{i:04d}.parquet")
        pq.write_table(t, p)
        os.utime(p, (t0 + i, t0 + i))
    empty = os.path.join(d, f"part-{batches:04d}.parquet")  # gpuwm's final no-data batch
    pq.write_table(t.slice(0, 0), empty)
    os.utime(empty, (t0 + batches, t0 + batches))


def batch_times(q, rows_per_batch: int) -> list[float]:
    out = []
    for p in q.recentProgress:
        if p["numInputRows"] >= rows_per_batch * 0.99:
            out.append(p["durationMs"]["triggerExecution"] / 1000)
    return out[1:]  # the first batch warms the JVM and the Python workers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "spark-e2e"))
    args = ap.parse_args()
    import gpuwm
    from gpuwm.spark import Pipeline, local_session
    from pyspark.sql import functions as F

    work = tempfile.mkdtemp(prefix="gpuwm-bench-")
    src = os.path.join(work, "in")
    make_input(src, args.batches, args.rows, args.keys, seed=int(time.time()) % 2**31)
    spark = local_session(app="gpuwm-bench", cores=2)
    schema = "ts timestamp, k bigint, price bigint"

    def stream():
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(src)

    results = {}
    # native
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    native = (stream().withWatermark("ts", "1 minute").groupBy(F.window("ts", "1 minute"), "k")
              .agg(F.count("*").alias("n"), F.max("price").alias("mx"))
              .selectExpr("window.start as ws", "k", "n", "mx"))
    q = (native.writeStream.format("parquet").option("path", f"{work}/native")
         .option("checkpointLocation", f"{work}/native-ck").outputMode("append")
         .trigger(availableNow=True).start())
    q.awaitTermination()
    results["spark native"] = batch_times(q, args.rows)
    # gpuwm
    p = (Pipeline(stream(), f"{work}/gpuwm-ck").watermark("ts", delay="1 minute", profile="spark")
         .window(gpuwm.Tumble("ts", "1 minute"), by=["k"], aggs={"n": ("*", "count"), "mx": ("price", "max")})
         .write_parquet(f"{work}/gpuwm"))
    q = p.start(trigger={"availableNow": True})
    q.awaitTermination()
    results["gpuwm"] = batch_times(q, args.rows)
    backend = p.history[-1]["backend"]
    # floor
    def count_rows(batches):
        n = 0
        for b in batches:
            n += b.num_rows
        yield pa.RecordBatch.from_pydict({"n": [n]})

    def floor_batch(df, batch_id):
        df.mapInArrow(count_rows, "n long").collect()

    q = (stream().writeStream.foreachBatch(floor_batch).option("checkpointLocation", f"{work}/floor-ck")
         .trigger(availableNow=True).start())
    q.awaitTermination()
    results["floor (mapInArrow count)"] = batch_times(q, args.rows)

    # check: the same windows, counts and maxima
    nat = spark.read.parquet(f"{work}/native").toPandas()
    ours = pa.concat_tables([pq.read_table(os.path.join(dp, f)) for dp, _, fs in os.walk(f"{work}/gpuwm")
                             for f in fs if f.endswith(".parquet")]).to_pandas()
    import pandas as pd

    def seconds(s):  # naive (UTC session) or aware, any unit -> epoch seconds
        return ((pd.to_datetime(s, utc=True) - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(seconds=1)).tolist()

    a = sorted(zip(seconds(nat.ws), nat.k.tolist(), nat.n.tolist(), nat.mx.tolist()))
    b = sorted(zip(seconds(ours.window_start), ours.k.tolist(), ours.n.tolist(), ours.mx.tolist()))
    assert len(a) > 0 and a == b, f"gpuwm and Spark native disagree ({len(a)} vs {len(b)} rows)"

    rows = []
    for name, times in results.items():
        med = statistics.median(times)
        rows.append({"query": name, "batches_timed": len(times), "median_batch_s": med,
                     "min_s": min(times), "max_s": max(times), "events_per_s": args.rows / med})
    nat_rate = rows[0]["events_per_s"]
    floor_rate = rows[2]["events_per_s"]
    for r in rows:
        r["vs_native"] = r["events_per_s"] / nat_rate
        r["floor_over_this"] = floor_rate / r["events_per_s"]
        print(f"{r['query']:26s} {r['events_per_s'] / 1e6:6.3f} M events/s  (median batch {r['median_batch_s']:.2f} s, "
              f"{r['min_s']:.2f}..{r['max_s']:.2f})  x{r['vs_native']:.2f} of native, floor/this {r['floor_over_this']:.2f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"batches": args.batches, "rows_per_batch": args.rows, "keys": args.keys, "cores": 2,
            "backend": backend, "date": time.strftime("%Y-%m-%d"), "output_rows_checked": len(a)}
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
    md = [f"# Spark end to end ({meta['date']}, local[2], {args.batches} x {args.rows:,} rows, {args.keys:,} keys, "
          f"gpuwm backend {backend})", "",
          "| query | M events/s | median batch s | spread s | vs native | floor / this |", "|---|---|---|---|---|---|"]
    md += [f"| {r['query']} | {r['events_per_s'] / 1e6:.3f} | {r['median_batch_s']:.2f} | {r['min_s']:.2f}..{r['max_s']:.2f} "
           f"| {r['vs_native']:.2f} | {r['floor_over_this']:.2f} |" for r in rows]
    md += ["", f"gpuwm's output equals Spark native's ({len(a):,} window rows)."]
    (out / "results.md").write_text("\n".join(md) + "\n")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out}/results.json, results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
