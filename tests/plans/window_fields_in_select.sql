-- expressions of the window and keys in the aggregating SELECT
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04
--     aggregate  window(date_time, 0:00:10) by ['auction']: m2 = (max(bid.price) * CAST(2 AS BIGINT))
--     output     ws, hm, a1, m2
--   Spark runs: the source, parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT window.start AS ws, date_format(window.end, 'HH:mm') AS hm, auction + 1 AS a1, max(price) * 2 AS m2 FROM bid GROUP BY window(date_time, '10 seconds'), auction
