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
#     watermark  ts - 0:00:10 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0:00:05)
#     watermark  ts2 - 0:00:05 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0:00:05)
#   watermark    the minimum over the inputs'
#   stage 0      join {"left": "left", "right": "right", "on": [["k", "k2"]], "left_time": "ts", "right_time": "ts2", "size": "datetime.timedelta(seconds=5)", "slide": "datetime.timedelta(seconds=5)", "how": "inner"}  [segment 0: 1 task(s), keys ['k=k2']]
#   sink steps   [[["k", {"col": "k"}], ["w1", {"struct": [["start", {"col": "window_start"}], ["end", {"col": "window_end"}]]}], ["k2", {"col": "k2"}], ["w2", {"struct": [["start", {"col": "window_start"}], ["end", {"col": "window_end"}]]}]]]
a = s.select("k", F.window("ts", "5 seconds").alias("w1"))
b = raw.selectExpr("ts AS ts2", "k AS k2").withWatermark("ts2", "5 seconds").select("k2", F.window("ts2", "5 seconds").alias("w2"))
df = a.join(b, F.expr("k = k2 AND w1 = w2"))
