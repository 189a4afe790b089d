"""Where a task's output goes: Parquet files per batch and part, or Arrow
bytes for the driver to print (console)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from .plan import Sink
from .store import table_to_bytes


def write_output(sink: Sink, batch_id: int, part: int, out: pa.Table | None) -> bytes:
    """The sink's output of one task: ``<path>/batch_id=<N>/part-<part>.parquet``
    (written under a temporary name, then renamed: a replay rewrites it), or,
    for the console sink, the rows as Arrow IPC bytes for the driver."""
    if out is None or not out.num_rows:
        return b""
    if sink.kind != "parquet":
        return table_to_bytes(out)
    _write_parquet(os.path.join(sink.path, f"batch_id={batch_id}"), f"part-{part:05d}", out)
    return b""


def clear_batch(plan, batch_id: int) -> None:
    """Before a batch runs: remove what an earlier attempt of it wrote to the
    Parquet sink and the late rows. A replay rewrites every part it writes,
    but one over another number of vnodes (a rescale between the attempts)
    would leave some of the first attempt's parts beside them."""
    import glob
    import shutil

    dirs = []
    if plan.sink.kind == "parquet":
        dirs.append(os.path.join(plan.sink.path, f"batch_id={batch_id}"))
    if plan.late is not None:
        for pattern in ("", "*", "_stage*"):
            dirs += glob.glob(os.path.join(plan.late.path, pattern, f"batch_id={batch_id}"))
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def _write_parquet(d: str, name: str, table: pa.Table) -> None:
    """``<d>/<name>.parquet``, written under a temporary name and renamed:
    a replay rewrites it whole."""
    os.makedirs(d, exist_ok=True)
    final = os.path.join(d, name + ".parquet")
    tmp = f"{final}.tmp-{os.getpid()}"
    pq.write_table(table, tmp)
    os.replace(tmp, final)


#: the column a late-row sink adds: why the row was dropped
LATE_REASON = "late_reason"


def write_late(plan, batch_id: int, stage: int | None, part: int, rows: pa.Table | dict | None, reason: str,
               input: str | None = None) -> None:
    """Rows dropped as late, kept aside: ``<late>/batch_id=<N>/<name>.parquet``
    with their columns and ``late_reason`` — ``filter-<input partition>``
    for the watermark filter's, ``stage0-<vnode>`` for the first stage's
    (both in the input's schema) — and, for a later stage of a chain (whose
    input has other columns), ``<late>/_stage<i>/batch_id=<N>/vnode-<V>.parquet``
    (a folder Spark's and Arrow's dataset readers skip when reading ``<late>``).
    Written under a temporary name and renamed: a replay rewrites it.
    Several inputs' rows (``rows`` a dict by input, from a join; or
    ``input`` named) go below ``<late>/<input>/``, each in its input's schema."""
    if isinstance(rows, dict):
        for name, t in rows.items():
            write_late(plan, batch_id, stage, part, t, reason, input=name)
        return
    if rows is None or not rows.num_rows:
        return
    root = plan.late.path if input is None else os.path.join(plan.late.path, input)
    if stage is None:
        d, name = os.path.join(root, f"batch_id={batch_id}"), f"filter-{part:05d}"
    elif stage == 0:
        d, name = os.path.join(root, f"batch_id={batch_id}"), f"stage0-{part:05d}"
    else:
        d, name = os.path.join(root, f"_stage{stage}", f"batch_id={batch_id}"), f"vnode-{part:05d}"
    _write_parquet(d, name, rows.append_column(LATE_REASON, pa.array([reason] * rows.num_rows, pa.string())))
