# a session window in a join's keys
# fail: TIME_FILTER
a = s.select("k", F.session_window("ts", "5 seconds").alias("window"))
b = raw.selectExpr("ts AS ts2", "k AS k2").withWatermark("ts2", "5 seconds").select("k2", F.window("ts2", "10 seconds").alias("w2"))
df = a.join(b, F.expr("k = k2 AND window = w2"))
