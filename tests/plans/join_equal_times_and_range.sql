-- equal event times and a time range
-- fail: JOIN_BOUNDS
SELECT A.id, B.price FROM auction A JOIN bid B ON A.id = B.auction AND A.date_time = B.date_time AND B.date_time <= A.date_time + INTERVAL 1 SECOND
