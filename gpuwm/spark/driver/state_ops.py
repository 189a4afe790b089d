"""gpuwm's stateful stages in Spark's own progress (``stateOperators``).

Spark's progress reporter lists one ``StateOperatorProgress`` per node of
the batch's executed plan that is a ``StateStoreWriter``, read from that
node's metrics after the batch (``ProgressContext.extractStateOperatorMetrics``):
``lastProgress``/``recentProgress``, every listener's ``QueryProgressEvent``
(Python and JVM, the event log) and the UI's state charts. gpuwm's stages
run in its own job, so Spark finds none. Here, before the query starts,
the stream gets one marker per stateful stage (:func:`with_state_nodes`),
which gpuwm's strategy plans as a pass-through ``StateStoreWriter`` node
(``gpuwm/spark/jvm/scala/GpuwmState.scala``, compiled at first use); after
each batch the driver sets the figures of its stages on those nodes
(:func:`tell_spark_state`), inside the batch's ``foreachBatch`` call, before
Spark reads them.

The entries follow Spark's meanings (its ``StateStoreWriter`` metrics),
named as Spark names the operator each stage stands for
(:func:`spark_operator`; the driver README's table says which are Spark's
counts exactly):

* ``numRowsTotal`` — rows in the stage's state after the batch;
* ``numRowsUpdated`` — state rows written by the batch (an aggregation's
  groups the batch touched, a dedup's new keys, a join's buffered rows);
* ``numRowsRemoved`` — state rows the watermark removed (an aggregation's
  closed groups, emitted; expired keys and rows);
* ``numRowsDroppedByWatermark`` — input the stage dropped as late, counted
  as Spark counts it (an aggregation: late groups of the batch's input);
* ``memoryUsedBytes`` — the state's bytes; ``numShufflePartitions`` and
  ``numStateStoreInstances`` — gpuwm's vnodes;
* ``allUpdatesTimeMs`` — the stage's kernel time, ``commitTimeMs`` — its
  state saving (both summed over vnodes);
* ``customMetrics`` — gpuwm's own: ``gpuwmLateRows`` (input rows behind the
  watermark: a hopping window's, per window missed), ``gpuwmRowsIn``,
  ``gpuwmRowsOut``, ``gpuwmOnGpu`` (1: the GPU backend).

Each marker writes Spark's operator metadata (``<checkpoint>/state/<id>/
_metadata/metadata``: Spark's ``state-metadata`` reader lists the stages)
on a run's first batch; the ids are the stages' indexes, so a restart with
another pipeline on the same checkpoint is refused by Spark as it refuses
a changed query.
"""

from __future__ import annotations

from typing import Any

from ..executor.plan import Plan

#: gpuwm's figures in each entry's ``customMetrics`` (declared when the query is planned)
CUSTOM = ("gpuwmLateRows", "gpuwmRowsIn", "gpuwmRowsOut", "gpuwmOnGpu")


def spark_operator(stage: Any) -> str | None:
    """The name Spark gives the operator stage ``stage`` stands for (its
    ``StateStoreWriter.shortName``); gpuwm's own for stages Spark has no
    streaming operator for (sort, top-N, over); None for a stage without
    state (select, project, union)."""
    kind = stage.kind
    if kind == "window":
        return "sessionWindowStateStoreSaveExec" if type(stage).__name__ == "SessionSpec" else "stateStoreSave"
    if kind == "dedup":  # Spark's dropDuplicates with the event time among the keys, or ...WithinWatermark
        return "dedupe" if stage.column in stage.key else "dedupeWithinWatermark"
    if kind == "join":
        return "symmetricHashJoin"
    return {"sort": "gpuwmSort", "topn": "gpuwmTopN", "over": "gpuwmOver"}.get(kind)


def stateful_stages(plan: Plan) -> list[tuple[int, str]]:
    """(stage index, Spark's operator name) of each stage that keeps state."""
    return [(i, name) for i, s in enumerate(plan.stages) if (name := spark_operator(s)) is not None]


def with_state_nodes(spark, stream, plan: Plan, state_dir: str):
    """``stream`` under one marker per stateful stage of ``plan``, the first
    stage's outermost (Spark lists them in that order); ``state_dir``: the
    query's ``<checkpoint>/state``. The stream as it is when there is none."""
    stages = stateful_stages(plan)
    if not stages:
        return stream
    from ...backend import log
    from ...errors import GpuwmError
    from ..catalyst.plans import of_rows
    from ..jvm.build import load

    try:
        strategy = load(spark)
    except GpuwmError as e:  # (monitoring never stops a query: it runs, its progress without state)
        log.warning("gpuwm: Spark's progress will not list the query's state: %s", e)
        return stream
    strategy.register(spark._jsparkSession.experimental())
    logical = stream._jdf.logicalPlan()
    for i, name in reversed(stages):
        logical = strategy.marker(name, i, plan.vnodes, ",".join(CUSTOM), state_dir, logical)
    return of_rows(spark, logical)


def figures(st: dict, vnodes: int, gpu: bool, filter_late: int = 0) -> dict[str, int]:
    """One stage's batch metrics ``st`` (summed over vnodes: the tasks'
    ``stages`` entry) as the ``GpuwmStateExec`` metrics Spark's progress
    reads. A window aggregation counts Spark's groups itself
    (``groups_updated``, ``groups_removed``, ``late_groups``); a dedup
    writes the keys it lets through; the other stages every row they keep
    (the input less the late); what left the state is what was there,
    plus what came, less what is. ``filter_late``: the rows the watermark
    filter dropped before the stage (the first stage's input; Spark drops
    them in the stage), late input too (a window aggregation counted their
    groups itself).

    >>> f = figures({"kind": "dedup", "state_rows_before": 10, "state_rows": 12, "rows_pushed": 9, "late_rows": 1,
    ...              "rows_emitted": 5, "kernel_s": 0.0125, "state_save_s": 0.002, "state_bytes": 900}, 2, False)
    >>> f["numUpdatedStateRows"], f["numRemovedStateRows"], f["numRowsDroppedByWatermark"], f["allUpdatesTimeMs"]
    (5, 3, 1, 12)
    """
    after, late = st.get("state_rows", 0), st.get("late_rows", 0)
    if "groups_updated" in st:
        updated, removed, dropped = st["groups_updated"], st["groups_removed"], st["late_groups"]
    else:
        updated = st.get("rows_emitted", 0) if st.get("kind") == "dedup" else max(0, st.get("rows_pushed", 0) - late)
        removed, dropped = max(0, st.get("state_rows_before", 0) + updated - after), late + filter_late
    return {"numTotalStateRows": after, "numUpdatedStateRows": updated, "numRemovedStateRows": removed,
            "numRowsDroppedByWatermark": dropped, "stateMemory": st.get("state_bytes", 0),
            "numStateStoreInstances": vnodes, "allUpdatesTimeMs": int(st.get("kernel_s", 0.0) * 1000),
            "commitTimeMs": int(st.get("state_save_s", 0.0) * 1000),
            "gpuwmLateRows": late, "gpuwmRowsIn": st.get("rows_pushed", 0), "gpuwmRowsOut": st.get("rows_emitted", 0),
            "gpuwmOnGpu": int(gpu)}


def tell_spark_state(spark, query, plan: Plan, m: dict) -> None:
    """The figures of batch metrics ``m``'s stages (:func:`figures`) set on
    the ``GpuwmStateExec`` nodes of the batch's executed plan, on the
    driver inside the batch's ``foreachBatch`` call (Spark reads them when
    it builds the batch's progress, after the call): one py4j call, the
    nodes found on the JVM. ``query``: the query's ``StreamExecution``
    (JVM; None: not found)."""
    stages = stateful_stages(plan)
    if query is None or not m.get("stages") or not stages:
        return
    from ..jvm.build import loaded

    strategy = loaded(spark)
    if strategy is None:  # (not built: with_state_nodes said why)
        return
    try:
        root = query.lastExecution().executedPlan()
    except Exception:  # noqa: BLE001  not started yet: nothing to tell
        return
    gpu = str(m.get("backend", "")).startswith("gpu")
    said = []
    for i, _ in stages:
        got = figures(m["stages"][i], plan.vnodes, gpu, m.get("late_rows", 0) if i == 0 and not plan.graph else 0)
        said.append(f"{i}:" + ",".join(f"{k}={int(v)}" for k, v in got.items()))
    strategy.report(root, ";".join(said))
