"""The Nexmark generator: kinds by event_id % 50, determinism, splits."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gpuwm.nexmark import BASE_TIME_US, GENERATORS, NexmarkConfig, auctions, bids, persons


def test_event_kinds_partition_the_event_numbers():
    cfg = NexmarkConfig(splits=3, out_of_order_fraction=0.0)
    ids = {k: set(g(cfg, 0, 10_000).column("event_id").to_pylist()) for k, (g, _) in GENERATORS.items()}
    assert ids["person"] == {e for e in range(10_000) if e % 50 == 0}
    assert ids["auction"] == {e for e in range(10_000) if 1 <= e % 50 <= 3}
    assert ids["bid"] == {e for e in range(10_000) if e % 50 >= 4}


def test_same_offsets_same_rows_and_splits_cover_the_range():
    cfg = NexmarkConfig(splits=4, seed=9)
    for gen in (bids, auctions, persons):
        assert gen(cfg, 500, 9_000).equals(gen(cfg, 500, 9_000))
        parts = pa.concat_tables([gen(cfg, 500, 9_000, s) for s in range(4)])
        assert sorted(parts.column("event_id").to_pylist()) == sorted(gen(cfg, 500, 9_000).column("event_id").to_pylist())
        assert all(set(gen(cfg, 500, 9_000, s).column("split").to_pylist()) <= {s} for s in range(4))


def test_event_time_and_out_of_orderness():
    cfg = NexmarkConfig(events_per_second=1_000, out_of_order_fraction=0.25, max_delay_ms=500)
    t = bids(cfg, 0, 20_000)
    ev = t.column("event_id").to_numpy()
    ts = t.column("date_time").cast(pa.int64()).to_numpy()
    nominal = BASE_TIME_US + ev * 1_000
    delay = nominal - ts
    assert delay.min() >= 0 and delay.max() <= 500_000
    assert 0.2 < np.mean(delay > 0) < 0.3  # ~25 % delayed
    hot = t.column("auction").to_numpy() % 2 == 0
    assert hot.mean() > 0.5  # hot auctions (ratio 2) dominate
    prices = t.column("price").to_numpy()
    assert prices.min() >= 100 and np.median(prices) < prices.mean()  # log-uniform: skewed
