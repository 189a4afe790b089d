-- Nexmark q19 with a window: the top 3 bids of each auction per window
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04
--     top-n      row_number() <= 3 per window(date_time, 0:00:10), ['auction'] ORDER BY bid.price DESC NULLS LAST: emitted when the window closes
--     output     auction, bidder, price, date_time, rank_number
--   Spark runs: the source, parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window(date_time, '10 seconds'), auction ORDER BY price DESC) AS rank_number FROM bid) WHERE rank_number <= 3
