"""The Spark lines gpuwm supports (``gpuwm.spark.jvm.versions``): each
line's Kafka connector, Delta and RAPIDS coordinates as Maven Central
serves them, one line for a Spark outside them (and Spark runs the query
under ``fallback="spark"``), and no other module comparing versions."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from gpuwm.errors import ConfigError
from gpuwm.spark.jvm import versions
from gpuwm.spark.jvm.versions import LINES, delta, kafka_connector, parse, rapids, unsupported

from .oracle import module_session

spark = module_session("gpuwm-versions")


def test_versions_parse_as_pip_and_spark_write_them():
    assert parse("4.2.1") == (4, 2, 1) and parse("4.2.0.dev5") == (4, 2, 0) and parse("4.3.0rc1") == (4, 3, 0)
    assert parse("4.1") == (4, 1, 0)
    with pytest.raises(ConfigError, match="not a Spark version"):
        parse("four")


def test_the_connector_follows_the_running_spark():
    """Its own patch where Maven Central serves it whole, else its line's newest such."""
    assert kafka_connector((4, 1, 1)) == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1"
    assert kafka_connector((4, 1, 3)).endswith(":4.1.1")  # (4.1.3's token provider is not on Maven Central)
    assert kafka_connector((4, 2, 1)).endswith(":4.2.0")
    assert kafka_connector((4, 0, 5)).endswith(":4.0.0")
    with pytest.raises(ConfigError, match=r"^Spark 4\.3\.0 has no Kafka connector on Maven Central .*4\.0, 4\.1, 4\.2$"):
        kafka_connector((4, 3, 0))
    assert delta((4, 0, 2)) == "io.delta:delta-spark_2.13:4.0.1" and delta((4, 2, 1)).endswith(":4.4.0")


def test_the_kafka_restart_applies_where_the_connector_has_spark_57438():
    """4.1.0-4.1.2's connector (the 4.1 line runs 4.1.1's: 4.1.3's is not
    served whole) fails a restarted query's replay; 4.0's and 4.2's do not;
    4.3 has no connector to fail."""
    got = {v: versions.kafka_replay_fails(v) for v in ((4, 0, 5), (4, 1, 1), (4, 1, 3), (4, 2, 0), (4, 2, 1), (4, 3, 0))}
    assert got == {(4, 0, 5): False, (4, 1, 1): True, (4, 1, 3): True, (4, 2, 0): False, (4, 2, 1): False,
                   (4, 3, 0): False}


def test_gpuwm_jars_prints_the_running_spark_s_connector():
    """``spark-submit --packages "$(gpuwm jars --kafka-coordinate)"`` (the io README)."""
    gpuwm = Path(sys.executable).with_name("gpuwm")
    p = subprocess.run([str(gpuwm), "jars", "--kafka-coordinate"], capture_output=True, text=True, timeout=120)
    if versions.line().kafka is None:
        assert p.returncode == 2 and p.stderr.startswith("gpuwm: error: Spark ") and "no Kafka connector" in p.stderr
    else:
        assert p.returncode == 0 and p.stdout.strip() == kafka_connector(), p.stderr


def test_a_kafka_spec_on_a_line_without_a_connector_stops_in_one_line_before_java(tmp_path, monkeypatch, capsys):
    """``gpuwm run`` of a Kafka spec beside a Spark whose connector Maven
    Central does not serve (4.3.0; here the running line made so): exit 2
    and the one line, before a broker is asked or Java starts (the
    bootstrap server below answers nothing: asked first, it would be the
    line)."""
    import dataclasses
    import json

    from gpuwm.spark.front.cli import main

    v = versions.running()
    monkeypatch.setitem(LINES, v[:2], dataclasses.replace(LINES[v[:2]], kafka=None))
    spec = {"source": {"format": "kafka", "options": {"subscribe": "bids", "kafka.bootstrap.servers": "127.0.0.1:9"},
                       "schema": "auction BIGINT, price BIGINT, date_time TIMESTAMP"},
            "checkpoint": str(tmp_path / "ck"), "watermark": {"column": "date_time", "delay": "1 second"},
            "stages": [{"sort": {}}], "sink": {"parquet": str(tmp_path / "out")}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    assert main(["run", str(tmp_path / "spec.json")]) == 2
    out, err = capsys.readouterr()
    assert err == (f"gpuwm: error: Spark {versions.text(v)} has no Kafka connector on Maven Central "
                   f"(spark-sql-kafka-0-10); Kafka sources need Spark "
                   f"{', '.join(f'{a}.{b}' for (a, b), ln in LINES.items() if ln.kafka)}\n"), out + err
    assert "starting Spark" not in out and not (tmp_path / "ck").exists()


def test_rapids_says_which_plugin_supports_which_spark():
    assert rapids((4, 1, 1)) == rapids((4, 2, 0)) == "com.nvidia:rapids-4-spark_2.13:26.08.1"
    for v in ((4, 1, 4), (4, 2, 1), (4, 0, 2), (4, 3, 0)):
        with pytest.raises(ConfigError) as e:
            rapids(v)
        assert str(e.value) == (f"the RAPIDS Accelerator gpuwm fetches does not support Spark {versions.text(v)} "
                                "(26.08.1: Spark 4.1.1–4.1.3 and 4.2.0)")


def test_gpuwm_jars_names_the_rapids_jar_or_says_in_one_line_which_spark_it_supports():
    """``spark-submit --jars "$(gpuwm jars --rapids-path)"`` (the README): on
    a Spark the plugin does not support (4.0, 4.1.4, 4.2.1, 4.3), one line
    and exit 2 before anything is fetched; on one it supports, the jar is
    the release its line names (fetched by test_rapids, not here: ~1 GB)."""
    try:
        want = rapids()
    except ConfigError as e:
        gpuwm = Path(sys.executable).with_name("gpuwm")
        p = subprocess.run([str(gpuwm), "jars", "--rapids-path"], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
        assert p.stderr == f"gpuwm: error: {e}\n"
        assert "26.08.1: Spark 4.1.1–4.1.3 and 4.2.0" in p.stderr
    else:
        assert want == f"com.nvidia:rapids-4-spark_2.13:{versions.line().rapids[0]}"


def test_the_state_node_is_built_against_each_line_s_package():
    """gpuwm's Scala node (gpuwm/spark/jvm/build.py) names the stateful
    traits where each line has them: 4.1 moved them and added the stores
    commit validation expects (built and run on each line: test_state_progress)."""
    assert versions.stateful_package((4, 0, 5)) == ("org.apache.spark.sql.execution.streaming", False)
    for v in ((4, 1, 3), (4, 2, 1), (4, 3, 0)):
        assert versions.stateful_package(v) == ("org.apache.spark.sql.execution.streaming.operators.stateful", True)


def test_outside_the_lines_is_one_line():
    assert unsupported((4, 1, 1)) is None and unsupported((4, 3, 0)) is None
    for v in ((3, 5, 8), (5, 0, 0)):
        assert unsupported(v) == f"gpuwm supports Spark 4.0, 4.1, 4.2 and 4.3 (pyspark>=4.0,<4.4); this is Spark " \
                                 f"{versions.text(v)}"
        with pytest.raises(ConfigError, match="^gpuwm supports Spark"):
            kafka_connector(v)


def _pom(coordinate: str) -> str:
    group, artifact, v = coordinate.split(":")
    url = f"https://repo1.maven.org/maven2/{group.replace('.', '/')}/{artifact}/{v}/{artifact}-{v}.pom"
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def test_every_coordinate_of_the_table_is_on_maven_central():
    """Each line's connectors, Delta and plugin as Maven Central serves
    them (a POM each), and the connectors' and Delta's own compile-time
    dependencies of their project too (Ivy resolves a package whole, so a
    connector whose token provider is missing cannot be used): the table
    names nothing that cannot be fetched."""
    coords = {f"org.apache.spark:spark-sql-kafka-0-10_2.13:{k}" for line in LINES.values() for k in line.kafka or ()} \
        | {delta((*ln, 0)) for ln, line in LINES.items() if line.delta}
    whole = {rapids(line.rapids[1]) for line in LINES.values() if line.rapids}  # (one self-contained jar)
    for c in sorted(coords):
        group = c.split(":")[0]
        deps = re.findall(r"<dependency>\s*<groupId>([^<]+)</groupId>\s*<artifactId>([^<]+)</artifactId>\s*"
                          r"<version>([^<]+)</version>\s*<scope>compile</scope>", _pom(c))
        whole |= {":".join(d) for d in deps if d[0] == group}
        assert group != "org.apache.spark" or any("token-provider" in d[1] for d in deps), c
    for c in sorted(coords | whole):
        assert "<modelVersion>" in _pom(c), c


def test_a_spark_outside_the_lines_runs_the_query_itself(spark, tmp_path, monkeypatch):
    """On a Spark gpuwm does not support, ``accelerate`` refuses with
    ``SPARK_VERSION`` (one line): Spark runs the query under the default
    fallback, and ``fallback="error"`` raises that line."""
    from gpuwm.spark import accelerate
    from gpuwm.spark.front.accelerate import SparkRun

    (tmp_path / "in").mkdir()
    df = spark.readStream.schema("ts timestamp, k string").parquet(str(tmp_path / "in")) \
        .withWatermark("ts", "10 seconds").dropDuplicates(["k", "ts"])
    assert accelerate(df).refused is None
    monkeypatch.setattr(versions, "running", lambda: (3, 5, 8))
    acc = accelerate(df)
    assert acc.refused.code == "SPARK_VERSION" and str(acc.refused.reason).endswith("this is Spark 3.5.8")
    assert isinstance(acc.runner(str(tmp_path / "ck")), SparkRun)
    with pytest.raises(ConfigError, match=r"^gpuwm cannot run the query \[SPARK_VERSION\]: gpuwm supports Spark 4\.0, "):
        accelerate(df, fallback="error")


def test_a_batch_s_schema_is_the_running_spark_s_nullability_included(spark, tmp_path):
    """The DataFrame ``foreachBatch`` hands the user has Spark's own schema,
    nullability included, on the running line: 4.3 reports every column of
    a stateful operator's output nullable
    (``spark.sql.streaming.statefulOperator.alwaysNullableOutput.enabled``,
    on by default), 4.0-4.2 keep ``window`` and ``count`` not null. The
    rows are equal too."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from gpuwm.spark import accelerate

    (tmp_path / "in").mkdir()
    ts = pa.array([dt.datetime(2024, 1, 1, 0, 0, i) for i in range(60)], pa.timestamp("us", "UTC"))
    pq.write_table(pa.table({"ts": ts, "k": pa.array([i % 3 for i in range(60)], pa.int64()),
                             "p": pa.array(range(60), pa.int64())}), tmp_path / "in" / "a.parquet")
    df = (spark.readStream.schema("ts timestamp, k bigint, p bigint").parquet(str(tmp_path / "in"))
          .withWatermark("ts", "5 seconds").groupBy(F.window("ts", "10 seconds"), "k")
          .agg(F.count("*").alias("n"), F.sum("p").alias("s"), F.max("p").alias("mx")))
    seen: dict[str, list] = {}

    def each(tag):
        def f(batch, batch_id):
            seen.setdefault(f"{tag}-schema", batch.schema)
            seen.setdefault(tag, []).extend(map(tuple, batch.collect()))
        return f

    for tag, q in (("spark", df), ("gpuwm", accelerate(df, fallback="error"))):
        q.writeStream.outputMode("append").foreachBatch(each(tag)).option(
            "checkpointLocation", str(tmp_path / f"ck-{tag}")).trigger(availableNow=True).start().awaitTermination()
    assert seen["gpuwm-schema"] == seen["spark-schema"]  # (StructType's == compares nullability too)
    assert seen["spark-schema"]["n"].nullable is versions.nullable_stateful_output()
    assert len(seen["spark"]) >= 9 and sorted(seen["gpuwm"]) == sorted(seen["spark"])


def test_no_other_module_compares_spark_versions():
    root = Path(__file__).resolve().parents[1] / "gpuwm"
    spelled = re.compile(r"pyspark\.__version__|version\(\"pyspark\"\)|sparkContext\.version|spark\.version\b")
    found = [str(p.relative_to(root)) for p in root.rglob("*.py")
             if p.name != "versions.py" and spelled.search(p.read_text())]
    assert found == []
