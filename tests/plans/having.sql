-- a HAVING over the window's rows (a filter of the sink's)
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04
--     aggregate  window(date_time, 0:00:10) by ['auction']: n = count(*)
--     filter     (n > CAST(2 AS BIGINT))
--     output     window, auction, n
--   Spark runs: the source, parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT window(date_time, '10 seconds') AS window, auction, count(*) AS n FROM bid GROUP BY window(date_time, '10 seconds'), auction HAVING count(*) > 2
