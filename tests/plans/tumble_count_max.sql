-- the README's query: a tumbling count and maximum per auction
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04
--     aggregate  window(date_time, 0:00:10) by ['auction']: bids = count(*), max_price = max(price)
--     output     window, auction, bids, max_price
--   Spark runs: the source, parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT window(date_time, '10 seconds') AS window, auction, count(*) AS bids, max(price) AS max_price FROM bid GROUP BY window(date_time, '10 seconds'), auction
