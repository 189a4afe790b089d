"""The stateless stages that Spark's ``Project`` and ``Filter`` between
two operators become. A select: some of a stream's columns, renamed (a
``Project`` of plain columns); in a graph of stages it renames one
stream's columns apart from another's before a join of the two (Nexmark
q5: the window counts joined with their per-window maximum, both with
``window_time``). A project: columns computed from each row added to the
stream's, and rows filtered (``withColumn`` and ``filter`` over a window
aggregation's rows before another operator), as Spark evaluates them
(:mod:`gpuwm.project`). Both pass each batch's rows on, with the
watermark they drain with."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from .errors import ConfigError, SchemaError
from .operator import Capabilities, OperatorSpec, StageContext, Stateless, json_options
from .project import evaluate


@dataclass(frozen=True)
class SelectSpec(OperatorSpec):
    """Output columns ``columns`` as ``((name, input column), ...)``.

    >>> s = SelectSpec((("t", "window_time"), ("top", "n")))
    >>> s.event_time("window_time"), s.output_schema(pa.schema([("window_time", pa.int64()), ("n", pa.int64())])).names
    ('t', ['t', 'top'])
    """

    columns: tuple[tuple[str, str], ...]

    kind: ClassVar[str] = "select"
    capabilities: ClassVar[Capabilities] = Capabilities(row_local=True)

    def __post_init__(self) -> None:
        cols = tuple((c, c) if isinstance(c, str) else tuple(c) for c in self.columns)
        if not cols or not all(len(c) == 2 and all(isinstance(x, str) and x for x in c) for c in cols):
            raise ConfigError(f"select columns are names or [new name, column] pairs, e.g. ['k', ['t', "
                              f"'window_time']], got {list(self.columns)!r}")
        names = [n for n, _ in cols]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"select gives column(s) {dup} more than once")
        object.__setattr__(self, "columns", cols)

    @classmethod
    def from_json(cls, options: dict, ctx: StageContext) -> "SelectSpec":
        """``{"select": {"columns": ["k", ["t", "window_time"], ...]}}``."""
        o = json_options("select", options, {"columns"}, ("columns",),
                         '{"select": {"columns": ["auction", ["t", "window_time"]]}}')
        if not isinstance(o["columns"], (list, tuple)):
            raise ConfigError(f"select columns are a list, got {o['columns']!r}")
        return cls(tuple(c if isinstance(c, str) else tuple(c) for c in o["columns"]))

    def check(self, ctx: StageContext) -> None:
        if ctx.event_time is not None and ctx.event_time not in {c for _, c in self.columns}:
            raise ConfigError(f"a select keeps the event-time column {ctx.event_time!r} (renamed or not): the "
                              "stages after it drain by the watermark on it")

    def event_time(self, upstream: str) -> str:
        return next((n for n, c in self.columns if c == upstream), upstream)

    def other_times(self, upstream: tuple[str, ...] = ()) -> tuple[str, ...]:
        return tuple(n for o in upstream for n, c in self.columns if c == o)

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        missing = [c for _, c in self.columns if c not in schema.names]
        if missing:
            raise SchemaError(f"select column(s) {missing} not found; the stream has columns {schema.names}")
        return pa.schema([schema.field(c).with_name(n) for n, c in self.columns])

    def build(self, profile: Any = None, backend: str | None = None) -> "Select":
        return Select(self)


class Select(Stateless):
    """Passes each batch's rows on as the spec's columns; holds nothing
    (``drain`` releases what the batch pushed)."""

    def push(self, rows: Any) -> None:
        t = self._host_chunk(rows)
        self._queue(pa.Table.from_arrays([t.column(c) for _, c in self.spec.columns], schema=self._out))


@dataclass(frozen=True)
class ProjectSpec(OperatorSpec):
    """Steps over each batch's rows, in order (``steps``: JSON text of
    :mod:`gpuwm.project` steps; a list is taken too): ``{"where": expr}``
    keeps the rows ``expr`` is true for (null drops the row, as Spark's
    filter), ``[[name, expr], ...]`` adds the columns ``expr`` computes, as
    Spark computes them, beside the stream's (every column goes on: the
    event time too).

    >>> s = ProjectSpec([{"where": {"cmp": [">", {"col": "n"}, {"lit": [1, "bigint"]}]}},
    ...                  [["n2", {"arith": ["*", {"col": "n"}, {"lit": [2, "bigint"]}, True]}]]])
    >>> t = pa.table({"t": [5, 6, 7], "n": [1, 2, None]})
    >>> s.output_schema(t.schema).names
    ['t', 'n', 'n2']
    >>> s.apply(t).to_pydict()
    {'t': [6], 'n': [2], 'n2': [4]}
    """

    steps: Any

    kind: ClassVar[str] = "project"
    capabilities: ClassVar[Capabilities] = Capabilities(row_local=True)

    def __post_init__(self) -> None:
        steps = json.loads(self.steps) if isinstance(self.steps, str) else self.steps
        ok = isinstance(steps, list) and steps and all(
            (isinstance(st, dict) and set(st) == {"where"}) or (
                isinstance(st, list) and st and all(isinstance(c, list) and len(c) == 2 and isinstance(c[0], str)
                                                    and c[0] and isinstance(c[1], dict) for c in st))
            for st in steps)
        if not ok:
            raise ConfigError('project steps are a list of {"where": expr} and [[name, expr], ...] '
                              f"(gpuwm.project's expressions), got {self.steps!r}")
        object.__setattr__(self, "steps", json.dumps(steps))

    @classmethod
    def from_json(cls, options: dict, ctx: StageContext) -> "ProjectSpec":
        """``{"project": {"steps": [{"where": expr}, [["n2", expr], ...]]}}``."""
        o = json_options("project", options, {"steps"}, ("steps",),
                         '{"project": {"steps": [[["p2", {"arith": ["*", {"col": "price"}, '
                         '{"lit": [2, "bigint"]}, true]}]]]}}')
        return cls(o["steps"])

    def other_times(self, upstream: tuple[str, ...] = ()) -> tuple[str, ...]:
        return upstream

    def apply(self, table: pa.Table) -> pa.Table:
        """``table``'s rows through the steps: kept where each filter holds,
        with the computed columns after the input's."""
        for step in json.loads(self.steps):
            if isinstance(step, dict):
                table = evaluate([step], table)
                continue
            new = evaluate([step], table)
            for name in new.column_names:
                table = table.append_column(name, new.column(name))
        return table

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        names = [n for st in json.loads(self.steps) if isinstance(st, list) for n, _ in st]
        taken = sorted({n for n in names if n in schema.names or names.count(n) > 1})
        if taken:
            raise SchemaError(f"project column(s) {taken} are the stream's already (or given twice); the stream "
                              f"has columns {schema.names}")
        try:
            return self.apply(schema.empty_table()).schema
        except KeyError as e:
            raise SchemaError(f"a project step reads column {e}, which the stream does not have; it has "
                              f"{schema.names}") from None

    def build(self, profile: Any = None, backend: str | None = None) -> "Project":
        return Project(self)


class Project(Stateless):
    """Passes each batch's rows on through the spec's steps; holds nothing
    (``drain`` releases what the batch pushed)."""

    def push(self, rows: Any) -> None:
        t = self._host_chunk(rows)
        self._queue(self.spec.apply(t).cast(self._out))
