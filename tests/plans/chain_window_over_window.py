# a window over a window's rows by window_time(window)
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     aggregate  window(ts, 0:00:05) by ['k']: count = count(*)
#     aggregate  window(window_time(window), 0:00:10) by []: total = sum(count)
#     output     window, total
#   Spark runs: the source, parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
df = (s.groupBy(F.window("ts", "5 seconds"), "k").count()
      .groupBy(F.window(F.window_time("window"), "10 seconds")).agg(F.sum("count").alias("total")))
