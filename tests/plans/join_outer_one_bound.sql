-- a left outer join with one bound: Spark refuses it too
-- fail: JOIN_BOUNDS
SELECT A.id, B.price FROM auction A LEFT OUTER JOIN bid B ON A.id = B.auction AND B.date_time >= A.date_time
