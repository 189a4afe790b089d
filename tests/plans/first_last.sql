-- first and last of a number over a tumbling window
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04
--     aggregate  window(date_time, 0:00:10) by ['auction']: f = first(price), l = last(price)
--     output     window, auction, f, l
--   Spark runs: the source, parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT window(date_time, '10 seconds') AS window, auction, first(price) AS f, last(price) AS l FROM bid GROUP BY window(date_time, '10 seconds'), auction
