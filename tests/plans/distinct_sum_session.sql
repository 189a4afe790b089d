-- sum(DISTINCT x) over session windows
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04
--     aggregate  session_window(date_time, 5 seconds) by ['bidder']: s = sum(DISTINCT price)
--     output     bidder, s
--   Spark runs: the source, parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT bidder, sum(DISTINCT price) AS s FROM bid GROUP BY session_window(date_time, '5 seconds'), bidder
