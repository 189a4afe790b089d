"""The version smoke on every Spark line gpuwm supports but the running one
(issue 72): ``tests/on_line.py LINE --smoke`` in a venv of that line's
PySpark (made under ``.venvs/``, sharing this venv's packages), each of its
tests a query run in gpuwm and in that line's Spark and compared. This
file is scheduled first (``conftest.py``): its ~4-6 minutes a line run on
one worker beside the rest of the suite, not after it."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpuwm.spark.jvm import versions

from . import on_line

pytestmark = [pytest.mark.spark, pytest.mark.slow]

OTHER = [f"{a}.{b}" for a, b in versions.LINES if (a, b) != versions.running()[:2]]


@pytest.mark.parametrize("line", OTHER)
def test_the_version_smoke_passes_on_every_other_spark_line(line, tmp_path):
    """Every test of the smoke ran on that line's newest patch and passed,
    none skipped; what the line lacks (4.3: a Kafka connector) is left out
    in one line that says so."""
    version = on_line.version_of(line)
    run, left = on_line.smoke(version)
    xml = tmp_path / "smoke.xml"
    p = subprocess.run([sys.executable, on_line.__file__, line, "--smoke", "--", f"--junitxml={xml}"],
                       capture_output=True, text=True, timeout=2400)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"the smoke on Spark {version} failed:\n{out[-8000:]}"
    suite = ET.parse(xml).getroot().find("testsuite")
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("0", "0", "0"), out[-4000:]
    ran = [(Path(*c.get("classname").split(".")).with_suffix(".py").as_posix(), c.get("name").split("[")[0])
           for c in suite.iter("testcase")]
    for t in run:
        path, _, name = t.partition("::")
        assert any(f == path and name in ("", n) for f, n in ran), f"{t} did not run on Spark {version}"
    assert len(ran) >= len(run) + 100  # (test_plans' fixtures and the Nexmark queries, each a test)
    for t, why in left.items():
        assert f"on_line: left out {t}: {why}\n" in p.stdout
