"""Nexmark's queries in their published SQL over gpuwm's generated events,
run through ``accelerate`` and by Spark on the same files, batch for batch."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpuwm.spark import accelerate

from .oracle import _batches, _native, module_session

spark = module_session("gpuwm-accelerate-nexmark")


#: Nexmark's queries from their public definitions (Nexmark's SQL, as Flink, RisingWave and Arroyo run it),
#: in the forms Spark runs on a stream: a window is Spark's ``window(...)`` grouped by, the hop and tumble
#: bounds Spark's struct; q20 and q4 with the bound Spark needs to clean state (a bid within its auction's
#: life), q4 per window (Spark refuses its unwindowed second aggregation); columns of the same name on both
#: sides (``id``, ``date_time``) told apart by the aliases, as published
NEXMARK_SQL = {
    "q3": "SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P ON A.seller = P.id "
          "WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')",
    "q4w": "WITH Q AS (SELECT window(A.date_time, '10 seconds') AS w, A.id, A.category, max(B.price) AS final "
           "FROM auction A, bid B WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires "
           "GROUP BY window(A.date_time, '10 seconds'), A.id, A.category) "
           "SELECT Q.w.start AS starttime, Q.category, avg(Q.final) AS avgp FROM Q GROUP BY Q.w, Q.category",
    "q5": "WITH CountBids AS (SELECT window(date_time, '10 seconds', '2 seconds') AS w, auction, count(*) AS num "
          "FROM bid GROUP BY window(date_time, '10 seconds', '2 seconds'), auction) "
          "SELECT AuctionBids.auction, AuctionBids.num, AuctionBids.w.end AS endtime FROM CountBids AuctionBids "
          "JOIN (SELECT w AS mw, max(num) AS maxn FROM CountBids GROUP BY w) MaxBids "
          "ON AuctionBids.w = MaxBids.mw AND AuctionBids.num >= MaxBids.maxn",
    "q7": "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN (SELECT max(price) AS maxprice, "
          "window.start AS wstart, window.end AS wend FROM bid GROUP BY window(date_time, '10 seconds')) B1 "
          "ON B.price = B1.maxprice AND B.date_time >= B1.wstart AND B.date_time < B1.wend",
    "q8": "SELECT P.id, P.name, P.pw.start AS starttime FROM (SELECT id, name, window(date_time, '10 seconds') AS pw "
          "FROM person GROUP BY id, name, window(date_time, '10 seconds')) P JOIN (SELECT seller, "
          "window(date_time, '10 seconds') AS aw FROM auction GROUP BY seller, window(date_time, '10 seconds')) A "
          "ON P.id = A.seller AND P.pw = A.aw",
    "q20": "SELECT auction, bidder, price, B.date_time, item_name, initial_bid, reserve, A.date_time AS a_date_time, "
           "expires, seller, category FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id "
           "AND B.date_time BETWEEN A.date_time AND A.expires WHERE A.category = 10",
}


@pytest.fixture(scope="module")
def nexmark_files(tmp_path_factory) -> str:
    """40 s of gpuwm's Nexmark events (1000 a second: persons, auctions and
    bids, Nexmark's hot sellers, auctions and bidders, 10 % of the events up
    to 2 s late) as Parquet, a file of each per 5 s: a micro-batch each."""
    from gpuwm.nexmark import NexmarkConfig, auctions, bids, persons

    work = str(tmp_path_factory.mktemp("nexmark"))
    cfg, per = NexmarkConfig(events_per_second=1000), 5000
    for i in range(8):
        for d, make in {"bid": bids, "auction": auctions, "person": persons}.items():
            path = f"{work}/{d}/part-{i:04d}.parquet"
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(make(cfg, i * per, (i + 1) * per).drop(["split", "event_id"]), path)
            os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # (maxFilesPerTrigger takes the oldest first)
    return work


#: gpuwm's runs of each query: vnodes 1 and 2; a line's version smoke (tests/on_line.py, GPUWM_SMOKE) vnodes 2, the
#: exchanges and the vnode tasks, whose single-task form the default line's run covers
VNODES = (2,) if os.environ.get("GPUWM_SMOKE") else (1, 2)


@pytest.mark.parametrize("name", list(NEXMARK_SQL))
def test_nexmark_queries_on_generated_events_equal_spark_batch_for_batch(spark, tmp_path, nexmark_files, name):
    """The Nexmark queries as published (:data:`NEXMARK_SQL`) over streaming
    views of gpuwm's generated persons, auctions and bids (Parquet files, a
    micro-batch each, ``withWatermark`` of 4 s on ``date_time``): Spark runs
    each, and gpuwm runs it through ``accelerate`` at vnodes 1 and 2 (:data:`VNODES`) — the
    same rows in the same micro-batches, Spark's final no-data batch
    included."""
    for d in ("bid", "auction", "person"):
        schema = spark.read.parquet(f"{nexmark_files}/{d}").schema
        spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(f"{nexmark_files}/{d}") \
            .withWatermark("date_time", "4 seconds").createOrReplaceTempView(d)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    df = spark.sql(NEXMARK_SQL[name])
    _native(df, f"{tmp_path}/native", f"{tmp_path}/nck")
    want = _batches(f"{tmp_path}/native")
    assert len(want) >= 3 and sum(map(len, want.values())) >= 4, want
    for vnodes in VNODES:
        acc = accelerate(df, vnodes=vnodes, fallback="error")
        assert (name != "q8") or "by ['id', 'name']: no aggregate: the groups alone" in acc.explained(), acc.explained()
        acc.writeStream.option("checkpointLocation", f"{tmp_path}/ck{vnodes}").trigger(availableNow=True).start(
            f"{tmp_path}/out{vnodes}").awaitTermination()
        assert _batches(f"{tmp_path}/out{vnodes}") == want, vnodes
