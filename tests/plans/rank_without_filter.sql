-- a rank without the filter on it
-- fail: RANK_FILTER
SELECT *, ROW_NUMBER() OVER (PARTITION BY window(date_time, '10 seconds') ORDER BY date_time DESC) AS rn FROM bid
