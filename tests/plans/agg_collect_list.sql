-- an aggregate gpuwm does not have
-- fail: AGG_FUNCTION
SELECT window(date_time, '10 seconds') AS window, auction, collect_list(price) AS ps FROM bid GROUP BY window(date_time, '10 seconds'), auction
