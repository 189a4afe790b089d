"""``format("nexmark")``: the embedded Nexmark bid stream as a Spark source.

A PySpark Python Data Source (``DataSourceStreamReader``). Offsets are event
numbers (``{"offset": n}``); each micro-batch takes ``eventsPerBatch`` events
(up to ``totalEvents``; 0 = unbounded) and has one input partition per split,
so every split's rows arrive in one task, in event order. The same offsets
always give the same rows (see :mod:`gpuwm.nexmark`), so a replayed batch
is identical.

Options: ``eventsPerSecond`` (event-time rate, default 100000),
``totalEvents`` (default 1000000; 0 = unbounded), ``eventsPerBatch``
(default 100000), ``splits`` (default 4), ``outOfOrderFraction`` (0.1),
``maxDelayMs`` (2000), ``seed`` (42), ``checkpointLocation`` (set by
:class:`gpuwm.spark.Pipeline`: the reader resumes its batch grid from the
query's offset log, because Spark 4.1 tells a Python source neither its
start offset nor a read limit).

Option ``kind`` picks the stream — the three Nexmark event kinds are three
streams over the same event numbers: ``bid`` (default: ``auction``,
``bidder``, ``price``, ``date_time``, ``split``, ``event_id``), ``auction``
(``id``, ``item_name``, ``initial_bid``, ``reserve``, ``date_time``,
``expires``, ``seller``, ``category``, ``split``, ``event_id``) and
``person`` (``id``, ``name``, ``email``, ``credit_card``, ``city``,
``state``, ``date_time``, ``split``, ``event_id``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from ...errors import ConfigError
from ...nexmark import GENERATORS, NexmarkConfig
from ..storage.checkpoint import Checkpoint

SCHEMA = "auction bigint, bidder bigint, price bigint, date_time timestamp, split int, event_id bigint"


def _kind(options: dict) -> str:
    kind = str(options.get("kind", "bid")).lower()
    if kind not in GENERATORS:
        raise ConfigError(f"nexmark option kind={kind!r}: expected one of {sorted(GENERATORS)}")
    return kind


@dataclass
class NexmarkPartition(InputPartition):
    start: int
    end: int
    split: int


def _int(options: dict, key: str, default: int, minimum: int = 0) -> int:
    raw = options.get(key, options.get(key.lower(), default))
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"nexmark option {key}={raw!r} is not an integer") from None
    if value < minimum:
        raise ConfigError(f"nexmark option {key}={value} must be >= {minimum}")
    return value


#: the source's options a user gives and the least each may be (None: not a number); ``kind`` is one of GENERATORS
OPTIONS = {"totalEvents": 0, "eventsPerBatch": 1, "eventsPerSecond": 1, "splits": 1, "maxDelayMs": 0,
           "outOfOrderFraction": 0, "seed": None, "kind": None}


def config_from_options(options: dict) -> tuple[NexmarkConfig, int, int]:
    frac = float(options.get("outOfOrderFraction", options.get("outoforderfraction", 0.1)))
    if not 0 <= frac <= 1:
        raise ConfigError(f"nexmark option outOfOrderFraction={frac} must be in [0, 1]")
    cfg = NexmarkConfig(
        events_per_second=_int(options, "eventsPerSecond", 100_000, 1),
        splits=_int(options, "splits", 4, 1),
        out_of_order_fraction=frac,
        max_delay_ms=_int(options, "maxDelayMs", 2_000),
        seed=_int(options, "seed", 42),
    )
    return cfg, _int(options, "totalEvents", 1_000_000), _int(options, "eventsPerBatch", 100_000, 1)


def _resume_offset(checkpoint: str | None, fs_options: str | None = None) -> int:
    """The end offset of the newest batch in the query's offset log (0 if
    none); ``fs_options``: the checkpoint's file-system settings as JSON
    pairs (:func:`~gpuwm.spark.storage.checkpoint.spark_fs_options`)."""
    if not checkpoint:
        return 0
    from ..storage.checkpoint import Location

    opts = [tuple(p) for p in json.loads(fs_options)] if fs_options else ()
    ck = Checkpoint(Location.of(checkpoint, opts))
    last = ck.newest_logged_batch()
    return 0 if last is None else nexmark_end(ck, last) or 0


def nexmark_end(ck: Checkpoint, batch_id: int) -> int | None:
    """The Nexmark source's end offset (an event number) in ``batch_id``'s
    log entry, or None when the log does not say."""
    off = ck.logged_offset(batch_id, "offset")
    try:
        return None if off is None else int(off["offset"])
    except (TypeError, ValueError):
        return None


def nexmark_range(ck: Checkpoint, batch_id: int) -> tuple[int, int] | None:
    """The event range ``[start, end)`` of a Nexmark micro-batch, as Spark
    planned and logged it, or None when the log does not say."""
    end = nexmark_end(ck, batch_id)
    start = 0 if batch_id == 0 else nexmark_end(ck, batch_id - 1)
    if end is None or start is None or end < start:
        return None
    return start, end


def nexmark_source(df) -> dict | None:
    """``{"checkpoint": uri, "options": {...}}`` when ``df`` is a Nexmark
    stream (a temp view's name over it is fine; the selects and filters
    over it, gpuwm.spark.driver.direct.nexmark_projection, its tasks
    evaluate), else None: then gpuwm's tasks can generate each batch
    themselves from the offsets the query's own log gives."""
    from ..catalyst.plans import TRANSPARENT, peel

    try:
        plan = peel(df._jdf.queryExecution().analyzed(), through=TRANSPARENT)[0]
        if plan.getClass().getSimpleName() != "StreamingRelationV2" or str(plan.sourceName()) != "nexmark":
            return None
        opts = {str(k): str(v) for k, v in plan.extraOptions().asCaseSensitiveMap().items()}
    except Exception:  # noqa: BLE001  not a py4j DataFrame, or another relation
        return None
    checkpoint = opts.pop("checkpointLocation", None)
    opts.pop("gpuwmFsOptions", None)
    return None if checkpoint is None else {"checkpoint": checkpoint, "options": opts}


class NexmarkStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict):
        self.cfg, self.total, self.step = config_from_options(options)
        self.gen = GENERATORS[_kind(options)][0]
        self._known = _resume_offset(options.get("checkpointLocation"), options.get("gpuwmFsOptions"))

    def initialOffset(self) -> dict:
        return {"offset": 0}

    def latestOffset(self) -> dict:
        nxt = self._known + self.step
        if self.total:
            nxt = min(nxt, self.total)
        self._known = nxt
        return {"offset": nxt}

    def partitions(self, start: dict, end: dict):
        a, b = int(start["offset"]), int(end["offset"])
        self._known = max(self._known, b)
        if b <= a:
            return []
        return [NexmarkPartition(a, b, s) for s in range(self.cfg.splits)]

    def read(self, partition: NexmarkPartition):
        yield from self.gen(self.cfg, partition.start, partition.end, partition.split).to_batches()

    def commit(self, end: dict) -> None:
        pass


class NexmarkBatchReader(DataSourceReader):
    def __init__(self, options: dict):
        self.cfg, self.total, _ = config_from_options(options)
        self.gen = GENERATORS[_kind(options)][0]
        if not self.total:
            raise ConfigError("spark.read.format('nexmark') needs totalEvents > 0")

    def partitions(self):
        return [NexmarkPartition(0, self.total, s) for s in range(self.cfg.splits)]

    def read(self, partition: NexmarkPartition):
        yield from self.gen(self.cfg, partition.start, partition.end, partition.split).to_batches()


class NexmarkDataSource(DataSource):
    """``spark.readStream.format("nexmark")``; register with
    ``spark.dataSource.register(NexmarkDataSource)`` (Pipeline does it)."""

    @classmethod
    def name(cls) -> str:
        return "nexmark"

    def schema(self):
        from ..catalyst.schema import spark_schema

        return spark_schema(GENERATORS[_kind(dict(self.options))][1])

    def streamReader(self, schema) -> DataSourceStreamReader:
        return NexmarkStreamReader(dict(self.options))

    def reader(self, schema) -> DataSourceReader:
        return NexmarkBatchReader(dict(self.options))
