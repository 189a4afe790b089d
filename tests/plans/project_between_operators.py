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
#   watermark    ts - 0:00:10 (profile spark: emit on-batch, combine max, lag 1, end of input watermark; split None, idle_timeout None, allowed_lateness 0:00:05)
#   stage 0      window {"window": "Tumble('ts', datetime.timedelta(seconds=5))", "by": ["k"], "aggs": [["__gpuwm_agg0", "*", "count"]], "emit": "on-window-close", "window_time": true}  [segment 0: 1 task(s), keys ['k']]
#   stage 1      project {"steps": "[{\"where\": {\"cmp\": [\">\", {\"col\": \"__gpuwm_agg0\"}, {\"cast\": [{\"lit\": [1, \"int\"]}, \"bigint\"]}]}}]"}  [segment 0: 1 task(s), keys []]
#   stage 2      project {"steps": "[[[\"__gpuwm_c2_0\", {\"arith\": [\"*\", {\"col\": \"__gpuwm_agg0\"}, {\"cast\": [{\"lit\": [2, \"int\"]}, \"bigint\"]}, true]}]]]"}  [segment 0: 1 task(s), keys []]
#   stage 3      window {"window": "Tumble('window_time', datetime.timedelta(seconds=10))", "by": [], "aggs": [["__gpuwm_agg0_s3", "__gpuwm_c2_0", "max"]], "emit": "on-window-close", "window_time": false}  [segment 0: 1 task(s), keys []]
#   sink steps   [[["window", {"struct": [["start", {"col": "window_start"}], ["end", {"col": "window_end"}]]}], ["m", {"col": "__gpuwm_agg0_s3"}]]]
w = s.groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"))
df = (w.filter("n > 1").withColumn("n2", F.col("n") * 2)
      .groupBy(F.window(F.window_time("window"), "10 seconds")).agg(F.max("n2").alias("m")))
