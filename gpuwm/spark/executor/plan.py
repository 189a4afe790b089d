"""The plan a query's tasks run: the watermark spec, the stages' operator
specs, the sink, the input schema — one frozen, picklable value, made and
checked on the driver before the first micro-batch.

A pipeline is a list of stages. Each stage's input schema and event-time
column follow from the one before (:meth:`OperatorSpec.output_schema`,
:meth:`OperatorSpec.event_time`), so a stage that cannot follow another is
refused here, not inside a task. With ``vnodes > 1`` the stages are cut into
*segments*: a stage whose partition keys differ from its segment's starts a
new one, which gets its own exchange (by the new keys; a global stage, with
no keys, on one vnode) inside the same micro-batch job.

A plan may instead be a *graph* (:attr:`Plan.graph`): each stage has a name
and names what it reads — named inputs or earlier stages — so one stream
feeds several stages (Nexmark q5's counts: their maximum and the join back
to them) and a join's side may be any stage's output (q7: the bids joined
with their window's maximum). The stages are listed in an order where each
comes after what it reads; each drains with the least of its feeds' output
watermarks (Spark's ``WatermarkPropagator``: an operator's input watermark
is the minimum of its children's output watermarks). Over several vnodes a
graph's segments are still one linear chain of exchanges
(:meth:`Plan._cut_graph`): segment 0 takes the inputs, and each stream goes
from the segment that makes it to every later segment that reads it, by the
reader's keys (:meth:`Plan.sends`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pyarrow as pa

from ...errors import ConfigError
from ...inputs import InputsSpec, input_schemas, inputs_schema, union_schema
from ...operator import OperatorSpec
from ...watermark import EXPR_COLUMN, WatermarkSpec
from ..storage.checkpoint import Checkpoint, Location

#: the key of the Parquet footer's metadata where Spark's writers keep the rows' Spark schema
SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"

#: a parquet sink's layouts: gpuwm's folder a batch, or Spark's file sink's (its files and their log)
LAYOUTS = {"batches", "spark"}


@dataclass(frozen=True)
class Sink:
    """``parquet`` (``path``; ``layout`` ``spark``: Spark's file sink's,
    ``<path>/part-<P>-<uuid>-c000.snappy.parquet`` files and the
    ``<path>/_spark_metadata`` log naming each batch's, or ``batches``:
    ``<path>/batch_id=<N>/part-<P>.parquet``),
    ``console`` (the first ``rows`` rows of each batch, printed by the
    driver) or ``foreachBatch`` (Parquet as ``parquet``, under the
    checkpoint, handed to the user's function as a DataFrame by the driver
    before the batch is committed, removed after)."""

    kind: str
    path: str | None = None
    rows: int = 20
    #: the file-system settings of ``path`` (:func:`~gpuwm.spark.storage.checkpoint.spark_fs_options`)
    options: tuple[tuple[str, str], ...] = ()
    #: the last stage's rows as the query's columns: :mod:`gpuwm.project` steps, as JSON ("": as they are)
    project: str = ""
    #: how a parquet sink lays its files out: ``batches`` (gpuwm's) or ``spark`` (Spark's file sink's)
    layout: str = "batches"
    #: the query's Spark schema (JSON) its files carry as Spark's own do (:data:`SPARK_ROW_METADATA`: Spark's
    #: readers take its columns' nullability from it), or ""
    spark_schema: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("parquet", "console", "foreachBatch"):
            raise ConfigError(f"sink must be 'parquet', 'console' or 'foreachBatch', got {self.kind!r}")
        if self.layout not in LAYOUTS or (self.layout == "spark" and self.kind != "parquet"):
            raise ConfigError(f"a {self.kind} sink's layout must be one of {sorted(LAYOUTS)}, got {self.layout!r} "
                              "(spark: a parquet sink's)")
        if self.writes_files and not self.path:
            raise ConfigError(f"a {self.kind} sink needs a path")

    @property
    def writes_files(self) -> bool:
        """Tasks write the rows as Parquet files under ``path`` (:attr:`layout`)."""
        return self.kind in ("parquet", "foreachBatch")

    @property
    def location(self) -> Location:
        return Location(self.path, self.options)

    def as_written(self, table: pa.Table) -> pa.Table:
        """``table`` with the Spark schema its file carries (:attr:`spark_schema`)."""
        if not self.spark_schema:
            return table
        return table.replace_schema_metadata({**(table.schema.metadata or {}),
                                              SPARK_ROW_METADATA: self.spark_schema.encode()})


@dataclass(frozen=True)
class Segment:
    """Consecutive stages that run in one task per vnode without an exchange
    between them. ``tasks``: how many vnodes hold their state (1 for a global
    stage after an exchange); ``keys``: the columns rows are hashed on to
    reach them."""

    stages: tuple[int, ...]
    keys: tuple[str, ...]
    tasks: int


@dataclass(frozen=True)
class Plan:
    #: the query's checkpoint; gpuwm's state under ``<checkpoint>/gpuwm/`` (:class:`Checkpoint`)
    checkpoint: Checkpoint
    backend: str
    vnodes: int
    #: one input's watermark, or several named inputs' (:class:`~gpuwm.inputs.InputsSpec`)
    watermark: WatermarkSpec | InputsSpec
    stages: tuple[OperatorSpec, ...]
    sink: Sink
    input_schema: pa.Schema
    #: rows dropped as late, kept aside (a Parquet sink), or None
    late: Sink | None = None
    #: a graph of stages (``()``: a chain): per stage, ``(its name, the names it reads)`` — named inputs or
    #: earlier stages'; a join's are its two inputs, a union's every input (:func:`check_graph`)
    graph: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: the input schema of each stage, then the output's (derived)
    schemas: tuple[pa.Schema, ...] = field(init=False)
    #: the output schema of each stage (derived)
    outputs: tuple[pa.Schema, ...] = field(init=False)
    segments: tuple[Segment, ...] = field(init=False)

    def __post_init__(self) -> None:
        if self.vnodes < 1:
            raise ConfigError(f"vnodes must be >= 1, got {self.vnodes}")
        stages = tuple(self.stages)
        graph = tuple((str(n), tuple(f)) for n, f in self.graph)
        if graph:
            check_graph(stages, graph, self.watermark.names)
            ordered = [s.kind for s in stages if s.capabilities.range_exchange or s.capabilities.needs_order]
            if self.vnodes > 1 and ordered:
                raise ConfigError(f"a graph of stages with a {ordered[0]} runs on one vnode: its ordered stream is "
                                  f"merged over the vnodes only at the end of a chain; use vnodes=1, got {self.vnodes}")
        else:
            check_stages(stages, self.watermark.names)
        if self.aligned and self.vnodes > 1 and self.watermark.resolved_profile.emit != "on-batch":
            raise ConfigError("alignment (max_drift) with vnodes > 1 needs emit='on-batch': under on-event a split's "
                              "held rows and its new ones must be read in one task; use vnodes=1 or emit='on-batch'")
        if graph:
            schemas, outputs = graph_schemas(stages, graph, self.input_schema)
            schemas.append(outputs[-1])
        else:
            schemas = [self.filtered_schema]
            for s in stages:
                schemas.append(s.output_schema(schemas[-1]))
            outputs = schemas[1:]
        object.__setattr__(self, "stages", stages)
        object.__setattr__(self, "graph", graph)
        object.__setattr__(self, "schemas", tuple(schemas))
        object.__setattr__(self, "outputs", tuple(outputs))
        object.__setattr__(self, "segments", self._cut())

    @property
    def filtered_schema(self) -> pa.Schema:
        """The rows the filter lets through: the input's, without the column
        a watermark ``expr`` was evaluated into."""
        if self.multi or self.watermark.expr is None:
            return self.input_schema
        return self.input_schema.remove(self.input_schema.get_field_index(EXPR_COLUMN))

    @property
    def drains(self) -> bool:
        """Whether the query runs micro-batches without data (drains): not
        with a window that emits ``complete`` (Spark's complete mode runs
        none: its output changes with data alone)."""
        return not any(getattr(st, "emit", None) == "complete" for st in self.stages)

    @property
    def aligned(self) -> bool:
        """Some input's watermark has a ``max_drift``: rows of splits ahead are held in the filter's state."""
        wms = [w for _, w in self.watermark.inputs] if self.multi else [self.watermark]
        return any(w.max_drift is not None for w in wms)

    @property
    def multi(self) -> bool:
        """Several named inputs (their rows reach the tasks as :func:`union_schema` rows)."""
        return bool(self.watermark.names)

    def _cut(self) -> tuple[Segment, ...]:
        if not self.stages:
            return (Segment((), (), self.vnodes),)
        if self.vnodes == 1:  # one task runs every stage: nothing to exchange
            return (Segment(tuple(range(len(self.stages))), (), 1),)
        if self.graph:
            return self._cut_graph()
        segs = [[0]]
        seg_keys = [tuple(self.stages[0].vnode_keys(self.vnodes))]
        for i, s in enumerate(self.stages[1:], start=1):
            k = tuple(s.vnode_keys(self.vnodes))
            if k != seg_keys[-1]:
                segs.append([])
                seg_keys.append(k)
            segs[-1].append(i)
        return tuple(Segment(tuple(st), k, self.vnodes if (j == 0 or k) else 1)
                     for j, (st, k) in enumerate(zip(segs, seg_keys)))

    def _cut_graph(self) -> tuple[Segment, ...]:
        """A graph's segments over several vnodes, one linear chain of
        exchanges in the graph's order: segment 0 takes the filtered inputs
        and runs no stage (its filter tasks send each input to the stages
        that read it, by their keys). A stateful stage runs in the first
        segment after those of everything it reads — beside other stages
        whose inputs are ready as early (q8's two windows, one a side), on
        as many tasks, reading none of the same streams —, or in the
        segment of the stateful stage it reads when their keys are the
        same (no exchange between them); a ``row_local`` one (a select) in
        its input stage's segment (one reading a named input as a stateful
        one: segment 0 runs no stage). A stream read in a later segment is sent there
        by the reader's keys (:meth:`sends`), its pieces passing the
        segments in between. A segment's ``keys`` are its first stage's;
        each stage's own are :meth:`stage_keys`."""
        segs: list[list[int]] = [[]]
        tasks = [self.vnodes]
        reads: list[set[str]] = [set()]  # the streams made elsewhere that each segment's stages read
        made = {n: 0 for n in self.watermark.names}  # the segment each stream is made in
        for i, (s, (name, feeds)) in enumerate(zip(self.stages, self.graph)):
            k = self.stage_keys(i)
            n = self.vnodes if k else 1
            p = self._maker(feeds[0])
            if s.capabilities.row_local and made[feeds[0]] > 0:  # (an input's reader runs after segment 0)
                j = made[feeds[0]]
            elif not s.takes_inputs and p is not None and not self.stages[p].capabilities.row_local \
                    and self.stage_keys(p) == k:
                j = made[feeds[0]]
            else:
                j = 1 + max(made[f] for f in feeds)
                while j < len(segs) and (tasks[j] != n or reads[j] & set(feeds)):
                    j += 1
                if j == len(segs):
                    segs.append([])
                    tasks.append(n)
                    reads.append(set())
            segs[j].append(i)
            reads[j].update(f for f in feeds if made[f] != j)
            made[name] = j
        return tuple(Segment(tuple(st), self.stage_keys(st[0]) if st else (), t)
                     for st, t in zip(segs, tasks))

    def stage_keys(self, stage: int) -> tuple[str, ...]:
        """The columns stage ``stage``'s rows reach its vnodes by (its
        state's partitioning: a rescale re-partitions it by them)."""
        return tuple(self.stages[stage].vnode_keys(self.vnodes))

    def _maker(self, name: str) -> int | None:
        """The stage that makes a graph's stream ``name`` (None: a named input)."""
        return next((i for i, (n, _) in enumerate(self.graph) if n == name), None)

    def stream_segment(self, name: str) -> int:
        """The segment a graph's stream is made in (0: a named input)."""
        stage = self._maker(name)
        return 0 if stage is None else next(j for j, s in enumerate(self.segments) if stage in s.stages)

    def stream_schema(self, name: str) -> pa.Schema:
        """A graph's stream's rows: a named input's, or its stage's output."""
        stage = self._maker(name)
        return input_schemas(self.input_schema)[name] if stage is None else self.outputs[stage]

    def sends(self, seg: int) -> list[tuple[int, str, tuple[str, ...]]]:
        """What segment ``seg``'s tasks send on in a graph over several
        vnodes: ``(segment, stream, keys)`` for each stream made in ``seg``
        and read by a stage of a later segment — the reader's segment, and
        the columns rows reach its vnodes by (a join's: that input's keys)."""
        out = []
        for j in range(seg + 1, len(self.segments)):
            for i in self.segments[j].stages:
                s = self.stages[i]
                for f in self.feeds(i):
                    if self.stream_segment(f) == seg:
                        out.append((j, f, tuple(s.input_keys(f) if s.takes_inputs else s.vnode_keys(self.vnodes))))
        return out

    def segment_of(self, stage: int) -> Segment:
        """The segment stage ``stage`` runs in."""
        return next(s for s in self.segments if stage in s.stages)

    # -- what the tasks ask ------------------------------------------------------
    @property
    def profile(self):
        return self.watermark.resolved_profile

    @property
    def counts_filter_late(self) -> bool:
        """The watermark filter's late rows go on to the first stage to be
        counted (not pushed) by a stage that counts late input in groups,
        as Spark's progress does (``capabilities.late_groups``: a tumbling
        or hopping window aggregation); with one task, or as partials
        (``pre_aggregates``)."""
        return (not self.graph and not self.multi and bool(self.stages) and self.stages[0].capabilities.late_groups
                and (self.vnodes == 1 or self.pre_aggregates))

    @property
    def pre_aggregates(self) -> bool:
        """The first stage's partials cross the shuffle, not rows (vnodes > 1;
        not with a late-row sink: a late row must still be a row where the
        operator finds it late)."""
        return (self.vnodes > 1 and not self.graph and bool(self.stages) and self.stages[0].capabilities.partials
                and self.late is None)

    @property
    def arrival_order(self) -> bool:
        """Rows cross the first shuffle with their input partition and
        position (``__seq``), and each vnode takes them in that order."""
        if self.graph:  # (its filter tasks write the inputs' pieces, read back in input partition order)
            return False
        return self.vnodes > 1 and bool(self.stages) and self.stages[0].capabilities.arrival_order

    @property
    def range_exchange(self) -> bool:
        """The last stage's ordered output is merged by event-time range over the vnodes."""
        return self.vnodes > 1 and bool(self.stages) and self.stages[-1].capabilities.range_exchange

    def build(self, stage: int):
        """Stage ``stage``'s operator, bound to its input schema."""
        op = self.stages[stage].build(self.profile, self.backend)
        op.bind(self.schemas[stage])
        return op

    def feeds(self, stage: int) -> tuple[str, ...]:
        """What stage ``stage`` reads: names of named inputs or earlier
        stages (:attr:`graph`); ``()`` in a chain (the stage before)."""
        return self.graph[stage][1] if self.graph else ()

    def describe(self) -> str:
        """What the checkpoint remembers: a query whose description differs cannot reuse its state."""
        d = {"version": 2, "vnodes": self.vnodes, "watermark": self.watermark.describe(),
             "stages": [s.describe() for s in self.stages],
             "input_schema": [(f.name, str(f.type)) for f in self.input_schema]}
        if self.graph:
            d["graph"] = [[n, list(f)] for n, f in self.graph]
        return json.dumps(d, sort_keys=True, default=str)


def check_stages(stages: Sequence[OperatorSpec], inputs: Sequence[str]) -> None:
    """What any list of stages must be, whatever their kinds (a builder checks
    each prefix, the plan the whole): with named ``inputs``, a first stage
    that takes them all (:meth:`~gpuwm.operator.OperatorSpec.inputs`) and
    none after; with one input, no stage that takes named ones; a stage
    that needs the ordered stream right after one that makes it, and an
    ordered stream ended there or by such a stage."""
    takes = [i for i, s in enumerate(stages) if s.takes_inputs]
    if not inputs and takes:
        raise ConfigError(f"stage {takes[0]} ({stages[takes[0]].kind}) takes named inputs "
                          f"{list(stages[takes[0]].inputs())}; this pipeline has one: give Pipeline({{name: df, ...}}) "
                          "or a spec's 'inputs'")
    if inputs and stages:
        if takes != [0]:
            raise ConfigError(f"a pipeline with inputs {list(inputs)} needs a stage that takes them (a join or a "
                              "union) as its first stage, and only there")
        extra = [n for n in inputs if n not in stages[0].inputs()]
        if extra:
            raise ConfigError(f"input(s) {extra} are not used: a {stages[0].kind} takes {list(stages[0].inputs())}; "
                              "drop them")
    for i, s in enumerate(stages):
        ordered = i > 0 and stages[i - 1].capabilities.range_exchange
        if s.capabilities.needs_order and not ordered:
            raise ConfigError(f"stage {i} ({s.kind}) needs the event-time ordered stream: put a sort "
                              "(.sort(key=[...]) / {\"sort\": {...}}) right before it")
        if ordered and not s.capabilities.needs_order:
            raise ConfigError(f"stage {i - 1} ({stages[i - 1].kind}) must be the last stage or be followed by "
                              f"an over-window: its output is one ordered stream across the vnodes, which a "
                              f"following {s.kind} would not keep")


def check_graph(stages: Sequence[OperatorSpec], graph: Sequence[tuple[str, Sequence[str]]],
                inputs: Sequence[str], whole: bool = True) -> None:
    """What a graph of stages must be (:attr:`Plan.graph`; a builder checks
    each prefix, not ``whole``: without the last rule): names distinct from each other and from
    the named ``inputs``; each stage reading named inputs or stages listed
    before it — one, or a join's (union's) own inputs, in its order; a stage
    that needs the ordered stream reading a stage that makes it, which
    feeds nothing else; every input read, and every stage but the last."""
    if len(graph) != len(stages):
        raise ConfigError(f"a graph names {len(graph)} stage(s) for {len(stages)} stage(s)")
    known = list(inputs)
    if not inputs:
        raise ConfigError("a graph of stages reads named inputs: give Pipeline({name: df}) (a spec's 'inputs')")
    made: dict[str, OperatorSpec] = {}
    for i, (s, (name, feeds)) in enumerate(zip(stages, graph)):
        if not name or name in known:
            raise ConfigError(f"stage {i} ({s.kind}) is named {name!r}, which "
                              + ("is empty" if not name else f"an input or a stage before has; the names are {known}"))
        for f in feeds:
            if f not in known:
                raise ConfigError(f"stage {i} ({s.kind}) reads {f!r}, which is neither an input nor a stage before "
                                  f"it; it may read {known}")
        if s.takes_inputs:
            if tuple(feeds) != tuple(s.inputs()):
                raise ConfigError(f"stage {i} ({s.kind}) takes {list(s.inputs())}, but the graph gives it "
                                  f"{list(feeds)}")
        elif len(feeds) != 1:
            raise ConfigError(f"stage {i} ({s.kind}) reads one stream, got {list(feeds)}")
        for f in feeds:
            before = made.get(f)
            ordered = before is not None and before.capabilities.range_exchange
            if s.capabilities.needs_order and not ordered:
                raise ConfigError(f"stage {i} ({s.kind}) needs the event-time ordered stream: it must read a sort")
            if ordered and not s.capabilities.needs_order:
                raise ConfigError(f"stage {f!r} ({before.kind}) must be the last stage or be read by an over-window "
                                  f"only: its output is one ordered stream, which a {s.kind} would not keep")
        made[name] = s
        known.append(name)
    if not whole:
        return
    read = {f for _, feeds in graph for f in feeds}
    unread = [n for n in list(inputs) + [n for n, _ in graph[:-1]] if n not in read]
    if unread:
        raise ConfigError(f"{unread} feed no stage: every input and every stage but the last is read by a stage "
                          "after it (the last one's rows go to the sink)")


def graph_text(graph: Sequence[tuple[str, Sequence[str]]]) -> str:
    """A graph in a short line: ``maxp <- bids; j <- bids, maxp``."""
    return "; ".join(f"{n} <- {', '.join(f)}" for n, f in graph)


def graph_schemas(stages: Sequence[OperatorSpec], graph: Sequence[tuple[str, Sequence[str]]],
                  input_schema: pa.Schema) -> tuple[list[pa.Schema], list[pa.Schema]]:
    """Each stage's input schema and output schema in a graph (a join's
    input: :func:`~gpuwm.inputs.inputs_schema` of what it reads)."""
    out = dict(input_schemas(input_schema))
    ins, outs = [], []
    for s, (name, feeds) in zip(stages, graph):
        schema = inputs_schema({f: out[f] for f in feeds}) if s.takes_inputs else out[feeds[0]]
        ins.append(schema)
        out[name] = s.output_schema(schema)
        outs.append(out[name])
    return ins, outs


def graph_times(stages: Sequence[OperatorSpec], graph: Sequence[tuple[str, Sequence[str]]],
                columns: Mapping[str, str]) -> dict[str, str]:
    """The event-time column of every named stream in a graph: the named
    inputs' watermark ``columns``, then each stage's output's."""
    times = dict(columns)
    for s, (name, feeds) in zip(stages, graph):
        times[name] = s.event_time(times[feeds[0]])
    return times


def is_timestamp(plan: Plan) -> bool:
    if plan.multi:
        name, wm = plan.watermark.inputs[0]
        return pa.types.is_timestamp(input_schemas(plan.input_schema)[name].field(wm.column).type)
    return pa.types.is_timestamp(plan.input_schema.field(plan.watermark.column).type)


def partial_schema(plan: Plan) -> pa.Schema:
    """The partials the first stage pre-aggregates (``plan.pre_aggregates``)."""
    return plan.build(0).partial_schema()


#: a row's input partition (high 32 bits) and position in it (low 32 bits)
SEQ = "__seq"


def shuffled_schema(plan: Plan) -> pa.Schema:
    """The data rows the filter tasks send to the vnodes."""
    if plan.multi:
        return union_schema(plan.input_schema)
    if plan.pre_aggregates:
        return partial_schema(plan)
    if plan.arrival_order:
        return plan.filtered_schema.append(pa.field(SEQ, pa.int64()))
    return plan.filtered_schema
