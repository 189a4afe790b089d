"""A small builder over a streaming DataFrame: watermark -> operator -> sink::

    from gpuwm.spark import Pipeline, read_nexmark
    q = (Pipeline(read_nexmark(spark, "ck/"), checkpoint="ck/")
           .watermark("date_time", delay="4 seconds", split="split", profile="spark")
           .window(gpuwm.Tumble("date_time", "10 seconds"), by=["auction"],
                   aggs={"bids": ("*", "count"), "max_price": ("price", "max")})
           .write_parquet("out/q_tumble")
           .start())

(``tests/test_spark.py`` runs this shape end to end.)

Each micro-batch runs through ``foreachBatch`` as one Spark job (see
:mod:`gpuwm.spark.tasks`); the driver only fixes the batch's processing
time, reads the previous watermark-filter state (a few bytes per split) and
commits the new one with the batch's metrics. Configuration is validated in
Python before the query starts.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from functools import partial
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa

from ..backend import log
from ..errors import ConfigError, SchemaError, StateError
from ..frame import bytes_to_table
from ..inputs import InputsSpec
from ..join import input_schemas, inputs_schema
from ..operator import OperatorSpec
from ..sort import SortSpec
from ..watermark import EXPR_COLUMN, WatermarkSpec
from ..window import WindowSpec
from . import store, tasks
from .checkpoint import FORMAT, Checkpoint, Location, Owner, spark_fs_options
from .exchange import FLOW_SCHEMA, merge_task
from .plan import INPUT, Plan, Sink, is_timestamp, union_column
from .sinks import clear_batch

_INT_TYPES = ("ByteType", "ShortType", "IntegerType", "LongType")


def _spark_field(schema, name: str, what: str):
    if name not in schema.fieldNames():
        raise SchemaError(f"{what} column {name!r} not found; the stream has columns {schema.fieldNames()}")
    return schema[name]


class Pipeline:
    """Watermark filter, then stages — stream sort, windowed aggregations
    (tumbling, hopping, session), chained — then a sink. Each stage drains
    with the output watermark of the one before, in the same micro-batch; a
    window's output has the event-time column ``window_time`` (window_end - 1
    unit, Spark's ``window_time``) when a stage follows it::

        (Pipeline(df, "ck/").watermark("ts", delay="10 seconds", profile="spark")
           .window(gpuwm.Tumble("ts", "5 seconds"), by=["k"], aggs={"n": ("*", "count")})
           .window(gpuwm.Tumble("window_time", "10 seconds"), aggs={"max_n": ("n", "max")})
           .write_parquet("out/"))

    Parameters
    ----------
    df : a streaming DataFrame (``spark.readStream...load()``).
    checkpoint : the query's checkpoint location, a path or a URI as Spark
        takes it (``s3a://bucket/ck``, ``hdfs://...``, ``gs://...``); gpuwm
        keeps its state under ``<checkpoint>/gpuwm/``, versioned by batch id
        (:mod:`gpuwm.spark.checkpoint`), with the file-system settings
        Spark has (``spark.hadoop.fs.s3a.*``).
    vnodes : state partitions (default 1). With 1, each micro-batch is one
        narrow Spark stage — input partitions coalesced into one task, no
        shuffle — which is fastest while one core keeps up (the kernels run at
        tens of millions of rows/s); a sort then yields one totally ordered
        stream. With N > 1, input partitions filter (and pre-aggregate window
        partials) in parallel and a hash shuffle on the vnode feeds N tasks;
        a sort's released rows then go through one more shuffle, by
        event-time range, to N tasks that merge and write them: the batch's
        parts ``part-00000``, ``part-00001``, ... in order are still one
        ordered stream.
    backend : ``auto``/``cpu``/``gpu`` for the executors (default: Spark conf
        ``spark.gpuwm.backend``, else ``auto``).
    on_batch : called on the driver with each batch's metrics dict (also kept
        in :attr:`history` and written to ``<checkpoint>/gpuwm/state/<N>/metrics.json``):
        input/late/null rows, combined and output watermark, the watermark's
        lag behind the newest event time, rows emitted, state rows and bytes,
        seconds in operators and saving their state, backend, wall seconds,
        the batch's processing time, whether it ended the input
        (``end_of_input``), how many splits the filter has seen (``splits``:
        a Kafka partition added to the topic is a new one), the idle splits
        (``idle_splits``), those ahead of the others by more than
        ``max_drift`` (``held_back_splits``), the rows alignment holds back
        after the batch (``held_rows``) and the held rows it read
        (``rows_released``).
    verbose : print one line per micro-batch.
    name : the query name (and the prefix of verbose lines).
    read : ``"auto"`` (default): the gpuwm task makes the batch's input
        itself where it can — reads the files of a plain Parquet file stream
        with PyArrow, or generates the splits of ``read_nexmark(spark, ck)``
        over the offsets Spark logged — instead of receiving Spark's rows
        through the JVM (several times faster; :mod:`gpuwm.spark.direct`
        says when it applies — a batch it cannot make exactly goes through
        Spark). ``"direct"``: the same, but an input that does not qualify
        is an error. ``"spark"``: always Spark's rows. Default: Spark conf
        ``spark.gpuwm.read``, else ``"auto"``.
    """

    def __init__(self, df, checkpoint: str, *, vnodes: int | None = None, backend: str | None = None,
                 on_batch: Callable[[dict], None] | None = None, verbose: bool = False, name: str | None = None,
                 read: str | None = None):
        self.inputs: dict[str, Any] | None = None  # several named inputs
        if isinstance(df, Mapping):
            if len(df) < 2:
                raise ConfigError(f"Pipeline({{name: df, ...}}) takes two or more named inputs, got {list(df)}")
            for input_name, d in df.items():
                if not isinstance(input_name, str) or not input_name:
                    raise ConfigError(f"input names must be non-empty strings, got {input_name!r}")
                if not getattr(d, "isStreaming", False):
                    raise ConfigError(f"input {input_name!r} is not a streaming DataFrame (spark.readStream...)")
            self.inputs = dict(df)
            df = _union_inputs(self.inputs)
        elif not getattr(df, "isStreaming", False):
            raise ConfigError("Pipeline needs a streaming DataFrame (spark.readStream...), or named ones "
                              "({name: df, ...}) for a join")
        read = read or df.sparkSession.conf.get("spark.gpuwm.read", "auto")
        if read not in ("auto", "direct", "spark"):
            raise ConfigError(f"read must be 'auto', 'direct' or 'spark', got {read!r}")
        self.read = read
        self._direct: bool = False  # the input qualifies for gpuwm.spark.direct
        self._warned_direct = False
        self.df = df
        self.spark = df.sparkSession
        self._fs_options = spark_fs_options(self.spark)
        self.checkpoint = Checkpoint(Location.of(checkpoint, self._fs_options, "checkpoint"))
        self._owner: Owner | None = None
        self._last_filter: tuple[str | None, bytes | None] = (None, None)  # (name, bytes) of the last commit's
        self.vnodes = vnodes
        self.backend = backend or self.spark.conf.get("spark.gpuwm.backend", "auto")
        self.on_batch = on_batch
        self.verbose = verbose
        self.name = name
        self._wm: WatermarkSpec | None = None
        self._wms: dict[str, WatermarkSpec] = {}  # several inputs: each one's
        self._stages: list[OperatorSpec] = []
        self._sink: Sink | None = None
        self._late: Sink | None = None
        self._arrow_schema: pa.Schema | None = None
        self._lateness_given = False
        self.history: list[dict] = []

    # -- builder ---------------------------------------------------------------
    def watermark(self, column: str, delay: Any, *, split: str | None = None, profile: str = "risingwave",
                  emit: str | None = None, idle_timeout: Any = None, max_drift: Any = None,
                  input: str | None = None, candidate: str | None = None, punctuated: str | None = None,
                  every: Any = None, **knobs: Any) -> "Pipeline":
        """Drop late rows and derive the watermark (see :class:`gpuwm.WatermarkFilter`;
        ``candidate`` / ``punctuated``: a column of the input with each row's
        watermark candidate, or marking the rows that carry one).
        With several inputs, once per input (``input=name``): each input's
        watermark comes from its own column and delay, and their minimum is
        the one rows are late against and state is cleaned with (see
        :mod:`gpuwm.inputs`)."""
        if self._stages:
            raise ConfigError("call .watermark(...) once, before the stages: they were built on its column"
                              if self.inputs is None else
                              "call .watermark(..., input=name) once per input, before the stages: they were built "
                              "on their columns")
        if self.inputs is not None:
            if input not in self.inputs:
                raise ConfigError(f"this pipeline has inputs {list(self.inputs)}: say whose watermark this is, "
                                  f".watermark(..., input={next(iter(self.inputs))!r})" if input is None else
                                  f"unknown input {input!r}; the inputs are {list(self.inputs)}")
            if input in self._wms:
                raise ConfigError(f"input {input!r} has a watermark already: call .watermark(...) once per input")
            if "allowed_lateness" in knobs:
                raise ConfigError("allowed_lateness is not supported with several inputs")
            schema = self.inputs[input].schema
        elif input is not None:
            raise ConfigError(f"input={input!r}: this pipeline has one input (give Pipeline({{name: df, ...}}) "
                              "for several)")
        elif self._wm is not None:
            raise ConfigError("call .watermark(...) once, before the stages")
        else:
            schema = self.df.schema
        f = _spark_field(schema, column, "event-time")
        tname = type(f.dataType).__name__
        if tname == "TimestampNTZType":
            raise SchemaError(f"event-time column {column!r} is TIMESTAMP_NTZ; gpuwm (like Spark's withWatermark) "
                              "needs TIMESTAMP (UTC instants): cast it or write UTC-aware timestamps")
        if tname != "TimestampType" and tname not in _INT_TYPES:
            raise SchemaError(f"event-time column {column!r} has type {f.dataType.simpleString()}; "
                              "expected timestamp or an integer type")
        if split is not None:
            _spark_field(schema, split, "split")
        self._lateness_given = "allowed_lateness" in knobs
        lateness = knobs.pop("allowed_lateness", 0)
        expr = knobs.pop("expr", None)
        if expr is not None:
            if self.inputs is not None:
                raise ConfigError("a watermark 'expr' takes one input for now: with several, compute it as a "
                                  "column of that input and name it as the watermark's 'candidate'")
            schema = self._with_watermark_expr(column, expr)
        wm = WatermarkSpec(column, delay, profile=profile, emit=emit, split=split, idle_timeout=idle_timeout,
                           max_drift=max_drift, allowed_lateness=lateness, knobs=tuple(knobs.items()),
                           candidate=candidate, punctuated=punctuated, every=every, expr=expr)
        # the delay (and lateness, drift) in the column's unit: a duration on an integer column, or an int on a
        # timestamp, is refused here, not in the first micro-batch
        if self.inputs is not None:
            _driver_filter(wm, _arrow_schema(schema))
            self._wms[input] = wm
        else:
            _driver_filter(wm, self._input_arrow_schema())
            self._wm = wm
        return self

    def _with_watermark_expr(self, column: str, expr: str):
        """Evaluate a watermark ``expr`` (Spark SQL, each row's watermark
        candidate) into :data:`~gpuwm.watermark.EXPR_COLUMN`, of the event-time
        column's type; the filter leaves that column out of its output. The
        input's new schema."""
        from pyspark.sql import functions as F

        if not isinstance(expr, str) or not expr.strip():
            raise ConfigError(f"a watermark 'expr' is a Spark SQL expression, got {expr!r}")
        f = _spark_field(self.df.schema, column, "event-time")
        self.df = self.df.withColumn(EXPR_COLUMN, F.expr(expr).cast(f.dataType))
        self._arrow_schema = None
        return self.df.schema

    def join(self, left: str, right: str, on: Sequence[Sequence[str]], between: Sequence[Any] | None = None,
             how: str = "inner", window: Mapping[str, Any] | None = None) -> "Pipeline":
        """Join two named inputs (a stream-stream interval join, Spark's
        stream-stream join with a time-range condition): rows with equal keys
        (``on``: pairs ``[left column, right column]``) and ``between`` as
        ``[t1, t2, lower, upper]``: ``t1 BETWEEN t2 + lower AND t2 + upper``,
        ``t1`` and ``t2`` the two inputs' watermark columns. ``how``:
        ``inner``, ``left``, ``right`` or ``full``. Each side's state is
        deleted once no future row of the other can match it, unmatched outer
        rows then going out with nulls (see :class:`gpuwm.join.IntervalJoin`).

        Or, with ``window`` instead of ``between`` — ``{"tumble": size}`` or
        ``{"hop": size, "slide": slide}`` on the inputs' watermark columns —
        a window join (Flink's, Nexmark Q8): rows with equal keys in the same
        window, emitted with ``window_start`` and ``window_end`` when the
        watermark closes it (see :class:`gpuwm.join.WindowJoin`)."""
        from ..join import IntervalJoinSpec, WindowJoinSpec

        if self.inputs is None:
            raise ConfigError("a join needs two inputs: give Pipeline({name: df, ...})")
        for name in (left, right):
            if name not in self.inputs:
                raise ConfigError(f"unknown input {name!r}; the inputs are {list(self.inputs)}")
            if name not in self._wms:
                raise ConfigError(f"input {name!r} has no watermark: call .watermark(..., input={name!r}) before "
                                  ".join(...): the join's state is cleaned by the watermark")
        schemas = input_schemas(self._input_arrow_schema())
        if (between is None) == (window is None):
            raise ConfigError("a join needs either between=[t1, t2, lower, upper] (an interval join) or "
                              "window={'tumble': size} / {'hop': size, 'slide': slide} (a window join)")
        if window is not None:
            w = dict(window) if isinstance(window, Mapping) else {}
            if set(w) == {"tumble"}:
                size = slide = w["tumble"]
            elif set(w) == {"hop", "slide"}:
                size, slide = w["hop"], w["slide"]
            else:
                raise ConfigError(f"join window must be {{'tumble': size}} or {{'hop': size, 'slide': slide}}, "
                                  f"got {window!r}")
            spec = WindowJoinSpec(left, right, tuple(tuple(p) for p in on), self._wms[left].column,
                                  self._wms[right].column, size, slide, how)
            spec.output_schema(self._input_arrow_schema())
            return self._add(spec)
        spec = IntervalJoinSpec.between(left, right, on, between, schemas, how)
        for name, col in ((left, spec.left_time), (right, spec.right_time)):
            if col != self._wms[name].column:
                raise ConfigError(f"join time column {name}.{col} is not input {name!r}'s watermark column "
                                  f"({self._wms[name].column!r}): the join's state is cleaned by the watermark on it")
        return self._add(spec)

    def sort(self, key: Sequence[str] = ()) -> "Pipeline":
        """Release rows in event-time order, append-only: one ordered stream,
        batch after batch and, within a batch, part file after part file
        (``vnodes > 1``: the vnodes' released rows are merged by event-time
        range). The last stage of a pipeline."""
        self._need_watermark("sort")
        return self._add(SortSpec(self._event_time(), key))

    def window(self, window: Any, by: Sequence[str] = (), aggs: Mapping[str, tuple[str, str]] | None = None,
               emit: str = "on-window-close") -> "Pipeline":
        """Tumbling, hopping or session aggregation emitted when the watermark
        closes a window (session windows: on window close only). The
        window's column is the event-time column of its input: the
        watermark's column for the first stage, ``window_time`` after a
        window."""
        self._need_watermark("window")
        spec = WindowSpec(window, by, aggs, emit)  # a SessionSpec for a Session
        if window.column != self._event_time():
            raise ConfigError(f"window column {window.column!r} differs from the event-time column of its input, "
                              f"{self._event_time()!r}" + (" (after a window stage: 'window_time')"
                                                           if self._stages else " (the watermark's column)"))
        return self._add(spec)

    def dedup(self, key: Sequence[str]) -> "Pipeline":
        """Spark's ``dropDuplicatesWithinWatermark(key)``: a key's first row
        passes at once; later rows with the key are dropped until its first
        event time + the watermark's delay <= the watermark (see
        :class:`gpuwm.Dedup`); the dropped rows are counted per stage
        (``duplicate_rows``)."""
        self._need_watermark("dedup")
        from ..dedup import DedupSpec

        if self._wm is None:
            raise ConfigError("dedup after several inputs is not supported yet (it takes the watermark's delay)")

        return self._add(DedupSpec(key, self._event_time(), self._wm.delay))

    def over(self, by: Sequence[str] = (), funcs: Mapping[str, Sequence[Any]] | None = None) -> "Pipeline":
        """Over-window functions per partition key on the sorted stream (after
        :meth:`sort`, ordered by its event time and key): ``funcs`` as
        ``{output: ["lag", col, n] | ["lead", col, n] | ["row_number"] |
        ["sum" | "count" | "min" | "max", col]}`` (see :class:`gpuwm.Over`)."""
        self._need_watermark("over")
        from ..over import OverSpec

        prev = self._stages[-1] if self._stages else None
        if prev is None or not prev.capabilities.range_exchange:
            raise ConfigError("an over-window needs the event-time ordered stream: call .sort(key=[...]) right "
                              "before .over(...)")
        return self._add(OverSpec(by, funcs or {}, prev.column, prev.key))

    def stage(self, spec: OperatorSpec) -> "Pipeline":
        """Append any operator spec as the next stage (what :meth:`sort`,
        :meth:`window`, :meth:`dedup` and :meth:`over` do)."""
        self._need_watermark(spec.kind or "stage")
        return self._add(spec)

    def union(self) -> "Pipeline":
        """All the inputs' rows as one stream (inputs with one schema, their
        watermarks on one column): the stages after it see one input whose
        watermark is the minimum over the inputs' (Spark's ``union`` of
        watermarked streams)."""
        from ..union import UnionSpec

        if self.inputs is None:
            raise ConfigError("a union needs two inputs: give Pipeline({name: df, ...})")
        missing = [n for n in self.inputs if n not in self._wms]
        if missing:
            raise ConfigError(f"input(s) {missing} have no watermark: call .watermark(..., input=name) before .union()")
        cols = {w.column for w in self._wms.values()}
        if len(cols) != 1:
            raise ConfigError(f"a union's inputs need their watermarks on one column, got {sorted(cols)}")
        return self._add(UnionSpec(tuple(self.inputs), cols.pop()))

    def _event_time(self) -> str:
        col = None if self._wm is None else self._wm.column
        for st in self._stages:
            col = st.event_time(col)
        return col

    def _add(self, spec: OperatorSpec) -> "Pipeline":
        """Append a stage: the stage before learns what follows it (a window
        adds ``window_time``), and every stage's columns are checked against
        the stream's schema now, not in the first micro-batch."""
        stages = list(self._stages)
        if stages:
            stages[-1] = stages[-1].with_next(spec)
        stages.append(spec)
        schema = self._input_arrow_schema()
        for st in stages:
            schema = st.output_schema(schema)
        self._stages = stages
        return self

    def _input_arrow_schema(self) -> pa.Schema:
        """The input's Arrow schema; several inputs' as one (:func:`gpuwm.join.inputs_schema`)."""
        if self._arrow_schema is None:
            if self.inputs is not None:
                self._arrow_schema = inputs_schema({n: _arrow_schema(d.schema) for n, d in self.inputs.items()})
            else:
                self._arrow_schema = _arrow_schema(self.df.schema)
        return self._arrow_schema

    def write_parquet(self, path: str) -> "Pipeline":
        """Parquet files per batch: ``<path>/batch_id=<N>/part-<vnode>.parquet``,
        rewritten identically if Spark replays batch N."""
        self._sink = Sink("parquet", Location.of(path, what="Parquet sink path").uri, options=self._fs_options)
        return self

    def late_rows_to(self, path: str) -> "Pipeline":
        """Keep every row dropped as late aside, in Parquet (Flink's side
        output for late data): ``<path>/batch_id=<N>/*.parquet`` with the
        row's columns and ``late_reason`` — ``filter`` (behind the watermark),
        ``window closed``, ``sort released``, ``session closed`` (behind an
        operator's last drain; a hopping window's row once per closed window
        it missed) — exactly once per batch, like the main sink: as many rows
        as the batch's ``late_rows`` metrics count. A later stage of a chain
        (other columns) writes to ``<path>/_stage<i>/batch_id=<N>/``. With
        ``vnodes > 1`` a window's or session's rows then cross the shuffle
        instead of their partial aggregates."""
        self._late = Sink("parquet", Location.of(path, what="late-row sink path").uri, options=self._fs_options)
        return self

    def write_console(self, rows: int = 20) -> "Pipeline":
        self._sink = Sink("console", rows=rows)
        return self

    def _need_watermark(self, what: str) -> None:
        if self.inputs is not None:
            if not self._stages:
                raise ConfigError(f"a pipeline with inputs {list(self.inputs)} starts with .join(...) or "
                                  f".union(), then .{what}(...)")
            return
        if self._wm is None:
            raise ConfigError(f"call .watermark(...) before .{what}(...): the operator drains by the watermark")

    # -- plan ------------------------------------------------------------------
    def _plan(self) -> Plan:
        from dataclasses import replace

        if self.inputs is not None:
            missing = [n for n in self.inputs if n not in self._wms]
            if missing:
                raise ConfigError(f"input(s) {missing} have no watermark: call .watermark(..., input=name) for each")
            lateness = _filter_lateness(self._stages, next(iter(self._wms.values())).resolved_profile)
            wms = {n: w if lateness is None else replace(w, allowed_lateness=lateness) for n, w in self._wms.items()}
            return Plan(self.checkpoint, self.backend, 1 if self.vnodes is None else self.vnodes,
                        InputsSpec(tuple((n, wms[n]) for n in self.inputs)), tuple(self._stages),
                        self._sink_or_raise(), self._input_arrow_schema(), late=self._late)
        if self._wm is None:
            raise ConfigError("the pipeline has no .watermark(...)")
        self._sink_or_raise()
        wm = self._wm
        lateness = None if self._lateness_given else \
            _filter_lateness(self._stages, wm.resolved_profile)
        if lateness is not None:
            wm = replace(wm, allowed_lateness=lateness)
        return Plan(self.checkpoint, self.backend, 1 if self.vnodes is None else self.vnodes, wm,
                    tuple(self._stages), self._sink, self._input_arrow_schema(), late=self._late)

    def _sink_or_raise(self) -> Sink:
        if self._sink is None:
            raise ConfigError("the pipeline has no sink: call .write_parquet(path) or .write_console()")
        return self._sink

    def explain(self, trigger: Mapping[str, Any] | None = None) -> str:
        """The plan :meth:`start` would run, checked as it would be, as text
        (``gpuwm run --dry-run``): the watermark, each stage with its keys and
        segment, the sinks, the read mode and the trigger gpuwm gives Spark."""
        from .direct import parquet_source
        from .drain import trigger_for

        plan = self._plan()
        lines = [f"checkpoint   {plan.checkpoint}"]
        if plan.multi:
            named = input_schemas(plan.input_schema)
            for n, wm in plan.watermark.inputs:
                lines.append(f"input {n:<6} {', '.join(f'{f.name} {f.type}' for f in named[n])}")
                lines.append(f"  watermark  {_describe_wm(wm)}")
            lines.append("watermark    the minimum over the inputs'")
        else:
            lines += [f"input        {', '.join(f'{f.name} {f.type}' for f in plan.input_schema)}",
                      f"watermark    {_describe_wm(plan.watermark)}"]
        seg_of = {i: j for j, seg in enumerate(plan.segments) for i in seg.stages}
        for i, st in enumerate(plan.stages):
            seg = plan.segments[seg_of[i]]
            d = {k: v for k, v in st.describe().items() if k != "kind"}
            lines.append(f"stage {i}      {st.kind} {json.dumps(d, default=str)}  [segment {seg_of[i]}: "
                         f"{seg.tasks} task(s), keys {list(seg.keys)}]")
        lines.append(f"vnodes       {plan.vnodes}" + (" (first stage pre-aggregates before the shuffle)"
                                                      if plan.pre_aggregates else ""))
        lines.append(f"sink         {plan.sink.kind} {plan.sink.path or ''}".rstrip())
        if plan.late is not None:
            lines.append(f"late rows    parquet {plan.late.path}")
        nex = getattr(self.df, "_gpuwm_nexmark", None)
        why = None if nex is not None else self._inputs_direct() if plan.multi else parquet_source(self.df)
        lines.append(f"read         {self.read}: " + ("Spark's rows" if self.read == "spark" else
                                                      "the task makes the input itself" if why is None else
                                                      f"Spark's rows ({why})"))
        given = dict(trigger) if trigger else None
        run_with, finish = trigger_for(given)
        lines.append(f"trigger      {given or 'default'}" + (f" -> run as {run_with}, stopped by gpuwm at the end "
                                                             "of the input" if finish else ""))
        return "\n".join(lines)

    def _prepare_checkpoint(self, plan: Plan) -> None:
        """Before the query starts: the checkpoint is usable, its state is
        whole and of this pipeline, and no other query runs on it."""
        from .drain import drain_offset

        ck = self.checkpoint
        ck.loc.probe("checkpoint location", "gpuwm")
        fmt = ck.loc.read_json(Checkpoint.FORMAT_FILE)
        if fmt is None and ck.loc.list("gpuwm/state"):
            raise ConfigError(f"checkpoint {ck} holds gpuwm state in an older layout (hard-linked state directories, "
                              f"before format {FORMAT}), which this gpuwm does not read: finish it with the gpuwm that "
                              "wrote it, or start from a new checkpoint location")
        if fmt is not None and fmt.get("format") != FORMAT:
            raise ConfigError(f"checkpoint {ck} holds gpuwm state of format {fmt.get('format')}; this gpuwm reads "
                              f"format {FORMAT}: use the gpuwm that wrote it, or a new checkpoint location")
        last = ck.newest_logged_batch()
        if last is not None and drain_offset(ck, last) is None and ck.logged_offsets(last):
            raise ConfigError(
                f"checkpoint {ck} was written by a gpuwm without drain batches: Spark's offset log has "
                "no gpuwm drain source, and Spark cannot restart a query whose sources changed. Use a new "
                "checkpoint location.")
        self._check_state(ck)
        desc = plan.describe()
        old = ck.loc.read(Checkpoint.PIPELINE)
        old = None if old is None else old.decode()
        if old is not None and old != desc and not self._rescales(plan, old, desc):
            raise ConfigError(
                f"the pipeline differs from the one that wrote checkpoint {ck}; "
                "its state cannot be reused. Use a new checkpoint location, or restore the pipeline.\n"
                f"checkpoint: {old}\nnow:        {desc}")
        self._owner = Owner.take(ck)
        if fmt is None:
            ck.loc.publish_json(Checkpoint.FORMAT_FILE, {"format": FORMAT})
        if old != desc:  # a new checkpoint, or a rescale (the next batch re-partitions the state)
            ck.loc.publish_bytes(Checkpoint.PIPELINE, desc.encode())

    @staticmethod
    def _check_state(ck: Checkpoint) -> None:
        """gpuwm's state reaches Spark's last committed batch and every file
        its last commit names is there; else the checkpoint is refused (it
        would restart from other state than Spark's offsets say)."""
        spark_done = ck.spark_batches("commits")
        ours = ck.committed_batches()
        if spark_done and (not ours or ours[-1] < spark_done[-1]):
            have = f"gpuwm's last commit is batch {ours[-1]}" if ours else \
                f"there is no gpuwm state ({ck}/gpuwm/commits is empty or missing)"
            raise StateError(f"gpuwm: checkpoint {ck} is damaged: Spark has committed batch {spark_done[-1]} but "
                             f"{have}; restore {ck}/gpuwm from a backup, or start from a new checkpoint location")
        if ours:
            c = ck.commit(ours[-1])
            missing = ck.loc.missing(list(c.get("files", ())) + [c["filter"]])
            if missing:
                raise StateError(f"gpuwm: checkpoint {ck} is damaged: batch {ours[-1]}'s state is missing "
                                 f"{len(missing)} file(s), e.g. {ck}/{missing[0]}; restore it from a backup, or start "
                                 "from a new checkpoint location")

    def _rescales(self, plan: Plan, old: str, new: str) -> bool:
        """The pipelines differ only in ``vnodes`` (online rescale): True when
        every stage's state can be re-partitioned, else a ConfigError."""
        a, b = json.loads(old), json.loads(new)
        if {k: v for k, v in a.items() if k != "vnodes"} != {k: v for k, v in b.items() if k != "vnodes"}:
            return False
        fixed = [f"stage {i} ({s.kind})" for i, s in enumerate(plan.stages) if not s.capabilities.rescale]
        if fixed:
            raise ConfigError(f"checkpoint {self.checkpoint!r} was written with vnodes={a.get('vnodes')}; rescaling to "
                              f"vnodes={plan.vnodes} re-partitions every stage's state by key, which "
                              f"{', '.join(fixed)} cannot do yet: keep vnodes={a.get('vnodes')}")
        log.info("gpuwm: rescaling %s from vnodes=%s to %s: the next batch re-partitions the state by key",
                 self.checkpoint, a.get("vnodes"), plan.vnodes)
        return True

    # -- run -------------------------------------------------------------------
    def start(self, *, trigger: Mapping[str, Any] | None = None, query_name: str | None = None):
        """Start the query; returns Spark's ``StreamingQuery``. ``trigger`` is
        passed to ``DataStreamWriter.trigger`` (``{"processingTime": "5
        seconds"}``, ...), except ``{"availableNow": True}`` and ``{"once":
        True}``: gpuwm runs those as ``processingTime="0 seconds"`` and stops
        the query itself once the input is exhausted, the last drains ran and
        the end of input was flushed (:mod:`gpuwm.spark.drain`: Spark would
        freeze gpuwm's drain source at the start). Data that arrives while it
        runs is processed too.

        Whatever the trigger, when no new data comes, gpuwm asks Spark for
        micro-batches without data (drains) as Spark does for its own
        stateful operators: when the watermark the next batch would drain
        with is newer (the spark profile's lag), when a split becomes idle
        under ``idle_timeout``, and at the end of a bounded input (a bounded
        Nexmark source, ``availableNow``) when the profile's
        ``end_of_input`` is ``all``."""
        from . import drain

        plan = self._plan()
        trigger, finish = drain.trigger_for(dict(trigger) if trigger else None)
        if self.read != "spark":
            from .direct import parquet_source

            nex = getattr(self.df, "_gpuwm_nexmark", None)
            if plan.multi:
                why = self._inputs_direct()
            elif nex is not None:  # offsets come from this query's own offset log
                why = None if nex["checkpoint"] == self.checkpoint.loc.uri else \
                    "read_nexmark() was given another checkpoint than the Pipeline"
            else:
                why = parquet_source(self.df)
            if why is not None and self.read == "direct":
                raise ConfigError(f"read='direct' cannot read this input itself: {why}")
            self._direct = why is None
        for what, sink in (("Parquet sink", plan.sink), ("late-row sink", plan.late)):
            if sink is not None and sink.kind == "parquet":
                sink.location.probe(what)
        self._prepare_checkpoint(plan)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        df = drain.with_drains(self.df, self.checkpoint)
        writer = df.writeStream.foreachBatch(partial(self._run_batch, plan)).option(
            "checkpointLocation", self.checkpoint.loc.uri)
        if trigger:
            writer = writer.trigger(**trigger)
        if query_name or self.name:
            writer = writer.queryName(query_name or self.name)
        try:
            q = writer.start()
        except BaseException:
            self._owner.release()
            raise
        self._owner.watch(q)
        if finish:
            drain.Finisher(q, partial(self._ask_end, plan))
        return q

    def _run_batch(self, plan: Plan, df, batch_id: int) -> None:
        import time

        from . import drain

        t0 = time.perf_counter()
        ck = plan.checkpoint
        self._owner.check()
        committed = ck.committed_batches()
        if batch_id in committed:  # committed before a crash that Spark's commit did not outlive:
            # its output and state are all written; only the drain request may be missing
            return self._recommit(plan, batch_id)
        prev_commit = ck.commit(batch_id - 1) if (batch_id - 1) in committed else None
        if prev_commit is None and committed and min(committed) < batch_id:
            raise StateError(f"gpuwm: state for batch {batch_id - 1} is missing under {ck}/gpuwm "
                             f"(have {committed}); the checkpoint was damaged")
        prev = None if prev_commit is None else store.Prev.of(prev_commit)
        fstate = None
        if prev is not None:  # the filter's state after batch_id - 1: read already if this driver committed it
            name = prev_commit["filter"]
            fstate = self._last_filter[1] if self._last_filter[0] == name else ck.read_filter(name)
        now = ck.now_for_batch(batch_id, datetime.now(timezone.utc).isoformat())
        end = drain.ends_input(ck, batch_id)
        flow = _spark_schema(FLOW_SCHEMA)
        t_job = time.perf_counter()
        clear_batch(plan, batch_id)  # an earlier attempt's parts (over another number of vnodes, after a rescale)
        direct, parts = self._direct_input(plan, df, batch_id)
        if direct is not None:  # the tasks read / generate the input; Spark hands them part numbers
            df = self.spark.range(0, parts, 1, parts if plan.vnodes > 1 else 1)
        if plan.vnodes == 1:
            # one state partition: one narrow stage, no shuffle (input
            # partitions are concatenated in order inside the task)
            res = df.coalesce(1).mapInArrow(
                partial(tasks.single_task, plan, fstate, now, batch_id, prev, direct=direct, end=end), flow)
        else:
            s1 = tasks.stage1_schema(plan)
            stage1 = df.mapInArrow(partial(tasks.filter_task, plan, fstate, direct=direct, batch_id=batch_id,
                                           now_iso=now, end=end), _spark_schema(s1))
            if plan.aligned:  # one more task reads the rows alignment held back (before the new rows)
                stage1 = stage1.unionByName(self.spark.range(0, 1, 1, 1).mapInArrow(
                    partial(tasks.filter_task, plan, fstate, direct={"held": True}, partition=-1,
                            batch_id=batch_id, now_iso=now, end=end), _spark_schema(s1)))
            ticks = self.spark.range(plan.vnodes).selectExpr("cast(id as int) as __vnode",
                                                             f"cast({tasks.KIND_TICK} as tinyint) as __kind")
            rows = stage1.unionByName(ticks, allowMissingColumns=True)
            # a hash shuffle on the vnode (no sort, unlike groupBy().applyInArrow)
            res = rows.repartition(plan.vnodes, "__vnode").mapInArrow(
                partial(tasks.vnodes_task, plan, fstate, now, batch_id, prev, end=end), flow)
            for seg in range(1, len(plan.segments)):  # each later segment: its own exchange, same job
                res = res.repartition(plan.segments[seg].tasks, "__dest").mapInArrow(
                    partial(tasks.segment_task, plan, seg, batch_id, prev), flow)
            if plan.range_exchange:  # the sort's released rows, by event-time range, merged range by range
                res = res.repartition(plan.vnodes, "__dest").mapInArrow(partial(merge_task, plan, batch_id), flow)
        res = [r for r in res.collect() if r["__metrics"] is not None]
        t_job = time.perf_counter() - t_job
        results = [json.loads(r["__metrics"]) for r in res]
        versions, files, filter_name = store.committed_versions(results)
        m = self._batch_metrics(plan, batch_id, results)
        m.update(wall_s=time.perf_counter() - t0, job_s=t_job, read="spark" if direct is None else "direct")
        if direct is not None and m["input_rows"]:  # Spark's scan did not run: its progress gets gpuwm's count
            from .direct import report_input_rows

            if plan.multi:
                report_input_rows(self.spark, ck, m.get("input_rows_by_input", {}),
                                  dict(zip(self.inputs, self._input_dirs)))
            else:
                report_input_rows(self.spark, ck, m["input_rows"])
        new_filter = ck.read_filter(filter_name)
        filt = _driver_filter(plan.watermark, plan.input_schema, new_filter)
        t_now = datetime.fromisoformat(now)
        m.update(end_of_input=end, processing_time=now, splits=len(filt.split_watermarks),
                 idle_splits=filt.idle_splits(t_now), held_back_splits=filt.held_back(t_now),
                 held_rows=filt.held_rows if plan.aligned else 0)
        # the console sink's rows: exchange pieces, gone once the batch is committed
        outs = [ck.loc.read_table(r["output"]) for r in results if "output" in r]
        t_commit = time.perf_counter()
        self._owner.check()
        ck.write_commit(batch_id, versions, files, filter_name, m)
        self._last_filter = (filter_name, new_filter)  # an attempt-unique name: the same name, the same bytes
        m["commit_s"] = time.perf_counter() - t_commit
        due, ending = self._next_drain(plan, batch_id, filt, t_now)
        drain.write_request(ck, batch_id, due=due, end=ending)
        self.history.append(m)
        if plan.sink.kind == "console":
            print(f"-------- gpuwm batch {batch_id}: {sum(t.num_rows for t in outs)} row(s) --------")
            if outs:
                print(pa.concat_tables(outs).slice(0, plan.sink.rows).to_pandas().to_string(index=False))
        if self.verbose:
            wm = m["output_watermark"]
            if end and plan.watermark.resolved_profile.end_of_input == "all":
                wm = "+inf (end)"
            elif wm is not None and is_timestamp(plan):
                wm = gpuwm_time(wm)
            what = "end of input" if end else "no new data" if direct is None and not m["input_rows"] else \
                f"{m['input_rows'] / m['wall_s']:9,.0f} events/s"
            print(f"{self.name + ' ' if self.name else ''}batch {batch_id:3d}: rows {m['input_rows']:8,}  "
                  f"late {m['late_rows']:6,}  watermark {wm}  emitted {m['rows_emitted']:7,}  "
                  f"state rows {m['state_rows']:8,}  {what}  ({m['backend']})", flush=True)
        if self.on_batch:
            self.on_batch(m)

    def _recommit(self, plan: Plan, batch_id: int) -> None:
        """Spark replays ``batch_id``, which gpuwm committed before the
        driver stopped: nothing runs again (a commit is written once); the
        drain request after it is asked for again."""
        from . import drain

        c = self.checkpoint.commit(batch_id)
        m = dict(c["metrics"])
        filt = _driver_filter(plan.watermark, plan.input_schema, self.checkpoint.filter_state(batch_id))
        due, ending = self._next_drain(plan, batch_id, filt, datetime.fromisoformat(m["processing_time"]))
        drain.write_request(self.checkpoint, batch_id, due=due, end=ending)
        m["replayed"] = True
        self.history.append(m)
        if self.verbose:
            print(f"{self.name + ' ' if self.name else ''}batch {batch_id:3d}: committed by gpuwm before the restart; "
                  "Spark's replay of it writes nothing again", flush=True)
        if self.on_batch:
            self.on_batch(m)

    def _next_drain(self, plan: Plan, batch_id: int, filt: Any, now: datetime) -> tuple[float | None, bool]:
        """When (wall time, seconds) the micro-batch after ``batch_id`` should
        run even without new data, and whether it ends the input; (None,
        False): not before new data."""
        if filt.ended and filt.profile.end_of_input == "all":
            return None, False  # everything was released; later rows are late
        due: float | None = None
        w, drained = filt.watermark_raw, filt.output_watermark_raw
        if w is not None and w != drained:  # spark's lag: the next batch drains with a newer watermark
            due = now.timestamp()
        ending = not filt.ended and (filt.profile.end_of_input == "all" or (plan.aligned and filt.held_rows > 0)) \
            and self._input_ended(batch_id)
        if ending:
            due = now.timestamp()
        if plan.aligned and filt.releasable(now):  # alignment: a split held back may read on
            due = now.timestamp()
        idle_at = filt.next_idle(now)
        if idle_at is not None and due is None:  # a split goes idle then: the combined watermark may move
            due = idle_at.timestamp()
        return due, ending

    def _input_ended(self, batch_id: int) -> bool:
        """The input is bounded and ``batch_id`` read its last rows (a Nexmark
        source with ``totalEvents``)."""
        nex = getattr(self.df, "_gpuwm_nexmark", None)
        if nex is None:
            return False
        from .nexmark import nexmark_end
        from .nexmark import config_from_options

        total = config_from_options(nex["options"])[1]
        return total > 0 and nexmark_end(self.checkpoint, batch_id) == total

    def _ask_end(self, plan: Plan) -> bool:
        """(:class:`~gpuwm.spark.drain.Finisher`, the query idle) Ask for the
        end-of-input drain when the profile's end releases more than the
        final watermark and it has not run; True when asked."""
        from . import drain

        committed = self.checkpoint.committed_batches()
        if not committed:
            return False
        last = committed[-1]
        filt = _driver_filter(plan.watermark, plan.input_schema, self.checkpoint.filter_state(last))
        if filt.ended:
            return False
        if plan.watermark.resolved_profile.end_of_input != "all" and not (plan.aligned and filt.held_rows):
            return False  # (rows held back by alignment are read at the end, whatever the profile)
        drain.write_request(self.checkpoint, last, due=0.0, end=True)
        return True

    @staticmethod
    def _batch_metrics(plan: Plan, batch_id: int, per: list[dict]) -> dict:
        """One batch's metrics from its tasks' results: the filter's (from
        a first-segment task), per stage summed over the vnodes, the totals."""
        tasks_ = sorted((p for p in per if "segment" in p), key=lambda p: (p["segment"], p["vnode"]))
        merged = [p for p in per if "range" in p]
        head = tasks_[0]
        last = [p for p in tasks_ if p["segment"] == len(plan.segments) - 1]
        emitted = sum(p["rows_emitted"] for p in last)
        if merged and sum(x["rows"] for x in merged) != emitted:
            raise StateError(f"gpuwm: batch {batch_id}: the sort's vnodes released {emitted} rows but its ranges "
                             f"wrote {sum(x['rows'] for x in merged)}; the batch is not committed")
        stages: dict[str, dict] = {}
        for p in tasks_:
            for i, st in p["stages"].items():
                acc = stages.setdefault(i, {"kind": plan.stages[int(i)].kind})
                for k, v in st.items():
                    acc[k] = acc.get(k, 0) + v
        return {
            "batch_id": batch_id, "input_rows": head["input_rows"], "late_rows": head["late_rows"],
            "null_rows": head["null_rows"], "rows_emitted": emitted,
            "state_rows": sum(st["state_rows"] for st in stages.values()),
            "state_bytes": sum(st["state_bytes"] for st in stages.values()),
            "watermark": head["watermark"], "output_watermark": head["output_watermark"],
            "kernel_s": sum(p["kernel_s"] for p in tasks_), "state_save_s": sum(p["state_save_s"] for p in tasks_),
            "backend": head["backend"], "vnodes": plan.vnodes, "max_event_time": head["max_event_time"],
            "watermark_lag": None if head["watermark"] is None or head["max_event_time"] is None
            else head["max_event_time"] - head["watermark"],
            "filter_tasks_s": head["filter_task_s"], "source_read_s": head["read_s"],
            "rows_released": head.get("rows_released", 0),
            **({"input_rows_by_input": head["input_rows_by_input"]} if "input_rows_by_input" in head else {}),
            "vnode_tasks_s": sum(p["vnode_task_s"] for p in tasks_),
            "merge_tasks_s": sum(x["merge_task_s"] for x in merged),
            "stages": [stages.get(str(i), {"kind": s.kind}) for i, s in enumerate(plan.stages)],
        }

    def _inputs_direct(self) -> str | None:
        """Why several inputs cannot be read directly (None: each is a plain
        local Parquet file stream, and their directories tell their files apart)."""
        from .direct import parquet_source, source_path

        dirs = []
        for name, d in self.inputs.items():
            why = parquet_source(d)
            if why is None and source_path(d) is None:
                why = "its directory is not known"
            if why is not None:
                return f"input {name!r}: {why}"
            dirs.append(Location.of(source_path(d), what="source path").uri.rstrip("/") + "/")
        if any(a != b and (a.startswith(b) or b.startswith(a)) for a in dirs for b in dirs):
            return "one input's directory holds another's"
        self._input_dirs = dirs
        return None

    def _direct_input(self, plan: Plan, df, batch_id: int) -> tuple[dict | None, int]:
        """What the tasks make this batch's input from themselves (and into
        how many parts), or (None, 0): Spark's rows. A batch with no input
        goes through Spark (nothing to read)."""
        if not self._direct:
            return None, 0
        from .direct import batch_files, check_files
        from .nexmark import nexmark_range

        nex = getattr(self.df, "_gpuwm_nexmark", None)
        if plan.multi:  # each file to the input whose directory holds it
            files = batch_files(df, scans_allowed=len(self.inputs))
            if files == []:
                return None, 0
            why = "its files could not be found in the batch's scans" if files is None else None
            if why is None:
                named = list(input_schemas(plan.input_schema).values())
                tagged = []
                for f in files:
                    k = next((k for k, d in enumerate(self._input_dirs) if f.startswith(d)), None)
                    if k is None:
                        why = f"file {f} is in no input's directory"
                        break
                    tagged.append([k, f])
                for k, s in enumerate(named):
                    why = why or check_files([f for j, f in tagged if j == k], s, plan.checkpoint.loc.options)
                if why is None:
                    return {"files": tagged}, len(tagged)
        elif nex is not None:
            rng = nexmark_range(self.checkpoint, batch_id)
            if rng is not None and rng[0] == rng[1]:
                return None, 0
            if rng is not None:
                from .nexmark import config_from_options

                splits = config_from_options(nex["options"])[0].splits
                return {"nexmark": {"options": nex["options"], "start": rng[0], "end": rng[1]}}, splits
            why = "its offsets are not in Spark's offset log"
        else:
            files = batch_files(df)
            if files == []:
                return None, 0
            why = "its files could not be found in the batch's scan" if files is None else \
                check_files(files, plan.input_schema, plan.checkpoint.loc.options)
            if why is None:
                return {"files": files}, len(files)
        if self.read == "direct":
            raise ConfigError(f"read='direct' cannot read this micro-batch itself: {why}")
        if not self._warned_direct:
            self._warned_direct = True
            log.warning("gpuwm: a micro-batch goes through Spark's reader: %s", why)
        return None, 0


def _filter_lateness(stages: Sequence[OperatorSpec], profile: Any) -> Any:
    """The allowed lateness the watermark filter needs: that of the first
    stage that takes the filter's rows as more than rows passed through
    (:meth:`~gpuwm.operator.OperatorSpec.filter_lateness`; None: none)."""
    first = next((s for s in stages if not s.capabilities.passes_rows), None)
    return None if first is None else first.filter_lateness(profile)


def _union_inputs(inputs: Mapping[str, Any]):
    """Several streaming DataFrames as one stream of :func:`~gpuwm.spark.plan.union_schema`
    rows: each row tagged with its input's index, its columns renamed apart."""
    from pyspark.sql import functions as F

    out = None
    for i, d in enumerate(inputs.values()):
        cols = [F.lit(i).cast("tinyint").alias(INPUT)] + [F.col(f"`{c}`").alias(union_column(i, c)) for c in d.columns]
        d = d.select(*cols)
        out = d if out is None else out.unionByName(d, allowMissingColumns=True)
    return out


def _arrow_schema(spark_schema) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema)


def _describe_wm(wm: WatermarkSpec) -> str:
    prof = wm.resolved_profile
    how = (f"expr {wm.expr!r} per row" if wm.expr is not None else f"column {wm.candidate!r} per row"
           if wm.candidate is not None else f"{wm.column} - {wm.delay} on rows marked by {wm.punctuated!r}"
           if wm.punctuated is not None else f"{wm.column} - {wm.delay}")
    if wm.every is not None:
        how += f", emitted every {wm.every}{' rows' if isinstance(wm.every, int) else ' of event time'}"
    return (f"{how} (profile {prof.name}: emit {prof.emit}, combine {prof.combine}, lag {prof.lag}, "
            f"end of input {prof.end_of_input}; split {wm.split}, idle_timeout {wm.idle_timeout}, "
            f"allowed_lateness {wm.allowed_lateness}"
            + ("" if wm.max_drift is None else f"; splits more than {wm.max_drift} ahead held back") + ")")


def _driver_filter(spec: Any, schema: pa.Schema, state: bytes | None = None) -> Any:
    """The watermark filter on the driver (CPU; a few values per split), bound
    to the input schema — which checks the delay's unit — and restored from
    a committed batch's state."""
    f = spec.build("cpu").bind(schema)
    return f if state is None else f.restore(bytes_to_table(state))


def gpuwm_time(raw_us: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(raw_us / 1e6, tz=timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
