# an aggregate of an expression of a column renamed after withWatermark
# fail: AGG_ARGUMENT
df = s.withColumnRenamed("price", "p").groupBy(F.window("ts", "5 seconds"), "k").agg(F.sum(F.col("p") * 2).alias("s"))
