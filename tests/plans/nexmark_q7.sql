-- Nexmark q7: the highest bids of each window, joined back to the bids
-- expect:
--   gpuwm runs (profile spark, vnodes 1):
--     watermark  date_time, delay 0:00:04 (in0)
--     aggregate  window(date_time, 0:00:10) by []: maxprice = max(price)
--     join       inner on [['price', '__gpuwm_agg0']], no time bound: every row kept in state (as Spark keeps it), where date_time >= __gpuwm_c1_0 and date_time < __gpuwm_c1_1
--     graph      right0 <- in0; right1 <- right0; join <- in0, right1
--     output     auction, price, bidder, date_time
--   Spark runs: the source, parquet FileSource[<in>/bid] (its input read by gpuwm's tasks)
SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN (SELECT max(price) AS maxprice, window.start AS wstart, window.end AS wend FROM bid GROUP BY window(date_time, '10 seconds')) B1 ON B.price = B1.maxprice AND B.date_time >= B1.wstart AND B.date_time < B1.wend
