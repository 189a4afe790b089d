"""``format("delta")`` through ``accelerate``: gpuwm runs the query and
appends each micro-batch with Delta's own writer as one transaction marked
(query id, batch id) — against Spark's own Delta sink over the same files,
with a crash between Delta's commit and gpuwm's. Delta Lake for Spark 4.1
comes from Maven Central (fetched when not cached: a failure says why)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpuwm.spark import accelerate, local_session

from . import needs
from .oracle import _norm, _query
from .test_spark import _random_batches, _write_batches

pytestmark = needs.DELTA


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from gpuwm.spark.jvm.jars import DELTA, resolve

    s = local_session(app="gpuwm-delta", cores=2, conf={
        "spark.jars": ",".join(resolve(DELTA)),
        "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse")),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"})
    yield s
    s.stop()


def _rows(spark, path: str) -> list:
    return sorted((tuple(_norm(v) for v in r.asDict().values()) for r in spark.read.format("delta").load(path)
                   .collect()), key=repr)


def _writes(path: str) -> list[dict]:
    """Each Delta commit's ``txn`` (application transaction) action, in commit order (None: none)."""
    out = []
    for f in sorted(Path(path, "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in f.read_text().splitlines()]
        out.append(next((a["txn"] for a in actions if "txn" in a), None))
    return out


@pytest.mark.parametrize("writer", ["delta-rs", "spark"])
def test_delta_sink_equals_spark_s_and_a_replayed_batch_lands_once(spark, tmp_path, monkeypatch, capsys, writer):
    """The table gpuwm writes — with delta-rs from the batch's Arrow, or
    with Delta's Spark writer where delta-rs is not installed — reads back
    as Spark's own Delta sink's rows (over 2 vnodes). gpuwm is killed after Delta committed a batch and
    before gpuwm's commit (the crash Spark's sink guards against): the
    restarted query replays that batch, Delta sees its (app id, version)
    and skips it — every row once, one Delta commit per batch with rows,
    each marked with the query's id and its batch id."""
    _write_batches(f"{tmp_path}/in", _random_batches(np.random.default_rng(31), 5, 30, step=6, behind=14, keys=3))
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    df = _query(spark, f"{tmp_path}/in", "tumble")
    (df.writeStream.format("delta").option("checkpointLocation", f"{tmp_path}/nck").trigger(availableNow=True)
     .start(f"{tmp_path}/native").awaitTermination())
    want = _rows(spark, f"{tmp_path}/native")
    assert len(want) > 5

    from gpuwm.spark.io.driver_sinks import DeltaAppend
    from gpuwm.spark.storage.checkpoint import Checkpoint

    monkeypatch.setattr(DeltaAppend, "writer", writer)
    real, crashed = Checkpoint.write_commit, []

    def crash_once(self, batch_id, *a, **k):
        if not crashed and Path(f"{tmp_path}/out/_delta_log").exists() and len(_rows(spark, f"{tmp_path}/out")):
            crashed.append(batch_id)  # Delta has this batch's rows; gpuwm's commit is lost
            raise RuntimeError("killed between Delta's commit and gpuwm's")
        return real(self, batch_id, *a, **k)

    monkeypatch.setattr(Checkpoint, "write_commit", crash_once)

    def run():
        capsys.readouterr()
        q = (accelerate(df, vnodes=2, fallback="error").writeStream.format("delta")
             .option("checkpointLocation", f"{tmp_path}/ck").trigger(availableNow=True).start(f"{tmp_path}/out"))
        try:
            q.awaitTermination()
        finally:
            assert "warning" not in capsys.readouterr().err
        return q

    with pytest.raises(Exception, match="killed between Delta's commit and gpuwm's"):
        run()
    assert crashed
    q = run()
    assert _rows(spark, f"{tmp_path}/out") == want
    txns = _writes(f"{tmp_path}/out")
    assert all(t is not None and t["appId"] == q.id for t in txns), txns  # the query's id, across the restart
    versions = [t["version"] for t in txns]
    assert versions == sorted(set(versions)) and crashed[0] in versions  # each batch committed once


def test_a_delta_table_with_another_schema_stops_the_query_in_one_line(spark, tmp_path, capsys):
    """A Delta table already at the path with other columns: the query
    stops on its first batch with rows, in a line naming the batch and
    Delta's cause; nothing of that batch is committed (gpuwm's checkpoint
    or the table); the rerun with ``mergeSchema`` completes it."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from gpuwm.spark.storage.checkpoint import Checkpoint, Location

    write_deltalake(f"{tmp_path}/out", pa.table({"other": pa.array([1], pa.int32())}))
    _write_batches(f"{tmp_path}/in", _random_batches(np.random.default_rng(32), 3, 20, step=6, behind=14, keys=3))
    df = _query(spark, f"{tmp_path}/in", "tumble")

    def run(**options):
        return (accelerate(df, fallback="error").writeStream.format("delta").options(**options)
                .option("checkpointLocation", f"{tmp_path}/ck").trigger(availableNow=True).start(f"{tmp_path}/out"))

    with pytest.raises(Exception, match=r"the sink failed on batch (\d+): \w+: .*schema.* \(nothing of batch "
                                        r"\1 was committed: a restart runs it again\)") as got:
        run().awaitTermination()
    failed = int(__import__("re").search(r"failed on batch (\d+)", str(got.value)).group(1))
    assert max(Checkpoint(Location.of(f"{tmp_path}/ck")).committed_batches(), default=-1) == failed - 1
    assert _rows(spark, f"{tmp_path}/out") == [(1,)]
    run(mergeSchema="true").awaitTermination()
    rows = spark.read.format("delta").load(f"{tmp_path}/out")
    assert rows.count() > 1 and set(rows.columns) >= {"other", "window", "k", "n", "mx"}


def test_to_table_writes_delta_tables_as_spark_s_to_table(spark, tmp_path, capsys):
    """``toTable`` as Spark's: a new table with ``format("delta")`` is made
    (the query's columns, nullable) and written by gpuwm, each batch marked;
    an existing Delta table is written by gpuwm without ``format`` (its
    provider from the catalog). Both read back by ``spark.table`` as Spark's
    own ``toTable``'s rows. (A new table of the default provider, Parquet:
    test_accelerate's file-sink test.)"""
    _write_batches(f"{tmp_path}/in", _random_batches(np.random.default_rng(33), 4, 20, step=6, behind=14, keys=3))
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    df = _query(spark, f"{tmp_path}/in", "tumble")

    def rows(table):
        return sorted((tuple(_norm(v) for v in r) for r in spark.table(table).collect()), key=repr)

    def run(w, ck, table, **kw):
        w.option("checkpointLocation", f"{tmp_path}/{ck}").trigger(availableNow=True).toTable(table, **kw) \
            .awaitTermination()

    run(df.writeStream.format("delta"), "nck", "native_t")
    capsys.readouterr()
    run(accelerate(df, fallback="error").writeStream, "ck", "gpuwm_t", format="delta")
    want = rows("native_t")
    assert len(want) > 5 and rows("gpuwm_t") == want
    assert spark.table("gpuwm_t").schema == spark.table("native_t").schema
    location = spark.sql("DESCRIBE DETAIL gpuwm_t").first()["location"]
    marks = _writes(location.removeprefix("file:"))
    versions = [m["version"] for m in marks[1:]]  # made, then one commit per batch with rows, marked
    assert marks[0] is None and len(versions) > 1 and versions == sorted(set(versions)), marks
    assert {m["appId"] for m in marks[1:]} == {json.loads(Path(f"{tmp_path}/ck/metadata").read_text())["id"]}
    assert "gpuwm: warning" not in capsys.readouterr().err
    run(accelerate(df, fallback="error").writeStream, "ck2", "gpuwm_t")  # the table's provider: Delta
    assert rows("gpuwm_t") == sorted(want * 2, key=repr)


def test_gpuwm_run_with_a_delta_sink_sigkilled_lands_every_row_once(spark, tmp_path):
    """A ``"sql"`` spec with ``"sink": {"delta": path}``, ``gpuwm run``
    SIGKILLed twice mid-run and run to its end on its checkpoint: the
    table reads back as Spark's own Delta sink's over the same files — 0
    lost, 0 duplicated — and each Delta commit with rows is one batch's,
    marked with the query's id and its batch id, each batch once."""
    from .test_spark import sigkill_spec

    _write_batches(f"{tmp_path}/in", _random_batches(np.random.default_rng(34), 6, 40, step=6, behind=14, keys=3))
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    (_query(spark, f"{tmp_path}/in", "tumble").writeStream.format("delta")
     .option("checkpointLocation", f"{tmp_path}/nck").trigger(availableNow=True).start(f"{tmp_path}/native")
     .awaitTermination())
    spec = {"sources": {"t": {"format": "parquet", "path": f"{tmp_path}/in",
                              "schema": "ts timestamp, k bigint, price bigint",
                              "options": {"maxFilesPerTrigger": 1},
                              "watermark": {"column": "ts", "delay": "10 seconds"}}},
            # test_accelerate's tumble shape in SQL: its WHERE and an aggregate's expression go to the source
            "sql": "SELECT window(ts, '5 seconds') AS window, k, count(*) AS n, max(price) AS mx, "
                   "sum(price * 2 + k) AS s2 FROM t WHERE price < 950 AND price % 7 <> 3 "
                   "GROUP BY window(ts, '5 seconds'), k",
            "checkpoint": f"{tmp_path}/ck", "sink": {"delta": f"{tmp_path}/out"}, "fallback": "error",
            "trigger": {"availableNow": True}}
    sigkill_spec(spec, tmp_path / "spec.json")
    want = _rows(spark, f"{tmp_path}/native")
    assert len(want) > 10 and _rows(spark, f"{tmp_path}/out") == want
    marks = [m for m in _writes(f"{tmp_path}/out") if m is not None]
    assert len(marks) > 2 and len({m["version"] for m in marks}) == len(marks)
    assert {m["appId"] for m in marks} == {json.loads(Path(f"{tmp_path}/ck/metadata").read_text())["id"]}
