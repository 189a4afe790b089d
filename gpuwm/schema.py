"""Schema helpers every operator shares: a schema checked between calls,
and a schema as text (in a snapshot's JSON).

>>> import pyarrow as pa
>>> s = pa.schema([("ts", pa.int64())])
>>> schema_from_text(schema_to_text(s)).equals(s)
True
"""

from __future__ import annotations

import base64

import pyarrow as pa

from .errors import SchemaError


def schema_to_text(schema: pa.Schema | None) -> str | None:
    return None if schema is None else base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_from_text(text: str | None) -> pa.Schema | None:
    return None if text is None else pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def same_schema(expected: pa.Schema, got: pa.Schema, op: str) -> None:
    if not expected.equals(got, check_metadata=False):
        raise SchemaError(f"{op}: schema changed between calls.\nexpected: {expected}\ngot:      {got}")
