-- a filter that keeps no rank
-- fail: RANK_FILTER
SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window(date_time, '10 seconds') ORDER BY price) AS rn FROM bid) WHERE rn < 1
