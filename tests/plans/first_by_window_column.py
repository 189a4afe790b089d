# first over the windows of an aggregation below
# fail: AGG_POSITIONAL
w = s.groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"))
df = w.groupBy("window").agg(F.first("n").alias("f"))
