"""Spark's JVM objects read from Python through py4j: Scala collections,
Java maps, the RDDs under a micro-batch's plan. No gpuwm import."""

from __future__ import annotations

from typing import Any, Iterator


def jvm_class(jvm, name: str) -> Any:
    """The JVM class of the fully qualified ``name`` over py4j's view ``jvm``
    (``spark._jvm``): where a line names a class (:mod:`.versions`)."""
    got = jvm
    for part in name.split("."):
        got = getattr(got, part)
    return got


def scala_iter(it) -> Iterator[Any]:
    it = it.iterator() if hasattr(it, "iterator") else it
    while it.hasNext():
        yield it.next()


def java_map(m) -> dict[str, str]:
    """A ``java.util.Map`` as a dict of strings. (py4j's own iteration ends
    in a Java exception that PySpark converts, ~17 ms a map.)"""
    it, out = m.entrySet().iterator(), {}
    while it.hasNext():
        e = it.next()
        out[str(e.getKey())] = str(e.getValue())
    return out


def scan_rdds(batch_df, kind: str) -> list:
    """The RDDs of class ``kind`` (``FileScanRDD``, ``DataSourceRDD``: a
    source's scan) under a micro-batch's DataFrame, left to right."""
    stack, found = [batch_df._jdf.queryExecution().optimizedPlan().rdd()], []
    while stack:
        r = stack.pop()
        if r.getClass().getSimpleName() == kind:
            found.append(r)
            continue
        deps = r.dependencies()
        for i in range(deps.length() - 1, -1, -1):
            stack.append(deps.apply(i).rdd())
    return found
