"""Several named inputs, each with its own watermark filter, combined into
one watermark: the minimum over the inputs (Spark's
``multipleWatermarkPolicy=min``; RisingWave's "output watermark = min of the
upstream watermarks"; Flink's two-input operators). Inputs that are reads of
one watermark (``InputsSpec.shared``: Spark's one ``withWatermark`` node read
twice) count as one, the highest of theirs.

Each input's :class:`~gpuwm.WatermarkFilter` (its own column, delay, split
and knobs) derives that input's watermark from its rows. The combined
watermark is None until every input has one (an input with no rows yet holds
the others back, as Spark's 0 does), never decreases, and leaves out an
input whose splits are all idle under its ``idle_timeout``. Rows of every
input are late against the combined watermark — the one a join's state is
cleaned with, so an input back from idleness behind it finds its rows
late — with each profile's timing: under ``lag=1`` (Spark) batch N
drops rows at or behind the combined watermark of batch N-2 and drains with
that of N-1.

An input with no rows in a batch keeps its watermark.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from kernels import NONE

from .errors import ConfigError, SchemaError
from .profiles import Profile
from .watermark import WatermarkFilter, WatermarkSpec, _now


def inputs_schema(schemas: Mapping[str, pa.Schema]) -> pa.Schema:
    """Named inputs as one schema: a struct field per input.

    >>> s = inputs_schema({"a": pa.schema([("x", pa.int64())]), "b": pa.schema([("y", pa.int64())])})
    >>> list(input_schemas(s))
    ['a', 'b']
    """
    return pa.schema([pa.field(name, pa.struct(list(s))) for name, s in schemas.items()])


def input_schemas(schema: pa.Schema) -> dict[str, pa.Schema]:
    """The named inputs of :func:`inputs_schema`, back."""
    return {f.name: pa.schema(list(f.type)) for f in schema}


@dataclass(frozen=True)
class InputsSpec:
    """Named inputs' watermark specs (``((name, WatermarkSpec), ...)``), in order.

    >>> s = InputsSpec((("a", WatermarkSpec("ts", 5, profile="spark")), ("b", WatermarkSpec("t", 9, profile="spark"))))
    >>> s.names, s.resolved_profile.name
    (('a', 'b'), 'spark')
    """

    inputs: tuple[tuple[str, WatermarkSpec], ...]
    #: groups of inputs that are reads of one watermark (Spark's one ``withWatermark`` node read twice, its
    #: WatermarkTracker keeping one value per node id, raised by each read's rows): a group's watermark is the
    #: highest of its inputs', and the combined watermark the minimum over the groups
    shared: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        inputs = tuple((str(n), w) for n, w in self.inputs)
        if not inputs:
            raise ConfigError("named inputs need one or more")
        names = [n for n, _ in inputs]
        if len(set(names)) != len(names):
            raise ConfigError(f"input names must be distinct, got {names}")
        shared = tuple(tuple(str(n) for n in g) for g in self.shared)
        grouped = [n for g in shared for n in g]
        if any(n not in names for n in grouped) or len(set(grouped)) != len(grouped) or any(len(g) < 2 for g in shared):
            raise ConfigError(f"shared watermarks are groups of two or more of the inputs {names}, each input in "
                              f"one, got {[list(g) for g in shared]}")
        object.__setattr__(self, "shared", shared)
        profiles = {n: w.resolved_profile for n, w in inputs}
        first = next(iter(profiles.values()))
        for n, p in profiles.items():
            if p != first:
                raise ConfigError(f"every input's watermark needs the same profile and knobs (they drop and drain "
                                  f"with one combined watermark): {names[0]!r} has {first}, {n!r} has {p}")
        object.__setattr__(self, "inputs", inputs)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.inputs)

    @property
    def resolved_profile(self) -> Profile:
        return self.inputs[0][1].resolved_profile

    def spec(self, name: str) -> WatermarkSpec:
        for n, w in self.inputs:
            if n == name:
                return w
        raise ConfigError(f"unknown input {name!r}; inputs are {list(self.names)}")

    def build(self, backend: str | None = None) -> "InputFilters":
        return InputFilters({n: w.build(backend) for n, w in self.inputs}, self.shared)

    def describe(self) -> dict:
        d: dict = {"inputs": {n: w.describe() for n, w in self.inputs}}
        if self.shared:
            d["shared"] = [list(g) for g in self.shared]
        return d


class InputFilters:
    """One :class:`~gpuwm.WatermarkFilter` per named input and their combined
    watermark, with the filter's interface (``filter_local`` / ``advance``
    take and give one table and one statistics dict per input).

    Examples
    --------
    >>> import pyarrow as pa
    >>> f = InputFilters({"a": WatermarkFilter("t", 2), "b": WatermarkFilter("u", 0)})
    >>> kept = f.process({"a": pa.table({"t": [10]}), "b": pa.table({"u": [5]})})
    >>> f.watermark, f.split_watermarks
    (5, {'a': 8, 'b': 5})
    >>> kept = f.process({"a": pa.table({"t": [4, 6]})})    # 4 is behind min(8, 5)
    >>> kept["a"]["t"].to_pylist(), f.late_rows
    ([6], 1)

    Two reads of one watermark (``shared``) count as one, the higher:

    >>> f = InputFilters({"a": WatermarkFilter("t", 2), "b": WatermarkFilter("t", 2), "c": WatermarkFilter("u", 0)},
    ...                  shared=[("a", "b")])
    >>> kept = f.process({"a": pa.table({"t": [10]}), "b": pa.table({"t": [5]}), "c": pa.table({"u": [9]})})
    >>> f.watermark, f.split_watermarks
    (8, {'a': 8, 'b': 3, 'c': 9})
    """

    def __init__(self, filters: Mapping[str, WatermarkFilter], shared: Sequence[Sequence[str]] = ()):
        self.filters = dict(filters)
        # the groups whose watermark is the highest of their inputs' (InputsSpec.shared); the rest one each
        grouped = {n for g in shared for n in g}
        self._groups = [list(g) for g in shared] + [[n] for n in self.filters if n not in grouped]
        profiles = {f.profile for f in self.filters.values()}
        if len(profiles) != 1:
            raise ConfigError("every input's watermark needs the same profile")
        self.profile: Profile = profiles.pop()
        self._combined: int | None = None
        self._combined_prev: int | None = None
        self.ended = False

    # -- set-up ----------------------------------------------------------------
    def bind(self, schema: pa.Schema) -> "InputFilters":
        """Bind each filter to its input's schema (:func:`~gpuwm.join.inputs_schema`)."""
        named = input_schemas(schema)
        for n, f in self.filters.items():
            if n not in named:
                raise SchemaError(f"input {n!r} has no schema; the pipeline's inputs are {list(named)}")
            f.bind(named[n])
        doms = {n: f._domain for n, f in self.filters.items()}
        types = {str(d.type) for d in doms.values()}
        if len(types) != 1:
            raise SchemaError("the inputs' event-time columns must have one type to combine their watermarks, got "
                              + ", ".join(f"{n}.{d.column} {d.type}" for n, d in doms.items()))
        return self

    @property
    def _domain(self) -> Any:
        """The event-time domain the combined watermark is in (None before any input is bound)."""
        return next((f._domain for f in self.filters.values() if f._domain is not None), None)

    # -- the work --------------------------------------------------------------
    def filter_local(self, tables: Mapping[str, Any], late_out: dict | None = None, *,
                     held_out: dict | None = None, queued: str = "prepend", align: bool = True,
                     now: datetime | None = None) -> tuple[dict, dict]:
        """Filter each input's rows against the combined watermark (changes
        no state): the kept rows per input, and the statistics (totals, and
        each input's under ``inputs``). ``late_out``: ``{input: list}`` that
        gets each input's late rows.

        Alignment: the inputs with a ``max_drift`` are one alignment group
        (FLIP-182's group): the bound of each is the slowest non-idle split
        over the group plus its own drift. ``held_out``: ``{input: list}``
        that gets each input's held rows; ``queued``, ``align``, ``now``:
        as :meth:`WatermarkFilter.filter_local`."""
        w = self.output_watermark_raw
        w = NONE if w is None else w
        low = self._group_low(_now(now)) if align else None
        kept, per = {}, {}
        for n, f in self.filters.items():
            t = tables.get(n)
            if t is None:
                if queued != "prepend" or not f.held_rows:
                    continue
                t = f._schema.empty_table()
            out = None if late_out is None else late_out.setdefault(n, [])
            kw = {}
            if f.max_drift is not None:
                f.bind(t.schema)
                kw = {"held_out": (held_out if held_out is not None else {}).setdefault(n, []), "queued": queued,
                      "align": False if low is None else low + f._drift_raw, "now": now}
            kept[n], per[n] = f.filter_local(t, late_out=out, against=w, **kw)
        stats = {k: sum(s.get(k, 0) for s in per.values())
                 for k in ("rows", "late", "nulls", "nulls_dropped", "held", "released")}
        stats["inputs"] = per
        return kept, stats

    def _group_low(self, now: datetime) -> int | None:
        """The slowest non-idle split's watermark over the alignment group."""
        lows = [f._slowest(now) for f in self.filters.values() if f._drift_raw is not None]
        lows = [w for w in lows if w is not None]
        return min(lows) if lows else None

    @property
    def held_rows(self) -> int:
        return sum(f.held_rows for f in self.filters.values())

    def held_table(self) -> dict:
        """Each input's held rows (inputs with none left out)."""
        return {n: f.held_table() for n, f in self.filters.items() if f.held_rows}

    def releasable(self, now: datetime | None = None) -> bool:
        now = _now(now)
        low = self._group_low(now)
        return any(f.held_rows and (low is None or f._held_releasable(low + f._drift_raw))
                   for f in self.filters.values())

    def flush(self, now: datetime | None = None) -> dict:
        """Read every held row (the end of the inputs); the kept rows per input."""
        held: dict = {}
        kept, stats = self.filter_local({}, held_out=held, align=False, now=now)
        self.advance([stats], now, held=held)
        return kept

    def advance(self, stats: Sequence[dict], now: datetime | None = None, held: dict | None = None) -> None:
        """``held``: ``{input: [tables]}`` (see :meth:`WatermarkFilter.advance`)."""
        now = _now(now)
        for n, f in self.filters.items():
            f.advance([s["inputs"][n] for s in stats if n in s.get("inputs", {})], now,
                      held=None if held is None or f.max_drift is None else held.get(n, []))
        self._combined_prev = self._combined
        cand = self._candidate(now)
        if cand is not None and (self._combined is None or cand > self._combined):
            self._combined = cand

    def _candidate(self, now: datetime) -> int | None:
        """The minimum over the groups with a live input of each group's
        highest watermark (None while a group has none yet)."""
        vals = []
        for g in self._groups:
            live = [self.filters[n] for n in g if not self._idle(self.filters[n], now)]
            if live:
                got = [f.watermark_raw for f in live if f.watermark_raw is not None]
                vals.append(max(got) if got else None)
        return None if not vals or any(v is None for v in vals) else min(vals)

    @staticmethod
    def _idle(f: WatermarkFilter, now: datetime) -> bool:
        """Every split of the input is idle under its ``idle_timeout``."""
        if f.idle_timeout is None:
            return False
        idle = f.idle_splits(now)
        return bool(idle) and len(idle) == len(f.split_watermarks)

    def process(self, tables: Mapping[str, pa.Table], now: datetime | None = None) -> dict:
        """One batch: the kept rows of each input given."""
        held: dict = {}
        kept, stats = self.filter_local(tables, held_out=held, now=now)
        self.advance([stats], now, held=held)
        return kept

    def end_input(self) -> Any:
        """Every input has ended (see :meth:`WatermarkFilter.end_input`)."""
        self.ended = True
        for f in self.filters.values():
            f.end_input()
        if self.profile.end_of_input == "all" and self._domain is not None:
            self._combined = self._combined_prev = self._domain.end_of_time()
        return self.output_watermark

    def finish(self, now: datetime | None = None) -> Any:
        self.advance([], now)
        return self.end_input()

    # -- what users read -------------------------------------------------------
    def _out(self, raw: int | None) -> Any:
        return None if raw is None or self._domain is None else self._domain.from_raw(raw)

    @property
    def watermark(self) -> Any:
        return self._out(self._combined)

    @property
    def watermark_raw(self) -> int | None:
        return self._combined

    @property
    def output_watermark_raw(self) -> int | None:
        return self._combined_prev if self.profile.lag else self._combined

    @property
    def output_watermark(self) -> Any:
        return self._out(self.output_watermark_raw)

    @property
    def max_event_time_raw(self) -> int | None:
        vals = [f.max_event_time_raw for f in self.filters.values() if f.max_event_time_raw is not None]
        return max(vals) if vals else None

    @property
    def split_watermarks(self) -> dict[str, Any]:
        """Each input's own watermark."""
        return {n: f.watermark for n, f in self.filters.items()}

    @property
    def late_rows(self) -> int:
        return sum(f.late_rows for f in self.filters.values())

    @property
    def idle_timeout(self) -> Any:
        return next((f.idle_timeout for f in self.filters.values() if f.idle_timeout is not None), None)

    def idle_splits(self, now: datetime | None = None) -> list[str]:
        """Idle splits as ``input:split`` (``input`` alone for a whole input)."""
        now = _now(now)
        out = []
        for n, f in self.filters.items():
            out += [n if k is None else f"{n}:{k}" for k in f.idle_splits(now)]
        return out

    def held_back(self, now: datetime | None = None) -> list[str]:
        """Splits ahead of the alignment group's bound, as ``input:split``."""
        low = self._group_low(_now(now))
        if low is None:
            return []
        return [f"{n}:{k}" for n, f in self.filters.items() if f.max_drift is not None
                for k in f._splits_ahead(low + f._drift_raw)]

    def next_idle(self, now: datetime | None = None) -> datetime | None:
        at = [t for t in (f.next_idle(now) for f in self.filters.values()) if t is not None]
        return min(at) if at else None

    # -- state -----------------------------------------------------------------
    def snapshot(self) -> pa.Table:
        """One row per input with its filter's snapshot (Arrow IPC bytes)."""
        from .frame import table_to_bytes

        meta = {"combined": self._combined, "combined_prev": self._combined_prev, "ended": self.ended}
        return pa.table({"input": list(self.filters),
                         "state": [table_to_bytes(f.snapshot()) for f in self.filters.values()]},
                        schema=pa.schema([("input", pa.string()), ("state", pa.binary())])
                        ).replace_schema_metadata({"gpuwm.inputs": json.dumps(meta)})

    def restore(self, snapshot: pa.Table) -> "InputFilters":
        from .frame import bytes_to_table

        meta = json.loads(snapshot.schema.metadata[b"gpuwm.inputs"])
        for row in snapshot.to_pylist():
            if row["input"] not in self.filters:
                raise SchemaError(f"the saved state has input {row['input']!r}; the inputs are {list(self.filters)}")
            self.filters[row["input"]].restore(bytes_to_table(row["state"]))
        self._combined, self._combined_prev, self.ended = meta["combined"], meta["combined_prev"], meta["ended"]
        return self


#: which input a row of several inputs' union comes from (its index)
INPUT = "__input"


def union_column(i: int, name: str) -> str:
    """Input ``i``'s column ``name`` in the inputs' union."""
    return f"__in{i}_{name}"


def union_schema(input_schema: pa.Schema) -> pa.Schema:
    """Several inputs' rows as one table (as Spark hands them to gpuwm's tasks): the input's index,
    then every input's columns (nulls where the row is another input's)."""
    fields = [pa.field(INPUT, pa.int8())]
    for i, s in enumerate(input_schemas(input_schema).values()):
        fields += [pa.field(union_column(i, f.name), f.type) for f in s]
    return pa.schema(fields)


def to_union(input_schema: pa.Schema, tables: dict[str, pa.Table]) -> pa.Table:
    """Several inputs' rows as one :func:`union_schema` table (the inverse of :func:`split_union`)."""
    schema = union_schema(input_schema)
    parts = []
    for i, (name, s) in enumerate(input_schemas(input_schema).items()):
        t = tables.get(name)
        if t is None or not t.num_rows:
            continue
        own = {union_column(i, f.name): t.column(f.name) for f in s}
        cols = [pa.array([i] * t.num_rows, pa.int8())] + \
            [own[f.name] if f.name in own else pa.nulls(t.num_rows, f.type) for f in schema][1:]
        parts.append(pa.Table.from_arrays(cols, schema=schema))
    if not parts:
        return schema.empty_table()
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def split_union(input_schema: pa.Schema, table: pa.Table) -> dict[str, pa.Table]:
    """Each input's rows of a :func:`union_schema` table, in its own schema."""
    tag = table.column(INPUT)
    out = {}
    for i, (name, s) in enumerate(input_schemas(input_schema).items()):
        rows = table.filter(pc.equal(tag, i)) if table.num_rows else table
        cols = [rows.column(union_column(i, f.name)) for f in s]
        out[name] = pa.Table.from_arrays(cols, names=s.names).cast(s)
    return out
