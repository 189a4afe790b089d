"""Schemas between Spark and Arrow: the query's columns as Arrow's (and
back), a plan's schema, and whether two Arrow schemas write the same
columns as Spark does."""

from __future__ import annotations


def arrow_schema(spark_schema):
    """A Spark ``StructType`` as the Arrow schema of its rows (PySpark's own conversion)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from ..jvm.versions import arrow_timezone

    return to_arrow_schema(spark_schema, timezone="UTC") if arrow_timezone() else to_arrow_schema(spark_schema)


def spark_schema(schema):
    """An Arrow schema as a Spark ``StructType`` (PySpark's own conversion)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from ..jvm.versions import arrow_timezone

    return from_arrow_schema(schema, prefer_timestamp_ntz=False) if arrow_timezone() else from_arrow_schema(schema)


def plan_schema(plan):
    """The Arrow schema of a JVM plan's rows (its ``schema()``)."""
    from pyspark.sql.types import _parse_datatype_json_string

    return arrow_schema(_parse_datatype_json_string(str(plan.schema().json())))


def columns_apart(got, want, whose: str = "the task's", of: str = "the query's") -> str | None:
    """Why Arrow schema ``got`` would not write ``want``'s columns
    (:func:`same_columns`), in one line, or None."""
    if same_columns(got, want):
        return None
    return f"{whose} columns ({schema_text(got)}) would not be {of} ({schema_text(want)})"


def schema_text(schema) -> str:
    """An Arrow schema in one line: ``name type, ...``."""
    return ", ".join(f"{f.name} {f.type}" for f in schema)


def same_columns(got, want) -> bool:
    """Whether Arrow schema ``got`` has ``want``'s names in order, each of a
    type that writes as Spark's (timestamps of one unit, any string)."""
    return got.names == want.names and all(_same_type(a.type, b.type) for a, b in zip(got, want))


def _same_type(a, b) -> bool:
    """Same values as Spark writes them: nested types field by field (a
    list's item name and nullability aside)."""
    import pyarrow as pa

    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return a.unit == b.unit
    if pa.types.is_string(a) or pa.types.is_large_string(a):
        return pa.types.is_string(b) or pa.types.is_large_string(b)
    if pa.types.is_list(a) and pa.types.is_list(b):
        return _same_type(a.value_type, b.value_type)
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        return [f.name for f in a] == [f.name for f in b] and all(_same_type(x.type, y.type) for x, y in zip(a, b))
    return a.equals(b)
