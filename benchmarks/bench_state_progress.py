"""What Spark's ``stateOperators`` cost a gpuwm batch (#73 item 1: at most 2 %).

Run:  .venv/bin/python benchmarks/bench_state_progress.py [--batches 40] [--rows 2000]

One accelerated query, Parquet files (one file a batch), ``withWatermark``
10 s, a tumbling 5 s count per key, one vnode, run twice in one Spark
session over the same files: with gpuwm's state nodes (the default) and
without them (``state_ops.stateful_stages`` made to find none, as before
the nodes). Per run, over the batches with input (the first two left out):
the median of Spark's ``triggerExecution`` and ``queryPlanning``, and the
driver's time in ``tell_spark_state`` (setting the figures: one py4j call
a batch). The prediction, before measuring: planning the node is a
strategy match and ~20 driver-side SQL metrics (~1 ms), the report one
py4j call (~0.5 ms), against a batch of ~100 ms: about 1–2 %. The first
run also builds the node's jar when not cached (not counted: it is once per
PySpark version). Writes ``results/state_progress/results.{json,md}``.
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--rows", type=int, default=2000)
    a = ap.parse_args()
    from pyspark.sql import functions as F

    from gpuwm.spark import accelerate, local_session
    from gpuwm.spark.driver import loop, state_ops
    from tests.test_spark import _random_batches, _write_batches

    spark = local_session(app="bench-state-progress", cores=2)
    spark.sparkContext.setLogLevel("ERROR")
    tmp = Path(tempfile.mkdtemp(prefix="gpuwm-bench-state-"))
    _write_batches(str(tmp / "in"), _random_batches(np.random.default_rng(3), a.batches, a.rows, 10, 20, 50))
    spent: list[float] = []
    told = loop.tell_spark_state

    def timed(*args):
        t = time.perf_counter()
        told(*args)
        spent.append(time.perf_counter() - t)

    loop.tell_spark_state = timed
    found = state_ops.stateful_stages
    out = {}
    for name in ("without", "with", "without again", "with again"):  # (alternated: the JVM warms as it goes)
        on = not name.startswith("without")
        state_ops.stateful_stages = found if on else (lambda plan: [])
        spent.clear()
        df = (spark.readStream.schema("ts TIMESTAMP, k BIGINT, price BIGINT").option("maxFilesPerTrigger", 1)
              .parquet(str(tmp / "in")).withWatermark("ts", "10 seconds")
              .groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n")))
        q = (accelerate(df, fallback="error").writeStream.format("parquet").option("path", str(tmp / f"out-{name}"))
             .option("checkpointLocation", str(tmp / f"ck-{name}")).trigger(availableNow=True).start())
        q.awaitTermination()
        ps = [p for p in q.recentProgress if p["numInputRows"]][2:]
        assert all(bool(p["stateOperators"]) == on for p in ps), name
        out[name] = {"batches": len(ps),
                     "trigger_ms": statistics.median(p["durationMs"]["triggerExecution"] for p in ps),
                     "planning_ms": statistics.median(p["durationMs"]["queryPlanning"] for p in ps),
                     "report_ms": statistics.median(spent) * 1000 if spent else 0.0}
        print(name, out[name], flush=True)
    spark.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    res = ROOT / "benchmarks" / "results" / "state_progress"
    res.mkdir(parents=True, exist_ok=True)
    (res / "results.json").write_text(json.dumps(out, indent=1))
    lines = ["| run | batches | triggerExecution p50 ms | queryPlanning p50 ms | tell_spark_state p50 ms |",
             "|---|---|---|---|---|"]
    lines += [f"| {k} | {v['batches']} | {v['trigger_ms']:.0f} | {v['planning_ms']:.0f} | {v['report_ms']:.2f} |"
              for k, v in out.items()]
    (res / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
