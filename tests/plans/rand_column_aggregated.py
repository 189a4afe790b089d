# a column computed by rand() between withWatermark and the window
# fail: NOT_DETERMINISTIC
df = s.withColumn("r", F.rand(7)).groupBy(F.window("ts", "5 seconds"), "k").agg(F.max("r"))
