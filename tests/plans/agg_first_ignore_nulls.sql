-- first ignoring nulls
-- fail: AGG_POSITIONAL
SELECT window(date_time, '10 seconds') AS window, auction, first(price, true) AS f FROM bid GROUP BY window(date_time, '10 seconds'), auction
