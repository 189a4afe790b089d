"""gpuwm where Spark's checkpoints live: input files, Spark's checkpoint,
gpuwm's state, the sink and the late rows on S3 — a real S3 server on
loopback (:mod:`tests.s3_server`), Spark through Hadoop's S3A, gpuwm through
``pyarrow.fs``, both configured by the same ``spark.hadoop.fs.s3a.*``.

Each query runs twice over the same S3 input files: with everything on S3,
and with its checkpoint and sinks on local disk (the path the Spark-native
comparisons of ``test_spark.py`` check); the two outputs must be equal
batch for batch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

import gpuwm  # noqa: E402
from gpuwm.spark import Pipeline, local_session  # noqa: E402
from gpuwm.spark.storage.checkpoint import Location  # noqa: E402

from .s3_server import S3Server, spark_jars  # noqa: E402
from .test_spark import finished, kill_after_batches, started  # noqa: E402

pytestmark = pytest.mark.spark
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
TS = pa.timestamp("us", tz="UTC")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with S3Server(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture(scope="module")
def spark(s3):
    # a JVM already running without S3A (as after any earlier test module):
    # the session asking for it must not get that JVM's class path
    local_session(app="gpuwm-before-s3", cores=1)
    s = local_session(app="gpuwm-s3-tests", cores=2, conf={**s3.spark_conf(), "spark.jars": spark_jars()})
    s._jvm.java.lang.Class.forName("org.apache.hadoop.fs.s3a.S3AFileSystem", True,
                                   s._jvm.Thread.currentThread().getContextClassLoader())
    yield s
    s.stop()


def _put_batches(s3, key: str, batches: list[pa.Table]) -> str:
    """One Parquet object per batch under ``s3a://<bucket>/<key>``, uploaded
    in order a second apart (Spark takes the oldest first)."""
    loc = Location.of(s3.uri(key), s3.options())
    for i, t in enumerate(batches):
        if i:
            time.sleep(1.05)
        loc.publish_parquet(f"part-{i:04d}.parquet", t)
    return s3.uri(key)


def _rows(rng, n_batches: int, per: int, step: int, keys: int) -> list[pa.Table]:
    out = []
    for i in range(n_batches):
        ts = (i * step + rng.integers(-2 * step - 10, 3, per)).clip(0)  # some rows far behind: late
        out.append(pa.table({"ts": pa.array([T0 + timedelta(seconds=int(s)) for s in ts], TS),
                             "k": pa.array(rng.integers(0, keys, per), pa.int64()),
                             "price": pa.array(rng.integers(0, 100, per), pa.int64())}))
    return out


def _read_all(loc: Location, sub: str = "") -> list:
    """Every row under ``loc`` (its batch_id=N folders), with its batch, sorted."""
    rows = []
    for name in loc.list(sub):
        if not name.startswith("batch_id="):
            continue
        b = int(name.removeprefix("batch_id="))
        for f in loc.list(f"{sub}{name}"):
            t = pq.read_table(loc.path(f"{sub}{name}/{f}"), filesystem=loc.fs)
            rows += [(b, *r.values()) for r in t.to_pylist()]
    return sorted(rows, key=repr)


SCHEMA = "ts timestamp, k bigint, price bigint"


def _query(spark, kind: str, src: dict[str, str], ck: str, out: str, late: str, vnodes: int) -> Pipeline:
    read = {n: spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(p) for n, p in src.items()}
    if kind == "join":
        a = read["a"].selectExpr("k AS a_k", "ts AS a_ts", "price AS a_price")
        b = read["b"].selectExpr("k AS b_k", "ts AS b_ts", "price AS b_price")
        p = (Pipeline({"a": a, "b": b}, ck, vnodes=vnodes)
             .watermark("a_ts", "6 seconds", input="a", profile="spark")
             .watermark("b_ts", "6 seconds", input="b", profile="spark")
             .join("a", "b", [["a_k", "b_k"]], ["b_ts", "a_ts", "0 seconds", "5 seconds"], how="left"))
    else:
        p = Pipeline(read["a"], ck, vnodes=vnodes).watermark("ts", "6 seconds", profile="spark")
        if kind == "tumble":
            p = p.window(gpuwm.Tumble("ts", "5 seconds"), by=["k"], aggs={"n": ("*", "count"), "s": ("price", "sum")})
        elif kind == "session":
            p = p.window(gpuwm.Session("ts", "3 seconds"), by=["k"], aggs={"n": ("*", "count")})
        else:
            p = p.dedup(["k"])
    return p.write_parquet(out).late_rows_to(late)


@pytest.mark.parametrize("kind,vnodes", [("tumble", 1), ("tumble", 2), ("session", 2), ("dedup", 1), ("join", 2)])
def test_query_on_s3_equals_the_same_query_on_local_disk(spark, s3, tmp_path, kind, vnodes):
    rng = np.random.default_rng(hash(kind) % 1000 + vnodes)
    name = f"{kind}-{vnodes}"
    src = {"a": _put_batches(s3, f"{name}/in-a", _rows(rng, 4, 200, 20, 12))}
    if kind == "join":
        src["b"] = _put_batches(s3, f"{name}/in-b", _rows(rng, 4, 200, 20, 12))
    got = {}
    for where in ("s3", "local"):
        base = s3.uri(f"{name}/{where}") if where == "s3" else f"{tmp_path}/{where}"
        p = _query(spark, kind, src, f"{base}/ck", f"{base}/out", f"{base}/late", vnodes)
        p.start(trigger={"availableNow": True}).awaitTermination()
        out, late = Location.of(f"{base}/out", s3.options()), Location.of(f"{base}/late", s3.options())
        late_rows = _read_all(late) + [r for i in ("a/", "b/") for r in _read_all(late, i)]
        got[where] = (_read_all(out), late_rows, [m["input_rows"] for m in p.history])
        # the tasks read the S3 input files themselves, as local ones (gpuwm.spark.driver.direct); the
        # join's inputs too, the selects that rename their columns applied in the tasks
        assert {m["read"] for m in p.history if m["input_rows"]} == {"direct"}, where
    assert got["s3"][2] == got["local"][2] and sum(got["s3"][2]) == 200 * len(src) * 4
    assert len(got["s3"][0]) > 5 and got["s3"][0] == got["local"][0]
    assert got["s3"][1] == got["local"][1]
    keys = s3.keys(f"{name}/s3")
    for what in ("ck/offsets/0", "ck/commits/0", "ck/gpuwm/commits/", "ck/gpuwm/FORMAT", "out/batch_id="):
        assert any(k.startswith(f"{name}/s3/{what}") for k in keys), (what, keys[:20])
    if kind != "join":  # a late row on every shape whose filter drops one here
        assert got["s3"][1], "expected late rows"


def hop_query(spark, src: str, ck: str, out: str, on_batch=None) -> Pipeline:
    """The query the SIGKILL test runs: a hopping count per key, vnodes 2."""
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(src)
    return (Pipeline(df, ck, vnodes=2, on_batch=on_batch).watermark("ts", "6 seconds", profile="spark")
            .window(gpuwm.Hop("ts", size="6 seconds", slide="3 seconds"), by=["k"], aggs={"n": ("*", "count")})
            .write_parquet(out))


KILLED = """
import os, sys, time
sys.path.insert(0, {root!r})
from gpuwm.spark import local_session
from tests.test_s3 import hop_query


def pids(batches):  # each task's process id (defined here: pickled by value for the executors)
    import pyarrow as pa
    for b in batches:
        yield pa.RecordBatch.from_pydict({{"pid": [os.getpid()] * b.num_rows}})


spark = local_session(app="s3-crash", cores=2, conf={conf!r})


def on_batch(m):
    print("BATCH", m["batch_id"], "replayed" if m.get("replayed") else "", flush=True)
    if m["batch_id"] == 1 and not m.get("replayed"):
        time.sleep({hold})  # the SIGKILL lands here: gpuwm committed batch 1, Spark has not


p = hop_query(spark, {src!r}, {ck!r}, {out!r}, on_batch=on_batch)
p.start(trigger={{"availableNow": True}}).awaitTermination()
tasks = spark.range(0, 8, 1, 8).mapInArrow(pids, "pid long").collect()
print("EXECUTORS", spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1,
      "PYTHON WORKERS", len({{r.pid for r in tasks}} - {{os.getpid()}}), flush=True)
print("DONE", flush=True)
"""


def test_sigkilled_on_an_s3_checkpoint_gives_the_uninterrupted_output(spark, s3, tmp_path):
    """The uninterrupted run on ``local-cluster[2,1,1024]`` — two executor
    processes that share no directory for gpuwm's state (all of it, and the
    input, the output and Spark's checkpoint, on S3) —, the interrupted one
    in local mode, SIGKILLed inside batch 1's commit (gpuwm's written,
    Spark's not) and restarted on its S3 checkpoint: the same output, batch
    for batch. The kill is placed: one between Spark's file-source log and
    its offset log makes the restarted batch read two files (Spark's
    ``FileStreamSource`` resumes from its own log), legitimately another
    output under ``profile="spark"`` (DESIGN.md, the checkpoint). (Repeated
    kills at each point of a batch's commit, on a source without that log:
    ``test_spark.py``'s crash test and ``test_drain.py``'s end-of-input
    test.)"""
    rng = np.random.default_rng(5)
    src = _put_batches(s3, "killed/in", _rows(rng, 5, 300, 5, 20))
    conf = {**s3.spark_conf(), "spark.jars": spark_jars()}

    def script(name: str, **more) -> str:
        code = KILLED.format(root=ROOT, conf={**conf, **more}, src=src, ck=s3.uri(f"killed/{name}/ck"),
                             out=s3.uri(f"killed/{name}/out"), hold=0 if name == "clean" else 30)
        path = f"{tmp_path}/{name}.py"
        with open(path, "w") as fh:
            fh.write(textwrap.dedent(code))
        return path

    uninterrupted = started(script("clean", **{"spark.master": "local-cluster[2,1,1024]"}), cwd=tmp_path)
    path = script("killed")
    kill_after_batches(path, 2)  # SIGKILLed after 2 batches (asserts the run died of the SIGKILL)
    r = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=300)
    assert "DONE" in r.stdout, r.stdout + r.stderr[-3000:]
    assert "BATCH 1 replayed" in r.stdout, r.stdout  # Spark replayed batch 1; gpuwm ran nothing of it again
    r = finished(uninterrupted, timeout=300)
    assert "DONE" in r.stdout, r.stdout + r.stderr[-3000:]
    assert "EXECUTORS 2 PYTHON WORKERS 2" in r.stdout, r.stdout  # the tasks ran in two processes apart
    want = _read_all(Location.of(s3.uri("killed/clean/out"), s3.options()))
    got = _read_all(Location.of(s3.uri("killed/killed/out"), s3.options()))
    assert len(want) > 20 and got == want  # 0 lost, 0 duplicated, batch for batch


def test_damaged_or_shared_s3_checkpoints_are_refused_in_one_line(spark, s3, tmp_path):
    """gpuwm's state deleted while Spark's offsets and commits remain: refused
    before the first batch, naming what is missing; a second query on a
    checkpoint in use: refused at once."""
    rng = np.random.default_rng(9)
    src = {"a": _put_batches(s3, "damage/in", _rows(rng, 2, 100, 5, 5))}
    ck, out = s3.uri("damage/ck"), s3.uri("damage/out")
    _query(spark, "tumble", src, ck, out, s3.uri("damage/late"), 1).start(
        trigger={"availableNow": True}).awaitTermination()
    loc = Location.of(ck, s3.options())
    # a second query while the first runs: refused by gpuwm's lease, before Spark starts it
    first = _query(spark, "tumble", src, ck, out, s3.uri("damage/late"), 1).start()
    try:
        with pytest.raises(gpuwm.ConfigError, match=r"^checkpoint s3a://gpuwm/damage/ck is in use by another query "
                                                    r"run \w+ \(host .*, pid \d+, renewed \d+ s ago\)"):
            _query(spark, "tumble", src, ck, out, s3.uri("damage/late"), 1).start()
    finally:
        first.stop()
    # stop() ends the query's thread, not its cancelled job's tasks: let them finish (a straggler's state
    # object written after the deletes below would make the checkpoint look like another layout)
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 60
    while tracker.getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.2)
    # a state object of the last commit gone: named
    last = loc.read_json(f"gpuwm/commits/{max(int(n[:10]) for n in loc.list('gpuwm/commits')):010d}.json")
    victim = last["files"][0]
    loc.delete(victim)
    with pytest.raises(gpuwm.StateError, match=f"state is missing 1 file\\(s\\), e.g. {ck}/{victim}"):
        _query(spark, "tumble", src, ck, out, s3.uri("damage/late"), 1).start()
    # all of gpuwm's state gone, Spark's offsets and commits left: refused, not restarted from empty state
    loc.delete_dir("gpuwm")
    with pytest.raises(gpuwm.StateError, match=r"^checkpoint s3a://gpuwm/damage/ck is damaged: Spark has committed "
                                                r"batch \d+ but there is no gpuwm state"):
        _query(spark, "tumble", src, ck, out, s3.uri("damage/late"), 1).start()


@pytest.mark.parametrize("bad,match", [
    ({"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:1"}, "Could not connect to server"),
    ({"spark.hadoop.fs.s3a.secret.key": "wrong"}, "SIGNATURE_DOES_NOT_MATCH"),
])
def test_bad_s3_settings_are_one_line_before_the_first_batch(spark, s3, tmp_path, bad, match):
    """An endpoint that does not answer, wrong keys, a missing bucket: one
    line before Spark starts the query, nothing written."""
    opts = s3.options(**bad)
    os.makedirs(f"{tmp_path}/in", exist_ok=True)
    p = (Pipeline(spark.readStream.schema(SCHEMA).parquet(f"{tmp_path}/in"), s3.uri("bad/ck"))
         .watermark("ts", "1 second").sort().write_parquet(f"{tmp_path}/out"))
    p.checkpoint = type(p.checkpoint)(Location.of(s3.uri("bad/ck"), opts))
    with pytest.raises(gpuwm.ConfigError, match=f"^checkpoint location 's3a://gpuwm/bad/ck' cannot be used: .*{match}"):
        p.start()
    with pytest.raises(gpuwm.ConfigError, match="The specified bucket does not exist"):
        Pipeline(spark.readStream.schema(SCHEMA).parquet(f"{tmp_path}/in"), "s3a://no-such-bucket/ck") \
            .watermark("ts", "1 second").sort().write_parquet(f"{tmp_path}/out").start()
    assert s3.keys("bad") == [] and not os.path.exists(f"{tmp_path}/out/batch_id=0")
