"""What runs inside Spark tasks for one micro-batch: one job per batch
(gpuwm/DESIGN.md, "Running inside Spark").

1. ``filter_task`` (``mapInArrow``, once per input partition): restores the
   watermark filter as of the previous batch, filters its rows (or, when the
   first stage pre-aggregates, turns them into partials), tags each with its
   vnode, and emits its statistics (per-split watermark candidates, counts)
   once *per vnode*.
2. ``vnodes_task`` (``repartition(vnodes, "__vnode").mapInArrow``; a tick
   row per vnode makes every vnode run): folds every partition's statistics
   into the filter — the same deterministic function everywhere — so each
   vnode knows the combined watermark of this batch, then runs the first
   segment's stages on its rows (:func:`run_segment`).
3. ``segment_task`` (``repartition(tasks, "__dest").mapInArrow``), once per
   later segment: the stages after an exchange, on the rows the previous
   segment's tasks sent (:mod:`gpuwm.spark.executor.exchange`), with the watermark
   they sent beside them; and ``exchange.merge_task`` for a stream sort's
   event-time ranges.

With one vnode, ``single_task`` does all of it in one task over the
coalesced input: one narrow stage, no shuffle, and the kept rows go from the
filter to the first operator as they are (on the GPU, a device Frame). When
that task also makes its input itself (:mod:`gpuwm.spark.driver.direct`), the
driver plans its job once and runs it again every batch
(:func:`planned_single_task`: the batch's arguments travel as a local
property of the job, not in the pickled function), which saves Spark's
analysis and planning and PySpark's pickling of a new ``mapInArrow``, ~40 ms
a batch.

A stage drains with its upstream's output watermark in the same task, so a
chain of stages adds no micro-batch of latency. No kernel math here: the
tasks call the operators through their contract (:mod:`gpuwm.operator`).
A batch's output and state are a function of (state at batch_id - 1, batch
input), so a replayed batch rewrites the same files.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any, Iterator

import pyarrow as pa

from ...errors import ConfigError, StateError
from ...inputs import split_union, to_union, union_schema
from ...watermark import split_key
from ..io.sinks import write_late, write_output
from ..io.sources import KAFKA_COUNTS, add_counts
from ..storage import store
from . import exchange
from .plan import SEQ, Plan, shuffled_schema

KIND_DATA, KIND_STATS, KIND_TICK = 0, 1, 2
#: the local property of a planned job (:func:`planned_single_task`) that holds its batch's arguments
ARGS_PROPERTY = "gpuwm.batch.args"
#: the largest arguments sent that way (base64 characters); larger ones go in a new job's function
ARGS_MAX = 64 * 1024


def stage1_schema(plan: Plan) -> pa.Schema:
    fields = [f.with_nullable(True) for f in shuffled_schema(plan)]
    return pa.schema(fields + [("__vnode", pa.int32()), ("__kind", pa.int8()), ("__stats", pa.string())])


def _write_held(plan: Plan, batch_id: int, part: int, held: list | dict) -> str | None:
    """A filter task's rows held back by alignment (``held_out`` of
    ``filter_local``: tables, or ``{input: tables}``) as an exchange piece
    for vnode 0, which saves the filter's state; its name (None: none held)."""
    if plan.multi:
        tables = {n: pa.concat_tables(ts) for n, ts in held.items() if ts}
        t = to_union(plan.input_schema, tables) if any(x.num_rows for x in tables.values()) else None
    else:
        ts = [t for t in held if t.num_rows]
        t = None if not ts else pa.concat_tables(ts)
    return None if t is None else plan.checkpoint.write_piece(batch_id, "held", 0, part, t)


def _held_parts(plan: Plan, names: list[str]) -> list | dict:
    """The inverse of :func:`_write_held` over every task's pieces, in
    order: ``advance``'s ``held``."""
    tables = [plan.checkpoint.loc.read_table(n) for n in names]
    if not plan.multi:
        return tables
    out: dict = {}
    for t in tables:
        for n, x in split_union(plan.input_schema, t).items():
            out.setdefault(n, []).append(x)
    return out


class _Filter:
    """The task's watermark filter, built and restored once per task."""

    def __init__(self, plan: Plan, filter_state: bytes | None):
        from .device import use_task_gpu

        use_task_gpu(plan.backend)
        self.f = plan.watermark.build(plan.backend).bind(plan.input_schema)
        if filter_state:
            self.f.restore(store.bytes_to_table(filter_state))

    def advance(self, stats: list[dict], now_iso: str, end: bool = False, held: list | dict | None = None) -> Any:
        """Fold every input partition's statistics: this batch's watermark
        (``end``: the end-of-input drain, :meth:`~gpuwm.WatermarkFilter.end_input`;
        ``held``: the rows alignment holds back after it, None: unknown here)."""
        if self.f.profile.emit != "on-batch":  # on-event, on-periodic: arrival order within a split
            _check_split_locality(stats)
        self.f.advance(stats, datetime.fromisoformat(now_iso), held=held)
        if end:
            self.f.end_input()
        return self.f.output_watermark


def _filter_partition(plan: Plan, filt: _Filter, batches: Iterator[pa.RecordBatch], batch_id: int,
                      part: int, now_iso: str | None, queued: str = "prepend",
                      end: bool = False, counts: dict | None = None) -> tuple[Any, dict, list | dict, Any]:
    """Filter one input partition against the previous batch's filter state.
    On the GPU the Arrow batch moves to the device here, once, and the kept
    rows come back as a device :class:`~gpuwm.frame.Frame`. Alignment:
    ``queued`` says where the rows held before come from (see
    ``filter_local``); none is held back at the end of the input. Returns
    (kept rows, statistics, held rows, the rows it dropped as late where the
    first stage counts them (``plan.counts_filter_late``), else None)."""
    import gpuwm
    from gpuwm.frame import Frame

    t_start = time.perf_counter()
    batches = list(batches)
    t_read = time.perf_counter()
    schema = union_schema(plan.input_schema) if plan.multi else plan.input_schema
    table = pa.Table.from_batches(batches, schema=batches[0].schema) if batches else schema.empty_table()
    table = table.cast(schema) if not table.schema.equals(schema, check_metadata=False) else table
    backend = gpuwm.get_backend(plan.backend)
    dropped = None
    held: list | dict = {} if plan.multi else []
    align = {"held_out": held, "queued": queued, "align": not end,
             "now": None if now_iso is None else datetime.fromisoformat(now_iso)} if plan.aligned else {}
    if plan.multi:  # several inputs' rows: each input's, in its own schema, to its own filter
        data = {n: Frame.from_arrow(t, backend) if backend.is_gpu else t
                for n, t in split_union(plan.input_schema, table).items()}
        late_by: dict | None = None if plan.late is None else {}
        kept, stats = filt.f.filter_local(data, late_out=late_by, **align)
        write_late(plan, batch_id, None, part, {n: got[0] for n, got in (late_by or {}).items() if got}, "filter")
    else:
        data = Frame.from_arrow(table, backend) if backend.is_gpu else table
        late: list | None = None if plan.late is None and not plan.counts_filter_late else []
        kept, stats = filt.f.filter_local(data, late_out=late, **align)
        if late and plan.late is not None:
            write_late(plan, batch_id, None, part, {None: late[0]}, "filter")
        if late and plan.counts_filter_late:
            dropped = late[0] if isinstance(late[0], pa.Table) else late[0].to_arrow()
    stats["read_s"] = t_read - t_start
    stats["t_read"] = t_read
    stats["malformed"] = (counts or {}).get("malformed", 0)  # what a direct source counted (Kafka)
    stats["filtered"] = (counts or {}).get("filtered", 0)  # the source's rows a filter under the watermark dropped
    stats["offsets_lost"] = (counts or {}).get("offsets_lost", 0)
    stats["kafka"] = add_counts({}, counts or {}, KAFKA_COUNTS)  # who read its ranges, and the codec's cost
    stats["part"] = part
    return kept, stats, held, dropped


def _input(plan: Plan, batches: Iterator[pa.RecordBatch], direct: dict | None,
           counts: dict) -> Iterator[pa.RecordBatch]:
    """The task's input rows: from Spark, or — ``direct`` given — made here
    (:mod:`gpuwm.spark.io.sources`): read from the files or Kafka ranges, or
    generated for the Nexmark splits, whose numbers Spark sent. ``counts``
    gets what the source counts (malformed Kafka messages, lost offsets)."""
    if direct is None:
        return batches
    from ..io.sources import generate_nexmark, read_files, read_kafka, read_union_files

    options = plan.checkpoint.loc.options  # Spark's spark.hadoop.fs.* settings: the input's file system's too
    if plan.multi:
        return read_union_files(plan, direct["files"], batches, options, direct.get("steps"), counts)
    if "files" in direct:
        return read_files(direct["files"], plan.input_schema, batches, options, direct.get("steps"),
                          direct.get("schema"), counts)
    if "kafka" in direct:
        return read_kafka(direct["kafka"], batches, counts)
    return generate_nexmark(direct["nexmark"], batches, plan.input_schema, counts)


# -- task 1: filter each input partition ---------------------------------------------
def filter_task(plan: Plan, filter_state: bytes | None, batches: Iterator[pa.RecordBatch],
                direct: dict | None = None, partition: int | None = None,
                batch_id: int = -1, now_iso: str | None = None, end: bool = False) -> Iterator[pa.RecordBatch]:
    """``partition``: this input partition's index (default: Spark's task
    context), for stages whose output depends on arrival order and for the
    name of its late rows' file. ``direct={"held": True}``: the task that
    reads the rows alignment held back before this batch (partition -1:
    they come before the batch's new rows)."""
    from gpuwm.partition import vnode_of

    if partition is None and (plan.arrival_order or plan.late is not None or plan.aligned or plan.graph):
        from pyspark import TaskContext

        partition = TaskContext.get().partitionId()
    filt = _Filter(plan, filter_state)
    if direct is not None and direct.get("held"):
        got = filt.f.held_table()
        got = None if not filt.f.held_rows else to_union(plan.input_schema, got) if plan.multi else got
        kept, stats, held, dropped = _filter_partition(plan, filt, iter([] if got is None else got.to_batches()),
                                                       batch_id, partition, now_iso, "only", end)
    else:
        counts: dict = {}
        kept, stats, held, dropped = _filter_partition(plan, filt, _input(plan, batches, direct, counts), batch_id,
                                                       partition or 0, now_iso, "skip", end, counts)
    vn = None
    if plan.graph:  # each input's rows, as pieces, to the segments that read them; none cross Spark's shuffle
        kept = {n: t if isinstance(t, pa.Table) else t.to_arrow() for n, t in kept.items()}
        stats["sent"] = exchange.send_inputs(plan, batch_id, partition, kept)
        kept = shuffled_schema(plan).empty_table()
    elif plan.multi:  # each input's rows to the vnodes of their join keys, as one union
        kept = {n: t if isinstance(t, pa.Table) else t.to_arrow() for n, t in kept.items()}
        join = plan.stages[0]
        vns = [vnode_of(kept[n], join.input_keys(n), plan.vnodes) for n in plan.watermark.names if n in kept]
        import numpy as np

        vn = np.concatenate(vns) if vns else np.zeros(0, dtype=np.int32)
        kept = to_union(plan.input_schema, kept)
    elif plan.pre_aggregates:  # partial aggregates per (window, key) of this partition
        first = plan.build(0)
        kept = first.partials(kept)
        if dropped is not None and dropped.num_rows:  # the late rows' groups, for Spark's dropped-rows figure
            kept = pa.concat_tables([kept, first.ghost_partials(dropped)])
    elif not isinstance(kept, pa.Table):  # device rows go back to the host for the shuffle
        kept = kept.to_arrow()
    if plan.arrival_order:  # (input partition, position): each vnode restores this order
        seq = pa.array(range(partition << 32, (partition << 32) + kept.num_rows), pa.int64())
        kept = kept.append_column(SEQ, seq)
    schema = shuffled_schema(plan)
    v = plan.vnodes
    out_schema = stage1_schema(plan)
    if vn is None:
        vn = vnode_of(kept, plan.segments[0].keys, v)
    n = kept.num_rows
    if n:
        data = kept.append_column("__vnode", pa.array(vn, pa.int32()))
        data = data.append_column("__kind", pa.array([KIND_DATA] * n, pa.int8()))
        data = data.append_column("__stats", pa.nulls(n, pa.string()))
        yield from data.cast(out_schema).to_batches()
    if plan.aligned:
        stats["held"] = _write_held(plan, batch_id, partition, held)
    stats["task_s"] = time.perf_counter() - stats.pop("t_read")
    st = json.dumps(stats)
    cols = {f.name: pa.nulls(v, f.type) for f in schema}
    cols["__vnode"] = pa.array(range(v), pa.int32())
    cols["__kind"] = pa.array([KIND_STATS] * v, pa.int8())
    cols["__stats"] = pa.array([st] * v, pa.string())
    yield from pa.table(cols, schema=out_schema).to_batches()


# -- task 2: the first segment of one vnode ------------------------------------------
def vnodes_task(plan: Plan, filter_state: bytes | None, now_iso: str, batch_id: int, prev: store.Prev | None,
                batches: Iterator[pa.RecordBatch], end: bool = False) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a shuffle partition: every vnode hashed into it. Each
    vnode's rows (or partials) come with every input partition's statistics."""
    import numpy as np

    batches = list(batches)
    if not batches:
        return
    t_start = time.perf_counter()
    table = pa.Table.from_batches(batches)
    kind = table.column("__kind").to_numpy(zero_copy_only=False)
    vn = table.column("__vnode").to_numpy(zero_copy_only=False)
    filt = _Filter(plan, filter_state)
    stats = None
    schema = shuffled_schema(plan)
    for v in np.unique(vn).tolist():  # a few vnodes per partition
        mine = vn == v
        if stats is None:  # every vnode got every partition's statistics: fold them once per task
            got = table.filter(pa.array(mine & (kind == KIND_STATS)))
            stats = [json.loads(s) for s in got.column("__stats").to_pylist()]
            held = None
            if plan.aligned and v == 0:  # vnode 0 saves the filter's state: the rows held, in partition order
                held = _held_parts(plan, [s["held"] for s in sorted(stats, key=lambda s: s["part"]) if s["held"]])
            wm = filt.advance(stats, now_iso, end, held)
        rows = table.filter(pa.array(mine & (kind == KIND_DATA))).select(schema.names).cast(schema)
        if plan.arrival_order:  # the shuffle mixed the input partitions: back in input order
            rows = rows.sort_by(SEQ).drop_columns([SEQ])
        if plan.multi:
            rows = split_union(plan.input_schema, rows)
        yield from run_segment(plan, 0, v, rows, wm, batch_id, prev, stats=stats, filt=filt,
                               t_start=t_start).to_batches()
        t_start = time.perf_counter()


def named_input(fn, names: list[str], batches: Iterator[pa.RecordBatch]):
    """``fn`` over ``batches`` whose columns are renamed ``names`` (their
    own: the driver's :func:`~gpuwm.spark.driver.loop.map_in_arrow` handed
    them to Spark by position)."""
    return fn(pa.RecordBatch.from_arrays(b.columns, names=names) for b in batches)


def single_task(plan: Plan, filter_state: bytes | None, now_iso: str, batch_id: int, prev: store.Prev | None,
                batches: Iterator[pa.RecordBatch], direct: dict | None = None,
                end: bool = False) -> Iterator[pa.RecordBatch]:
    """One vnode, one task: the whole batch (input partitions coalesced, each
    still contiguous and in order) is filtered and handed straight to the
    stages, with no shuffle and no Arrow round trip in between (on the GPU
    the rows stay on the device from the filter to the first drain)."""
    filt = _Filter(plan, filter_state)
    counts: dict = {}
    kept, stats, held, dropped = _filter_partition(plan, filt, _input(plan, batches, direct, counts), batch_id, 0,
                                                   now_iso, end=end, counts=counts)
    stats["task_s"] = time.perf_counter() - stats.pop("t_read")
    wm = filt.advance([stats], now_iso, end, held if plan.aligned else None)
    yield from run_segment(plan, 0, 0, kept, wm, batch_id, prev, stats=[stats], filt=filt,
                           t_start=time.perf_counter(), dropped=dropped).to_batches()


def job_args(fstate: bytes | None, now_iso: str, batch_id: int, prev: store.Prev | None, direct: dict,
             end: bool) -> str:
    """:func:`single_task`'s arguments for one batch, as the local property
    :func:`planned_single_task` reads."""
    import base64
    import pickle

    return base64.b64encode(pickle.dumps((fstate, now_iso, batch_id, prev, direct, end))).decode("ascii")


def planned_single_task(plan: Plan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """:func:`single_task` in a job the driver planned once: this batch's
    arguments come from the job's local property :data:`ARGS_PROPERTY`
    (:func:`job_args`), set by the driver around the job."""
    import base64
    import pickle

    from pyspark import TaskContext

    ctx = TaskContext.get()
    got = ctx.getLocalProperty(ARGS_PROPERTY) if ctx is not None else None
    if not got:
        raise StateError(f"the task found no batch arguments in local property {ARGS_PROPERTY!r}; the batch is "
                         "not committed")
    fstate, now_iso, batch_id, prev, direct, end = pickle.loads(base64.b64decode(got))
    yield from single_task(plan, fstate, now_iso, batch_id, prev, batches, direct=direct, end=end)


# -- task 3: a later segment ----------------------------------------------------------
def segment_task(plan: Plan, seg: int, batch_id: int, prev: store.Prev | None,
                 batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``repartition(tasks, "__dest").mapInArrow``: the results of earlier
    tasks pass through; each destination vnode hashed here runs segment
    ``seg`` on the rows sent to it, with the watermark sent beside them. In
    a graph: on each stream sent to it, with that stream's watermark; and
    the flow rows for later segments pass through too."""
    from .device import use_task_gpu

    batches = list(batches)
    if not batches:
        return
    use_task_gpu(plan.backend)
    got = exchange.Received(plan.checkpoint, batches, seg if plan.graph else None)
    yield from got.results.to_batches()
    if plan.graph:  # each destination vnode's streams, each with the least of its senders' watermarks
        for v in sorted({d for d, _ in got.watermark}):
            t_start = time.perf_counter()
            names = sorted(f for d, f in got.watermark if d == v)
            rows = {f: got.rows((v, f), plan.stream_schema(f)) for f in names}
            yield from run_segment(plan, seg, v, rows, {f: got.watermark[(v, f)] for f in names}, batch_id, prev,
                                   t_start=t_start).to_batches()
        return
    first = plan.segments[seg].stages[0]
    for v in sorted(got.watermark):
        t_start = time.perf_counter()
        rows = got.rows(v, plan.schemas[first])
        yield from run_segment(plan, seg, v, rows, got.watermark[v], batch_id, prev,
                               t_start=t_start).to_batches()


def run_segment(plan: Plan, seg: int, vnode: int, rows: Any, wm: Any, batch_id: int,
                prev: store.Prev | None, *, stats: list[dict] | None = None, filt: _Filter | None = None,
                t_start: float, dropped: pa.Table | None = None) -> pa.Table:
    """Run segment ``seg``'s stages on ``vnode``: each pushes what the one
    before released and drains with the one before's output watermark;
    save each stage's state; send the last stage's rows on (to the next
    segment, the sort's ranges, or the sink). Returns the flow rows."""
    import gpuwm

    segment = plan.segments[seg]
    flows: list[pa.Table] = []
    per_stage: dict[str, dict] = {}
    versions: dict[str, str] = {}  # the state versions this task saved, for the driver's commit
    files: set[str] = set()
    kernel_s = save_s = 0.0
    out = rows
    low = high = None
    # a graph's streams so far, by name: (rows, output watermark); the named inputs' first (after
    # segment 0: the streams sent to this one, each with its own watermark)
    streams: dict[str, tuple[Any, Any]] = {}
    if plan.graph:
        streams = {n: (rows.get(n), wm[n]) for n in wm} if isinstance(wm, dict) else \
            {n: (rows.get(n), wm) for n in plan.watermark.names}
    for i in segment.stages:
        if plan.graph:  # what the stage reads, and the least of their watermarks (Spark's WatermarkPropagator)
            feeds = plan.feeds(i)
            got = [streams[f] for f in feeds]
            wm = exchange.least_watermark([w for _, w in got])
            out = {f: r for f, (r, _) in zip(feeds, got) if r is not None} if plan.stages[i].takes_inputs \
                else got[0][0]
            if out is None:
                out = plan.schemas[i].empty_table()
        t0 = time.perf_counter()
        op, places = store.load_operator(plan, i, prev, vnode)
        op.keep_late(plan.late is not None)
        before, rows_before = op.counters(), op.state_rows
        if dropped is not None and i == 0:  # what the filter dropped before it (one task: Spark's late groups)
            op.count_late(dropped)
        low = op.drained_watermark  # for the sort's ranges: [its previous drain, this one)
        n_in = _num_rows(out)
        if i == 0 and plan.pre_aggregates:
            updates = op.push_partials(out) if n_in else None
        else:
            updates = op.push(out) if n_in else None
        released = op.release(wm)
        if plan.late is not None:
            write_late(plan, batch_id, i, vnode, op.take_late(), op.late_reason)
        out = _concat([updates, released.rows], plan.outputs[i])
        t1 = time.perf_counter()
        saved = store.save_operator(plan.checkpoint, batch_id, vnode, i, op, places)
        store.keep_operator(plan, i, vnode, batch_id, saved, op)
        versions[f"{i}/{vnode}"] = saved.name
        files.update(saved.files)
        t2 = time.perf_counter()
        kernel_s += t1 - t0
        save_s += t2 - t1
        after = op.counters()
        per_stage[str(i)] = {**{k: after[k] - before.get(k, 0) for k in after}, "rows_pushed": n_in,
                             "rows_emitted": out.num_rows, "state_rows": op.state_rows, "state_rows_before": rows_before,
                             "state_bytes": op.state_bytes, "kernel_s": t1 - t0, "state_save_s": t2 - t1}
        high, wm = wm, released.watermark
        if plan.graph:
            streams[plan.graph[i][0]] = (out, wm)
    last = seg == len(plan.segments) - 1
    if plan.graph and last:
        out = streams[plan.graph[-1][0]][0]
    if not segment.stages and not isinstance(out, pa.Table) and not plan.graph:
        out = out.to_arrow()
    emitted = 0 if plan.graph and not last else out.num_rows
    written: dict = {}
    if plan.graph and not last and seg == 0:  # the filter tasks wrote the inputs' pieces: vnode 0 names them
        if vnode == 0:
            flows.append(exchange.inputs_sent(plan, [s["sent"] for s in sorted(stats, key=lambda s: s["part"])], wm))
    elif plan.graph and not last:  # each stream made here to the later segments that read it, by their keys
        for j, f, keys in plan.sends(seg):
            got, w = streams[f]
            got = got if got is None or isinstance(got, pa.Table) else got.to_arrow()
            flows.append(exchange.send_stream(plan, batch_id, vnode, j, f, keys, got, w))
    elif not last:  # to the next segment's vnodes, by its keys
        from gpuwm.partition import vnode_of

        nxt = plan.segments[seg + 1]
        flows.append(exchange.send(plan.checkpoint, batch_id, f"seg-{seg + 1}", vnode, out,
                                   vnode_of(out, nxt.keys, nxt.tasks), nxt.tasks, wm))
        emitted = 0
    elif plan.range_exchange:  # the sort's released rows, by event-time range of [low, high)
        op_parts = op.range_parts(out, low, high, plan.vnodes) if out.num_rows else []
        flows.append(exchange.send(plan.checkpoint, batch_id, "ranges", vnode, out, op_parts, plan.vnodes, wm))
    else:
        written = write_output(plan, batch_id, vnode, out)
    metrics = {
        "segment": seg, "vnode": vnode, "rows_to_operator": _num_rows(rows), "rows_emitted": emitted,
        "stages": per_stage, "kernel_s": kernel_s, "state_save_s": save_s,
        "backend": gpuwm.get_backend(plan.backend).name, "vnode_task_s": time.perf_counter() - t_start,
        "versions": versions, "files": sorted(files), **written,  # the sink's own count where it filters
    }
    if filt is not None:
        f = filt.f
        metrics.update({
            "input_rows": sum(s["rows"] + s.get("filtered", 0) for s in stats), "late_rows": sum(s["late"] for s in stats),
            "null_rows": sum(s["nulls"] for s in stats), "watermark": f.watermark_raw,
            "output_watermark": f.output_watermark_raw, "max_event_time": f.max_event_time_raw,
            "filter_task_s": sum(s.get("task_s", 0) for s in stats), "read_s": sum(s.get("read_s", 0) for s in stats),
            "rows_released": sum(s.get("released", 0) for s in stats),
            "malformed_rows": sum(s.get("malformed", 0) for s in stats),
            "offsets_lost": sum(s.get("offsets_lost", 0) for s in stats),
        })
        for s in stats:
            add_counts(metrics, s.get("kafka", {}))
        if plan.multi:
            metrics["input_rows_by_input"] = {n: sum(s["inputs"][n]["rows"] for s in stats if n in s.get("inputs", {}))
                                              for n in plan.watermark.names}
        if vnode == 0:  # the filter's state after this batch, for the driver's commit to name
            metrics["filter"] = plan.checkpoint.write_filter(batch_id, f.snapshot())
    flows.append(exchange.result_row(metrics))
    return pa.concat_tables(flows)


def _num_rows(rows: Any) -> int:
    """Rows of a table or Frame, or of several inputs' (``{input: rows}``)."""
    return sum(t.num_rows for t in rows.values()) if isinstance(rows, dict) else rows.num_rows


def _concat(tables: list[pa.Table | None], schema: pa.Schema) -> pa.Table:
    """What a stage emitted in a batch: rows its push returned (a window's
    updates, a dedup's first rows) and then what its drain released."""
    got = [t for t in tables if t is not None and t.num_rows]
    if not got:
        return schema.empty_table()
    return got[0] if len(got) == 1 else pa.concat_tables(got)


def _check_split_locality(stats: list[dict]) -> None:
    """``on-event`` orders a split's rows by arrival, which only holds when
    each split's rows of a batch came from one input partition."""
    seen: set = set()
    for st in stats:
        for key, _ in st.get("splits", ()):
            key = split_key(key)
            if key in seen:
                raise ConfigError(
                    f"emit='on-event' needs each split's rows in one input partition, but split {key!r} came "
                    "from several in this micro-batch; use emit='on-batch', vnodes=1, or a source partitioned "
                    "by split (Kafka, nexmark)")
            seen.add(key)
