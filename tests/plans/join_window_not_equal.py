# windows of two sizes in a join's sides
# fail: JOIN_WINDOW
a = s.select("k", F.window("ts", "5 seconds").alias("w1"))
b = raw.selectExpr("ts AS ts2", "k AS k2").withWatermark("ts2", "5 seconds").select("k2", F.window("ts2", "10 seconds").alias("w2"))
df = a.join(b, F.expr("k = k2 AND w1 = w2"))
