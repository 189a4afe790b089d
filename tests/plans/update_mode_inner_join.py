# an inner join in update mode: from Spark 4.2 on, its rows are append mode's (SPARK-56384)
# spark: 4.2-
# mode: update
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10 (left)
#       of rows  where (k IS NOT NULL) (Spark's optimizer filters them below the watermark)
#     watermark  ts2, delay 0:00:05 (right)
#       of rows  where (k IS NOT NULL) (Spark's optimizer filters them below the watermark)
#     join       inner on [['k', 'k2']], ts2 between ts + 0:00:00 and ts + 0:00:05
#     output     ts, k, price, ts2, k2
#   Spark runs: the source, Filter over parquet FileSource[<in>/s] and Project over parquet FileSource[<in>/raw] (its input read by gpuwm's tasks)
#     watermark  ts - 0:00:10 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0)
#     watermark  ts2 - 0:00:05 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0)
#   watermark    the minimum over the inputs'
#   stage 0      join {"left": "left", "right": "right", "on": [["k", "k2"]], "left_time": "ts", "right_time": "ts2", "lower": "datetime.timedelta(0)", "upper": "datetime.timedelta(seconds=5)", "how": "inner"}  [segment 0: 1 task(s), keys ['k=k2']]
#   sink steps   [[["ts", {"col": "ts"}], ["k", {"col": "k"}], ["price", {"col": "price"}], ["ts2", {"col": "ts2"}], ["k2", {"col": "k2"}]]]
b = raw.selectExpr("ts AS ts2", "k AS k2").withWatermark("ts2", "5 seconds")
df = s.join(b, F.expr("k = k2 AND ts2 BETWEEN ts AND ts + interval 5 seconds"))
