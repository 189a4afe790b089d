-- a rank partitioned by an expression
-- fail: RANK_PARTITION
SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window(date_time, '10 seconds'), auction % 2 ORDER BY price) AS rn FROM bid) WHERE rn <= 2
