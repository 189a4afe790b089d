"""Run gpuwm's tests beside another Spark line, in a venv of that line's own.

    python tests/on_line.py 4.2                # the whole suite on PySpark 4.2's newest patch
    python tests/on_line.py 4.0.5 --smoke      # the version smoke (SMOKE) on PySpark 4.0.5
    python tests/on_line.py 4.3 -- -k kafka    # pytest's own arguments after --

The venv is ``.venvs/spark-<version>/`` beside the source tree (made once,
then reused: ``--fresh`` makes it anew), with PySpark pinned to the
version asked, plus what that line's PySpark asks of its neighbours
(``versions.LINES[...].pip``: pandas < 3 from 4.2 on), and gpuwm editable;
its other packages are those of the venv that runs this script, shared
(``--own``: installed in it). pip's own cache is shared too, so each
PySpark is downloaded and built once on a machine. A line given as ``4.2``
is its newest patch on PyPI (:data:`NEWEST`). Exits with pytest's status.

The smoke (:data:`SMOKE`) is what issue 72 names for each line other than
the default, and CI's suite runs it on each (``tests/test_lines.py``):
the Nexmark SQL tests on generated files (each a graph of stages or a
join, each equal to that Spark's own run batch for batch), the plan
fixtures, a graph query's spec, the writers, a SIGKILLed driver's restart
and a Kafka source, each equal to that Spark's run or to the uninterrupted
one.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuwm.spark.jvm import versions  # noqa: E402  (reads no PySpark: this venv's may be another)

#: each line's newest PySpark on PyPI (2026-12-02)
NEWEST = {(4, 0): "4.0.5", (4, 1): "4.1.4", (4, 2): "4.2.1", (4, 3): "4.3.0"}

#: the version smoke, run by CI's suite on each line but the default (tests/test_lines.py) and by hand: tests
#: that each run a query in gpuwm and in that Spark and compare, and what each needs of the line beyond PySpark
#: ("kafka": Spark's Kafka connector on Maven Central). What they cover: the Nexmark SQL (a graph of stages, a
#: WITH, joins), the plans of every fixture, a graph query's spec, the update-mode join the line decides on, the
#: writers and foreachBatch, a SIGKILLed driver's restart (the file sink's: its _spark_metadata log is that line's
#: classes), the versions module, and a Kafka source. (Delta, the Kafka sink, the Kafka SIGKILL and a join's
#: SIGKILL are the whole suite's: ~5 more minutes a line.)
SMOKE = {
    "tests/test_accelerate_nexmark.py": None,
    "tests/test_plans.py": None,
    "tests/test_versions.py": None,
    "tests/test_accelerate_join.py::test_a_graph_query_as_its_spec_runs_as_accelerate_runs_it": None,
    "tests/test_accelerate_join.py::test_an_inner_join_in_update_mode_runs_as_the_running_spark_runs_it": None,
    "tests/test_accelerate.py::test_every_datastreamwriter_call_runs_in_gpuwm_or_falls_back_as_written": None,
    "tests/test_accelerate.py::test_foreach_batch_runs_in_gpuwm_once_per_batch_and_again_on_a_replay": None,
    "tests/test_accelerate.py::test_the_parquet_sink_writes_spark_s_layout_and_log_exactly_once_across_sigkills": None,
    "tests/test_kafka.py::test_kafka_under_max_offsets_equals_sparks_own_query": "kafka",
}


def smoke(version: str) -> tuple[list[str], dict[str, str]]:
    """The smoke's tests on Spark ``version``, and those left out with why:
    a test whose need the line lacks (:data:`versions.LINES`)."""
    line = versions.line(versions.parse(version))
    lacks = {"kafka": f"Spark {version} has no Kafka connector on Maven Central"} if line.kafka is None else {}
    run = [t for t, need in SMOKE.items() if need not in lacks]
    return run, {t: lacks[need] for t, need in SMOKE.items() if need in lacks}


def version_of(line: str) -> str:
    """``4.2`` as its newest patch (:data:`NEWEST`), ``4.2.0`` as itself."""
    v = versions.parse(line)
    if line.count(".") == 1:
        if v[:2] not in NEWEST:
            raise SystemExit(f"on_line: no Spark line {line} (gpuwm supports {versions.lines_text()})")
        return NEWEST[v[:2]]
    return versions.text(v)


def venv(version: str, fresh: bool = False, own: bool = False) -> Path:
    """The venv of PySpark ``version`` with gpuwm and its test tools, made when not there yet.

    Run from a venv (CI's ``.venv``: gpuwm's test tools installed), it
    shares that venv's packages (a ``.pth`` adds its site-packages after
    its own) and installs only what differs: PySpark, that line's pins and
    gpuwm's scripts (``--no-deps``); ~1 min where pip's cache holds the
    PySpark, against ~3 for a venv of its own (``own``)."""
    at = ROOT / ".venvs" / f"spark-{version}"
    python = at / "bin" / "python"
    ready = at / "gpuwm-ready"  # (written last: a venv whose making was cut off is made anew)
    if ready.exists() and not fresh:
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(at)], check=True)
    line = versions.LINES.get(versions.parse(version)[:2])
    pins = [f"pyspark=={version}", *(line.pip if line else ())]
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if own or sys.prefix == sys.base_prefix:
        subprocess.run([*pip, "-e", f"{ROOT}[test]", *pins], check=True)
        ready.write_text(version)
        return python
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    subprocess.run([*pip, "--no-deps", "-e", str(ROOT)], check=True)  # (built before the sharing: its setuptools)
    shared = sysconfig.get_paths()["purelib"]
    (site / "gpuwm-shared.pth").write_text(f"import site; site.addsitedir({shared!r})\n")
    subprocess.run([*pip, *pins], check=True)
    ready.write_text(version)
    return python


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="after --: pytest's own arguments")
    ap.add_argument("line", help="a Spark line (4.2: its newest patch) or a version (4.2.0)")
    ap.add_argument("--smoke", action="store_true", help="the version smoke only (SMOKE), serially")
    ap.add_argument("--fresh", action="store_true", help="make the venv anew")
    ap.add_argument("--own", action="store_true", help="a venv with packages of its own (not this venv's, shared)")
    argv = sys.argv[1:] if argv is None else argv
    ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    a = ap.parse_args(ours)
    version = version_of(a.line)
    python = venv(version, a.fresh, a.own)
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    env = dict(os.environ)
    if a.smoke:
        env.setdefault("GPUWM_TEST_JVM", "c1")  # (tests/jvm.py: no class archive made for a few minutes' run)
        env["GPUWM_SMOKE"] = "1"  # (test_accelerate_nexmark: vnodes 2 alone)
        run, left = smoke(version)
        for t, why in left.items():
            print(f"on_line: left out {t}: {why}", flush=True)
        cmd += [*run, "-n", "0"]
    else:  # (the smoke of the other lines is the default line's to run)
        cmd += ["--ignore", str(ROOT / "tests" / "test_lines.py")]
    return subprocess.run([*cmd, *extra], cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
