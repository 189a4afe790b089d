"""Micro-batches without new data: how gpuwm drains when the input pauses or ends.

Spark runs a micro-batch without new data only when a stateful operator of
its own plan says state could be evicted
(``IncrementalExecution.shouldRunAnotherBatch``). A ``foreachBatch`` plan has
none, so without help gpuwm's last windows and sorted rows would wait for the
next data. gpuwm asks for such batches itself, through Spark:

* Every pipeline's stream is the union of its input and a **drain source**
  (``format("gpuwm_drain")``, a Python data source with the input's schema
  that never has rows). Its offset is ``{"drain": n, "end": e}``.
* After committing batch N, the driver writes a **request**
  (``<checkpoint>/gpuwm/drain.json``, :class:`~gpuwm.spark.checkpoint.Checkpoint`): the drain offset Spark logged for N,
  and the next one, ``{"drain": N, ...}``, with the processing time it is due
  at — now when the watermark the next batch drains with is newer than the
  one this batch drained with (Spark's lagged profile: its rule for no-data
  batches), when a ``flink``-style end of input is due (``"end": 1``), or
  when a split becomes idle under ``idle_timeout`` (then).
* At each trigger Spark asks every source for its latest offset; the drain
  source answers the next offset once it is due, else the logged one. A
  changed offset is new data to Spark: it plans a micro-batch — with a batch
  id, logged offsets, a commit — in which the drain source has no rows.
  gpuwm runs it like any batch: the filter re-combines at the batch's time
  (idleness), every stage drains with the current watermark.

So a drain is a Spark micro-batch like any other: a replay after a crash
re-runs it with the same offsets, and whether it ends the input is read from
its logged offset (:func:`ends_input`), never from the clock.

``Trigger.AvailableNow`` and ``Trigger.Once`` wrap sources that are not
Spark's in a fixed "latest offset" taken at the start (SPARK-45178), which
would freeze the drain source; :class:`Finisher` runs such a query with a
``processingTime="0 seconds"`` trigger instead and stops it once the input
is exhausted and no drain is asked for (after the end-of-input drain).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader

from .checkpoint import Checkpoint, Location

NAME = "gpuwm_drain"
NO_DRAIN = {"drain": -1, "end": 0}


def latest(request: dict | None, now: float) -> dict:
    """The drain source's latest offset for a request at wall time ``now``
    (seconds since the epoch)."""
    if not request:
        return dict(NO_DRAIN)
    return request["next"] if now >= request["due"] else request["offset"]


class DrainStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict):
        uri, opts = json.loads(options["checkpoint"])
        self.ck = Checkpoint(Location(uri, tuple(tuple(p) for p in opts)))

    def initialOffset(self) -> dict:
        return dict(NO_DRAIN)

    def latestOffset(self) -> dict:
        try:
            req = self.ck.loc.read_json(Checkpoint.DRAIN)
        except (OSError, ValueError):
            req = None
        return latest(req, time.time())

    def partitions(self, start: dict, end: dict):
        return []  # a drain has no rows

    def read(self, partition):  # pragma: no cover - no partitions
        return iter(())

    def commit(self, end: dict) -> None:
        pass


class DrainDataSource(DataSource):
    """``spark.readStream.format("gpuwm_drain").schema(s).option("checkpoint", json [uri, fs options])``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        raise ValueError("gpuwm_drain needs the input's schema (.schema(...))")

    def streamReader(self, schema) -> DataSourceStreamReader:
        return DrainStreamReader(dict(self.options))


def with_drains(df, ck: Checkpoint):
    """``df`` with the drain source unioned in (registered on first use)."""
    spark = df.sparkSession
    spark.dataSource.register(DrainDataSource)
    drains = spark.readStream.format(NAME).schema(df.schema).option(
        "checkpoint", json.dumps([ck.loc.uri, ck.loc.options])).load()
    return df.unionByName(drains)


# -- the offset log -------------------------------------------------------------------
def drain_offset(ck: Checkpoint, batch_id: int) -> dict | None:
    """The drain source's offset in ``batch_id``'s log entry (None: no entry)."""
    return ck.logged_offset(batch_id, "drain")


def ends_input(ck: Checkpoint, batch_id: int) -> bool:
    """Whether ``batch_id`` is the end-of-input drain: its logged drain
    offset is the end asked for right after the batch before."""
    off = drain_offset(ck, batch_id)
    return bool(off and off.get("end") and off.get("drain") == batch_id - 1)


def write_request(ck: Checkpoint, batch_id: int, *, due: float | None, end: bool = False) -> None:
    """After committing ``batch_id``: ask for a drain at wall time ``due``
    (None: none)."""
    cur = drain_offset(ck, batch_id) or dict(NO_DRAIN)
    nxt = cur if due is None else {"drain": batch_id, "end": int(end)}
    ck.loc.publish_json(Checkpoint.DRAIN, {"offset": cur, "next": nxt, "due": due or 0.0})


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


def trigger_for(trigger: dict[str, Any] | None) -> tuple[dict[str, Any] | None, bool]:
    """The trigger gpuwm starts Spark with, and whether it runs to the end itself."""
    if trigger and (trigger.get("availableNow") or trigger.get("once")):
        return {"processingTime": "0 seconds"}, True
    return trigger, False
