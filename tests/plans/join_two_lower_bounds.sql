-- two lower bounds of the time between the sides
-- fail: JOIN_BOUNDS
SELECT A.id, B.price FROM auction A JOIN bid B ON A.id = B.auction AND B.date_time >= A.date_time AND B.date_time > A.date_time - INTERVAL 1 SECOND AND B.date_time <= A.date_time + INTERVAL 5 SECONDS
