"""Plan fixtures: queries translated, never run (``tests/plans/``).

Each fixture is one file, a query as users write it — Spark SQL
(``*.sql``) or PySpark (``*.py``) — over the streaming views below, and a
header of comments (``--`` or ``#``) saying what gpuwm makes of it:

- ``fail: CODE`` — refused, with that code (:data:`gpuwm.spark.front.translation.CODES`);
- ``expect:`` — translated: the lines of ``explain`` that follow (each
  ``--   `` / ``#   ``), then the stages as gpuwm's builder has them
  (``gpuwm run --dry-run``'s ``stage`` lines) and the sink's projection
  steps; the paths of the views' folders as ``<in>``;
- ``mode: update`` / ``complete`` — the output mode the query is
  planned in (append by default);
- ``spark: 4.2-`` (or ``4.0-4.1``, ``4.3``) — the Spark lines the header
  holds on (:func:`gpuwm.spark.jvm.versions.within`); on the others the
  fixture is not collected (all lines by default). A query whose answer
  changed with Spark's version has a fixture per range.

A ``.py`` fixture is run with the views, ``spark``, ``F`` and ``Window``
in scope and defines ``df``; it may define ``write(writer)`` (a
refusal of gpuwm's writer, or None), ``settings`` (``accelerate``'s
keywords) and ``rules`` (rules registered for the fixture alone, as a
package outside gpuwm registers its own). ``GPUWM_PLANS=record pytest
tests/test_plans.py`` rewrites each fixture's header from what gpuwm
makes of it now (read the diff before committing it).

The oracle tests (``test_accelerate*.py``) run queries against Spark; a
fixture checks in well under a second what gpuwm translates a query into,
or which code refuses it, and every rule and every code has one
(:func:`test_every_code_and_rule_has_a_fixture`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import pytest

from gpuwm.spark import local_session
from gpuwm.spark.jvm import versions

from .test_spark import TEST_CONF

PLANS = Path(__file__).parent / "plans"
ALL = sorted(p for p in PLANS.iterdir() if p.suffix in (".sql", ".py"))
#: the streaming views every fixture sees: Nexmark's three streams (gpuwm's generator's columns) and a small
#: stream of (ts, k, price) — each watermarked — and ``raw``, that small stream without a watermark
VIEWS = {
    "bid": ("auction bigint, bidder bigint, price bigint, date_time timestamp", "date_time", "4 seconds"),
    "auction": ("id bigint, item_name string, initial_bid bigint, reserve bigint, date_time timestamp, "
                "expires timestamp, seller bigint, category bigint", "date_time", "4 seconds"),
    "person": ("id bigint, name string, email string, credit_card string, city string, state string, "
               "date_time timestamp", "date_time", "4 seconds"),
    "s": ("ts timestamp, k bigint, price bigint", "ts", "10 seconds"),
    "raw": ("ts timestamp, k bigint, price bigint", None, None),
}
#: codes no query is known to reach: guards that say in one line what would otherwise be a JVM trace or a wrong
#: answer — Spark's own calls failing (its optimizer on the query's plan, its derivation of a join's output
#: watermark), a filter the optimizer places below the watermark over columns the analyzed plan lacks, a watermark
#: on a non-timestamp (Spark's analyzer refuses it first), the builder refusing stages translation made, gpuwm's
#: output types differing from Spark's, and a window's time column two unqualified columns share (Spark's analyzer
#: refuses the reference first); and the running Spark outside gpuwm's lines, which a fixture on the running
#: Spark cannot be (``test_versions.py`` plans a query as if on Spark 3.5)
GUARDS = {"OPTIMIZER_FAILED", "JOIN_WATERMARK", "PUSHED_FILTER", "WATERMARK_TYPE", "STAGES", "OUTPUT_COLUMNS",
          "WINDOW_TIME_AMBIGUOUS", "SPARK_VERSION"}


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    spark = local_session(app="gpuwm-plans", cores=1, conf=TEST_CONF)
    root = tmp_path_factory.mktemp("plans")
    frames = {}
    for name, (schema, ts, delay) in VIEWS.items():
        (root / name).mkdir()
        df = spark.readStream.schema(schema).parquet(str(root / name))
        if ts is not None:
            df = df.withWatermark(ts, delay)
        df.createOrReplaceTempView(name)
        frames[name] = df
    yield spark, frames, str(root)
    spark.stop()


def _header(path: Path) -> tuple[dict, list[str], str]:
    """A fixture's header (``fail``, ``mode``, the ``expect`` lines) and its body."""
    mark = "--" if path.suffix == ".sql" else "#"
    head: dict = {"expect": []}
    lines = path.read_text().splitlines()
    k = 0
    while k < len(lines) and lines[k].startswith(mark):
        text = lines[k][len(mark):]
        if text.startswith("   ") and "expect" in head and head.get("_in_expect"):
            head["expect"].append(text[3:])
        elif text.strip().startswith(("fail:", "mode:", "spark:")):
            key, value = text.strip().split(":", 1)
            head[key] = value.strip()
        elif text.strip() == "expect:":
            head["_in_expect"] = True
        k += 1
    head.pop("_in_expect", None)
    return head, lines[:k], "\n".join(lines[k:])


#: the fixtures whose header holds on the running Spark
FIXTURES = [p for p in ALL if versions.within(_header(p)[0].get("spark", "-"))]


def _planned(path: Path, spark, frames: dict, root: str, tmp: str) -> tuple[str, list[str]]:
    """What gpuwm makes of the fixture: ``("fail", [code])`` or ``("expect", explain's lines)``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from gpuwm.spark.front.accelerate import Accelerated
    from gpuwm.spark.front.registry import RULES, Rule
    from gpuwm.spark.front.translation import refusal

    head, _, body = _header(path)
    scope: dict = {"spark": spark, "F": F, "Window": Window, **frames}
    if path.suffix == ".sql":
        scope["df"] = spark.sql(body)
    else:
        exec(compile(body, str(path), "exec"), scope)
    saved = dict(RULES)
    try:
        for kind, fn in scope.get("rules", {}).items():
            RULES[kind] = Rule((kind,), fn)
        with contextlib.redirect_stderr(io.StringIO()):  # (the fallback's warning line: the code says it)
            acc = Accelerated(scope["df"], **scope.get("settings", {}))
        r = acc.refused
        if r is None and "write" in scope:
            r = scope["write"](acc.writeStream)
        if r is None:
            try:
                acc.pipeline(f"{tmp}/ck", mode=head.get("mode", "append"))
            except Exception as e:  # noqa: BLE001  (a refusal of the builder; gpuwm's own errors are raised)
                r = refusal(e)
        if r is not None:
            return "fail", [r.code]
        text = acc.explained(f"{tmp}/ck")
        built = acc.pipeline(f"{tmp}/ck", mode=head.get("mode", "append"))
        # the stages lowered to gpuwm's builder, and the sink's projection: what the query runs
        lowered = [line for line in built.explain().splitlines() if line.startswith(("stage ", "watermark", "  "))]
        lowered.append(f"sink steps   {json.dumps(built._output)}")
    finally:
        RULES.clear()
        RULES.update(saved)
    return "expect", [line.replace(root, "<in>") for line in text.splitlines() + lowered]


def _record(path: Path, kind: str, got: list[str]) -> None:
    mark = "--" if path.suffix == ".sql" else "#"
    head, lines, body = _header(path)
    keep = [x for x in lines if not x[len(mark):].strip().startswith(("fail:", "expect:"))
            and not x[len(mark):].startswith("   ")]
    new = keep + ([f"{mark} fail: {got[0]}"] if kind == "fail" else [f"{mark} expect:"] + [f"{mark}   {x}" for x in got])
    path.write_text("\n".join(new) + "\n" + body.rstrip("\n") + "\n")


@pytest.mark.spark
@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_a_fixture_plans_as_its_header_says(views, tmp_path, path):
    spark, frames, root = views
    kind, got = _planned(path, spark, frames, root, str(tmp_path))
    if os.environ.get("GPUWM_PLANS") == "record":
        _record(path, kind, got)
        return
    head, _, _ = _header(path)
    if kind == "fail":
        assert head.get("fail") == got[0], f"{path.name}: refused with {got[0]}, the header says {head}"
    else:
        assert "fail" not in head, f"{path.name}: translated, the header says it fails with {head['fail']}:\n" + \
            "\n".join(got)
        assert got == head["expect"], f"{path.name}:\n" + "\n".join(got)


def test_every_code_and_rule_has_a_fixture():
    """Each refusal code is some fixture's ``fail`` (but the guards no query
    is known to reach, :data:`GUARDS`), and each registered rule's node
    kind some translated fixture's."""
    from gpuwm.spark.front import rules  # noqa: F401  (gpuwm's rules, registered on import)
    from gpuwm.spark.front.registry import RULES
    from gpuwm.spark.front.translation import CODES

    heads = [_header(p)[0] for p in FIXTURES]
    failed = {h["fail"] for h in heads if "fail" in h}
    assert failed <= set(CODES), sorted(failed - set(CODES))
    assert set(CODES) - GUARDS <= failed, sorted(set(CODES) - GUARDS - failed)
    # the rules' explain lines: an aggregation's, a dedup's, a join's, a top-N's
    shown = "\n".join(line for h in heads for line in h["expect"])
    words = {"Aggregate": "aggregate  ", "Deduplicate": "dedup      ", "DeduplicateWithinWatermark": "dedup      ",
             "Join": "join       ", "Window": "top-n      "}
    assert set(RULES) == set(words), sorted(RULES)
    assert all(re.search(rf"^  {w}", shown, re.M) for w in words.values()), shown
    assert len(FIXTURES) >= 60, len(FIXTURES)


def test_the_front_readme_lists_every_code_once():
    from gpuwm.spark.front.translation import CODES

    text = (Path(__file__).parents[1] / "gpuwm/spark/front/README.md").read_text()
    listed = re.findall(r"^\| `([A-Z_]+)` \| (.+) \|$", text, re.M)
    assert [c for c, _ in listed] == list(CODES)
    assert all(CODES[c] == d for c, d in listed)
