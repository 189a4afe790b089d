-- a window with a start offset
-- fail: WINDOW_OFFSET
SELECT window(date_time, '10 seconds', '10 seconds', '2 seconds') AS w, count(*) AS n FROM bid GROUP BY window(date_time, '10 seconds', '10 seconds', '2 seconds')
