"""The JVMs the suite starts, set for short runs over small data.

Every Spark driver PySpark starts for the tests (a module's session, the
scripts and ``gpuwm`` commands a test runs as subprocesses) takes
``spark.driver.defaultJavaOptions`` from ``PYSPARK_SUBMIT_ARGS``, which
:func:`prepare` sets for this process and its children (a line's smoke sets
its own):

* ``-XX:TieredStopAtLevel=1``: the JIT's first tier only. A test's query
  runs for seconds over thousands of rows; C2 spends more CPU compiling than
  it saves (two Nexmark tests: 136 -> 96 CPU seconds, 2026-12-07), and on
  CI's two cores that CPU is what the other worker waits for;
* a class-data-sharing archive (AppCDS) of the classes a Spark session and
  a streaming query load, made once per venv, Java and PySpark
  (``<venv>/gpuwm-test-jvm/``), beside the suite's first minutes: a JVM
  starts in ~5 s, not ~9, and runs its first job in ~2 s, not ~4. A JVM whose class path differs from the
  archive's runs without it, silently (``-Xlog:cds=off``). (Not through
  ``SPARK_CONF_DIR``: that folder goes on the class path, and Java 17 shares
  no classes of a class path with a folder that holds a file.)

Nothing here changes what a query computes. ``GPUWM_TEST_JVM=c1``: the
first tier without an archive (a line's smoke, ~6 minutes: making one costs
more than it saves there); ``GPUWM_TEST_JVM=default``: Java's defaults (as
a user's JVM runs).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

#: the JIT's first tier, and no word where the archive does not fit
FLAGS = "-XX:TieredStopAtLevel=1 -Xlog:cds=off -Xlog:cds+dynamic=off"

#: what the archive's JVM runs: a session, a file stream's watermarked window aggregation written as Parquet,
#: the same through gpuwm (mapInArrow, its Python workers), then the JVM's exit (where the archive is written)
_DUMP = """
import sys, os, tempfile
sys.path.insert(0, {root!r})
import pyarrow as pa, pyarrow.parquet as pq, datetime as dt
from gpuwm.spark import accelerate, local_session
from pyspark import SparkContext
from pyspark.sql import functions as F
d = tempfile.mkdtemp()
os.makedirs(f"{{d}}/in")
t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
pq.write_table(pa.table({{"ts": pa.array([t + dt.timedelta(seconds=i) for i in range(50)], pa.timestamp("us", "UTC")),
                         "k": list(range(50))}}), f"{{d}}/in/a.parquet")
spark = local_session(app="gpuwm-test-jvm", cores=2)
df = (spark.readStream.schema("ts timestamp, k long").parquet(f"{{d}}/in").withWatermark("ts", "1 second")
      .groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n")))
df.writeStream.option("checkpointLocation", f"{{d}}/nck").trigger(availableNow=True).start(f"{{d}}/native").awaitTermination()
accelerate(df, fallback="error").writeStream.option("checkpointLocation", f"{{d}}/ck").trigger(availableNow=True) \\
    .start(f"{{d}}/out").awaitTermination()
spark.read.parquet(f"{{d}}/out").collect()
spark.stop()
gw = SparkContext._gateway
gw.shutdown()
gw.proc.stdin.close()  # the JVM exits when its stdin closes, and writes the archive as it does
gw.proc.wait(timeout=120)
os.replace({made!r}, {path!r})  # (whole, or not there: a JVM starting now reads all of it or runs without)
"""


def _key() -> str:
    """Java's and PySpark's versions: an archive holds one JVM's classes of one class path."""
    from importlib.metadata import version

    from gpuwm.spark.jvm.jars import _java

    java = subprocess.run([_java(), "-version"], capture_output=True, text=True).stderr
    return hashlib.sha1(f"{java}|{version('pyspark')}".encode()).hexdigest()[:12]


def submit_args(options: str) -> str:
    """``PYSPARK_SUBMIT_ARGS`` giving a driver's JVM ``options`` (after
    the ``--conf`` PySpark's own launch passes, so winning over them), and
    the executors' JVMs the first tier (``local-cluster``'s)."""
    return (f"--conf {shlex.quote('spark.driver.defaultJavaOptions=' + options)} "
            f"--conf {shlex.quote('spark.executor.defaultJavaOptions=' + FLAGS)} pyspark-shell")


def submit_conf() -> list[str]:
    """The suite's JVM options as ``spark-submit`` arguments, for a test
    that runs ``spark-submit`` itself (which reads no ``PYSPARK_SUBMIT_ARGS``)."""
    args = shlex.split(os.environ.get("GPUWM_TEST_JVM_ARGS", ""))
    return [a for a in args if a != "pyspark-shell"]


def prepare(archive: bool = True) -> subprocess.Popen | None:
    """Give this process's Spark drivers (and its children's) the suite's
    JVM options. Where this venv has no archive yet for its Java and
    PySpark (``archive``), it is made beside the suite (~70 s: the JVM that
    makes it, then ~25 s writing it at its exit), not before it: JVMs that
    start before it is there run without it; the process making it is
    returned (:func:`finish`)."""
    mine = os.environ.get("PYSPARK_SUBMIT_ARGS") == os.environ.get("GPUWM_TEST_JVM_ARGS")  # (a parent suite's)
    if os.environ.get("GPUWM_TEST_JVM") == "default" or ("PYSPARK_SUBMIT_ARGS" in os.environ and not mine):
        return None  # (a user's own PYSPARK_SUBMIT_ARGS stands)
    maker, options = None, FLAGS
    if archive:
        home = Path(sys.prefix) / "gpuwm-test-jvm"
        home.mkdir(parents=True, exist_ok=True)
        path = home / f"classes-{_key()}.jsa"
        if not path.exists():
            made = path.with_suffix(f".{os.getpid()}.tmp")
            env = {**os.environ, "PYSPARK_SUBMIT_ARGS": submit_args(f"-XX:ArchiveClassesAtExit={made} {FLAGS}")}
            code = _DUMP.format(root=str(Path(__file__).resolve().parents[1]), made=str(made), path=str(path))
            with open(home / "made.log", "w") as log:
                maker = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=log, env=env)
        options += f" -XX:SharedArchiveFile={path}"  # (a JVM that finds none there runs without, silently)
    os.environ["PYSPARK_SUBMIT_ARGS"] = os.environ["GPUWM_TEST_JVM_ARGS"] = submit_args(options)
    return maker


def finish(maker: subprocess.Popen | None) -> None:
    """Wait for the archive's maker (:func:`prepare`) at the suite's end."""
    if maker is not None:
        try:
            maker.wait(timeout=300)
        except subprocess.TimeoutExpired:
            maker.kill()
