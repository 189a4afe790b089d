-- a HAVING gpuwm does not evaluate
-- fail: EXPRESSION
SELECT window(date_time, '10 seconds') AS window, auction, count(*) AS n FROM bid GROUP BY window(date_time, '10 seconds'), auction HAVING abs(count(*)) % 2 = 0
