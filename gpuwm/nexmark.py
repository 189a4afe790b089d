"""A deterministic Nexmark bid generator (the demo's embedded source).

Follows the Nexmark generator's shape: event kind by ``event_id % 50``
(person 1, auction 3, bid 46 — only bids are materialised here), hot
auctions (ratio 2) and hot bidders (ratio 4), log-uniform prices, event time
``base + event_number * inter_event_delay``, and Beam-style out-of-orderness
(a fraction of events delayed by up to ``max_delay_ms``). The same offsets
always give the same rows, so a replayed batch is identical.

Columns: ``auction``, ``bidder``, ``price`` (int64, cents), ``date_time``
(timestamp[us, UTC]), ``split`` (int32: ``event_id % splits``), ``event_id``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
HOT_AUCTION_RATIO, HOT_BIDDER_RATIO = 2, 4
FIRST_AUCTION_ID, FIRST_PERSON_ID = 1000, 1000
NUM_IN_FLIGHT_AUCTIONS = 100
BASE_TIME_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z

BID_SCHEMA = pa.schema([
    ("auction", pa.int64()), ("bidder", pa.int64()), ("price", pa.int64()),
    ("date_time", pa.timestamp("us", tz="UTC")), ("split", pa.int32()), ("event_id", pa.int64()),
])


@dataclass(frozen=True)
class NexmarkConfig:
    events_per_second: int = 100_000  #: event-time rate
    splits: int = 4
    out_of_order_fraction: float = 0.1
    max_delay_ms: int = 2_000
    seed: int = 42

    @property
    def inter_event_delay_us(self) -> float:
        return 1_000_000 / self.events_per_second


def bids(cfg: NexmarkConfig, start: int, stop: int, split: int | None = None) -> pa.Table:
    """The bids among events ``[start, stop)`` (event numbers), vectorised;
    with ``split``, only that split's (``event_id % splits == split``)."""
    ev = np.arange(start, stop, dtype=np.int64)
    ev = ev[(ev % TOTAL_PROPORTION) >= PERSON_PROPORTION + AUCTION_PROPORTION]
    seed = [cfg.seed, start, stop]
    if split is not None:
        ev = ev[ev % cfg.splits == split]
        seed.append(split)
    rng = np.random.default_rng(seed)
    n = ev.shape[0]
    epoch = ev // TOTAL_PROPORTION
    last_auction = epoch * AUCTION_PROPORTION + AUCTION_PROPORTION - 1
    last_person = epoch * PERSON_PROPORTION
    hot_a = rng.integers(0, HOT_AUCTION_RATIO, n) > 0
    cold_a = np.maximum(last_auction - rng.integers(0, NUM_IN_FLIGHT_AUCTIONS, n), 0)
    auction = np.where(hot_a, (last_auction // HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO, cold_a) + FIRST_AUCTION_ID
    hot_b = rng.integers(0, HOT_BIDDER_RATIO, n) > 0
    cold_b = np.maximum(last_person - rng.integers(0, 1000, n), 0)
    bidder = np.where(hot_b, (last_person // HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1, cold_b) + FIRST_PERSON_ID
    price = np.rint(10.0 ** (rng.random(n) * 6.0) * 100.0).astype(np.int64)
    ts = BASE_TIME_US + (ev * cfg.inter_event_delay_us).astype(np.int64)
    late = rng.random(n) < cfg.out_of_order_fraction
    ts = ts - np.where(late, rng.integers(0, cfg.max_delay_ms * 1000 + 1, n), 0)
    return pa.Table.from_arrays([
        pa.array(auction), pa.array(bidder), pa.array(price),
        pa.array(ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array((ev % cfg.splits).astype(np.int32)), pa.array(ev),
    ], schema=BID_SCHEMA)
