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
    d = os.path.join(sink.path, f"batch_id={batch_id}")
    os.makedirs(d, exist_ok=True)
    final = os.path.join(d, f"part-{part:05d}.parquet")
    tmp = f"{final}.tmp-{os.getpid()}"
    pq.write_table(out, tmp)
    os.replace(tmp, final)
    return b""
