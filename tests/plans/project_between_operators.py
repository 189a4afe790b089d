# a filter and a computed column between two windows
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     aggregate  window(ts, 0:00:05) by ['k']: n = count(*)
#     filter     (n > CAST(1 AS BIGINT))
#     compute    n2 = (n * CAST(2 AS BIGINT))
#     aggregate  window(window_time(window), 0:00:10) by []: m = max(n2)
#     output     window, m
#   Spark runs: the source, parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
w = s.groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"))
df = (w.filter("n > 1").withColumn("n2", F.col("n") * 2)
      .groupBy(F.window(F.window_time("window"), "10 seconds")).agg(F.max("n2").alias("m")))
