-- a DISTINCT count of two columns
-- fail: AGG_DISTINCT
SELECT window(date_time, '10 seconds') AS window, count(DISTINCT auction, bidder) AS n FROM bid GROUP BY window(date_time, '10 seconds')
