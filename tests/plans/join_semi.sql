-- a left semi join
-- fail: JOIN_TYPE
SELECT A.id FROM auction A LEFT SEMI JOIN bid B ON A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL 10 SECONDS
