"""A toy stateful operator added through the stage registry alone: no file
of ``gpuwm/`` names it. Defining :class:`HoldSpec` (a spec class with a
``from_json``) registers the JSON stage kind ``hold``.

``{"hold": {"by": [columns]}}`` holds each row until the watermark passes
its event time (``ts <= W``), then releases it unchanged: the rows of a
stream, delayed to the watermark, per key ``by`` (its state partitions).
It implements the whole contract of :mod:`gpuwm.operator` in plain
PyArrow: one state part, written when it changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from gpuwm.operator import Operator, OperatorSpec, StageContext, json_options
from gpuwm.timecol import event_time_domain


@dataclass(frozen=True)
class HoldSpec(OperatorSpec):
    column: str
    by: tuple[str, ...] = ()

    kind: ClassVar[str] = "hold"

    def __post_init__(self) -> None:
        object.__setattr__(self, "by", tuple(self.by))

    @classmethod
    def from_json(cls, options: dict, ctx: StageContext) -> "HoldSpec":
        o = json_options("hold", options, {"by"})
        return cls(ctx.event_time, o.get("by", ()))

    def build(self, profile: Any = None, backend: str | None = None) -> "Hold":
        return Hold(self)

    def keys(self) -> tuple[str, ...]:
        return self.by

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        event_time_domain(schema, self.column)
        return schema


class Hold(Operator):
    def __init__(self, spec: HoldSpec):
        self.spec = spec
        self._schema: pa.Schema | None = None
        self._held: pa.Table | None = None
        self._changed = False
        self.drained_watermark = None
        self.rows_in = self.rows_out = self.late_rows = self.null_rows = 0

    def bind(self, schema: pa.Schema) -> "Hold":
        if self._schema is None:
            self._schema, self._domain = schema, event_time_domain(schema, self.spec.column)
            self._held = self._held if self._held is not None else schema.empty_table()
        return self

    def push(self, rows: Any) -> None:
        t = self._chunk(rows)
        t = t if isinstance(t, pa.Table) else t.to_arrow()
        self._held = pa.concat_tables([self._held, t.cast(self._schema)])
        self._changed = True

    def drain(self, watermark: Any) -> pa.Table:
        self.drained_watermark = watermark
        w = self._domain.to_raw(watermark) if self._schema is not None else None
        if w is None or not self._held.num_rows:
            return self._schema.empty_table() if self._schema is not None else pa.table({})
        ts = self._held.column(self.spec.column).cast(pa.int64())
        due = pc.less_equal(ts, w)
        out = self._held.filter(due)
        if out.num_rows:
            self._held = self._held.filter(pc.invert(due))
            self._changed = True
        self.rows_out += out.num_rows
        return out

    @property
    def state_rows(self) -> int:
        return 0 if self._held is None else self._held.num_rows

    @property
    def state_bytes(self) -> int:
        return 0 if self._held is None else self._held.nbytes

    def state_tables(self) -> dict[str, pa.Table]:
        meta = {"rows_in": self.rows_in, "rows_out": self.rows_out}
        return {"meta": pa.table({"json": [json.dumps(meta)]})}

    def state_parts(self) -> dict[str, bool]:
        return {"held": self._changed}

    def snapshot_part(self, name: str) -> pa.Table:
        return self._held

    def mark_saved(self, written=()) -> None:
        self._changed = False

    def load_state(self, tables: dict[str, pa.Table], parts: dict[str, pa.Table]) -> "Hold":
        meta = json.loads(tables["meta"].column("json")[0].as_py())
        self.rows_in, self.rows_out = meta["rows_in"], meta["rows_out"]
        self._held = parts["held"]
        return self
