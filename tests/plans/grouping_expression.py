# a grouping expression
# fail: GROUPING_EXPRESSION
df = s.groupBy(F.window("ts", "5 seconds"), (F.col("k") + 1).alias("k1")).count()
