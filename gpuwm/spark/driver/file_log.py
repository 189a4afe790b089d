"""The ``_spark_metadata`` log of a Parquet sink in Spark's file-sink
layout, kept by the driver (:class:`SparkFileLog`)."""

from __future__ import annotations

from typing import Sequence

from ...errors import SinkError
from ..io.sinks import spark_file_name
from ..jvm import versions
from ..jvm.objects import jvm_class


class SparkFileLog:
    """The ``_spark_metadata`` log of a Parquet sink written in Spark's
    file-sink layout (:class:`~gpuwm.spark.executor.plan.Sink`'s
    ``layout="spark"``): Spark's own ``FileStreamSinkLog``, through py4j —
    its format, its compaction every
    ``spark.sql.streaming.fileSink.log.compactInterval`` batches and its
    clean-up exactly as Spark's sink writes them, on every line — so that
    ``spark.read.parquet(path)`` and a downstream ``readStream`` read the
    files a batch committed and no other, as from Spark's own sink.

    Made as the query starts (its folder there before any data file, as
    Spark's sink makes it: a reader started beside the query reads the log,
    not the folder). Each batch's files, the tasks' (one a task that
    emitted rows; for a batch that emitted none, one empty file of the
    output's columns, as Spark's first task writes), are added to the log
    before gpuwm commits the batch: a batch is visible exactly when its
    log file is there. As Spark's ``addBatch``, a batch the log holds
    already (a replay after a crash between the log and gpuwm's commit)
    adds nothing; its new attempt's files are deleted. Files a crashed
    attempt wrote before its log are never named by it: unseen, as
    Spark's after a crash inside a batch."""

    def __init__(self, spark, sink, schema):
        jvm = spark._jvm
        self.loc, self._empty = sink.location, sink.as_written(schema.empty_table())
        self.root = self.loc.uri if "://" in self.loc.uri else f"file://{self.loc.uri}"
        pkg = versions.file_sink_log()
        self._status = jvm_class(jvm, f"{pkg}.SinkFileStatus")
        log = jvm_class(jvm, f"{pkg}.FileStreamSinkLog")
        self._log = log(log.VERSION(), spark._jsparkSession, f"{self.root}/_spark_metadata", jvm.scala.Option.empty())
        self._path = jvm.org.apache.hadoop.fs.Path
        self._fs = self._path(self.root).getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
        self._gateway = spark.sparkContext._gateway

    def latest(self) -> int:
        """The last batch the log holds (-1: none)."""
        got = self._log.getLatestBatchId()
        return got.get() if got.isDefined() else -1

    def add(self, batch_id: int, names: Sequence[str]) -> int:
        """Log batch ``batch_id``'s data files ``names`` (under the sink's
        path; none: one empty file written first); how many it logged (0:
        the log held the batch already, and ``names`` are deleted)."""
        if batch_id <= self.latest():
            for n in names:
                self.loc.delete(n)
            return 0
        if not names:
            names = [spark_file_name(0)]
            self.loc.publish_parquet(names[0], self._empty)
        files = self._gateway.new_array(self._status, len(names))
        for i, n in enumerate(sorted(names)):
            files[i] = self._status.apply(self._fs.getFileStatus(self._path(f"{self.root}/{n}")))
        if not self._log.add(batch_id, files):
            raise SinkError(f"batch {batch_id} is in {self.root}/_spark_metadata already: another query writes to "
                            "the same path (Spark's file sink allows one; nothing of the batch was committed)")
        return len(names)
