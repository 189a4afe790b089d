"""A translated query as a JSON spec (``explain(df, spec=True)``): its
inputs (each a source and its watermark), its stages as the records
``gpuwm run`` reads, the sink's projection (``output``) — the same
pipeline ``accelerate`` builds, with no Python. A source is written as a
spec's: a file stream (``format``, ``path``, ``schema``, ``options``), a
Nexmark stream or a Kafka topic, with the selects of its columns the
translation made (renames); a source with filters or computed columns
below its watermark, or one watermark read by two inputs, has no spec
form, and :func:`query_spec` says so in one line."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ...errors import ConfigError
from ..catalyst.plans import node_kind, peel, quoted
from ..jvm.objects import java_map, scala_iter
from .translation import kind_of, options_of


def query_spec(acc: Any, checkpoint: str = "ck/query", sink: dict | None = None) -> dict:
    """The spec of ``acc`` (an :class:`~gpuwm.spark.front.accelerate.Accelerated`
    that gpuwm runs), with ``checkpoint`` and ``sink`` (a spec's, default
    ``{"parquet": "out/query"}``); :class:`~gpuwm.errors.ConfigError` where
    it has none."""
    t = acc.translation
    if t is None:
        raise ConfigError(f"Spark runs the whole query ([{acc.refused.code}] {acc.refused.operator}: "
                          f"{acc.refused.reason}): there is no gpuwm spec of it")
    ins = t.inputs or {None: t}
    nodes = [i.node for i in ins.values() if i.node is not None]
    if len(set(nodes)) != len(nodes):
        raise ConfigError("two inputs read one withWatermark (they share its watermark): a spec has no form for it")
    inputs = {n: {"source": _source(i.source, n), "watermark": {"column": i.column, "delay": _duration(i.delay),
                                                                  "profile": acc.profile}} for n, i in ins.items()}
    stages = []
    for k, st in enumerate(t.stages):
        kind = kind_of(st)
        record = {kind: _jsonable(options_of(st))}
        if t.graph is not None and k < len(t.graph):  # a graph's stage: its name, and what it reads
            record["name"] = t.graph[k][0]
            if kind != "join":
                record["input"] = t.graph[k][1][0]
        stages.append(record)
    spec: dict[str, Any] = {"inputs": inputs} if t.inputs else inputs[None]
    spec.update({"stages": stages, "output": t.output, "checkpoint": checkpoint,
                 "sink": sink or {"parquet": "out/query"}})
    if acc.vnodes:
        spec["vnodes"] = acc.vnodes
    return spec


def _duration(td: timedelta) -> str:
    """A duration as a spec writes it, in its largest whole unit (``"4 seconds"``, ``"4999999 us"``)."""
    us = td // timedelta(microseconds=1)
    for unit, n in (("days", 86_400_000_000), ("hours", 3_600_000_000), ("minutes", 60_000_000),
                    ("seconds", 1_000_000), ("ms", 1_000)):
        if us % n == 0:
            return f"{us // n} {unit}"
    return f"{us} us"


def _jsonable(x: Any) -> Any:
    """A stage's options with each duration as a spec writes it."""
    if isinstance(x, timedelta):
        return _duration(x)
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def _source(df, name: str | None) -> dict:
    """A source DataFrame (below ``withWatermark``) as a spec's ``source``."""
    plan = df._jdf.queryExecution().analyzed()
    rel, above = peel(plan, kinds=("Project",))
    said = f"input {name!r}" if name else "the source"
    if node_kind(rel) == "StreamingRelation":
        ds = rel.dataSource()
        scala = ds.options()  # (a Scala map)
        opts = {str(k): str(scala.apply(k)) for k in scala_iter(scala.keys())}
        out = {"format": str(ds.className()), "schema": ", ".join(
            f"{quoted(f.name)} {f.dataType.simpleString()}" for f in _schema(rel))}
        if "path" in opts:
            out["path"] = opts.pop("path")
    elif node_kind(rel) == "StreamingRelationV2" and str(rel.sourceName()) in ("nexmark", "kafka"):
        opts = {k: v for k, v in java_map(rel.extraOptions()).items() if k not in ("checkpointLocation",
                                                                                 "gpuwmFsOptions")}
        out = {"format": str(rel.sourceName())}
    else:
        raise ConfigError(f"{said} reads {node_kind(rel)}: a spec's sources are files, Nexmark and Kafka")
    if opts:
        out["options"] = opts
    selects = []
    for p in reversed(above):
        step = []
        for e in scala_iter(p.projectList()):
            if node_kind(e) == "AttributeReference":
                step.append(quoted(str(e.name())))
            elif node_kind(e) == "Alias" and node_kind(e.child()) == "AttributeReference":
                step.append(f"{quoted(str(e.child().name()))} AS {quoted(str(e.name()))}")
            else:
                raise ConfigError(f"{said} computes `{e.sql()}` below its watermark: a spec's source selects "
                                  "columns only")
        selects.append(step)
    if selects:
        out["select"] = selects
    return out


def _schema(rel) -> list:
    """The fields of the file relation ``rel``, as PySpark's types."""
    from pyspark.sql.types import _parse_datatype_json_string

    return list(_parse_datatype_json_string(str(rel.schema().json())).fields)
