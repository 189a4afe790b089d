# a join with a dedup of a window's rows
# fail: JOIN_SIDE
w = s.groupBy(F.window("ts", "10 seconds").alias("bw"), "k").agg(F.count("*").alias("n"))
a = raw.selectExpr("ts AS a_ts", "k AS a_k").withWatermark("a_ts", "5 seconds")
df = a.join(w.dropDuplicatesWithinWatermark(["k"]), F.expr("a_k = k"))
