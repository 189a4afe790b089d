# a join side with a column computed by rand() after withWatermark
# fail: NOT_DETERMINISTIC
b = raw.selectExpr("ts AS ts2", "k AS k2").withWatermark("ts2", "5 seconds").withColumn("r", F.rand(3))
df = s.join(b, F.expr("k = k2 AND ts2 BETWEEN ts AND ts + interval 5 seconds"))
