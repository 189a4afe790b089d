"""The RAPIDS Accelerator loaded in Spark, in its explain-only mode (this
machine has no GPU): gpuwm's JSON specs through ``spark-submit
gpuwm/spark/app.py`` with ``spark_conf/rapids-explain.conf`` give the
output of the same specs with ``spark_conf/local.conf``, and the plugin
says it would place every gpuwm stage on a GPU.

The jar (~1 GB) is fetched from Maven Central as the one jar it is
(:func:`gpuwm.spark.jvm.jars.rapids_jar`, sha1-checked) on the first run and
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

from gpuwm.errors import ConfigError
from gpuwm.spark.jvm import versions
from gpuwm.spark.jvm.jars import rapids_jar

from .jvm import submit_conf
from .test_spark import read_out

pytestmark = [pytest.mark.rapids, pytest.mark.spark, pytest.mark.slow]
pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _submit(conf: str, specs: dict[str, dict], tmp: Path) -> subprocess.Popen:
    """``specs`` run one after another in one spark-submit with properties
    file ``conf`` (and the RAPIDS jar for a RAPIDS conf), started;
    ``_log`` waits for it."""
    paths = []
    for name, spec in specs.items():
        paths.append(tmp / f"{name}-{conf}.json")
        paths[-1].write_text(json.dumps(spec))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    jars = ["--jars", rapids_jar()] if conf.startswith("rapids") else []
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--properties-file", str(ROOT / "spark_conf" / conf),
           *jars, *submit_conf(), str(ROOT / "gpuwm" / "spark" / "app.py"), *map(str, paths)]
    return subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _log(p: subprocess.Popen) -> str:
    """The log of the spark-submit ``p``, run to its end without an error."""
    try:
        log, _ = p.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    assert p.returncode == 0, log[-4000:]
    return log


def _files(tmp: Path, name: str, rng, batches: int, cols: dict) -> None:
    """One Parquet file per batch, increasing mtimes (Spark takes the oldest first)."""
    (tmp / name).mkdir()
    for i in range(batches):
        n = 300
        secs = i * 4 + rng.integers(-3, 4, n)
        t = pa.table({c: pa.array([T0 + timedelta(seconds=int(s)) for s in secs], pa.timestamp("us"))
                      if kind == "ts" else pa.array(rng.integers(0, kind, n), pa.int64()) for c, kind in cols.items()})
        f = tmp / name / f"part-{i}.parquet"
        pq.write_table(t, f)
        os.utime(f, (1_000_000 + i, 1_000_000 + i))


def _rows(t: pa.Table | None, cols: list[str]) -> list[tuple]:
    return [] if t is None else sorted((tuple(r[c] for c in cols) for r in t.to_pylist()), key=repr)


def _specs(tmp: Path, conf: str) -> dict[str, dict]:
    """A file spec (a chain of two windows on 2 vnodes), an interval join and
    a Nexmark spec; each with its own checkpoint and sink under ``tmp``."""
    def out(name):
        return {"checkpoint": str(tmp / f"ck-{name}-{conf}"), "sink": {"parquet": str(tmp / f"out-{name}-{conf}")}}

    def files(path, schema, col, delay):
        return {"source": {"format": "parquet", "schema": schema, "path": str(tmp / path),
                           "options": {"maxFilesPerTrigger": 1}},
                "watermark": {"column": col, "delay": delay, "profile": "spark"}}

    tumble = {"window": {"tumble": "5 seconds", "by": ["k"], "aggs": {"n": ["*", "count"], "mx": ["price", "max"]}}}
    return {
        "chain": {**files("in", "ts timestamp, k bigint, price bigint", "ts", "3 seconds"), "vnodes": 2,
                  "stages": [tumble, {"window": {"tumble": "10 seconds", "on": "window_time",
                                                 "aggs": {"max_n": ["n", "max"], "groups": ["*", "count"]}}}],
                  **out("chain"), "trigger": {"availableNow": True}},
        "join": {"inputs": {"a": files("a", "a_id bigint, a_ts timestamp", "a_ts", "10 seconds"),
                            "b": files("b", "b_aid bigint, b_ts timestamp, price bigint", "b_ts", "5 seconds")},
                 "stages": [{"join": {"left": "a", "right": "b", "on": [["a_id", "b_aid"]],
                                      "between": ["b_ts", "a_ts", "0 seconds", "20 seconds"], "how": "left"}}],
                 **out("join"), "trigger": {"availableNow": True}},
        "nexmark": {"source": {"format": "nexmark", "options": {"totalEvents": 40_000, "eventsPerBatch": 10_000,
                                                                  "splits": 2, "eventsPerSecond": 2_000, "seed": 3}},
                    "watermark": {"column": "date_time", "delay": "2 seconds", "split": "split", "profile": "spark"},
                    "stages": [{"window": {"tumble": "2 seconds", "by": ["auction"],
                                           "aggs": {"bids": ["*", "count"], "max_price": ["price", "max"]}}}],
                    **out("nexmark")},
    }


def test_rapids_places_every_gpuwm_stage_on_the_gpu_and_gives_the_same_output(tmp_path):
    """The three specs with ``local.conf`` and with ``rapids-explain.conf``:
    the same output, and the plugin's explain says each gpuwm stage (a
    ``MapInArrowExec``: only integers, strings and the input's columns
    cross Spark; filter state, held rows, exchange pieces and console rows
    go through the storage seam) will run on the GPU."""
    try:
        versions.rapids()
    except ConfigError as e:  # (a line the plugin does not support: gpuwm says so in one line, test_versions)
        pytest.skip(str(e))
    rng = np.random.default_rng(5)
    _files(tmp_path, "in", rng, 8, {"ts": "ts", "k": 5, "price": 100})
    _files(tmp_path, "a", rng, 4, {"a_ts": "ts", "a_id": 40})
    _files(tmp_path, "b", rng, 4, {"b_ts": "ts", "b_aid": 40, "price": 100})
    cpu = _submit("local.conf", _specs(tmp_path, "cpu"), tmp_path)  # the two side by side (the suite's time)
    log = _log(_submit("rapids-explain.conf", _specs(tmp_path, "rapids"), tmp_path))
    _log(cpu)
    # the plugin initialised, in explain-only mode, and explained the queries it saw
    assert re.search(r"RAPIDS Accelerator 26\.08\.1 using cudf", log), log[-3000:]
    assert "RAPIDS Accelerator is in explain only mode" in log
    explain = [ln for ln in log.splitlines() if re.match(r"\s*[!@*#]?(Exec|Expression|Partitioning|Input) <", ln)
               or "will run on GPU" in ln or "cannot run on GPU" in ln]
    stages = [ln for ln in explain if "<MapInArrowExec>" in ln]
    # per micro-batch: chain 3 (filter, vnodes, segment), join 1, nexmark 1 -- more than a few of each.
    # "will partially run on GPU" is the plugin's word for a MapInArrowExec it replaces with its
    # GpuMapInArrowExec (columnar transfer, Python workers on the GPU; the function itself is Python's);
    # it falls back with "cannot run even partially on the GPU because ..."
    assert len(stages) >= 20, "\n".join(explain)[-3000:]
    assert all(ln.strip() == "*Exec <MapInArrowExec> will partially run on GPU" for ln in stages), \
        "\n".join(ln for ln in stages if "will partially run on GPU" not in ln)
    for name, cols in {"chain": ["window_start", "max_n", "groups"],
                       "join": ["a_id", "a_ts", "b_aid", "b_ts", "price"],
                       "nexmark": ["window_start", "auction", "bids", "max_price"]}.items():
        want = _rows(read_out(str(tmp_path / f"out-{name}-cpu")), cols)
        assert len(want) >= 3, name
        assert _rows(read_out(str(tmp_path / f"out-{name}-rapids")), cols) == want, name
    keep = os.environ.get("GPUWM_RAPIDS_EXPLAIN_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / "explain.txt").write_text("\n".join(explain) + "\n")


def test_one_rapids_version_everywhere():
    """``gpuwm jars``, the conf files, the README and the design notes name
    the one RAPIDS release gpuwm is tested with, and no other."""
    (version,) = {ln.rapids[0] for ln in versions.LINES.values() if ln.rapids}
    named = {}
    docs = [ROOT / "README.md", *sorted((ROOT / "gpuwm").glob("**/*.md"))]
    for f in [*docs, *sorted((ROOT / "spark_conf").glob("*.conf"))]:
        for m in re.finditer(r"rapids-4-spark_2\.13[:-](\d+\.\d+(?:\.\d+)?)|RAPIDS(?: Accelerator)? (\d+\.\d+(?:\.\d+)?)",
                             f.read_text()):
            named.setdefault(m.group(1) or m.group(2), []).append(f.name)
    assert set(named) == {version}, named
    assert "rapids" in " ".join(named[version]) and "README.md" in named[version]
    coordinate = f"com.nvidia:rapids-4-spark_2.13:{version}"
    assert coordinate in (ROOT / "README.md").read_text()
    assert coordinate in (ROOT / "gpuwm/spark/jvm/README.md").read_text()
