-- a hopping sum per bidder
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04
--     aggregate  window(date_time, 0:00:10, 0:00:05) by ['bidder']: total = sum(price)
--     output     window, bidder, total
--   Spark runs: the source, parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT window(date_time, '10 seconds', '5 seconds') AS window, bidder, sum(price) AS total FROM bid GROUP BY window(date_time, '10 seconds', '5 seconds'), bidder
