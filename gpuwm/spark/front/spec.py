"""A pipeline described in a JSON file, so a cluster job needs no Python code.

Example (``gpuwm run q7.json`` or ``spark-submit ... gpuwm/spark/app.py q7.json``)::

    {
      "source": {"format": "nexmark", "options": {"totalEvents": 1000000, "splits": 4}},
      "checkpoint": "ck/q7",
      "watermark": {"column": "date_time", "delay": "4 seconds", "split": "split", "profile": "spark"},
      "window": {"tumble": "10 seconds", "by": ["auction"],
                 "aggs": {"bids": ["*", "count"], "max_price": ["price", "max"]}},
      "sink": {"parquet": "out/q7"},
      "trigger": {"processingTime": "0 seconds"},
      "vnodes": 4
    }

``source``: ``format`` is ``nexmark``, ``kafka`` (``gpuwm run`` adds Spark's
connector, ``spark-submit`` needs ``--packages
org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1``; its ``partition``
column is the natural split) or any file format with a ``schema`` and
``path``; ``options`` are passed to ``readStream``; ``select`` (optional)
is a list of SQL expressions applied to the stream, or a list of such
lists applied in turn (e.g. to parse Kafka values, then name the fields)::

    "source": {"format": "kafka",
               "options": {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "bids",
                           "startingOffsets": "earliest"},
               "select": [["from_json(CAST(value AS STRING), 'ts BIGINT, k BIGINT, price BIGINT') AS e",
                           "partition"],
                          ["timestamp_millis(e.ts) AS ts", "e.k AS k", "e.price AS price", "partition"]]},
    "watermark": {"column": "ts", "delay": "3 seconds", "split": "partition"}

With ``read`` ``auto`` (the default) gpuwm's tasks fetch each batch's
Kafka offset ranges, as Spark planned them, and evaluate such a ``select``
themselves (:mod:`gpuwm.spark.driver.kafka`); a ``select`` they cannot evaluate
keeps Spark's reader, and ``--dry-run`` says why. Brokers that do not
answer and a ``subscribe``/``assign`` topic that does not exist are
refused in one line before the query starts (:func:`gpuwm.spark.driver.kafka.probe`).

``watermark``: ``column``, ``delay`` and the filter's options (``split``,
``profile``, ``emit``, ``idle_timeout``, ``max_drift``, knobs), and a
strategy: ``"expr": sql`` (each row's watermark candidate as a Spark SQL
expression: ``"CASE WHEN source = 'batch' THEN NULL ELSE ts - INTERVAL 5
SECONDS END"``; one input), ``"candidate": col`` (the same from a column,
e.g. one ``select`` computed) or ``"punctuated": flag`` (only rows whose
boolean column is true advance it); ``"emit": "on-periodic", "every": N |
"10 seconds"`` for periodic emission; see :class:`gpuwm.WatermarkFilter`.

Operators: ``stages``, a list of stages, each one of

- ``{"window": {"tumble": size | "hop": size, "slide": s | "session": gap,
  "by": [...], "aggs": {out: [column, fn]}, "emit": ..., "on": column}}``
  (``fn``: count, sum, min, max, mean, first, last — first / last the value
  of the window's first / last row as it arrived, not over sessions —,
  count_distinct, sum_distinct, mean_distinct — exact, tumbling and hopping
  windows, not beside first / last, not on update;
  ``on``: the window's column, default the event-time column of the
  stage's input — the watermark's column, ``window_time`` after a window),
- ``{"sort": {"key": [...]}}`` (the last stage),
- ``{"dedup": {"key": [...]}}`` (Spark's ``dropDuplicatesWithinWatermark``;
  ``"forever": true``: Spark's ``dropDuplicates`` without the event time
  among the keys, every key held forever),
- ``{"over": {"by": [...], "funcs": {out: ["lag", col, n] | ["lead", col, n] |
  ["row_number"] | ["sum" | "count" | "min" | "max", col]}}}`` right after a
  sort (an over-window on the ordered stream),

- ``{"topn": {"window": size, "by": [...], "order": ["-price", "ts"], "n": 3,
  "fn": "row_number" | "rank" | "dense_rank", "output": "rn"}}`` — the rows
  ranked ``<= n`` per (tumbling window of the event time, keys), emitted
  when the window closes (after a window stage, no ``window``: its
  windows; after a join, ``"until": col`` instead: a partition of equal
  keys and ``col`` closes once the watermark reaches ``col``, a column
  every row's event time is at or below — Nexmark q9's ``expires``; or
  ``"ttl": duration`` instead, no window: a partition of equal keys closes
  once the watermark passes its latest event time by ``duration`` —
  Nexmark q18, q19),
- ``{"join": {"left": name, "right": name, "on": [[left col, right col], ...],
  "between": [t1, t2, lower, upper] | "window": {"tumble": size} | {"hop":
  size, "slide": s}, "how": "inner" | "left" | "right" | "full", "where":
  [[col, op, col], ...], "output_behind": duration}}`` (a bound null: none
  on that side, inner only; ``where``: comparisons of a column of each input
  every pair passes; ``output_behind``: how far the output watermark trails
  the input's, where Spark's is not the least of the state watermarks —
  a bound by an aggregation's ``window.end``, Nexmark q7's) as the
  first stage of a spec with ``inputs`` instead of ``source`` and
  ``watermark``: ``{"inputs": {name: {"source": {...}, "watermark":
  {...}}, ...}}`` (see ``Pipeline.join``), or ``{"union": {}}`` there:
  every input's rows, inputs with one schema (see ``Pipeline.union``),

- ``{"select": {"columns": ["k", ["t", "window_time"], ...]}}`` — columns
  kept, a ``[new name, column]`` pair renamed (the event-time column kept),
- ``{"project": {"steps": [{"where": expr}, [["n2", expr], ...]]}}`` — rows
  filtered and columns computed beside the stream's (:mod:`gpuwm.project`'s
  expressions; what ``accelerate`` makes of Spark's ``filter`` and
  ``withColumn`` between two operators),

and, in a spec with ``inputs`` (one or more), ``"name"`` and ``"input"``
beside a stage's kind: a graph of stages (``{"window": {...}, "name":
"maxp", "input": "bids"}``; a join's ``left`` / ``right`` may name a stage;
``input`` defaults to the stage before) — see ``Pipeline.stage``,

or any stage kind a spec class registers (:mod:`gpuwm.operator`: each
parses its own options); for one stage, its kind at the top level
(``"window": {...}``); none: filter only. Two chained windows (the second over the first's
``window_time``)::

    "stages": [
      {"window": {"tumble": "5 seconds", "by": ["k"], "aggs": {"n": ["*", "count"]}}},
      {"window": {"tumble": "10 seconds", "on": "window_time",
                  "aggs": {"max_n": ["n", "max"], "total": ["n", "sum"], "groups": ["*", "count"]}}}
    ]

``"output"``: the sink's projection of the last stage's rows (:mod:`gpuwm.project`
steps), as ``explain(df, spec=True)`` writes a query's.

Or the operators as Spark SQL: ``"sql"`` over ``"sources"``, each a
``source`` object as above named as the query's table, with Spark's
``withWatermark(column, delay)`` as its ``"watermark"``; Spark parses and
analyzes the query, :func:`gpuwm.spark.front.translate.translate` translates its plan
(what it cannot run, Spark runs as written with one warning line, or with
``"fallback": "error"`` it is refused in one line; ``--dry-run`` prints the
split); ``"profile"`` defaults to ``spark``; ``"state_ttl"`` (e.g. ``"1
hour"``) lets a rank with no window among its partition keys run (Nexmark
q18, q19: each partition closes once the watermark passes its latest row
by that long). ``stages``, ``source``,
``watermark`` and ``late`` do not go with it::

    {
      "sources": {"bids": {"format": "nexmark", "options": {"eventsPerSecond": 10000},
                           "watermark": {"column": "date_time", "delay": "4 seconds"}}},
      "sql": "SELECT window(date_time, '10 seconds') AS window, auction, count(*) AS bids
              FROM bids GROUP BY window(date_time, '10 seconds'), auction",
      "checkpoint": "ck/q7sql", "sink": {"parquet": "out/q7sql"}, "vnodes": 2
    }

``sink``:
``{"parquet": path}``, ``{"console": rows}``, ``{"delta": path}`` (a Delta
table, each batch committed once: ``format("delta")``'s sink) or
``{"kafka": {"topic": ..., "kafka.bootstrap.servers": ..., ...}}`` (Spark's
Kafka sink options; exactly once: ``format("kafka")``'s sink; the rows need
a ``value`` column, and may have ``key``, ``topic``, ``partition`` and
``headers`` — a ``"sql"`` spec's SELECT makes them). ``late`` (optional):
``{"parquet": path}`` keeps every row dropped as late aside, with its
``late_reason`` (``Pipeline.late_rows_to``). ``read`` (optional):
``auto``, ``direct`` or ``spark`` — see ``Pipeline(read=...)`` (default:
Spark conf ``spark.gpuwm.read``, else ``auto``). ``conf`` (optional): Spark
conf for the session ``gpuwm run`` starts, e.g. S3's settings for an
``s3a://`` checkpoint or sink (``{"spark.hadoop.fs.s3a.endpoint": ...}``;
Hadoop's S3A is then added to ``spark.jars.packages``); with
``spark-submit``, give them as ``--conf`` instead.
"""

from __future__ import annotations

import json
import re

from ...errors import ConfigError, SchemaError, unknown_keys
from ...operator import stage_class, stage_kinds

_SINKS = ("parquet", "console", "delta", "kafka")
_TOP = {"source", "checkpoint", "watermark", "stages", "sink", "trigger", "vnodes", "backend", "read", "late",
        "inputs", "conf", "sql", "sources", "profile", "fallback", "state_ttl", "output"}
#: keys only a ``sql`` spec takes, and those it does not (its query says what they would)
_SQL_ONLY = ("sql", "sources", "profile", "fallback", "state_ttl")
_NOT_WITH_SQL = ("source", "watermark", "inputs", "stages", "late", "output")


def load_spec(path: str) -> dict:
    try:
        with open(path) as fh:
            spec = json.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"pipeline spec {path!r} not found") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"pipeline spec {path!r} is not valid JSON: {e}") from None
    kinds = stage_kinds()
    if not isinstance(spec, dict):
        raise ConfigError(f"pipeline spec {path!r} must be a JSON object {{\"source\": ..., ...}}")
    unknown = set(spec) - _TOP - set(kinds)
    if unknown:
        raise ConfigError(unknown_keys(f"pipeline spec {path!r}", unknown, _TOP | set(kinds)))
    if "sql" in spec or "sources" in spec:
        return _load_sql_spec(path, spec)
    only = [k for k in _SQL_ONLY if k in spec]
    if only:
        raise ConfigError(f"pipeline spec {path!r}: {only} belong to a spec with \"sql\" and \"sources\"")
    if "inputs" in spec:
        both = [k for k in ("source", "watermark") if k in spec]
        if both:
            raise ConfigError(f"pipeline spec {path!r}: with 'inputs', each input has its own 'source' and "
                              f"'watermark'; drop the top-level {both}")
        inputs = spec["inputs"]
        if not (isinstance(inputs, dict) and inputs):
            raise ConfigError(f"pipeline spec {path!r}: 'inputs' must name one or more inputs, "
                              f"{{name: {{\"source\": {{...}}, \"watermark\": {{...}}}}, ...}}, got {inputs!r}")
        for name, inp in inputs.items():
            if not (isinstance(inp, dict) and set(inp) == {"source", "watermark"}):
                raise ConfigError(f"pipeline spec {path!r}: input {name!r} must be {{\"source\": {{...}}, "
                                  f"\"watermark\": {{...}}}}, got {inp!r}")
    required = ("checkpoint", "sink") if "inputs" in spec else ("source", "checkpoint", "watermark", "sink")
    for k in required:
        if k not in spec:
            raise ConfigError(f"pipeline spec {path!r} needs {k!r}")
    given = [k for k in spec if k in kinds or k == "stages"]
    if len(given) > 1:
        raise ConfigError(f"pipeline spec {path!r}: give one stage at the top level or 'stages' (a list of "
                          f"stages), got {given}")
    if "stages" in spec and not (isinstance(spec["stages"], list) and spec["stages"]):
        raise ConfigError(f"pipeline spec {path!r}: 'stages' must be a non-empty list of stages, "
                          f"e.g. [{{\"window\": {{...}}}}, {{\"window\": {{...}}}}]")
    return _without_problems(path, spec)


def _without_problems(path: str, spec: dict) -> dict:
    """``spec``, or every one of its :func:`problems` in one error."""
    found = problems(spec)
    if found:
        raise ConfigError(f"pipeline spec {path!r}: {len(found)} problem{'s' if len(found) > 1 else ''}: "
                          + "; ".join(found))
    return spec


def _load_sql_spec(path: str, spec: dict) -> dict:
    """A spec whose query is Spark SQL over named ``sources``."""
    for k in ("sql", "sources", "checkpoint", "sink"):
        if k not in spec:
            raise ConfigError(f"pipeline spec {path!r}: a spec with \"sql\" needs {k!r}"
                              + (": {name: {\"format\": ..., \"watermark\": {...}}, ...}" if k == "sources" else ""))
    other = [k for k in spec if k in _NOT_WITH_SQL or k in stage_kinds()]
    if other:
        raise ConfigError(f"pipeline spec {path!r}: a spec with \"sql\" takes its operators from the query and each "
                          f"source's watermark from \"sources\"; drop {other}")
    return _without_problems(path, spec)


_TRIGGERS = {"processingTime": str, "availableNow": bool, "once": bool}
#: windows one row may fall into (a hop's size / slide): more are refused before Spark starts
MAX_WINDOWS_PER_ROW = 1_000


def problems(spec: dict) -> list[str]:
    """Every problem of a spec that can be seen without Spark — keys,
    types, intervals, enums, the stages' options (aggregates, window
    sizes), a hop whose rows would each fall into more than
    :data:`MAX_WINDOWS_PER_ROW` windows —, each ``$.json.path: what``.
    Column names are checked once Spark gives the source's schema."""
    from ...errors import near_miss

    out: list[str] = []

    def bad(path: str, msg: str) -> None:
        out.append(f"{path}: {msg}")

    def keys(path: str, obj: dict, allowed) -> None:
        for k in sorted(set(obj) - set(allowed), key=str):
            bad(f"{path}.{k}", f"unknown key{near_miss(k, allowed)}; expected one of {sorted(allowed)}")

    v = spec.get("vnodes")
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        bad("$.vnodes", f"a whole number >= 1 (the state partitions), got {v!r}")
    for k, choices in (("backend", ("auto", "cpu", "gpu")), ("read", ("auto", "direct", "spark"))):
        if k in spec and spec[k] is not None and spec[k] not in choices:
            bad(f"$.{k}", f"one of {list(choices)}, got {spec[k]!r}{near_miss(spec[k], choices)}")
    ck = spec.get("checkpoint")
    if not (isinstance(ck, str) and ck):
        bad("$.checkpoint", f"a path or URI, got {ck!r}")
    trig = spec.get("trigger")
    if trig is not None:
        if not (isinstance(trig, dict) and len(trig) == 1):
            bad("$.trigger", f"one of {{\"processingTime\": \"10 seconds\"}}, {{\"availableNow\": true}}, "
                             f"{{\"once\": true}}; got {trig!r}")
        else:
            keys("$.trigger", trig, _TRIGGERS)
            (k, val), = trig.items()
            if k in _TRIGGERS and not isinstance(val, _TRIGGERS[k]):  # (Spark parses the interval itself)
                bad(f"$.trigger.{k}", f"a {_TRIGGERS[k].__name__}, got {val!r}")
    sink = spec.get("sink")
    if not (isinstance(sink, dict) and len(sink) == 1 and next(iter(sink)) in _SINKS):
        near = near_miss(next(iter(sink)), _SINKS) if isinstance(sink, dict) and sink else ""
        bad("$.sink", f"{{\"parquet\": path}}, {{\"console\": rows}}, {{\"delta\": path}} or {{\"kafka\": "
                      f"{{\"topic\": ..., \"kafka.bootstrap.servers\": ...}}}}, got {sink!r}{near}")
    elif next(iter(sink)) in ("parquet", "delta") and not (isinstance(sink[next(iter(sink))], str)
                                                          and sink[next(iter(sink))]):
        bad(f"$.sink.{next(iter(sink))}", f"a path or URI, got {sink[next(iter(sink))]!r}")
    elif "kafka" in sink and not (isinstance(sink["kafka"], dict) and "kafka.bootstrap.servers" in sink["kafka"]):
        bad("$.sink.kafka", f"Spark's Kafka sink options, with \"kafka.bootstrap.servers\", got {sink['kafka']!r}")
    elif "kafka" in sink and "sql" not in spec:
        bad("$.sink.kafka", "a Kafka sink writes Spark's Kafka sink columns (value; key, topic, partition, "
                            "headers): write the query as \"sql\", its SELECT naming them")
    elif "console" in sink and (isinstance(sink["console"], bool) and not sink["console"]
                                or not isinstance(sink["console"], (bool, int)) or sink["console"] < 0):
        bad("$.sink.console", f"the rows to show per batch, got {sink['console']!r}")
    late = spec.get("late")
    if late is not None and not (isinstance(late, dict) and set(late) == {"parquet"}
                                 and isinstance(late["parquet"], str)):
        bad("$.late", f"{{\"parquet\": path}} (rows dropped as late, kept aside), got {late!r}")
    if "sql" in spec:
        _sql_problems(bad, keys, spec)
    elif "inputs" in spec:
        for name, inp in spec["inputs"].items():
            _source_problems(bad, keys, f"$.inputs.{name}.source", inp.get("source"))
            _watermark_spec(bad, f"$.inputs.{name}.watermark", inp.get("watermark"))
    else:
        _source_problems(bad, keys, "$.source", spec.get("source"))
        wm = _watermark_spec(bad, "$.watermark", spec.get("watermark"))
        _stage_problems(bad, spec, wm)
    return out


def _sql_problems(bad, keys, spec: dict) -> None:
    """A ``sql`` spec's query text, settings and ``sources`` (each a
    source with an optional ``watermark``: Spark's ``withWatermark(column,
    delay)``); Spark's parser and analyzer check the query itself."""
    from ...errors import near_miss
    from ...profiles import PROFILES
    from .accelerate import FALLBACKS

    if not (isinstance(spec["sql"], str) and spec["sql"].strip()):
        bad("$.sql", f"a Spark SQL query over the sources' names, got {spec['sql']!r}")
    if "state_ttl" in spec and not (isinstance(spec["state_ttl"], str) and spec["state_ttl"].strip()):
        bad("$.state_ttl", f"a duration, e.g. \"1 hour\", got {spec['state_ttl']!r}")
    for k, choices in (("profile", tuple(sorted(PROFILES))), ("fallback", FALLBACKS)):
        if k in spec and spec[k] not in choices:
            bad(f"$.{k}", f"one of {list(choices)}, got {spec[k]!r}{near_miss(str(spec[k]), choices)}")
    sources = spec["sources"]
    if not (isinstance(sources, dict) and sources):
        bad("$.sources", f"{{name: {{\"format\": ..., \"watermark\": {{\"column\": ..., \"delay\": ...}}}}, ...}}, "
                         f"got {sources!r}")
        return
    for name, src in sources.items():
        path = f"$.sources.{name}"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
            bad(path, "a source's name is the table name the query reads: letters, digits and _")
        _source_problems(bad, keys, path, src, also=("watermark",))
        w = src.get("watermark") if isinstance(src, dict) else None
        if w is None:
            continue
        if isinstance(w, dict):
            keys(f"{path}.watermark", w, ("column", "delay"))
        if not (isinstance(w, dict) and isinstance(w.get("delay"), str)):
            bad(f"{path}.watermark", "Spark's withWatermark: {\"column\": ..., \"delay\": \"10 seconds\"}, "
                                     f"got {w!r}")
        else:
            _watermark_spec(bad, f"{path}.watermark", {"column": w.get("column"), "delay": w["delay"]})


def _source_problems(bad, keys, path: str, src, also: tuple = ()) -> None:
    from ...errors import near_miss

    if not isinstance(src, dict):
        bad(path, f"{{\"format\": ..., \"options\": {{...}}, ...}}, got {src!r}")
        return
    keys(path, src, ("format", "options", "select", "schema", "path") + also)
    fmt, opts = src.get("format"), src.get("options", {})
    if not (isinstance(fmt, str) and fmt):
        bad(f"{path}.format", f"nexmark, kafka or a file format (parquet, json, csv, ...), got {fmt!r}")
    if not isinstance(opts, dict):
        bad(f"{path}.options", f"an object of the source's options, got {opts!r}")
    elif fmt == "nexmark":
        from ...nexmark import GENERATORS
        from ..io.nexmark import OPTIONS

        lower = {k.lower(): k for k in OPTIONS}
        for k, val in opts.items():
            name = lower.get(str(k).lower())
            if name is None:
                bad(f"{path}.options.{k}", f"not a Nexmark option{near_miss(k, OPTIONS)}; they are {sorted(OPTIONS)}")
                continue
            least = OPTIONS[name]
            if name == "kind" and str(val).lower() not in GENERATORS:
                bad(f"{path}.options.{k}", f"one of {sorted(GENERATORS)}, got {val!r}")
            if least is None:
                continue
            try:
                num = float(val) if name == "outOfOrderFraction" else int(val)
            except (TypeError, ValueError):
                num = None
            if num is None or isinstance(val, bool) or num < least or (name == "outOfOrderFraction" and num > 1):
                bad(f"{path}.options.{k}", "a fraction in [0, 1]" if name == "outOfOrderFraction" else
                    f"a whole number >= {least}, got {val!r}")
    sel = src.get("select")
    if sel is not None:
        steps = sel if isinstance(sel, list) and sel and all(isinstance(x, list) for x in sel) else [sel]
        if not all(isinstance(st, list) and st and all(isinstance(x, str) for x in st) for st in steps):
            bad(f"{path}.select", f"a list of SQL expressions, or a list of such lists applied in turn; got {sel!r}")
    for k in ("schema", "path"):
        if k in src and not isinstance(src[k], str):
            bad(f"{path}.{k}", f"a string, got {src[k]!r}")


def _watermark_spec(bad, path: str, w):
    """The watermark's spec, made as ``Pipeline.watermark`` makes it
    (:func:`~gpuwm.spark.front.pipeline.watermark_spec`: delay, profile, knobs,
    idle timeout checked), or None."""
    from .pipeline import watermark_spec

    if not (isinstance(w, dict) and "column" in w and "delay" in w):
        bad(path, f"{{\"column\": ..., \"delay\": ..., ...}}, got {w!r}")
        return None
    if not isinstance(w["column"], str):
        bad(f"{path}.column", f"a column name, got {w['column']!r}")
        return None
    try:
        return watermark_spec(w["column"], w["delay"],
                              **{k: val for k, val in w.items() if k not in ("column", "delay")})
    except (ConfigError, TypeError, ValueError) as e:
        bad(path, str(e))
        return None


def _stage_problems(bad, spec: dict, wm) -> None:
    """Each stage parsed as ``gpuwm run`` will parse it (its spec class's
    ``from_json``), on the event-time column the stage before gives it."""
    from ...operator import StageContext, stage_from_json
    from ...watermark import WatermarkSpec
    from ...window import Hop

    try:
        stages = stages_of(spec)
    except ConfigError as e:
        bad("$.stages", str(e))
        return
    if wm is None:  # the watermark's own problems are said; its column still tells the stages their time
        column = (spec.get("watermark") or {}).get("column") if isinstance(spec.get("watermark"), dict) else None
        if not isinstance(column, str):
            return
        wm = WatermarkSpec(column, 0)
    ctx = StageContext(event_time=wm.column, watermarks={None: wm})
    for i, st in enumerate(stages):
        kind, opts, _ = stage_parts(st)
        path = f"$.stages[{i}].{kind}" if "stages" in spec else f"$.{kind}"
        try:
            got = stage_from_json(kind, opts, ctx)
        except SchemaError:  # a column: Spark's schema tells
            return
        except (ConfigError, TypeError, ValueError) as e:
            bad(path, str(e).removeprefix(f"{kind}: "))
            return
        w = getattr(got, "window", None)
        if isinstance(w, Hop):
            per = -(-w.size // w.slide)
            if per > MAX_WINDOWS_PER_ROW:
                bad(f"{path}.slide", f"a hop of {opts.get('hop')} every {opts.get('slide')} puts each row in "
                                     f"{per:,} windows (gpuwm keeps one aggregate per row and window; at most "
                                     f"{MAX_WINDOWS_PER_ROW:,}): use a longer slide or a shorter window")
        ctx = StageContext(event_time=got.event_time(ctx.event_time), watermarks=ctx.watermarks, previous=got,
                           also_times=got.other_times(ctx.also_times))


#: what a stage object may hold beside its kind: its name and the stream it reads (a graph of stages)
WIRING = ("name", "input")


def stage_parts(stage: dict) -> tuple[str, dict, dict]:
    """A JSON stage as (kind, options, ``{"name": ..., "input": ...}``
    given beside the kind)."""
    wiring = {k: stage[k] for k in WIRING if k in stage}
    (kind, opts), = ((k, v) for k, v in stage.items() if k not in WIRING)
    return kind, opts, wiring


def stages_of(spec: dict) -> list[dict]:
    """The spec's stages, each ``{kind: options}`` — with ``"name"`` and
    ``"input"`` beside the kind in a graph of stages (``{"window": {...},
    "name": "maxp", "input": "bids"}``: see ``Pipeline.stage``) — (a stage
    kind at the top level is one stage)."""
    kinds = stage_kinds()
    out = spec["stages"] if "stages" in spec else [{k: spec[k]} for k in spec if k in kinds]
    for i, st in enumerate(out):
        rest = [k for k in st if k not in WIRING] if isinstance(st, dict) else []
        wired = isinstance(st, dict) and all(isinstance(st[k], str) and st[k] for k in WIRING if k in st)
        if not (isinstance(st, dict) and len(rest) == 1 and rest[0] in kinds and wired
                and isinstance(st[rest[0]], dict)):
            if isinstance(st, dict) and not wired:
                raise ConfigError(f"stage {i}: 'name' and 'input' are stream names (non-empty strings), got "
                                  f"{ {k: st[k] for k in WIRING if k in st} }")
            kind = rest[0] if len(rest) == 1 else None
            if isinstance(kind, str) and kind not in kinds:
                try:
                    stage_class(kind)
                except ConfigError as e:  # an unknown kind: its near miss
                    raise ConfigError(f"stage {i}: {e}") from None
            raise ConfigError(f"stage {i} must be one of {[{k: {}} for k in sorted(kinds)]} with its options "
                              f"(and 'name', 'input' beside it in a graph), got {st!r}")
    return out


def add_stage(p, i: int, stage: dict) -> None:
    """Append one JSON stage ``{kind: options}`` to Pipeline ``p`` (any
    registered kind: :func:`gpuwm.operator.stage_kinds`)."""
    kind, opts, wiring = stage_parts(stage)
    try:
        p.add(kind, **wiring, **opts)
    except (ConfigError, SchemaError) as e:
        raise type(e)(f"stage {i}: {e}" if str(e).startswith(kind) else f"stage {i} ({kind}): {e}") from None


def _without_watermark(src: dict) -> dict:
    """A ``sql`` spec's source as the other specs' sources are: its ``watermark`` is Spark's, applied apart."""
    return {k: v for k, v in src.items() if k != "watermark"}


def accelerated(spark, spec: dict, verbose: bool = True):
    """A ``sql`` spec's query: each source read, watermarked
    (``withWatermark``) and named as a temp view, the query given to
    ``spark.sql`` and to :func:`~gpuwm.spark.front.accelerate.accelerate` with the spec's
    settings; returns its :class:`~gpuwm.spark.front.accelerate.Accelerated`."""
    from .accelerate import accelerate

    for name, src in spec["sources"].items():
        df = _read_source(spark, _without_watermark(src), spec["checkpoint"])
        w = src.get("watermark")
        if w is not None:
            df = df.withWatermark(w["column"], w["delay"])
        df.createOrReplaceTempView(name)
    return accelerate(spark.sql(spec["sql"]), vnodes=spec.get("vnodes"), profile=spec.get("profile"),
                      fallback=spec.get("fallback"), read=spec.get("read"), backend=spec.get("backend"),
                      verbose=verbose, state_ttl=spec.get("state_ttl"))


def _sink_tuple(spec: dict, columns) -> tuple:
    """The spec's sink as :meth:`Accelerated.pipeline` takes it, for rows of ``columns``."""
    from ..io.driver_sinks import sink_tuple

    (kind, arg), = spec["sink"].items()
    if kind == "console":
        return ("console", int(arg) if not isinstance(arg, bool) else 20)
    options = {"path": arg} if kind in ("parquet", "delta") else {k: str(v) for k, v in arg.items()}
    return sink_tuple(kind, options, spec["checkpoint"], columns)


def build(spark, spec: dict, verbose: bool = True):
    """The :class:`~gpuwm.spark.Pipeline` a spec describes (not started);
    for a ``sql`` spec that gpuwm does not translate (and ``fallback``
    ``spark``), the :class:`~gpuwm.spark.front.accelerate.SparkRun` of Spark's
    own query."""
    from .pipeline import Pipeline

    if "sql" in spec:
        acc = accelerated(spark, spec, verbose)
        return acc.runner(spec["checkpoint"], _sink_tuple(spec, acc.df.columns))
    if "inputs" in spec:
        dfs = {name: _read_source(spark, inp["source"], spec["checkpoint"]) for name, inp in spec["inputs"].items()}
        p = Pipeline(dfs, spec["checkpoint"], vnodes=spec.get("vnodes"), backend=spec.get("backend"), verbose=verbose,
                     read=spec.get("read"))
        for name, inp in spec["inputs"].items():
            _add_watermark(p, inp["watermark"], input=name)
    else:
        return _single(_read_source(spark, spec["source"], spec["checkpoint"]), spec, verbose)
    return _stages_and_sinks(p, spec)


def _single(df, spec: dict, verbose: bool):
    """The pipeline of a one-source spec over ``df``, its source's DataFrame
    (or a :class:`Declared` stand-in)."""
    from .pipeline import Pipeline

    p = Pipeline(df, spec["checkpoint"], vnodes=spec.get("vnodes"), backend=spec.get("backend"), verbose=verbose,
                 read=spec.get("read"))
    _add_watermark(p, spec["watermark"])
    return _stages_and_sinks(p, spec)


def _stages_and_sinks(p, spec: dict):
    for i, stage in enumerate(stages_of(spec)):
        add_stage(p, i, stage)
    if "output" in spec:  # the sink's projection (explain(df, spec=True) writes the query's as it)
        p.output(spec["output"])
    sink = _sink_tuple(spec, ())  # (a kafka sink is a "sql" spec's: its SELECT names the columns)
    if sink[0] == "parquet":
        p.write_parquet(sink[1])
    elif sink[0] == "foreachBatch":  # a Delta or Kafka sink of gpuwm's, run by the driver
        p.foreach_batch(sink[1])
    else:
        p.write_console(sink[1])
    if "late" in spec:
        late = spec["late"]
        if not (isinstance(late, dict) and set(late) == {"parquet"}):
            raise ConfigError(f"'late' must be {{\"parquet\": path}} (rows dropped as late, kept aside), got {late!r}")
        p.late_rows_to(late["parquet"])
    return p


def _read_source(spark, src: dict, checkpoint: str):
    """A ``source`` object's streaming DataFrame."""
    from .session import read_nexmark

    if not isinstance(src, dict):
        raise ConfigError(f"'source' must be {{\"format\": ..., ...}}, got {src!r}")
    fmt = src.get("format")
    opts = src.get("options", {})
    if fmt == "nexmark":
        df = read_nexmark(spark, checkpoint, **opts)
    elif fmt:
        r = spark.readStream.format(fmt)
        if "schema" in src:
            r = r.schema(src["schema"])
        for k, v in opts.items():
            r = r.option(k, str(v))
        df = r.load(src["path"]) if "path" in src else r.load()
    else:
        raise ConfigError("source needs a 'format'")
    sel = src.get("select")
    if sel:
        steps = sel if all(isinstance(x, list) for x in sel) else [sel]
        for step in steps:
            if not (step and all(isinstance(x, str) for x in step)):
                raise ConfigError(f"'select' is a list of SQL expressions, or a list of such lists "
                                  f"applied in turn; got {sel!r}")
            df = df.selectExpr(*step)
    return df


def _add_watermark(p, w: dict, **kw) -> None:
    if not (isinstance(w, dict) and "column" in w and "delay" in w):
        raise ConfigError(f"'watermark' must be {{\"column\": ..., \"delay\": ..., ...}}, got {w!r}")
    w = dict(w)
    p.watermark(w.pop("column"), w.pop("delay"), **w, **kw)


def spec_conf(spec: dict) -> dict:
    """Spark conf a spec needs in a session ``gpuwm run`` starts: its
    ``conf`` (e.g. ``spark.hadoop.fs.s3a.*``), the Kafka connector for
    ``kafka`` sources and Hadoop's S3A where a location is on S3
    (``spark.jars.packages``)."""
    from ..jvm.jars import hadoop_aws, spec_packages

    conf = spec.get("conf") or {}
    if not isinstance(conf, dict) or not all(isinstance(k, str) and k.startswith("spark.") for k in conf):
        raise ConfigError(f"a spec's 'conf' is Spark conf, {{\"spark.<key>\": value, ...}}, got {conf!r}")
    conf = {k: str(v) for k, v in conf.items()}
    pkgs = spec_packages(_sources(spec))
    sinks = [spec.get(k) or {} for k in ("sink", "late")]
    uris = [spec.get("checkpoint")] + [x.get("parquet") for x in sinks if isinstance(x, dict)] + \
        [(s or {}).get("path") for s in _sources(spec) if isinstance(s, dict)]
    if any(isinstance(u, str) and u.split("://")[0] in ("s3a", "s3", "s3n") for u in uris):
        pkgs.append(hadoop_aws())
    if pkgs:
        given = conf.get("spark.jars.packages")
        conf["spark.jars.packages"] = ",".join(([given] if given else []) + pkgs)
    return conf


_DDL_TYPES = {"bigint": "LongType", "long": "LongType", "int": "IntegerType", "integer": "IntegerType",
              "smallint": "ShortType", "short": "ShortType", "tinyint": "ByteType", "byte": "ByteType",
              "double": "DoubleType", "float": "FloatType", "real": "FloatType", "string": "StringType",
              "boolean": "BooleanType", "timestamp": "TimestampType", "date": "DateType", "binary": "BinaryType"}


def declared_schema(ddl: str):
    """A source's ``schema`` (Spark DDL) as Spark's ``StructType``, read
    without Spark where it is ``name type, ...`` of plain types; None
    otherwise (Spark's parser must read it).

    >>> declared_schema("ts TIMESTAMP, k bigint").simpleString()
    'struct<ts:timestamp,k:bigint>'
    >>> declared_schema("d decimal(10, 2)") is None
    True
    """
    from pyspark.sql import types as T

    fields = []
    for part in ddl.split(","):
        words = part.split()
        if len(words) != 2 or words[1].lower() not in _DDL_TYPES or not words[0].isidentifier():
            return None
        fields.append(T.StructField(words[0], getattr(T, _DDL_TYPES[words[1].lower()])(), True))
    return T.StructType(fields) if fields else None


def explain_without_spark(spec: dict) -> str | None:
    """``gpuwm run --dry-run`` of a spec whose one source's schema is known
    without Spark (:class:`~gpuwm.spark.front.pipeline.Declared`): the plan, checked as it would run;
    None where Spark must read the schema (a ``sql`` spec, several inputs,
    a ``select`` or a watermark ``expr``, another format)."""
    from ..catalyst.schema import spark_schema
    from ..io.nexmark import GENERATORS, _kind
    from .pipeline import Declared

    src = spec.get("source")
    if "sql" in spec or "inputs" in spec or not isinstance(src, dict) or src.get("select") \
            or "expr" in (spec.get("watermark") or {}):
        return None
    if src.get("format") == "nexmark":
        schema = spark_schema(GENERATORS[_kind(dict(src.get("options", {})))][1])
    elif src.get("format") == "parquet" and isinstance(src.get("schema"), str):
        schema = declared_schema(src["schema"])
    else:
        return None
    if schema is None:
        return None
    return _single(Declared(schema), spec, verbose=False).explain(trigger=spec.get("trigger"))


def explain(spark, spec: dict) -> str:
    """``gpuwm run --dry-run``: the plan the spec would run; for a ``sql``
    spec, first which of the query's operators gpuwm runs and which Spark
    does, and why."""
    if "sql" not in spec:
        return build(spark, spec, verbose=False).explain(trigger=spec.get("trigger"))
    acc = accelerated(spark, spec, verbose=False)
    runner = acc.runner(spec["checkpoint"], _sink_tuple(spec, acc.df.columns))
    return acc.explained(spec["checkpoint"]) + "\n" + runner.explain(trigger=spec.get("trigger"))


def _sources(spec: dict) -> list:
    inputs = spec.get("inputs")
    sources = spec.get("sources")
    if isinstance(sources, dict):
        return [_without_watermark(s) if isinstance(s, dict) else s
                for s in sources.values()]
    if isinstance(inputs, dict):
        return [i.get("source") for i in inputs.values() if isinstance(i, dict)]
    return [spec.get("source")]


def run(spark, spec: dict, verbose: bool = True):
    """Start the spec's query and wait: bounded sources run to the end.
    Ctrl-C (SIGINT) stops the query: the batch in flight is not committed
    and runs again at the next start, so nothing is lost; the pipeline
    returned then has ``interrupted`` set."""
    from pyspark.errors import StreamingQueryException

    sources = _sources(spec)
    bounded = all(src.get("format") == "nexmark" and int(src.get("options", {}).get("totalEvents", 1_000_000)) > 0
                  for src in sources)
    p = build(spark, spec, verbose)
    q = p.start(trigger=spec.get("trigger"))  # (over Kafka: started once more after SPARK-57438's failure)
    if verbose:
        print(f"gpuwm: query started on checkpoint {spec['checkpoint']}; a line per batch as it commits",
              flush=True)
    if (spec.get("trigger") or {}).get("availableNow") or (spec.get("trigger") or {}).get("once") \
            or not bounded:
        wait = q.awaitTermination
    else:
        def wait(q=q):
            q.processAllAvailable()
            q.stop()
    p.interrupted = _until_done_or_interrupted(q, wait)
    if p.interrupted:
        return p
    try:
        e = q.exception()
    except StreamingQueryException as x:
        e = x
    if e is not None:
        raise e
    return p


def _until_done_or_interrupted(q, wait) -> bool:
    """Run ``wait`` (a blocking call on the query) in a thread; a SIGINT
    stops the query from this one (a Python exception inside a py4j call
    would leave the call's connection broken). True if interrupted."""
    import signal
    import threading

    from pyspark.errors import StreamingQueryException

    hit = threading.Event()
    failed: list = []

    def waiting():
        try:
            wait()
        except StreamingQueryException:
            pass  # q.exception() has it
        except Exception as e:  # noqa: BLE001  raised in this thread below unless the user stopped the query
            failed.append(e)

    t = threading.Thread(target=waiting, name="gpuwm-wait", daemon=True)
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, lambda *_: hit.set()) if main else None
    try:
        t.start()
        while t.is_alive():
            t.join(0.2)
            if hit.is_set():
                signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C: no waiting
                q.stop()
                t.join()
                return True
    finally:
        if main:
            signal.signal(signal.SIGINT, old)
    if failed:
        raise failed[0]
    return False


def kafka_sources(spec: dict) -> list[dict]:
    """The ``options`` of every Kafka source a (loaded) spec names — its
    ``source``, each input's, each of a ``"sql"`` spec's ``sources`` —, for
    :func:`gpuwm.spark.driver.kafka.probe` before Spark starts."""
    found = [spec.get("source")] + [i.get("source") for i in (spec.get("inputs") or {}).values()]
    found += list((spec.get("sources") or {}).values())
    return [dict(s.get("options") or {}) for s in found
            if isinstance(s, dict) and str(s.get("format", "")).lower() == "kafka"]
