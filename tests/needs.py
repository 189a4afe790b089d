"""What a test needs of the running Spark's line beyond PySpark.

A line whose Spark has no Kafka connector or Delta Lake release on Maven
Central (:data:`gpuwm.spark.jvm.versions.LINES`: 4.3 has neither) cannot
run the tests that compare gpuwm with Spark's own Kafka source or Delta
sink. Those tests are skipped there with the one line gpuwm itself says to
a user of that line (``test_versions`` asserts that line, and that a Kafka
spec stops with it before Java starts), so the line's results name what it
lacks; on every other line they run.
"""

from __future__ import annotations

import pytest

from gpuwm.errors import ConfigError
from gpuwm.spark.jvm import versions


def lacks(pick) -> str | None:
    """gpuwm's one line for what the running line lacks (``pick``: a
    :mod:`versions` lookup such as ``versions.kafka_connector``), or None."""
    try:
        pick()
    except ConfigError as e:
        return str(e)
    return None


def _mark(pick):
    why = lacks(pick)
    return pytest.mark.skipif(why is not None, reason=why or "")


#: Spark's Kafka connector (a Kafka source or sink run by Spark beside gpuwm)
KAFKA = _mark(versions.kafka_connector)
#: Delta Lake for Spark (Spark's own Delta sink, the oracle, and its reader)
DELTA = _mark(versions.delta)
