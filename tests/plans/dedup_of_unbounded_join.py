# a dedup over a join with no time bound
# fail: DEDUP_UNBOUNDED
b = raw.selectExpr("ts AS ts2", "k AS k2").withWatermark("ts2", "5 seconds")
df = s.join(b, F.expr("k = k2")).dropDuplicatesWithinWatermark(["k"])
