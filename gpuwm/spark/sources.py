"""The inputs gpuwm's tasks make themselves (the task side of
:mod:`gpuwm.spark.direct` and :mod:`gpuwm.spark.kafka`, which decide on the
driver what each batch's tasks read): a micro-batch's Parquet files, its
Nexmark events, its Kafka offset ranges. No Spark here: the task gets what
to read as plain values, and hands back Arrow record batches.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import GpuwmError
from .checkpoint import Location


def file_of(uri: str, options: tuple = ()) -> tuple[Any, str]:
    """(file system, path in it) of a file :func:`~gpuwm.spark.direct.batch_files` named; ``options``:
    Spark's ``spark.hadoop.fs.*`` settings (:func:`~gpuwm.spark.checkpoint.spark_fs_options`)."""
    loc = Location.of(uri, options)
    return loc.fs, loc.root




def read_files(paths: list[str], schema: pa.Schema, ids: Iterator[pa.RecordBatch],
               options: tuple = ()) -> Iterator[pa.RecordBatch]:
    """In a task: the rows of the files whose indexes (into ``paths``) the
    task's input carries, in order, cast to the stream's schema."""
    for b in ids:
        for i in b.column(0).to_pylist():
            fs, path = file_of(paths[i], options)
            t = pq.read_table(path, columns=schema.names, filesystem=fs)
            yield from t.cast(schema).to_batches()


def read_union_files(plan: Any, files: list[list], ids: Iterator[pa.RecordBatch],
                     options: tuple = ()) -> Iterator[pa.RecordBatch]:
    """:func:`read_files` for several inputs: ``files`` as ``[input index,
    path]``; each file's rows as the inputs' union rows
    (:func:`gpuwm.spark.plan.to_union`)."""
    from gpuwm.inputs import input_schemas

    from .plan import to_union

    named = list(input_schemas(plan.input_schema).items())
    for b in ids:
        for i in b.column(0).to_pylist():
            k, uri = files[i]
            name, schema = named[k]
            fs, path = file_of(uri, options)
            t = pq.read_table(path, columns=schema.names, filesystem=fs).cast(schema)
            yield from to_union(plan, {name: t}).to_batches()




def generate_nexmark(source: dict, ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """In a task: the events of the splits whose numbers the task's input
    carries, exactly as :class:`~gpuwm.spark.nexmark.NexmarkStreamReader`
    would read them."""
    from gpuwm.nexmark import GENERATORS

    from .nexmark import _kind, config_from_options

    cfg, _, _ = config_from_options(source["options"])
    gen = GENERATORS[_kind(source["options"])][0]
    for b in ids:
        for split in b.column(0).to_pylist():
            yield from gen(cfg, source["start"], source["end"], split).to_batches()


# -- Kafka ----------------------------------------------------------------------------
class KafkaReadError(GpuwmError):
    """A batch's Kafka range cannot be read as Spark planned it."""


def kafka_schema(headers: bool) -> pa.Schema:
    """Spark's Kafka columns (``KafkaRecordToRowConverter``) in Arrow."""
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
              pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
              pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32())]
    if headers:
        fields.append(pa.field("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
    return pa.schema(fields)


def read_kafka(source: dict, ids: Iterator[pa.RecordBatch], counts: dict | None = None) -> Iterator[pa.RecordBatch]:
    """In a task: the records of the Kafka partitions whose indexes (into
    ``source["parts"]``) the task's input carries, each partition's ranges in
    offset order, as Spark's Kafka columns, then through the query's
    projection (:func:`gpuwm.spark.project.evaluate`). ``counts`` gets
    ``malformed`` (messages ``from_json`` did not parse whole) and
    ``offsets_lost`` (offsets deleted before they were read, with
    ``failOnDataLoss`` false)."""
    from confluent_kafka import Consumer

    from .project import evaluate

    counts = {} if counts is None else counts
    consumer = Consumer({**source["conf"], "enable.auto.commit": False, "enable.partition.eof": False,
                         "group.id": source["conf"].get("group.id", "gpuwm-direct")})
    try:
        for b in ids:
            for i in b.column(0).to_pylist():
                part = source["parts"][i]
                for a, z in part["ranges"]:
                    t = _fetch(consumer, part["topic"], part["partition"], a, z, source, counts)
                    if t.num_rows:
                        yield from evaluate(source["steps"], t, counts).to_batches()
    finally:
        consumer.close()


def _fetch(consumer, topic: str, partition: int, start: int, until: int, source: dict, counts: dict) -> pa.Table:
    """The records of ``[start, until)`` of one partition, as Spark's
    ``KafkaDataConsumer`` returns them: invisible offsets (transaction
    markers, aborted records under ``read_committed``, compacted ones)
    skipped; offsets deleted by retention an error naming them
    (``failOnDataLoss``), or skipped and counted."""
    from confluent_kafka import TopicPartition

    timeout = source["poll_ms"] / 1000
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout, cached=False)
    start = low if start < 0 else start  # Spark's late-bound earliest / latest
    until = high if until < 0 else until
    where = f"Kafka topic {topic!r} partition {partition}"
    if start < low:
        lost = min(low, until) - start
        if source["fail_on_data_loss"]:
            raise KafkaReadError(
                f"{where}: offsets {start} to {min(low, until) - 1} of this batch's range [{start}, {until}) are no "
                f"longer in Kafka (its earliest offset is {low}: deleted by retention?); nothing of the batch is "
                "committed. Set the source option failOnDataLoss=false to skip lost offsets (counted as "
                "offsets_lost)")
        counts["offsets_lost"] = counts.get("offsets_lost", 0) + lost
        start = min(low, until)
    schema = kafka_schema(source["headers"])
    if start >= until:
        return schema.empty_table()
    consumer.assign([TopicPartition(topic, partition, start)])
    msgs: list = []
    pos, last = start, time.monotonic()
    while pos < until:
        got = consumer.consume(num_messages=min(100_000, max(1_000, until - pos)), timeout=min(timeout, 1.0))
        if got:
            errs = [m for m in got if m.error() is not None]
            if errs:
                raise KafkaReadError(f"{where}: reading offsets [{pos}, {until}): {errs[0].error()}")
            msgs += got
            pos = got[-1].offset() + 1
            last = time.monotonic()
        if pos < until:  # offsets after the last record may be invisible (markers, aborted): the position says
            at = consumer.position([TopicPartition(topic, partition)])[0].offset
            pos = max(pos, at)
            if not got and pos < until and time.monotonic() - last > timeout:
                raise KafkaReadError(f"{where}: no record at or after offset {pos} (this batch reads to {until}) "
                                     f"within kafkaConsumer.pollTimeoutMs={source['poll_ms']} ms")
    consumer.unassign()
    n = len(msgs)
    offsets = np.fromiter((m.offset() for m in msgs), np.int64, n)
    if n and offsets[-1] >= until:
        n = int(np.searchsorted(offsets, until))
        msgs, offsets = msgs[:n], offsets[:n]
    stamps = np.array([m.timestamp() for m in msgs], np.int64).reshape(n, 2)
    cols = [pa.array([m.key() for m in msgs], pa.binary()), pa.array([m.value() for m in msgs], pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.array(np.full(n, partition, np.int32)), pa.array(offsets),
            pa.array(stamps[:, 1] * 1000).cast(pa.timestamp("us", tz="UTC")),
            pa.array((stamps[:, 0] - 1).astype(np.int32))]  # librdkafka's type, 0 = none, is Spark's + 1
    if source["headers"]:
        cols.append(pa.array([None if not h else [{"key": k, "value": v} for k, v in h]
                              for h in (m.headers() for m in msgs)], schema.field("headers").type))
    return pa.Table.from_arrays(cols, schema=schema)
