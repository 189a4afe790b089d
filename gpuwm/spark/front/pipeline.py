"""A small builder over a streaming DataFrame: watermark -> operator -> sink::

    from gpuwm.spark import Pipeline, read_nexmark
    q = (Pipeline(read_nexmark(spark, "ck/"), checkpoint="ck/")
           .watermark("date_time", delay="4 seconds", split="split", profile="spark")
           .window(gpuwm.Tumble("date_time", "10 seconds"), by=["auction"],
                   aggs={"bids": ("*", "count"), "max_price": ("price", "max")})
           .write_parquet("out/q_tumble")
           .start())

(``tests/test_spark.py`` runs this shape end to end.)

The builder knows no operator kind: each stage is a spec from the stage
registry (:func:`gpuwm.operator.stage_from_json`; :meth:`Pipeline.add`,
:meth:`Pipeline.stage`), checked against what it joins
(:class:`~gpuwm.operator.StageContext`) and the stages before it, before
the query starts. :meth:`Pipeline.start` hands the plan to the driver,
which launches the query (:mod:`gpuwm.spark.driver.launch`). Each micro-batch
runs through ``foreachBatch`` as one Spark job (:mod:`gpuwm.spark.driver.loop`
on the driver, :mod:`gpuwm.spark.executor.tasks` in the tasks).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa

from ...errors import ConfigError, SchemaError
from ...inputs import InputsSpec, input_schemas, inputs_schema
from ...operator import OperatorSpec, StageContext
from ...watermark import EXPR_COLUMN, WatermarkSpec
from ..catalyst.schema import arrow_schema
from ..driver.launch import launch, sink_schema, union_inputs
from ..driver.loop import driver_filter
from ..executor.plan import Plan, Sink, check_stages, graph_text
from ..storage.checkpoint import Checkpoint, Location, spark_fs_options

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
        (:mod:`gpuwm.spark.storage.checkpoint`), with the file-system settings
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
        through the JVM (several times faster; :mod:`gpuwm.spark.driver.direct`
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
            if not df:
                raise ConfigError("Pipeline({name: df, ...}) takes one or more named inputs, got none")
            for input_name, d in df.items():
                if not isinstance(input_name, str) or not input_name:
                    raise ConfigError(f"input names must be non-empty strings, got {input_name!r}")
                if not getattr(d, "isStreaming", False):
                    raise ConfigError(f"input {input_name!r} is not a streaming DataFrame (spark.readStream...)")
            self.inputs = dict(df)
            df = union_inputs(self.inputs)
        elif not getattr(df, "isStreaming", False):
            raise ConfigError("Pipeline needs a streaming DataFrame (spark.readStream...), or named ones "
                              "({name: df, ...}) for a join")
        read = read or df.sparkSession.conf.get("spark.gpuwm.read", "auto")
        if read not in ("auto", "direct", "spark"):
            raise ConfigError(f"read must be 'auto', 'direct' or 'spark', got {read!r}")
        self.read = read
        self.df = df
        self.spark = df.sparkSession
        self._fs_options = spark_fs_options(self.spark)
        self.checkpoint = Checkpoint(Location.of(checkpoint, self._fs_options, "checkpoint"))
        self.vnodes = vnodes
        self.backend = backend or self.spark.conf.get("spark.gpuwm.backend", "auto")
        self.on_batch = on_batch
        self.verbose = verbose
        self.name = name
        self._wm: WatermarkSpec | None = None
        self._wms: dict[str, WatermarkSpec] = {}  # several inputs: each one's
        self._shared: list[tuple[str, ...]] = []  # inputs that read one watermark (shared_watermark)
        self._stages: list[OperatorSpec] = []
        self._graph: list[tuple[str, tuple[str, ...]]] = []  # each stage's name and the streams it reads
        self._sink: Sink | None = None
        self._foreach: tuple | None = None  # a foreachBatch sink's (function, Spark schema or None): driver side
        self._late: Sink | None = None
        self._output: list | None = None
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
        expr = knobs.get("expr")
        if expr is not None:
            if self.inputs is not None:
                raise ConfigError("a watermark 'expr' takes one input for now: with several, compute it as a "
                                  "column of that input and name it as the watermark's 'candidate'")
            schema = self._with_watermark_expr(column, expr)
        wm = watermark_spec(column, delay, split=split, profile=profile, emit=emit, idle_timeout=idle_timeout,
                            max_drift=max_drift, candidate=candidate, punctuated=punctuated, every=every, **knobs)
        # the delay (and lateness, drift) in the column's unit: a duration on an integer column, or an int on a
        # timestamp, is refused here, not in the first micro-batch
        if self.inputs is not None:
            driver_filter(wm, arrow_schema(schema))
            self._wms[input] = wm
        else:
            driver_filter(wm, self._input_arrow_schema())
            self._wm = wm
        return self

    def shared_watermark(self, *inputs: str) -> "Pipeline":
        """``inputs`` read one watermark: theirs is the highest of their
        watermarks, and the combined one the minimum over the rest and it.
        Spark's one ``withWatermark`` node read twice (Nexmark q7's bids,
        joined and aggregated, each read with other filters) is one watermark
        in Spark (its ``WatermarkTracker`` keeps one per node id, raised by
        each read's rows): ``accelerate`` says so for such reads."""
        if self.inputs is None or any(n not in self.inputs for n in inputs) or len(set(inputs)) < 2:
            raise ConfigError(f"shared_watermark takes two or more of the pipeline's inputs "
                              f"({list(self.inputs or [])}), got {list(inputs)}")
        self._shared.append(tuple(inputs))
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
             how: str = "inner", window: Mapping[str, Any] | None = None,
             where: Sequence[Sequence[str]] = (), *, name: str | None = None,
             output_behind: Any = None) -> "Pipeline":
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
        watermark closes it — under profile ``spark`` as they match, as
        Spark's join with the window in its keys (see
        :class:`gpuwm.join.WindowJoin`). Or, with neither and the two
        watermark columns as a pair in ``on``, a join on equal event times
        (Spark's ``ts = ts2`` among its keys).

        A bound None in ``between`` (an inner join's): none on that side, so
        the other side's rows stay in state (Spark's join with a one-sided
        range, Nexmark q4's ``b_ts BETWEEN a_ts AND expires``). ``where``:
        ``[column, op, column]`` comparisons (``<``, ``<=``, ``>``, ``>=``,
        ``=``, ``!=``), one column of each input, that a pair must pass too
        (Spark's post-join filter: ``[["b_ts", "<=", "expires"]]``).

        ``left`` and ``right`` may name earlier stages too (``name=`` of a
        stage): a join of a stage's output (a graph of stages, Nexmark
        q7's bids joined with their window's maximum), whose time column is
        that stage's event time (a window's ``window_time``).
        ``output_behind`` (an interval join's): how far its output watermark
        trails its input's, where Spark's is not the least of the sides'
        state watermarks (a bound by a window aggregation's ``window.end``,
        Nexmark q7's: :attr:`gpuwm.join.IntervalJoinSpec.output_behind`)."""
        opts = {"left": left, "right": right, "on": on, "how": how}
        opts.update({k: v for k, v in (("between", between), ("window", window), ("where", list(where) or None),
                                       ("output_behind", output_behind)) if v is not None})
        return self.add("join", name=name, **opts)

    def sort(self, key: Sequence[str] = ()) -> "Pipeline":
        """Release rows in event-time order, append-only: one ordered stream,
        batch after batch and, within a batch, part file after part file
        (``vnodes > 1``: the vnodes' released rows are merged by event-time
        range). The last stage of a pipeline."""
        return self.add("sort", key=key)

    def window(self, window: Any, by: Sequence[str] = (), aggs: Mapping[str, tuple[str, str]] | None = None,
               emit: str = "on-window-close", *, name: str | None = None, input: str | None = None) -> "Pipeline":
        """Tumbling, hopping or session aggregation emitted when the watermark
        closes a window (session windows: on window close only). The
        window's column is the event-time column of its input: the
        watermark's column for the first stage, ``window_time`` after a
        window. ``name``/``input``: see :meth:`stage`."""
        from ...window import WindowSpec  # the one builder method whose argument is an object, not JSON

        return self.stage(WindowSpec(window, by, aggs, emit), name=name, input=input)  # a SessionSpec for a Session

    def dedup(self, key: Sequence[str], forever: bool = False) -> "Pipeline":
        """Spark's ``dropDuplicatesWithinWatermark(key)``: a key's first row
        passes at once; later rows with the key are dropped until its first
        event time + the watermark's delay <= the watermark (see
        :class:`gpuwm.Dedup`); the dropped rows are counted per stage
        (``duplicate_rows``). ``forever``: Spark's ``dropDuplicates(key)``
        without the event time among the keys — every key held forever, as
        Spark holds it (state grows with the distinct keys)."""
        return self.add("dedup", key=key, **({"forever": True} if forever else {}))

    def over(self, by: Sequence[str] = (), funcs: Mapping[str, Sequence[Any]] | None = None) -> "Pipeline":
        """Over-window functions per partition key on the sorted stream (after
        :meth:`sort`, ordered by its event time and key): ``funcs`` as
        ``{output: ["lag", col, n] | ["lead", col, n] | ["row_number"] |
        ["sum" | "count" | "min" | "max", col]}`` (see :class:`gpuwm.Over`)."""
        return self.add("over", by=by, funcs=dict(funcs or {}))

    def union(self) -> "Pipeline":
        """All the inputs' rows as one stream (inputs with one schema, their
        watermarks on one column): the stages after it see one input whose
        watermark is the minimum over the inputs' (Spark's ``union`` of
        watermarked streams)."""
        return self.add("union")

    def add(self, kind: str, *, name: str | None = None, input: str | None = None, **options: Any) -> "Pipeline":
        """Append a stage of any registered kind from its JSON options
        (``p.add("sort", key=["id"])`` is ``{"sort": {"key": ["id"]}}``;
        :func:`gpuwm.operator.stage_from_json`); ``name``/``input``: see
        :meth:`stage`."""
        from ...operator import stage_class

        cls = stage_class(kind)
        self._need_watermark(kind, cls.takes_inputs, input)
        return self.stage(cls.from_json(options, self._context(None if cls.takes_inputs else self._feed(input))),
                          name=name, input=input)

    def stage(self, spec: OperatorSpec, *, name: str | None = None, input: str | None = None) -> "Pipeline":
        """Append any operator spec as the next stage (what :meth:`add` and
        the builder methods do): checked against what it joins
        (:meth:`~gpuwm.operator.OperatorSpec.check`, the stage order of
        :func:`~gpuwm.spark.executor.plan.check_stages`, every stage's columns).

        A graph of stages (named inputs, ``Pipeline({name: df, ...})``): ``name``
        names the stage's output, which later stages may read — ``input=``
        of a one-stream stage (default: the stage before; for the first
        stage of one named input, that input), a join's ``left`` or
        ``right``. A stream may feed several stages (Nexmark q5's counts
        feed their maximum and the join back to it); each stage drains with
        the least of its inputs' output watermarks."""
        self._need_watermark(spec.kind or "stage", spec.takes_inputs, input)
        if spec.takes_inputs and input is not None:
            raise ConfigError(f"a {spec.kind} names what it reads itself ({list(spec.inputs())}); drop input=")
        feeds = tuple(spec.inputs()) if spec.takes_inputs else (self._feed(input),)
        ctx = self._context(None if spec.takes_inputs else feeds[0])
        for n in spec.inputs():
            if n not in ctx.times:
                ctx.watermark(n)  # an input it takes is one of the pipeline's, with a watermark
        spec.check(ctx)
        names = [n for n, _ in self._graph] + list(self.inputs or ())
        if name is not None and (not isinstance(name, str) or not name or name in names):
            raise ConfigError(f"stage name {name!r} is taken or empty; the streams so far are {names}")
        return self._add(spec, name or f"stage{len(self._stages)}", feeds)

    def _feed(self, input: str | None) -> str:
        """The stream a one-stream stage reads: ``input``, else the stage
        before, else the one named input (``""``: the one unnamed input)."""
        streams = list(self.inputs or ()) + [n for n, _ in self._graph]
        if input is not None:
            if self.inputs is None:
                raise ConfigError(f"input={input!r}: naming what a stage reads needs named inputs: "
                                  "Pipeline({name: df, ...}) (a spec's 'inputs')")
            if input not in streams:
                raise ConfigError(f"input={input!r} is neither an input nor a stage before; the streams are "
                                  f"{streams}")
            return input
        if self._graph:
            return self._graph[-1][0]
        return next(iter(self.inputs)) if self.inputs else ""

    def _streams(self) -> tuple[dict[str, pa.Schema], dict[str, str]]:
        """Every named stream so far (inputs, then stages) with its schema,
        and each stage's output's event-time column."""
        from ..executor.plan import graph_schemas, graph_times

        if self.inputs is None:
            return {}, {}
        schemas = input_schemas(self._input_arrow_schema())
        _, outs = graph_schemas([_followed(st) for st in self._stages], self._graph, self._input_arrow_schema())
        times = graph_times(self._stages, self._graph, {n: w.column for n, w in self._wms.items()})
        for (n, _), out in zip(self._graph, outs):
            schemas[n] = out
        return schemas, {n: times[n] for n, _ in self._graph}

    def _context(self, feed: str | None = None) -> StageContext:
        """What the next stage joins: the stream ``feed`` (None: a stage that
        takes named streams itself), and every named stream so far."""
        if self.inputs is None:
            wms: dict[str | None, WatermarkSpec] = {} if self._wm is None else {None: self._wm}
            last = self._stages[-1] if self._stages else None
            return StageContext(self._event_time(), wms, {}, last, self._other_times(None))
        wms = dict(self._wms)
        streams, times = self._streams()
        made = {n: st for (n, _), st in zip(self._graph, self._stages)}
        before = made.get(feed) if feed is not None else None
        if feed is not None and feed in self.inputs:
            if feed in wms:
                wms[None] = wms[feed]  # a stage over one named input: that input's watermark is its watermark
            event_time = wms[feed].column if feed in wms else None
        else:
            event_time = times.get(feed) if feed is not None else None
        return StageContext(event_time, wms, streams, before, self._other_times(feed), times)

    def _other_times(self, name: str | None) -> tuple[str, ...]:
        """The other event-time columns the stream ``name``'s watermark
        covers (:meth:`~gpuwm.operator.OperatorSpec.other_times`, through
        the stages that pass rows on); in a chain, the last stage's output's."""
        if self.inputs is None:
            others: tuple[str, ...] = ()
            for st in self._stages:
                others = st.other_times(others)
            return others
        made = {n: (st, feeds) for (n, feeds), st in zip(self._graph, self._stages)}
        if name not in made:  # an input (or none)
            return ()
        st, feeds = made[name]
        return st.other_times(self._other_times(feeds[0]) if len(feeds) == 1 else ())

    def _event_time(self) -> str | None:
        col = None if self._wm is None else self._wm.column
        for st in self._stages:
            col = st.event_time(col)
        return col

    def _add(self, spec: OperatorSpec, name: str, feeds: tuple[str, ...]) -> "Pipeline":
        """Append a stage: the stages it reads learn what follows them (a
        window adds ``window_time``), and the stages' order and every
        stage's columns are checked against the stream's schema now, not in
        the first micro-batch."""
        from ..executor.plan import check_graph, graph_schemas

        stages, graph = list(self._stages), self._graph + [(name, feeds)]
        index = {n: i for i, (n, _) in enumerate(self._graph)}
        for f in feeds:
            if f in index:
                stages[index[f]] = stages[index[f]].with_next(spec)
        stages.append(spec)
        if self._is_graph(stages, graph):
            check_graph(stages, graph, tuple(self.inputs or ()), whole=False)
            graph_schemas(stages, graph, self._input_arrow_schema())
        else:
            check_stages(stages, tuple(self.inputs or ()))
            schema = self._input_arrow_schema()
            for st in stages:
                schema = st.output_schema(schema)
        self._stages, self._graph = stages, graph
        return self

    def _is_graph(self, stages: Sequence[OperatorSpec], graph: Sequence[tuple[str, tuple[str, ...]]]) -> bool:
        """Whether the stages are a graph rather than a chain: some stage
        reads other than the stage before it (the first one: the pipeline's
        input, or a join or union of all its named inputs)."""
        if self.inputs is None:
            return False
        for i, (st, (_, feeds)) in enumerate(zip(stages, graph)):
            if st.takes_inputs != (i == 0) or (sorted(feeds) != sorted(self.inputs) if i == 0
                                               else feeds != (graph[i - 1][0],)):
                return True
        return False

    def _input_arrow_schema(self) -> pa.Schema:
        """The input's Arrow schema; several inputs' as one (:func:`gpuwm.join.inputs_schema`)."""
        if self._arrow_schema is None:
            if self.inputs is not None:
                self._arrow_schema = inputs_schema({n: arrow_schema(d.schema) for n, d in self.inputs.items()})
            else:
                self._arrow_schema = arrow_schema(self.df.schema)
        return self._arrow_schema

    def write_parquet(self, path: str, layout: str = "batches", spark_schema: str = "") -> "Pipeline":
        """Parquet files per batch: ``<path>/batch_id=<N>/part-<vnode>.parquet``,
        rewritten identically if Spark replays batch N; with ``layout="spark"``,
        Spark's file sink's: ``<path>/part-<vnode>-<uuid>-c000.snappy.parquet``
        files, each batch's named in the ``<path>/_spark_metadata`` log
        (Spark's own ``FileStreamSinkLog``) before gpuwm commits it, so
        ``spark.read.parquet(path)`` and a ``readStream`` of ``path`` read
        every committed row once, as from Spark's sink (what
        ``accelerate(df)``'s ``format("parquet")`` writes). ``spark_schema``:
        the query's Spark schema (JSON) the files carry, as Spark's own do."""
        self._sink = Sink("parquet", Location.of(path, what="Parquet sink path").uri, options=self._fs_options,
                          layout=layout, spark_schema=spark_schema)
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

    def foreach_batch(self, fn: Callable[[Any, int], Any], schema: Any = None) -> "Pipeline":
        """Spark's ``foreachBatch``: ``fn(batch_df, batch_id)`` in the driver,
        once per micro-batch, with a Spark DataFrame of the batch's output
        rows (columns and types ``schema``, a Spark ``StructType``; default:
        :meth:`output_schema`'s; every column nullable, as Spark's file
        sources read them), before gpuwm commits the batch — so a batch
        Spark replays (a crash before its commit) is handed over again, with
        the same id and rows, as Spark does. The tasks stage the rows as
        Parquet under ``<checkpoint>/gpuwm/batches/``, removed once the batch
        is committed. If ``fn`` raises, nothing of the batch is committed,
        the query stops with one line naming the batch and the cause, and a
        restart runs the batch again."""
        if not callable(fn):
            raise ConfigError(f"foreach_batch takes a function (batch_df, batch_id), got {fn!r}")
        self._sink = Sink("foreachBatch", f"{self.checkpoint.loc.uri}/gpuwm/batches", options=self._fs_options)
        self._foreach = (fn, schema)
        return self

    def output(self, steps: Sequence[Sequence[Any]]) -> "Pipeline":
        """Write the last stage's rows as other columns: ``steps`` of
        :mod:`gpuwm.project` (``[[[name, expr], ...], ...]``), each
        over the one before (what :func:`gpuwm.spark.front.translate.translate` gives, to
        write Spark's columns: a ``window`` struct, the query's names);
        :meth:`output_schema` shows the result."""
        self._output = json.loads(json.dumps(steps))
        return self

    def output_schema(self) -> pa.Schema:
        """The columns the sink writes: the last stage's, through :meth:`output`."""
        return sink_schema(self._plan())

    def _need_watermark(self, what: str, takes_inputs: bool, input: str | None = None) -> None:
        """A stage ``what`` (one that takes the named inputs, or not; reading
        ``input``) may come next."""
        if self.inputs is None:
            if takes_inputs:
                raise ConfigError(f"a {what} takes named inputs: give Pipeline({{name: df, ...}}) (a spec's 'inputs')")
            if self._wm is None:
                raise ConfigError(f"call .watermark(...) before .{what}(...): the operator drains by the watermark")
        elif not self._stages and not takes_inputs and input is None and len(self.inputs) > 1:
            raise ConfigError(f"a pipeline with inputs {list(self.inputs)} starts with a stage that takes them, "
                              f".join(...) or .union(), or one that names its input (input=...), then .{what}(...)")

    # -- plan ------------------------------------------------------------------
    def _plan(self) -> Plan:
        from dataclasses import replace

        if self.inputs is not None:
            missing = [n for n in self.inputs if n not in self._wms]
            if missing:
                raise ConfigError(f"input(s) {missing} have no watermark: call .watermark(..., input=name) for each")
            profile = next(iter(self._wms.values())).resolved_profile
            graph = tuple(self._graph) if self._is_graph(self._stages, self._graph) else ()
            if graph:  # each input's filter lets through what the stages reading it count (a join drops by itself)
                read = {n: [st for st, (_, feeds) in zip(self._stages, graph) if n in feeds] for n in self.inputs}
                lateness = {n: _graph_lateness(n, read[n], profile) for n in self.inputs}
            else:
                lateness = dict.fromkeys(self.inputs, _filter_lateness(self._stages, profile))
            wms = {n: w if lateness[n] is None else replace(w, allowed_lateness=lateness[n])
                   for n, w in self._wms.items()}
            return Plan(self.checkpoint, self.backend, 1 if self.vnodes is None else self.vnodes,
                        InputsSpec(tuple((n, wms[n]) for n in self.inputs), tuple(self._shared)), tuple(self._stages),
                        self._sink_or_raise(), self._input_arrow_schema(), late=self._late, graph=graph)
        if self._wm is None:
            raise ConfigError("the pipeline has no .watermark(...)")
        wm = self._wm
        lateness = None if self._lateness_given else \
            _filter_lateness(self._stages, wm.resolved_profile)
        if lateness is not None:
            wm = replace(wm, allowed_lateness=lateness)
        return Plan(self.checkpoint, self.backend, 1 if self.vnodes is None else self.vnodes, wm,
                    tuple(self._stages), self._sink_or_raise(), self._input_arrow_schema(), late=self._late)

    def _sink_or_raise(self) -> Sink:
        from dataclasses import replace

        if self._sink is None:
            raise ConfigError("the pipeline has no sink: call .write_parquet(path), .write_console() or "
                              ".foreach_batch(fn)")
        return replace(self._sink, project=json.dumps(self._output)) if self._output else self._sink

    def explain(self, trigger: Mapping[str, Any] | None = None) -> str:
        """The plan :meth:`start` would run, checked as it would be, as text
        (``gpuwm run --dry-run``): the watermark, each stage with its keys and
        segment, the sinks, the read mode and the trigger gpuwm gives Spark."""
        from ..driver.direct import direct_reason
        from ..driver.drain import trigger_for

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
            wired = f"{graph_text(plan.graph[i:i + 1])}: " if plan.graph else ""
            lines.append(f"stage {i}      {wired}{st.kind} {json.dumps(d, default=str)}  [segment {seg_of[i]}: "
                         f"{seg.tasks} task(s), keys {list(plan.stage_keys(i))}]")
        lines.append(f"vnodes       {plan.vnodes}" + (" (first stage pre-aggregates before the shuffle)"
                                                      if plan.pre_aggregates else ""))
        lines.append(f"sink         {plan.sink.kind} {plan.sink.path or ''}".rstrip()
                     + (" (Spark's file-sink layout: its _spark_metadata log)" if plan.sink.layout == "spark" else ""))
        if plan.late is not None:
            lines.append(f"late rows    parquet {plan.late.path}")
        if isinstance(self.df, Declared):  # a dry run without Spark: the source's plan is not known yet
            lines.append(f"read         {self.read}: " + ("Spark's rows" if self.read == "spark" else
                                                          "the task makes the input itself where Spark's plan of the "
                                                          "source allows it (checked as the query starts)"))
        else:
            from ..driver.kafka import read_path

            why, _, kafka = direct_reason(self.df, self.inputs, self.checkpoint)
            itself = read_path(kafka) if kafka is not None else "the task makes the input itself"
            lines.append(f"read         {self.read}: " + ("Spark's rows" if self.read == "spark" else
                                                          itself if why is None else f"Spark's rows ({why})"))
        given = dict(trigger) if trigger else None
        run_with, finish = trigger_for(given, plan.watermark.resolved_profile.name)
        lines.append(f"trigger      {given or 'default'}" + (f" -> run as {run_with}, stopped by gpuwm at the end "
                                                             "of the input" if finish else ""))
        return "\n".join(lines)

    # -- run -------------------------------------------------------------------
    def start(self, *, trigger: Mapping[str, Any] | None = None, query_name: str | None = None):
        """Start the query; returns Spark's ``StreamingQuery`` (over a Kafka
        source, one that starts the query once more from its checkpoint
        where Spark's Kafka connector 4.1.0–4.1.2 fails after replaying a committed
        batch: :func:`~gpuwm.spark.driver.launch.restarting`). ``trigger`` is
        passed to ``DataStreamWriter.trigger`` (``{"processingTime": "5
        seconds"}``, ...), except ``{"availableNow": True}`` (and ``{"once":
        True}`` under a profile other than ``spark``): gpuwm runs those as
        ``processingTime="0 seconds"`` and stops
        the query itself once the input is exhausted, the last drains ran and
        the end of input was flushed (:mod:`gpuwm.spark.driver.drain`: Spark would
        freeze gpuwm's drain source at the start). Data that arrives while it
        runs is processed too. ``once`` under ``spark`` is Spark's: one batch
        of all the input there is; the windows it closes come out in the
        next run's first batch, as Spark's own query gives them.

        Whatever the trigger, when no new data comes, gpuwm asks Spark for
        micro-batches without data (drains) as Spark does for its own
        stateful operators: when the watermark the next batch would drain
        with is newer (the spark profile's lag), when a split becomes idle
        under ``idle_timeout``, and at the end of a bounded input (a bounded
        Nexmark source, ``availableNow``) when the profile's
        ``end_of_input`` is ``all``."""
        return launch(self._plan(), self.df, spark=self.spark, inputs=self.inputs, read=self.read, trigger=trigger,
                      query_name=query_name or self.name, name=self.name, history=self.history,
                      on_batch=self.on_batch, verbose=self.verbose, foreach=self._foreach)


def _filter_lateness(stages: Sequence[OperatorSpec], profile: Any) -> Any:
    """The allowed lateness the watermark filter needs: that of the first
    stage that takes the filter's rows as more than rows passed through
    (:meth:`~gpuwm.operator.OperatorSpec.filter_lateness`; None: none)."""
    first = next((s for s in stages if not s.capabilities.passes_rows), None)
    return None if first is None else first.filter_lateness(profile)


def _followed(st: OperatorSpec) -> OperatorSpec:
    """Stage ``st`` as a stage after it reads it (a window with
    ``window_time``): what a later stage's options are checked against
    before it is made; as it is where nothing may follow it."""
    try:
        return st.with_next(OperatorSpec())
    except ConfigError:
        return st


def _graph_lateness(name: str, readers: Sequence[OperatorSpec], profile: Any) -> Any:
    """The allowed lateness input ``name``'s filter needs in a graph: the
    one the stages reading it agree on (a join's None: it drops by its own
    last drain, as the filter would)."""
    got = {st.filter_lateness(profile) for st in readers if not st.takes_inputs}
    if len(got) > 1:
        raise ConfigError(f"input {name!r} feeds stages that count rows behind the watermark differently "
                          f"({sorted(map(str, got))}); read it with stages of one kind")
    return got.pop() if got else None


def watermark_spec(column: str, delay: Any, *, split: str | None = None, profile: str = "risingwave",
                   emit: str | None = None, idle_timeout: Any = None, max_drift: Any = None,
                   candidate: str | None = None, punctuated: str | None = None, every: Any = None,
                   **knobs: Any) -> WatermarkSpec:
    """The watermark spec :meth:`Pipeline.watermark` makes of its arguments,
    before any schema is known (``allowed_lateness`` and ``expr`` come with
    the knobs); a spec's ``watermark`` is checked with it before Spark
    starts."""
    knobs = dict(knobs)
    lateness = knobs.pop("allowed_lateness", 0)
    expr = knobs.pop("expr", None)
    return WatermarkSpec(column, delay, profile=profile, emit=emit, split=split, idle_timeout=idle_timeout,
                         max_drift=max_drift, allowed_lateness=lateness, knobs=tuple(knobs.items()),
                         candidate=candidate, punctuated=punctuated, every=every, expr=expr)


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


class Declared:
    """A spec's source whose schema gpuwm knows without Spark — the Nexmark
    source, or a Parquet stream with a declared schema of plain types and
    no ``select`` — standing in for its DataFrame where nothing runs:
    ``gpuwm run --dry-run`` checks such a spec's whole pipeline (column
    names and types included) and prints its plan without starting Spark."""

    isStreaming = True

    class _Conf:
        @staticmethod
        def get(key: str, default: Any = None) -> Any:
            return default

    def __init__(self, schema):
        self.schema = schema
        self.columns = list(schema.names)
        self.sparkSession = self
        self.conf = self._Conf()
