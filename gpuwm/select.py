"""A select: some of a stream's columns, renamed (Spark's ``Project`` of
plain columns). Stateless: it passes each batch's rows on, with the
watermark it drains with. In a graph of stages it renames one stream's
columns apart from another's before a join of the two (Nexmark q5: the
window counts joined with their per-window maximum, both with
``window_time``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from .errors import ConfigError, SchemaError
from .operator import Capabilities, OperatorSpec, StageContext, Stateless, json_options


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
        t = self._chunk(rows if isinstance(rows, (pa.Table, pa.RecordBatch)) else rows.to_arrow())
        self._queue(pa.Table.from_arrays([t.column(c) for _, c in self.spec.columns], schema=self._out))
