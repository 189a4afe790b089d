-- a rank ordered by an expression
-- fail: RANK_ORDER
SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window(date_time, '10 seconds') ORDER BY price * 2) AS rn FROM bid) WHERE rn <= 2
