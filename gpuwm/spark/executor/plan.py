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
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Sequence

import pyarrow as pa

from ...errors import ConfigError
from ...inputs import InputsSpec, input_schemas, union_schema
from ...operator import OperatorSpec
from ...watermark import EXPR_COLUMN, WatermarkSpec
from ..storage.checkpoint import Checkpoint, Location


@dataclass(frozen=True)
class Sink:
    """``parquet`` (``path``: ``<path>/batch_id=<N>/part-<P>.parquet``),
    ``console`` (the first ``rows`` rows of each batch, printed by the
    driver) or ``foreachBatch`` (Parquet as ``parquet``, under the
    checkpoint, handed to the user's function as a DataFrame by the driver
    before the batch is committed, removed after)."""

    kind: str
    path: str | None = None
    rows: int = 20
    #: the file-system settings of ``path`` (:func:`~gpuwm.spark.storage.checkpoint.spark_fs_options`)
    options: tuple[tuple[str, str], ...] = ()
    #: the last stage's rows as the query's columns: :mod:`gpuwm.spark.io.project` steps, as JSON ("": as they are)
    project: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("parquet", "console", "foreachBatch"):
            raise ConfigError(f"sink must be 'parquet', 'console' or 'foreachBatch', got {self.kind!r}")
        if self.writes_files and not self.path:
            raise ConfigError(f"a {self.kind} sink needs a path")

    @property
    def writes_files(self) -> bool:
        """Tasks write the rows as ``<path>/batch_id=<N>/part-<P>.parquet``."""
        return self.kind in ("parquet", "foreachBatch")

    @property
    def location(self) -> Location:
        return Location(self.path, self.options)


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
    #: the input schema of each stage, then the output's (derived)
    schemas: tuple[pa.Schema, ...] = field(init=False)
    segments: tuple[Segment, ...] = field(init=False)

    def __post_init__(self) -> None:
        if self.vnodes < 1:
            raise ConfigError(f"vnodes must be >= 1, got {self.vnodes}")
        stages = tuple(self.stages)
        check_stages(stages, self.watermark.names)
        if self.aligned and self.vnodes > 1 and self.watermark.resolved_profile.emit != "on-batch":
            raise ConfigError("alignment (max_drift) with vnodes > 1 needs emit='on-batch': under on-event a split's "
                              "held rows and its new ones must be read in one task; use vnodes=1 or emit='on-batch'")
        schemas = [self.filtered_schema]
        for s in stages:
            schemas.append(s.output_schema(schemas[-1]))
        object.__setattr__(self, "stages", stages)
        object.__setattr__(self, "schemas", tuple(schemas))
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

    def segment_of(self, stage: int) -> Segment:
        """The segment stage ``stage`` runs in."""
        return next(s for s in self.segments if stage in s.stages)

    # -- what the tasks ask ------------------------------------------------------
    @property
    def profile(self):
        return self.watermark.resolved_profile

    @property
    def pre_aggregates(self) -> bool:
        """The first stage's partials cross the shuffle, not rows (vnodes > 1;
        not with a late-row sink: a late row must still be a row where the
        operator finds it late)."""
        return self.vnodes > 1 and bool(self.stages) and self.stages[0].capabilities.partials and self.late is None

    @property
    def arrival_order(self) -> bool:
        """Rows cross the first shuffle with their input partition and
        position (``__seq``), and each vnode takes them in that order."""
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

    def describe(self) -> str:
        """What the checkpoint remembers: a query whose description differs cannot reuse its state."""
        d = {"version": 2, "vnodes": self.vnodes, "watermark": self.watermark.describe(),
             "stages": [s.describe() for s in self.stages],
             "input_schema": [(f.name, str(f.type)) for f in self.input_schema]}
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
