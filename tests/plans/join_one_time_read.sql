-- q3's join reading one side's event time, not the other's
-- fail: JOIN_LATENESS
SELECT P.name, A.id, A.date_time FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
