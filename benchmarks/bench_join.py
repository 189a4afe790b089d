"""Stream-stream joins: gpuwm's interval and window joins beside Spark's own
stream-stream join, events/s and join state rows per micro-batch.

Run:  .venv/bin/python benchmarks/bench_join.py [--batches 8] [--bids 200000] [--nexmark 2000000]

Three queries, each run by gpuwm (profile ``spark``, one vnode, the rows
through Spark) and by Spark's native query over the same sources, Spark
local mode, to the end (``availableNow``):

- **interval join on files**: auctions ⋈ bids, ``a_id = b_aid AND b_ts
  BETWEEN a_ts AND a_ts + 20 s`` (left outer), one Parquet file per input
  per micro-batch (``maxFilesPerTrigger`` 1, 20 s of event time each),
  watermark delays 10 s / 5 s;
- **Q3-like**: Nexmark persons ⋈ auctions of one generator, ``seller = p_id``
  and the auction opened within 30 s of the person (inner);
- **Q8-like**: Nexmark persons ⋈ auctions, ``seller = p_id`` within the same
  10 s tumbling window (gpuwm's window join; Spark: the window in the join
  keys).

events/s = input rows of both inputs / the query's wall time from start to
the end of its last batch (the first batch's start-up included for both;
gpuwm's with ``availableNow``, Spark's with ``processingTime`` 0 until
``processAllAvailable`` returns);
``state rows`` per batch: gpuwm's join state (both sides), Spark's
``stateOperators[0].numRowsTotal``. The floor is Spark's own cost of
handing the same rows to Python (the count-only ``mapInArrow`` of
gpuwm/DESIGN.md, "Running inside Spark"; ~1.1 M rows/s on this machine).

Writes ``results/join/results.{json,md}`` and ``state.png`` (matplotlib).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import write_results  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
A_SCHEMA = "a_id bigint, a_ts timestamp, seller bigint"
B_SCHEMA = "b_aid bigint, b_ts timestamp, price bigint"


def write_files(work: str, batches: int, bids: int, seed: int = 1) -> int:
    """Auctions (a quarter of the bids) and bids per batch, 20 s of event
    time each, out of order by up to 6 s, 2 % late; a bid is on an auction
    of the last two batches, -2 to 25 s after it opened. Returns the rows
    written."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    base, nid, rows = time.time() - 1000, 0, 0
    t0 = int(T0.timestamp() * 1e6)
    for side in ("a", "b"):
        os.makedirs(f"{work}/{side}", exist_ok=True)
    a_ts_all = np.zeros(0, dtype=np.int64)
    for i in range(batches):
        n = bids // 4
        ids = np.arange(nid, nid + n)
        ts = t0 + (i * 20_000_000 + rng.integers(-6_000_000, 20_000_000, n)).clip(0)
        ts[rng.random(n) < 0.02] -= 30_000_000
        a_ts_all = np.concatenate([a_ts_all, ts])
        a = pa.table({"a_id": ids, "a_ts": pa.array(ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                      "seller": rng.integers(0, 10_000, n)})
        pick = rng.integers(max(0, nid - n), nid + n, bids)
        bts = a_ts_all[pick] + rng.integers(-2_000_000, 25_000_000, bids)
        b = pa.table({"b_aid": pick, "b_ts": pa.array(bts, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                      "price": rng.integers(1, 10_000, bids)})
        nid += n
        for side, t in (("a", a), ("b", b)):
            p = f"{work}/{side}/part-{i:04d}.parquet"
            pq.write_table(t, p)
            os.utime(p, (base + i, base + i))
            rows += t.num_rows
    return rows


def file_spec(work: str) -> dict:
    def inp(name, schema, col, delay):
        return {"source": {"format": "parquet", "schema": schema, "path": f"{work}/{name}",
                           "options": {"maxFilesPerTrigger": 1}},
                "watermark": {"column": col, "delay": delay, "profile": "spark"}}
    return {"inputs": {"auctions": inp("a", A_SCHEMA, "a_ts", "10 seconds"), "bids": inp("b", B_SCHEMA, "b_ts", "5 seconds")},
            "checkpoint": f"{work}/ck", "sink": {"parquet": f"{work}/out"},
            "stages": [{"join": {"left": "auctions", "right": "bids", "on": [["a_id", "b_aid"]],
                                 "between": ["b_ts", "a_ts", "0 seconds", "20 seconds"], "how": "left"}}]}


def nexmark_spec(work: str, nex: dict, window: bool) -> dict:
    def inp(kind, select, col):
        return {"source": {"format": "nexmark", "options": {**nex, "kind": kind}, "select": select},
                "watermark": {"column": col, "delay": "2 seconds", "profile": "spark"}}
    join = {"left": "persons", "right": "auctions", "on": [["p_id", "seller"]], "how": "inner"}
    join.update({"window": {"tumble": "10 seconds"}} if window else
                {"between": ["a_time", "p_time", "0 seconds", "30 seconds"]})
    return {"inputs": {"persons": inp("person", ["id as p_id", "name", "state", "date_time as p_time"], "p_time"),
                       "auctions": inp("auction", ["id as a_id", "seller", "category", "date_time as a_time"],
                                       "a_time")},
            "checkpoint": f"{work}/ck", "sink": {"parquet": f"{work}/out"}, "stages": [{"join": join}]}


def run_gpuwm(spark, spec: dict) -> dict:
    from gpuwm.spark.front.spec import build

    p = build(spark, spec, verbose=False)
    t = time.perf_counter()
    p.start(trigger={"availableNow": True}).awaitTermination()
    wall = time.perf_counter() - t
    h = p.history
    return {"wall_s": wall, "rows": sum(m["input_rows"] for m in h), "batches": len(h),
            "state_rows": [m["state_rows"] for m in h], "emitted": sum(m["rows_emitted"] for m in h),
            "batch_s": [m["wall_s"] for m in h], "kernel_s": [m["kernel_s"] for m in h],
            "job_s": [m["job_s"] for m in h], "state_save_s": [m["state_save_s"] for m in h]}


def run_native(df, work: str) -> dict:
    """Spark's query to the end: ``processingTime`` 0 and ``processAllAvailable``
    (``availableNow`` would run a Python source's input as one batch, SPARK-45178)."""
    q = (df.writeStream.format("parquet").option("path", f"{work}/native").option("checkpointLocation", f"{work}/nck")
         .outputMode("append").trigger(processingTime="0 seconds"))
    t = time.perf_counter()
    q = q.start()
    q.processAllAvailable()
    wall = time.perf_counter() - t
    q.stop()
    prog = sorted({p["batchId"]: p for p in q.recentProgress}.values(), key=lambda p: p["batchId"])
    return {"wall_s": wall, "rows": sum(p["numInputRows"] for p in prog), "batches": len(prog),
            "state_rows": [p["stateOperators"][0]["numRowsTotal"] if p["stateOperators"] else 0 for p in prog],
            "batch_s": [p["durationMs"].get("triggerExecution", 0) / 1000 for p in prog]}


def native_files(spark, work: str):
    from pyspark.sql import functions as F

    a = (spark.readStream.schema(A_SCHEMA).option("maxFilesPerTrigger", 1).parquet(f"{work}/a")
         .withWatermark("a_ts", "10 seconds"))
    b = (spark.readStream.schema(B_SCHEMA).option("maxFilesPerTrigger", 1).parquet(f"{work}/b")
         .withWatermark("b_ts", "5 seconds"))
    return a.join(b, F.expr("a_id = b_aid AND b_ts >= a_ts AND b_ts <= a_ts + interval 20 seconds"), "leftOuter")


def native_nexmark(spark, work: str, nex: dict, window: bool):
    from pyspark.sql import functions as F

    from gpuwm.spark import read_nexmark

    p = read_nexmark(spark, f"{work}/nck", **nex, kind="person").withWatermark("date_time", "2 seconds")
    a = read_nexmark(spark, f"{work}/nck", **nex, kind="auction").withWatermark("date_time", "2 seconds")
    if window:
        p = p.selectExpr("id as p_id", "name", "state", "window(date_time, '10 seconds') as pw")
        a = a.selectExpr("id as a_id", "seller", "category", "window(date_time, '10 seconds') as aw")
        return a.join(p, F.expr("seller = p_id AND aw = pw")).drop("aw")
    p = p.selectExpr("id as p_id", "name", "state", "date_time as p_time")
    a = a.selectExpr("id as a_id", "seller", "category", "date_time as a_time")
    return p.join(a, F.expr("seller = p_id AND a_time >= p_time AND a_time <= p_time + interval 30 seconds"))


def plot(runs: list[dict], out: Path) -> None:
    """``state.png``: join state rows per batch, gpuwm over Spark (they coincide)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    style = {"gpuwm": dict(marker="x", ls="--", lw=2, ms=9, zorder=3), "spark native": dict(marker="o", lw=5, alpha=.4)}
    for ax, name in zip(axes, dict.fromkeys(r["query"] for r in runs)):
        for r in runs:
            if r["query"] == name:
                ax.plot(range(len(r["state_rows"])), r["state_rows"], label=r["engine"], **style[r["engine"]])
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("micro-batch")
        ax.set_ylabel("join state rows")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "state.png", dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--bids", type=int, default=200_000, help="bids per file batch (auctions: a quarter)")
    ap.add_argument("--nexmark", type=int, default=2_000_000, help="Nexmark events (persons are 1 in 50, auctions 3)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "join"))
    ap.add_argument("--replot", action="store_true", help="only redraw state.png from results.json")
    args = ap.parse_args()
    if args.replot:
        import json

        plot(json.loads((Path(args.out) / "results.json").read_text())["runs"], Path(args.out))
        return 0

    from gpuwm.spark import local_session

    spark = local_session(app="gpuwm-join", cores=args.cores)
    nex = dict(totalEvents=args.nexmark, eventsPerBatch=args.nexmark // 8, splits=4, eventsPerSecond=2_000,
               outOfOrderFraction=0.1, maxDelayMs=2_000)
    runs = []
    for name in ("interval join, files (left outer)", "Q3-like (interval, Nexmark)", "Q8-like (window, Nexmark)"):
        for engine in ("gpuwm", "spark native"):
            work = tempfile.mkdtemp(prefix="gpuwm-join-")
            if name.startswith("interval"):
                write_files(work, args.batches, args.bids)
                r = run_gpuwm(spark, file_spec(work)) if engine == "gpuwm" else run_native(native_files(spark, work), work)
            else:
                window = name.startswith("Q8")
                r = run_gpuwm(spark, nexmark_spec(work, nex, window)) if engine == "gpuwm" else \
                    run_native(native_nexmark(spark, work, nex, window), work)
            r.update(query=name, engine=engine, events_per_s=r["rows"] / r["wall_s"])
            print({k: v for k, v in r.items() if not isinstance(v, list)}, "state", r["state_rows"],
                  "kernel_s", [round(x, 3) for x in r.get("kernel_s", [])], flush=True)
            runs.append(r)
            shutil.rmtree(work, ignore_errors=True)
    spark.stop()

    md = [f"# Stream-stream joins, Spark local[{args.cores}] ({time.strftime('%Y-%m-%d')}; files: {args.batches} "
          f"batches x {args.bids:,} bids + {args.bids // 4:,} auctions; Nexmark {args.nexmark:,} events)", "",
          "| query | engine | input rows | batches | wall s | events/s | gpuwm / native | peak state rows | "
          "final state rows |", "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(runs):
        other = runs[i - 1] if r["engine"] == "spark native" else runs[i + 1]
        ratio = (r["events_per_s"] / other["events_per_s"]) if r["engine"] == "gpuwm" else 1 / (
            other["events_per_s"] / r["events_per_s"])
        md.append(f"| {r['query']} | {r['engine']} | {r['rows']:,} | {r['batches']} | {r['wall_s']:.1f} | "
                  f"{r['events_per_s']:,.0f} | {ratio:.2f} | {max(r['state_rows']):,} | {r['state_rows'][-1]:,} |")
    write_results(args.out, {"date": time.strftime("%Y-%m-%d"), "cores": args.cores, "batches": args.batches,
                             "bids": args.bids, "nexmark": args.nexmark, "runs": runs}, md)
    plot(runs, Path(args.out))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
