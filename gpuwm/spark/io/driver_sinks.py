"""The sinks the driver runs for each batch, exactly once (Kafka, Delta),
and the one place a sink is chosen."""

from __future__ import annotations

from typing import Mapping, Sequence

from ...errors import ConfigError


class _DriverSink:
    """A sink of gpuwm's own that the driver runs for each batch with rows,
    before gpuwm commits the batch, marked with the query's id and the
    batch id so that a batch replayed after a crash lands once."""

    skip_empty = True  # (the driver does not call it for a batch that staged no rows)

    def __init__(self, checkpoint: str):
        self.checkpoint = checkpoint
        self._app: str | None = None

    def app_id(self, spark) -> str:
        """The query's id, as Spark keeps it in ``<checkpoint>/metadata`` across restarts."""
        if self._app is None:
            from ..storage.checkpoint import Location, spark_fs_options

            meta = Location.of(self.checkpoint, spark_fs_options(spark), "checkpoint").read_json("metadata") or {}
            self._app = meta.get("id") or self.checkpoint
        return self._app

    def __call__(self, batch_df, batch_id: int) -> None:
        """As a ``foreachBatch`` function: the batch's rows through :meth:`write_arrow`."""
        self.write_arrow(batch_df.toArrow(), batch_id, batch_df.sparkSession)


class KafkaAppend(_DriverSink):
    """``format("kafka")`` as gpuwm runs it, exactly once: each micro-batch's
    rows — Spark's Kafka sink columns: ``value``, and ``key``, ``topic``,
    ``partition``, ``headers`` where the query has them, as its last select
    made them (``CAST(k AS STRING)``, ``to_json(struct(*))``,
    ``array(struct(...))``: evaluated by gpuwm) — produced in one Kafka
    transaction (confluent-kafka's transactional producer,
    ``transactional.id`` ``gpuwm-<query id>``), which also commits, as the
    consumer group ``gpuwm-<query id>``'s offset of partition 0 of the
    marker topic (the ``topic`` option, else the batch's first topic by
    name), the batch id + 1: the durable marker of the last batch written.
    A batch replayed after a crash between Kafka's commit and gpuwm's finds
    its marker and is skipped; one that crashed inside its transaction is
    aborted when the restarted producer fences it. A ``read_committed``
    consumer sees every row once (Spark's own Kafka sink is at least once).
    As Spark's: the ``topic`` option overrides a ``topic`` column, a row
    without a topic fails the batch, a row without a ``partition`` goes
    where Java's producer puts it (librdkafka's ``murmur2_random``
    partitioner: a key's murmur2 hash, as Java's). The ``kafka.*`` options
    are the producer's and the marker's consumer's settings (TLS and SASL
    as librdkafka takes them). The marker lives as long as the broker keeps
    the group's offsets (``offsets.retention.minutes``)."""

    OPTIONS = ("topic", "checkpointlocation")
    COLUMNS = {"key": ("string", "binary"), "value": ("string", "binary"), "topic": ("string",),
               "partition": ("int",), "headers": ("array<struct<key:string,value:binary>>",)}
    CHUNK = 20_000  # messages handed to librdkafka per produce_batch call

    def __init__(self, options: Mapping[str, str], checkpoint: str, columns: Sequence[str] = ("value",)):
        super().__init__(checkpoint)
        self.topic = next((v for k, v in options.items() if k.lower() == "topic"), None)
        self.conf = {k[6:]: v for k, v in options.items() if k.lower().startswith("kafka.")}
        if not (self.topic or "topic" in columns) or "bootstrap.servers" not in self.conf:
            raise ConfigError("the kafka sink needs option('kafka.bootstrap.servers', ...), and option('topic', "
                              "...) or a topic column")
        self._producer = None
        self._known: set[str] = set()  # topics the broker has

    def write_arrow(self, table, batch_id: int, spark) -> None:
        import pyarrow.compute as pc
        from confluent_kafka import Consumer, Producer, TopicPartition

        first = self.topic or pc.min(table.column("topic")).as_py()
        if first is None:
            raise ValueError(_NULL_TOPIC)
        group = f"gpuwm-{self.app_id(spark)}"
        marker = TopicPartition(first, 0)
        consumer = Consumer({**self.conf, "group.id": group, "enable.auto.commit": False,
                             "isolation.level": "read_committed"})
        try:
            self._check_topics(consumer, [self.topic] if self.topic else pc.unique(table.column("topic")).to_pylist())
            done = _committed(consumer, marker)
            if done >= batch_id + 1:  # written before a crash that gpuwm's commit did not outlive
                return
            if self._producer is None:
                self._producer = Producer({"partitioner": "murmur2_random", **self.conf, "transactional.id": group,
                                           "enable.idempotence": True})
                self._producer.init_transactions(60)  # fences (aborts) an earlier attempt's open transaction
            p = self._producer
            p.begin_transaction()
            try:
                for (topic, part), some in _messages(table, self.topic).items():
                    for lo in range(0, len(some), self.CHUNK):
                        _produce_all(p, topic, part, some[lo:lo + self.CHUNK])
                p.send_offsets_to_transaction([TopicPartition(marker.topic, 0, batch_id + 1)],
                                              consumer.consumer_group_metadata(), 60)
                p.commit_transaction(120)
            except BaseException:
                p.abort_transaction(60)
                raise
        finally:
            consumer.close()

    def _check_topics(self, consumer, topics: list) -> None:
        """Each of ``topics`` exists (a topic the broker does not have fails
        the batch in one line, before its transaction), asked once a topic."""
        from confluent_kafka import KafkaError

        for t in topics:
            if t is None or t in self._known:
                continue
            meta = consumer.list_topics(t, timeout=30).topics.get(t)
            if meta is None or meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise ValueError(f"topic {t!r} does not exist on {self.conf['bootstrap.servers']} (create it; "
                                 "gpuwm's Kafka sink does not)")
            self._known.add(t)

    def close(self) -> None:
        """Once the query stopped: send what is queued and let the producer go."""
        p, self._producer = self._producer, None
        if p is not None:
            p.flush(30)


_NULL_TOPIC = "null topic present in the data: use the topic option for setting a topic (as Spark's Kafka sink)"


def _messages(table, topic: str | None) -> dict[tuple[str, int | None], list[dict]]:
    """A batch's rows as confluent-kafka's messages, by topic (``topic``,
    else each row's) and partition (None: the partitioner's; librdkafka
    2.16's ``produce_batch`` does not take one per message)."""
    n, cols = table.num_rows, table.column_names
    fields = {"value": _bytes(table.column("value"))}
    if "key" in cols:
        fields["key"] = _bytes(table.column("key"))
    if "headers" in cols:
        fields["headers"] = [None if h is None else [(e["key"], e["value"]) for e in h]
                             for h in table.column("headers").to_pylist()]
    topics = [topic] * n if topic else table.column("topic").to_pylist()
    if None in topics:
        raise ValueError(_NULL_TOPIC)
    parts = table.column("partition").to_pylist() if "partition" in cols else [None] * n
    out: dict[tuple[str, int | None], list[dict]] = {}
    names = list(fields)
    for t, part, *vals in zip(topics, parts, *fields.values()):
        out.setdefault((t, part), []).append({k: v for k, v in zip(names, vals) if v is not None or k == "value"})
    return out


def _produce_all(p, topic: str, part: int | None, msgs: list[dict]) -> None:
    """Queue every message (to ``part``, else where the partitioner puts it): with ``produce_batch`` (one call for many: the
    per-message ``produce`` call was 3-5 us a message), or one ``produce``
    a message where they have headers (which ``produce_batch`` does not
    take); those the full local queue refused are queued again once it
    drained; any other refusal is raised."""
    from confluent_kafka import KafkaError, KafkaException

    to = {} if part is None else {"partition": part}
    if any("headers" in m for m in msgs):
        for m in msgs:
            while True:
                try:
                    p.produce(topic, **m, **to)
                    break
                except BufferError:
                    p.poll(0.05)  # let the queue drain
        p.poll(0)
        return
    while msgs:
        if p.produce_batch(topic, msgs, **to) == len(msgs):
            p.poll(0)
            return
        failed = [m for m in msgs if "_error" in m]
        other = next((m["_error"] for m in failed if m["_error"].code() != KafkaError._QUEUE_FULL), None)
        if other is not None:
            raise KafkaException(other)
        msgs = [{k: v for k, v in m.items() if k != "_error"} for m in failed]
        p.poll(0.05)  # let the queue drain


def _committed(consumer, tp, timeout: float = 60) -> int:
    """The group's committed offset of ``tp`` (negative: none), retried
    while the group's coordinator is still being chosen or loaded (a new
    group, a broker just started)."""
    import time

    from confluent_kafka import KafkaError, KafkaException

    choosing = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                KafkaError.COORDINATOR_NOT_AVAILABLE)
    until = time.monotonic() + timeout
    while True:
        try:
            return consumer.committed([tp], timeout=30)[0].offset
        except KafkaException as e:
            err = e.args[0]
            if not (err.retriable() or err.code() in choosing) or time.monotonic() > until:
                raise
            time.sleep(0.5)


def _bytes(col) -> list:
    """A string or binary column's values as bytes (null: None)."""
    import pyarrow as pa

    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary())
    return col.to_pylist()


class DeltaAppend(_DriverSink):
    """``format("delta")`` as gpuwm runs it: each micro-batch's rows
    appended to the Delta table at ``options['path']`` in the driver, before
    gpuwm commits the batch, as one Delta commit marked with Delta's
    application transaction (app id: the streaming query's id from its
    checkpoint; version: the batch id), as Spark's own Delta sink marks
    them — so a batch replayed after a crash between Delta's commit and
    gpuwm's is found committed and skipped: each row lands once.

    The writer (:attr:`writer`): delta-rs (``deltalake``, the ``delta``
    extra) from the batch's Arrow, read straight from the staged Parquet —
    no Spark job; where it is not installed, Delta's Spark writer (the
    session needs Delta Lake, ``io.delta:delta-spark``), which skips a
    marked batch itself. bench_sinks.py: 0.017-0.096 s a batch with
    delta-rs, 2.0-2.4 s with Delta's Spark writer. ``mergeSchema`` is the one writer
    option taken. Batches without rows write nothing."""

    OPTIONS = ("path", "checkpointlocation", "mergeschema")
    #: "delta-rs", "spark", or None: delta-rs where ``deltalake`` imports
    writer: str | None = None

    def __init__(self, options: Mapping[str, str], checkpoint: str):
        super().__init__(checkpoint)
        opts = {k.lower(): v for k, v in options.items()}
        self.path = opts["path"]
        self.merge = opts.get("mergeschema", "false").lower() == "true"
        if self.writer is None:
            try:
                import deltalake  # noqa: F401
            except ImportError:
                self.writer = "spark"
            else:
                self.writer = "delta-rs"
        if self.writer == "delta-rs":
            self.write_arrow = self._write_arrow  # the driver hands the batch over as Arrow

    def __call__(self, batch_df, batch_id: int) -> None:
        """Delta's Spark writer: it skips a batch whose (app id, version) it committed."""
        (batch_df.write.format("delta").option("mergeSchema", str(self.merge).lower())
         .option("txnAppId", self.app_id(batch_df.sparkSession)).option("txnVersion", batch_id)
         .mode("append").save(self.path))

    def _write_arrow(self, table, batch_id: int, spark) -> None:
        """delta-rs: skip a batch the table's transaction for this query already holds, else append it."""
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
        from deltalake.exceptions import TableNotFoundError

        app = self.app_id(spark)
        try:
            done = DeltaTable(self.path).transaction_version(app)
        except TableNotFoundError:
            done = None
        if done is not None and done >= batch_id:  # committed before a crash that gpuwm's commit did not outlive
            return
        write_deltalake(self.path, table, mode="append", schema_mode="merge" if self.merge else None,
                        commit_properties=CommitProperties(app_transactions=[Transaction(app, batch_id)]))


def sink_tuple(fmt: str, options: Mapping[str, str], ck: str, columns: Sequence[str]) -> tuple:
    """The sink :meth:`Accelerated.pipeline` takes for ``format(fmt)`` with
    ``options`` (a ``writeStream``'s or a spec's), on checkpoint ``ck``, of
    rows with ``columns``: a path gpuwm's tasks write, the console, or a
    driver sink (:class:`DeltaAppend`, :class:`KafkaAppend`)."""
    if fmt == "parquet":
        return ("parquet", next(v for k, v in options.items() if k.lower() == "path"))
    if fmt == "delta":
        return ("foreachBatch", DeltaAppend(options, ck))
    if fmt == "kafka":
        if "value" not in columns:
            raise ConfigError(f"a kafka sink writes a value column (and key, topic, partition, headers: Spark's "
                              f"Kafka sink columns); the query's are {list(columns)}: name them in a select")
        return ("foreachBatch", KafkaAppend(options, ck, columns))
    return ("console", int(next((v for k, v in options.items() if k.lower() == "numrows"), 20)))


class MemoryTable(_DriverSink):
    """``format("memory")`` as gpuwm runs it, as Spark's memory sink: a temp
    view named by ``queryName``, made empty at the start (:meth:`open`),
    holding the query's rows in batch order — every batch's in append and
    update mode, the last batch's in complete mode; a batch handed over
    again (a replay in this driver) replaces its own rows. Like Spark's, it
    is for tests and notebooks: the rows live in the driver, and a
    restarted query starts with an empty table."""

    OPTIONS = ("checkpointlocation",)

    def __init__(self, name: str, mode: str, checkpoint: str, schema):
        super().__init__(checkpoint)
        self.name, self.complete, self.schema = name, mode.lower() == "complete", schema
        self.batches: dict[int, object] = {}  # batch id -> its rows (Arrow)

    def open(self, spark) -> None:
        """The view, empty, as Spark's memory sink makes it when the query starts."""
        spark.createDataFrame([], self.schema).createOrReplaceTempView(self.name)

    def write_arrow(self, table, batch_id: int, spark) -> None:
        import pyarrow as pa

        if self.complete:
            self.batches.clear()
        self.batches[batch_id] = table
        rows = pa.concat_tables([self.batches[b] for b in sorted(self.batches)])
        spark.createDataFrame(rows, self.schema).createOrReplaceTempView(self.name)
