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
import pyarrow.compute  # noqa: F401  (pa.compute)

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


# -- persons and auctions (separate streams: option kind="person" / "auction") --
FIRST_CATEGORY_ID, NUM_CATEGORIES = 10, 5
HOT_SELLER_RATIO = 100
_FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"]
_LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"]
_CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent",
           "Cheyenne"]
_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]

PERSON_SCHEMA = pa.schema([
    ("id", pa.int64()), ("name", pa.string()), ("email", pa.string()), ("credit_card", pa.string()),
    ("city", pa.string()), ("state", pa.string()), ("date_time", pa.timestamp("us", tz="UTC")),
    ("split", pa.int32()), ("event_id", pa.int64()),
])
AUCTION_SCHEMA = pa.schema([
    ("id", pa.int64()), ("item_name", pa.string()), ("initial_bid", pa.int64()), ("reserve", pa.int64()),
    ("date_time", pa.timestamp("us", tz="UTC")), ("expires", pa.timestamp("us", tz="UTC")),
    ("seller", pa.int64()), ("category", pa.int64()), ("split", pa.int32()), ("event_id", pa.int64()),
])


def _events(cfg: NexmarkConfig, start: int, stop: int, split: int | None, lo: int, hi: int, salt: int):
    ev = np.arange(start, stop, dtype=np.int64)
    off = ev % TOTAL_PROPORTION
    ev = ev[(off >= lo) & (off < hi)]
    seed = [cfg.seed, start, stop, salt]
    if split is not None:
        ev = ev[ev % cfg.splits == split]
        seed.append(split)
    return ev, np.random.default_rng(seed)


def _pick(rng, words: list[str], n: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, len(words), n), pa.int32()),
                                          pa.array(words)).cast(pa.string())


def _time(cfg: NexmarkConfig, ev: np.ndarray, rng) -> np.ndarray:
    ts = BASE_TIME_US + (ev * cfg.inter_event_delay_us).astype(np.int64)
    late = rng.random(ev.shape[0]) < cfg.out_of_order_fraction
    return ts - np.where(late, rng.integers(0, cfg.max_delay_ms * 1000 + 1, ev.shape[0]), 0)


def persons(cfg: NexmarkConfig, start: int, stop: int, split: int | None = None) -> pa.Table:
    """The persons among events ``[start, stop)`` (``event_id % 50 == 0``)."""
    ev, rng = _events(cfg, start, stop, split, 0, PERSON_PROPORTION, 1)
    n = ev.shape[0]
    pid = ev // TOTAL_PROPORTION + FIRST_PERSON_ID
    first, last = _pick(rng, _FIRST_NAMES, n), _pick(rng, _LAST_NAMES, n)
    name = pa.compute.binary_join_element_wise(first, last, " ")
    email = pa.compute.binary_join_element_wise(pa.compute.utf8_lower(first), pa.array(
        [f"{x}@example.com" for x in (pid % 1000).tolist()]) if n else pa.array([], pa.string()), ".")
    card = pa.array([f"{x:016d}" for x in rng.integers(0, 10**16, n).tolist()], pa.string())
    return pa.Table.from_arrays([
        pa.array(pid), name, email, card, _pick(rng, _CITIES, n), _pick(rng, _STATES, n),
        pa.array(_time(cfg, ev, rng), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array((ev % cfg.splits).astype(np.int32)), pa.array(ev),
    ], schema=PERSON_SCHEMA)


def auctions(cfg: NexmarkConfig, start: int, stop: int, split: int | None = None) -> pa.Table:
    """The auctions among events ``[start, stop)`` (``1 <= event_id % 50 < 4``)."""
    ev, rng = _events(cfg, start, stop, split, PERSON_PROPORTION, PERSON_PROPORTION + AUCTION_PROPORTION, 2)
    n = ev.shape[0]
    epoch = ev // TOTAL_PROPORTION
    aid = epoch * AUCTION_PROPORTION + (ev % TOTAL_PROPORTION - PERSON_PROPORTION) + FIRST_AUCTION_ID
    hot = rng.integers(0, HOT_SELLER_RATIO, n) > 0
    last_person = epoch * PERSON_PROPORTION
    seller = np.where(hot, (last_person // HOT_SELLER_RATIO) * HOT_SELLER_RATIO,
                      np.maximum(last_person - rng.integers(0, 1000, n), 0)) + FIRST_PERSON_ID
    initial = np.rint(10.0 ** (rng.random(n) * 6.0) * 100.0).astype(np.int64)
    ts = _time(cfg, ev, rng)
    expires = ts + rng.integers(1, 20, n) * 1_000_000
    return pa.Table.from_arrays([
        pa.array(aid), pa.array([f"item-{x}" for x in aid.tolist()], pa.string()), pa.array(initial),
        pa.array(initial + np.rint(10.0 ** (rng.random(n) * 6.0) * 100.0).astype(np.int64)),
        pa.array(ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array(expires, pa.int64()).cast(pa.timestamp("us", tz="UTC")), pa.array(seller),
        pa.array(FIRST_CATEGORY_ID + rng.integers(0, NUM_CATEGORIES, n)),
        pa.array((ev % cfg.splits).astype(np.int32)), pa.array(ev),
    ], schema=AUCTION_SCHEMA)


GENERATORS = {"bid": (bids, BID_SCHEMA), "auction": (auctions, AUCTION_SCHEMA), "person": (persons, PERSON_SCHEMA)}
