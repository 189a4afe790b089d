"""The Spark runtime's task functions replayed in-process, with no JVM and
no pyspark: what Spark would run per micro-batch (one task per batch, or a
filter task per input partition, a task per vnode and, for a sort over
several vnodes, the range merge), and the engine-independent operators over
the same batches to compare with. Used by ``test_runtime.py`` and by
``benchmarks/gpu_spark_tasks.py`` (the same tasks on a real GPU)."""

from __future__ import annotations

import glob
import os
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq

import gpuwm
from gpuwm.nexmark import NexmarkConfig, bids
from gpuwm.spark import runtime

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc).isoformat()
CFG = NexmarkConfig(events_per_second=2_000, splits=3, out_of_order_fraction=0.2, max_delay_ms=9_000, seed=3)


def batches(n=5, per=4_000):
    """Each batch as its input partitions (one per split, as the source gives them)."""
    return [[bids(CFG, a, a + per, s) for s in range(CFG.splits)] for a in range(0, n * per, per)]


def pipeline(tmp, op, backend, vnodes):
    """The test query as a gpuwm Pipeline (its ``_plan()`` is what the tasks
    get): Nexmark bids, a split watermark with profile spark, then a hopping
    window count/max per auction or the sort by (date_time, auction, bidder),
    into Parquet under ``tmp``. Needs pyspark (the schema is Spark's)."""
    from types import SimpleNamespace

    from pyspark.sql.pandas.types import from_arrow_schema

    from gpuwm.spark import Pipeline

    schema = batches(1, 10)[0][0].schema
    df = SimpleNamespace(isStreaming=True, schema=from_arrow_schema(schema),
                         sparkSession=SimpleNamespace(conf=SimpleNamespace(get=lambda k, d=None: d)))
    p = Pipeline(df, f"{tmp}/ck", vnodes=vnodes, backend=backend).watermark(
        "date_time", delay="2 seconds", split="split", profile="spark")
    if op == "window":
        p = p.window(gpuwm.Hop("date_time", size="4 seconds", slide="2 seconds"), by=["auction"],
                     aggs={"n": ("*", "count"), "hi": ("price", "max")})
    else:
        p = p.sort(key=["auction", "bidder"])
    return p.write_parquet(f"{tmp}/out")


def run_tasks(plan: dict, batches) -> tuple[list[pa.Table], list[int]]:
    """Each batch's output (its part files in name order) and how many parts it had."""
    fstate, prev, outs, nparts = None, None, [], []
    for batch_id, parts in enumerate(batches):
        if batch_id % 2:  # an executor that lost its memory: the state comes back from the checkpoint
            runtime._CACHE.clear()
        if plan["vnodes"] == 1:
            rows = pa.concat_tables(parts).to_batches()
            res = list(runtime.single_task(plan, fstate, NOW, batch_id, prev, iter(rows)))
        else:
            stage1 = [b for part in parts for b in runtime.filter_task(plan, fstate, iter(part.to_batches()))]
            t = pa.Table.from_batches(stage1)
            res = list(runtime.vnodes_task(plan, fstate, NOW, batch_id, prev, iter(t.to_batches())))
            if runtime.sort_exchange(plan):  # the range shuffle, its partitions in reverse (arrival order must not matter)
                t = pa.Table.from_batches(res)
                rng = t.column("__range").to_numpy()
                res = [b for r in sorted(set(rng.tolist()), reverse=True)
                       for b in runtime.merge_task(plan, batch_id, iter(t.filter(rng == r).to_batches()[::-1]))]
        res = pa.Table.from_batches(res)
        fstate = [s for s in res.column("filter_state").to_pylist() if s][0]
        prev = batch_id
        out, n = batch_output(plan, batch_id)
        outs.append(out)
        nparts.append(n)
    return outs, nparts


def batch_output(plan: dict, batch_id: int) -> tuple[pa.Table | None, int]:
    """What the Parquet sink holds for ``batch_id`` (its part files in name
    order, None if it wrote none) and how many part files that is."""
    files = sorted(glob.glob(os.path.join(plan["sink"]["path"], f"batch_id={batch_id}", "*.parquet")))
    return (pa.concat_tables([pq.read_table(f) for f in files]) if files else None), len(files)


def run_operators(op, batches) -> list[pa.Table]:
    """The same query on the engine-independent operators, on the CPU."""
    f = gpuwm.WatermarkFilter("date_time", delay=timedelta(seconds=2), split="split", profile="spark",
                              backend="cpu")
    if op == "window":
        o = gpuwm.WindowAggregate(gpuwm.Hop("date_time", size="4 seconds", slide="2 seconds"), by=["auction"],
                                  aggs={"n": ("*", "count"), "hi": ("price", "max")}, profile="spark",
                                  backend="cpu")
    else:
        o = gpuwm.StreamSort("date_time", key=["auction", "bidder"], profile="spark", backend="cpu")
    outs = []
    for parts in batches:
        o.push(f.process(pa.concat_tables(parts)))
        outs.append(o.drain(f.output_watermark))
    return outs


def mismatch(op: str, vnodes: int, got: list, nparts: list[int], exp: list[pa.Table]) -> str | None:
    """Why the tasks' output differs from the operators', or None."""
    if sum(e.num_rows for e in exp) <= 1_000:
        return "too few rows to compare"
    if op == "sort" and vnodes > 1 and max(nparts) != vnodes:  # the ranges split the batches' output
        return f"expected a batch cut into {vnodes} ranges, got at most {max(nparts)} parts"
    for i, (g, e) in enumerate(zip(got, exp)):
        if not e.num_rows:
            if g is not None:
                return f"batch {i}: {g.num_rows} rows written, none expected"
        elif g is None:
            return f"batch {i}: nothing written, {e.num_rows} rows expected"
        elif op == "sort":  # one totally ordered stream: with several vnodes, their parts in order
            if not g.select(e.column_names).equals(e):
                return f"batch {i}: sorted output differs"
        else:  # windows: per vnode, compare as sets of rows
            key = e.column_names
            if sorted(g.select(key).to_pylist(), key=repr) != sorted(e.to_pylist(), key=repr):
                return f"batch {i}: window rows differ"
    return None
