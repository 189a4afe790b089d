"""The driver's side of a running query.

Before Spark starts, the checkpoint is made ready
(:func:`gpuwm.spark.driver.prepare.prepare_checkpoint`). Then each
micro-batch, from Spark's ``foreachBatch`` (:class:`Driver`,
:meth:`Driver.run_batch` in phases): a batch committed before a restart
recognised, the state it starts from, its processing time, what its tasks
read themselves (decided with :mod:`gpuwm.spark.driver.direct` and
:mod:`gpuwm.spark.driver.kafka`), its job of :mod:`gpuwm.spark.executor.tasks`
planned — once per query where it can — and run, its metrics, the rows handed
to a foreachBatch sink, the commit of what the tasks wrote, the drain batch it
asks for (:mod:`gpuwm.spark.driver.drain`), and its report: ``history``, the
running totals, Spark's progress told gpuwm's watermark and input rows, the
console sink's rows and the verbose line.

Operator kinds do not appear here: the :class:`~gpuwm.spark.executor.plan.Plan`'s
stages, segments and capabilities say what runs where.
"""

from __future__ import annotations

import json
import sys
import threading
from datetime import datetime, timezone
from functools import partial
from typing import Any, Callable

import pyarrow as pa

from ...backend import log
from ...errors import ConfigError, SinkError, StateError
from ...frame import bytes_to_table
from ...inputs import input_schemas
from ...schema import schema_to_text
from ..catalyst.schema import spark_schema
from ..executor import tasks
from ..executor.exchange import FLOW_SCHEMA, merge_task
from ..executor.plan import Plan, is_timestamp
from ..io.sinks import clear_batch
from ..io.sources import KAFKA_COUNTS, add_counts
from ..jvm.objects import scala_iter
from ..storage import store
from ..storage.checkpoint import Owner
from .state_ops import tell_spark_state


def tell_spark_watermark(query, watermark_us: int | None) -> None:
    """Make ``watermark_us`` (gpuwm's combined watermark after the batch
    running now, epoch µs; None: none yet) Spark's own, so that Spark's
    progress (``eventTime.watermark``), its UI and listeners show it.
    ``query``: the query's ``StreamExecution`` (JVM; None: not found).

    The query's stream carries a ``withWatermark(time, delay)``
    (:func:`gpuwm.spark.driver.launch.spark_watermark`) that no Spark operator
    uses; Spark sets its next watermark from the largest event time that
    node's accumulator saw, minus its delay. Here, on the driver after
    gpuwm's job, that accumulator is reset (rows Spark read for gpuwm went
    through it) and given the watermark (whole ms, as Spark keeps it) plus
    the node's delay: Spark's watermark becomes gpuwm's, one batch later
    as Spark's own does, and the batch's ``eventTime`` max/min/avg show
    that one value — under a bounded delay, the newest event time the
    watermark trails (exactly it, in whole ms, under profile ``spark``)."""
    if query is None:
        return
    try:
        plan = query.lastExecution().executedPlan()
    except Exception:  # noqa: BLE001  not started yet, or a Spark without these: its progress just lacks it
        return
    nodes, todo = [], [plan]
    while todo:
        node = todo.pop()
        if str(node.getClass().getSimpleName()) == "EventTimeWatermarkExec":
            nodes.append(node)
        todo.extend(scala_iter(node.children()))
    for node in nodes:
        acc = node.eventTimeStats()
        acc.reset()
        if watermark_us is not None:
            acc.add(watermark_us // 1000 + int(node.delayMs()))


def gpuwm_durations(m: dict) -> dict[str, int]:
    """Batch metrics ``m`` as gpuwm's phases in Spark's progress
    (``durationMs``, ms), disjoint in wall time: the job (``job_s``:
    planning and tasks) as its tasks' reading, kernels and state saving
    (summed over tasks; tasks that ran at once, their shares of the job's
    wall time) and the rest of it (``gpuwmJob``: Spark's scheduling, the
    tasks' other work); the sink the driver hands the rows to
    (``gpuwmSink``: a foreachBatch function, Delta, Kafka, memory; a file
    sink's ``_spark_metadata`` log) and
    gpuwm's commit.

    >>> gpuwm_durations({"job_s": 1.0, "source_read_s": 0.2, "kernel_s": 0.3, "state_save_s": 0.1,
    ...                  "commit_s": 0.05})
    {'gpuwmRead': 200, 'gpuwmKernels': 300, 'gpuwmStateSave': 100, 'gpuwmJob': 400, 'gpuwmSink': 0, 'gpuwmCommit': 50}
    """
    job = m.get("job_s", 0.0)
    tasks = {"gpuwmRead": m.get("source_read_s", 0.0), "gpuwmKernels": m.get("kernel_s", 0.0),
             "gpuwmStateSave": m.get("state_save_s", 0.0)}
    inside = sum(tasks.values())
    share = min(1.0, job / inside) if inside > 0 else 0.0
    # (whole ms down: their sum never passes the time they took, which Spark's addBatch holds)
    out = {k: int(v * share * 1000) for k, v in tasks.items()}
    out["gpuwmJob"] = max(0, int(job * 1000) - sum(out.values()))
    out["gpuwmSink"] = int((m.get("foreach_batch_s", 0.0) + m.get("sink_log_s", 0.0)) * 1000)
    out["gpuwmCommit"] = int(m.get("commit_s", 0.0) * 1000)
    return out


def tell_spark_durations(query, m: dict) -> None:
    """gpuwm's phases of the batch running now (:func:`gpuwm_durations`)
    into Spark's progress (``durationMs``: ``lastProgress``, listeners, the
    UI's operation-duration chart), on the driver inside the batch's
    ``foreachBatch`` call, which Spark times as ``addBatch`` when it
    returns: ``addBatch`` is given their sum back, so that it keeps Spark's
    own part of the call and the keys still add up to the trigger's time.
    ``query``: the query's ``StreamExecution`` (JVM; None: not found)."""
    if query is None:
        return
    try:
        ctx = query.getLatestExecutionContext()
        phases = gpuwm_durations(m)
        for key, ms in phases.items():
            ctx.reportTimeTaken(key, ms)
        ctx.reportTimeTaken("addBatch", -sum(phases.values()))
    except Exception:  # noqa: BLE001  internal API: never fail a batch over progress reporting
        return


def next_batch_certain(query) -> bool:
    """Whether Spark's next trigger is sure to find new data, read on the
    driver during a batch: when Spark planned the batch running now, one of
    its sources reported a latest offset beyond the batch's end (Spark's
    Kafka source under ``maxOffsetsPerTrigger``: ``latestOffset`` in the
    progress). Offsets only grow, so the next trigger plans a batch with
    that source's data — which drains like a drain batch would
    (:mod:`gpuwm.spark.driver.drain`). ``query``: the query's ``StreamExecution``
    (JVM). False when it cannot tell: no such source (Spark's file source
    reports none), or the query not found."""
    if query is None:
        return False
    try:
        latest, ends = query.latestOffsets(), query.availableOffsets()
        it = latest.iterator()
        while it.hasNext():
            pair = it.next()
            end = ends.get(pair._1())
            if pair._2() is not None and end.isDefined() and \
                    offset_beyond(json.loads(pair._2().json()), json.loads(end.get().json())):
                return True
    except Exception:  # noqa: BLE001  not started yet, or a Spark without these: a drain batch, as before
        return False
    return False


def offset_beyond(latest: Any, end: Any) -> bool:
    """Whether a source's ``latest`` offset (as JSON) is past ``end``: a
    number greater, or an object (Kafka's ``{topic: {partition: offset}}``)
    with every field of ``end`` in it, none behind and one past."""
    if isinstance(latest, bool) or isinstance(end, bool):
        return False
    if isinstance(latest, int) and isinstance(end, int):
        return latest > end
    if not (isinstance(latest, dict) and isinstance(end, dict) and end and set(end) <= set(latest)):
        return False
    past = False
    for k, e in end.items():
        if latest[k] == e:
            continue
        if not offset_beyond(latest[k], e):
            return False
        past = True
    return past


def map_in_arrow(df, fn: Callable, schema):
    """``df.mapInArrow(fn, schema)`` for columns of any name: PySpark's
    ``mapInArrow`` reads each column as ``df[name]``, which parses the name
    (``a.b`` a struct's field, a backtick a quote); where one is named so,
    the columns go in by position and ``fn`` gets them under their names
    (:func:`~gpuwm.spark.executor.tasks.named_input`)."""
    names = df.columns
    if not any("." in n or "`" in n for n in names):
        return df.mapInArrow(fn, schema)
    return df.toDF(*(f"_{i}" for i in range(len(names)))).mapInArrow(partial(tasks.named_input, fn, names), schema)


class Driver:
    """Runs a started query's micro-batches on the driver (see the module
    docstring); ``history`` gets each batch's metrics."""

    def __init__(self, plan: Plan, spark, df, *, inputs: tuple[str, ...], read: str, direct: bool,
                 input_dirs: list[str], kafka: dict | None, owner: Owner, history: list[dict],
                 on_batch: Callable[[dict], None] | None, verbose: bool, name: str | None,
                 foreach_batch: tuple | None = None, input_steps: list | None = None):
        self.plan = plan
        self.foreach_batch = foreach_batch  # a foreachBatch sink's (function, Spark schema)
        self.file_log = None  # a parquet sink's in Spark's layout: its _spark_metadata (file_log.SparkFileLog)
        self.spark = spark
        self.df = df
        from ..io.nexmark import nexmark_source

        self._nexmark = nexmark_source(df)  # a Nexmark stream's options: its tasks generate each batch
        from .direct import files_steps, nexmark_projection

        if self._nexmark is not None:  # and apply the selects and filters over the stream
            got = nexmark_projection(df)
            self._nexmark["steps"] = got[0] if isinstance(got, tuple) else None

        #: the selects over a Parquet source its tasks evaluate on each file's rows, and the files' schema (only
        #: the columns the selects read are read); with several inputs, each one's (``input_steps``)
        self._files_steps = None if inputs or self._nexmark is not None or kafka is not None else files_steps(df)
        self._input_steps = input_steps or [None] * len(inputs)
        self.checkpoint = plan.checkpoint
        self.inputs = inputs
        self.read = read
        self._direct = direct  # the input qualifies for gpuwm.spark.driver.direct
        self._input_dirs = input_dirs
        self._kafka = kafka  # the Kafka source's projection (gpuwm.spark.driver.kafka.kafka_source)
        self._warned_direct = False
        self._owner = owner
        self._last_filter: tuple[str | None, bytes | None] = (None, None)  # (name, bytes) of the last commit's
        self.history = history
        self.on_batch = on_batch
        self.verbose = verbose
        self.name = name
        self.query = None  # Spark's StreamingQuery, once started
        self._sq = None  # its StreamExecution (JVM): its watermark is told gpuwm's, its offsets read
        from .drain import Drains

        self.drains = Drains(self.checkpoint)  # the drain requests (gpuwm.spark.driver.drain)
        from .kafka import source_options

        # a source that may hold available data back: its latest offset does not promise a next batch
        self._holds_back = any(k.lower() == "minoffsetspertrigger" for o in source_options(df) for k in o)
        # the batch's job planned once, by the number of its input parts (direct input over one vnode)
        self._planned: dict[int, Any] = {}
        # py4j runs this thread's calls on one JVM thread: a local property set here reaches the job's tasks
        self._pinned = type(getattr(spark.sparkContext, "_gateway", None)).__name__ == "ClientServer"

    def run_batch(self, df, batch_id: int) -> None:
        """Spark's ``foreachBatch``: run micro-batch ``batch_id`` and commit it.

        In phases: a batch gpuwm committed before a restart only asks for its
        drain again (:meth:`_recommit`); any other starts from the state the
        batch before it committed (:meth:`_state_before`), with its processing
        time and whether it ends the input; its job is planned
        (:meth:`_plan_job`) and run (:meth:`_run_job`); its metrics are the
        tasks' (:meth:`_batch_metrics`), Spark's progress told the input rows
        the tasks read themselves (:meth:`_report_input_rows`), and the
        watermark filter's after the batch (:meth:`_filter_after`); then the
        commit (:meth:`_commit`, a foreachBatch sink handed the rows first),
        the drain batch asked for (:meth:`_ask_drain`), and the batch reported
        (:meth:`_report`). ``job_s`` times the planning and the job,
        ``wall_s`` the batch up to its tasks' metrics."""
        import time

        from . import drain

        t0 = time.perf_counter()
        plan = self.plan
        ck = plan.checkpoint
        self._owner.check()
        committed = ck.committed_batches()
        if batch_id in committed:  # committed before a crash that Spark's commit did not outlive:
            # its output and state are all written; only the drain request may be missing
            return self._recommit(batch_id)
        prev_commit, prev, fstate = self._state_before(batch_id, committed)
        now = ck.now_for_batch(batch_id, datetime.now(timezone.utc).isoformat())
        end = drain.ends_input(ck, batch_id, self.drains.request)
        flow = spark_schema(FLOW_SCHEMA)
        t_job = time.perf_counter()
        clear_batch(plan, batch_id)  # an earlier attempt's parts (over another number of vnodes, after a rescale)
        job, direct, args = self._plan_job(df, batch_id, fstate, now, prev, end, flow)
        rows = self._run_job(job, args)
        t_job = time.perf_counter() - t_job
        results = [json.loads(r["__metrics"]) for r in rows]
        versions, files, filter_name = store.committed_versions(results)
        m = self._batch_metrics(plan, batch_id, results)
        m.update(wall_s=time.perf_counter() - t0, job_s=t_job, read="spark" if direct is None else "direct",
                 job="new" if args is None else "planned")
        if direct is not None and m["input_rows"]:  # Spark's scan did not run: its progress gets gpuwm's count
            self._report_input_rows(m)
        new_filter, filt, t_now = self._filter_after(m, filter_name, now, end)
        m.update(time_kind="timestamp" if is_timestamp(plan) else "int", output=plan.sink.path,
                 totals=add_totals((prev_commit or {}).get("metrics", {}).get("totals"), m))
        # the console sink's rows: exchange pieces, gone once the batch is committed
        outs = [ck.loc.read_table(r["output"]) for r in results if "output" in r]
        sink_files = [f for r in results for f in r.get("sink_files", ())]
        self._commit(batch_id, versions, files, filter_name, new_filter, m, sink_files)
        self._ask_drain(batch_id, filt, t_now, m)
        self._report(batch_id, m, outs, end)

    def _state_before(self, batch_id: int,
                      committed: list[int]) -> tuple[dict | None, store.Prev | None, bytes | None]:
        """What batch ``batch_id`` starts from: the commit of the batch
        before it, its state versions (:class:`~gpuwm.spark.storage.store.Prev`)
        and the watermark filter's state after it — (None, None, None) when
        gpuwm committed no batch before it (the checkpoint's first).
        ``committed``: the batches gpuwm committed; a StateError when the
        batch before is not among them but an earlier one is (the checkpoint
        was damaged)."""
        ck = self.checkpoint
        prev_commit = ck.commit(batch_id - 1) if (batch_id - 1) in committed else None
        if prev_commit is None and committed and min(committed) < batch_id:
            raise StateError(f"state for batch {batch_id - 1} is missing under {ck}/gpuwm "
                             f"(have {committed}); the checkpoint was damaged")
        prev = None if prev_commit is None else store.Prev.of(prev_commit)
        fstate = None
        if prev is not None:  # the filter's state after batch_id - 1: read already if this driver committed it
            name = prev_commit["filter"]
            fstate = self._last_filter[1] if self._last_filter[0] == name else ck.read_filter(name)
        return prev_commit, prev, fstate

    def _plan_job(self, df, batch_id: int, fstate: bytes | None, now: str, prev: store.Prev | None, end: bool,
                  flow) -> tuple[Any, dict | None, str | None]:
        """The batch's job, not run yet (a DataFrame of the tasks' results,
        rows of ``flow``); what its tasks read themselves
        (:meth:`_direct_input`; None: the rows of Spark's ``df``); and the
        batch's arguments when the job is the one planned once per query
        (over one vnode, the input read directly: they reach its task as a
        local property of the job, :meth:`_run_job`), else None (a new job,
        the arguments pickled in its functions)."""
        plan = self.plan
        direct, parts = self._direct_input(df, batch_id)
        args = None  # this batch's arguments, for a job planned once (tasks.planned_single_task)
        if direct is not None and plan.vnodes == 1 and self._pinned:
            args = tasks.job_args(fstate, now, batch_id, prev, direct, end)
            args = args if len(args) <= tasks.ARGS_MAX else None
        if direct is not None and args is None:  # the tasks read / generate the input; Spark hands them part numbers
            df = self.spark.range(0, parts, 1, max(parts, 1) if plan.vnodes > 1 else 1)
        if args is not None:  # (the same, planned once)
            job = self._planned.get(parts)
            if job is None:
                job = self._planned[parts] = self.spark.range(0, parts, 1, 1).coalesce(1).mapInArrow(
                    partial(tasks.planned_single_task, plan), flow)
        elif plan.vnodes == 1:
            # one state partition: one narrow stage, no shuffle (input
            # partitions are concatenated in order inside the task)
            job = map_in_arrow(df.coalesce(1), partial(tasks.single_task, plan, fstate, now, batch_id, prev,
                                                       direct=direct, end=end), flow)
        else:
            job = self._vnodes_job(df, batch_id, fstate, now, prev, direct, end, flow)
        return job, direct, args

    def _vnodes_job(self, df, batch_id: int, fstate: bytes | None, now: str, prev: store.Prev | None,
                    direct: dict | None, end: bool, flow):
        """The batch's job over several vnodes: the watermark filter's tasks
        over ``df``'s partitions (and, under alignment, one more for the rows
        it held back), a hash shuffle on the vnode to the vnodes' tasks (each
        vnode given a tick row, so that every one runs), then each later
        segment's exchange and, for a sort, the exchange by event-time range
        and its merge — all one job."""
        plan = self.plan
        s1 = tasks.stage1_schema(plan)
        stage1 = map_in_arrow(df, partial(tasks.filter_task, plan, fstate, direct=direct, batch_id=batch_id,
                                          now_iso=now, end=end), spark_schema(s1))
        if plan.aligned:  # one more task reads the rows alignment held back (before the new rows)
            stage1 = stage1.unionByName(self.spark.range(0, 1, 1, 1).mapInArrow(
                partial(tasks.filter_task, plan, fstate, direct={"held": True}, partition=-1,
                        batch_id=batch_id, now_iso=now, end=end), spark_schema(s1)))
        ticks = self.spark.range(plan.vnodes).selectExpr("cast(id as int) as __vnode",
                                                         f"cast({tasks.KIND_TICK} as tinyint) as __kind")
        rows = stage1.unionByName(ticks, allowMissingColumns=True)
        # a hash shuffle on the vnode (no sort, unlike groupBy().applyInArrow)
        job = map_in_arrow(rows.repartition(plan.vnodes, "__vnode"),
                           partial(tasks.vnodes_task, plan, fstate, now, batch_id, prev, end=end), flow)
        for seg in range(1, len(plan.segments)):  # each later segment: its own exchange, same job
            job = job.repartition(plan.segments[seg].tasks, "__dest").mapInArrow(
                partial(tasks.segment_task, plan, seg, batch_id, prev), flow)
        if plan.range_exchange:  # the sort's released rows, by event-time range, merged range by range
            job = job.repartition(plan.vnodes, "__dest").mapInArrow(partial(merge_task, plan, batch_id), flow)
        return job

    def _run_job(self, job, args: str | None) -> list:
        """Run the batch's job (collect it): its result rows that carry a
        task's metrics. ``args``: the batch's arguments of a job planned once
        (:meth:`_plan_job`), a local property while it runs."""
        sc = self.spark.sparkContext
        if args is not None:  # (on this thread's JVM thread, which runs the job: py4j's pinned threads)
            sc.setLocalProperty(tasks.ARGS_PROPERTY, args)
        try:
            return [r for r in job.collect() if r["__metrics"] is not None]
        finally:
            if args is not None:
                sc.setLocalProperty(tasks.ARGS_PROPERTY, None)

    def _report_input_rows(self, m: dict) -> None:
        """Spark's progress told the input rows of batch metrics ``m``, which
        the tasks read themselves (per input, with several)."""
        from .direct import report_input_rows

        if self.plan.multi:
            report_input_rows(self._stream(), self.checkpoint, m.get("input_rows_by_input", {}),
                              dict(zip(self.inputs, self._input_dirs)))
        else:
            report_input_rows(self._stream(), self.checkpoint, m["input_rows"])

    def _filter_after(self, m: dict, filter_name: str, now: str, end: bool) -> tuple[bytes, Any, datetime]:
        """The watermark filter after the batch, restored from the state its
        tasks wrote (``filter_name``): that state, the filter, and the batch's
        processing time (``now``) as a datetime; its metrics (the splits, idle,
        held back, rows held) added to batch metrics ``m``, with ``now`` and
        ``end`` (the batch ends the input)."""
        plan = self.plan
        new_filter = self.checkpoint.read_filter(filter_name)
        filt = driver_filter(plan.watermark, plan.input_schema, new_filter)
        t_now = datetime.fromisoformat(now)
        m.update(end_of_input=end, processing_time=now, splits=len(filt.split_watermarks),
                 idle_splits=filt.idle_splits(t_now), held_back_splits=filt.held_back(t_now),
                 held_rows=filt.held_rows if plan.aligned else 0)
        return new_filter, filt, t_now

    def _commit(self, batch_id: int, versions: dict[str, str], files: list[str], filter_name: str,
                new_filter: bytes, m: dict, sink_files: list[str] = ()) -> None:
        """Commit the batch: a foreachBatch sink first handed its rows
        (:meth:`_hand_over`, ``foreach_batch_s``), a sink in Spark's layout
        its files ``sink_files`` logged (``sink_log_s``); then, still this
        query's checkpoint, the commit written — the state versions that
        won, the objects they name, the filter's state, the metrics ``m`` —
        and the rows staged for the sink deleted (``commit_s``)."""
        import time

        plan, ck = self.plan, self.checkpoint
        if plan.sink.kind == "foreachBatch":  # the user's sink takes the batch before it is committed
            t_fb = time.perf_counter()
            self._hand_over(batch_id)
            m["foreach_batch_s"] = time.perf_counter() - t_fb
        if self.file_log is not None:  # visible once logged: before gpuwm's commit, as Spark's sink before its own
            t_log = time.perf_counter()
            self._owner.check()
            m["sink_files"] = self.file_log.add(batch_id, sink_files)
            m["sink_log_s"] = time.perf_counter() - t_log
        t_commit = time.perf_counter()
        self._owner.check()
        ck.write_commit(batch_id, versions, files, filter_name, m)
        if plan.sink.kind == "foreachBatch":  # handed over and committed: the staged rows are done with
            plan.sink.location.delete_dir(f"batch_id={batch_id}")
        self._last_filter = (filter_name, new_filter)  # an attempt-unique name: the same name, the same bytes
        m["commit_s"] = time.perf_counter() - t_commit

    def _ask_drain(self, batch_id: int, filt: Any, t_now: datetime, m: dict) -> None:
        """Ask for the drain batch after committed batch ``batch_id``, if one
        is due (:meth:`_next_drain`; ``filt``: the filter after it, ``t_now``
        its processing time); metric ``drain`` says which: ``ended`` (the
        input's end), ``next batch`` (Spark's next trigger is sure to come
        with data, :func:`next_batch_certain`: no drain file), ``asked``, or
        None (none due)."""
        due, ending = self._next_drain(batch_id, filt, t_now)
        # (no drain file when the next batch is sure to come with data: it drains as the drain would,
        # without the drain source's log and listing work in Spark's next trigger, ~35 ms)
        certain = due is not None and not ending and not self._holds_back and next_batch_certain(self._stream())
        self.drains.ask(batch_id, due=due, end=ending, write=not certain)
        m["drain"] = None if due is None else "ended" if ending else "next batch" if certain else "asked"

    def _report(self, batch_id: int, m: dict, outs: list[pa.Table], end: bool) -> None:
        """Report committed batch ``batch_id``: its metrics ``m`` to
        ``history``, its watermark to Spark (:func:`tell_spark_watermark`),
        the console sink's rows ``outs`` printed, with ``verbose`` a line of
        its counts (``end``: it ended the input), and ``on_batch`` called."""
        plan = self.plan
        self.history.append(m)
        if m["time_kind"] == "timestamp":
            tell_spark_watermark(self._stream(), m["watermark"])
        tell_spark_durations(self._stream(), m)
        tell_spark_state(self.spark, self._stream(), plan, m)
        if plan.sink.kind == "console":
            shown = pa.concat_tables(outs).slice(0, plan.sink.rows).to_pandas().to_string(index=False) if outs else ""
            say(f"-------- gpuwm batch {batch_id}: {sum(t.num_rows for t in outs)} row(s) --------"
                + (f"\n{shown}" if outs else ""))
        if self.verbose:
            wm = m["output_watermark"]
            if end and plan.watermark.resolved_profile.end_of_input == "all":
                wm = "+inf (end)"
            else:
                wm = show_time(wm, m["time_kind"])
            what = "end of input" if end else "no new data" if not m["input_rows"] else \
                f"{m['input_rows'] / m['wall_s']:9,.0f} events/s"
            say(f"{self.name + ' ' if self.name else ''}batch {batch_id:3d}: rows {m['input_rows']:8,}  "
                f"late {m['late_rows']:6,}  watermark {wm}  emitted {m['rows_emitted']:7,}  "
                f"state rows {m['state_rows']:8,}  {what}  ({m['backend']})"
                + (f"  [{client_ranges(m['kafka_client_ranges'], m.get('kafka_client_why', {}))}]"
                   if m.get("kafka_client_ranges") else ""))
        if self.on_batch:
            self.on_batch(m)

    def _hand_over(self, batch_id: int) -> None:
        """Call the foreachBatch function with the batch's rows as a Spark
        DataFrame (read from the Parquet the tasks staged; empty, with the
        schema, when they wrote none)."""
        fn, schema = self.foreach_batch
        loc, where = self.plan.sink.location, f"batch_id={batch_id}"
        staged = any(n.endswith(".parquet") for n in loc.list(where))
        own = getattr(fn, "skip_empty", False)  # a sink of gpuwm's own: it writes nothing for no rows
        if not staged and own:
            return
        write_arrow = getattr(fn, "write_arrow", None)  # a sink of gpuwm's own that takes Arrow: no Spark job
        if write_arrow is None:
            df = self.spark.read.schema(schema).parquet(f"{loc.uri}/{where}") if staged else \
                self.spark.createDataFrame(self.spark.sparkContext.emptyRDD(), schema)  # no rows, no Python task
        try:
            if write_arrow is not None:
                import pyarrow.parquet as pq

                write_arrow(pq.read_table(loc.path(where), filesystem=loc.fs), batch_id, self.spark)
            else:
                fn(df, batch_id)
        except Exception as e:
            what = "the sink" if own else "foreachBatch's function"
            raise SinkError(f"{what} failed on batch {batch_id}: {type(e).__name__}: {_first_line(e)} (nothing "
                            f"of batch {batch_id} was committed: a restart runs it again)") from e

    def _stream(self):
        """Spark's ``StreamExecution`` of this query (JVM), found once, or None."""
        if self._sq is None:
            from .direct import running_query

            # (the first batch may run before start() has returned the query)
            self._sq = self.query._jsq.streamingQuery() if self.query is not None else \
                running_query(self.spark, self.checkpoint)
        return self._sq

    def _recommit(self, batch_id: int) -> None:
        """Spark replays ``batch_id``, which gpuwm committed before the
        driver stopped: nothing runs again (a commit is written once); the
        drain request after it is asked for again."""
        plan = self.plan
        c = self.checkpoint.commit(batch_id)
        m = dict(c["metrics"])
        filt = driver_filter(plan.watermark, plan.input_schema, self.checkpoint.filter_state(batch_id))
        due, ending = self._next_drain(batch_id, filt, datetime.fromisoformat(m["processing_time"]))
        self.drains.ask(batch_id, due=due, end=ending)
        m["replayed"] = True
        self.history.append(m)
        if self.verbose:
            say(f"{self.name + ' ' if self.name else ''}batch {batch_id:3d}: committed by gpuwm before the restart; "
                  "Spark's replay of it writes nothing again")
        if self.on_batch:
            self.on_batch(m)

    def _next_drain(self, batch_id: int, filt: Any, now: datetime) -> tuple[float | None, bool]:
        """When (wall time, seconds) the micro-batch after ``batch_id`` should
        run even without new data, and whether it ends the input; (None,
        False): not before new data."""
        plan = self.plan
        if not plan.drains or filt.ended and filt.profile.end_of_input == "all":
            return None, False  # complete mode: no such batch; ended: everything was released
        due: float | None = None
        w, drained = filt.watermark_raw, filt.output_watermark_raw
        if w is not None and w != drained:  # spark's lag: the next batch drains with a newer watermark
            due = now.timestamp()
        ending = not filt.ended and (filt.profile.end_of_input == "all" or (plan.aligned and filt.held_rows > 0)) \
            and self._input_ended(batch_id)
        if ending:
            due = now.timestamp()
        if plan.aligned and filt.releasable(now):  # alignment: a split held back may read on
            due = now.timestamp()
        idle_at = filt.next_idle(now)
        if idle_at is not None and due is None:  # a split goes idle then: the combined watermark may move
            due = idle_at.timestamp()
        return due, ending

    def _input_ended(self, batch_id: int) -> bool:
        """The input is bounded and ``batch_id`` read its last rows (a Nexmark
        source with ``totalEvents``)."""
        nex = self._nexmark
        if nex is None:
            return False
        from ..io.nexmark import config_from_options, nexmark_end

        total = config_from_options(nex["options"])[1]
        return total > 0 and nexmark_end(self.checkpoint, batch_id) == total

    def ask_end(self) -> bool:
        """(:class:`~gpuwm.spark.driver.drain.Finisher`, the query idle) Ask for the
        end-of-input drain when the profile's end releases more than the
        final watermark and it has not run; True when asked."""
        plan = self.plan
        committed = self.checkpoint.committed_batches()
        if not committed or not plan.drains:
            return False
        last = committed[-1]
        filt = driver_filter(plan.watermark, plan.input_schema, self.checkpoint.filter_state(last))
        if filt.ended:
            return False
        if plan.watermark.resolved_profile.end_of_input != "all" and not (plan.aligned and filt.held_rows):
            return False  # (rows held back by alignment are read at the end, whatever the profile)
        self.drains.ask(last, due=0.0, end=True)
        return True

    @staticmethod
    def _batch_metrics(plan: Plan, batch_id: int, per: list[dict]) -> dict:
        """One batch's metrics from its tasks' results: the filter's (from
        a first-segment task), per stage summed over the vnodes, the totals."""
        tasks_ = sorted((p for p in per if "segment" in p), key=lambda p: (p["segment"], p["vnode"]))
        merged = [p for p in per if "range" in p]
        head = tasks_[0]
        last = [p for p in tasks_ if p["segment"] == len(plan.segments) - 1]
        emitted = sum(p["rows_emitted"] for p in last)
        if merged and sum(x["rows"] for x in merged) != emitted:
            raise StateError(f"batch {batch_id}: the sort's vnodes released {emitted} rows but its ranges "
                             f"wrote {sum(x['rows'] for x in merged)}; the batch is not committed")
        stages: dict[str, dict] = {}
        for p in tasks_:
            for i, st in p["stages"].items():
                acc = stages.setdefault(i, {"kind": plan.stages[int(i)].kind})
                for k, v in st.items():
                    acc[k] = acc.get(k, 0) + v
        return {
            "batch_id": batch_id, "input_rows": head["input_rows"], "late_rows": head["late_rows"],
            "null_rows": head["null_rows"], "rows_emitted": emitted,
            "state_rows": sum(st["state_rows"] for st in stages.values()),
            "state_bytes": sum(st["state_bytes"] for st in stages.values()),
            "watermark": head["watermark"], "output_watermark": head["output_watermark"],
            "kernel_s": sum(p["kernel_s"] for p in tasks_), "state_save_s": sum(p["state_save_s"] for p in tasks_),
            "backend": head["backend"], "vnodes": plan.vnodes, "max_event_time": head["max_event_time"],
            "watermark_lag": None if head["watermark"] is None or head["max_event_time"] is None
            else head["max_event_time"] - head["watermark"],
            "filter_tasks_s": head["filter_task_s"], "source_read_s": head["read_s"],
            "rows_released": head.get("rows_released", 0),
            "malformed_rows": head.get("malformed_rows", 0), "offsets_lost": head.get("offsets_lost", 0),
            "kafka_client_ranges": head.get("kafka_client_ranges", 0),
            **{k: head[k] for k in KAFKA_COUNTS[1:] if k in head},  # why, and the codec's cost
            **({"input_rows_by_input": head["input_rows_by_input"]} if "input_rows_by_input" in head else {}),
            "vnode_tasks_s": sum(p["vnode_task_s"] for p in tasks_),
            "merge_tasks_s": sum(x["merge_task_s"] for x in merged),
            "stages": [stages.get(str(i), {"kind": s.kind}) for i, s in enumerate(plan.stages)],
        }

    def _direct_input(self, df, batch_id: int) -> tuple[dict | None, int]:
        """What the tasks make this batch's input from themselves (and into
        how many parts), or (None, 0): Spark's rows. A batch with no input
        goes through Spark (nothing to read), but for Kafka: its one task
        reads nothing, without Spark planning and running an empty Kafka
        scan (0.3 s → 0.06 s)."""
        if not self._direct:
            return None, 0
        plan = self.plan
        from ..io.nexmark import nexmark_range
        from .direct import batch_files, check_files

        nex = self._nexmark
        if plan.multi:  # each file to the input whose directory holds it
            files = batch_files(df, scans_allowed=len(self.inputs))
            if files == []:
                return None, 0
            why = "its files could not be found in the batch's scans" if files is None else None
            if why is None:
                named = list(input_schemas(plan.input_schema).values())
                tagged = []
                for f in files:
                    k = next((k for k, d in enumerate(self._input_dirs) if f.startswith(d)), None)
                    if k is None:
                        why = f"file {f} is in no input's directory"
                        break
                    tagged.append([k, f])
                steps = self._input_steps
                for k, s in enumerate(named):
                    why = why or check_files([f for j, f in tagged if j == k], s if steps[k] is None else steps[k][1],
                                             plan.checkpoint.loc.options)
                if why is None:
                    if not any(steps):
                        return {"files": tagged}, len(tagged)
                    return {"files": tagged, "steps": [None if st is None else [st[0], schema_to_text(st[1])]
                                                       for st in steps]}, len(tagged)
        elif self._kafka is not None:
            from .kafka import batch_source

            got, why = batch_source(self._kafka, df)
            if got is not None:  # (a batch without Kafka rows too: one task that reads nothing, no Kafka scan)
                return {"kafka": got}, len(got["parts"])
        elif nex is not None:
            rng = nexmark_range(self.checkpoint, batch_id)
            if rng is not None and rng[0] == rng[1]:
                return None, 0
            if rng is not None:
                from ..io.nexmark import config_from_options

                splits = config_from_options(nex["options"])[0].splits
                return {"nexmark": {"options": nex["options"], "start": rng[0], "end": rng[1],
                                    "steps": nex["steps"]}}, splits
            why = "its offsets are not in Spark's offset log"
        else:
            files = batch_files(df)
            if files == []:
                return None, 0
            steps, schema = self._files_steps or (None, plan.input_schema)
            why = "its files could not be found in the batch's scan" if files is None else \
                check_files(files, schema, plan.checkpoint.loc.options)
            if why is None:
                if steps is None:
                    return {"files": files}, len(files)
                return {"files": files, "steps": steps, "schema": schema_to_text(schema)}, len(files)
        if self.read == "direct":
            raise ConfigError(f"read='direct' cannot read this micro-batch itself: {why}")
        if not self._warned_direct:
            self._warned_direct = True
            log.warning("gpuwm: a micro-batch goes through Spark's reader: %s", why)
        return None, 0


def driver_filter(spec: Any, schema: pa.Schema, state: bytes | None = None) -> Any:
    """The watermark filter on the driver (CPU; a few values per split), bound
    to the input schema — which checks the delay's unit — and restored from
    a committed batch's state."""
    f = spec.build("cpu").bind(schema)
    return f if state is None else f.restore(bytes_to_table(state))


_SAY = threading.Lock()


def say(text: str) -> None:
    """Print whole lines: queries running side by side (``gpuwm demo``'s
    three) commit on their own threads, and a print's text and newline are
    two writes."""
    with _SAY:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def show_time(raw: int | None, kind: str | None) -> str:
    """An event time or watermark as a user reads it: ISO 8601 in UTC for a
    timestamp column (gpuwm keeps epoch microseconds), the number itself for
    an integer column.

    >>> show_time(1767225600123000, "timestamp"), show_time(42, "int"), show_time(None, "int")
    ('2026-01-01T00:00:00.123Z', '42', 'None')
    """
    if raw is None or kind != "timestamp":
        return str(raw)
    return datetime.fromtimestamp(raw / 1e6, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def client_ranges(n: int, why: dict) -> str:
    """How many Kafka ranges confluent-kafka read, not gpuwm's own fetch, and why, per kind.

    >>> client_ranges(3, {"security.protocol=SSL": 2, "offset out of range": 1})
    '3 Kafka ranges read by confluent-kafka: 2 security.protocol=SSL, 1 offset out of range'
    """
    reasons = ", ".join(f"{k} {w}" for w, k in sorted(why.items(), key=lambda x: (-x[1], x[0])))
    return f"{n:,} Kafka range{'s' if n != 1 else ''} read by confluent-kafka" + (f": {reasons}" if reasons else "")


#: the counts a commit carries summed over every batch since the query's first
TOTALS = ("batches", "input_rows", "late_rows", "null_rows", "duplicate_rows", "rows_emitted", "malformed_rows",
          "offsets_lost", "kafka_client_ranges", "kafka_client_why")


def add_totals(before: dict | None, m: dict) -> dict:
    """The running totals after batch ``m``: ``late_rows`` counts rows the
    watermark filter dropped and rows a stage dropped behind a closed
    window; ``duplicate_rows`` the rows a dedup dropped."""
    stages = m.get("stages") or []
    this = {"batches": 1, "input_rows": m["input_rows"], "null_rows": m["null_rows"],
            "late_rows": m["late_rows"] + sum(st.get("late_rows", 0) for st in stages),
            "duplicate_rows": sum(st.get("duplicate_rows", 0) for st in stages),
            "rows_emitted": m["rows_emitted"], "malformed_rows": m.get("malformed_rows", 0),
            "offsets_lost": m.get("offsets_lost", 0), "kafka_client_ranges": m.get("kafka_client_ranges", 0),
            "kafka_client_why": m.get("kafka_client_why", {})}
    return add_counts(add_counts({k: 0 for k in TOTALS[:-1]}, before or {}, TOTALS), this)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


