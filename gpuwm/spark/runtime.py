"""What runs inside Spark tasks for one micro-batch, and the state store.

One job per micro-batch (DESIGN.md, "Running inside Spark"):

1. ``filter_task`` (``mapInArrow``, one call per input partition): restores
   the watermark filter as of the previous batch, filters its rows, tags each
   kept row with its vnode, and emits its statistics (per-split watermark
   candidates, counts) once *per vnode*.
2. ``vnode_task`` (``repartition(vnodes, "__vnode").mapInArrow``, once per
   vnode; a tick row per vnode makes every vnode run, rows or not): folds every
   partition's statistics into the filter — the same deterministic function
   everywhere — so each vnode knows the combined watermark of this batch,
   then pushes its rows into its operator (kept in executor memory between
   batches, reloaded from the checkpoint on a miss), drains with that
   watermark, writes its new state version and its sink output, and returns
   metrics.

No kernel math here: the tasks call :mod:`gpuwm`'s operators. State files
are Arrow IPC under ``<checkpoint>/gpuwm/state/<batch_id>/``; a batch's
output and state are a function of (state at batch_id - 1, batch input), so
a replayed batch rewrites the same files.

A stream sort over several vnodes adds a third step (``sort_exchange``):
each vnode writes its released rows as event-time range pieces, and
``merge_task`` (``repartition(vnodes, "__range")``) merges each range and
writes it, so the batch's parts in order are one ordered stream.

With one vnode, ``single_task`` runs both steps in one task over the
coalesced input: one narrow stage, no shuffle, and the kept rows go from the
filter to the operator as they are (on the GPU, a device Frame: the batch
crosses to the device once).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from ..watermark import split_key

KIND_DATA, KIND_STATS, KIND_TICK = 0, 1, 2
RESULT_SCHEMA = pa.schema([
    ("vnode", pa.int32()), ("metrics", pa.string()), ("filter_state", pa.binary()), ("payload", pa.binary()),
])

# executor-side cache: (state_dir, vnode) -> (batch_id, operator)
_CACHE: dict[tuple[str, int], tuple[int, Any]] = {}


# -- plan -> operators -----------------------------------------------------------
def _decode(v: Any) -> Any:
    if isinstance(v, dict) and "timedelta_us" in v:
        return timedelta(microseconds=v["timedelta_us"])
    return v


def make_filter(plan: dict):
    import gpuwm

    w = plan["watermark"]
    extra = {"allowed_lateness": _decode(w["allowed_lateness"])} if "allowed_lateness" in w else {}
    return gpuwm.WatermarkFilter(
        w["column"], delay=_decode(w["delay"]), profile=w["profile"], emit=w["emit"], split=w["split"],
        idle_timeout=_decode(w["idle_timeout"]), max_drift=_decode(w["max_drift"]), backend=plan["backend"],
        **extra, **w["knobs"],
    )


def make_operator(plan: dict):
    import gpuwm

    op = plan["operator"]
    if op is None:
        return None
    profile = plan["watermark"]["profile"]
    if op["kind"] == "sort":
        return gpuwm.StreamSort(op["column"], key=op["key"], profile=profile, backend=plan["backend"])
    if op.get("session") is not None:
        win = gpuwm.Session(op["column"], _decode(op["session"]))
    elif op["slide"] is None:
        win = gpuwm.Tumble(op["column"], _decode(op["size"]))
    else:
        win = gpuwm.Hop(op["column"], size=_decode(op["size"]), slide=_decode(op["slide"]))
    aggs = {k: tuple(v) for k, v in op["aggs"].items()}
    return gpuwm.WindowAggregate(win, by=op["by"], aggs=aggs, emit=op["emit"], profile=profile,
                                 backend=plan["backend"])


# -- Arrow IPC helpers -------------------------------------------------------------
def table_to_bytes(t: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue()


def bytes_to_table(b: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(b)).read_all()


# -- state store -------------------------------------------------------------------
def state_root(checkpoint: str) -> str:
    return os.path.join(checkpoint, "gpuwm", "state")


def batch_dir(checkpoint: str, batch_id: int) -> str:
    return os.path.join(state_root(checkpoint), f"{batch_id:010d}")


def _atomic_dir(final: str, write) -> None:
    """Write a directory completely under a temporary name, then rename it."""
    tmp = f"{final}.tmp-{os.getpid()}-{time.monotonic_ns()}"
    os.makedirs(tmp)
    write(tmp)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.replace(tmp, final)


def _vnode_dir(checkpoint: str, batch_id: int, vnode: int) -> str:
    return os.path.join(batch_dir(checkpoint, batch_id), f"vnode-{vnode:05d}")


def _write_table(path: str, t: pa.Table) -> None:
    with pa.OSFile(path, "wb") as fh, pa.ipc.new_stream(fh, t.schema) as w:  # no in-memory copy
        w.write_table(t)


def save_operator(checkpoint: str, batch_id: int, vnode: int, op: Any, prev_batch: int | None = None) -> None:
    """Write the operator's state as version ``batch_id``: its small tables
    (counters, dictionaries) whole, and its parts — one file per open window,
    one per sort run, one for all open sessions — under ``parts/``. A part the operator does not need
    written again is a hard link to its file in version ``prev_batch`` (the
    version the operator was loaded from; copied where the file system has no
    hard links), so a batch writes what it changed, not the whole state, and
    every version stays complete on its own for replay and clean-up."""
    snap = op.snapshot(rows=False)
    tables = snap if isinstance(snap, dict) else {"sort": snap}
    parts = op.state_parts()
    os.makedirs(batch_dir(checkpoint, batch_id), exist_ok=True)
    prev = None if prev_batch is None else os.path.join(_vnode_dir(checkpoint, prev_batch, vnode), "parts")
    written: list[str] = []

    def write(d: str) -> None:
        for name, t in tables.items():
            _write_table(os.path.join(d, f"{name}.arrow"), t)
        os.makedirs(os.path.join(d, "parts"))
        for name, must_write in parts.items():
            dst = os.path.join(d, "parts", f"{name}.arrow")
            src = None if prev is None else os.path.join(prev, f"{name}.arrow")
            if not must_write and src is not None and os.path.exists(src):
                try:
                    os.link(src, dst)
                except OSError:  # no hard links on this file system: copy
                    shutil.copyfile(src, dst)
            else:
                _write_table(dst, op.snapshot_part(name))
                written.append(name)

    _atomic_dir(_vnode_dir(checkpoint, batch_id, vnode), write)
    op.mark_saved(written)


def _read_table(path: str) -> pa.Table:
    with pa.OSFile(path, "rb") as fh:
        return pa.ipc.open_stream(fh).read_all()


def load_operator(plan: dict, batch_id: int | None, vnode: int) -> Any:
    """The operator as of ``batch_id`` (memory if cached there, else disk),
    or a fresh one when ``batch_id`` is None (before the first batch)."""
    if plan["operator"] is None or batch_id is None:
        return make_operator(plan)
    key = (plan["checkpoint"], vnode)
    # taken out of the cache while in use: a task that fails after changing
    # it must not leave it behind as the state of batch_id (the retry reloads)
    hit = _CACHE.pop(key, None)
    if hit is not None and hit[0] == batch_id:
        return hit[1]
    op = make_operator(plan)
    d = _vnode_dir(plan["checkpoint"], batch_id, vnode)
    if not os.path.isdir(d):
        raise FileNotFoundError(f"gpuwm: state of vnode {vnode} for batch {batch_id} is missing under {d}")
    tables = {f.removesuffix(".arrow"): _read_table(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".arrow")}
    pd_ = os.path.join(d, "parts")
    parts = {f.removesuffix(".arrow"): _read_table(os.path.join(pd_, f)) for f in os.listdir(pd_)}
    return op.restore(tables.get("sort", tables), parts)


# -- task 1: filter each input partition ---------------------------------------
def input_schema(plan: dict) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in plan["input_schema"]])


def pre_aggregates(plan: dict) -> bool:
    """Window plans ship partial aggregates through the shuffle, not rows."""
    return plan["operator"] is not None and plan["operator"]["kind"] == "window"


def data_schema(plan: dict) -> pa.Schema:
    """The schema of the data rows stage 1 sends to the vnodes."""
    if pre_aggregates(plan):
        return make_operator(plan).bind(input_schema(plan)).partial_schema()
    return input_schema(plan)


def stage1_schema(plan: dict) -> pa.Schema:
    fields = [f.with_nullable(True) for f in data_schema(plan)]
    return pa.schema(fields + [("__vnode", pa.int32()), ("__kind", pa.int8()), ("__stats", pa.string())])


def _filter_partition(plan: dict, filter_state: bytes | None,
                      batches: Iterator[pa.RecordBatch]) -> tuple[Any, dict]:
    """Filter one input partition against the previous batch's filter state.
    On the GPU the Arrow batch moves to the device here, once, and the kept
    rows come back as a device :class:`~gpuwm.frame.Frame`."""
    import gpuwm
    from gpuwm.frame import Frame

    from .device import use_task_gpu

    t_start = time.perf_counter()
    use_task_gpu(plan["backend"])
    batches = list(batches)
    t_read = time.perf_counter()
    schema = input_schema(plan)
    table = pa.Table.from_batches(batches, schema=batches[0].schema) if batches else schema.empty_table()
    table = table.cast(schema) if not table.schema.equals(schema, check_metadata=False) else table
    f = make_filter(plan)
    if filter_state:
        f.restore(bytes_to_table(filter_state))
    backend = gpuwm.get_backend(plan["backend"])
    data = Frame.from_arrow(table, backend) if backend.is_gpu else table
    kept, stats = f.filter_local(data)
    stats["read_s"] = t_read - t_start
    stats["t_read"] = t_read
    return kept, stats


def _input(plan: dict, batches: Iterator[pa.RecordBatch], direct: dict | None) -> Iterator[pa.RecordBatch]:
    """The task's input rows: from Spark, or — ``direct`` given — made here
    (:mod:`gpuwm.spark.direct`): read from the files, or generated for the
    Nexmark splits, whose numbers Spark sent."""
    if direct is None:
        return batches
    from .direct import generate_nexmark, read_files

    if "files" in direct:
        return read_files(direct["files"], input_schema(plan), batches)
    return generate_nexmark(direct["nexmark"], batches)


def filter_task(plan: dict, filter_state: bytes | None, batches: Iterator[pa.RecordBatch],
                direct: dict | None = None) -> Iterator[pa.RecordBatch]:
    from gpuwm.partition import vnode_of

    batches = _input(plan, batches, direct)
    kept, stats = _filter_partition(plan, filter_state, batches)
    schema = input_schema(plan)
    if pre_aggregates(plan):  # partial aggregates per (window, key) of this partition
        kept = make_operator(plan).partials(kept)
        schema = kept.schema
    elif not isinstance(kept, pa.Table):  # device rows go back to the host for the shuffle
        kept = kept.to_arrow()
    v = plan["vnodes"]
    out_schema = stage1_schema(plan)
    vn = vnode_of(kept, plan["vnode_keys"], v)
    n = kept.num_rows
    if n:
        data = kept.append_column("__vnode", pa.array(vn, pa.int32()))
        data = data.append_column("__kind", pa.array([KIND_DATA] * n, pa.int8()))
        data = data.append_column("__stats", pa.nulls(n, pa.string()))
        yield from data.cast(out_schema).to_batches()
    stats["task_s"] = time.perf_counter() - stats.pop("t_read")
    st = json.dumps(stats)
    cols = {f.name: pa.nulls(v, f.type) for f in schema}
    cols["__vnode"] = pa.array(range(v), pa.int32())
    cols["__kind"] = pa.array([KIND_STATS] * v, pa.int8())
    cols["__stats"] = pa.array([st] * v, pa.string())
    yield from pa.table(cols, schema=out_schema).to_batches()


# -- task 2: one vnode --------------------------------------------------------------
def vnode_task(plan: dict, filter_state: bytes | None, now_iso: str, batch_id: int, prev_batch: int | None,
               table: pa.Table) -> pa.Table:
    """One vnode's rows (or partials) and every input partition's statistics,
    as the shuffle delivers them."""
    t_start = time.perf_counter()
    kind = table.column("__kind").to_numpy(zero_copy_only=False)
    vnode = int(table.column("__vnode")[0].as_py())
    stats = [json.loads(s) for s in table.filter(pa.array(kind == KIND_STATS)).column("__stats").to_pylist()]
    schema = data_schema(plan)
    rows = table.filter(pa.array(kind == KIND_DATA)).select(schema.names).cast(schema)
    return _run_vnode(plan, filter_state, now_iso, batch_id, prev_batch, vnode, stats, rows,
                      pre_aggregated=pre_aggregates(plan), t_start=t_start)


def _run_vnode(plan: dict, filter_state: bytes | None, now_iso: str, batch_id: int, prev_batch: int | None,
               vnode: int, stats: list[dict], rows: Any, pre_aggregated: bool, t_start: float) -> pa.Table:
    """Fold the statistics into the filter (the combined watermark of this
    batch), push ``rows`` (Arrow, or a device Frame) into the vnode's
    operator, drain, save state and sink output; returns the metrics row."""
    import gpuwm

    from .device import use_task_gpu

    use_task_gpu(plan["backend"])
    f = make_filter(plan).bind(input_schema(plan))
    if filter_state:
        f.restore(bytes_to_table(filter_state))
    if f.profile.emit == "on-event":
        _check_split_locality(stats)
    low = f.output_watermark  # what the operators drained with in the batch before
    f.advance(stats, datetime.fromisoformat(now_iso))
    wm = f.output_watermark
    t0 = time.perf_counter()
    op = load_operator(plan, prev_batch, vnode)
    if op is None:
        out = rows if isinstance(rows, pa.Table) else rows.to_arrow()
    else:
        updates = None
        if pre_aggregated:
            op.bind(input_schema(plan))
            if rows.num_rows:
                updates = op.push_partials(rows)  # a table under emit="on-update", else None
        elif rows.num_rows:
            updates = op.push(rows)
        out = op.drain(wm)
        if updates is not None:  # on-update: the changed windows' current values (drain only evicts)
            out = updates
        if not out.num_columns:  # never saw a row: nothing to emit
            out = None
    kernel_s = time.perf_counter() - t0
    if op is not None:
        save_operator(plan["checkpoint"], batch_id, vnode, op, prev_batch)
        _CACHE[(plan["checkpoint"], vnode)] = (batch_id, op)
    save_s = time.perf_counter() - t0 - kernel_s
    exchange = sort_exchange(plan)
    payload = b"" if exchange else write_output(plan, batch_id, vnode, out)
    metrics = {
        "vnode": vnode, "input_rows": sum(s["rows"] for s in stats), "late_rows": sum(s["late"] for s in stats),
        "null_rows": sum(s["nulls"] for s in stats), "rows_to_operator": rows.num_rows,
        "rows_emitted": 0 if out is None else out.num_rows,
        "state_rows": 0 if op is None else op.state_rows,
        "state_bytes": 0 if op is None else op.state_bytes,
        "watermark": f.watermark_raw, "output_watermark": f.output_watermark_raw,
        "kernel_s": kernel_s, "state_save_s": save_s, "backend": gpuwm.get_backend(plan["backend"]).name,
        "max_event_time": f.max_event_time_raw,
        "filter_task_s": sum(s.get("task_s", 0) for s in stats), "read_s": sum(s.get("read_s", 0) for s in stats),
        "vnode_task_s": time.perf_counter() - t_start,
    }
    fstate = table_to_bytes(f.snapshot()) if vnode == 0 else b""
    result = pa.table({"vnode": [vnode], "metrics": [json.dumps(metrics)], "filter_state": [fstate],
                       "payload": [payload]}, schema=RESULT_SCHEMA)
    return _ranged(plan, batch_id, op, out, low, wm, vnode, result) if exchange else result


def write_output(plan: dict, batch_id: int, part: int, out: pa.Table | None) -> bytes:
    """The sink's output of one task: ``<path>/batch_id=<N>/part-<part>.parquet``
    (written under a temporary name, then renamed: a replay rewrites it), or,
    for the console sink, the rows as Arrow IPC bytes for the driver."""
    if out is None or not out.num_rows:
        return b""
    sink = plan["sink"]
    if sink["kind"] != "parquet":
        return table_to_bytes(out)
    d = os.path.join(sink["path"], f"batch_id={batch_id}")
    os.makedirs(d, exist_ok=True)
    final = os.path.join(d, f"part-{part:05d}.parquet")
    tmp = f"{final}.tmp-{os.getpid()}"
    pq.write_table(out, tmp)
    os.replace(tmp, final)
    return b""


# -- task 3 (stream sort over several vnodes): ranges of event time ------------------
def sort_exchange(plan: dict) -> bool:
    """A stream sort over several vnodes: rows are spread over the vnodes by
    (event time, key); each vnode cuts its released rows (ordered) into
    ``vnodes`` event-time ranges of [previous watermark, watermark), and
    ``merge_task`` merges each range's pieces and writes it as the batch's
    part ``<range>``: the parts, in order, are one ordered stream."""
    op = plan["operator"]
    return plan["vnodes"] > 1 and op is not None and op["kind"] == "sort"


#: what the vnodes of a sort exchange send on, one row per (vnode, range): the
#: file holding the vnode's piece of that range ("" for none) and, in the row
#: for range ``vnode % vnodes``, the vnode's result (``RESULT_SCHEMA``)
EXCHANGE_SCHEMA = pa.schema([("__range", pa.int32()), ("__vnode", pa.int32()), ("__piece", pa.string()),
                             ("__metrics", pa.string()), ("__filter_state", pa.binary()),
                             ("__payload", pa.binary())])


def exchange_dir(checkpoint: str, batch_id: int) -> str:
    return os.path.join(checkpoint, "gpuwm", "exchange", f"{batch_id:010d}")


def _ranged(plan: dict, batch_id: int, op: Any, out: pa.Table | None, low: Any, high: Any, vnode: int,
            result: pa.Table) -> pa.Table:
    """Cut a vnode's released rows into the batch's event-time ranges and
    write each piece as Arrow IPC under the checkpoint (the state store's
    file system, which every executor reaches), so that the rows do not
    cross the JVM a second time; only the pieces' names go through Spark."""
    import numpy as np

    parts = plan["vnodes"]
    pieces = [""] * parts
    if out is not None and out.num_rows:
        rng = op.range_parts(out, low, high, parts)
        bounds = np.searchsorted(rng, np.arange(parts + 1))  # ordered rows: each range is a slice
        d = exchange_dir(plan["checkpoint"], batch_id)
        os.makedirs(d, exist_ok=True)
        for r in range(parts):
            if bounds[r + 1] > bounds[r]:
                pieces[r] = os.path.join(d, f"range-{r:05d}-vnode-{vnode:05d}.arrow")
                tmp = f"{pieces[r]}.tmp-{os.getpid()}"
                _write_table(tmp, out.slice(int(bounds[r]), int(bounds[r + 1] - bounds[r])))
                os.replace(tmp, pieces[r])
    own = vnode % parts
    pick = lambda col, empty: [result.column(col)[0].as_py() if r == own else empty for r in range(parts)]  # noqa: E731
    return pa.table({"__range": pa.array(range(parts), pa.int32()), "__vnode": pa.array([vnode] * parts, pa.int32()),
                     "__piece": pieces, "__metrics": pick("metrics", None),
                     "__filter_state": pick("filter_state", None), "__payload": pick("payload", None)},
                    schema=EXCHANGE_SCHEMA)


def merge_task(plan: dict, batch_id: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``repartition(vnodes, "__range").mapInArrow``: the vnodes' result rows
    pass through; each range hashed here merges its pieces (one per vnode,
    each ordered) with a stream sort flushed at once, and writes them as
    output part ``<range>``. Yields a result row per range (vnode
    ``-1 - range``: its row count, time, console payload)."""
    from .device import use_task_gpu

    batches = list(batches)
    if not batches:
        return
    use_task_gpu(plan["backend"])
    t = pa.Table.from_batches(batches)
    meta = t.filter(t.column("__metrics").is_valid())
    if meta.num_rows:
        yield from pa.table([meta.column(c) for c in ("__vnode", "__metrics", "__filter_state", "__payload")],
                            schema=RESULT_SCHEMA).to_batches()
    pieces: dict[int, list[tuple[int, str]]] = {}
    for r, v, path in zip(*(t.column(c).to_pylist() for c in ("__range", "__vnode", "__piece"))):
        pieces.setdefault(r, [])
        if path:
            pieces[r].append((v, path))
    schema = input_schema(plan)
    for r in sorted(pieces):
        t0 = time.perf_counter()
        op = make_operator(plan)
        for _, path in sorted(pieces[r]):  # in vnode order: the output does not depend on arrival order
            op.push(_read_table(path).cast(schema))
        out = op.flush() if pieces[r] else None
        payload = write_output(plan, batch_id, r, out)
        m = {"range": r, "rows": 0 if out is None else out.num_rows, "merge_task_s": time.perf_counter() - t0}
        yield from pa.table({"vnode": [-1 - r], "metrics": [json.dumps(m)], "filter_state": [b""],
                             "payload": [payload]}, schema=RESULT_SCHEMA).to_batches()


def vnodes_task(plan: dict, filter_state: bytes | None, now_iso: str, batch_id: int, prev_batch: int | None,
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a shuffle partition: every vnode hashed into it."""
    import numpy as np

    batches = list(batches)
    if not batches:
        return
    table = pa.Table.from_batches(batches)
    vn = table.column("__vnode").to_numpy(zero_copy_only=False)
    for v in np.unique(vn).tolist():  # a few vnodes per partition
        part = table if (vn == v).all() else table.filter(pa.array(vn == v))
        yield from vnode_task(plan, filter_state, now_iso, batch_id, prev_batch, part).to_batches()


def _check_split_locality(stats: list[dict]) -> None:
    """``on-event`` orders a split's rows by arrival, which only holds when
    each split's rows of a batch came from one input partition."""
    seen: set = set()
    for st in stats:
        for key, _ in st["splits"]:
            key = split_key(key)
            if key in seen:
                from gpuwm.errors import ConfigError

                raise ConfigError(
                    f"emit='on-event' needs each split's rows in one input partition, but split {key!r} came "
                    "from several in this micro-batch; use emit='on-batch', vnodes=1, or a source partitioned "
                    "by split (Kafka, nexmark)")
            seen.add(key)


def single_task(plan: dict, filter_state: bytes | None, now_iso: str, batch_id: int, prev_batch: int | None,
                batches: Iterator[pa.RecordBatch], direct: dict | None = None) -> Iterator[pa.RecordBatch]:
    """One vnode, one task: the whole batch (input partitions coalesced, each
    still contiguous and in order) is filtered and handed straight to the
    operator, with no shuffle and no Arrow round trip in between (on the
    GPU the rows stay on the device from the filter to the drain). The same
    two steps as the shuffled path."""
    kept, stats = _filter_partition(plan, filter_state, _input(plan, batches, direct))
    stats["task_s"] = time.perf_counter() - stats.pop("t_read")
    yield from _run_vnode(plan, filter_state, now_iso, batch_id, prev_batch, 0, [stats], kept,
                          pre_aggregated=False, t_start=time.perf_counter()).to_batches()


def now_for_batch(checkpoint: str, batch_id: int) -> str:
    """The processing time of a batch, fixed at its first attempt so that a
    replay sees the same idleness."""
    d = os.path.join(checkpoint, "gpuwm", "now")
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, str(batch_id))
    if os.path.exists(p):
        with open(p) as fh:
            return fh.read().strip()
    now = datetime.now(timezone.utc).isoformat()
    with open(p + ".tmp", "w") as fh:
        fh.write(now)
    os.replace(p + ".tmp", p)
    return now


def committed_batches(checkpoint: str) -> list[int]:
    root = state_root(checkpoint)
    if not os.path.isdir(root):
        return []
    return sorted(int(n) for n in os.listdir(root)
                  if n.isdigit() and os.path.exists(os.path.join(root, n, "_COMMITTED")))


def load_filter_state(checkpoint: str, batch_id: int) -> bytes | None:
    with open(os.path.join(batch_dir(checkpoint, batch_id), "filter.arrow"), "rb") as fh:
        return fh.read()


def commit_batch(checkpoint: str, batch_id: int, filter_state: bytes, metrics: dict, keep: int = 2) -> None:
    d = batch_dir(checkpoint, batch_id)
    os.makedirs(d, exist_ok=True)
    for name, data in (("filter.arrow", filter_state), ("metrics.json", json.dumps(metrics).encode())):
        tmp = os.path.join(d, name + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, os.path.join(d, name))
    with open(os.path.join(d, "_COMMITTED"), "w") as fh:
        fh.write(str(batch_id))
    root = state_root(checkpoint)
    for name in os.listdir(root):  # old versions: keep the last `keep`
        try:
            b = int(name.split(".")[0])
        except ValueError:
            continue
        if b <= batch_id - keep or ".tmp-" in name:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    ex = os.path.join(checkpoint, "gpuwm", "exchange")  # a sort's range pieces: a replay writes them again
    for name in os.listdir(ex) if os.path.isdir(ex) else ():
        if name.isdigit() and int(name) <= batch_id:
            shutil.rmtree(os.path.join(ex, name), ignore_errors=True)
    nd = os.path.join(checkpoint, "gpuwm", "now")
    for name in os.listdir(nd):
        if name.isdigit() and int(name) <= batch_id - keep:
            os.remove(os.path.join(nd, name))
