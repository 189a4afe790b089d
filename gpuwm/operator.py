"""The operator contract every stateful gpuwm operator implements, and the
spec that builds one.

An **operator** (:class:`Operator`) is engine-independent, Arrow in / Arrow
out, and can be driven from a plain Python loop:

- ``bind(schema)`` fixes the input schema before any row (checked on every
  push);
- ``push(rows)`` takes a chunk (a ``pyarrow.Table`` or a device
  :class:`~gpuwm.frame.Frame`); it returns None, or rows it emits at once
  (a window under ``emit="on-update"``, a dedup's first rows);
- ``release(W)`` drains with watermark ``W`` and returns
  :class:`Released` — the rows it releases **and its output watermark**, the
  watermark on its output's event-time column that the next stage drains
  with (``drain(W)`` is ``release(W).rows``). The output watermark is a
  function of ``W`` and the spec alone, never of the rows an operator holds,
  so every task of a micro-batch derives the same one without talking to the
  others;
- state as named Arrow parts: ``state_tables()`` (small tables: counters,
  dictionaries), ``state_parts()`` (``{name: must_write}``: parts the store
  writes again only when changed, e.g. one per open window or sort run),
  ``snapshot_part(name)`` (``snapshot_parts(names)``: several at once),
  ``mark_saved(written)``, and
  ``load_state(tables, parts)`` on a fresh operator;
- ``keep_late()`` / ``take_late()``: on request, the rows ``push`` drops
  as late (behind a window or session that closed, behind a sort's last
  drain) are kept, in the input schema, until taken as ``{input: rows}``
  (``None`` for an operator's one input; ``{}``: none) — a late-row side
  output (``late_reason`` names them);
- ``counters()``: cumulative row counts (``rows_in``, ``rows_out``,
  ``late_rows``, ``null_rows``, and any of its own, e.g. ``duplicate_rows``);
  ``state_rows`` / ``state_bytes``.

A **spec** (:class:`OperatorSpec`) is a small frozen, picklable value,
validated when it is made, that the Spark layer ships to its tasks and that
builds the operator there (``spec.build(profile, backend)``). The Spark
layer knows specs and their declared :class:`Capabilities`, never operator
kinds: partition keys, pre-aggregated partials, the event-time range
exchange of an ordered output, and the output schema (checked before the
first micro-batch).

The **stage registry**: a spec class that defines :meth:`OperatorSpec.from_json`
is the parser of its ``kind``'s JSON stages (``{"<kind>": {options}}``) —
defining the class registers it. :func:`stage_from_json` makes any
registered stage from its options and the :class:`StageContext` it joins
(the event-time column, the watermarks, the named inputs, the stage
before), so the runtime and the JSON spec know no operator by name.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, NamedTuple, Sequence

import pyarrow as pa

from .errors import ConfigError, StateError, near_miss, unknown_keys
from .schema import same_schema


class Released(NamedTuple):
    """What a drain gives the next stage: the released rows and the operator's
    output watermark (None before any watermark)."""

    rows: pa.Table
    watermark: Any


@dataclass(frozen=True)
class Capabilities:
    """What an operator can do beyond the contract, which the runtime uses.

    Attributes
    ----------
    partials : ``partial_schema()``, ``partials(rows)`` and
        ``push_partials(table)``: the rows of an input partition are
        pre-aggregated where they are read, and only partials cross the
        shuffle (windows and sessions).
    range_exchange : the released rows are ordered by event time
        (``range_parts``, ``flush``): with several vnodes, each vnode's
        released rows are cut into event-time ranges and merged range by range
        into one ordered stream (the stream sort).
    arrival_order : the output depends on the order rows arrive in (a
        dedup keeps a key's first row): rows crossing the shuffle carry their
        input partition and position, and each vnode takes them in that
        order, so a replayed batch gives the same output.
    needs_order : its input must be the event-time ordered stream of a stage
        with ``range_exchange`` just before it (an over-window after a sort);
        it orders each batch itself, so the sort's output reaches it through
        an ordinary exchange by its keys.
    rescale : its state can be re-partitioned over another number of
        vnodes (:func:`gpuwm.partition.rescale`): ``rescale_rows()`` gives
        it as rows with the columns the vnodes are hashed on, by value, and
        ``rescale_absorb(rows)`` / ``rescale_meta(olds, first)`` build a
        fresh operator from some of them.
    passes_rows : its output rows are its input rows as they came (a
        union): what the watermark filter must let through is decided by
        the stage after it (:meth:`OperatorSpec.filter_lateness`).
    late_groups : as the first stage, it counts the rows the watermark
        filter dropped before it in groups, as Spark's progress counts late
        input (``count_late`` of them, or their ``ghost_partials``): a
        tumbling or hopping window aggregation.
    row_local : it holds no rows between batches and maps each batch's
        rows alone (a select): in a graph over several vnodes it runs where
        its input's rows are, with no exchange before it.
    """

    partials: bool = False
    late_groups: bool = False
    range_exchange: bool = False
    arrival_order: bool = False
    needs_order: bool = False
    rescale: bool = False
    passes_rows: bool = False
    row_local: bool = False


@dataclass(frozen=True)
class StageContext:
    """What a stage joins, as a builder knows it before the stage is made.

    Attributes
    ----------
    event_time : the event-time column of the stage's input (the
        watermark's column for a first stage; the output of
        :meth:`OperatorSpec.event_time` of the stage before), None before
        any watermark.
    watermarks : the watermark specs by input: ``None`` the one input's,
        else each named input's that has one.
    inputs : the named inputs' Arrow schemas (empty for one input).
    previous : the stage before, or None for the first.
    also_times : other columns of the input the same watermark covers (a
        join's other side's time: :meth:`OperatorSpec.event_times`).
    times : in a graph of stages, the event-time column of each earlier
        stage's output by the stage's name (those streams are in
        ``inputs`` too: a join may read them).
    """

    event_time: str | None
    watermarks: Mapping[str | None, Any] = field(default_factory=dict)
    inputs: Mapping[str, pa.Schema] = field(default_factory=dict)
    previous: "OperatorSpec | None" = None
    also_times: tuple[str, ...] = ()
    times: Mapping[str, str] = field(default_factory=dict)

    def time_column(self, name: str) -> str:
        """The event-time column of stream ``name``: a named input's
        watermark column, or an earlier stage's output's (:attr:`times`)."""
        return self.times[name] if name in self.times else self.watermark(name).column

    def watermark(self, name: str | None = None) -> Any:
        """Input ``name``'s watermark spec (None: the one input's); a
        :class:`~gpuwm.ConfigError` saying what to call when there is none."""
        if name is None:
            if None not in self.watermarks:
                raise ConfigError(f"this stage takes the watermark of one input; the pipeline has inputs "
                                  f"{list(self.inputs)}" if self.inputs else
                                  "call .watermark(...) before the stages: they drain by the watermark")
            return self.watermarks[None]
        if not self.inputs:
            raise ConfigError(f"input {name!r}: this pipeline has one input; a stage over named inputs needs "
                              "Pipeline({name: df, ...}) (a spec's 'inputs')")
        if name not in self.inputs:
            raise ConfigError(f"unknown input {name!r}; the inputs are {list(self.inputs)}")
        if name not in self.watermarks:
            raise ConfigError(f"input {name!r} has no watermark: call .watermark(..., input={name!r}) before this "
                              "stage: its state is cleaned by the watermark")
        return self.watermarks[name]


#: kind -> the spec class whose ``from_json`` parses that kind's JSON stages
_REGISTRY: dict[str, type] = {}
#: the modules whose specs are gpuwm's own stages (imported on the first look-up)
_BUILTIN = ("gpuwm.window", "gpuwm.sort", "gpuwm.dedup", "gpuwm.over", "gpuwm.join", "gpuwm.union", "gpuwm.topn",
            "gpuwm.select")


def stage_kinds() -> dict[str, type]:
    """Every registered stage kind and its spec class (gpuwm's own, and any
    spec class defined since that has a ``from_json``)."""
    for m in _BUILTIN:
        importlib.import_module(m)
    return dict(_REGISTRY)


def stage_class(kind: str) -> type:
    """The spec class of stage ``kind``."""
    kinds = stage_kinds()
    if kind not in kinds:
        raise ConfigError(f"unknown stage kind {kind!r}{near_miss(kind, kinds)}; the kinds are {sorted(kinds)}")
    return kinds[kind]


def stage_from_json(kind: str, options: Mapping[str, Any], ctx: StageContext) -> "OperatorSpec":
    """The spec of a JSON stage ``{kind: options}`` joining ``ctx``."""
    cls = stage_class(kind)
    if not isinstance(options, Mapping):
        raise ConfigError(f"a {kind} stage's options are an object {{...}}, got {options!r}")
    return cls.from_json(dict(options), ctx)


def json_options(kind: str, options: Mapping[str, Any], allowed: set[str], required: tuple[str, ...] = (),
                 example: str = "") -> dict:
    """``options`` of a JSON ``kind`` stage, checked: no key outside
    ``allowed``, every key in ``required`` (``example``: a whole stage, for
    the message)."""
    unknown = set(options) - allowed
    if unknown:
        raise ConfigError(unknown_keys(kind, unknown, allowed))
    for k in required:
        if k not in options:
            raise ConfigError(f"{kind} needs {k!r}" + (f", e.g. {example}" if example else ""))
    return dict(options)


@dataclass(frozen=True)
class OperatorSpec:
    """Base of the operator specs: frozen, picklable, validated on creation.

    Subclasses set :attr:`capabilities` and implement :meth:`build`,
    :meth:`keys`, :meth:`event_time` and :meth:`output_schema`; one class
    per ``kind`` implements :meth:`from_json` (which registers it).
    """

    capabilities: ClassVar[Capabilities] = Capabilities()
    #: the key of this spec in a JSON ``stages`` list and in the pipeline description
    kind: ClassVar[str] = ""
    #: it takes the pipeline's named inputs (:meth:`inputs`), as its first stage
    takes_inputs: ClassVar[bool] = False

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "from_json" in cls.__dict__:
            if not cls.kind:
                raise ConfigError(f"{cls.__qualname__} defines from_json but no kind")
            old = _REGISTRY.get(cls.kind)
            if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
                raise ConfigError(f"stage kind {cls.kind!r} is {old.__module__}.{old.__qualname__}'s already; "
                                  f"give {cls.__qualname__} another kind")
            _REGISTRY[cls.kind] = cls

    @classmethod
    def from_json(cls, options: dict, ctx: StageContext) -> "OperatorSpec":
        """The spec of a JSON stage ``{kind: options}`` joining ``ctx``
        (:func:`json_options` checks the keys); raises
        :class:`~gpuwm.ConfigError` for what the options or the context
        lack."""
        raise ConfigError(f"stage kind {cls.kind!r} has no JSON form")

    def inputs(self) -> tuple[str, ...]:
        """The named inputs this stage takes (a join's two, a union's all;
        :attr:`takes_inputs`); () for a stage over the stream before it.
        Only a pipeline's first stage takes named inputs."""
        return ()

    def check(self, ctx: StageContext) -> None:
        """Raise :class:`~gpuwm.ConfigError` when this stage cannot join
        ``ctx`` (a window on another column than its input's event time, a
        join time column that is not its input's watermark column)."""

    def build(self, profile: Any, backend: str | None = None) -> "Operator":
        """The operator, on ``backend``, with ``profile``'s conventions."""
        raise NotImplementedError

    def keys(self) -> tuple[str, ...]:
        """The columns whose values are state partitions (the vnode hash);
        () for a global operator (one vnode holds its state)."""
        return ()

    def vnode_keys(self, vnodes: int) -> tuple[str, ...]:
        """The columns rows are hashed on to reach this stage's vnodes
        (default :meth:`keys`; the sort spreads rows by event time and key)."""
        return self.keys()

    def event_time(self, upstream: str) -> str:
        """The event-time column of this stage's output, given its input's."""
        return upstream

    def other_times(self, upstream: tuple[str, ...] = ()) -> tuple[str, ...]:
        """Other columns of this stage's output that its output watermark
        covers too (an interval join's right time), for the stage after,
        given its input's ``upstream`` (a stage that passes rows on passes
        them on)."""
        return ()

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        """The schema of the released rows for input ``schema``; raises
        :class:`~gpuwm.SchemaError` when a column is missing or has a type
        the operator cannot take."""
        raise NotImplementedError

    def with_next(self, nxt: "OperatorSpec") -> "OperatorSpec":
        """This spec when ``nxt`` follows it (a window adds ``window_time``);
        raises :class:`~gpuwm.ConfigError` when ``nxt`` cannot follow it."""
        return self

    def filter_lateness(self, profile: Any) -> Any:
        """As the first stage that takes rows from the watermark filter: how
        far behind the watermark a row may be and still count here, so the
        filter lets it through (None: not at all; ``profile``: the
        watermark's :class:`~gpuwm.profiles.Profile`). A session window: its
        gap; under ``window_lateness="window"`` (Spark) a window: its size."""
        return None

    def describe(self) -> dict:
        """A JSON-able description (the checkpoint remembers it)."""
        from dataclasses import fields

        return {"kind": self.kind, **{f.name: _plain(getattr(self, f.name)) for f in fields(self)}}


def _plain(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return repr(v)


def snapshot_meta(snapshot: Mapping[str, pa.Table], tag: str, what: str) -> dict:
    """The metadata an operator's :meth:`snapshot` put on its ``state``
    table under ``gpuwm.<tag>``; a :class:`~gpuwm.StateError` naming
    ``what`` the operator is when the snapshot is another's."""
    md = snapshot["state"].schema.metadata or {}
    key = f"gpuwm.{tag}".encode()
    if key not in md:
        raise StateError(f"this snapshot is not of {what}")
    return json.loads(md[key])


class Operator:
    """Mixin with the parts of the contract that are the same for every
    operator (see the module docstring). An operator sets ``spec`` and
    implements ``bind``, ``push``, ``drain``, ``output_watermark`` and the
    state methods."""

    spec: OperatorSpec
    #: what a late-row side output calls the rows this operator drops as late
    late_reason: ClassVar[str] = "late"
    _late_kept: list | None = None

    def keep_late(self, on: bool = True) -> "Operator":
        """Keep the rows :meth:`push` drops as late until :meth:`take_late`."""
        self._late_kept = [] if on else None
        return self

    def take_late(self) -> dict[str | None, pa.Table]:
        """The rows dropped as late since the last call, by input — ``None``
        for an operator's one input, the input's name for one over several
        (a join) — each in its input's schema (a hopping window's row once
        per closed window it missed: as many as ``late_rows`` counted);
        ``{}`` when none."""
        got = self._late_kept
        if got is not None:
            self._late_kept = []
        if not got:
            return {}
        return {None: got[0] if len(got) == 1 else pa.concat_tables(got)}

    def snapshot_parts(self, names: Sequence[str]) -> dict[str, pa.Table]:
        """Several of :meth:`state_parts`' parts at once, as
        ``snapshot_part`` gives each; an operator whose state lives on a
        device overrides it to fetch them all in one copy."""
        return {n: self.snapshot_part(n) for n in names}

    def _set_aside(self, frame: Any, rows: Any, into: list | None = None) -> None:
        """Keep ``frame``'s rows at ``rows`` (a bool mask or indexes on the
        backend) as late, when asked to (``into``: the list that keeps them,
        default the operator's)."""
        into = self._late_kept if into is None else into
        if into is not None:
            late = frame.filter(rows) if getattr(rows, "dtype", None) == bool else frame.take(rows)
            if late.num_rows:
                into.append(late.to_arrow())

    def _chunk(self, table: Any) -> Any:
        """A pushed chunk (Arrow table or batch, or a device Frame) as a table
        or Frame, with the input schema bound (or checked) and its rows counted."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        self.bind(table.schema)
        self.rows_in += table.num_rows
        return table

    def _columns_needed(self, column: str) -> list[str] | None:
        """The input columns this operator reads (its output has none of the
        others), or None: it keeps whole rows. On a GPU, host input moves
        only these (unless late rows are kept: those are whole rows)."""
        return None

    def _event_times(self, table: Any, column: str) -> tuple[Any, Any, Any]:
        """The chunk as a :class:`~gpuwm.frame.Frame` on this operator's
        backend, the non-null event times of ``column`` (int64), and the rows
        they come from (None: every row). Null event times are counted in
        ``null_rows``."""
        from .frame import Frame

        self.bind(table.schema)
        xp = self._backend.xp
        needed = self._columns_needed(column)
        if needed is not None and self._late_kept is None and self._backend.is_gpu and not isinstance(table, Frame):
            table = table.select(needed)  # only what the operator reads crosses to the device
        frame = Frame.of(table, self._backend)
        ts, valid = frame.values(column)
        ts = ts.astype(xp.int64, copy=False)
        rows = None
        if valid is not None:
            self.null_rows += int(table.num_rows - xp.count_nonzero(valid))
            rows = xp.nonzero(valid)[0]
            ts = ts[rows]
        return frame, ts, rows

    def output_watermark(self, watermark: Any) -> Any:
        """The watermark on the output's event time after a drain at
        ``watermark`` (default: the same; a window derives it)."""
        return watermark

    def release(self, watermark: Any) -> Released:
        """Drain with ``watermark``: the released rows and the output watermark."""
        return Released(self.drain(watermark), self.output_watermark(watermark))

    def counters(self) -> dict[str, int]:
        """Cumulative row counts since the operator started (restores keep them)."""
        return {"rows_in": self.rows_in, "rows_out": self.rows_out, "late_rows": self.late_rows,
                "null_rows": self.null_rows}

    def state_tables(self) -> dict[str, pa.Table]:
        """The small state tables (counters, dictionaries) beside the parts."""
        snap = self.snapshot(rows=False)
        return snap if isinstance(snap, dict) else {"state": snap}

    def load_state(self, tables: dict[str, pa.Table], parts: dict[str, pa.Table]) -> "Operator":
        """Restore a fresh operator from :meth:`state_tables` and its parts."""
        return self.restore(tables, parts)


class Stateless(Operator):
    """An operator that holds no rows between batches (a union, a select):
    ``push`` queues the batch's rows as ``_out`` rows (:meth:`_queue`), its
    drain releases them; its state is its counters (under
    ``gpuwm.<kind>``)."""

    state_rows = 0
    state_bytes = 0
    drained_watermark = None  # it drains nothing it holds

    def __init__(self, spec: OperatorSpec):
        self.spec = spec
        self._schema: pa.Schema | None = None
        self._out: pa.Schema | None = None
        self._pending: list[pa.Table] = []
        self.rows_in = self.rows_out = self.late_rows = self.null_rows = 0

    def bind(self, schema: pa.Schema) -> "Stateless":
        if self._schema is not None:
            same_schema(self._schema, schema, f"{type(self).__name__}.bind")
            return self
        self._out = self.spec.output_schema(schema)
        self._schema = schema
        return self

    def _host_chunk(self, rows: Any) -> pa.Table:
        """A pushed chunk as a host Arrow table (a device Frame's columns
        copied back), bound and counted (:meth:`Operator._chunk`)."""
        return self._chunk(rows if isinstance(rows, (pa.Table, pa.RecordBatch)) else rows.to_arrow())

    def _queue(self, table: pa.Table) -> None:
        """Hold ``table`` (output rows) until the drain."""
        if table.num_rows:
            self._pending.append(table)

    def drain(self, watermark: Any) -> pa.Table:
        got, self._pending = self._pending, []
        if not got:
            return self._out.empty_table()
        out = got[0] if len(got) == 1 else pa.concat_tables(got)
        self.rows_out += out.num_rows
        return out

    def snapshot(self, rows: bool = True) -> dict[str, pa.Table]:
        """Counters only: it holds no rows between batches."""
        meta = {"rows_in": self.rows_in, "rows_out": self.rows_out}
        return {"state": pa.table({"x": pa.array([], pa.int8())}).replace_schema_metadata(
            {f"gpuwm.{self.spec.kind}": json.dumps(meta)})}

    def state_parts(self) -> dict[str, bool]:
        return {}

    def mark_saved(self, written: Sequence[str] = ()) -> None:
        pass

    def restore(self, snapshot: dict, parts: dict | None = None) -> "Stateless":
        md = snapshot["state"].schema.metadata or {}
        meta = json.loads(md.get(f"gpuwm.{self.spec.kind}".encode(), b"{}"))
        self.rows_in, self.rows_out = meta.get("rows_in", 0), meta.get("rows_out", 0)
        return self
