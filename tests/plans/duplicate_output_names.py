# two output columns of one name
# fail: DUPLICATE_NAMES
df = s.groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("k"))
