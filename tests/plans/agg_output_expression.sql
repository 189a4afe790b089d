-- an output expression gpuwm does not evaluate
-- fail: EXPRESSION
SELECT window(date_time, '10 seconds') AS window, auction, abs(count(*)) AS n FROM bid GROUP BY window(date_time, '10 seconds'), auction
