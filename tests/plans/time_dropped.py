# a select that computes a column and drops the event time before a dedup
# fail: TIME_DROPPED
df = s.select("k", (F.col("price") * 2).alias("p2")).dropDuplicates(["k"])
