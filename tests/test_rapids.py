"""The RAPIDS Accelerator loaded in Spark, in its explain-only mode (this
machine has no GPU): gpuwm's JSON specs through ``spark-submit
gpuwm/spark/app.py`` with ``spark_conf/rapids-explain.conf`` give the
output of the same specs with ``spark_conf/local.conf``, and the plugin
says which operators it would place on a GPU.

The jar (~1 GB) is fetched from Maven Central as the one jar it is
(:func:`gpuwm.spark.jars.rapids_jar`, sha1-checked) on the first run and
cached after it; a fetch that fails fails the test with the reason. With
``GPUWM_RAPIDS_EXPLAIN_DIR`` set, the plugin's explain text of each run is
kept there (``benchmarks/results/rapids/``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpuwm.spark.jars import RAPIDS, rapids_jar

from .test_spark import read_out, rows_of

pytestmark = [pytest.mark.rapids, pytest.mark.spark, pytest.mark.slow]
pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _submit(conf: str, spec: dict, tmp: Path, name: str) -> str:
    """Run ``spec`` with spark-submit and properties file ``conf``; its log."""
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(spec))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    jars = ["--jars", rapids_jar()] if conf.startswith("rapids") else []
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--properties-file", str(ROOT / "spark_conf" / conf),
           *jars, str(ROOT / "gpuwm" / "spark" / "app.py"), str(path)]
    p = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
    log = p.stdout + p.stderr
    assert p.returncode == 0, log[-4000:]
    return log


def _file_spec(tmp: Path, tag: str) -> dict:
    return {"source": {"format": "parquet", "schema": "ts timestamp, k bigint, price bigint",
                       "path": str(tmp / "in"), "options": {"maxFilesPerTrigger": 1}},
            "checkpoint": str(tmp / f"ck-{tag}"),
            "watermark": {"column": "ts", "delay": "3 seconds", "profile": "spark"},
            "stages": [{"window": {"tumble": "5 seconds", "by": ["k"],
                                   "aggs": {"n": ["*", "count"], "mx": ["price", "max"]}}}],
            "sink": {"parquet": str(tmp / f"out-{tag}")}, "trigger": {"availableNow": True}}


def _nexmark_spec(tmp: Path, tag: str) -> dict:
    return {"source": {"format": "nexmark", "options": {"totalEvents": 40_000, "eventsPerBatch": 10_000, "splits": 2,
                                                         "eventsPerSecond": 2_000, "seed": 3}},
            "checkpoint": str(tmp / f"ck-{tag}"),
            "watermark": {"column": "date_time", "delay": "2 seconds", "split": "split", "profile": "spark"},
            "stages": [{"window": {"tumble": "2 seconds", "by": ["auction"],
                                   "aggs": {"bids": ["*", "count"], "max_price": ["price", "max"]}}}],
            "sink": {"parquet": str(tmp / f"out-{tag}")}}


def _write_files(tmp: Path) -> None:
    rng = np.random.default_rng(5)
    (tmp / "in").mkdir()
    for i in range(4):
        n = 500
        secs = i * 4 + rng.integers(-3, 4, n)
        t = pa.table({"ts": pa.array([T0 + timedelta(seconds=int(s)) for s in secs], pa.timestamp("us")),
                      "k": pa.array(rng.integers(0, 5, n), pa.int64()),
                      "price": pa.array(rng.integers(1, 100, n), pa.int64())})
        f = tmp / "in" / f"part-{i}.parquet"
        pq.write_table(t, f)
        os.utime(f, (1_000_000 + i, 1_000_000 + i))


@pytest.mark.parametrize("source", ["files", "nexmark"])
def test_rapids_plugin_explain_only_gives_the_same_output(tmp_path, source):
    if source == "files":
        _write_files(tmp_path)
    make = _file_spec if source == "files" else _nexmark_spec
    cols = ["window_start", "k", "n", "mx"] if source == "files" else ["window_start", "auction", "bids", "max_price"]
    _submit("local.conf", make(tmp_path, "cpu"), tmp_path, "cpu")
    log = _submit("rapids-explain.conf", make(tmp_path, "rapids"), tmp_path, "rapids")
    # the plugin initialised, in explain-only mode, and explained the queries it saw
    assert re.search(r"RAPIDS Accelerator 26\.08\.1 using cudf", log), log[-3000:]
    assert "RAPIDS Accelerator is in explain only mode" in log
    explain = [ln for ln in log.splitlines() if re.match(r"\s*[!@*#]?(Exec|Expression|Partitioning|Input) <", ln)
               or "will run on GPU" in ln or "cannot run on GPU" in ln]
    assert any("will run on GPU" in ln for ln in explain), log[-3000:]
    want = rows_of(read_out(str(tmp_path / "out-cpu")), cols)
    assert len(want) > 10
    assert rows_of(read_out(str(tmp_path / "out-rapids")), cols) == want
    keep = os.environ.get("GPUWM_RAPIDS_EXPLAIN_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"explain-{source}.txt").write_text("\n".join(explain) + "\n")


def test_one_rapids_version_everywhere():
    """``gpuwm jars``, the conf files, the README and the design notes name
    the one RAPIDS release gpuwm is tested with, and no other."""
    version = RAPIDS.rsplit(":", 1)[1]
    named = {}
    for f in [ROOT / "README.md", ROOT / "gpuwm" / "DESIGN.md", *sorted((ROOT / "spark_conf").glob("*.conf"))]:
        for m in re.finditer(r"rapids-4-spark_2\.13[:-](\d+\.\d+(?:\.\d+)?)|RAPIDS(?: Accelerator)? (\d+\.\d+(?:\.\d+)?)",
                             f.read_text()):
            named.setdefault(m.group(1) or m.group(2), []).append(f.name)
    assert set(named) == {version}, named
    assert "rapids" in " ".join(named[version]) and "README.md" in named[version]
