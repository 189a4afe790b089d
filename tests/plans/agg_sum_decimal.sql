-- a sum of a decimal (Spark widens it)
-- fail: AGG_TYPE
SELECT window(date_time, '10 seconds') AS window, auction, sum(price * 0.908) AS euro FROM bid GROUP BY window(date_time, '10 seconds'), auction
