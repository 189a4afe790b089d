-- a session per bidder with a 5 second gap
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04
--     aggregate  session_window(date_time, 5 seconds) by ['bidder']: bids = count(*)
--     output     session, bidder, bids
--   Spark runs: the source, parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT session_window(date_time, '5 seconds') AS session, bidder, count(*) AS bids FROM bid GROUP BY session_window(date_time, '5 seconds'), bidder
