"""The ``DataStreamWriter`` of an accelerated query
(:class:`AcceleratedWriter`): every call of PySpark's writer, recorded as
written; gpuwm runs what its sinks write (Parquet, console,
``foreachBatch``, Delta, Kafka, memory, ``toTable`` of a Delta table, the sink
chosen by :func:`gpuwm.spark.io.driver_sinks.sink_tuple`), and Spark runs
anything else, given every call as the user wrote it."""

from __future__ import annotations

import tempfile
from typing import Any, Mapping

from ...errors import ConfigError
from ..io.driver_sinks import DeltaAppend, KafkaAppend, MemoryTable, sink_tuple
from ..jvm.versions import real_time_trigger
from .translation import Refused, refusal


class AcceleratedWriter:
    """Every call of PySpark's ``DataStreamWriter``, on a gpuwm query.
    gpuwm runs ``format`` ``parquet``, ``console``, ``delta``
    (:class:`DeltaAppend`), ``kafka`` (:class:`KafkaAppend`) or ``memory``
    with a ``queryName`` (:class:`MemoryTable`) and ``foreachBatch``
    (:meth:`gpuwm.spark.Pipeline.foreach_batch`), with ``option``/
    ``options`` ``checkpointLocation`` (``path`` for Parquet, ``numRows``
    for the console), ``outputMode`` ``append`` (``update`` for one window
    or dedup alone, ``complete`` for one window alone), any ``trigger`` but a
    continuous one, ``queryName``, ``start``, and ``toTable`` of a Delta
    table. Any other call —
    ``foreach``, ``toTable`` of another table, ``partitionBy`` or ``clusterBy`` with
    columns, another format, mode or option — makes Spark run the query
    (``spark.gpuwm.fallback``: one warning line saying why, or the error),
    its writer given every call as it was written."""

    def __init__(self, acc: Any):  # (an Accelerated)
        self._acc = acc
        self._calls: list[tuple[str, tuple, dict]] = []  # as written: replayed on Spark's writer by a fallback
        self._format = "parquet"
        self._options: dict[str, str] = {}
        self._mode = "append"
        self._trigger: dict[str, Any] = {}
        self._name: str | None = None
        self._other: list[str] = []  # calls gpuwm does not run, as the user wrote them
        self._func: Any = None  # foreachBatch's function

    def _called(self, name: str, *args: Any, **kwargs: Any) -> "AcceleratedWriter":
        self._calls.append((name, args, kwargs))
        return self

    def format(self, source: str) -> "AcceleratedWriter":
        self._format = source
        return self._called("format", source)

    def _set(self, options: dict[str, Any]) -> None:
        """Options as Spark's writer reads them: text, booleans as ``true``/``false``."""
        self._options.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()})

    def option(self, key: str, value: Any) -> "AcceleratedWriter":
        self._set({key: value})
        return self._called("option", key, value)

    def options(self, **options: Any) -> "AcceleratedWriter":
        self._set(options)
        return self._called("options", **options)

    def outputMode(self, outputMode: str) -> "AcceleratedWriter":
        self._mode = outputMode
        return self._called("outputMode", outputMode)

    def _triggered(self, **given: Any) -> "AcceleratedWriter":
        self._trigger = {k: v for k, v in given.items() if v is not None}
        return self._called("trigger", **self._trigger)

    if real_time_trigger():  # PySpark 4.2 on: Spark's real-time mode (refused: gpuwm runs micro-batches)
        def trigger(self, *, processingTime: str | None = None, once: bool | None = None,
                    continuous: str | None = None, availableNow: bool | None = None,
                    realTime: str | None = None) -> "AcceleratedWriter":
            return self._triggered(processingTime=processingTime, once=once, continuous=continuous,
                                   availableNow=availableNow, realTime=realTime)
    else:  # before: no realTime (a TypeError, as PySpark's own)
        def trigger(self, *, processingTime: str | None = None, once: bool | None = None,
                    continuous: str | None = None, availableNow: bool | None = None) -> "AcceleratedWriter":
            return self._triggered(processingTime=processingTime, once=once, continuous=continuous,
                                   availableNow=availableNow)

    def queryName(self, queryName: str) -> "AcceleratedWriter":
        self._name = queryName
        return self._called("queryName", queryName)

    def partitionBy(self, *cols: Any) -> "AcceleratedWriter":
        if cols and cols != ([],):
            self._other.append(f"partitionBy({', '.join(map(repr, cols))}): gpuwm's parquet sink does not "
                               "partition its files")
        return self._called("partitionBy", *cols)

    def clusterBy(self, *cols: Any) -> "AcceleratedWriter":
        if cols and cols != ([],):
            self._other.append(f"clusterBy({', '.join(map(repr, cols))}): gpuwm's sinks do not cluster")
        return self._called("clusterBy", *cols)

    def foreachBatch(self, func: Any) -> "AcceleratedWriter":
        self._format, self._func = "foreachBatch", func  # as Spark: the sink until another format()
        return self._called("foreachBatch", func)

    def foreach(self, f: Any) -> "AcceleratedWriter":
        self._other.append("foreach: gpuwm's sinks are parquet, console and foreachBatch")
        return self._called("foreach", f)

    def _why_not(self) -> Refused | None:
        if self._other:
            return Refused("SINK_CALL", "writeStream", self._other[0])
        if self._format not in ("parquet", "console", "foreachBatch", "delta", "kafka", "memory"):
            return Refused("SINK_FORMAT", "writeStream", f"format {self._format!r}: gpuwm writes parquet, console, delta, kafka, "
                                          "memory and foreachBatch")
        if self._format == "memory" and not self._name:  # (Spark's own error says so)
            return Refused("SINK_CALL", "writeStream", "format 'memory' without queryName")
        allowed = {"checkpointlocation"} | {"parquet": {"path"}, "console": {"numrows"},
                                            "delta": set(DeltaAppend.OPTIONS),
                                            "kafka": set(KafkaAppend.OPTIONS)}.get(self._format, set())
        other = sorted(k for k in self._options if k.lower() not in allowed
                       and not (self._format == "kafka" and k.lower().startswith("kafka.")))
        if other:
            return Refused("SINK_OPTION", "writeStream", f"option(s) {other}: gpuwm's {self._format} sink does not apply them")
        if "continuous" in self._trigger:
            return Refused("TRIGGER", "writeStream", "a continuous trigger: gpuwm runs micro-batches")
        if "realTime" in self._trigger:
            return Refused("TRIGGER", "writeStream", "a real-time trigger: gpuwm runs micro-batches (Spark's real-time "
                                          "mode runs no mapInArrow)")
        if self._format == "kafka":
            types = {f.name: f.dataType.simpleString() for f in self._acc.df.schema}
            bad = [f"{c} {t}" for c, t in types.items() if t not in KafkaAppend.COLUMNS.get(c, ())]
            if bad or "value" not in types:
                return Refused("SINK_COLUMNS", "writeStream", f"format 'kafka' with columns {', '.join(bad) or 'without value'}: "
                                              "gpuwm writes Spark's Kafka sink columns (value, key: string or "
                                              "binary; topic string; partition int; headers "
                                              "array<struct<key:string,value:binary>>)")
        return None

    def _start_args(self, path: str | None, format: str | None, outputMode: str | None, partitionBy: Any,
                    queryName: str | None, options: dict) -> None:
        """``start``'s and ``toTable``'s own arguments, as the calls they stand for."""
        if format is not None:
            self.format(format)
        if outputMode is not None:
            self.outputMode(outputMode)
        if partitionBy is not None:
            self.partitionBy(*([partitionBy] if isinstance(partitionBy, str) else partitionBy))
        if queryName is not None:
            self.queryName(queryName)
        if options:
            self.options(**options)
        if path is not None:
            self.option("path", path)

    def start(self, path: str | None = None, format: str | None = None, outputMode: str | None = None,
              partitionBy: Any = None, queryName: str | None = None, **options: Any):
        """Start the query (gpuwm's, or Spark's as written); returns Spark's ``StreamingQuery``."""
        self._start_args(path, format, outputMode, partitionBy, queryName, options)
        acc = self._acc
        if acc.translation is not None:
            why = self._why_not()
            if why is None:
                opts = {k.lower(): v for k, v in self._options.items()}
                ck = opts.get("checkpointlocation")
                if ck is None and self._format not in ("console", "memory"):
                    raise ConfigError(f"a streaming query's {self._format} sink needs "
                                      "option('checkpointLocation', ...)")
                ck = ck or tempfile.mkdtemp(prefix=f"gpuwm-{self._format}-")
                if self._format in ("parquet", "delta") and not opts.get("path"):
                    raise ConfigError(f"the {self._format} sink needs a path: option('path', ...) or start(path)")
                try:  # (a sink that cannot be made refuses too: Spark runs the query)
                    sink = self._sink(opts, ck)
                    p = acc.pipeline(ck, sink, name=self._name, mode=self._mode.lower())
                except Exception as e:  # Spark runs it, with every call as written
                    acc._refuse(refusal(e))
                else:
                    if isinstance(sink[-1], MemoryTable):
                        sink[-1].open(acc.df.sparkSession)
                    return explaining(p.start(trigger=self._trigger or None, query_name=self._name), acc, ck)
            else:
                acc._refuse(why)
        return self._spark_writer().start()

    def _sink(self, opts: Mapping[str, str], ck: str) -> tuple:
        """The sink :meth:`Accelerated.pipeline` takes for this writer's format."""
        if self._format == "foreachBatch":
            return ("foreachBatch", self._func)
        if self._format == "memory":
            return ("foreachBatch", MemoryTable(self._name, self._mode, ck, self._acc.df.schema))
        return sink_tuple(self._format, self._options, ck, self._acc.df.columns)

    def toTable(self, tableName: str, format: str | None = None, outputMode: str | None = None,
                partitionBy: Any = None, queryName: str | None = None, **options: Any):
        """As Spark's ``toTable``: the catalog table ``tableName`` made if it
        does not exist (the query's columns, nullable; ``format``'s provider,
        else ``spark.sql.sources.default``; ``option('path')`` its location),
        then written as ``format(<provider>).start(<its location>)``. gpuwm
        runs a Delta table's (:class:`DeltaAppend` at its location) and a
        Parquet table's (its file sink in Spark's layout, with its
        ``_spark_metadata`` log, as Spark's toTable writes it); a table of
        another provider or a view, Spark writes, after the fallback's one
        line, with every call as written."""
        self._start_args(None, format, outputMode, partitionBy, queryName, options)
        acc = self._acc
        if acc.translation is not None:
            why = Refused("SINK_CALL", "writeStream", self._other[0]) if self._other else None
            if why is None:
                (table, provider), why = _table(acc.df, tableName, self._format if self._formatted() else None,
                                                self._options)
            if why is None:
                saved = self._calls, self._format, dict(self._options)
                self.format(provider).option("path", table)  # Spark's own toTable of a file table
                why = self._why_not()
                try:
                    if why is None:
                        return self.start()
                finally:
                    self._calls, self._format, self._options = saved
            acc._refuse(why)
        return self._spark_writer().toTable(tableName)

    def _formatted(self) -> bool:
        return any(name in ("format", "foreachBatch") for name, _, _ in self._calls)

    def _spark_writer(self):
        """Spark's own writer of the query, given every call as the user wrote it."""
        w = self._acc.df.writeStream
        for name, args, kwargs in self._calls:
            w = getattr(w, name)(*args, **kwargs)
        return w


#: the table providers whose toTable gpuwm writes
TABLES = ("delta", "parquet")


def _table(df, name: str, fmt: str | None,
           options: Mapping[str, str]) -> tuple[tuple[str | None, str | None], Refused | None]:
    """The location and provider of the Delta or Parquet table ``name``
    that ``df``'s ``toTable`` writes, made as Spark's ``toTable`` makes it
    where it does not exist (``fmt``, else Spark's default source;
    ``options``' ``path``: an external table there); or why gpuwm does not
    write it (Spark does)."""
    spark = df.sparkSession
    said = f"toTable({name!r})"
    none = (None, None)
    if spark.catalog._jcatalog.tableExists(name):
        info = {r[0].strip(): (r[1] or "").strip() for r in spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()}
        provider = info.get("Provider", "").lower()
        if info.get("Type", "").upper() == "VIEW" or not info.get("Location"):
            return none, Refused("SINK_TABLE", "writeStream", f"{said}: a view, or a table without a location")
        if provider not in TABLES or fmt not in (None, provider):
            return none, Refused("SINK_TABLE", "writeStream", f"{said}: a {provider or 'catalog'} table"
                                 + (f" written as format {fmt!r}" if provider in TABLES else "")
                                 + "; gpuwm writes Delta and Parquet tables")
        spark.catalog.refreshTable(name)  # (its files as listed now, cached by this look: read again after writes)
        return (_local(info["Location"]), provider), None
    provider = (fmt or spark.conf.get("spark.sql.sources.default", "parquet")).lower()
    if provider not in TABLES:
        return none, Refused("SINK_TABLE", "writeStream", f"{said}: a new {provider} table; gpuwm writes Delta and "
                             "Parquet tables")
    from pyspark.sql.types import StructType

    path = next((v for k, v in options.items() if k.lower() == "path"), None)
    spark.catalog.createTable(name, path=path, source=provider,
                              schema=StructType.fromJson(_nullable(df.schema.jsonValue())))
    return _table(df, name, fmt, options)


def _nullable(t: Any) -> Any:
    """A Spark type's JSON with every field, element and value nullable (Scala's ``asNullable``)."""
    if isinstance(t, dict):
        return {k: True if k in ("nullable", "containsNull", "valueContainsNull") else _nullable(v)
                for k, v in t.items()}
    if isinstance(t, list):
        return [_nullable(v) for v in t]
    return t


def _local(uri: str) -> str:
    """A catalog location as delta-rs takes it: a ``file:`` URI as a path."""
    from urllib.parse import unquote, urlparse

    u = urlparse(uri)
    return unquote(u.path) if u.scheme == "file" else uri


def explaining(q, acc: Any, checkpoint: str):
    """Spark's ``StreamingQuery`` ``q`` of the accelerated query ``acc``,
    whose ``explain()`` prints what ``explain(df)`` prints — the stages
    gpuwm runs, what Spark runs, and why — not Spark's plan of gpuwm's
    micro-batch (its drain scan); ``explain(extended=True)`` then that plan
    too, under a line that says what it is."""
    spark_explain = q.explain

    def explain(extended: bool = False) -> None:
        print(acc.explained(checkpoint))
        if extended:
            print("\nSpark's plan of the last micro-batch (its sources, handed to gpuwm's stages):")
            spark_explain(extended)

    q.explain = explain
    return q
