-- a top-2 of each window's aggregation rows
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04
--     aggregate  window(date_time, 0:00:10) by ['auction']: n = count(*)
--     top-n      dense_rank() <= 2 per the aggregation's window ORDER BY __auto_generated_subquery_name.n DESC NULLS LAST: emitted when the window closes
--     output     window, auction, n, rn
--   Spark runs: the source, parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT * FROM (SELECT *, dense_rank() OVER (PARTITION BY window ORDER BY n DESC) AS rn FROM (SELECT window(date_time, '10 seconds') AS window, auction, count(*) AS n FROM bid GROUP BY window(date_time, '10 seconds'), auction)) WHERE rn <= 2
