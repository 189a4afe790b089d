"""Nexmark-like queries on the embedded source, Spark local mode.

Run:  .venv/bin/python benchmarks/bench_nexmark.py [--events 3000000] [--batch 500000]

Q5-like: hopping 10 s / 2 s bid count per auction. Q7-like: tumbling 10 s
max price (and count) per auction. Events/s = events per batch / median
Spark ``triggerExecution`` (first batch left out), per core = / cores. The
published figures are printed beside ours for orientation only: different
hardware, engines and setups (Flink Nexmark V2 q5 ~74.5 k/s/core, q7 ~22.9
k/s/core; RisingWave q7 ~20.4 k/s/core), and our source generates bids only
(46 of every 50 events), so the figures are not a like-for-like comparison.
Each query runs twice: the task generating its micro-batch's splits itself
from the offsets Spark logged (``read="auto"``, see
``gpuwm/spark/direct.py``), and the source's rows through the JVM
(``read="spark"``); their outputs must be equal. Writes
``results/nexmark/results.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PUBLISHED = {"q5": {"Flink Nexmark V2": 74_500}, "q7": {"Flink Nexmark V2": 22_900, "RisingWave": 20_400}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=3_000_000)
    ap.add_argument("--batch", type=int, default=500_000)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--vnodes", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "nexmark"))
    args = ap.parse_args()
    import gpuwm
    from gpuwm.spark import Pipeline, local_session, read_nexmark

    spark = local_session(app="gpuwm-nexmark", cores=args.cores)
    rows = []
    import pyarrow.parquet as pq

    for q in ("q5", "q7"):
        outs = {}
        for read in ("auto", "spark"):  # the task generates its splits itself / the source's rows through the JVM
            work = tempfile.mkdtemp(prefix="gpuwm-nex-")
            df = read_nexmark(spark, f"{work}/ck", totalEvents=args.events, eventsPerBatch=args.batch, splits=4,
                              eventsPerSecond=50_000)
            p = Pipeline(df, f"{work}/ck", vnodes=args.vnodes, read=read).watermark(
                "date_time", delay="4 seconds", split="split", profile="spark")
            if q == "q5":
                p.window(gpuwm.Hop("date_time", size="10 seconds", slide="2 seconds"), by=["auction"],
                         aggs={"bids": ("*", "count")})
            else:
                p.window(gpuwm.Tumble("date_time", "10 seconds"), by=["auction"],
                         aggs={"bids": ("*", "count"), "max_price": ("price", "max")})
            sq = p.write_parquet(f"{work}/out").start()
            sq.processAllAvailable()
            sq.stop()
            full = {m["batch_id"]: m["input_rows"] for m in p.history if m["input_rows"]}
            prog = [x for x in sq.recentProgress if x["batchId"] in full][1:]
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
            pub = ", ".join(f"{k} {v / 1e3:.1f} k" for k, v in PUBLISHED[q].items())
            print(f"{name:30s}: {eps / 1e3:8.1f} k events/s on {args.cores} cores = {eps / args.cores / 1e3:.1f} "
                  f"k/s/core (median batch {med:.2f} s)   published, other setups: {pub} /s/core", flush=True)
            shutil.rmtree(work, ignore_errors=True)
        assert outs["auto"].equals(outs["spark"]), f"{q}: generated in the task and read from the source differ"
    spark.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "cores": args.cores,
                                                  "events": args.events, "batch": args.batch, "results": rows},
                                                 indent=2))
    md = [f"# Nexmark-like queries, embedded source, Spark local[{args.cores}] ({time.strftime('%Y-%m-%d')})", "",
          "| query | input | k events/s | k events/s/core | median batch s | "
          "published k/s/core (other hardware and setups) |",
          "|---|---|---|---|---|---|"]
    md += [f"| {r['query']} | {'task generates' if r['read'] == 'auto' else 'source through Spark'} | {r['events_per_s'] / 1e3:.1f} | {r['events_per_s_per_core'] / 1e3:.1f} | "
           f"{r['median_batch_s']:.2f} | " + ", ".join(f"{k}: {v / 1e3:.1f}" for k, v in r["published_per_core"].items())
           + " |" for r in rows]
    md += ["", "Events count persons and auctions that the source skips (it generates the 46/50 that are bids). "
           "Both inputs give the same output (checked)."]
    (out / "results.md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
