"""The task-side projection (:mod:`gpuwm.project`) against Spark
itself: ``from_json`` over thousands of random messages — valid, odd and
broken JSON — gives Spark's structs, field for field; and the expressions a
Kafka select uses give Spark's columns."""

from __future__ import annotations

import math
import sys

import numpy as np
import pyarrow as pa
import pytest

from gpuwm.project import evaluate
from gpuwm.spark.jvm.versions import remainder_by_zero
from gpuwm.sparkjson import from_json, spark_json

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

FIELDS = [["ts", "bigint"], ["k", "int"], ["sm", "smallint"], ["t", "tinyint"], ["d", "double"], ["b", "boolean"],
          ["s", "string"]]
DDL = ", ".join(f"{n} {t.upper()}" for n, t in FIELDS)
VALUES = ["1", "-0", "007", "12", "127", "128", "-129", "40000", "2147483648", "9223372036854775807",
          "9223372036854775808", "-9223372036854775808", "1.5", "12.50", "1e3", "-2.5E-10", "1e400", "1E7", "0.001",
          "0.0001", "NaN", "Infinity", "-Infinity", "Inf", "+1", "true", "false", "null", '"abc"', "'single'",
          '"\\u00e9\\ud83d\\ude00"', '"a\\tb"', '"a\tb"', '"NaN"', '"-INF"', '""', '"5"', '{"y": [1, 2.50, "z"]}',
          "[1, {\"a\": null}]", "[]", "{}", '"\\"q\\" \\\\ /"', "tru", '"unterminated',
          # malformed inside a value: Jackson goes on from where the error left it (the field null, or all)
          '{"a": 1,}', "[1,]", "{,}", "[,1]", "[1 2]", '{"a" 1}', '{"a": }', '{"a": [1, {"b": 2,}]}', "[1}",
          '{"a": 1]', '{"a": "b\\q"}', "{'a': 1,}", '{"a": {"b": [}]}']
NAMES = [n for n, _ in FIELDS] + ["x", "TS"]


def _messages(n: int, seed: int) -> list[bytes | None]:
    rng = np.random.default_rng(seed)
    out: list[bytes | None] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.02:
            out.append(None)
            continue
        fields = []
        for _ in range(rng.integers(0, 6)):
            name = NAMES[rng.integers(len(NAMES))]
            q = "'" if rng.random() < 0.03 else '"'
            ws = " " * int(rng.integers(0, 2))
            fields.append(f"{q}{name}{q}:{ws}{VALUES[rng.integers(len(VALUES))]}")
        s = "{" + ", ".join(fields) + "}"
        c = rng.random()
        if c < 0.05:
            s = s[: int(rng.integers(0, len(s)))]  # cut short
        elif c < 0.08:
            s = s + " trailing"
        elif c < 0.10:
            s = "  \n" + s.replace(", ", ",\n") + "\n"
        elif c < 0.12:
            s = ["", "   ", "null", "[1]", "5", "\"x\"", "{,}", "{\"ts\":1,}"][int(rng.integers(8))]
        out.append(s.encode())
    return out


def _norm(rows: list) -> list:
    out = []
    for r in rows:
        if r is None:
            out.append(None)
            continue
        out.append({k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()})
    return out


@pytest.fixture(scope="module")
def spark():
    from gpuwm.spark import local_session

    s = local_session(app="gpuwm-project-tests", cores=2)
    yield s


def test_from_json_equals_sparks_on_random_messages(spark):
    msgs = _messages(4_000, 7) + [b'{"ts": 1, "k": 2}'] * 50  # long runs of good lines take pyarrow's path
    df = spark.createDataFrame([(m,) for m in msgs], "value binary")
    want = df.selectExpr(f"from_json(CAST(value AS STRING), '{DDL}') AS e").toArrow().column("e").to_pylist()
    got, bad = from_json(pa.array(msgs, pa.binary()), FIELDS)
    assert _norm(got.to_pylist()) == _norm(want)
    # malformed: a message Spark does not parse whole (a struct of nulls, a field that failed, blank)
    slow = [spark_json(m, FIELDS) for m in msgs]
    assert bad == sum(m is not None and not ok for m, (_, ok) in zip(msgs, slow))
    assert 100 < bad < 3_000


def test_kafka_select_expressions_equal_sparks(spark):
    rng = np.random.default_rng(1)
    n = 500
    ms = rng.integers(-2_000_000_000_000, 2_000_000_000_000, n)
    msgs = [b'{"ts": %d, "k": %d}' % (t, i) for i, t in enumerate(ms)]
    t = pa.table({"value": pa.array(msgs, pa.binary()), "key": pa.array([None if i % 3 else b"\xffk" for i in range(n)],
                                                                          pa.binary())})
    df = spark.createDataFrame(t.to_pandas(), "value binary, key binary")
    steps = [[["e", {"from_json": [{"cast": [{"col": "value"}, "string"]}, [["ts", "bigint"], ["k", "bigint"]]]}],
              ["key", {"cast": [{"col": "key"}, "string"]}]],
             [["a", {"ts": [{"field": [{"col": "e"}, "ts"]}, "millis"]}],
              ["b", {"ts": [{"field": [{"col": "e"}, "k"]}, "seconds"]}],
              ["c", {"cast": [{"field": [{"col": "e"}, "k"]}, "timestamp"]}],
              ["d", {"ts": [{"field": [{"col": "e"}, "ts"]}, "micros"]}], ["key", {"col": "key"}],
              # (whole seconds of a timestamp, floored: before 1970 too)
              ["s", {"cast": [{"ts": [{"field": [{"col": "e"}, "ts"]}, "millis"]}, "bigint"]}]]]
    want = df.selectExpr("from_json(CAST(value AS STRING), 'ts BIGINT, k BIGINT') AS e", "CAST(key AS STRING) AS key") \
        .selectExpr("timestamp_millis(e.ts) AS a", "timestamp_seconds(e.k) AS b", "CAST(e.k AS TIMESTAMP) AS c",
                    "timestamp_micros(e.ts) AS d", "key", "CAST(timestamp_millis(e.ts) AS BIGINT) AS s").toArrow()
    got = evaluate(steps, t)
    assert got.column_names == want.column_names
    assert got.column("s").to_pylist() == want.column("s").to_pylist() and min(got.column("s").to_pylist()) < 0
    for c in ("a", "b", "c", "d"):
        assert got.column(c).cast(pa.int64()).to_pylist() == want.column(c).cast(pa.int64()).to_pylist(), c
    assert got.column("key").cast(pa.binary()).to_pylist() == want.column("key").cast(pa.binary()).to_pylist()


def test_the_slow_way_gets_every_message_with_a_newline_or_a_non_finite_word():
    """``from_json``'s pre-check (a byte search over the whole buffer) names
    every message the per-row regex would: in sliced arrays, with nulls, in
    32- and 64-bit offsets (a match across two messages may name one more)."""
    import pyarrow.compute as pc

    from gpuwm.sparkjson import _holding

    rng = np.random.default_rng(1)
    alpha = list("abIfnNa{}\n\r ")
    for _ in range(300):
        n = int(rng.integers(0, 40))
        vals = [None if rng.random() < 0.1 else "".join(rng.choice(alpha, int(rng.integers(0, 8)))).encode()
                for _ in range(n)]
        for typ in (pa.binary(), pa.large_binary()):
            a = pa.array(vals, typ).slice(int(rng.integers(0, n + 1)) if n else 0)
            want = pc.match_substring_regex(a, "[\n\r]|Inf|NaN").fill_null(False).to_numpy(zero_copy_only=False)
            got = np.zeros(len(a), bool)
            got[_holding(a, (b"\n", b"\r", b"Inf", b"NaN"))] = True
            assert not (want & ~got).any()
            spill = np.flatnonzero(got & ~want)  # only a match that runs on into the next message
            assert all(a[int(i)].as_py() is not None for i in spill)


def _zip_reads(_):
    """In a Spark task, with gpuwm's task code imported: whether gpuwm's
    fix is in this worker, how many archive directories
    ``importlib.invalidate_caches()`` — what PySpark calls before every
    task — reads (the second of two calls), and how many the eager
    re-read it replaces would read."""
    import importlib
    import zipimport

    import gpuwm.spark.executor.tasks  # noqa: F401 - what a gpuwm task imports first

    reads: list = []
    eager = zipimport._read_directory
    zipimport._read_directory = lambda archive: reads.append(archive) or eager(archive)
    try:
        importlib.invalidate_caches()
        reads.clear()
        importlib.invalidate_caches()
        fixed = len(reads)
    finally:
        zipimport._read_directory = eager
    yield pa.RecordBatch.from_pydict({"installed": [bool(getattr(zipimport.zipimporter.invalidate_caches,
                                                                  "_gpuwm", False))],
                                      "reads": [fixed],
                                      # what Python 3.11's own would read: one directory per zipimporter
                                      "eager_reads": [sum(isinstance(f, zipimport.zipimporter)
                                                          for f in sys.path_importer_cache.values())]})


def test_a_spark_worker_running_gpuwm_reads_no_zip_directory_per_task(spark):
    """PySpark's worker invalidates the import caches before each task; on
    Python 3.10–3.12 every ``zipimporter`` (pyspark.zip, py4j, the Spark
    jar, and one per package imported from them) then reads its archive's
    directory again, ~0.1 s a task. With gpuwm's task code in the worker
    (:mod:`gpuwm.spark.jvm.pyworker`) an unchanged archive is not read again."""
    schema = "installed boolean, reads long, eager_reads long"
    row = spark.range(0, 1, 1, 1).mapInArrow(_zip_reads, schema).collect()[0]
    if sys.version_info[:2] >= (3, 13):  # read lazily there: nothing to fix
        assert not row["installed"]
        return
    assert row["installed"] and row["eager_reads"] >= 3  # pyspark.zip, py4j's zip, the Spark jar at least
    assert row["reads"] == 0


def _jvms() -> dict[int, str]:
    """The ``java`` launchers of this machine's JDKs by feature version."""
    import glob
    import re
    import subprocess

    out = {}
    for java in sorted(glob.glob("/usr/lib/jvm/*/bin/java")):
        r = subprocess.run([java, "-version"], capture_output=True, text=True)
        m = re.search(r'version "(\d+)', r.stderr)
        if m:
            out.setdefault(int(m.group(1)), java)
    return out


def test_doubles_are_written_with_the_digits_of_java_s_double_to_string():
    """Spark's ``to_json`` writes a double with ``Double.toString`` of the
    JVM it runs on: from Java 19 on the shortest digits that read back
    (two at least, the closest); Java 17's are not always the shortest
    (JDK-4511638: ``1e23`` as ``9.999999999999999E22``). gpuwm writes
    each Java's: equal to a Java 17 and a Java 19+ JVM's on ~110,000
    doubles — random bits, round decimals, every exponent, every power of
    two and the doubles beside every power of ten, subnormals, integers
    past 2^63 and fractions of integers (the branches of Java 17's digit
    loop: long and big arithmetic, the long margin wrapping, the margin
    halved at a power of two, an estimate one too high, the E-form's second
    digit, a round-up carrying out)."""
    import os
    import random
    import struct
    import subprocess

    from gpuwm.javatext import _java_double

    jvms = _jvms()
    new = [v for v in jvms if v >= 19]
    assert 17 in jvms and new, f"this test needs Java 17 and a Java 19 or later under /usr/lib/jvm; found {jvms}"
    rnd = random.Random(4511638)
    values = [struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0] for _ in range(30_000)]
    values += [round(rnd.uniform(-1e6, 1e6), rnd.randint(0, 6)) for _ in range(10_000)]
    values += [rnd.random() * 10.0 ** rnd.randint(-320, 300) for _ in range(10_000)]
    values += [1e23, 2e23, 8.41e21, 2.82879384806159e17, 5e-324, 1e-5, 1e7, 9999999.0, 0.001, 2.0 ** 63,
               float(2 ** 53 + 2), 1.0, 0.1, 100.0, -0.0, 2e-3, 1.7976931348623157e308, 2.0 ** -1022]
    values += [2.0 ** e for e in range(-1074, 1024)]
    values += [math.nextafter(10.0 ** k, to) for k in range(-323, 309) for to in (0, math.inf)]
    values += [float(f"{rnd.randint(1, 10 ** rnd.randint(1, 17))}e{rnd.randint(-330, 310)}") for _ in range(30_000)]
    values += [rnd.uniform(1e7, 1e8) for _ in range(5_000)] + [rnd.uniform(1e-4, 1e-3) for _ in range(5_000)]
    values += [struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(52)))[0] for _ in range(5_000)]  # subnormals
    values += [float(rnd.randint(1, 2 ** 62)) * 2.0 ** rnd.randint(1, 960) for _ in range(5_000)]
    values += [float(rnd.randint(1, 2 ** 53)) / 2 ** rnd.randint(1, 60) for _ in range(5_000)]
    values += [rnd.randint(1, 2 ** rnd.randint(1, 20)) / 2 ** rnd.randint(1, 12) for _ in range(5_000)]  # few fraction bits
    values = [v for v in values if math.isfinite(v)]
    bits = "".join(f"{struct.unpack('<q', struct.pack('<d', v))[0]}\n" for v in values)
    source = os.path.join(os.path.dirname(__file__), "java", "ToString.java")
    for version in (17, new[0]):
        r = subprocess.run([jvms[version], source], input=bits, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        want = r.stdout.split("\n")[:-1]
        assert len(want) == len(values)
        bad = [(v, w, g) for v, w in zip(values, want) if (g := _java_double(v, version)) != w]
        assert not bad, (version, bad[:5])
    assert _java_double(1e23, 17) == "9.999999999999999E22" and _java_double(1e23, 21) == "1.0E23"
    # the op as accelerate writes it for a double on Java 19+: each row's value, nulls left out, a repeat once
    t = pa.table({"k": [1, 2, 3, 4], "p": [5e-324, None, 1e23, 5e-324]})
    got = evaluate([[["value", {"to_json": {"fields": [["k", {"col": "k"}], ["p", {"col": "p"}]], "java": 21}}]]], t)
    assert got.column("value").to_pylist() == ['{"k":1,"p":4.9E-324}', '{"k":2}', '{"k":3,"p":1.0E23}',
                                               '{"k":4,"p":4.9E-324}']


def _as_steps(df) -> list:
    """The expressions of ``df``'s last select as gpuwm's projection step,
    translated from Spark's analyzed plan as ``accelerate`` translates them."""
    from gpuwm.spark.catalyst.expressions import project_expr
    from gpuwm.spark.jvm.objects import scala_iter

    plan = df._jdf.queryExecution().analyzed()
    ids = {int(a.exprId().id()): str(a.name()) for a in scala_iter(plan.child().output())}
    out = []
    for ne in scala_iter(plan.projectList()):
        e = ne.child() if ne.getClass().getSimpleName() == "Alias" else ne
        out.append([str(ne.name()), project_expr(e, ids)])
    return [out]


_ARITH_EXPRS = ["a + b", "a - b", "a * b", "a / b", "a % b", "-a", "i + j", "i * j", "i % j", "-i", "a * 2",
                "a / 3", "i - 7", "x + y", "x - y", "x * y", "x / y", "x % y", "-x", "x * 0.5", "x % 2.5",
                "a + x", "(a + b) % (i + 1)"]


def _arith_table(rng, n: int, extremes: bool) -> pa.Table:
    big = [np.iinfo(np.int64).min, np.iinfo(np.int64).max, -1, 0, 1, 2**53 + 1] if extremes else [-1, 0, 1]
    a = rng.choice(np.array(big + list(rng.integers(-10**6, 10**6, 20)), np.int64), n)
    b = rng.choice(np.array(big + list(rng.integers(-100, 100, 20)), np.int64), n)
    i = rng.integers(-2**31 if extremes else -999, 2**31 if extremes else 999, n).astype(np.int32)
    j = rng.integers(-50, 50, n).astype(np.int32)
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e308, 5e-324]
    x = np.where(rng.random(n) < 0.3, rng.choice(specials, n), rng.normal(0, 100, n))
    y = np.where(rng.random(n) < 0.3, rng.choice(specials, n), rng.normal(0, 3, n))
    if not extremes:  # no zero divisor either: what ANSI mode runs without failing
        b, j = np.where(b == 0, 3, b), np.where(j == 0, 3, j).astype(np.int32)
        y = np.where(y == 0, 2.0, y)
    nulls = lambda: rng.random(n) < 0.1  # noqa: E731
    return pa.table({"a": pa.array(a, mask=nulls()), "b": pa.array(b, mask=nulls()), "i": pa.array(i, mask=nulls()),
                     "j": pa.array(j, mask=nulls()), "x": pa.array(x, mask=nulls()), "y": pa.array(y, mask=nulls())})


_DECIMAL_EXPRS = ["a * 0.908", "0.908 * a > 450", "a * 0.908 > 450.5", "a + 1.25", "i * 0.5 - 0.25",
                  "a * 0.908 * 1.1", "a * 1.5 = 3", "-(a * 0.5)", "d * 2", "d + a", "d - 0.001", "d * d",
                  "d >= 1.5", "-d", "d * 0.908 > i"]


def test_decimal_arithmetic_equals_sparks(spark):
    """SQL's decimal literals (``price * 0.908``, Nexmark q1's): Spark's
    casts of integers and decimals to wider decimals, ``+ - *`` and
    negation of decimals and comparisons of them, translated from Spark's
    plan and evaluated by gpuwm — Spark's types and values (the integers'
    extremes and nulls among them). Where Spark rounds (a result over 38
    digits, a division) or a cast may overflow or round (a narrowing one, to
    a double), the expression is not gpuwm's: refused by name."""
    from decimal import Decimal

    from gpuwm.spark.catalyst.expressions import Untranslatable

    rng = np.random.default_rng(4)
    t = _arith_table(rng, 2_000, extremes=True).select(["a", "i", "x"])
    cents = rng.integers(-10**9, 10**9, t.num_rows)
    d = pa.array([Decimal(int(c)).scaleb(-2) for c in cents], pa.decimal128(10, 2), mask=rng.random(t.num_rows) < 0.1)
    t = t.append_column("d", d)
    df = spark.createDataFrame(t).selectExpr(*[f"{e} AS c{n}" for n, e in enumerate(_DECIMAL_EXPRS)])
    want, got = df.toArrow(), evaluate(_as_steps(df), t)
    for n, e in enumerate(_DECIMAL_EXPRS):
        assert got.column(n).type == want.column(n).type, e
        assert got.column(n).to_pylist() == want.column(n).to_pylist(), e
    assert sum(v is not None for v in got.column(0).to_pylist()) > 1500  # (nulls in, nulls out)
    for e in ["a * 0.908 > x", "d / 2", "cast(a AS decimal(5,1))", "cast(d AS decimal(12,1))",
              "cast(a AS decimal(30,0)) * cast(a AS decimal(30,0))", "try_add(d, d)"]:
        with pytest.raises(Untranslatable):
            _as_steps(spark.createDataFrame(t).selectExpr(f"{e} AS c"))


def _reprs(col: pa.ChunkedArray) -> list[str]:
    return [repr(v) for v in col.to_pylist()]  # -0.0, nan and None told apart


@pytest.mark.parametrize("ansi", [False, True])
def test_arithmetic_equals_sparks(spark, ansi):
    """``+ - * / %`` and negation of integer and double columns (nulls,
    the integers' extremes, NaN, infinities, -0.0, a zero divisor, literals
    Spark casts) translated from Spark's plan and evaluated by gpuwm: Spark's
    values, bit for bit, with ANSI off (overflow wraps, a zero divisor gives
    null) and on (where nothing fails); with ANSI on, an overflow and a zero
    divisor fail in gpuwm as in Spark."""
    from gpuwm.project import SparkArithmeticError

    rng = np.random.default_rng(3)
    spark.conf.set("spark.sql.ansi.enabled", str(ansi).lower())
    try:
        t = _arith_table(rng, 2_000, extremes=not ansi)
        df = spark.createDataFrame(t).selectExpr(*[f"{e} AS c{n}" for n, e in enumerate(_ARITH_EXPRS)])
        want, got = df.toArrow(), evaluate(_as_steps(df), t)
        assert got.column_names == want.column_names
        for n, e in enumerate(_ARITH_EXPRS):
            assert got.column(n).type == want.column(n).type, e
            assert _reprs(got.column(n)) == _reprs(want.column(n)), e
        if not ansi:
            return
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import ArithmeticException

        for e, want, data in (("a + b", "ARITHMETIC_OVERFLOW", {"a": [1, 2**63 - 1], "b": [1, 1]}),
                              ("a * b", "ARITHMETIC_OVERFLOW", {"a": [2**62], "b": [4]}),
                              ("-a", "ARITHMETIC_OVERFLOW", {"a": [-2**63], "b": [0]}),
                              ("a % b", remainder_by_zero(), {"a": [5, 1], "b": [2, 0]}),
                              ("x / y", "DIVIDE_BY_ZERO", {"x": [1.0, 1.0], "y": [2.0, -0.0]})):
            bad = pa.table(data)
            df = spark.createDataFrame(bad).selectExpr(f"{e} AS c")
            with pytest.raises((ArithmeticException, Py4JJavaError), match=f"^.*{want}"):
                df.toArrow()
            with pytest.raises(SparkArithmeticError, match=f"^\\[{want}\\]"):
                evaluate(_as_steps(df), bad)
    finally:
        spark.conf.unset("spark.sql.ansi.enabled")
