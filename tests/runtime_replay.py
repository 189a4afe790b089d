"""The Spark runtime's task functions replayed in-process, with no JVM and
no pyspark: what Spark would run per micro-batch (one task per batch, or a
filter task per input partition, a task per vnode and, for a sort over
several vnodes, the range merge), and the engine-independent operators over
the same batches to compare with. Used by ``test_runtime.py`` and by
``benchmarks/gpu_spark_tasks.py`` (the same tasks on a real GPU)."""

from __future__ import annotations

from contextlib import nullcontext
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq

import gpuwm
from gpuwm.nexmark import NexmarkConfig, bids
from gpuwm.session import SessionAggregate
from gpuwm.spark.executor import tasks
from gpuwm.spark.executor.exchange import FLOW_SCHEMA, merge_task
from gpuwm.spark.storage import store

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc).isoformat()
SORT_KEY = ("auction", "bidder")  # the test sort's ties on event time
TUMBLE_AGGS = {"n": ("*", "count"), "hi": ("price", "max"), "tot": ("price", "sum")}
SESSION_AGGS = {"n": ("*", "count"), "tot": ("price", "sum")}
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
    elif op == "tumble":
        p = p.window(gpuwm.Tumble("date_time", "2 seconds"), by=["auction"], aggs=TUMBLE_AGGS)
    elif op == "session":  # bids per auction in bursts
        p = p.window(gpuwm.Session("date_time", "500 milliseconds"), by=["auction"], aggs=SESSION_AGGS)
    elif op == "dedup":  # the first bid of each (auction, bidder) while it is held
        p = p.dedup(["auction", "bidder"])
    elif op == "chain":  # bids per auction per 2 s, then the busiest auction's count per 4 s (global)
        p = p.window(gpuwm.Tumble("date_time", "2 seconds"), by=["auction"], aggs={"n": ("*", "count")})
        p = p.window(gpuwm.Tumble("window_time", "4 seconds"),
                     aggs={"mx": ("n", "max"), "tot": ("n", "sum"), "groups": ("*", "count")})
    elif op == "sort":
        p = p.sort(key=list(SORT_KEY))
    return p.write_parquet(f"{tmp}/out")  # another op: the filter only, for a test to add its stage


def _shuffle(t: pa.Table, col: str, n: int, task) -> pa.Table:
    """Spark's ``repartition(n, col).mapInArrow(task)``: rows hashed by ``col``
    (null: partition 0) into ``n - 1`` partitions, so that one task gets
    several destinations as Spark's hash often gives it; partitions run last
    first and their batches in reverse (arrival order must not matter); the
    tasks' output rows."""
    with span("exchange"):
        key = t.column(col).fill_null(0).to_numpy(zero_copy_only=False) % max(n - 1, 1)
        parts = [t.filter(pa.array(key == p)).to_batches()[::-1] for p in range(n - 1, -1, -1)]
    out = [b for part in parts for b in task(iter(part))]
    return pa.Table.from_batches(out, schema=FLOW_SCHEMA)


def span(step: str):
    """A timed step of the replay (``gpu_spark_tasks.py --time`` sets its timer here): none by default."""
    return nullcontext()


def run_tasks(plan, batches) -> tuple[list[pa.Table], list[int]]:
    """Each batch's output (its part files in name order) and how many parts it had."""
    fstate, prev, outs, nparts = None, None, [], []
    for batch_id, parts in enumerate(batches):
        if batch_id % 2:  # an executor that lost its memory: the state comes back from the checkpoint
            store._CACHE.clear()
        if plan.vnodes == 1:
            rows = pa.concat_tables(parts).to_batches() if parts else []  # (no parts: a batch without data)
            res = pa.Table.from_batches(list(tasks.single_task(plan, fstate, NOW, batch_id, prev, iter(rows))),
                                        schema=FLOW_SCHEMA)
        else:
            s1 = tasks.stage1_schema(plan)
            ticks = pa.table({f.name: pa.nulls(plan.vnodes, f.type) for f in s1}, schema=s1)  # every vnode runs
            ticks = ticks.set_column(s1.get_field_index("__vnode"), "__vnode", pa.array(range(plan.vnodes), pa.int32()))
            ticks = ticks.set_column(s1.get_field_index("__kind"), "__kind",
                                     pa.array([tasks.KIND_TICK] * plan.vnodes, pa.int8()))
            stage1 = pa.Table.from_batches([b for i, part in enumerate(parts)
                                            for b in tasks.filter_task(plan, fstate, iter(part.to_batches()),
                                                                       partition=i, batch_id=batch_id)]
                                           + ticks.to_batches(), schema=s1)
            res = _shuffle(stage1, "__vnode", plan.vnodes,
                           lambda b: tasks.vnodes_task(plan, fstate, NOW, batch_id, prev, b))
            for seg in range(1, len(plan.segments)):  # each later segment after its exchange
                res = _shuffle(res, "__dest", plan.segments[seg].tasks,
                               lambda b, seg=seg: tasks.segment_task(plan, seg, batch_id, prev, b))
            if plan.range_exchange:  # the sort's ranges, merged range by range
                res = _shuffle(res, "__dest", plan.vnodes, lambda b: merge_task(plan, batch_id, b))
        fstate, prev = commit(plan, batch_id, res)
        out, n = batch_output(plan, batch_id)
        outs.append(out)
        nparts.append(n)
    return outs, nparts


def commit(plan, batch_id: int, res: pa.Table) -> tuple[bytes, store.Prev]:
    """What the driver does after a batch's tasks: commit the state versions
    their results name, with the filter state. The next batch's (filter
    state, prev)."""
    import json

    res = res.filter(res.column("__metrics").is_valid())
    versions, files, filter_name = store.committed_versions([json.loads(m) for m in res.column("__metrics").to_pylist()])
    plan.checkpoint.write_commit(batch_id, versions, files, filter_name, {"batch_id": batch_id})
    fstate = plan.checkpoint.read_filter(filter_name)
    return fstate, store.Prev(batch_id, versions)


def batch_output(plan: dict, batch_id: int) -> tuple[pa.Table | None, int]:
    """What the Parquet sink holds for ``batch_id`` (its part files in name
    order, None if it wrote none) and how many part files that is."""
    loc = plan.sink.location
    names = [n for n in loc.list(f"batch_id={batch_id}") if n.endswith(".parquet")]
    tables = [pq.read_table(loc.path(f"batch_id={batch_id}/{n}"), filesystem=loc.fs) for n in names]
    return (pa.concat_tables(tables) if tables else None), len(names)


def run_operators(op, batches) -> list[pa.Table]:
    """The same query on the engine-independent operators, on the CPU."""
    # spark's window_lateness: before a first window stage the filter keeps rows up to a window size behind
    lateness = {"window": 4, "chain": 2, "tumble": 2, "session": 0.5}.get(op, 0)
    f = gpuwm.WatermarkFilter("date_time", delay=timedelta(seconds=2), split="split", profile="spark",
                              allowed_lateness=timedelta(seconds=lateness), backend="cpu")
    if op == "window":
        ops = [gpuwm.WindowAggregate(gpuwm.Hop("date_time", size="4 seconds", slide="2 seconds"), by=["auction"],
                                     aggs={"n": ("*", "count"), "hi": ("price", "max")}, profile="spark",
                                     backend="cpu")]
    elif op == "tumble":
        ops = [gpuwm.WindowAggregate(gpuwm.Tumble("date_time", "2 seconds"), by=["auction"], aggs=TUMBLE_AGGS,
                                     profile="spark", backend="cpu")]
    elif op == "session":
        ops = [SessionAggregate(gpuwm.Session("date_time", "500 milliseconds"), by=["auction"], aggs=SESSION_AGGS,
                                      profile="spark", backend="cpu")]
    elif op == "dedup":
        ops = [gpuwm.Dedup(["auction", "bidder"], "date_time", delay=timedelta(seconds=2), backend="cpu")]
    elif op == "chain":
        ops = [gpuwm.WindowAggregate(gpuwm.Tumble("date_time", "2 seconds"), by=["auction"],
                                     aggs={"n": ("*", "count")}, profile="spark", backend="cpu", window_time=True),
               gpuwm.WindowAggregate(gpuwm.Tumble("window_time", "4 seconds"),
                                     aggs={"mx": ("n", "max"), "tot": ("n", "sum"), "groups": ("*", "count")},
                                     profile="spark", backend="cpu")]
    else:
        ops = [gpuwm.StreamSort("date_time", key=list(SORT_KEY), profile="spark", backend="cpu")]
    outs = []
    for parts in batches:
        rows, w = f.process(pa.concat_tables(parts)), f.output_watermark
        for o in ops:  # a chain: each stage drains with the one before's output watermark
            pushed = o.push(rows)
            rows, w = o.release(w)
            if pushed is not None and pushed.num_rows:  # a dedup emits on push
                rows = pushed
        outs.append(rows)
    return outs


def _sorted_rows(t: pa.Table) -> pa.Table:
    return t.sort_by([(c, "ascending") for c in t.column_names])


def mismatch(op: str, vnodes: int, got: list, nparts: list[int], exp: list[pa.Table]) -> str | None:
    """Why the tasks' output differs from the operators', or None."""
    if sum(e.num_rows for e in exp) <= (3 if op == "chain" else 1_000):  # a chain ends in one row per 4 s
        return "too few rows to compare"
    if op == "sort" and vnodes > 1 and max(nparts) != vnodes:  # the ranges split the batches' output
        return f"expected a batch cut into {vnodes} ranges, got at most {max(nparts)} parts"
    for i, (g, e) in enumerate(zip(got, exp)):
        if not e.num_rows:
            if g is not None:
                return f"batch {i}: {g.num_rows} rows written, none expected"
        elif g is None:
            return f"batch {i}: nothing written, {e.num_rows} rows expected"
        elif op == "sort":  # one ordered stream: with several vnodes, their parts in order
            order = ["date_time", *SORT_KEY]  # rows equal on all of these arrive as the exchange gives them
            if not g.select(order).equals(e.select(order)):
                return f"batch {i}: sorted output differs"
            if not _sorted_rows(g.select(e.column_names)).equals(_sorted_rows(e)):
                return f"batch {i}: sorted rows differ (ties on the sort key included)"
        else:  # windows: per vnode, compare as sets of rows
            key = e.column_names
            if sorted(g.select(key).to_pylist(), key=repr) != sorted(e.to_pylist(), key=repr):
                return f"batch {i}: window rows differ"
    return None
