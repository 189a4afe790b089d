"""gpuwm.spark.driver.direct without Spark: which files a task may read itself, and
that it reads them in order, cast to the stream's schema."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpuwm.spark.driver.direct import _castable, check_files
from gpuwm.spark.io.sources import read_files

SCHEMA = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("k", pa.int64()), ("s", pa.string())])


@pytest.mark.parametrize("src,dst,ok", [
    (pa.int32(), pa.int64(), True), (pa.int64(), pa.int32(), False), (pa.uint32(), pa.int64(), True),
    (pa.uint64(), pa.int64(), False), (pa.int64(), pa.uint64(), False),
    (pa.timestamp("ms"), pa.timestamp("us", tz="UTC"), True), (pa.int64(), pa.timestamp("us"), False),
    (pa.float32(), pa.float64(), True), (pa.float64(), pa.float32(), False), (pa.int64(), pa.float64(), False),
    (pa.large_string(), pa.string(), True), (pa.string(), pa.binary(), False),
])
def test_castable_is_exact_widening_only(src, dst, ok):
    assert _castable(src, dst) is ok


def test_files_are_read_in_the_order_spark_sends_and_cast(tmp_path):
    paths = []
    for i in range(3):
        p = str(tmp_path / f"f{i}.parquet")
        pq.write_table(pa.table({"s": [f"x{i}", f"y{i}"], "k": pa.array([i, 10 + i], pa.int32()),
                                 "ts": pa.array([i * 1000, i * 1000 + 1], pa.timestamp("ms", tz="UTC")),
                                 "extra": [1.5, 2.5]}), p)
        paths.append(p)
    assert check_files(paths, SCHEMA) is None
    ids = [pa.record_batch([pa.array([2, 0], pa.int64())], names=["id"]), pa.record_batch([pa.array([1], pa.int64())], names=["id"])]
    got = pa.Table.from_batches(list(read_files(paths, SCHEMA, iter(ids))))
    assert got.schema.equals(SCHEMA)
    assert got.column("s").to_pylist() == ["x2", "y2", "x0", "y0", "x1", "y1"]
    assert got.column("k").to_pylist() == [2, 12, 0, 10, 1, 11]
    assert got.column("ts").cast(pa.int64()).to_pylist() == [2_000_000, 2_001_000, 0, 1000, 1_000_000, 1_001_000]


def test_files_that_do_not_cast_exactly_are_named(tmp_path):
    good, missing, wide = (str(tmp_path / f"{n}.parquet") for n in ("good", "missing", "wide"))
    pq.write_table(pa.table({"ts": pa.array([1], pa.timestamp("us")), "k": [1], "s": ["a"]}), good)
    pq.write_table(pa.table({"ts": pa.array([1], pa.timestamp("us")), "s": ["a"]}), missing)
    pq.write_table(pa.table({"ts": pa.array([1], pa.timestamp("us")), "k": [1.5], "s": ["a"]}), wide)
    assert check_files([good], SCHEMA) is None
    assert "has no column 'k'" in check_files([good, missing], SCHEMA)
    assert "column 'k' is double" in check_files([wide], SCHEMA)
    gone = str(tmp_path / "gone.parquet")
    assert check_files([good, gone], SCHEMA).startswith(f"{gone}: ")


def _offsets(ck, batch_id, *sources):
    d = ck / "offsets"
    d.mkdir(exist_ok=True)
    lines = ["v1", '{"batchWatermarkMs":0,"batchTimestampMs":1}'] + [f'{{"offset":{o}}}' for o in sources]
    (d / str(batch_id)).write_text("\n".join(lines))


def test_nexmark_range_comes_from_sparks_offset_log(tmp_path):
    from gpuwm.spark.io.nexmark import nexmark_range
    from gpuwm.spark.storage.checkpoint import Checkpoint, Location

    _offsets(tmp_path, 0, 100)
    _offsets(tmp_path, 1, 250)
    _offsets(tmp_path, 3, 400)
    _offsets(tmp_path, 4, 500, 7)  # two sources: not ours to read
    ck = Checkpoint(Location.of(str(tmp_path)))
    assert nexmark_range(ck, 0) == (0, 100)
    assert nexmark_range(ck, 1) == (100, 250)
    assert nexmark_range(ck, 2) is None  # batch 2 not logged
    assert nexmark_range(ck, 3) is None  # its start (batch 2's end) unknown
    assert nexmark_range(ck, 4) is None


def test_generated_splits_equal_what_the_source_reads():
    pytest.importorskip("pyspark")
    from gpuwm.spark.io.nexmark import NexmarkPartition, NexmarkStreamReader
    from gpuwm.spark.io.sources import generate_nexmark

    opts = {"splits": "3", "eventsPerSecond": "5000", "seed": "9", "outOfOrderFraction": "0.3", "kind": "bid"}
    reader = NexmarkStreamReader(opts)
    for split in range(3):
        exp = pa.Table.from_batches(list(reader.read(NexmarkPartition(1000, 4000, split))))
        ids = iter([pa.record_batch([pa.array([split], pa.int64())], names=["id"])])
        got = pa.Table.from_batches(list(generate_nexmark({"options": opts, "start": 1000, "end": 4000}, ids)))
        assert exp.num_rows > 0 and got.equals(exp)


def test_drains_in_sparks_logs(tmp_path):
    """The drain source is Spark's file source, after the input in the
    offset log: the Nexmark range still reads (one "offset" source), and a
    batch ends the input only when the files Spark logged for it hold the
    end asked for after the batch before it — read from the file source's
    log, a compacted one too, and only when that end was asked for."""
    pytest.importorskip("pyspark")
    from gpuwm.spark.driver.drain import batch_drains, ends_input, file_name, parse_name
    from gpuwm.spark.io.nexmark import nexmark_range
    from gpuwm.spark.storage.checkpoint import Checkpoint, Location

    d = tmp_path / "offsets"
    d.mkdir()
    src = tmp_path / "sources" / "1"
    src.mkdir(parents=True)
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1}'
    # batch: (nexmark offset, drain log offset); the drain source's log batch 1 is only in 2.compact
    for b, (off, log) in enumerate([(100, 0), (100, 1), (150, 2), (150, 2), (160, 3)]):
        (d / str(b)).write_text("\n".join(["v1", meta, f'{{"offset":{off}}}', f'{{"logOffset":{log}}}']))
    entry = lambda n, name: f'{{"path":"file://{tmp_path}/gpuwm/drains/{name}","timestamp":1,"batchId":{n}}}'  # noqa: E731
    (src / "0").write_text("\n".join(["v1", entry(0, "after-9")]))
    (src / "2.compact").write_text("\n".join(["v1", entry(0, "after-9"), entry(1, "after-0-end"),
                                               entry(2, "after-1")]))
    (src / "3").write_text("\n".join(["v1", entry(3, "after-3-end"), entry(3, "_gpuwm")]))
    ck = Checkpoint(Location.of(str(tmp_path)))
    assert nexmark_range(ck, 1) == (100, 100) and nexmark_range(ck, 2) == (100, 150)
    assert [batch_drains(ck, b) for b in range(6)] == [[(9, False)], [(0, True)], [(1, False)], [],
                                                      [(3, True)], []]
    ask = lambda n, end: {"next": {"drain": n, "end": end}, "due": 1.0}  # noqa: E731
    assert ends_input(ck, 1, ask(0, 1)) and not ends_input(ck, 1, ask(0, 0)) and not ends_input(ck, 1, None)
    assert not ends_input(ck, 2, ask(1, 1))  # after-1 was asked without the end
    assert ends_input(ck, 4, ask(3, 1)) and not ends_input(ck, 3, ask(2, 1)) and not ends_input(ck, 5, ask(4, 1))
    assert parse_name(file_name(12, True)) == (12, True) and parse_name("s3a://b/ck/gpuwm/drains/after-7") == (7, False)
    assert parse_name("_gpuwm") is None and parse_name("after-x") is None


def test_drain_requests_write_their_file_when_due(tmp_path):
    """A request due now writes its file at once; one due later on a timer,
    unless a newer request replaces it first or the query stopped; a
    restart re-asks the request made after Spark's last commit."""
    pytest.importorskip("pyspark")
    import time

    from gpuwm.spark.driver.drain import DIR, Drains
    from gpuwm.spark.storage.checkpoint import Checkpoint, Location

    ck = Checkpoint(Location.of(str(tmp_path)))
    files = lambda: sorted(p.name for p in (tmp_path / DIR).glob("after-*"))  # noqa: E731
    d = Drains(ck)
    d.ask(0, due=time.time() - 1)
    assert files() == ["after-0"]
    d.ask(1, due=time.time() + 0.3)
    assert files() == ["after-0"]
    time.sleep(0.6)
    assert files() == ["after-0", "after-1"]
    d.ask(2, due=time.time() + 0.3)
    d.ask(3, due=None)  # no drain after 3: 2's is replaced before it is due
    d.ask(4, due=time.time() + 0.3)
    d.alive = lambda: False  # the query stopped
    time.sleep(0.6)
    assert files() == ["after-0", "after-1"]
    d.ask(5, due=time.time() + 60, end=True)
    d.stop()
    again = Drains(ck)  # a restart: the request is read back and re-asked, if made after the last commit
    assert again.request["next"] == {"drain": 5, "end": 1}
    again.resume(4)
    again.request = {**again.request, "due": 0.0}
    again.resume(4)
    assert files() == ["after-0", "after-1"]
    again.resume(5)
    assert files() == ["after-0", "after-1", "after-5-end"]
