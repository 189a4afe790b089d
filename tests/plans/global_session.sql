-- a session window without keys: Spark refuses it too
-- fail: GLOBAL_SESSION
SELECT session_window(date_time, '5 seconds') AS s, count(*) AS n FROM bid GROUP BY session_window(date_time, '5 seconds')
