-- a hop whose slide does not divide its size
-- fail: WINDOW_SLIDE
SELECT window(date_time, '10 seconds', '3 seconds') AS w, count(*) AS n FROM bid GROUP BY window(date_time, '10 seconds', '3 seconds')
