"""The launch of a described query on Spark: what happens between a
builder's ``start()`` (:meth:`gpuwm.spark.front.pipeline.Pipeline.start`)
and Spark's running ``StreamingQuery``.

:func:`launch` takes the query's :class:`~gpuwm.spark.executor.plan.Plan`
and its stream, checks what can be checked before anything is written
(the read mode, the Kafka brokers and topics, the sinks' locations, the
backend), prepares the checkpoint (:func:`~gpuwm.spark.driver.prepare.prepare_checkpoint`),
builds the :class:`~gpuwm.spark.driver.loop.Driver` that runs each
micro-batch, wires the drain source in (:mod:`gpuwm.spark.driver.drain`)
and Spark's ``withWatermark`` (:func:`spark_watermark`), and starts
``writeStream.foreachBatch``; over a Kafka source the query it returns
restarts once where Spark's Kafka connector 4.1.0–4.1.2 fails after a
replay (:func:`restarting`, SPARK-57438). Also here: the Spark stream of several
named inputs as one (:func:`union_inputs`) and the columns a plan's sink
writes (:func:`sink_schema`).

Nothing of the front: the builder hands over plain values and its
described parts.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Mapping

import pyarrow as pa

from ...errors import ConfigError
from ...inputs import INPUT, union_column
from ..executor.plan import Plan
from ..storage.checkpoint import Checkpoint


def launch(plan: Plan, df, *, spark, inputs: Mapping[str, Any] | None, read: str,
           trigger: Mapping[str, Any] | None, query_name: str | None, name: str | None, history: list[dict],
           on_batch: Callable[[dict], None] | None, verbose: bool, foreach: tuple | None):
    """Start the query that runs ``plan`` over the streaming DataFrame
    ``df`` (several named ``inputs``: their union, :func:`union_inputs`);
    returns Spark's ``StreamingQuery`` — over a Kafka source, one that
    starts the query once more from its checkpoint where Spark's Kafka
    connector 4.1.0–4.1.2 fails after replaying a committed batch
    (:func:`restarting`). ``read``, ``trigger``, ``on_batch``, ``verbose``
    and ``name`` as :class:`~gpuwm.spark.front.pipeline.Pipeline` takes
    them; ``query_name`` Spark's query name (None: none); ``history`` the
    list each batch's metrics are appended to; ``foreach`` a
    ``foreachBatch`` sink's (function, Spark schema or None)."""
    from .kafka import source_options

    def start():
        return _start(plan, df, spark=spark, inputs=inputs, read=read, trigger=trigger, query_name=query_name,
                      name=name, history=history, on_batch=on_batch, verbose=verbose, foreach=foreach)

    if not source_options(df):
        return start()
    return restarting(start, plan.checkpoint)


def _start(plan: Plan, df, *, spark, inputs: Mapping[str, Any] | None, read: str,
           trigger: Mapping[str, Any] | None, query_name: str | None, name: str | None, history: list[dict],
           on_batch: Callable[[dict], None] | None, verbose: bool, foreach: tuple | None):
    """One start of the query (:func:`launch`; :func:`restarting` calls it again)."""
    from . import drain
    from .direct import direct_reason
    from .loop import Driver
    from .prepare import prepare_checkpoint
    from .state_ops import with_state_nodes

    ck = plan.checkpoint
    trigger, finish = drain.trigger_for(dict(trigger) if trigger else None, plan.watermark.resolved_profile.name)
    why, dirs, kafka = ("read='spark'", [], None) if read == "spark" else direct_reason(df, inputs, ck)
    if why is not None and read == "direct":
        raise ConfigError(f"read='direct' cannot read this input itself: {why}")
    from .kafka import probe, source_options

    for options in source_options(df):  # brokers and topics answer, or one line before anything is written
        probe(options)
    from ..io.sinks import check_layout

    for what, sink in (("Parquet sink", plan.sink), ("late-row sink", plan.late)):
        if sink is not None and sink.path:
            sink.location.probe(what)
    check_layout(plan.sink)
    from ...backend import SAID_BY, get_backend

    if os.environ.get(SAID_BY) == str(os.getpid()) and plan.backend in (None, "auto"):
        get_backend(plan.backend)  # local mode: whether the workers find a GPU, said once, by the driver
    owner = prepare_checkpoint(ck, plan)
    from .direct import files_steps

    driver = Driver(plan, spark, df, inputs=tuple(inputs or ()), read=read,
                    direct=why is None, input_dirs=dirs, kafka=kafka, owner=owner, history=history,
                    on_batch=on_batch, verbose=verbose, name=name,
                    foreach_batch=_foreach_batch(plan, foreach),
                    input_steps=[files_steps(d) for d in inputs.values()] if inputs and why is None
                    else None)
    if plan.sink.layout == "spark":  # (its folder made before the first batch's files, as Spark's sink makes it)
        from .file_log import SparkFileLog

        driver.file_log = SparkFileLog(spark, plan.sink, sink_schema(plan))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    stream = spark_watermark(drain.with_drains(df, ck), plan)
    stream = with_state_nodes(spark, stream, plan, f"{ck.loc.uri.rstrip('/')}/state")  # (Spark's progress)
    writer = stream.writeStream.foreachBatch(driver.run_batch).option("checkpointLocation", ck.loc.uri)
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    driver.drains.writes = not (trigger or {}).get("once")  # (Spark's own once: trigger_for)
    driver.drains.resume(ck.last_spark_commit())  # a drain asked for before a stop
    try:
        q = writer.start()
    except BaseException:
        owner.release()
        raise
    owner.watch(q, then=getattr((foreach or (None,))[0], "close", None))  # a sink's producer, say
    driver.query = q
    driver.drains.alive = lambda: q.isActive
    if finish:
        drain.Finisher(q, driver.ask_end)
    return q


def restarting(start: Callable[[], Any], ck: Checkpoint):
    """The ``StreamingQuery`` that ``start()`` returns, started once more
    (by ``start()``, from its checkpoint) if it fails as Spark's Kafka
    connector 4.1.0–4.1.2 does after replaying the batch in flight at a
    crash once that batch is committed (SPARK-57438, fixed in 4.1.3 and
    4.2.0: it throws from its progress metrics); the next start reads on
    from the committed offsets. Where the running Spark's connector has no
    such bug (:func:`~gpuwm.spark.jvm.versions.kafka_replay_fails`),
    ``start()``'s query as it is. The same object goes on as the new run (Spark's
    query id is the checkpoint's; its ``runId`` is new): ``awaitTermination``,
    ``processAllAvailable`` and ``exception`` wait on, or report, the
    restarted run. One restart at most; any other failure is the query's."""
    from pyspark.errors import StreamingQueryException
    from pyspark.sql.streaming.query import StreamingQuery

    from ..jvm.versions import kafka_connector, kafka_replay_fails
    from .kafka import replay_failure

    if not kafka_replay_fails():
        return start()
    connector = kafka_connector().rsplit(":", 1)[1]

    class Restarting(StreamingQuery):
        restarted = False

        def _again(self) -> bool:
            """Started once more: the run failed of SPARK-57438 (and had not been restarted)."""
            if self.restarted or self._jsq.isActive():
                return False
            e = StreamingQuery.exception(self)
            if e is None or not replay_failure(e, ck):
                return False
            import logging

            logging.getLogger("gpuwm").warning(
                f"gpuwm: Spark's Kafka connector {connector} failed in progress reporting after replaying the "
                "batch in flight, which is committed (SPARK-57438, fixed in 4.1.3 and 4.2.0): restarting the query "
                "from its checkpoint")
            self._jsq, self.restarted = start()._jsq, True
            return True

        def _waiting(self, wait: Callable[[], Any]) -> Any:
            """``wait()`` on the run, and again on the one a SPARK-57438 failure restarted."""
            while True:
                try:
                    return wait()
                except StreamingQueryException:
                    if not self._again():
                        raise

        def awaitTermination(self, timeout: float | None = None):
            return self._waiting(lambda: StreamingQuery.awaitTermination(self, timeout))

        def processAllAvailable(self) -> None:
            return self._waiting(lambda: StreamingQuery.processAllAvailable(self))

        def exception(self):
            self._again()
            return StreamingQuery.exception(self)

    return Restarting(start()._jsq)


def sink_schema(plan: Plan) -> pa.Schema:
    """The columns ``plan``'s sink writes: the last stage's, through the
    sink's projection (:meth:`~gpuwm.spark.front.pipeline.Pipeline.output_schema`)."""
    from ...project import evaluate

    out = plan.schemas[-1].empty_table()
    return evaluate(json.loads(plan.sink.project), out).schema if plan.sink.project else out.schema


def _foreach_batch(plan: Plan, foreach: tuple | None) -> tuple | None:
    """A foreachBatch sink's function and the Spark schema of the DataFrames it gets."""
    if plan.sink.kind != "foreachBatch" or foreach is None:
        return None
    from ..catalyst.schema import spark_schema

    fn, schema = foreach
    return fn, schema if schema is not None else spark_schema(sink_schema(plan))


def spark_watermark(df, plan: Plan):
    """``df`` with Spark's ``withWatermark`` on its event-time column (a
    timestamp; the first input's, of several) and gpuwm's delay (whole ms):
    no Spark operator uses it, but Spark then keeps a watermark for the
    query and reports it in its progress, and the driver makes it gpuwm's
    (:func:`gpuwm.spark.driver.loop.tell_spark_watermark`)."""
    from datetime import timedelta

    from pyspark.sql.types import TimestampType

    from ...timecol import parse_interval
    from ..catalyst.plans import quoted

    wm = plan.watermark.inputs[0][1] if plan.multi else plan.watermark
    col = union_column(0, wm.column) if plan.multi else wm.column
    if col not in df.columns or not isinstance(df.schema[col].dataType, TimestampType):
        return df
    delay = parse_interval(wm.delay)
    ms = delay // timedelta(milliseconds=1) if isinstance(delay, timedelta) and delay > timedelta(0) else 0
    return df.withWatermark(quoted(col), f"{ms} milliseconds")  # (Spark parses the name: `event time`, `a.b`)


def union_inputs(inputs: Mapping[str, Any]):
    """Several streaming DataFrames as one stream of :func:`~gpuwm.inputs.union_schema`
    rows: each row tagged with its input's index, its columns renamed apart."""
    from pyspark.sql import functions as F

    out = None
    for i, d in enumerate(inputs.values()):
        cols = [F.lit(i).cast("tinyint").alias(INPUT)] + [F.col(f"`{c}`").alias(union_column(i, c)) for c in d.columns]
        d = d.select(*cols)
        out = d if out is None else out.unionByName(d, allowMissingColumns=True)
    return out
