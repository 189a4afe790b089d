"""The union of named inputs with one schema: the trivial case of several
inputs. Each input keeps its own watermark filter; the union's rows are
every input's, and its watermark is their minimum (:mod:`gpuwm.inputs`), so
the stages after it drain as they would on one input."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import pyarrow as pa

from .errors import ConfigError, SchemaError
from .inputs import input_schemas
from .operator import Capabilities, OperatorSpec, StageContext, Stateless, json_options


@dataclass(frozen=True)
class UnionSpec(OperatorSpec):
    """The rows of ``names`` (inputs with one schema), event time ``column``.

    >>> UnionSpec(("a", "b"), "ts").inputs()
    ('a', 'b')
    """

    names: tuple[str, ...]
    column: str

    kind: ClassVar[str] = "union"
    takes_inputs: ClassVar[bool] = True
    capabilities: ClassVar[Capabilities] = Capabilities(passes_rows=True)

    def __post_init__(self) -> None:
        names = tuple(self.names)
        if len(names) < 2 or len(set(names)) != len(names):
            raise ConfigError(f"a union takes two or more distinct inputs, got {list(names)}")
        object.__setattr__(self, "names", names)

    @classmethod
    def from_json(cls, options: dict, ctx: StageContext) -> "UnionSpec":
        """``{"union": {}}``: every input, their watermarks on one column."""
        json_options("union", options, set())
        if not ctx.inputs:
            raise ConfigError("a union needs two inputs: give Pipeline({name: df, ...}) (a spec's 'inputs')")
        cols = {ctx.watermark(n).column for n in ctx.inputs}
        if len(cols) != 1:
            raise ConfigError(f"a union's inputs need their watermarks on one column, got {sorted(cols)}")
        return cls(tuple(ctx.inputs), cols.pop())

    def inputs(self) -> tuple[str, ...]:
        return self.names

    def input_keys(self, name: str) -> tuple[str, ...]:
        return ()

    def event_time(self, upstream: str) -> str:
        return self.column

    def build(self, profile: Any = None, backend: str | None = None) -> "Union":
        return Union(self)

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        named = input_schemas(schema)
        first = named[self.names[0]]
        for n in self.names[1:]:
            if not named[n].equals(first, check_metadata=False):
                raise SchemaError(f"a union needs inputs with one schema: {self.names[0]!r} has {first}, "
                                  f"{n!r} has {named[n]}; select the same columns with the same types first")
        if self.column not in first.names:
            raise SchemaError(f"union event-time column {self.column!r} not found; the inputs have {first.names}")
        return first


class Union(Stateless):
    """Passes each batch's rows of every input on, in input order; holds
    nothing (``drain`` releases what the batch pushed)."""

    def push(self, rows: Mapping[str, Any]) -> None:
        for n in self.spec.names:
            t = rows.get(n)
            if t is None:
                continue
            t = t if isinstance(t, pa.Table) else t.to_arrow()
            self.rows_in += t.num_rows
            self._queue(t.cast(self._out))
