"""What a paused or ended stream costs: idle triggers, the micro-batch without
data that drains, and the end-of-input flush — gpuwm beside Spark's own query.

Run:  .venv/bin/python benchmarks/bench_drain.py [--events 2000000] [--batch 500000] [--idle-s 8]

A bounded Nexmark source (4 splits, 50 k events/s of event time, watermark
4 s, 10 s tumbling count / max price per auction — Q7), Spark local mode,
``processingTime`` 0.5 s, then the input stops and the query idles:

- **idle trigger**: a trigger that finds nothing to run. Spark reports each
  one (``noDataProgressEventInterval`` 0) with its ``triggerExecution`` and
  ``latestOffset`` times; gpuwm's query has one source more (the drain
  source, a Python data source asked for its latest offset each trigger).
  Floor: Spark's own idle trigger on the same source.
- **drain**: under profile ``spark`` the batch after the last data batch,
  with no data, emits what the final watermark closes (Spark's last no-data
  batch). Floor: Spark's own no-data batch of the native query (a stateful
  aggregation evicting the same windows).
- **flush**: under profile ``flink`` the end of input is a watermark of
  +infinity: one batch without data emits every open window (Q7) or every
  buffered row (the sorted stream). Reported beside the median data batch,
  with the rows it emitted.

Writes ``results/drain/results.{json,md}``.
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

from _bench import write_results  # noqa: E402


def q7(p):
    import gpuwm

    return p.window(gpuwm.Tumble("date_time", "10 seconds"), by=["auction"],
                    aggs={"bids": ("*", "count"), "max_price": ("price", "max")})


def idle_triggers(query, since: float) -> list[dict]:
    """Progress of the triggers after ``since`` that ran no batch."""
    seen, out = set(), []
    for p in query.recentProgress:
        t = p["timestamp"]
        if p["numInputRows"] == 0 and "addBatch" not in p["durationMs"] and t not in seen:
            seen.add(t)
            out.append(p)
    return [p for p in out if _epoch(p["timestamp"]) >= since]


def _epoch(ts: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def _ms(progress: list[dict], key: str) -> float:
    vals = [p["durationMs"].get(key, 0) for p in progress]
    return statistics.median(vals) if vals else float("nan")


def run_gpuwm(spark, opts, work, profile, what, idle_s):
    from gpuwm.spark import Pipeline, read_nexmark

    p = Pipeline(read_nexmark(spark, f"{work}/ck", **opts), f"{work}/ck").watermark(
        "date_time", delay="4 seconds", split="split", profile=profile)
    p = (q7(p) if what == "q7" else p.sort(key=["event_id"])).write_parquet(f"{work}/out")
    q = p.start(trigger={"processingTime": "0.5 seconds"})
    q.processAllAvailable()
    t_idle = time.time()
    time.sleep(idle_s)
    q.stop()
    data = [m for m in p.history if m["input_rows"]]
    drains = [m for m in p.history if not m["input_rows"]]
    return q, p, data, drains, t_idle


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=500_000)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--idle-s", type=float, default=8.0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "drain"))
    args = ap.parse_args()

    from gpuwm.spark import local_session, read_nexmark

    spark = local_session(app="gpuwm-drain", cores=args.cores)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    opts = dict(totalEvents=args.events, eventsPerBatch=args.batch, splits=4, eventsPerSecond=50_000)
    rows = []

    # 1. idle triggers and the drain: gpuwm (spark profile) vs Spark's own Q7
    work = tempfile.mkdtemp(prefix="gpuwm-drain-")
    q, p, data, drains, t_idle = run_gpuwm(spark, opts, work, "spark", "q7", args.idle_s)
    idle = idle_triggers(q, t_idle)
    rows.append({"engine": "gpuwm", "query": "q7 (spark)", "data_batch_s": statistics.median(m["wall_s"] for m in data),
                 "drain_batch_s": drains[0]["wall_s"], "drain_rows": drains[0]["rows_emitted"],
                 "drain_trigger_s": next(x["durationMs"]["triggerExecution"] / 1000 for x in q.recentProgress
                                         if x["batchId"] == drains[0]["batch_id"]),
                 "drain_durations_ms": next(x["durationMs"] for x in q.recentProgress
                                            if x["batchId"] == drains[0]["batch_id"]),
                 "idle_triggers": len(idle), "idle_trigger_ms": _ms(idle, "triggerExecution"),
                 "idle_latest_offset_ms": _ms(idle, "latestOffset"), "batches_while_idle": len(drains) - 1})
    from pyspark.sql import functions as F

    df = read_nexmark(spark, f"{work}/nck", **opts).withWatermark("date_time", "4 seconds")
    native = (df.groupBy(F.window("date_time", "10 seconds").alias("w"), "auction")
              .agg(F.count("*").alias("bids"), F.max("price").alias("max_price")))
    nq = (native.writeStream.format("parquet").option("path", f"{work}/native").option("checkpointLocation", f"{work}/nck")
          .outputMode("append").trigger(processingTime="0.5 seconds").start())
    nq.processAllAvailable()
    t_idle = time.time()
    time.sleep(args.idle_s)
    nq.stop()
    prog = nq.recentProgress
    ndata = [x for x in prog if x["numInputRows"] > 0]
    ndrain = [x for x in prog if x["numInputRows"] == 0 and "addBatch" in x["durationMs"]
              and x["batchId"] > ndata[-1]["batchId"]]
    nidle = idle_triggers(nq, t_idle)
    rows.append({"engine": "spark native", "query": "q7",
                 "data_batch_s": statistics.median(x["durationMs"]["triggerExecution"] / 1000 for x in ndata[1:]),
                 "drain_trigger_s": ndrain[0]["durationMs"]["triggerExecution"] / 1000 if ndrain else None,
                 "drain_durations_ms": ndrain[0]["durationMs"] if ndrain else None,
                 # the file sink reports no row count: the windows its aggregation evicted (= emitted, append)
                 "drain_rows": ndrain[0]["stateOperators"][0]["numRowsRemoved"] if ndrain else None,
                 "idle_triggers": len(nidle), "idle_trigger_ms": _ms(nidle, "triggerExecution"),
                 "idle_latest_offset_ms": _ms(nidle, "latestOffset"), "batches_while_idle": max(0, len(ndrain) - 1)})
    shutil.rmtree(work, ignore_errors=True)

    # 2. the end-of-input flush (flink: +infinity), Q7 and the sorted stream
    for what in ("q7", "sort"):
        work = tempfile.mkdtemp(prefix="gpuwm-drain-")
        q, p, data, drains, _ = run_gpuwm(spark, opts, work, "flink", what, 1.0)
        end = next(m for m in drains if m["end_of_input"])
        rows.append({"engine": "gpuwm", "query": f"{what} (flink end)",
                     "data_batch_s": statistics.median(m["wall_s"] for m in data), "flush_batch_s": end["wall_s"],
                     "flush_rows": end["rows_emitted"], "state_rows_before": data[-1]["state_rows"],
                     "state_rows_after": end["state_rows"],
                     "flush_trigger_s": next(x["durationMs"]["triggerExecution"] / 1000 for x in q.recentProgress
                                             if x["batchId"] == end["batch_id"])})
        shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    for r in rows:
        print(r, flush=True)

    md = [f"# Paused and ended streams, Spark local[{args.cores}] ({time.strftime('%Y-%m-%d')}; Nexmark "
          f"{args.events:,} events, {args.batch:,} per batch, processingTime 0.5 s, {args.idle_s:.0f} s idle)", "",
          "| engine | query | median data batch s | drain batch: trigger s (gpuwm wall s) | of which addBatch s | "
          "rows it emitted | idle triggers | idle trigger ms (median) | latestOffset ms | batches while idle |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows[:2]:
        wall = f" ({r['drain_batch_s']:.3f})" if "drain_batch_s" in r else ""
        trig = "-" if r.get("drain_trigger_s") is None else f"{r['drain_trigger_s']:.3f}{wall}"
        d = r.get("drain_durations_ms") or {}  # (Spark's addBatch: the sink call; gpuwm's phases are beside it)
        add = sum(v for k, v in d.items() if k == "addBatch" or k.startswith("gpuwm")) / 1000 if "addBatch" in d \
            else float("nan")
        md.append(f"| {r['engine']} | {r['query']} | {r['data_batch_s']:.3f} | {trig} | {add:.3f} | {r['drain_rows']:,} | "
                  f"{r['idle_triggers']} | {r['idle_trigger_ms']:.0f} | {r['idle_latest_offset_ms']:.0f} | "
                  f"{r['batches_while_idle']} |")
    md += ["", "| query | median data batch s | flush: trigger s (gpuwm wall s) | rows flushed | state rows before / after |",
           "|---|---|---|---|---|"]
    for r in rows[2:]:
        md.append(f"| {r['query']} | {r['data_batch_s']:.3f} | {r['flush_trigger_s']:.3f} ({r['flush_batch_s']:.3f}) | "
                  f"{r['flush_rows']:,} | {r['state_rows_before']:,} / {r['state_rows_after']:,} |")
    write_results(args.out, {"date": time.strftime("%Y-%m-%d"), "cores": args.cores, "events": args.events,
                             "batch": args.batch, "idle_s": args.idle_s, "results": rows}, md)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
