-- an aggregate of an expression of the source's columns
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04
--     aggregate  window(date_time, 0:00:10) by ['auction']: twice = sum((bid.price * CAST(2 AS BIGINT)))
--     output     window, auction, twice
--   Spark runs: the source, Project over parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT window(date_time, '10 seconds') AS window, auction, sum(price * 2) AS twice FROM bid GROUP BY window(date_time, '10 seconds'), auction
