# a window over an interval join's rows
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10 (left)
#       of rows  where (k IS NOT NULL) (Spark's optimizer filters them below the watermark)
#     watermark  ts2, delay 0:00:05 (right)
#       of rows  where (k IS NOT NULL) (Spark's optimizer filters them below the watermark)
#     join       inner on [['k', 'k2']], ts2 between ts + 0:00:00 and ts + 0:00:05
#     aggregate  window(ts, 0:00:10) by []: n = count(*), mx = max(p2)
#     output     window, n, mx
#   Spark runs: the source, Filter over parquet FileSource[<in>/s] and Project over parquet FileSource[<in>/raw] (its input read by gpuwm's tasks)
b = raw.selectExpr("ts AS ts2", "k AS k2", "price AS p2").withWatermark("ts2", "5 seconds")
df = (s.join(b, F.expr("k = k2 AND ts2 BETWEEN ts AND ts + interval 5 seconds"))
      .groupBy(F.window("ts", "10 seconds")).agg(F.count("*").alias("n"), F.max("p2").alias("mx")))
