-- Nexmark q17: per-auction statistics with FILTER aggregates
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04
--     aggregate  window(date_time, 0:00:10) by ['auction']: total_bids = count(*), rank1_bids = count(*) FILTER (WHERE (bid.price < CAST(10000 AS BIGINT))), rank2_bids = count(*) FILTER (WHERE ((bid.price >= CAST(10000 AS BIGINT)) AND (bid.price < CAST(1000000 AS BIGINT)))), min_price = min(price), max_price = max(price), avg_price = avg(price), sum_price = sum(price)
--     output     window, auction, total_bids, rank1_bids, rank2_bids, min_price, max_price, avg_price, sum_price
--   Spark runs: the source, Project over parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT window(date_time, '10 seconds') AS window, auction, count(*) AS total_bids, count(*) FILTER (WHERE price < 10000) AS rank1_bids, count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price FROM bid GROUP BY window(date_time, '10 seconds'), auction
