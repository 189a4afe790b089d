-- another window function (lag)
-- fail: RANK_FUNCTION
SELECT * FROM (SELECT *, lag(price) OVER (PARTITION BY window(date_time, '10 seconds') ORDER BY date_time DESC) AS p FROM bid) WHERE p > 1
