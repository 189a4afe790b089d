"""Operator graphs on the embedded Nexmark source, Spark local mode: chained
windows, dedup and an over-window, beside Spark's own query where Spark has one.

Run:  .venv/bin/python benchmarks/bench_stages.py [--events 3000000] [--batch 500000] [--queries q5_hot,dedup,over]

- ``q5_hot`` (Nexmark Q5, hot items, as a chain): bids per auction per
  hopping 10 s / 2 s window, then the largest count per window (a tumbling
  2 s window over the first one's ``window_time``). Spark native: the same
  two chained ``groupBy(window)`` in append mode.
- ``dedup``: the first bid of each (auction, bidder) while the pair is held
  (Spark native: ``dropDuplicatesWithinWatermark``).
- ``over``: the sorted bid stream (by event_id), then per auction the
  previous bid's price, the bid's number and the highest price so far
  (Spark has no streaming over-window: its analyzer rejects it, checked).

For ``q5_hot`` and ``dedup``, Spark's own query (the native one) also runs
through ``gpuwm.spark.front.accelerate`` (engine ``gpuwm, accelerate(df)``): the
plan translated once at start, then the same pipeline as the hand-built one.

Watermark 4 s on ``date_time``, profile ``spark``, 4 splits. Events/s =
events per batch / median Spark ``triggerExecution`` of the batches with
input, first left out. Checked: gpuwm's Q5 emitted the same windows as
Spark's (both end with a no-data batch); dedup emits the same number of rows as
Spark's (which row of a key comes first in a batch is Spark's shuffle
order, so rows may differ). Writes ``results/stages/results.{json,md}``.
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

QUERIES = ("q5_hot", "dedup", "over")


def gpuwm_query(q: str, p):
    import gpuwm

    if q == "q5_hot":
        return (p.window(gpuwm.Hop("date_time", size="10 seconds", slide="2 seconds"), by=["auction"],
                         aggs={"bids": ("*", "count")})
                .window(gpuwm.Tumble("window_time", "2 seconds"), aggs={"top_bids": ("bids", "max"),
                                                                        "auctions": ("*", "count")}))
    if q == "dedup":
        return p.dedup(["auction", "bidder"])
    return p.sort(key=["event_id"]).over(by=["auction"], funcs={
        "prev_price": ["lag", "price", 1], "bid_no": ["row_number"], "top_price": ["max", "price"]})


def native_query(q: str, df):
    from pyspark.sql import functions as F

    df = df.withWatermark("date_time", "4 seconds")
    if q == "q5_hot":
        first = df.groupBy(F.window("date_time", "10 seconds", "2 seconds").alias("w"), "auction").agg(
            F.count("*").alias("bids"))
        return first.groupBy(F.window(F.window_time("w"), "2 seconds").alias("w2")).agg(
            F.max("bids").alias("top_bids"), F.count("*").alias("auctions")).selectExpr(
            "w2.start as window_start", "w2.end as window_end", "top_bids", "auctions")
    if q == "dedup":
        return df.dropDuplicatesWithinWatermark(["auction", "bidder"])
    from pyspark.sql import Window

    return df.withColumn("prev_price", F.lag("price", 1).over(Window.partitionBy("auction").orderBy("date_time")))


def timed(rows_per_batch: int, progress) -> dict:
    times = [x["durationMs"]["triggerExecution"] / 1000 for x in progress[1:]]
    med = statistics.median(times)
    return {"events_per_s": rows_per_batch / med, "median_batch_s": med, "min_s": min(times), "max_s": max(times)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=3_000_000)
    ap.add_argument("--batch", type=int, default=500_000)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "stages"))
    args = ap.parse_args()
    import pyarrow.parquet as pq

    from gpuwm.spark import Pipeline, local_session, read_nexmark

    spark = local_session(app="gpuwm-stages", cores=args.cores)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    opts = dict(totalEvents=args.events, eventsPerBatch=args.batch, splits=4, eventsPerSecond=50_000)
    rows = []
    for q in args.queries.split(","):
        first = len(rows)
        work = tempfile.mkdtemp(prefix="gpuwm-stages-")
        p = Pipeline(read_nexmark(spark, f"{work}/ck", **opts), f"{work}/ck").watermark(
            "date_time", delay="4 seconds", split="split", profile="spark")
        p = gpuwm_query(q, p).write_parquet(f"{work}/out")
        sq = p.start()
        sq.processAllAvailable()
        sq.stop()
        r = {"query": q, "engine": "gpuwm", **timed(args.batch, data_progress(sq, p)),
             "rows_emitted": sum(m["rows_emitted"] for m in p.history),
             "state_rows": p.history[-1]["state_rows"]}
        rows.append(r)
        ours = pq.read_table(f"{work}/out").drop(["batch_id"])
        accel = None
        if q != "over":  # Spark's own query through accelerate(): translated from its plan, the same pipeline
            from types import SimpleNamespace

            from gpuwm.spark import accelerate

            hist: list[dict] = []
            acc = accelerate(native_query(q, read_nexmark(spark, f"{work}/ack", **opts)), on_batch=hist.append)
            assert acc.translation is not None, acc.refused
            aq = (acc.writeStream.format("parquet").option("path", f"{work}/accel")
                  .option("checkpointLocation", f"{work}/ack").start())
            aq.processAllAvailable()
            aq.stop()
            rows.append({"query": q, "engine": "gpuwm, accelerate(df)",
                         **timed(args.batch, data_progress(aq, SimpleNamespace(history=hist))),
                         "rows_emitted": sum(m["rows_emitted"] for m in hist), "state_rows": hist[-1]["state_rows"]})
            accel = pq.read_table(f"{work}/accel").drop(["batch_id"])
        df = read_nexmark(spark, f"{work}/nck", **opts)
        try:
            nq = (native_query(q, df).writeStream.format("parquet").option("path", f"{work}/native")
                  .option("checkpointLocation", f"{work}/nck").outputMode("append").start())
        except Exception as e:  # noqa: BLE001  Spark refuses the query: reported, not timed
            assert q == "over", f"{q}: Spark native failed: {e}"
            rows.append({"query": q, "engine": "spark native", "refused": type(e).__name__ + ": " +
                         str(e).splitlines()[0][:160]})
        else:
            nq.processAllAvailable()
            nq.stop()
            prog = [x for x in nq.recentProgress if x["numInputRows"] > 0]
            nat = spark.read.parquet(f"{work}/native").toArrow()
            rows.append({"query": q, "engine": "spark native", **timed(args.batch, prog),
                         "rows_emitted": nat.num_rows,
                         "state_rows": prog[-1]["stateOperators"][-1]["numRowsTotal"]})
            if q == "q5_hot":
                key = lambda t: set(zip(*(t.column(c).cast("int64").to_pylist() if c.startswith("window") else  # noqa: E731
                                          t.column(c).to_pylist() for c in ("window_end", "top_bids", "auctions"))))
                for got in (ours, accel):  # both ran their last, no-data batch: the same windows
                    assert key(got) == key(nat), f"q5_hot: gpuwm and Spark disagree: {sorted(key(got) ^ key(nat))[:5]}"
            if q == "dedup":
                for got in (ours, accel):
                    assert abs(got.num_rows - nat.num_rows) <= 0.001 * nat.num_rows, \
                        f"dedup: gpuwm emitted {got.num_rows}, Spark {nat.num_rows}"
        for x in rows[first:]:
            speed = f"{x['events_per_s'] / 1e3:8.1f} k events/s (median batch {x['median_batch_s']:.2f} s)" \
                if "events_per_s" in x else x["refused"]
            print(f"{q:7s} {x['engine']:21s}: {speed}", flush=True)
        shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    md = [f"# Operator graphs on Nexmark, Spark local[{args.cores}] ({time.strftime('%Y-%m-%d')}; "
          f"{args.events:,} events, {args.batch:,} per batch)", "",
          "| query | engine | k events/s | median batch s | rows emitted | state rows at the end |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        if "refused" in r:
            md.append(f"| {r['query']} | {r['engine']} | refused: {r['refused']} | | | |")
        else:
            md.append(f"| {r['query']} | {r['engine']} | {r['events_per_s'] / 1e3:.1f} | {r['median_batch_s']:.2f} | "
                      f"{r['rows_emitted']:,} | {r['state_rows']:,} |")
    out = write_results(args.out, {"date": time.strftime("%Y-%m-%d"), "cores": args.cores, "events": args.events,
                                   "batch": args.batch, "results": rows}, md)
    plot(rows, out / "stages.png")
    return 0


def plot(rows: list[dict], path: Path) -> None:
    """Events/s per query, gpuwm beside Spark native (or the reason Spark has none)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    queries = list(dict.fromkeys(r["query"] for r in rows))
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for j, eng in enumerate(("gpuwm", "spark native")):
        xs = [i + (j - 0.5) * 0.38 for i in range(len(queries))]
        vals = [next((r.get("events_per_s", 0) / 1e3 for r in rows if r["query"] == q and r["engine"] == eng), 0)
                for q in queries]
        bars = ax.bar(xs, vals, width=0.38, label=eng)
        for b, v, q in zip(bars, vals, queries):
            ax.annotate(f"{v:.0f}" if v else "Spark refuses", (b.get_x() + b.get_width() / 2, v),
                        ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(queries)), queries)
    ax.set(ylabel="k events/s (Spark local[2])", title="Operator graphs on Nexmark: gpuwm vs Spark native")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
