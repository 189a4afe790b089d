"""The event-time-ordered bid stream on Spark: one vnode vs several.

Run:  .venv/bin/python benchmarks/bench_sort_spark.py [--events 3000000] [--batch 500000] [--vnodes 1,2,4]

The embedded Nexmark bid source (4 splits, Beam-style disorder), watermark
4 s (profile ``spark``), ``.sort(key=["bidder"])``, Parquet sink. With one
vnode a batch is one task: filter, sort, write. With N vnodes rows are
spread over N tasks by (event time, key) and their released rows go through
a second shuffle by event-time range to N tasks that merge and write them
(``gpuwm/spark/executor/exchange.py``, ``merge_task``). Events/s = events per batch
/ median Spark ``triggerExecution`` (first batch left out). Each run checks
that the parts, read batch by batch and part by part, are one ordered
stream and that written + buffered + late rows add up to the input.
Writes ``results/sort-vnodes/results.{json,md}``.
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

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import data_progress, write_results  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=3_000_000)
    ap.add_argument("--batch", type=int, default=500_000)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--vnodes", default="1,2,4")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "sort-vnodes"))
    args = ap.parse_args()
    from gpuwm.spark import Pipeline, local_session, read_nexmark

    spark = local_session(app="gpuwm-sort-vnodes", cores=args.cores)
    rows = []
    for vnodes in [int(v) for v in args.vnodes.split(",")]:
        work = tempfile.mkdtemp(prefix="gpuwm-sortv-")
        df = read_nexmark(spark, f"{work}/ck", totalEvents=args.events, eventsPerBatch=args.batch, splits=4,
                          eventsPerSecond=50_000)
        p = (Pipeline(df, f"{work}/ck", vnodes=vnodes).watermark("date_time", delay="4 seconds", split="split",
                                                                 profile="spark")
             .sort(key=["bidder"]).write_parquet(f"{work}/out"))
        sq = p.start()
        sq.processAllAvailable()
        sq.stop()
        full = {m["batch_id"]: m for m in p.history}
        prog = data_progress(sq, p)[1:]  # the first batch warms the JVM and the Python workers
        times = [x["durationMs"]["triggerExecution"] / 1000 for x in prog]
        med = statistics.median(times)
        files = sorted(glob.glob(f"{work}/out/batch_id=*/*.parquet"),
                       key=lambda f: (int(f.split("batch_id=")[1].split("/")[0]), f))
        ts = np.concatenate([pq.read_table(f, columns=["date_time"]).column("date_time").cast(pa.int64()).to_numpy()
                             for f in files])
        assert np.all(np.diff(ts) >= 0), f"vnodes={vnodes}: the sorted stream is out of order"
        inp = sum(m["input_rows"] for m in p.history)
        late = sum(m["late_rows"] for m in p.history)
        assert ts.size + p.history[-1]["state_rows"] + late == inp, f"vnodes={vnodes}: rows lost"
        merge = statistics.median([full[x["batchId"]].get("merge_tasks_s", 0.0) for x in prog])
        rows.append({"vnodes": vnodes, "events_per_s": args.batch / med, "median_batch_s": med,
                     "min_s": min(times), "max_s": max(times), "rows_written": int(ts.size),
                     "median_merge_tasks_s": merge,
                     "max_parts_per_batch": max(len(glob.glob(f"{work}/out/batch_id={b}/*")) for b in full)})
        r = rows[-1]
        print(f"sort, vnodes {vnodes}: {r['events_per_s'] / 1e3:8.1f} k events/s (median batch {med:.2f} s, "
              f"{min(times):.2f}..{max(times):.2f}; merge tasks {merge:.2f} s; {r['rows_written']:,} rows in order)",
              flush=True)
        shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    md = [f"# Ordered bid stream, Spark local[{args.cores}] ({time.strftime('%Y-%m-%d')})", "",
          "| vnodes | k events/s | median batch s (min..max) | merge tasks s (sum, median batch) | parts per batch |",
          "|---|---|---|---|---|"]
    md += [f"| {r['vnodes']} | {r['events_per_s'] / 1e3:.1f} | {r['median_batch_s']:.2f} ({r['min_s']:.2f}.."
           f"{r['max_s']:.2f}) | {r['median_merge_tasks_s']:.2f} | {r['max_parts_per_batch']} |" for r in rows]
    md += ["", "Every run's output, read batch by batch and part by part, is checked to be one ordered stream."]
    write_results(args.out, {"date": time.strftime("%Y-%m-%d"), "cores": args.cores, "events": args.events,
                             "batch": args.batch, "results": rows}, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
