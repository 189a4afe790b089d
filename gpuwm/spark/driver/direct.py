"""Direct input: the gpuwm task reads a micro-batch's Parquet files, or
generates its Nexmark events, itself.

A ``mapInArrow`` receives its rows from the JVM: Spark's reader decodes the
Parquet file into rows, which are written back into Arrow and sent to the
Python worker. On this 2-core machine that transfer is most of a batch —
a ``mapInArrow`` that only counts the rows of a 1 M-row file takes ~1.2 s,
``pyarrow.parquet.read_table`` of the same file ~35 ms. When the pipeline's
input is a plain Parquet file stream, gpuwm lets Spark do what it is there
for — list the directory, pick the files of each micro-batch
(``maxFilesPerTrigger`` ...), log them, replay them after a crash — and then
reads those files in its own task with PyArrow, in Spark's order.

Used only when it gives the same rows as Spark's reader would:

* the pipeline's DataFrame is the source itself (``readStream...parquet(p)``,
  no projection, filter or new column in between), a ``parquet`` source
  whose options only choose files (see ``_LISTING_OPTIONS``);
* every file of the batch is on a file system :class:`~gpuwm.spark.storage.checkpoint.Location`
  serves (local, ``s3a://`` ... with Spark's ``spark.hadoop.fs.*`` settings) and holds
  every input column with a type that casts exactly (same kind: integer to a
  wider integer, timestamp to timestamp, float to double, string/binary);
* ``Pipeline(read="auto")`` (the default) or ``"direct"``; ``"spark"``
  always goes through Spark's reader.

The embedded Nexmark source (:func:`gpuwm.spark.read_nexmark`, the
DataFrame itself) works the same way: Spark plans each micro-batch's offset
range and logs it (``<checkpoint>/offsets/<batch_id>``); the task generates
those events with the generator the source would have run
(:func:`gpuwm.spark.io.nexmark.nexmark_range`, :func:`gpuwm.spark.io.sources.generate_nexmark`), split by split.

Otherwise the batch goes through Spark's reader as before, decided per batch
and logged once. Spark's scan of a batch read directly does not run, so its
row count would stay 0 in Spark's progress: :func:`report_input_rows` adds
gpuwm's count to the scan's ``numOutputRows`` metric, which Spark's
``StreamingQueryProgress`` (``numInputRows``, per source) and listener
events report.
"""

from __future__ import annotations

from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from ..catalyst.expressions import Untranslatable, projection_steps
from ..catalyst.plans import TRANSPARENT, peel
from ..catalyst.schema import arrow_schema, columns_apart, plan_schema
from ..io.sources import file_of
from ..jvm.objects import scala_iter, scan_rdds
from ..storage.checkpoint import Checkpoint, Location

# file-source options that only decide which files make a micro-batch
_LISTING_OPTIONS = {
    "path", "paths", "maxfilespertrigger", "maxbytespertrigger", "latestfirst", "filenameonly",
    "maxfileage", "cleansource", "sourcearchivedir", "pathglobfilter", "recursivefilelookup",
    "modifiedbefore", "modifiedafter", "maxcachedfiles", "discardcachedinputratio",
}


def parquet_source(df) -> str | None:
    """Why ``df`` (a streaming DataFrame) cannot be read directly, or None
    when it can: a Parquet source, or selects over one whose expressions
    gpuwm's tasks evaluate (:func:`parquet_projection`)."""
    try:
        got = parquet_projection(df)
        if isinstance(got, str):
            return got
        plan = peel(df._jdf.queryExecution().analyzed())[0]
        if plan.getClass().getSimpleName() != "StreamingRelation":
            return "the pipeline's input is not the source itself (filters or columns added)"
        ds = plan.dataSource()
        fmt = str(ds.className()).lower()
        if fmt not in ("parquet", "org.apache.spark.sql.execution.datasources.parquet.parquetfileformat"):
            return f"the source is {ds.className()!r}, not parquet"
        if ds.partitionColumns().length():
            return "the source has partition columns"
        opts = ds.options()
        keys = [str(k).lower() for k in scala_iter(opts.keys())]
        other = sorted(k for k in keys if k not in _LISTING_OPTIONS)
        if other:
            return f"source options {other} change how Spark reads the files"
    except Exception as e:  # not classic PySpark (Spark Connect) or a plan shape we do not know
        return f"the source plan cannot be inspected ({type(e).__name__})"
    return None


def parquet_projection(df) -> tuple[list, pa.Schema] | str | None:
    """The selects over a file source under ``df`` as the steps its tasks
    evaluate on each file's rows, with the source's schema — ``None`` when
    ``df`` is the source itself, a reason (str) when they cannot (an
    expression they do not evaluate, columns other than Spark's)."""
    plan, projects = peel(df._jdf.queryExecution().analyzed())
    if not projects or plan.getClass().getSimpleName() != "StreamingRelation":
        return None
    return _projection(df, plan, projects)


def nexmark_projection(df) -> tuple[list, pa.Schema] | str | None:
    """:func:`parquet_projection` for a Nexmark stream: the selects and
    filters over it (a filter Spark's optimizer puts below the watermark,
    gpuwm.spark.front.translate) as the steps its tasks evaluate on each
    split's generated events — None for the stream itself, a reason when
    they cannot."""
    # (nexmark_source's walk; a view's own filter too, under its name)
    plan, projects = peel(df._jdf.queryExecution().analyzed(), through=TRANSPARENT)
    if not projects or plan.getClass().getSimpleName() != "StreamingRelationV2":
        return None
    return _projection(df, plan, projects)


def _projection(df, plan, projects: list) -> tuple[list, pa.Schema] | str:
    """The selects and filters ``projects`` (top first) over the source
    relation ``plan`` under ``df``: the steps a task evaluates on the
    source's rows and the source's schema, or why not."""
    from ...project import evaluate

    try:
        steps, why = projection_steps(projects, list(scala_iter(plan.output())))
    except Untranslatable as e:
        return f"the task cannot evaluate `{e}` of the select on the source"
    if why is not None:
        return why
    source = plan_schema(plan)
    why = columns_apart(evaluate(steps, source.empty_table()).schema, arrow_schema(df.schema))
    return why if why is not None else (steps, source)


def files_steps(df) -> tuple[list, pa.Schema] | None:
    """The selects over a Parquet source (:func:`parquet_projection`) that
    its tasks evaluate on each file's rows, and the files' columns they
    read; None for the source itself."""
    from ...project import inputs_of

    got = parquet_projection(df)
    if not isinstance(got, tuple):
        return None
    need = inputs_of(got[0])
    return got[0], pa.schema([f for f in got[1] if f.name in need])


def direct_reason(df, inputs: dict | None, checkpoint: Checkpoint) -> tuple[str | None, list[str], dict | None]:
    """Why gpuwm's tasks cannot make the query's input themselves (None:
    they can); with several named ``inputs``, each one's directory (a file
    goes to the input whose directory holds it); for a Kafka source, what
    :func:`gpuwm.spark.driver.kafka.kafka_source` found (the projection on it)."""
    if inputs is not None:
        dirs = []
        for name, d in inputs.items():
            why = parquet_source(d)
            if why is None and source_path(d) is None:
                why = "its directory is not known"
            if why is not None:
                return f"input {name!r}: {why}", [], None
            dirs.append(Location.of(source_path(d), what="source path").uri.rstrip("/") + "/")
        if any(a.startswith(b) or b.startswith(a) for i, a in enumerate(dirs) for b in dirs[:i]):
            return "one input's directory holds another's, or two inputs read one", [], None
        return None, dirs, None
    from ..io.nexmark import nexmark_source

    nex = nexmark_source(df)
    if nex is not None:  # offsets come from this query's own offset log
        if nex["checkpoint"] != checkpoint.loc.uri:
            return "read_nexmark() was given another checkpoint than the Pipeline", [], None
        got = nexmark_projection(df)
        return (got if isinstance(got, str) else None), [], None
    from .kafka import kafka_source

    kafka, why = kafka_source(df)
    if kafka is not None or why is not None:
        if kafka is not None:
            try:
                import confluent_kafka  # noqa: F401
            except ImportError:
                return "the Python package confluent-kafka is not installed", [], None
        return why, [], kafka
    return parquet_source(df), [], None


def source_path(df) -> str | None:
    """The directory a file-stream DataFrame reads (its ``path`` option;
    below selects of its columns too), or None."""

    try:
        ds = peel(df._jdf.queryExecution().analyzed())[0].dataSource()
        opts = ds.options()
        got = opts.get("path")
        return str(got.get()) if got.isDefined() else None
    except Exception:
        return None


def batch_files(df, scans_allowed: int = 1) -> list[str] | None:
    """A micro-batch's files — local paths, or URIs (``s3a://...``) as
    :class:`~gpuwm.spark.storage.checkpoint.Location` names them — in the order
    Spark's scan would read them, or None when they cannot be found.
    ``scans_allowed``: how many file scans the batch may hold (one per
    input of a union of file streams)."""
    try:
        paths: list[str] = []
        n = 0  # the scans that read a file: Spark 4.3 plans a scan of no files for a source without new ones
        for r in scan_rdds(df, "FileScanRDD"):  # (the drain source's, on S3), where 4.1 plans none
            parts = r.filePartitions()
            files = [_uri(f.filePath().toString()) for i in range(parts.length()) for f in parts.apply(i).files()]
            n += bool(files)
            paths += [p for p in dict.fromkeys(files) if p not in paths]
        return paths if n <= scans_allowed else None  # ([]: a batch without new files)
    except Exception:
        return None


def _castable(src: pa.DataType, dst: pa.DataType) -> bool:
    t = pa.types
    if src.equals(dst):
        return True
    if t.is_timestamp(src) and t.is_timestamp(dst):
        return True
    if t.is_integer(src) and t.is_integer(dst):
        return t.is_signed_integer(src) == t.is_signed_integer(dst) and src.bit_width <= dst.bit_width \
            or t.is_unsigned_integer(src) and src.bit_width < dst.bit_width
    if t.is_floating(src) and t.is_floating(dst):
        return src.bit_width <= dst.bit_width
    kinds = ((t.is_string, t.is_large_string), (t.is_binary, t.is_large_binary))
    return any(any(k(src) for k in ks) and any(k(dst) for k in ks) for ks in kinds)


def check_files(paths: list[str], schema: pa.Schema, options: tuple = ()) -> str | None:
    """Why these files cannot be read directly into ``schema``, or None."""
    for p in paths:
        try:
            fsys, path = file_of(p, options)
            fs = pq.read_schema(path, filesystem=fsys)
        except Exception as e:
            return f"{p}: {e}"
        for field in schema:
            i = fs.get_field_index(field.name)
            if i < 0:
                return f"{p} has no column {field.name!r}"
            if not _castable(fs.field(i).type, field.type):
                return f"{p}: column {field.name!r} is {fs.field(i).type}, the stream's schema says {field.type}"
    return None


def running_query(spark, checkpoint: Checkpoint):
    """Spark's ``StreamExecution`` (a JVM object) of the active query on
    ``checkpoint``, or None."""
    try:
        for q in spark.streams.active:
            sq = q._jsq.streamingQuery()
            if _uri(sq.resolvedCheckpointRoot()) == checkpoint.loc.uri:
                return sq
    except Exception:  # noqa: BLE001  not classic PySpark: what needs it does without
        pass
    return None


def report_input_rows(query, checkpoint: Checkpoint, rows: int | dict[str, int],
                      dirs: dict[str, str] | None = None) -> bool:
    """On the driver, during a batch gpuwm read directly: add the rows it
    read to the ``numOutputRows`` metric of the batch's scan in the query's
    (``query``: :func:`running_query`) last execution, where Spark's
    progress reporter counts a source's input rows after the batch.
    ``rows``: the count, or ``{input: count}`` with ``dirs`` (``{input:
    directory}``) saying which file scan is whose. The drain source's scan
    (:mod:`gpuwm.spark.driver.drain`) is left alone. False (nothing added) when
    the query or its scan cannot be found — the progress then shows 0, as
    before; gpuwm's own metrics are unaffected."""
    try:
        if query is None or query.lastExecution() is None:
            return False
        from .drain import DIR

        drains = f"{checkpoint.loc.uri}/{DIR}/"
        scans = []
        it = query.lastExecution().executedPlan().collectLeaves().iterator()
        while it.hasNext():
            node = it.next()
            name = node.getClass().getSimpleName()
            if name == "FileSourceScanExec":
                paths = [_uri(p) for p in scala_iter(node.relation().location().rootPaths())]
                if not (paths and all(p.startswith(drains) for p in paths)):  # not the drain source's
                    scans.append((node, paths))
            elif name == "MicroBatchScanExec" and node.inputPartitions().size() > 0:  # a source with rows
                scans.append((node, []))
        added = False
        for node, paths in scans:
            if isinstance(rows, dict):  # the scan of the input whose directory holds its files
                name = next((n for n, d in (dirs or {}).items() if paths and all(p.startswith(d) for p in paths)), None)
                n = rows.get(name, 0) if name is not None else 0
            else:
                n, rows = rows, 0  # one input: its first scan
            metric = node.metrics().get("numOutputRows")
            if n and metric.isDefined():
                metric.get().add(int(n))
                added = True
        return added
    except Exception as e:  # internal API: never fail a batch over progress reporting
        import logging

        logging.getLogger("gpuwm").debug("gpuwm: input rows not reported to Spark's progress: %s", e)
        return False


def _uri(path) -> str:
    """A Hadoop path or URI as :class:`Location` names it (``file:`` dropped, decoded)."""
    return Location.of(unquote(str(path))).uri
