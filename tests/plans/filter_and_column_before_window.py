# a filter and a new column between withWatermark and the window (Spark's optimizer moves the filter below the watermark)
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     aggregate  window(ts, 0:00:05) by ['k']: m = max(p2)
#     output     window, k, m
#   Spark runs: the source, Project over parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
df = (s.filter("price > 3").withColumn("p2", F.col("price") * 2)
      .groupBy(F.window("ts", "5 seconds"), "k").agg(F.max("p2").alias("m")))
