"""Rows from one stage's tasks to the next one's, inside a micro-batch's job.

A task writes the rows it sends as Arrow IPC pieces under the checkpoint
(through the storage seam, on whatever file system every executor reaches),
one per destination and attempt, and only the pieces' names cross Spark's shuffle — one *flow
row* per destination, so that every destination task runs (and drains its
state) whether rows reach it or not. The same flow rows carry the tasks'
results through to the driver: their metrics as JSON, naming what they
wrote through the seam (state versions, the filter state, console output).
Only integers and strings cross Spark — types the RAPIDS Accelerator's GPU
``mapInArrow`` takes, so that it can place gpuwm's stages on the GPU.

Two exchanges use it: between segments of a pipeline (rows hashed on the
next segment's keys; a global segment on one task), and the stream sort's
event-time ranges (each vnode's released rows cut into ranges, each range
merged by one task into one output part: the parts in order are one ordered
stream).
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...drained import decode_instant, encode_instant
from ..storage.checkpoint import Checkpoint

#: what every task after the filter returns: exchange rows (``__dest``,
#: ``__piece`` — "" when no row goes there —, ``__wm`` the watermark the
#: destination drains with; in a graph, ``__to`` = ``"<segment>:<stream>"``,
#: the segment and the stream the rows are for) and result rows (``__metrics`` set)
FLOW_SCHEMA = pa.schema([("__dest", pa.int32()), ("__vnode", pa.int32()), ("__piece", pa.string()),
                         ("__wm", pa.string()), ("__metrics", pa.string()), ("__to", pa.string())])


def result_row(metrics: dict) -> pa.Table:
    return pa.table({"__dest": pa.nulls(1, pa.int32()), "__vnode": pa.array([metrics.get("vnode", -1)], pa.int32()),
                     "__piece": pa.nulls(1, pa.string()), "__wm": pa.nulls(1, pa.string()),
                     "__metrics": [json.dumps(metrics)], "__to": pa.nulls(1, pa.string())}, schema=FLOW_SCHEMA)



def least_watermark(watermarks: Sequence[Any]) -> Any:
    """The least of several streams' watermarks; None while any has none."""
    return None if any(w is None for w in watermarks) else min(watermarks)


def send(ck: Checkpoint, batch_id: int, tag: str, vnode: int, rows: pa.Table | None, dest: Any, ndest: int,
         watermark: Any, to: str | None = None) -> pa.Table:
    """Write ``rows`` (row i to destination ``dest[i]``, stable) as one piece
    per destination; the flow rows naming them, one per destination (``to``:
    their ``__to``, a graph's segment and stream)."""
    pieces = [""] * ndest
    if rows is not None and rows.num_rows:
        dest = np.asarray(dest)
        order = np.argsort(dest, kind="stable")
        bounds = np.searchsorted(dest[order], np.arange(ndest + 1))
        ordered = rows if np.all(order[:-1] <= order[1:]) else rows.take(pa.array(order))
        for r in range(ndest):
            lo, hi = int(bounds[r]), int(bounds[r + 1])
            if hi > lo:
                pieces[r] = ck.write_piece(batch_id, tag, r, vnode, ordered.slice(lo, hi - lo))
    return _flow_rows(list(range(ndest)), [vnode] * ndest, pieces, watermark, [to] * ndest)


def _flow_rows(dest: list[int], senders: list[int], pieces: list[str], watermark: Any, to: list) -> pa.Table:
    """Flow rows: each destination, its sender, its piece ("" none) and
    ``__to``, all with ``watermark``."""
    wm = json.dumps(encode_instant(watermark))
    return pa.table({"__dest": pa.array(dest, pa.int32()), "__vnode": pa.array(senders, pa.int32()),
                     "__piece": pa.array(pieces, pa.string()), "__wm": [wm] * len(dest),
                     "__metrics": pa.nulls(len(dest), pa.string()), "__to": pa.array(to, pa.string())},
                    schema=FLOW_SCHEMA)


def send_stream(plan: Any, batch_id: int, sender: int, segment: int, stream: str, keys: Sequence[str],
                rows: pa.Table | None, watermark: Any) -> pa.Table:
    """A graph's stream ``stream`` from ``sender`` to the tasks of segment
    ``segment`` that read it, routed by the reader's ``keys``
    (:meth:`~gpuwm.spark.executor.plan.Plan.sends`): :func:`send` with the
    stream's piece tag and ``__to``."""
    from gpuwm.partition import vnode_of

    rows = plan.stream_schema(stream).empty_table() if rows is None else rows
    ndest = plan.segments[segment].tasks
    names = list(plan.watermark.names) + [n for n, _ in plan.graph]
    return send(plan.checkpoint, batch_id, f"seg-{segment}-{names.index(stream)}", sender, rows,
                vnode_of(rows, keys, ndest), ndest, watermark, to=f"{segment}:{stream}")


def send_inputs(plan: Any, batch_id: int, partition: int, kept: dict[str, pa.Table]) -> list[list]:
    """A graph's filter task over several vnodes: each input's kept rows of
    input partition ``partition`` written as pieces for every segment that
    reads the input, by the reader's keys (:meth:`~gpuwm.spark.executor.plan.Plan.sends`
    of segment 0). Their ``[destination, piece, __to]`` list, which segment 0
    names to the readers once the batch's watermark is known
    (:func:`inputs_sent`)."""
    out = []
    for j, f, keys in plan.sends(0):
        t = send_stream(plan, batch_id, partition, j, f, keys, kept.get(f), None)
        out += [list(r) for r in zip(*(t.column(c).to_pylist() for c in ("__dest", "__piece", "__to")))]
    return out


def inputs_sent(plan: Any, sent: Sequence[list], watermark: Any) -> pa.Table:
    """The flow rows naming what each input partition's filter task wrote
    (``sent``: :func:`send_inputs`'s lists, in partition order), each
    partition a sender of its own so that its rows keep their order; and
    one row with no piece per reader's destination, which runs it and
    drains its state when no partition sent anything (a batch without
    data has no input partition)."""
    rows = [(d, -1, "", f"{j}:{f}") for j, f, _ in plan.sends(0) for d in range(plan.segments[j].tasks)]
    rows += [(d, part, p, to) for part, got in enumerate(sent) for d, p, to in got if p]
    dest, senders, pieces, to = (list(c) for c in zip(*rows)) if rows else ([], [], [], [])
    return _flow_rows(dest, senders, pieces, watermark, to)


class Received:
    """What a shuffle partition of flow rows holds: the results passing
    through, and per destination its pieces (in source-vnode order, so the
    output does not depend on arrival order) and watermark. In a graph
    (``segment`` given) the destinations are ``(vnode, stream)`` pairs of
    that segment, and flow rows for later segments pass through with the
    results, to their own exchange."""

    def __init__(self, ck: Checkpoint, batches: list[pa.RecordBatch], segment: int | None = None):
        self.ck = ck
        t = pa.Table.from_batches(batches, schema=FLOW_SCHEMA) if batches else FLOW_SCHEMA.empty_table()
        is_result = t.column("__metrics").is_valid()
        self.results = t.filter(is_result)
        flow = t.filter(pc.invert(is_result))
        if segment is not None:
            mine = pc.fill_null(pc.starts_with(flow.column("__to"), f"{segment}:"), False)
            self.results = pa.concat_tables([self.results, flow.filter(pc.invert(mine))])
            flow = flow.filter(mine)
        self.pieces: dict[Any, list[tuple[int, str]]] = {}
        self.watermark: dict[Any, Any] = {}
        senders: dict[Any, list] = {}
        cols = ("__dest", "__vnode", "__piece", "__wm", "__to")
        for d, v, path, wm, to in zip(*(flow.column(c).to_pylist() for c in cols)):
            if segment is not None:
                d = (d, to.split(":", 1)[1])
            self.pieces.setdefault(d, [])
            if path:
                self.pieces[d].append((v, path))
            senders.setdefault(d, []).append(decode_instant(json.loads(wm)))
        # the RFC's merger: a destination drains with the least of its senders'
        # watermarks (they differ where a stage holds rows back, e.g. an over-window's leads)
        self.watermark = {d: least_watermark(ws) for d, ws in senders.items()}

    def rows(self, dest: Any, schema: pa.Schema) -> pa.Table:
        paths = [p for _, p in sorted(self.pieces.get(dest, []))]
        if not paths:
            return schema.empty_table()
        return pa.concat_tables([self.ck.loc.read_table(p).cast(schema) for p in paths])


def merge_task(plan: Any, batch_id: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``repartition(vnodes, "__dest").mapInArrow`` after a stream sort's
    range exchange: results pass through; each range hashed here merges its
    pieces (each ordered) with a sort flushed at once and writes them as
    output part ``<range>``, with a result row (its row count and time)."""
    from ..io.sinks import write_output
    from .device import use_task_gpu

    batches = list(batches)
    if not batches:
        return
    use_task_gpu(plan.backend)
    got = Received(plan.checkpoint, batches)
    yield from got.results.to_batches()
    last = len(plan.stages) - 1
    for r in sorted(got.pieces):
        t0 = time.perf_counter()
        rows = got.rows(r, plan.schemas[last])
        op = plan.build(last)
        out = None
        if rows.num_rows:
            op.push(rows)
            out = op.flush()
        m = {"range": r, "rows": 0 if out is None else out.num_rows, **write_output(plan, batch_id, r, out),
             "merge_task_s": time.perf_counter() - t0}
        yield from result_row(m).to_batches()
