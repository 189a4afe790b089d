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
from .operator import Capabilities, Operator, OperatorSpec, StageContext, json_options
from .schema import same_schema


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


class Union(Operator):
    """Passes each batch's rows of every input on, in input order; holds
    nothing (``drain`` releases what the batch pushed)."""

    def __init__(self, spec: UnionSpec):
        self.spec = spec
        self._schema: pa.Schema | None = None
        self._out: pa.Schema | None = None
        self._pending: list[pa.Table] = []
        self.rows_in = self.rows_out = self.late_rows = self.null_rows = 0

    def bind(self, schema: pa.Schema) -> "Union":
        if self._schema is not None:
            same_schema(self._schema, schema, "Union.bind")
            return self
        self._out = self.spec.output_schema(schema)
        self._schema = schema
        return self

    def push(self, rows: Mapping[str, Any]) -> None:
        for n in self.spec.names:
            t = rows.get(n)
            if t is None:
                continue
            t = t if isinstance(t, pa.Table) else t.to_arrow()
            self.rows_in += t.num_rows
            if t.num_rows:
                self._pending.append(t.cast(self._out))

    def drain(self, watermark: Any) -> pa.Table:
        got, self._pending = self._pending, []
        if not got:
            return self._out.empty_table()
        out = got[0] if len(got) == 1 else pa.concat_tables(got)
        self.rows_out += out.num_rows
        return out

    state_rows = 0
    state_bytes = 0
    drained_watermark = None  # it drains nothing it holds

    def snapshot(self, rows: bool = True) -> dict[str, pa.Table]:
        """Counters only: a union holds no rows between batches."""
        import json

        meta = {"rows_in": self.rows_in, "rows_out": self.rows_out}
        return {"state": pa.table({"x": pa.array([], pa.int8())}).replace_schema_metadata(
            {"gpuwm.union": json.dumps(meta)})}

    def state_parts(self) -> dict[str, bool]:
        return {}

    def mark_saved(self, written=()) -> None:
        pass

    def restore(self, snapshot: dict, parts: dict | None = None) -> "Union":
        import json

        meta = json.loads((snapshot["state"].schema.metadata or {}).get(b"gpuwm.union", b"{}"))
        self.rows_in, self.rows_out = meta.get("rows_in", 0), meta.get("rows_out", 0)
        return self
