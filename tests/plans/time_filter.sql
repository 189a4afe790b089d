-- a filter on the event time between withWatermark and the window
-- fail: TIME_FILTER
SELECT window(date_time, '10 seconds') AS w, count(*) AS n FROM bid WHERE date_time > TIMESTAMP '2026-01-01 00:00:00' GROUP BY window(date_time, '10 seconds')
