"""Your Spark query, accelerated: ``accelerate(df)`` takes a streaming
DataFrame written with PySpark's API (or ``spark.sql`` over streaming temp
views), translates its plan (:func:`gpuwm.spark.front.translate.translate`)
and answers with an :class:`Accelerated`, whose ``writeStream``
(:mod:`gpuwm.spark.front.writer`) runs it — gpuwm's
:class:`~gpuwm.spark.Pipeline` of the translated stages, its output
columns checked to be Spark's, in append mode, update (one window or one
dedup alone) or complete (one window alone)::

    q = (accelerate(df).writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", ck).trigger(availableNow=True).start())

What gpuwm does not translate runs in Spark as written
(:class:`SparkRun`), by ``spark.gpuwm.fallback``: ``spark`` (the default)
with one warning line naming the refusal's code, the operator and why;
``error`` failing in one line. Never a different answer. :func:`explain`
prints the split before anything runs.
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any, Sequence

from ...errors import ConfigError, SchemaError
from ..catalyst.plans import node_kind
from ..catalyst.schema import arrow_schema, columns_apart
from ..jvm.objects import scala_iter
from .translate import translate
from .translation import Refused, Translation, kind_of, options_of, refusal
from .writer import AcceleratedWriter

FALLBACKS = ("spark", "error")


def _conf(spark, key: str, given: Any, default: Any) -> Any:
    return given if given is not None else spark.conf.get(f"spark.gpuwm.{key}", default)


class Accelerated:
    """What :func:`accelerate` returns: ``.writeStream`` as on a DataFrame;
    ``.translation`` (None when Spark runs the query) and ``.refused``
    (what kept it in Spark, or None). What a DataFrame answers without
    starting a query it answers as the DataFrame given: ``isStreaming``,
    ``schema``, ``columns``, ``dtypes``, ``sparkSession``,
    ``printSchema()``; ``explain()`` prints which operators gpuwm runs and
    which Spark does (:meth:`explained`, :func:`explain`). Anything else of
    a DataFrame (``groupBy``, ``select``) belongs before ``accelerate``:
    asking for it here says so, not a bare ``AttributeError``."""

    def __init__(self, df, *, vnodes: int | None = None, profile: str | None = None, fallback: str | None = None,
                 read: str | None = None, backend: str | None = None, verbose: bool = False,
                 on_batch: Any = None, state_ttl: Any = None):
        spark = df.sparkSession
        self.df = df
        self.fallback = _conf(spark, "fallback", fallback, "spark")
        if self.fallback not in FALLBACKS:
            raise ConfigError(f"spark.gpuwm.fallback must be one of {FALLBACKS}, got {self.fallback!r}")
        self.profile = _conf(spark, "profile", profile, "spark")
        vn = _conf(spark, "vnodes", vnodes, None)
        try:
            self.vnodes = None if vn is None else int(vn)
        except ValueError:
            raise ConfigError(f"spark.gpuwm.vnodes must be an integer, got {vn!r}") from None
        self.read, self.backend, self.verbose, self.on_batch = read, backend, verbose, on_batch
        self.translation: Translation | None = None
        self.refused: Refused | None = None
        try:
            self.translation = translate(df, _conf(spark, "stateTtl", state_ttl, None))
        except Exception as e:  # (an exception escaping translation is a bug: Spark still runs the query)
            self._refuse(refusal(e))

    def _refuse(self, r: Refused) -> None:
        """Spark runs the query (one warning line), or the error the user asked for."""
        self.translation, self.refused = None, r
        if self.fallback == "error":
            raise ConfigError(f"gpuwm cannot run {r.operator} [{r.code}]: {r.reason} (spark.gpuwm.fallback=error)")
        print(f"gpuwm: warning: the query runs in Spark, not gpuwm: [{r.code}] {r.operator}: {r.reason}",
              file=sys.stderr, flush=True)

    @property
    def writeStream(self) -> "AcceleratedWriter":
        return AcceleratedWriter(self)

    # the query's own answers, as the DataFrame given gives them (its columns are what gpuwm writes: pipeline())
    @property
    def isStreaming(self) -> bool:
        return self.df.isStreaming

    @property
    def schema(self):
        return self.df.schema

    @property
    def columns(self) -> list[str]:
        return self.df.columns

    @property
    def dtypes(self) -> list[tuple[str, str]]:
        return self.df.dtypes

    @property
    def sparkSession(self):
        return self.df.sparkSession

    def printSchema(self, level: int | None = None) -> None:
        self.df.printSchema(level)

    def explain(self, extended: bool | str | None = None, mode: str | None = None) -> None:
        """Print which operators gpuwm runs and which Spark does, and why
        (:meth:`explained`), as ``DataFrame.explain()`` prints a plan; with
        ``extended`` or ``mode`` (``DataFrame.explain``'s), then Spark's own
        plan of the query as written: what runs where gpuwm does not."""
        print(self.explained())
        if extended is not None or mode is not None:
            print("\nSpark's plan of the query as written:")
            self.df.explain(extended, mode)

    def __getattr__(self, name: str):
        df = self.__dict__.get("df")  # (not self.df: unset while __init__ runs, it would come back here)
        if df is None or name.startswith("_") or not hasattr(type(df), name):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise AttributeError(f"accelerate(df) answers writeStream and what describes the query; call {name} on "
                             f"the DataFrame before accelerate: accelerate(df.{name}(...))")

    def __repr__(self) -> str:
        runs = "gpuwm runs it" if self.translation is not None else f"Spark runs it: [{self.refused.code}]"
        return f"Accelerated[{', '.join(f'{n}: {t}' for n, t in self.dtypes)}] ({runs})"

    def pipeline(self, checkpoint: str, sink: tuple = ("console",), name: str | None = None, mode: str = "append"):
        """The gpuwm :class:`~gpuwm.spark.Pipeline` of the translated query
        in output ``mode`` (its output columns checked against Spark's:
        :class:`Refused` if they would differ, or if gpuwm does not run the
        query in that mode)."""
        from .pipeline import Pipeline

        t = self.translation
        _check_mode(mode, t.stages)
        src = {n: i.source for n, i in t.inputs.items()} if t.inputs else t.source
        p = Pipeline(src, checkpoint, vnodes=self.vnodes, backend=self.backend, read=self.read,
                     on_batch=self.on_batch, verbose=self.verbose, name=name)
        for n, i in (t.inputs or {None: t}).items():
            p.watermark(i.column, delay=i.delay, profile=self.profile, input=n)
        reads: dict[str, list[str]] = {}
        for n, i in (t.inputs or {}).items():  # reads of one withWatermark under other filters: one watermark
            if i.node is not None:
                reads.setdefault(i.node, []).append(n)
        for names in reads.values():
            if len(names) > 1:
                p.shared_watermark(*names)
        try:
            for k, st in enumerate(t.stages):
                # a graph's stage: its name, and what it reads (a join names its own)
                graphed = t.graph is not None and k < len(t.graph)  # (a stage after a graph reads the one before)
                named = {"name": t.graph[k][0]} if graphed else {}
                kind, options = kind_of(st), dict(options_of(st))
                wired = {**named, "input": t.graph[k][1][0]} if graphed and kind != "join" else named
                if kind == "window":  # update / complete: each batch's changed / all (window, key) rows, as Spark's
                    options["emit"] = {"update": "on-update", "complete": "complete"}.get(mode, "on-window-close")
                p.add(kind, **wired, **options)
        except (ConfigError, SchemaError) as e:  # a chain or a join gpuwm's stages cannot make
            raise Refused("STAGES", "query", str(e)) from None
        if sink[0] == "parquet":  # as Spark's file sink lays its files out: the query's readers read them as before
            p.write_parquet(sink[1], layout="spark", spark_schema=self.df.schema.json())
        elif sink[0] == "foreachBatch":  # the function gets the query's own columns and types
            p.foreach_batch(sink[1], self.df.schema)
        else:
            p.write_console(*sink[1:])
        p.output(t.output)
        why = columns_apart(p.output_schema(), arrow_schema(self.df.schema), "gpuwm's output", "Spark's")
        if why is not None:
            raise Refused("OUTPUT_COLUMNS", "query", why)
        return p

    def runner(self, checkpoint: str, sink: tuple = ("console",), name: str | None = None):
        """What runs the query: gpuwm's :class:`~gpuwm.spark.Pipeline`, or
        — where gpuwm cannot run it (``spark.gpuwm.fallback=spark``, the
        warning said once) — :class:`SparkRun`, Spark's own query as
        written. Both take ``start(trigger=..., query_name=...)``."""
        if self.translation is not None:
            try:
                return self.pipeline(checkpoint, sink, name=name)
            except Exception as e:
                self._refuse(refusal(e))
        return SparkRun(self.df, checkpoint, sink)

    def explained(self, checkpoint: str | None = None) -> str:
        """Which operators gpuwm runs and which Spark does, and why (with
        the query's ``checkpoint`` where known: a Nexmark source's tasks
        read by it)."""
        if self.translation is None:
            r = self.refused
            return f"Spark runs the whole query: [{r.code}] {r.operator}: {r.reason}"
        t = self.translation
        try:
            p = self.pipeline(checkpoint or f"{tempfile.gettempdir()}/gpuwm-explain")
        except Exception as e:
            r = refusal(e)
            return f"Spark runs the whole query: [{r.code}] {r.operator}: {r.reason}"
        from ..driver.direct import direct_reason
        from ..driver.kafka import read_path

        ins = t.inputs or {None: t}
        why, _, kafka = direct_reason(t.source, {n: i.source for n, i in t.inputs.items()} if t.inputs else None,
                                      p.checkpoint) if (self.read or "auto") != "spark" else ("read='spark'", [], None)
        src = " and ".join(_describe_source(i.source._jdf.queryExecution().analyzed()) for i in ins.values())
        lines = [f"gpuwm runs (profile {self.profile}, vnodes {self.vnodes or 1}):"]
        for n, i in ins.items():
            lines.append(f"  watermark  {i.shown_time or i.column}, delay {i.delay}" + (f" ({n})" if n else ""))
            if i.pushed:
                lines.append(f"    of rows  where {i.pushed} (Spark's optimizer filters them below the watermark)")
        lines += [f"  {s}" for s in t.shown]
        lines.append(f"  output     {', '.join(self.df.columns)}")  # pipeline() checked they are gpuwm's
        read = read_path(kafka) if kafka is not None else "its input read by gpuwm's tasks"
        lines.append(f"Spark runs: the source, {src}" + (
            f" ({read})" if why is None else f" (its rows handed to gpuwm: {why})"))
        return "\n".join(lines)


def _check_mode(mode: str, stages: Sequence[tuple]) -> None:
    """Refuse an output mode gpuwm does not run the query in: append; update
    for one tumbling or hopping window alone (each batch's changed rows, as
    Spark's update mode gives them; Spark allows no other stateful operator
    beside an aggregation in update mode) or a dedup alone (its rows are
    final: update is append); complete for one window alone (every
    window's values each batch, none closing; no row late, a session's as
    late as in append mode).
    Update over a session window is refused in one line, as Spark's
    checker refuses it. Beside Spark 4.2 on, an inner stream–stream join
    alone runs in update mode too, its rows append mode's, as Spark's
    (:func:`~gpuwm.spark.jvm.versions.update_joins`)."""
    from ...aggregates import DISTINCT
    from ..jvm.versions import update_joins

    if mode == "append":
        return
    kinds = [kind_of(st) for st in stages]
    windows = [options_of(st) for st in stages if kind_of(st) == "window"]
    if mode == "complete":
        if kinds == ["window"]:
            return
        raise Refused("OUTPUT_MODE", "writeStream", f"output mode 'complete' with {' then '.join(kinds)}: gpuwm runs complete "
                                     "for one window")
    if mode == "update":
        if any(fn in DISTINCT for w in windows for _, fn in w["aggs"].values()):
            raise ConfigError("output mode 'update' with a DISTINCT aggregate: Spark refuses DISTINCT on a stream, "
                              "and gpuwm emits it when its window closes; use append (or complete)")
        if kinds == ["window"] and "session" not in windows[0] or kinds == ["dedup"]:
            return
        inner = kinds == ["join"] and options_of(stages[0])["how"] == "inner"
        if inner and update_joins():  # Spark 4.2 on: the rows are append's (SPARK-56384), and so are gpuwm's
            return
        if any("session" in w for w in windows):
            raise ConfigError("output mode 'update' over a session window: Spark refuses it too "
                              "(STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION); use append")
        raise Refused("OUTPUT_MODE", "writeStream", f"output mode 'update' with {' then '.join(kinds)}: gpuwm runs one window "
                                     "or one dedup in update mode" + (", and an inner join beside Spark 4.2 on, as Spark"
                                                                      if inner else ""))
    raise Refused("OUTPUT_MODE", "writeStream", f"output mode {mode!r}: gpuwm runs append, update and complete")


class SparkRun:
    """A query Spark runs as written (what :func:`accelerate` did not
    translate), with the calls ``gpuwm run`` makes on a Pipeline:
    :meth:`start`, :meth:`explain`, ``history`` (gpuwm's batch metrics:
    none) and ``checkpoint``."""

    def __init__(self, df, checkpoint: str, sink: tuple):
        from ..storage.checkpoint import Checkpoint, Location, spark_fs_options

        self.df, self.sink = df, sink
        self.checkpoint = Checkpoint(Location.of(checkpoint, spark_fs_options(df.sparkSession), "checkpoint"))
        self.history: list[dict] = []
        self.interrupted = False

    def start(self, *, trigger: Any = None, query_name: str | None = None):
        """Spark's ``writeStream`` of the query, in append mode, to the sink;
        returns its ``StreamingQuery`` (over Kafka: :func:`~gpuwm.spark.driver.launch.restarting`)."""
        w = self.df.writeStream.outputMode("append").option("checkpointLocation", self.checkpoint.loc.uri)
        if self.sink[0] == "parquet":
            w = w.format("parquet").option("path", self.sink[1])
        elif self.sink[0] == "foreachBatch":
            w = w.foreachBatch(self.sink[1])
        else:
            w = w.format("console").option("numRows", str(self.sink[1] if len(self.sink) > 1 else 20))
        if trigger:
            w = w.trigger(**trigger)
        if query_name:
            w = w.queryName(query_name)
        from ..driver.kafka import source_options
        from ..driver.launch import restarting

        return restarting(w.start, self.checkpoint) if source_options(self.df) else w.start()

    def explain(self, trigger: Any = None) -> str:
        return "Spark runs the whole query (as written, its own sink and checkpoint)"


def _describe_source(plan) -> str:
    """A source plan in a few words: its top node, and the source it reads."""
    stack, leaf = [plan], None
    while stack:
        node = stack.pop()
        if node_kind(node) == "StreamingRelation":
            leaf = f"{node.dataSource().className()} {node.sourceName()}"
        elif node_kind(node) == "StreamingRelationV2":
            leaf = str(node.sourceName())
        stack.extend(scala_iter(node.children()))
    top = node_kind(plan)
    return (leaf or top) if top.startswith("StreamingRelation") else f"{top} over {leaf or 'a source'}"


def accelerate(df, **settings: Any) -> Accelerated:
    """``df`` (a streaming DataFrame: PySpark's API or ``spark.sql``) run by
    gpuwm where it can be, else by Spark; use the result as ``df``:
    ``accelerate(df).writeStream.format("parquet")...start()``.

    Settings, as keywords or Spark conf: ``vnodes`` (``spark.gpuwm.vnodes``,
    default 1), ``profile`` (``spark.gpuwm.profile``, default ``spark``:
    Spark's results), ``fallback`` (``spark.gpuwm.fallback``: ``spark``,
    the default, or ``error``), ``state_ttl`` (``spark.gpuwm.stateTtl``,
    e.g. ``"1 hour"``: a rank with no window among its partition keys —
    Nexmark q18, q19 — closes each partition once the watermark passes its
    latest row's event time by that long, and emits its rows then; without
    it such a rank is refused: its state would never be cleaned); ``read``,
    ``backend``, ``verbose``, ``on_batch`` as :class:`~gpuwm.spark.Pipeline`
    takes them."""
    return Accelerated(df, **settings)


def explain(df, spec: bool = False, **settings: Any) -> str:
    """Print (and return) which operators of ``df`` gpuwm runs and which
    Spark does, with the reason for each it does not. ``spec=True``: the
    query as a JSON spec instead (its inputs, its stages as ``gpuwm run``
    reads them, the sink's projection; checkpoint ``ck/query``, sink
    ``{"parquet": "out/query"}`` to edit), which ``gpuwm run`` runs as
    ``accelerate(df)`` runs the query (:func:`gpuwm.spark.front.tospec.query_spec`;
    a query gpuwm does not run, or one whose sources have no spec form, is
    a :class:`~gpuwm.errors.ConfigError`)."""
    settings.setdefault("fallback", "spark")
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):  # the fallback's warning: the text says it
        acc = Accelerated(df, **settings)
    if spec:
        import json

        from .tospec import query_spec

        text = json.dumps(query_spec(acc), indent=1)
    else:
        text = acc.explained()
    print(text)
    return text
