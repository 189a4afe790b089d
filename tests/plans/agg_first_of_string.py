# first of a string column: gpuwm's accumulators hold numbers and times
# fail: AGG_POSITIONAL
df = s.groupBy(F.window("ts", "5 seconds"), "k").agg(F.first(F.col("price").cast("string")))
