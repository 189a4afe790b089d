"""Micro-batches without new data: how gpuwm drains when the input pauses or ends.

Spark runs a micro-batch without new data only when a stateful operator of
its own plan says state could be evicted
(``IncrementalExecution.shouldRunAnotherBatch``). A ``foreachBatch`` plan has
none, so without help gpuwm's last windows and sorted rows would wait for the
next data. gpuwm asks for such batches itself, through Spark:

* Every pipeline's stream is the union of its input and a **drain source**:
  Spark's own text file source on ``<checkpoint>/gpuwm/drains/``, its
  ``value`` column replaced by nulls of the input's columns. gpuwm writes
  only empty files there, so it never has rows. (A Python data source did
  this before; Spark starts a Python worker for one when the query starts,
  ~1.2 s a query on a 2-core machine. The file source costs ~0.1 s.)
* After committing batch N, the driver writes a **request**
  (``<checkpoint>/gpuwm/drain.json``, :class:`~gpuwm.spark.storage.checkpoint.Checkpoint`):
  ``{"next": {"drain": N, "end": e}, "due": t}``, a drain after N, at
  processing time ``t`` — now when the watermark the next batch drains with
  is newer than the one this batch drained with (Spark's lagged profile: its
  rule for no-data batches), when a ``flink``-style end of input is due
  (``"end": 1``), or when a split becomes idle under ``idle_timeout`` (then).
  When it is due the driver (:class:`Drains`, a timer for a later one)
  writes the empty file ``after-N`` (``after-N-end``) into the directory —
  unless batch N+1 is sure to come with data
  (:func:`gpuwm.spark.driver.loop.next_batch_certain`: Kafka under
  ``maxOffsetsPerTrigger`` with more messages than batch N took), which
  drains as a drain batch would, as Spark's own query runs no no-data
  batch there either.
* At each trigger Spark lists the directory; a new file is new data to
  Spark: it plans a micro-batch — with a batch id, its files in the file
  source's log, a commit — in which the drain source has no rows, and
  deletes the file once that batch is committed (``cleanSource``). gpuwm
  runs it like any batch: the filter re-combines at the batch's time
  (idleness), every stage drains with the current watermark.

So a drain is a Spark micro-batch like any other: a replay after a crash
re-runs it with the same files, and whether it ends the input is read from
the files Spark logged for it (:func:`ends_input`), never from the clock.

``Trigger.AvailableNow`` and ``Trigger.Once`` fix every source's end at the
start, which would freeze the drain source; :class:`Finisher` runs such a
query with a ``processingTime="0 seconds"`` trigger instead and stops it
once the input is exhausted and no drain is asked for (after the
end-of-input drain).
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

from ..storage.checkpoint import Checkpoint

#: the drain source's directory under the checkpoint
DIR = "gpuwm/drains"
#: a file Spark's listing skips (``_`` first): the directory exists from the start, on an object store too
MARKER = f"{DIR}/_gpuwm"
_NAME = re.compile(r"after-(\d+)(-end)?$")


def file_name(drain: int, end: bool) -> str:
    """The drain file asked for after batch ``drain``."""
    return f"after-{drain}{'-end' if end else ''}"


def parse_name(name: str) -> tuple[int, bool] | None:
    """(batch, end) of a drain file's name (a path's last part), or None."""
    m = _NAME.match(name.rstrip("/").rsplit("/", 1)[-1])
    return None if m is None else (int(m.group(1)), m.group(2) is not None)


def with_drains(df, ck: Checkpoint):
    """``df`` with the drain source unioned in (its directory made first:
    Spark's file source refuses a path that does not exist)."""
    from pyspark.sql import functions as F

    ck.loc.publish_bytes(MARKER, b"")
    spark = df.sparkSession
    drains = spark.readStream.format("text").option("cleanSource", "delete").load(f"{ck.loc.uri}/{DIR}")
    drains = drains.select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in df.schema])
    return df.unionByName(drains)


def has_drains(ck: Checkpoint) -> bool:
    """Whether this checkpoint's query was started with this drain source."""
    return not ck.loc.missing([MARKER])


# -- which drains a batch holds -----------------------------------------------------------
def _log_offset(ck: Checkpoint, batch_id: int) -> int | None:
    """The drain source's offset in ``batch_id``'s offset log entry (the
    last source: the union puts it after the input's), or None."""
    try:
        offs = ck.logged_offsets(batch_id)
    except OSError:
        return None
    last = offs[-1] if offs else None
    return last.get("logOffset") if isinstance(last, dict) and isinstance(last.get("logOffset"), int) else None


def batch_drains(ck: Checkpoint, batch_id: int) -> list[tuple[int, bool]]:
    """The drain files Spark put in ``batch_id``, as (batch, end), from its
    logs: the file source's offset in the offset log, and the files of each
    of its log batches since the batch before (``sources/<i>/<n>``, or the
    first ``<m>.compact`` after it, which holds every batch up to ``m``)."""
    k = _log_offset(ck, batch_id)
    if k is None:
        return []
    j = _log_offset(ck, batch_id - 1) if batch_id > 0 else -1
    j = -1 if j is None else j
    src = f"sources/{len(ck.logged_offsets(batch_id)) - 1}"
    out, compact = [], None
    for n in range(j + 1, k + 1):
        data = ck.loc.read(f"{src}/{n}")
        if data is None:  # compacted: its entries are in the first .compact at or after it
            if compact is None:
                compact = sorted(int(f.split(".")[0]) for f in ck.loc.list(src) if re.fullmatch(r"\d+\.compact", f))
            m = next((c for c in compact if c >= n), None)
            data = (None if m is None else ck.loc.read(f"{src}/{m}.compact")) or b""
        for line in data.decode().splitlines()[1:]:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            got = parse_name(str(e.get("path", ""))) if e.get("batchId") == n else None
            if got is not None:
                out.append(got)
    return out


def ends_input(ck: Checkpoint, batch_id: int, request: dict | None) -> bool:
    """Whether ``batch_id`` is the end-of-input drain: it holds the end
    asked for right after the batch before. ``request``: the drain request
    in force (:attr:`Drains.request`); Spark's logs are read only when it
    asked for that end."""
    nxt = (request or {}).get("next") or {}
    if not (nxt.get("end") and nxt.get("drain") == batch_id - 1):
        return False
    return (batch_id - 1, True) in batch_drains(ck, batch_id)


# -- the driver's requests ------------------------------------------------------------
def read_request(ck: Checkpoint) -> dict | None:
    try:
        req = ck.loc.read_json(Checkpoint.DRAIN)
    except (OSError, ValueError):
        return None
    return req if isinstance(req, dict) and "next" in req else None


class Drains:
    """The driver's drain requests: each one recorded in the checkpoint,
    its file written when due (now, or by a timer), a newer request
    replacing an older one that is not yet due."""

    def __init__(self, ck: Checkpoint):
        self.ck = ck
        self.request: dict | None = read_request(ck)
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        #: whether the query still runs (set once started): a timer of a stopped query writes nothing
        self.alive = lambda: True
        #: whether a request's file is written (False under Spark's own once trigger: one batch a run, as Spark's
        #: query runs no batch without data after a restart; the request is still recorded)
        self.writes = True

    def ask(self, batch_id: int, *, due: float | None, end: bool = False, write: bool = True) -> None:
        """After committing ``batch_id``: a drain at wall time ``due`` (None:
        none). ``write=False``: the next batch is sure to come anyway
        (:func:`gpuwm.spark.driver.loop.next_batch_certain`), so no file is
        written; the request is still recorded, for a restart before it
        (:meth:`resume`)."""
        req = {"next": None if due is None else {"drain": batch_id, "end": int(end)}, "due": due or 0.0}
        self.ck.loc.publish_json(Checkpoint.DRAIN, req)
        self._arm(req if write else {**req, "next": None})

    def resume(self, last_committed: int | None) -> None:
        """At the query's start: the request made after Spark's last
        committed batch, if its file is not written yet (a later request
        comes when a replayed batch runs again)."""
        req = self.request
        nxt = (req or {}).get("next")
        if nxt and nxt.get("drain") == last_committed:
            self._arm(req)

    def _arm(self, req: dict) -> None:
        with self._lock:
            self.request = req
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not req["next"] or not self.writes:
                return
            wait = req["due"] - time.time()
            if wait <= 0:
                self._write(req)
                return
            self._timer = threading.Timer(wait, self._fire, (req,))
            self._timer.daemon = True
            self._timer.start()

    def _fire(self, req: dict) -> None:
        with self._lock:
            try:
                if self.request is req and self.alive():
                    self._write(req)
            except Exception as e:  # the query or its checkpoint is gone: its next start asks again
                import logging

                logging.getLogger("gpuwm").debug("gpuwm: drain after batch %s not asked for: %s",
                                                 req["next"]["drain"], e)

    def _write(self, req: dict) -> None:
        rel = f"{DIR}/{file_name(req['next']['drain'], bool(req['next']['end']))}"
        if self.ck.loc.missing([rel]):  # (a file Spark saw is not written again)
            self.ck.loc.write_unique(rel, lambda out: None)

    def stop(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


# -- bounded runs ---------------------------------------------------------------------
class Finisher:
    """Runs a query started with ``processingTime="0 seconds"`` in place of
    ``availableNow`` / ``once`` to its end, on a thread of the driver: waits
    for a trigger that finds neither new data nor a drain to run (Spark's
    ``processAllAvailable``), asks for the end-of-input drain once when the
    pipeline has one to do (``ask_end()`` returns True), waits for it the
    same way, then stops the query."""

    def __init__(self, query, ask_end):
        self.query, self.ask_end = query, ask_end
        self.thread = threading.Thread(target=self._run, name="gpuwm-finisher", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.query.processAllAvailable()
            if self.ask_end():
                self.query.processAllAvailable()
            self.query.stop()
        except Exception:  # the query failed or was stopped: its own exception says why
            pass


def trigger_for(trigger: dict[str, Any] | None, profile: str = "spark") -> tuple[dict[str, Any] | None, bool]:
    """The trigger gpuwm starts Spark with, and whether it runs to the end
    itself: ``availableNow`` (and ``once`` under a profile other than
    ``spark``) as ``processingTime="0 seconds"`` until neither data nor a
    drain is left; ``once`` under ``spark``: Spark's own, one batch of all
    the input there is, its closed windows in the next run's first batch,
    as Spark's query gives them."""
    if trigger and (trigger.get("availableNow") or trigger.get("once") and profile != "spark"):
        return {"processingTime": "0 seconds"}, True
    return trigger, False
