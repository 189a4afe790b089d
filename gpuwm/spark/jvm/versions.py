"""The Spark lines gpuwm supports and what differs between them, keyed by
the running PySpark's version: the one module that compares Spark's
version (``test_layers`` holds the rest of gpuwm to it).

* :data:`LINES` — each supported line (4.0 to 4.3) and what it runs with:
  the patches of Spark's Kafka connector Maven Central serves whole for it,
  the Delta Lake release built for it, and the RAPIDS Accelerator release
  that supports it (with the patches it names);
* :func:`running` — the running PySpark's version, as a tuple;
* :func:`unsupported` — the one line said where the running Spark is not
  one of :data:`LINES`;
* :func:`kafka_connector`, :func:`delta`, :func:`rapids` — the coordinates
  for the running Spark, or a one-line :class:`~gpuwm.errors.ConfigError`
  naming the lines that have one;
* :func:`kafka_replay_fails` — whether the Kafka connector has
  SPARK-57438 (a restarted query's replayed batch fails in progress);
* :func:`real_time_trigger` — whether PySpark's ``trigger`` takes
  ``realTime`` (4.2 on);
* :func:`update_joins` — whether Spark runs an inner stream–stream join
  in update mode (4.2 on);
* :func:`within` — whether the running Spark is in a range of lines
  (``4.0-4.1``, ``4.2-``: the tests' plan fixtures);
* :func:`arrow_timezone` — whether PySpark's Arrow schema conversion takes
  a ``timezone`` (4.2 on) rather than ``timestamp_utc`` (4.0, 4.1).

The RAPIDS and Delta tables are those releases' own support statements
(the plugin's 26.08 notes: Spark 4.1.1–4.1.3 and 4.2.0; Delta's POMs:
delta-spark 4.0.x builds on Spark 4.0, 4.1.0–4.3.x on 4.1, 4.4.0 on 4.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ...errors import ConfigError

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Line:
    """What one Spark line (``major.minor``) runs with. ``kafka``: the
    patches of ``spark-sql-kafka-0-10`` whose dependencies Maven Central
    serves too (its ``spark-token-provider-kafka-0-10`` of the same patch:
    4.1.3's connector is served, its token provider is not, so Ivy cannot
    resolve it), oldest first; another patch of Spark runs with the newest
    (a connector keeps its line's API). ``delta``: the ``delta-spark``
    release built for it. ``rapids``: the RAPIDS Accelerator release and
    the first and last Spark patch it supports on this line. None: there is
    none. ``pip``: what the line's PySpark asks of its neighbours beyond
    gpuwm's own dependencies (pip requirements; 4.2 on warns that pandas
    ≥ 3 is not supported)."""

    kafka: tuple[str, ...] | None
    delta: str | None
    rapids: tuple[str, Version, Version] | None
    pip: tuple[str, ...] = ()


#: the supported lines, oldest first
LINES: dict[tuple[int, int], Line] = {
    (4, 0): Line(kafka=("4.0.0",), delta="4.0.1", rapids=None),  # (the 26.06 plugin: Maven Central serves no 26.06)
    (4, 1): Line(kafka=("4.1.1",), delta="4.1.0", rapids=("26.08.1", (4, 1, 1), (4, 1, 3))),
    (4, 2): Line(kafka=("4.2.0",), delta="4.4.0", rapids=("26.08.1", (4, 2, 0), (4, 2, 0)), pip=("pandas<3",)),
    (4, 3): Line(kafka=None, delta=None, rapids=None, pip=("pandas<3",)),
}


def parse(text: str) -> Version:
    """``4.2.1`` (or ``4.2.0.dev1``, ``4.3.0rc1``) as ``(4, 2, 1)``."""
    import re

    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if m is None:
        raise ConfigError(f"not a Spark version: {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@lru_cache(maxsize=1)
def running() -> Version:
    """The installed PySpark's version (without importing it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return parse(version("pyspark"))
    except PackageNotFoundError:
        raise ConfigError("PySpark is not installed: pip install 'pyspark>=4.0,<4.4'") from None


def text(v: Version) -> str:
    """``(4, 2, 1)`` as ``4.2.1``."""
    return ".".join(map(str, v))


def lines_text() -> str:
    """The supported lines in words: ``4.0, 4.1, 4.2 and 4.3``."""
    names = [f"{a}.{b}" for a, b in LINES]
    return ", ".join(names[:-1]) + f" and {names[-1]}"


def unsupported(v: Version | None = None) -> str | None:
    """Why gpuwm does not run beside Spark ``v`` (the running one), in one
    line, or None where it does."""
    v = running() if v is None else v
    if v[:2] in LINES:
        return None
    return f"gpuwm supports Spark {lines_text()} (pyspark>=4.0,<4.4); this is Spark {text(v)}"


def line(v: Version | None = None) -> Line:
    """The running Spark's :class:`Line` (``v``: another version's);
    :class:`ConfigError` outside :data:`LINES`."""
    v = running() if v is None else v
    why = unsupported(v)
    if why is not None:
        raise ConfigError(why)
    return LINES[v[:2]]


def _with(pick) -> list[str]:
    """The lines that have something (``pick(line)`` not None), in words."""
    return [f"{a}.{b}" for (a, b), ln in LINES.items() if pick(ln) is not None]


def kafka_connector(v: Version | None = None) -> str:
    """Spark's Kafka connector for Spark ``v`` (the running one): its own
    patch where Maven Central serves it whole, else its line's newest such."""
    v = running() if v is None else v
    served = line(v).kafka
    if served is None:
        raise ConfigError(f"Spark {text(v)} has no Kafka connector on Maven Central "
                          f"(spark-sql-kafka-0-10); Kafka sources need Spark {', '.join(_with(lambda ln: ln.kafka))}")
    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{text(v) if text(v) in served else served[-1]}"


def delta(v: Version | None = None) -> str:
    """The Delta Lake package built for Spark ``v``'s line (the running one)."""
    v = running() if v is None else v
    got = line(v).delta
    if got is None:
        raise ConfigError(f"no Delta Lake release is built for Spark {v[0]}.{v[1]}; Delta needs Spark "
                          f"{', '.join(_with(lambda ln: ln.delta))}")
    return f"io.delta:delta-spark_2.13:{got}"


def rapids(v: Version | None = None) -> str:
    """The RAPIDS Accelerator jar that supports Spark ``v`` (the running one)."""
    v = running() if v is None else v
    got = line(v).rapids
    if got is None or not got[1] <= v <= got[2]:
        spans: dict[str, list[str]] = {}
        for r in (ln.rapids for ln in LINES.values() if ln.rapids):
            spans.setdefault(r[0], []).append(text(r[1]) if r[1] == r[2] else f"{text(r[1])}–{text(r[2])}")
        said = "; ".join(f"{release}: Spark {' and '.join(s)}" for release, s in spans.items())
        raise ConfigError(f"the RAPIDS Accelerator gpuwm fetches does not support Spark {text(v)} ({said})")
    return f"com.nvidia:rapids-4-spark_2.13:{got[0]}"


#: the Kafka connector patches whose progress metrics throw on a restarted query's first micro-batch (SPARK-57438,
#: ``Some(latestPartitionOffsets)`` while it is still null: brought by 4.1.0's real-time mode, SPARK-54027, and
#: fixed in 4.1.3 and 4.2.0 by ``Option(...)``; 4.0's connector never had it), first and last
KAFKA_REPLAY_NPE: tuple[Version, Version] = ((4, 1, 0), (4, 1, 2))


def kafka_replay_fails(v: Version | None = None) -> bool:
    """Whether the Kafka connector gpuwm runs beside Spark ``v`` (the
    running one; :func:`kafka_connector`) is one of
    :data:`KAFKA_REPLAY_NPE`; False where there is none."""
    try:
        got = parse(kafka_connector(v).rsplit(":", 1)[1])
    except ConfigError:
        return False
    return KAFKA_REPLAY_NPE[0] <= got <= KAFKA_REPLAY_NPE[1]


def real_time_trigger(v: Version | None = None) -> bool:
    """Whether PySpark ``v``'s (the running one's) ``DataStreamWriter.trigger``
    takes ``realTime`` (Spark's real-time mode): 4.2 on."""
    return (running() if v is None else v) >= (4, 2, 0)


def update_joins(v: Version | None = None) -> bool:
    """Whether Spark ``v`` (the running one) runs inner and left-semi
    stream–stream joins in update mode: 4.2 on (SPARK-56384; the rows are
    append mode's, a join having nothing to fire early). Outer joins stay
    append-only, and complete mode refuses every stream–stream join."""
    return (running() if v is None else v) >= (4, 2, 0)


def nullable_stateful_output(v: Version | None = None) -> bool:
    """Whether Spark ``v`` (the running one) reports every column of a
    stateful operator's output nullable, nested fields too: 4.3 on
    (``spark.sql.streaming.statefulOperator.alwaysNullableOutput.enabled``,
    on by default, pinned per query in its offset log). gpuwm's batches
    take Spark's analysed schema, so they follow it on each line; Parquet
    sinks write every column nullable on all lines."""
    return (running() if v is None else v) >= (4, 3, 0)


def within(lines: str, v: Version | None = None) -> bool:
    """Whether Spark ``v`` (the running one) is on the lines ``lines``:
    ``4.0-4.1`` (both ends in), ``4.2-`` (4.2 on), ``-4.1``, ``4.3``."""
    v = running() if v is None else v
    low, _, high = lines.partition("-") if "-" in lines else (lines, "", lines)
    return (not low or v[:2] >= parse(low)[:2]) and (not high or v[:2] <= parse(high)[:2])


#: Catalyst classes a later Spark renamed: the name a Spark before it gives the class -> the name gpuwm reads
#: (:func:`catalyst_name`). 4.1 renamed ``TimeAdd`` (a timestamp plus an interval) to ``TimestampAddInterval``
#: when it added the TIME type; the fields (``start``, ``interval``, ``timeZoneId``) are the same.
RENAMED_NODES: dict[str, str] = {"TimeAdd": "TimestampAddInterval"}


def catalyst_name(name: str) -> str:
    """A Catalyst class's simple name as gpuwm reads it on every line:
    the newest Spark's name for it (:data:`RENAMED_NODES`)."""
    return RENAMED_NODES.get(name, name)


def join_helper(v: Version | None = None) -> str:
    """The class of Spark ``v``'s (the running one's)
    ``StreamingSymmetricHashJoinHelper`` (its ``getStateWatermark``, the
    same on every line): 4.1 moved Spark's stateful operators into
    ``execution.streaming.operators.stateful``."""
    pkg = "operators.stateful.join." if (running() if v is None else v) >= (4, 1, 0) else ""
    return f"org.apache.spark.sql.execution.streaming.{pkg}StreamingSymmetricHashJoinHelper"


def file_sink_log(v: Version | None = None) -> str:
    """The package of Spark ``v``'s (the running one's) file-sink log
    classes, ``FileStreamSinkLog`` and ``SinkFileStatus`` (the
    ``_spark_metadata`` log; its format the same on every line): 4.1
    moved them into ``execution.streaming.sinks``."""
    pkg = ".sinks" if (running() if v is None else v) >= (4, 1, 0) else ""
    return f"org.apache.spark.sql.execution.streaming{pkg}"


def stateful_package(v: Version | None = None) -> tuple[str, bool]:
    """The package of Spark ``v``'s (the running one's) stateful operator
    traits (``StateStoreWriter``, ``StatefulOperatorStateInfo``: 4.1 moved
    them into ``execution.streaming.operators.stateful``), and whether its
    ``StateStoreWriter`` names the stores Spark's commit validation expects
    (``stateStoreNames``, 4.1 on)."""
    new = (running() if v is None else v) >= (4, 1, 0)
    return "org.apache.spark.sql.execution.streaming" + (".operators.stateful" if new else ""), new


def remainder_by_zero(v: Version | None = None) -> str:
    """The error class Spark ``v`` (the running one) fails an integer
    ``%`` by zero with under ANSI mode: ``REMAINDER_BY_ZERO`` from 4.1,
    ``DIVIDE_BY_ZERO`` before."""
    return "REMAINDER_BY_ZERO" if (running() if v is None else v) >= (4, 1, 0) else "DIVIDE_BY_ZERO"


def inline_cte_args(v: Version | None = None) -> tuple[bool, ...]:
    """The arguments of Spark ``v``'s (the running one's) optimizer rule
    ``InlineCTE`` that inline every ``WITH`` relation, as the optimizer
    does: ``alwaysInline``, ``keepDanglingRelations`` = False, and from
    4.3 on ``isAnalysis`` = False (a third parameter 4.3 added)."""
    return (True, False, False) if (running() if v is None else v) >= (4, 3, 0) else (True, False)


def arrow_timezone(v: Version | None = None) -> bool:
    """Whether PySpark's ``to_arrow_schema`` takes ``timezone`` (4.2 on;
    ``timestamp_utc`` before) and ``from_arrow_schema`` reads a zone-less
    timestamp as ``TIMESTAMP_NTZ`` unless told not to."""
    return (running() if v is None else v) >= (4, 2, 0)
