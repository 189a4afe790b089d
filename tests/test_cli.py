"""The command line's errors: one line, ``gpuwm: error: <message>``, exit
status 2, no traceback (``--debug`` shows it), checked before Spark runs a
micro-batch — run as a user runs it, in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def gpuwm(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuwm.spark.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_a_missing_spec_is_one_line_and_exit_2(tmp_path):
    r = gpuwm("run", str(tmp_path / "nope.json"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"gpuwm: error: pipeline spec '{tmp_path / 'nope.json'}' not found\n"
    bad = tmp_path / "bad.json"
    bad.write_text('{"source": {}, "checkpoint": "ck", "watermark": {}, "sink": {}, "sorting": {}}')
    r = gpuwm("run", str(bad))
    assert r.returncode == 2 and r.stderr.startswith("gpuwm: error: pipeline spec") and "unknown key(s) ['sorting']" \
        in r.stderr and r.stderr.count("\n") == 1
    r = gpuwm("run", str(bad), "--debug")  # the traceback, for a bug report
    assert r.returncode == 1 and "Traceback" in r.stderr and "ConfigError" in r.stderr


@pytest.mark.spark
def test_a_duration_on_an_integer_column_is_refused_before_the_first_batch(tmp_path):
    """The case that used to fail inside the first micro-batch with a JVM
    stack trace: an integer event-time column with a delay of "5 seconds"."""
    pytest.importorskip("pyspark")
    (tmp_path / "in").mkdir()
    spec = {"source": {"format": "parquet", "schema": "t bigint, k bigint", "path": str(tmp_path / "in")},
            "checkpoint": str(tmp_path / "ck"), "trigger": {"availableNow": True},
            "watermark": {"column": "t", "delay": "5 seconds", "profile": "spark"},
            "stages": [{"window": {"tumble": 10, "by": ["k"]}}], "sink": {"parquet": str(tmp_path / "out")}}
    (tmp_path / "q.json").write_text(json.dumps(spec))
    r = gpuwm("run", str(tmp_path / "q.json"))
    err = [line for line in r.stderr.splitlines() if line.startswith("gpuwm:")]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert err == ["gpuwm: error: delay must be an int in the unit of integer column 't', "
                   "got datetime.timedelta(seconds=5)"]
    assert not (tmp_path / "ck" / "offsets").exists()  # no micro-batch was planned
    spec["source"]["schema"] = "t bigint, k bigint,"  # Spark's own parse error: one line too
    (tmp_path / "q.json").write_text(json.dumps(spec))
    r = gpuwm("run", str(tmp_path / "q.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.splitlines()[-1].startswith("gpuwm: error: ")
