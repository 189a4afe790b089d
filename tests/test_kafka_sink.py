"""``format("kafka")`` through ``accelerate``, exactly once: gpuwm runs the
query, evaluates its key and value (``CAST(k AS STRING)``,
``to_json(struct(*))``) and produces each micro-batch in one Kafka
transaction with its marker, on the KRaft broker of
``tests/kafka_broker.py`` (jars from Maven Central). Checked against the
key and value Spark's own query gives over the same files, read back with
a ``read_committed`` consumer, across a crash between Kafka's commit and
gpuwm's and one inside a transaction."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwm.spark import accelerate, local_session

from . import needs
from .kafka_broker import create_topic
from .test_spark import _random_batches, _write_batches

pytestmark = [pytest.mark.kafka, pytest.mark.spark, needs.KAFKA]


@pytest.fixture(scope="module")
def spark():
    from gpuwm.spark.front.spec import spec_conf

    s = local_session(app="gpuwm-kafka-sink", cores=2, conf=spec_conf({"source": {"format": "kafka"}}))
    yield s
    s.stop()


def _read_committed(bootstrap: str, topic: str, partitions: int, full: bool = False) -> list[tuple]:
    """Every (key, value) a ``read_committed`` consumer sees on ``topic``, to
    its end; ``full``: (partition, key, value, headers)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, ended = [], set()
    try:
        while len(ended) < partitions:
            m = c.poll(10)
            assert m is not None, f"no end of {topic} within 10 s"
            if m.error():
                ended.add(m.partition())
                continue
            kv = (m.key().decode() if m.key() is not None else None, m.value().decode())
            out.append((m.partition(), *kv, tuple(m.headers() or ())) if full else kv)
    finally:
        c.close()
    return sorted(out)


def test_kafka_sink_writes_spark_s_messages_exactly_once_across_crashes(spark, broker, tmp_path, monkeypatch,
                                                                        capsys):
    from pyspark.sql import functions as F

    from gpuwm.spark.storage.checkpoint import Checkpoint

    from .oracle import _source

    _write_batches(f"{tmp_path}/in", _random_batches(np.random.default_rng(41), 5, 30, step=6, behind=14, keys=4))
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    agg = _source(spark, f"{tmp_path}/in").withWatermark("ts", "10 seconds").groupBy(
        F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"), F.max("price").alias("mx"))
    df = agg.select(F.col("k").cast("string").alias("key"), F.to_json(F.struct("*")).alias("value"))
    want: list = []
    (df.writeStream.foreachBatch(lambda b, i: want.extend((r.key, r.value) for r in b.collect()))
     .option("checkpointLocation", f"{tmp_path}/nck").trigger(availableNow=True).start().awaitTermination())
    want.sort()
    assert len(want) > 10
    topic = "out"
    create_topic(broker.bootstrap, topic, 2)

    import gpuwm.spark.io.driver_sinks as driver_sinks

    real_gpuwm, real_bytes, crashed = Checkpoint.write_commit, driver_sinks._bytes, []

    def after_kafka(self, batch_id, *a, **k):  # a batch with rows written to Kafka; gpuwm's commit lost
        if len(crashed) == 1 and batch_id > crashed[0]:
            crashed.append(batch_id)
            raise RuntimeError("killed between Kafka's commit and gpuwm's")
        return real_gpuwm(self, batch_id, *a, **k)

    def inside_kafka(col):  # the first transaction fails half-way through its values
        values = real_bytes(col)
        if crashed or col.num_chunks == 0 or b'"window"' not in (values[0] or b""):
            return values

        def half():
            yield from values[: len(values) // 2]
            crashed.append(-1)
            raise RuntimeError("killed inside the transaction")
        return half()

    monkeypatch.setattr(Checkpoint, "write_commit", after_kafka)
    monkeypatch.setattr(driver_sinks, "_bytes", inside_kafka)

    def run():
        capsys.readouterr()
        q = (accelerate(df, vnodes=2, fallback="error").writeStream.format("kafka")
             .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic)
             .option("checkpointLocation", f"{tmp_path}/ck").trigger(availableNow=True).start())
        try:
            q.awaitTermination()
        finally:
            assert "warning" not in capsys.readouterr().err
        return q

    with pytest.raises(Exception, match="the sink failed on batch .*killed inside the transaction"):
        run()
    monkeypatch.setattr(driver_sinks, "_bytes", real_bytes)
    crashed[0] = 0
    with pytest.raises(Exception, match="killed between Kafka's commit and gpuwm's"):
        run()
    assert len(crashed) == 2
    run()
    assert _read_committed(broker.bootstrap, topic, 2) == want  # every message once, none of the aborted


def test_kafka_sink_columns_as_spark_s_sink_writes_them(spark, broker, tmp_path, capsys):
    """Spark's Kafka sink columns beyond key and value, evaluated and
    written by gpuwm: a ``topic`` column (no ``topic`` option), ``headers``
    (``array(struct(...))`` of strings cast to bytes) and, with the
    ``topic`` option, a ``partition`` column. Each topic's messages —
    partition, key, value, headers — equal those of Spark's own Kafka sink
    on the same files: a key's partition too (Java's murmur2, which gpuwm's
    producer is given)."""
    from pyspark.sql import functions as F

    _write_batches(f"{tmp_path}/in", _random_batches(np.random.default_rng(42), 7, 20, step=6, behind=14, keys=3))
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    from .oracle import _source

    agg = _source(spark, f"{tmp_path}/in").withWatermark("ts", "10 seconds").groupBy(
        F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"), F.max("price").alias("mx"))

    def header(name, col):
        return F.struct(F.lit(name).alias("key"), F.col(col).cast("string").cast("binary").alias("value"))

    def keyed(tag):
        return agg.select(F.lit(f"{tag}-keyed").alias("topic"), F.col("k").cast("string").alias("key"),
                          F.to_json(F.struct("*")).alias("value"),
                          F.array(header("k", "k"), header("n", "n")).alias("headers"))

    def parted(tag):
        return agg.select(F.col("k").cast("int").alias("partition"), F.to_json(F.struct("*")).alias("value"))

    def run(w, tag, shape, **options):
        for k, v in options.items():
            w = w.option(k, v)
        (w.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("checkpointLocation", f"{tmp_path}/ck-{tag}-{shape}").trigger(availableNow=True).start()
         .awaitTermination())

    for tag in ("native", "gpuwm"):
        for shape in ("keyed", "parted"):
            create_topic(broker.bootstrap, f"{tag}-{shape}", 4)
    run(keyed("native").writeStream, "native", "keyed")
    run(parted("native").writeStream, "native", "parted", topic="native-parted")
    capsys.readouterr()
    run(accelerate(keyed("gpuwm"), fallback="error").writeStream, "gpuwm", "keyed")
    run(accelerate(parted("gpuwm"), fallback="error").writeStream, "gpuwm", "parted", topic="gpuwm-parted")
    assert "warning" not in capsys.readouterr().err
    for shape in ("keyed", "parted"):
        want = _read_committed(broker.bootstrap, f"native-{shape}", 4, full=True)
        assert len(want) >= 9 and len({m[0] for m in want}) >= 2, want
        assert _read_committed(broker.bootstrap, f"gpuwm-{shape}", 4, full=True) == want


def test_kafka_messages_take_spark_s_sink_columns_and_refuse_a_null_topic():
    """A batch's rows as messages: the ``topic`` option over a ``topic``
    column, by (topic, partition); a row without a topic fails the batch
    (Spark's sink too), nothing produced."""
    import pyarrow as pa

    from gpuwm.spark.io.driver_sinks import _messages

    t = pa.table({"topic": ["a", "b", "a"], "partition": pa.array([1, None, 1], pa.int32()),
                  "key": ["k1", None, "k3"], "value": ["x", "y", None],
                  "headers": pa.array([[{"key": "h", "value": b"1"}], None, []],
                                      pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))})
    assert _messages(t, None) == {
        ("a", 1): [{"value": b"x", "key": b"k1", "headers": [("h", b"1")]}, {"value": None, "key": b"k3",
                                                                            "headers": []}],
        ("b", None): [{"value": b"y"}]}
    assert list(_messages(t, "opt")) == [("opt", 1), ("opt", None)]
    with pytest.raises(ValueError, match="^null topic present in the data: use the topic option"):
        _messages(t.set_column(0, "topic", pa.array(["a", None, "a"])), None)


def test_gpuwm_run_with_a_kafka_sink_sigkilled_writes_every_row_once(spark, broker, tmp_path):
    """A ``"sql"`` spec whose SELECT makes Spark's Kafka sink columns, with
    ``"sink": {"kafka": {...}}``: ``gpuwm run`` SIGKILLed twice mid-run and
    run to its end on its checkpoint. A ``read_committed`` consumer sees
    the messages of Spark's own query over the same files, each once."""
    from .oracle import _source
    from .test_spark import SCHEMA_TKP, sigkill_spec

    _write_batches(f"{tmp_path}/in", _random_batches(np.random.default_rng(43), 6, 40, step=6, behind=14, keys=4))
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    _source(spark, f"{tmp_path}/in").withWatermark("ts", "10 seconds").createOrReplaceTempView("t")
    sql = ("SELECT CAST(k AS STRING) AS key, to_json(struct(window, k, n, mx)) AS value FROM (SELECT window(ts, "
           "'5 seconds') AS window, k, count(*) AS n, max(price) AS mx FROM t GROUP BY window(ts, '5 seconds'), k)")
    want: list = []
    (spark.sql(sql).writeStream.foreachBatch(lambda b, i: want.extend((r.key, r.value) for r in b.collect()))
     .option("checkpointLocation", f"{tmp_path}/nck").trigger(availableNow=True).start().awaitTermination())
    topic = "killed"
    create_topic(broker.bootstrap, topic, 3)
    spec = {"sources": {"t": {"format": "parquet", "path": f"{tmp_path}/in", "schema": SCHEMA_TKP,
                              "options": {"maxFilesPerTrigger": 1},
                              "watermark": {"column": "ts", "delay": "10 seconds"}}},
            "sql": sql, "checkpoint": f"{tmp_path}/ck", "fallback": "error", "trigger": {"availableNow": True},
            "sink": {"kafka": {"topic": topic, "kafka.bootstrap.servers": broker.bootstrap}}}
    sigkill_spec(spec, tmp_path / "spec.json")
    assert len(want) > 10 and _read_committed(broker.bootstrap, topic, 3) == sorted(want)


def test_a_spec_s_kafka_sink_is_named_field_by_field_when_wrong():
    """A spec's Kafka sink needs the broker option and a ``"sql"`` query
    (its SELECT names the sink's columns): each said with its path."""
    from gpuwm.spark.front.spec import problems

    base = {"source": {"format": "nexmark"}, "checkpoint": "ck", "watermark": {"column": "date_time", "delay": "1 s"},
            "stages": [{"dedup": {"key": ["auction"]}}]}
    got = problems({**base, "sink": {"kafka": {"topic": "t"}}})
    assert got == ["$.sink.kafka: Spark's Kafka sink options, with \"kafka.bootstrap.servers\", got {'topic': 't'}"]
    got = problems({**base, "sink": {"kafka": {"topic": "t", "kafka.bootstrap.servers": "b:9092"}}})
    assert got == ["$.sink.kafka: a Kafka sink writes Spark's Kafka sink columns (value; key, topic, partition, "
                   "headers): write the query as \"sql\", its SELECT naming them"]
    assert problems({**base, "sink": {"delta": ""}}) == ["$.sink.delta: a path or URI, got ''"]


def test_a_topic_that_does_not_exist_stops_the_query_in_one_line_and_a_rerun_completes(spark, broker, tmp_path):
    """The sink's topic missing (the broker creates none): the query stops
    on its first batch with rows, in a line naming the batch and the topic;
    nothing of that batch is committed; once the topic exists, the rerun
    writes every message once."""
    import re

    from pyspark.sql import functions as F

    from gpuwm.spark.storage.checkpoint import Checkpoint, Location

    from .oracle import _source

    _write_batches(f"{tmp_path}/in", _random_batches(np.random.default_rng(44), 5, 20, step=6, behind=14, keys=3))
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    agg = _source(spark, f"{tmp_path}/in").withWatermark("ts", "10 seconds").groupBy(
        F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"))
    df = agg.select(F.col("k").cast("string").alias("key"), F.to_json(F.struct("*")).alias("value"))
    want: list = []
    (df.writeStream.foreachBatch(lambda b, i: want.extend((r.key, r.value) for r in b.collect()))
     .option("checkpointLocation", f"{tmp_path}/nck").trigger(availableNow=True).start().awaitTermination())

    def run():
        (accelerate(df, fallback="error").writeStream.format("kafka").option("topic", "missing")
         .option("kafka.bootstrap.servers", broker.bootstrap).option("checkpointLocation", f"{tmp_path}/ck")
         .trigger(availableNow=True).start().awaitTermination())

    with pytest.raises(Exception, match=r"the sink failed on batch (\d+): \w+: topic 'missing' does not exist") as got:
        run()
    failed = int(re.search(r"failed on batch (\d+)", str(got.value)).group(1))
    assert max(Checkpoint(Location.of(f"{tmp_path}/ck")).committed_batches(), default=-1) == failed - 1
    create_topic(broker.bootstrap, "missing", 2)
    run()
    assert len(want) > 5 and _read_committed(broker.bootstrap, "missing", 2) == sorted(want)
