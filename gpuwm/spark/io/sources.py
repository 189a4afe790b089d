"""The inputs gpuwm's tasks make themselves (the task side of
:mod:`gpuwm.spark.driver.direct` and :mod:`gpuwm.spark.driver.kafka`, which decide on the
driver what each batch's tasks read): a micro-batch's Parquet files, its
Nexmark events, its Kafka offset ranges. No Spark here: the task gets what
to read as plain values, and hands back Arrow record batches.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import GpuwmError
from ..storage.checkpoint import Location


def file_of(uri: str, options: tuple = ()) -> tuple[Any, str]:
    """(file system, path in it) of a file :func:`~gpuwm.spark.driver.direct.batch_files` named; ``options``:
    Spark's ``spark.hadoop.fs.*`` settings (:func:`~gpuwm.spark.storage.checkpoint.spark_fs_options`)."""
    loc = Location.of(uri, options)
    return loc.fs, loc.root




def _read_file(uri: str, schema: pa.Schema, options: tuple, steps: list | None = None,
               source: pa.Schema | None = None, counts: dict | None = None) -> pa.Table:
    """One file's rows cast to ``schema`` — or, with ``steps`` (the selects
    over the source, :mod:`gpuwm.project`), its columns
    ``source`` with the selects applied, then cast."""
    from ...project import evaluate

    fs, path = file_of(uri, options)
    read = schema if steps is None else source
    t = pq.read_table(path, columns=read.names, filesystem=fs).cast(read)
    return t if steps is None else evaluate(steps, t, counts).cast(schema)


def read_files(paths: list[str], schema: pa.Schema, ids: Iterator[pa.RecordBatch],
               options: tuple = (), steps: list | None = None, read: str | None = None,
               counts: dict | None = None) -> Iterator[pa.RecordBatch]:
    """In a task: the rows of the files whose indexes (into ``paths``) the
    task's input carries, in order, cast to the stream's schema — or, with
    ``steps`` (the selects over the source, :mod:`gpuwm.project`),
    the files' columns ``read`` (a schema's text) with the selects applied."""
    from gpuwm.schema import schema_from_text

    source = None if steps is None else schema_from_text(read)
    for b in ids:
        for i in b.column(0).to_pylist():
            yield from _read_file(paths[i], schema, options, steps, source, counts).to_batches()


def read_union_files(plan: Any, files: list[list], ids: Iterator[pa.RecordBatch], options: tuple = (),
                     steps: list | None = None, counts: dict | None = None) -> Iterator[pa.RecordBatch]:
    """:func:`read_files` for several inputs: ``files`` as ``[input index,
    path]``; each file's rows as the inputs' union rows
    (:func:`gpuwm.inputs.to_union`); ``steps``: per input, None or its
    selects over the source and the files' columns they read (a schema's
    text), as :func:`read_files` takes them."""
    from gpuwm.inputs import input_schemas, to_union
    from gpuwm.schema import schema_from_text

    named = list(input_schemas(plan.input_schema).items())
    read = [(None, None) if st is None else (st[0], schema_from_text(st[1])) for st in steps or [None] * len(named)]
    for b in ids:
        for i in b.column(0).to_pylist():
            k, uri = files[i]
            name, schema = named[k]
            t = _read_file(uri, schema, options, *read[k], counts)
            yield from to_union(plan.input_schema, {name: t}).to_batches()


def generate_nexmark(source: dict, ids: Iterator[pa.RecordBatch], schema: pa.Schema | None = None,
                     counts: dict | None = None) -> Iterator[pa.RecordBatch]:
    """In a task: the events of the splits whose numbers the task's input
    carries, exactly as :class:`~gpuwm.spark.io.nexmark.NexmarkStreamReader`
    would read them — with ``source["steps"]`` (the selects and filters
    over the stream, :mod:`gpuwm.project`) applied, cast to ``schema``."""
    from gpuwm.nexmark import GENERATORS

    from ...project import evaluate
    from .nexmark import _kind, config_from_options

    cfg, _, _ = config_from_options(source["options"])
    gen = GENERATORS[_kind(source["options"])][0]
    steps = source.get("steps")
    for b in ids:
        for split in b.column(0).to_pylist():
            t = gen(cfg, source["start"], source["end"], split)
            yield from (t if steps is None else evaluate(steps, t, counts).cast(schema)).to_batches()


# -- Kafka ----------------------------------------------------------------------------
class KafkaReadError(GpuwmError):
    """A batch's Kafka range cannot be read as Spark planned it."""

    runtime = True  # the input changed under the query, not the spec


#: what a task's Kafka read counts beside its rows (:func:`read_kafka`), summed by :func:`add_counts`
KAFKA_COUNTS = ("kafka_client_ranges", "kafka_client_why", "kafka_codec_bytes", "kafka_codec_out_bytes",
                "kafka_codec_s")


def add_counts(into: dict, more: dict, keys: tuple | None = None) -> dict:
    """``into`` with ``more``'s counts added (of ``keys``, where given):
    numbers summed, ``{reason: n}`` dicts merged by summing.

    >>> add_counts({"n": 1, "why": {"a": 1}}, {"n": 2, "why": {"a": 1, "b": 3}, "x": 5}, ("n", "why"))
    {'n': 3, 'why': {'a': 2, 'b': 3}}
    """
    for k, v in more.items():
        if keys is not None and k not in keys:
            continue
        if isinstance(v, dict):
            add_counts(into.setdefault(k, {}), v)
        else:
            into[k] = into.get(k, 0) + v
    return into


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
    projection (:func:`gpuwm.project.evaluate`). ``counts`` gets
    ``malformed`` (messages ``from_json`` did not parse whole) and
    ``offsets_lost`` (offsets deleted before they were read, with
    ``failOnDataLoss`` false), ``kafka_client_ranges`` (ranges read by
    ``confluent-kafka``: where :mod:`gpuwm.spark.io.kafkawire` does not take
    them, or ``GPUWM_KAFKA_FETCH=client``) with ``kafka_client_why``
    (``{reason: ranges}``, one reason per kind), and the compressed
    batches' ``kafka_codec_bytes``, ``kafka_codec_out_bytes`` and
    ``kafka_codec_s`` (:func:`gpuwm.spark.io.kafkawire.inflate`)."""
    from confluent_kafka import Consumer

    from ...project import evaluate, inputs_of
    from .kafkawire import wire_ok

    counts = {} if counts is None else counts
    mine = [source["parts"][i] for b in ids for i in b.column(0).to_pylist()]
    if not mine:
        return
    need = inputs_of(source["steps"]) if source["steps"] else set(kafka_schema(source["headers"]).names)
    longest = max(z - a for p in mine for a, z in p["ranges"])
    # one fetch takes a partition's range in large pieces, and the next is asked for at once
    fast = {"max.partition.fetch.bytes": 16 << 20, "fetch.queue.backoff.ms": 0, "fetch.wait.max.ms": 10}
    made: list = []
    lock = threading.Lock()

    def consumer():  # made when first needed: a range gpuwm's fetch does not take, a watermark, lost offsets
        with lock:
            if not made:
                made.append(Consumer({**fast, **source["conf"], "enable.auto.commit": False,
                                      "enable.partition.eof": False,
                                      "auto.offset.reset": "error",  # a deleted offset is an error, not a jump
                                      "group.id": source["conf"].get("group.id", "gpuwm-direct"),
                                      # fetch ahead no further than a range needs (not the partition's rest)
                                      "queued.min.messages": max(1, min(longest, 1_000_000))}))
            return made[0]

    off = "GPUWM_KAFKA_FETCH=client" if source.get("fetch", "wire") != "wire" else wire_ok(source["conf"])
    wire = _Wire(consumer, source, need) if off is None else None
    ranges = [(p["topic"], p["partition"], a, z) for p in mine for a, z in p["ranges"]]
    try:
        read = wire.read(ranges) if wire else [None] * len(ranges)
        for (topic, partition, a, z), got in zip(ranges, read):
            t, their = got.result() if got is not None else (None, {"kafka_client_why": {off: 1}})
            if t is None:  # confluent-kafka's, here (its consumer is this thread's)
                counts["kafka_client_ranges"] = counts.get("kafka_client_ranges", 0) + 1
                t = _fetch(consumer(), topic, partition, a, z, source, counts, need)
                t = evaluate(source["steps"], t, counts) if t.num_rows else t
            add_counts(counts, their)
            if t.num_rows:
                yield from t.to_batches()
    finally:
        if wire:
            wire.close()
        if made:
            made[0].close()


class _Wire:
    """A task's ranges through :mod:`gpuwm.spark.io.kafkawire`, read and
    evaluated on threads (sockets and the NumPy and Arrow calls release the
    GIL), a connection each; a range it does not take
    (:class:`~gpuwm.spark.io.kafkawire.Unsupported`) comes back as None, for
    ``confluent-kafka`` to read from its start."""

    def __init__(self, consumer, source: dict, need: set):
        self.consumer, self.source, self.need = consumer, source, need
        self.timeout = source["poll_ms"] / 1000
        self.committed = str(source["conf"].get("isolation.level", "")).lower() == "read_committed"
        self.pool = None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)

    def read(self, ranges: list[tuple]) -> list:
        """A future per range of ``(the range's rows through the select,
        or None; the counts of its reading)``, in order."""
        import os
        from concurrent.futures import ThreadPoolExecutor

        from .kafkawire import Unsupported
        from .kafkawire import leaders as find

        try:
            leaders = find(self.source["conf"].get("bootstrap.servers", ""), sorted({r[0] for r in ranges}),
                           self.timeout, self.source["conf"])
        except Unsupported as e:  # every range to confluent-kafka
            _declined(str(e))
            return [_Declined(e.kind)] * len(ranges)
        self.pool = ThreadPoolExecutor(max(1, min(len(ranges), os.cpu_count() or 1, 4)), "gpuwm-kafka")
        return [self.pool.submit(self._range, leaders.get(r[:2]), *r) for r in ranges]

    def _range(self, leader, topic: str, partition: int, start: int, until: int) -> tuple[pa.Table | None, dict]:
        import struct

        from ...project import evaluate
        from .kafkawire import Connection, Unsupported

        counts: dict = {}
        try:
            if leader is None:
                raise Unsupported(f"no leader known for {topic} {partition}", "no leader known")
            conn = Connection(*leader, self.timeout, self.source["conf"])
            try:
                t = self._fetch(conn, topic, partition, start, until, counts)
            finally:
                conn.close()
        except (Unsupported, struct.error, IndexError, ValueError, OSError) as e:  # bytes it cannot read
            _declined(f"{topic} {partition} [{start}, {until}): {type(e).__name__}: {e}")
            return None, {"kafka_client_why": {getattr(e, "kind", None) or f"{type(e).__name__} decoding": 1}}
        return (evaluate(self.source["steps"], t, counts) if t.num_rows else t), counts

    def _fetch(self, conn, topic: str, partition: int, start: int, until: int, counts: dict) -> pa.Table:
        from confluent_kafka import TopicPartition

        from . import kafkawire as kw

        need = self.need
        tp = TopicPartition(topic, partition)
        where = f"Kafka topic {topic!r} partition {partition}"
        if start < 0 or until < 0:
            start, until = _late_bound(self.consumer(), tp, start, until, self.timeout)
        segs: list = []
        floors: list[int] = []
        codec: dict = {}
        pos, last = start, time.monotonic()
        while pos < until:
            err, _, aborted, data = conn.fetch(topic, partition, pos, committed=self.committed, max_bytes=16 << 20,
                                               wait_ms=min(self.source["poll_ms"], 100))
            if err == kw.OFFSET_OUT_OF_RANGE:
                low = self.consumer().get_watermark_offsets(tp, timeout=self.timeout, cached=False)[0]
                if pos >= low:
                    raise kw.Unsupported(f"offset {pos} out of range, at or after the earliest {low}", "offset out of range")
                pos = _lost(where, pos, until, low, self.source, counts)
                continue
            if err:
                raise kw.Unsupported(f"broker error {err}", f"Kafka error code {err}")
            got, nxt = kw.batches(data, self.committed, aborted, until, codec)
            if nxt is None:
                if time.monotonic() - last > self.timeout:
                    raise _no_record(where, pos, until, self.source["poll_ms"])
                continue
            segs += got
            floors += [pos] * len(got)  # a batch begins before the offset fetched (or lost) from
            pos, last = nxt, time.monotonic()
        add_counts(counts, {f"kafka_{k}": v for k, v in codec.items()})
        if not segs:
            return _table(topic, partition, 0, {}, need, self.source["headers"])
        got = kw.records(segs, need)
        keep = np.flatnonzero((got["offset"] >= np.array(floors, np.int64)[got.pop("segment")])
                              & (got["offset"] < until))
        if len(keep) < len(got["offset"]):  # mostly one run (a slice), unless offsets were lost between
            a, z = (int(keep[0]), int(keep[-1]) + 1) if len(keep) else (0, 0)
            idx = None if z - a == len(keep) else pa.array(keep)
            got = {k: v[a:z] if idx is None else (v[keep] if isinstance(v, np.ndarray) else v.take(idx))
                   for k, v in got.items()}
        cols = {k: v for k, v in got.items() if not isinstance(v, np.ndarray)}
        cols["offset"] = pa.array(got["offset"])
        cols["timestamp"] = pa.array(got["timestamp"] * 1000).cast(pa.timestamp("us", tz="UTC"))
        cols["timestampType"] = pa.array(got["timestampType"])
        return _table(topic, partition, len(got["offset"]), cols, need, self.source["headers"])


def _table(topic: str, partition: int, n: int, cols: dict, need: set, headers: bool) -> pa.Table:
    """One range's records as Spark's Kafka columns: ``cols`` has those read
    (``offset`` at least, where there are rows), the others are nulls."""
    schema = kafka_schema(headers)
    cols = {"offset": pa.array(np.zeros(0, np.int64)), **cols, "topic": pa.repeat(pa.scalar(topic, pa.string()), n),
            "partition": pa.array(np.full(n, partition, np.int32))}
    return pa.Table.from_arrays([cols[f.name] if f.name in cols and (f.name != "headers" or "headers" in need)
                                 else pa.nulls(n, f.type) for f in schema], schema=schema)


class _Declined:
    """A range the wire fetch did not take, as :meth:`_Wire.read` returns it: why, as its future would."""

    def __init__(self, why: str):
        self.why = why

    def result(self) -> tuple[None, dict]:
        return None, {"kafka_client_why": {self.why: 1}}


def _declined(why: str) -> None:
    """Why gpuwm's fetch left a range to confluent-kafka (the batch counts it as ``kafka_client_ranges``)."""
    import logging

    logging.getLogger("gpuwm").info("gpuwm: Kafka range read by confluent-kafka: %s", why)


def _late_bound(consumer, tp, start: int, until: int, timeout: float) -> tuple[int, int]:
    """Spark's late-bound earliest (-2) / latest (-1) offsets of a range, resolved now."""
    if start < 0 or until < 0:
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
        start, until = low if start < 0 else start, high if until < 0 else until
    return start, until


def _no_record(where: str, pos: int, until: int, poll_ms: int) -> KafkaReadError:
    return KafkaReadError(f"{where}: no record at or after offset {pos} (this batch reads to {until}) "
                          f"within kafkaConsumer.pollTimeoutMs={poll_ms} ms")


def _fetch(consumer, topic: str, partition: int, start: int, until: int, source: dict, counts: dict,
           need: set) -> pa.Table:
    """The records of ``[start, until)`` of one partition, as Spark's
    ``KafkaDataConsumer`` returns them: invisible offsets (transaction
    markers, aborted records under ``read_committed``, compacted ones)
    skipped; offsets deleted by retention an error naming them
    (``failOnDataLoss``), or skipped and counted. Only the columns in
    ``need`` are filled (the others are nulls)."""
    from confluent_kafka import KafkaError, TopicPartition

    timeout = source["poll_ms"] / 1000
    tp = TopicPartition(topic, partition)
    where = f"Kafka topic {topic!r} partition {partition}"
    start, until = _late_bound(consumer, tp, start, until, timeout)
    schema = kafka_schema(source["headers"])
    msgs: list = []
    pos, last = start, time.monotonic()
    if pos < until:
        consumer.assign([TopicPartition(topic, partition, pos)])
    while pos < until:
        got = consumer.consume(num_messages=min(100_000, until - pos), timeout=min(timeout, 0.2))
        if got:
            errs = [m for m in got if m.error() is not None]
            if errs and errs[0].error().code() == KafkaError._AUTO_OFFSET_RESET:  # offsets deleted (retention)
                got = [m for m in got if m.error() is None]
                low = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)[0]
                pos = _lost(where, pos, until, low, source, counts)
                if pos < until:
                    consumer.assign([TopicPartition(topic, partition, pos)])
                continue
            if errs:
                raise KafkaReadError(f"{where}: reading offsets [{pos}, {until}): {errs[0].error()}")
            msgs += got
            pos = got[-1].offset() + 1
            last = time.monotonic()
        if pos < until:  # offsets after the last record may be invisible (markers, aborted): the position says
            at = consumer.position([tp])[0].offset
            pos = max(pos, at)
            if not got and pos < until and time.monotonic() - last > timeout:
                raise _no_record(where, pos, until, source["poll_ms"])
    if start < until:
        consumer.unassign()
    n = len(msgs)
    offsets = np.fromiter((m.offset() for m in msgs), np.int64, n)
    if n and offsets[-1] >= until:
        n = int(np.searchsorted(offsets, until))
        msgs, offsets = msgs[:n], offsets[:n]
    cols: dict[str, pa.Array] = {"offset": pa.array(offsets)}
    if "key" in need:
        cols["key"] = pa.array([m.key() for m in msgs], pa.binary())
    if "value" in need:
        cols["value"] = pa.array([m.value() for m in msgs], pa.binary())
    if "timestamp" in need or "timestampType" in need:
        stamps = np.array([m.timestamp() for m in msgs], np.int64).reshape(n, 2)
        cols["timestamp"] = pa.array(stamps[:, 1] * 1000).cast(pa.timestamp("us", tz="UTC"))
        cols["timestampType"] = pa.array((stamps[:, 0] - 1).astype(np.int32))  # librdkafka's, 0 = none, is Spark's + 1
    if "headers" in need and source["headers"]:
        cols["headers"] = pa.array([None if not h else [{"key": k, "value": v} for k, v in h]
                                    for h in (m.headers() for m in msgs)], schema.field("headers").type)
    return _table(topic, partition, n, cols, need, source["headers"])


def _lost(where: str, pos: int, until: int, low: int, source: dict, counts: dict) -> int:
    """Offsets ``[pos, low)`` are gone: the batch fails (``failOnDataLoss``),
    or they are counted and the read goes on from ``low``."""
    end = min(low, until)
    if source["fail_on_data_loss"]:
        raise KafkaReadError(
            f"{where}: offsets {pos} to {end - 1} of this batch's range (to {until}) are no longer in Kafka "
            f"(its earliest offset is {low}: deleted by retention?); nothing of the batch is committed. Set the "
            "source option failOnDataLoss=false to skip lost offsets (counted as offsets_lost)")
    counts["offsets_lost"] = counts.get("offsets_lost", 0) + end - pos
    return end
