-- Nexmark q15: bidding statistics per day with DISTINCT counts
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04
--     aggregate  window(date_time, 1 day, 0:00:00) by []: total_bids = count(*), total_bidders = count(DISTINCT bidder), total_auctions = count(DISTINCT auction)
--     output     day, total_bids, total_bidders, total_auctions
--   Spark runs: the source, parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT date_format(window.start, 'yyyy-MM-dd') AS day, count(*) AS total_bids, count(DISTINCT bidder) AS total_bidders, count(DISTINCT auction) AS total_auctions FROM bid GROUP BY window(date_time, '1 day')
