-- a HAVING on a grouping key, which Spark's optimizer moves below the watermark
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04
--       of rows  where (bid.auction IS NOT NULL) AND (bid.auction > 1000L) (Spark's optimizer filters them below the watermark)
--     aggregate  window(date_time, 0:00:10) by ['auction']: n = count(*)
--     filter     (bid.auction > CAST(1000 AS BIGINT))
--     output     window, auction, n
--   Spark runs: the source, Filter over parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT window(date_time, '10 seconds') AS window, auction, count(*) AS n FROM bid GROUP BY window(date_time, '10 seconds'), auction HAVING auction > 1000
