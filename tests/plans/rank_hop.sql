-- a rank partitioned by a hopping window
-- fail: RANK_WINDOW
SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window(date_time, '10 seconds', '5 seconds') ORDER BY date_time DESC) AS rn FROM bid) WHERE rn <= 2
