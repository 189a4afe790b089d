"""Where a task's output goes: Parquet files per batch and part, or an
exchange piece for the driver to print (console) — through the storage
seam, so a sink may be on any file system Spark's checkpoint may be on."""

from __future__ import annotations

import json

import pyarrow as pa


def write_output(plan, batch_id: int, part: int, out: pa.Table | None) -> dict:
    """The sink's output of one task: ``<path>/batch_id=<N>/part-<part>.parquet``
    (Parquet and foreachBatch sinks; published whole: a replay rewrites
    it); under Spark's file-sink layout ``<path>/part-<part>-<uuid>-c000.snappy.parquet``
    (Spark's name: an attempt's own, visible once the driver logs it in
    ``_spark_metadata``, :class:`~gpuwm.spark.driver.file_log.SparkFileLog`);
    or, for the console sink, the rows as an exchange piece the driver
    prints. What the task's result says of it: ``{"output": piece}`` for
    the console sink's rows, ``{"sink_files": [name]}`` for the file Spark's
    layout wrote, and ``{"rows_emitted": n}`` where the sink's projection
    filters the rows (a query's ``filter``/``HAVING`` after its operator)."""
    if out is None or not out.num_rows:
        return {}
    sink = plan.sink
    said = {}
    if sink.project:
        from ...project import evaluate

        out = evaluate(json.loads(sink.project), out)
        said["rows_emitted"] = out.num_rows
        if not out.num_rows:
            return said
    if not sink.writes_files:
        return {**said, "output": plan.checkpoint.write_piece(batch_id, "out", 0, part, out)}
    if sink.layout == "spark":
        name = spark_file_name(part)
        sink.location.publish_parquet(name, sink.as_written(out))
        return {**said, "sink_files": [name]}
    sink.location.publish_parquet(f"batch_id={batch_id}/part-{part:05d}.parquet", out)
    return said


def spark_file_name(part: int) -> str:
    """A data file's name as Spark's file sink names it (``ManifestFileCommitProtocol``:
    the task's partition, a UUID of its own, the file's count in the task).

    >>> spark_file_name(3)[:11], spark_file_name(3)[-20:], len(spark_file_name(3))
    ('part-00003-', '-c000.snappy.parquet', 67)
    """
    import uuid

    return f"part-{part:05d}-{uuid.uuid4()}-c000.snappy.parquet"


def check_layout(sink) -> None:
    """A Parquet sink's path holds no files of its other layout: Spark's
    readers of a path with a ``_spark_metadata`` log read only the files it
    names, so one layout after the other would hide the first's rows
    (a :class:`ConfigError`, before the first batch)."""
    from ...errors import ConfigError

    if sink is None or sink.kind != "parquet":
        return
    names = sink.location.list()
    other = "_spark_metadata" in names if sink.layout == "batches" else any(n.startswith("batch_id=") for n in names)
    if other:
        said = {"batches": "Spark's file-sink layout (a _spark_metadata log)",
                "spark": "gpuwm's batch_id=<N> layout (an earlier gpuwm's format(\"parquet\"))"}
        raise ConfigError(f"the Parquet sink path {sink.path} holds {said[sink.layout]}: writing the other layout "
                          "there would hide rows from spark.read.parquet; write to a new path")


def clear_batch(plan, batch_id: int) -> None:
    """Before a batch runs: remove what an earlier attempt of it wrote to the
    Parquet sink and the late rows. A replay rewrites every part it writes,
    but one over another number of vnodes (a rescale between the attempts)
    would leave some of the first attempt's parts beside them."""
    if plan.sink.writes_files and plan.sink.layout == "batches":  # (Spark's layout: what no log names is unseen)
        plan.sink.location.delete_dir(f"batch_id={batch_id}")
    if plan.late is not None:
        late = plan.late.location
        for top in [""] + late.list():
            if top.startswith("batch_id="):
                continue
            base = f"{top}/" if top else ""
            late.delete_dir(f"{base}batch_id={batch_id}")
            for sub in late.list(top) if top else ():
                if sub.startswith("_stage"):
                    late.delete_dir(f"{base}{sub}/batch_id={batch_id}")


#: the column a late-row sink adds: why the row was dropped
LATE_REASON = "late_reason"


def write_late(plan, batch_id: int, stage: int | None, part: int, rows: dict[str | None, pa.Table],
               reason: str) -> None:
    """Rows dropped as late, kept aside: ``<late>/batch_id=<N>/<name>.parquet``
    with their columns and ``late_reason`` — ``filter-<input partition>``
    for the watermark filter's, ``stage0-<vnode>`` for the first stage's
    (both in the input's schema) — and, for a later stage of a chain (whose
    input has other columns), ``<late>/_stage<i>/batch_id=<N>/vnode-<V>.parquet``
    (a folder Spark's and Arrow's dataset readers skip when reading ``<late>``).
    Published whole: a replay rewrites it. ``rows`` by input, as
    :meth:`~gpuwm.operator.Operator.take_late` gives them: a named input's
    (of a join, or of the filter of several inputs) go below
    ``<late>/<input>/``, each in its input's schema."""
    for input, t in rows.items():
        if t.num_rows:
            _write_late(plan, batch_id, stage, part, t, reason, input)


def _write_late(plan, batch_id: int, stage: int | None, part: int, rows: pa.Table, reason: str,
                input: str | None) -> None:
    root = "" if input is None else f"{input}/"
    if stage is None:
        rel = f"{root}batch_id={batch_id}/filter-{part:05d}"
    elif stage == 0:
        rel = f"{root}batch_id={batch_id}/stage0-{part:05d}"
    else:
        rel = f"{root}_stage{stage}/batch_id={batch_id}/vnode-{part:05d}"
    table = rows.append_column(LATE_REASON, pa.array([reason] * rows.num_rows, pa.string()))
    plan.late.location.publish_parquet(rel + ".parquet", table)
