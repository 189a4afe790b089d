# a join of a join's rows by its own right side's time
# fail: JOIN_CONDITION
b = raw.selectExpr("ts AS b_ts", "k AS b_k").withWatermark("b_ts", "5 seconds")
c = raw.selectExpr("ts AS c_ts", "k AS c_k").withWatermark("c_ts", "5 seconds")
ab = s.join(b, F.expr("k = b_k AND b_ts BETWEEN ts AND ts + interval 5 seconds"))
df = ab.join(c, F.expr("k = c_k AND c_ts BETWEEN b_ts AND b_ts + interval 10 seconds"))
