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
#     watermark  ts - 0:00:10 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0)
#     watermark  ts2 - 0:00:05 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0)
#   watermark    the minimum over the inputs'
#   stage 0      join {"left": "left", "right": "right", "on": [["k", "k2"]], "left_time": "ts", "right_time": "ts2", "lower": "datetime.timedelta(0)", "upper": "datetime.timedelta(seconds=5)", "how": "inner"}  [segment 0: 1 task(s), keys ['k=k2']]
#   stage 1      window {"window": "Tumble('ts', datetime.timedelta(seconds=10))", "by": [], "aggs": [["__gpuwm_agg0_s1", "*", "count"], ["__gpuwm_agg1_s1", "p2", "max"]], "emit": "on-window-close", "window_time": false}  [segment 0: 1 task(s), keys []]
#   sink steps   [[["window", {"struct": [["start", {"col": "window_start"}], ["end", {"col": "window_end"}]]}], ["n", {"col": "__gpuwm_agg0_s1"}], ["mx", {"col": "__gpuwm_agg1_s1"}]]]
b = raw.selectExpr("ts AS ts2", "k AS k2", "price AS p2").withWatermark("ts2", "5 seconds")
df = (s.join(b, F.expr("k = k2 AND ts2 BETWEEN ts AND ts + interval 5 seconds"))
      .groupBy(F.window("ts", "10 seconds")).agg(F.count("*").alias("n"), F.max("p2").alias("mx")))
