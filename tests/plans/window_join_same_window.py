# two streams joined in the same window
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10 (left)
#       of rows  where (k IS NOT NULL) (Spark's optimizer filters them below the watermark)
#     watermark  ts2, delay 0:00:05 (right)
#       of rows  where (k IS NOT NULL) (Spark's optimizer filters them below the watermark)
#     join       inner on [['k', 'k2']] in the same window(ts, 0:00:05)
#     output     k, w1, k2, w2
#   Spark runs: the source, Filter over parquet FileSource[<in>/s] and Project over parquet FileSource[<in>/raw] (its input read by gpuwm's tasks)
a = s.select("k", F.window("ts", "5 seconds").alias("w1"))
b = raw.selectExpr("ts AS ts2", "k AS k2").withWatermark("ts2", "5 seconds").select("k2", F.window("ts2", "5 seconds").alias("w2"))
df = a.join(b, F.expr("k = k2 AND w1 = w2"))
