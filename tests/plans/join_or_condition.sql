-- a join condition with OR
-- fail: JOIN_CONDITION
SELECT A.id, B.price FROM auction A JOIN bid B ON (A.id = B.auction OR B.price > 5) AND B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL 10 SECONDS
