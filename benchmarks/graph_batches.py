"""Per-batch metrics of one of bench_nexmark's graphs (q5g, q7g, q8g) run
through ``accelerate``: where a batch's time goes (the Spark job, the
filter tasks, the source read, the tasks after the filter, the kernels,
the state saves), per micro-batch, and per stage, beside Spark's own
steps of each micro-batch (``durationMs``: offsets, planning, commits).

Run:  .venv/bin/python benchmarks/graph_batches.py q8g --vnodes 2 [--files 5] [--batch 500000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

KEYS = ("batch_id", "input_rows", "read", "wall_s", "commit_s", "job_s", "filter_tasks_s", "source_read_s",
        "vnode_tasks_s", "kernel_s", "state_save_s")


def main() -> None:
    import bench_nexmark as bn
    import pyarrow.parquet as pq

    from gpuwm.nexmark import NexmarkConfig, auctions, bids, persons
    from gpuwm.spark import accelerate, local_session

    ap = argparse.ArgumentParser()
    ap.add_argument("query", choices=sorted(bn.GRAPHS))
    ap.add_argument("--vnodes", type=int, default=1)
    ap.add_argument("--files", type=int, default=5)
    ap.add_argument("--batch", type=int, default=500_000)
    args = ap.parse_args()
    spark = local_session(app="gpuwm-graph-batches", cores=2)
    work = tempfile.mkdtemp(prefix="gpuwm-graph-batches-")
    cfg = NexmarkConfig(events_per_second=50_000)
    base = time.time() - 10_000
    makers = {"bids": bids, "auctions": auctions, "persons": persons}
    make, reads = bn.GRAPHS[args.query]
    streams = {}
    for d in reads:
        for i in range(args.files):
            t = makers[d](cfg, i * args.batch, (i + 1) * args.batch).drop(["split", "event_id"])
            path = f"{work}/{d}/part-{i:04d}.parquet"
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(t, path)
            os.utime(path, (base + i, base + i))
        schema = spark.read.parquet(f"{work}/{d}").schema
        streams[d] = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(
            f"{work}/{d}").withWatermark("date_time", "4 seconds")
    history: list[dict] = []
    acc = accelerate(make(streams), fallback="error", vnodes=args.vnodes, on_batch=history.append)
    run = acc.writeStream.option("checkpointLocation", f"{work}/ck").trigger(availableNow=True).start(
        f"{work}/out")
    run.awaitTermination()
    spark_s = {int(x["batchId"]): x["durationMs"] for x in run.recentProgress}
    for m in history:
        print({k: round(m[k], 3) if isinstance(m[k], float) else m[k] for k in KEYS if k in m})
        # Spark's own steps of the micro-batch (ms): triggerExecution holds them all, addBatch holds wall_s
        print("    spark (ms):", spark_s.get(m["batch_id"]))
        print("    stages (kind, kernel_s, state_save_s):",
              [(s["kind"], round(s.get("kernel_s", 0), 3), round(s.get("state_save_s", 0), 3)) for s in m["stages"]])


if __name__ == "__main__":
    main()
