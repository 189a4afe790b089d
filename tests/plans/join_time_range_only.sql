-- a join on a time range alone
-- fail: JOIN_KEYS
SELECT A.id, B.price FROM auction A JOIN bid B ON B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL 10 SECONDS
