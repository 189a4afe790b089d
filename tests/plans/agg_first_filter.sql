-- first with FILTER
-- fail: AGG_FILTER
SELECT window(date_time, '10 seconds') AS window, auction, first(price) FILTER (WHERE price > 5) AS f FROM bid GROUP BY window(date_time, '10 seconds'), auction
