# a filter and a new column between withWatermark and the window (Spark's optimizer moves the filter below the watermark)
# expect:
#   gpuwm runs (profile spark, vnodes 1):
#     watermark  ts, delay 0:00:10
#     aggregate  window(ts, 0:00:05) by ['k']: m = max(p2)
#     output     window, k, m
#   Spark runs: the source, Project over parquet FileSource[<in>/s] (its input read by gpuwm's tasks)
#   watermark    ts - 0:00:10 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0:00:05)
#   stage 0      window {"window": "Tumble('ts', datetime.timedelta(seconds=5))", "by": ["k"], "aggs": [["__gpuwm_agg0", "p2", "max"]], "emit": "on-window-close", "window_time": false}  [segment 0: 1 task(s), keys ['k']]
#   sink steps   [[["window", {"struct": [["start", {"col": "window_start"}], ["end", {"col": "window_end"}]]}], ["k", {"col": "k"}], ["m", {"col": "__gpuwm_agg0"}]]]
df = (s.filter("price > 3").withColumn("p2", F.col("price") * 2)
      .groupBy(F.window("ts", "5 seconds"), "k").agg(F.max("p2").alias("m")))
