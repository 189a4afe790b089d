"""Streams that pause or end, in Spark local mode: micro-batches without new
data (gpuwm.spark.driver.drain) under a processing-time trigger, idle splits, the
end-of-input flush, a restart after it, and SIGKILLs around it."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

import gpuwm  # noqa: E402
from gpuwm.spark import Pipeline, local_session  # noqa: E402

from .test_spark import (  # noqa: E402
    NEX,
    SCHEMA_TKP,
    T0,
    TS,
    _random_batches,
    _spark_native_append,
    _write_batches,
    finished,
    nexmark_batches,
    read_out,
    rows_of,
    started,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    s = local_session(app="gpuwm-drain-tests", cores=2)
    yield s
    s.stop()


class Watch:
    """``on_batch`` that lets a test wait for a batch matching a condition."""

    def __init__(self, cond):
        self.cond, self.hit, self.seen = cond, threading.Event(), []

    def __call__(self, m):
        self.seen.append((time.time(), m))
        if self.cond(m):
            self.hit.set()


def test_paused_input_emits_closed_windows_within_two_triggers(spark, tmp_path):
    """Spark profile, processingTime 2 s: after the last data batch, the
    windows its watermark closed come out in a micro-batch without data at
    the next trigger — waited for on the query's batches, not on sleeps."""
    batches = _random_batches(np.random.default_rng(21), 4, 30, step=6, behind=8, keys=3)
    src = f"{tmp_path}/in"
    _write_batches(src, batches)
    watch = Watch(lambda m: m["input_rows"] == 0 and m["rows_emitted"] > 0)
    df = spark.readStream.schema(SCHEMA_TKP).option("maxFilesPerTrigger", 1).parquet(src)
    p = (Pipeline(df, f"{tmp_path}/ck", on_batch=watch).watermark("ts", delay="10 seconds", profile="spark")
         .window(gpuwm.Tumble("ts", "5 seconds"), by=["k"], aggs={"n": ("*", "count")})
         .write_parquet(f"{tmp_path}/out"))
    q = p.start(trigger={"processingTime": "2 seconds"})
    try:
        assert watch.hit.wait(timeout=120), [m["input_rows"] for _, m in watch.seen]
    finally:
        q.stop()
    data = [(t, m) for t, m in watch.seen if m["input_rows"]]
    drains = [(t, m) for t, m in watch.seen if not m["input_rows"]]
    assert len(data) == len(batches) and drains
    t_last, _ = data[-1]
    t_drain, m = drains[0]
    assert m["batch_id"] == len(batches) and not m["end_of_input"]
    start = datetime.fromisoformat(m["processing_time"]).timestamp()
    assert start - t_last < 2 * 2.0  # it started within two trigger intervals of the last data batch
    assert len(drains) == 1  # and nothing more ran: the watermark did not move again
    # what it emitted: the operators' own last, no-data batch
    f = gpuwm.WatermarkFilter("ts", delay=timedelta(seconds=10), profile="spark")
    a = gpuwm.WindowAggregate(gpuwm.Tumble("ts", "5 seconds"), by=["k"], aggs={"n": ("*", "count")}, profile="spark")
    for b in batches:
        a.push(f.process(_table(b)))
        a.drain(f.output_watermark)
    last = a.drain(f.finish())
    got = pq.read_table(glob.glob(f"{tmp_path}/out/batch_id={m['batch_id']}/*.parquet"))
    assert rows_of(got, ["window_start", "k", "n"]) == rows_of(last, ["window_start", "k", "n"]) != []


def _table(rows: list[tuple], split: int | None = None) -> pa.Table:
    t = pa.table({"ts": pa.array([T0 + timedelta(seconds=s) for s, _, _ in rows], TS),
                  "k": pa.array([k for _, k, _ in rows], pa.int64()),
                  "price": pa.array([p for _, _, p in rows], pa.int64())})
    return t if split is None else t.append_column("s", pa.array([split] * len(rows), pa.int32()))


def test_idle_split_stops_holding_back_a_min_watermark_without_new_data(spark, tmp_path):
    """risingwave (min over splits) with idle_timeout 15 s: split 1 sends once,
    split 0 goes on; the combined watermark waits for split 1 until it has
    been silent for 15 s of processing time — then a micro-batch without data
    re-combines without it and emits what split 0's watermark closes. Split
    0's last file comes 3 s after its second, so that split 0 is still active
    for at least 4 s after split 1 went idle, on a loaded machine too."""
    src = f"{tmp_path}/in"
    os.makedirs(src)
    base = time.time() - 100
    files = [pa.concat_tables([_table([(1, 0, 1), (2, 1, 2)], 0), _table([(3, 0, 3)], 1)]),
             _table([(12, 0, 4), (14, 1, 5)], 0), _table([(23, 0, 6), (31, 1, 7)], 0)]
    for i, t in enumerate(files[:2]):
        pq.write_table(t, f"{src}/p{i}.parquet")
        os.utime(f"{src}/p{i}.parquet", (base + i, base + i))
    watch = Watch(lambda m: m["rows_emitted"] > 0)
    df = spark.readStream.schema("ts timestamp, k bigint, price bigint, s int").option(
        "maxFilesPerTrigger", 1).parquet(src)
    p = (Pipeline(df, f"{tmp_path}/ck", on_batch=watch)
         .watermark("ts", delay="1 second", split="s", profile="risingwave", idle_timeout="15 seconds")
         .window(gpuwm.Tumble("ts", "10 seconds"), aggs={"n": ("*", "count")})
         .write_parquet(f"{tmp_path}/out"))
    q = p.start(trigger={"processingTime": "1 second"})
    try:
        deadline = time.time() + 120
        while len(watch.seen) < 2 and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(3)
        pq.write_table(files[2], f"{src}/.p2")
        os.rename(f"{src}/.p2", f"{src}/p2.parquet")
        assert watch.hit.wait(timeout=120), [(m["input_rows"], m["idle_splits"], m["processing_time"])
                                             for _, m in watch.seen]
    finally:
        q.stop()
    ms = [m for _, m in watch.seen]
    what = [(m["input_rows"], m["idle_splits"], m["processing_time"]) for m in ms]
    assert [m["input_rows"] for m in ms[:3]] == [3, 2, 2] and all(m["idle_splits"] == [] for m in ms[:3]), what
    m = ms[-1]  # the first batch that emitted: no data, split 1 idle, at least 15 s after split 1's rows
    assert m["input_rows"] == 0 and m["idle_splits"] == [1] and m["held_back_splits"] == [], what
    waited = datetime.fromisoformat(m["processing_time"]) - datetime.fromisoformat(ms[0]["processing_time"])
    assert timedelta(seconds=15) < waited < timedelta(seconds=15 + 2 * 1 + 5), what
    # split 0's watermark, 30 s, closes [0, 10), [10, 20) and [20, 30) (risingwave: W >= end)
    assert rows_of(read_out(f"{tmp_path}/out"), ["window_start", "n"]) == [
        (T0, 3), (T0 + timedelta(seconds=10), 2), (T0 + timedelta(seconds=20), 1)]


def test_idle_timeout_is_refused_where_no_split_can_hold_back(spark, tmp_path):
    df = spark.readStream.schema(SCHEMA_TKP).parquet(str(tmp_path))
    with pytest.raises(gpuwm.ConfigError, match="idle_timeout has no effect under combine='max'"):
        Pipeline(df, f"{tmp_path}/ck").watermark("ts", delay="1 second", profile="spark", idle_timeout="5 seconds")


def test_restart_after_the_end_continues_as_spark_does(spark, tmp_path):
    """Two availableNow runs on one checkpoint, new files between them,
    gpuwm (spark profile) and Spark's own query: after the first run's last
    (no-data) batch, rows of the second run behind its watermark are late in
    both, and the two outputs are equal."""
    from pyspark.sql import functions as F

    rng = np.random.default_rng(8)
    first = _random_batches(rng, 5, 30, step=6, behind=12, keys=3)
    second = [[(t + 10, k, p) for t, k, p in b] for b in _random_batches(rng, 4, 30, step=6, behind=12, keys=3)]
    src = f"{tmp_path}/in"
    exp1 = _spark_native_append(spark, tmp_path, first, F.window("ts", "5 seconds"))
    df = spark.readStream.schema(SCHEMA_TKP).option("maxFilesPerTrigger", 1).parquet(src)

    def run():
        p = (Pipeline(df, f"{tmp_path}/ck").watermark("ts", delay="10 seconds", profile="spark")
             .window(gpuwm.Tumble("ts", "5 seconds"), by=["k"], aggs={"n": ("*", "count"), "mx": ("price", "max")})
             .write_parquet(f"{tmp_path}/out"))
        p.start(trigger={"availableNow": True}).awaitTermination()
        return p.history

    h1 = run()
    cols = ["window_start", "window_end", "k", "n", "mx"]
    assert rows_of(read_out(f"{tmp_path}/out"), cols) == exp1 and h1[-1]["input_rows"] == 0
    _write_batches(f"{tmp_path}/more", second)  # then move them in, newer than the first files
    for i, f in enumerate(sorted(glob.glob(f"{tmp_path}/more/*.parquet"))):
        dst = f"{src}/second-{i:04d}.parquet"
        os.replace(f, dst)
        os.utime(dst, (time.time() + i, time.time() + i))
    exp2 = _spark_native_append(spark, tmp_path, [], F.window("ts", "5 seconds"))  # the same query, restarted
    h2 = run()
    assert rows_of(read_out(f"{tmp_path}/out"), cols) == exp2 != exp1
    late = sum(m["late_rows"] for m in h2)
    w_end = h1[-1]["watermark"]
    behind = sum(int((T0 + timedelta(seconds=t)).timestamp() * 1e6) <= w_end for t, _, _ in second[0])
    assert late >= behind > 0  # rows behind the watermark the first run ended with are late, and counted
    assert h2[0]["batch_id"] == h1[-1]["batch_id"] + 1


CRASH = """
import os, sys, time
sys.path.insert(0, {root!r})
import gpuwm
from gpuwm.spark import Pipeline, local_session, read_nexmark
spark = local_session(app="crash", cores=2)
df = read_nexmark(spark, {ck!r}, **{opts!r})
def on_batch(m):
    print("BATCH", m["batch_id"], int(m["end_of_input"]), flush=True)
    if m["end_of_input"] and os.environ.get("HOLD_FLUSH"):
        time.sleep(30)  # the flush is committed by gpuwm, not yet by Spark
p = (Pipeline(df, {ck!r}, vnodes=2, on_batch=on_batch)
     .watermark("date_time", delay="2 seconds", split="split", profile="flink", nulls="keep")
     .window(gpuwm.Tumble("date_time", "2 seconds"), by=["auction"],
             aggs={{"bids": ("*", "count"), "max_price": ("price", "max")}})
     .write_parquet({out!r}).late_rows_to({out!r} + "-late"))
q = p.start()
try:
    q.processAllAvailable()
    print("DONE", flush=True)
finally:
    q.stop()
"""


def _script(tmp, name):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = f"{tmp}/{name}.py"
    with open(path, "w") as fh:
        fh.write(textwrap.dedent(CRASH.format(root=root, opts=NEX, ck=f"{tmp}/{name}/ck", out=f"{tmp}/{name}/out")))
    return path


@pytest.mark.slow
def test_sigkill_around_the_end_of_input_flush(tmp_path):
    """Profile flink on a bounded Nexmark source: the end of input is a
    watermark of +infinity, run as its own micro-batch after the last data.
    One checkpoint, its driver SIGKILLed three times: (1) right after the
    last data batch, with the flush asked for but not run, (2) on restart,
    while the flush batch runs (its offsets logged), (3) on the next
    restart, after gpuwm committed the flush but before Spark did; the last
    restart gives the uninterrupted output, with the flush once."""
    cols = ["window_start", "auction", "bids", "max_price"]
    uninterrupted = started(_script(tmp_path, "clean"))
    last_data = len(nexmark_batches(NEX)) - 1
    path = _script(tmp_path, "killed")
    for point in ("after-data", "during-flush", "after-flush"):
        env = dict(os.environ, HOLD_FLUSH="1" if point == "after-flush" else "")
        proc = subprocess.Popen([sys.executable, path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env=env)
        if point == "during-flush":  # Spark logged the flush batch's offsets: it is running
            log = f"{tmp_path}/killed/ck/offsets/{last_data + 1}"
            deadline = time.time() + 240
            while not os.path.exists(log) and time.time() < deadline and proc.poll() is None:
                time.sleep(0.005)
            os.kill(proc.pid, signal.SIGKILL)
        else:
            for line in proc.stdout:
                parts = line.split()
                if parts[:1] == ["BATCH"] and (int(parts[1]) == last_data if point == "after-data" else parts[2] == "1"):
                    os.kill(proc.pid, signal.SIGKILL)
                    break
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL, point
        assert not os.path.exists(f"{tmp_path}/killed/ck/commits/{last_data + 1}"), point  # Spark never committed it
    r = finished(uninterrupted)
    assert "DONE" in r.stdout, r.stdout + r.stderr[-3000:]
    batches = [line.split() for line in r.stdout.splitlines() if line.startswith("BATCH")]
    assert batches[-1] == ["BATCH", str(last_data + 1), "1"]  # one flush, after the data
    clean = read_out(f"{tmp_path}/clean/out")
    clean_late = read_out(f"{tmp_path}/clean/out-late")
    assert clean_late.num_rows > 0 and set(clean_late.column("late_reason").to_pylist()) == {"filter"}
    flushed = pq.read_table(glob.glob(f"{tmp_path}/clean/out/batch_id={last_data + 1}/*.parquet"))
    assert flushed.num_rows > 0 and clean.num_rows > 100
    r = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=300)
    assert "DONE" in r.stdout, r.stdout + r.stderr[-3000:]
    assert rows_of(read_out(f"{tmp_path}/killed/out"), cols) == rows_of(clean, cols)
    late_cols = ["event_id", "late_reason"]  # the late rows kept aside: once each, as in the clean run
    assert rows_of(read_out(f"{tmp_path}/killed/out-late"), late_cols) == rows_of(clean_late, late_cols)
    flushed = glob.glob(f"{tmp_path}/killed/out/batch_id={last_data + 1}/*.parquet")
    assert rows_of(pq.read_table(flushed), cols) == rows_of(pq.read_table(glob.glob(
        f"{tmp_path}/clean/out/batch_id={last_data + 1}/*.parquet")), cols)  # the flush's rows, once


@pytest.mark.parametrize("vnodes", [None, 3])
def test_late_rows_kept_aside_equal_the_late_metrics(spark, tmp_path, vnodes):
    """Every row dropped as late goes to the late sink once, with its reason:
    the filter's (behind the watermark by more than a window: spark's
    window_lateness) and the window's (its window had closed) — the same rows
    as the engine-independent operators drop over the same batches, as many
    as the late_rows metrics. vnodes=3 runs the JSON form ("late": {...})."""
    import json

    from gpuwm.spark.front.spec import load_spec, run

    batches = _random_batches(np.random.default_rng(31), 10, 40, step=6, behind=25, keys=3)
    src = f"{tmp_path}/in"
    _write_batches(src, batches, ids=True)
    schema = SCHEMA_TKP + ", id bigint"
    if vnodes:
        spec = {"source": {"format": "parquet", "schema": schema, "path": src, "options": {"maxFilesPerTrigger": 1}},
                "checkpoint": f"{tmp_path}/ck", "vnodes": vnodes, "trigger": {"availableNow": True},
                "watermark": {"column": "ts", "delay": "10 seconds", "profile": "spark"},
                "stages": [{"window": {"tumble": "5 seconds", "by": ["k"], "aggs": {"n": ["*", "count"]}}}],
                "sink": {"parquet": f"{tmp_path}/out"}, "late": {"parquet": f"{tmp_path}/late"}}
        (tmp_path / "q.json").write_text(json.dumps(spec))
        h = run(spark, load_spec(str(tmp_path / "q.json")), verbose=False).history
    else:
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(src)
        p = (Pipeline(df, f"{tmp_path}/ck").watermark("ts", delay="10 seconds", profile="spark")
             .window(gpuwm.Tumble("ts", "5 seconds"), by=["k"], aggs={"n": ("*", "count")})
             .write_parquet(f"{tmp_path}/out").late_rows_to(f"{tmp_path}/late"))
        p.start(trigger={"availableNow": True}).awaitTermination()
        h = p.history
    # the same batches through the operators
    f = gpuwm.WatermarkFilter("ts", delay=timedelta(seconds=10), profile="spark",
                              allowed_lateness=timedelta(seconds=5))
    a = gpuwm.WindowAggregate(gpuwm.Tumble("ts", "5 seconds"), by=["k"], aggs={"n": ("*", "count")},
                              profile="spark").keep_late()
    late_f, late_w, outs = [], [], []
    for i, b in enumerate(batches):
        t = _table(b).append_column("id", pa.array(range(sum(map(len, batches[:i])), sum(map(len, batches[:i + 1]))),
                                                    pa.int64()))
        kept, stats = f.filter_local(t, late_out=late_f)
        f.advance([stats])
        a.push(kept)
        outs.append(a.drain(f.output_watermark))
        late_w += list(a.take_late().values())
    outs.append(a.drain(f.finish()))
    ids = lambda ts: sorted(i for t in ts for i in t.column("id").to_pylist())  # noqa: E731
    got = read_out(f"{tmp_path}/late")
    assert got.schema.field("late_reason").type == pa.string()
    by_reason = {r: sorted(i for i, rr in zip(got.column("id").to_pylist(), got.column("late_reason").to_pylist())
                           if rr == r) for r in ("filter", "window closed")}
    assert by_reason["filter"] == ids(late_f) and len(by_reason["filter"]) == sum(m["late_rows"] for m in h) > 0
    assert by_reason["window closed"] == ids(late_w) and len(by_reason["window closed"]) == sum(
        m["stages"][0]["late_rows"] for m in h) > 0
    assert got.num_rows == sum(by_reason.values(), []).__len__()
    cols = ["window_start", "k", "n"]
    assert rows_of(read_out(f"{tmp_path}/out"), cols) == rows_of(pa.concat_tables(outs), cols)
