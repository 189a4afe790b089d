"""The session a query runs in: ``local_session`` (local mode set up for
gpuwm), ``register_sources`` (``format("nexmark")``) and ``read_nexmark``
(the embedded source, resuming from the query's checkpoint)."""

from __future__ import annotations

import os
import sys


def register_sources(spark) -> None:
    """Register ``format("nexmark")`` with this session."""
    from ..io.nexmark import NexmarkDataSource

    spark.dataSource.register(NexmarkDataSource)


# Spark conf read only when the driver's JVM starts: jars on its class path
_LAUNCH_KEYS = ("spark.jars", "spark.jars.packages", "spark.jars.repositories",
                "spark.driver.extraClassPath", "spark.driver.extraJavaOptions")


def _jvm_for(launch: dict) -> None:
    """Make the next session's JVM one started with ``launch``: a JVM this
    process already runs (an earlier, stopped or running session) has its
    class path fixed, so ``spark.jars`` given now would be ignored without a
    word and fail later as ``ClassNotFoundException``; such a JVM is
    stopped (its session first) and the next ``getOrCreate`` starts anew."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    gw = SparkContext._gateway
    if gw is None or not launch or launch.items() <= getattr(gw, "_gpuwm_launch", {}).items():
        return
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    elif SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    gw.shutdown()
    proc = getattr(gw, "proc", None)
    if proc is not None:  # the JVM exits when its stdin closes
        proc.stdin.close()
        proc.wait(timeout=60)
    SparkContext._gateway = None
    SparkContext._jvm = None


def local_session(app: str = "gpuwm", cores: int | str = "*", conf: dict | None = None, show_start: bool = False):
    """A local-mode SparkSession set up for gpuwm: Python workers run this
    interpreter, UTC session time zone, Arrow on, nexmark registered, log
    level ERROR. Jars in ``conf`` (``spark.jars``, ``spark.jars.packages``,
    ...) that the JVM this process already runs lacks start a new JVM. What
    a JVM prints while it starts is shown only if the start fails, or with
    ``show_start`` (:mod:`gpuwm.spark.jvm.jvmstart`)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from ...backend import SAID_BY

    os.environ[SAID_BY] = str(os.getpid())  # the workers share this machine: the driver says what it has
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    launch = {k: str(v) for k, v in (conf or {}).items() if k in _LAUNCH_KEYS}
    _jvm_for(launch)

    b = (SparkSession.builder.master(f"local[{cores}]").appName(app)
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false"))
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    from ..jvm.jvmstart import quiet_start

    fresh = SparkContext._gateway is None
    with quiet_start(show_start) as up:  # the JVM's start-up lines: off the terminal unless it fails
        spark = b.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        up(spark)
    if fresh:
        SparkContext._gateway._gpuwm_launch = launch
    register_sources(spark)
    return spark


def read_nexmark(spark, checkpoint: str, **options):
    """``spark.readStream.format("nexmark")`` with the options given (see
    :mod:`gpuwm.spark.io.nexmark`) and the query's checkpoint, from which the
    source resumes its batch grid after a restart."""
    import json

    from ..storage.checkpoint import Location, spark_fs_options

    loc = Location.of(checkpoint, spark_fs_options(spark), "checkpoint")
    checkpoint = loc.uri
    r = spark.readStream.format("nexmark").option("checkpointLocation", checkpoint)
    if loc.options:
        r = r.option("gpuwmFsOptions", json.dumps(loc.options))
    for k, v in options.items():
        r = r.option(k, str(v))
    # a Pipeline on this very stream generates each batch in its own task
    # (gpuwm.spark.io.nexmark.nexmark_source finds these options in its plan)
    return r.load()
